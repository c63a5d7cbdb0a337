// PPF model description: the parallel hash array of every ordered pair of model points, keyed by
// the pair's discretized feature. The contract shared by the CPU and CUDA kernels.
//
// ppf_model(points, normals, lengths?, diameter?, tau_d, angle_bins, distance_bins,
//           max_pairs_per_key)
//     -> (unit_normals, diameters, distance_step, key_offsets, unique_keys, starts, counts,
//         num_unique, pair_ref, pair_partner, pair_alpha)
//   points, normals (B, N, 3) floating: B models (computed in float32); N <= 46340, so that the
//                   N (N - 1) ordered pairs of a model fit int32 positions.
//   lengths         (B,) int64 or None: model b is rows [0, lengths[b]).
//   diameter        (B,) floating model diameters, or None: the diagonal of each model's
//                   axis-aligned bounding box over its rows with finite coordinates (0 for none),
//                   computed here in float32 as sqrt((ex ex + ey ey) + ez ez), so that eager,
//                   compiled and scripted callers get the same bits.
//   tau_d           in (0, 1]: distance_step = float32(tau_d) * diameter (a model whose step is
//                   not finite and > 0 has no pairs).
//   angle_bins, distance_bins: the binning of csrc/ppf/ppf_math.h; K = distance_bins *
//                   ceil(angle_bins / 2)^3 keys, K <= 2^24.
//   max_pairs_per_key >= 0: a key whose c pairs exceed it keeps that many, evenly spaced in its
//                   (i, j) order: positions floor(t c / max_pairs_per_key), t = 0, 1, ... (the
//                   first pair always among them); 0 keeps every pair. Keys shared by very many
//                   pairs (the planar pairs of a flat face, the repeated pairs of a symmetric
//                   shape) say little about which model point matched, yet every scene pair that
//                   looks them up votes once per pair: the cap bounds the votes a lookup casts
//                   (kept_pairs below).
// Outputs (P = N (N - 1) pair capacity, U = min(P, K) key capacity, per model):
//   diameters, distance_step (B,) float32: the diameters used and the distance bin widths.
//   unit_normals (B, N, 3) float32: normals / |normals|; NaN rows for points that take no part
//                (past lengths[b], a non-finite coordinate or normal, a zero normal).
//   key_offsets  (B, K + 1) int64: the pairs with key k are rows [key_offsets[b, k],
//                key_offsets[b, k + 1]) of the pair list (a direct-addressed CSR table: lookup
//                is two loads, no search); key_offsets[b, K] is model b's number of pairs kept.
//   unique_keys  (B, U) int64: the distinct keys of model b ascending, -1 past num_unique[b];
//   starts, counts (B, U) int64: the first pair-list row and the number of pairs kept of each
//                distinct key (0 past num_unique[b]). Together: the hash array of hash_array.h.
//   num_unique   (B,) int64.
//   pair_ref, pair_partner (B, P) int32: the pair list sorted by key, ties by (ref, partner)
//                ascending; each is a point index (-1 past the model's pairs). int32, not the API's
//                int64 indices: the vote loop reads pair_ref and pair_alpha for every vote, and
//                their bandwidth bounds it.
//   pair_alpha   (B, P) float32: alpha of (ref, partner) in ref's frame (ppf_math.h), NaN past the
//                model's pairs.
// Pairs: every ordered (i, j), i != j, of points that take part, whose points do not coincide
// and whose distance bin is < distance_bins, less those a key's cap leaves out. Identical on CPU
// and CUDA, bit for bit.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <tuple>

#include "common/clouds.h"
#include "ppf/ppf_math.h"

namespace pointops {
namespace ppf {

using ModelResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                               at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Checks shared by both backends; returns the binning without distance_step.
Binning check_model_args(const at::Tensor& points, const at::Tensor& normals, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& diameter, double tau_d, int64_t angle_bins,
                         int64_t distance_bins, int64_t max_pairs_per_key);

// A key with `count` pairs keeps kept_pairs(count, cap) of them: position t of its kept pairs is
// position kept_position(t, count, cap) of all of them (cap 0: all).
POINTOPS_HOST_DEVICE inline int64_t kept_pairs(int64_t count, int64_t cap) {
  return cap > 0 && count > cap ? cap : count;
}
POINTOPS_HOST_DEVICE inline int64_t kept_position(int64_t t, int64_t count, int64_t cap) {
  return cap > 0 && count > cap ? t * count / cap : t;
}

// Running bounding box of finite points; the diagonal as the contract says.
struct BoundingBox {
  float lo[3], hi[3];
  bool any;

  POINTOPS_HOST_DEVICE void reset() {
    for (int c = 0; c < 3; ++c) {
      lo[c] = 0.0f;
      hi[c] = 0.0f;
    }
    any = false;
  }
  POINTOPS_HOST_DEVICE void add(const float* p) {
    if (!finite(p[0]) || !finite(p[1]) || !finite(p[2])) return;
    for (int c = 0; c < 3; ++c) {
      lo[c] = !any || p[c] < lo[c] ? p[c] : lo[c];
      hi[c] = !any || p[c] > hi[c] ? p[c] : hi[c];
    }
    any = true;
  }
  POINTOPS_HOST_DEVICE void merge(const BoundingBox& o) {
    if (!o.any) return;
    for (int c = 0; c < 3; ++c) {
      lo[c] = !any || o.lo[c] < lo[c] ? o.lo[c] : lo[c];
      hi[c] = !any || o.hi[c] > hi[c] ? o.hi[c] : hi[c];
    }
    any = true;
  }
  POINTOPS_HOST_DEVICE float diagonal() const {
    if (!any) return 0.0f;
    const Vec3 e = {subtract(hi[0], lo[0]), subtract(hi[1], lo[1]), subtract(hi[2], lo[2])};
    return square_root(dot3(e, e));
  }
};

// The outputs at capacity, filled with their padding values, by name; result() is the op's tuple.
struct ModelOutputs {
  at::Tensor unit_normals, diameters, steps, key_offsets, unique_keys, starts, counts, num_unique, pair_ref,
      pair_partner, pair_alpha;

  ModelResult result() const {
    return {unit_normals, diameters,  steps,    key_offsets,  unique_keys, starts,
            counts,       num_unique, pair_ref, pair_partner, pair_alpha};
  }
};

ModelOutputs empty_model_outputs(const at::Tensor& points, const Binning& binning);

// The inputs as both backends' kernels read them: contiguous float32 points, normals and given
// diameters (undefined when none), and the lengths.
struct ModelInputs {
  at::Tensor points, normals, diameter;
  CloudLengths lengths;
};

ModelInputs model_inputs(const at::Tensor& points, const at::Tensor& normals, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& diameter);

// The key of model pair (i, j) (both < length), or -1 when it is not a pair. `normals` are the
// unit normals (NaN rows: the point takes no part).
POINTOPS_HOST_DEVICE inline int64_t model_pair_key(const float* points, const float* normals, int64_t i, int64_t j,
                                                   const Binning& binning) {
  if (i == j) return -1;
  const float* ni = normals + i * 3;
  const float* nj = normals + j * 3;
  if (!finite(ni[0]) || !finite(nj[0])) return -1;
  const Vec3 p1 = {points[i * 3], points[i * 3 + 1], points[i * 3 + 2]};
  const Vec3 p2 = {points[j * 3], points[j * 3 + 1], points[j * 3 + 2]};
  const Vec3 d = sub3(p2, p1);
  const Frame f1 = make_frame(p1, {ni[0], ni[1], ni[2]});
  const PairFeature f = pair_feature(f1, {nj[0], nj[1], nj[2]}, d);
  if (!(f.distance > 0.0f)) return -1;
  const FeatureBins bins = feature_bins(f, binning);
  return bins.valid ? exact_key(bins, binning.feature_bins) : -1;
}

POINTOPS_HOST_DEVICE inline float model_pair_alpha(const float* points, const float* normals, int64_t i, int64_t j) {
  const float* ni = normals + i * 3;
  const Vec3 p1 = {points[i * 3], points[i * 3 + 1], points[i * 3 + 2]};
  const Vec3 p2 = {points[j * 3], points[j * 3 + 1], points[j * 3 + 2]};
  return pair_alpha(make_frame(p1, {ni[0], ni[1], ni[2]}), sub3(p2, p1));
}

// The unit normal of row i (NaN when the point takes no part), as unit_normals holds it.
POINTOPS_HOST_DEVICE inline void model_unit_normal(const float* points, const float* normals, int64_t i, int64_t length,
                                                   float* out) {
  Vec3 p, n;
  if (load_oriented(points, normals, length, i, &p, &n)) {
    out[0] = n.x;
    out[1] = n.y;
    out[2] = n.z;
  } else {
    out[0] = out[1] = out[2] = quiet_nan();
  }
}

}  // namespace ppf
}  // namespace pointops
