// PPF voting: the contract shared by the CPU and CUDA kernels and both backends.
//
// ppf_vote(scene_points, scene_normals, scene_lengths?, model_points, model_normals,
//          key_offsets, pair_ref, pair_alpha, distance_step, diameter, angle_bins,
//          distance_bins, stride, k, spread, backend, chunk_votes)
//     -> (votes, model_index, alpha_bin, quaternions, translations)
//   scene_points, scene_normals (S, N, 3) floating: S scenes (computed in float32; normals need
//                not be unit); scene_lengths (S,) int64 or None.
//   model_points (M, Nm, 3) float32 and model_normals (M, Nm, 3) float32 unit normals (NaN rows
//                take no part), key_offsets (M, K + 1) int64, pair_ref (M, P) int32 and
//                pair_alpha (M, P) float32: M model descriptions as ppf_model returns them.
//   distance_step (M,) floating: model m's distance bin width (as in its description);
//   diameter     (M,) floating: scene pairs farther apart than model m's diameter are not looked
//                up (Hinterstoisser's pair restriction).
//   angle_bins, distance_bins: the models' binning (ppf_math.h).
//   stride       >= 1: scene point r * stride is reference r, R = ceil(N / stride).
//   k            >= 0: peaks kept per reference.
//   spread       also look each scene pair up under the neighbouring bins, in each feature
//                dimension the one on the side the value is nearer to: up to 16 keys per scene
//                pair (ppf_math.h spread_key), against discretization noise.
//   backend      "dense": a (model point x alpha bin) accumulator per reference (CUDA: in shared
//                memory, model points in slices); "sort": every vote a 64-bit key (reference,
//                model point, alpha bin), counted by the parallel hash array (radix sort +
//                run-length encoding), in chunks of about chunk_votes votes.
// Votes: every reference r (a valid scene point: finite, nonzero normal) is paired with every
// other valid scene point j of its scene with 0 < |d|^2 <= diameter^2 (squared distances
// (dx dx + dy dy) + dz dz, float32) whose distance bin is < distance_bins; the pair's key(s)
// select model pairs (i, j'), and each casts one vote for cell (i, alpha_bin(alpha_r - alpha_i)).
// Peaks: the k cells with the most votes, ties to the lowest cell i * angle_bins + bin; cells
// with no vote are never peaks. Outputs (S, M, R, k), peak q of reference r:
//   votes        int64 (0 where there is no peak), model_index int64 (the model point i, -1),
//   alpha_bin    int64 (-1), quaternions (.., 4) float32 (w >= 0) and translations (.., 3)
//                float32 of the pose mapping model coordinates into the scene (ppf_math.h
//                vote_pose, at the alpha bin's centre); NaN where there is no peak.
// Both backends, on CPU and CUDA, return identical outputs, bit for bit.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "common/clouds.h"
#include "ppf/ppf_args.h"
#include "ppf/ppf_math.h"

namespace pointops {
namespace ppf {

using VoteResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The sizes and parameters every vote kernel needs.
struct VoteShape {
  int64_t scenes, n, models, nm, pairs, refs, stride, k;
  int64_t keys;   // K
  int64_t cells;  // nm * angle_bins: cells of one reference's accumulator
  bool spread;
  Binning binning;  // distance_step per model, filled in by the kernels
};

// Checks shared by both backends and devices.
VoteShape check_vote_args(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                          const std::optional<at::Tensor>& scene_lengths, const at::Tensor& model_points,
                          const at::Tensor& model_normals, const at::Tensor& key_offsets, const at::Tensor& pair_ref,
                          const at::Tensor& pair_alpha, const at::Tensor& distance_step, const at::Tensor& diameter,
                          int64_t angle_bins, int64_t distance_bins, int64_t stride, int64_t k, bool spread,
                          const std::string& backend, int64_t chunk_votes);

// The outputs at their "no peak" values.
VoteResult empty_vote_outputs(const at::Tensor& scene_points, const VoteShape& shape);

// The inputs as both backends' kernels read them (after check_vote_args): contiguous, the scenes,
// distance steps and diameters in float32, and the scene lengths.
struct VoteInputs {
  at::Tensor scene_points, scene_normals, model_points, model_normals, key_offsets, pair_ref, pair_alpha, distance_step,
      diameter;
  CloudLengths scene_lengths;
};

inline VoteInputs vote_inputs(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                              const std::optional<at::Tensor>& scene_lengths, const at::Tensor& model_points,
                              const at::Tensor& model_normals, const at::Tensor& key_offsets,
                              const at::Tensor& pair_ref, const at::Tensor& pair_alpha, const at::Tensor& distance_step,
                              const at::Tensor& diameter) {
  return {as_float(scene_points),           as_float(scene_normals),  model_points.contiguous(),
          model_normals.contiguous(),       key_offsets.contiguous(), pair_ref.contiguous(),
          pair_alpha.contiguous(),          as_float(distance_step),  as_float(diameter),
          contiguous_lengths(scene_lengths)};
}

// One scene pair, looked up: its bins (for the keys) and the scene alpha.
struct ScenePair {
  FeatureBins bins;
  float alpha;
};

// The scene reference: its frame; false when the point takes no part.
POINTOPS_HOST_DEVICE inline bool load_reference(const float* points, const float* normals, int64_t length,
                                                int64_t index, Frame* frame) {
  Vec3 p, n;
  if (!load_oriented(points, normals, length, index, &p, &n)) return false;
  *frame = make_frame(p, n);
  return true;
}

// The pair of reference frame f with the oriented scene point (p, unit normal n): false when
// the point coincides with the reference, lies farther than the diameter or at a distance bin past
// the last.
POINTOPS_HOST_DEVICE inline bool oriented_scene_pair(const Frame& f, const Vec3& p, const Vec3& n, float max_square,
                                                     const Binning& binning, ScenePair* out) {
  const Vec3 d = sub3(p, f.p);
  const float square = dot3(d, d);
  if (!(square > 0.0f) || !(square <= max_square)) return false;
  const PairFeature feature = pair_feature(f, n, d);
  out->bins = feature_bins(feature, binning);
  if (!out->bins.valid) return false;
  out->alpha = pair_alpha(f, d);
  return true;
}

// Pair reference `ref` (frame f) with scene point j: false when j takes no part, is the
// reference, lies farther than the diameter or at a distance bin past the last.
POINTOPS_HOST_DEVICE inline bool scene_pair(const float* points, const float* normals, int64_t length, int64_t ref,
                                            const Frame& f, int64_t j, float max_square, const Binning& binning,
                                            ScenePair* out) {
  if (j == ref) return false;
  Vec3 p, n;
  if (!load_oriented(points, normals, length, j, &p, &n)) return false;
  return oriented_scene_pair(f, p, n, max_square, binning, out);
}

// Lookup `mask` of a scene pair: a key (mask 0 the exact bin; with spread, masks 1..15 the
// neighbouring bins), or -1.
POINTOPS_HOST_DEVICE inline int64_t lookup_key(const ScenePair& pair, int mask, int32_t feature_bins) {
  return mask == 0 ? exact_key(pair.bins, feature_bins) : spread_key(pair.bins, mask, feature_bins);
}

// Peaks travel as one 64-bit word: votes in the high half, the complement of the cell in the low
// half, so a larger word is a better peak (more votes, then the lower cell) and 0 is "none".
POINTOPS_HOST_DEVICE inline uint64_t peak_word(uint32_t votes, uint32_t cell) {
  return (static_cast<uint64_t>(votes) << 32) | static_cast<uint64_t>(0xFFFFFFFFu - cell);
}
POINTOPS_HOST_DEVICE inline uint32_t peak_votes(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
POINTOPS_HOST_DEVICE inline uint32_t peak_cell(uint64_t word) {
  return 0xFFFFFFFFu - static_cast<uint32_t>(word & 0xFFFFFFFFu);
}

// Writes peak q of a reference: its votes, model point, alpha bin and pose, or the "no peak"
// values when word is 0. `model_points` / `model_normals` are model m's rows.
POINTOPS_HOST_DEVICE inline void write_peak(uint64_t word, const Frame& scene, const float* model_points,
                                            const float* model_normals, int32_t angle_bins, const AlphaTable& table,
                                            int64_t* votes, int64_t* model_index, int64_t* alpha, float* quaternion,
                                            float* translation) {
  if (word == 0) {
    *votes = 0;
    *model_index = -1;
    *alpha = -1;
    for (int c = 0; c < 4; ++c) quaternion[c] = quiet_nan();
    for (int c = 0; c < 3; ++c) translation[c] = quiet_nan();
    return;
  }
  const uint32_t cell = peak_cell(word);
  const int64_t i = cell / angle_bins;
  const int32_t bin = static_cast<int32_t>(cell - i * angle_bins);
  *votes = peak_votes(word);
  *model_index = i;
  *alpha = bin;
  const float* p = model_points + i * 3;
  const float* n = model_normals + i * 3;
  const Frame model = make_frame({p[0], p[1], p[2]}, {n[0], n[1], n[2]});
  vote_pose(scene, model, table.cos[bin], table.sin[bin], quaternion, translation);
}

// Keeps the k largest words of a stream (k <= kMaxPeaks), best first; ties cannot happen (cells
// differ).
constexpr int kMaxPeaks = 64;

struct TopWords {
  uint64_t word[kMaxPeaks];
  int k;

  POINTOPS_HOST_DEVICE void reset(int k_) {
    k = k_;
    for (int q = 0; q < k; ++q) word[q] = 0;
  }
  POINTOPS_HOST_DEVICE void push(uint64_t w) {
    if (k == 0 || w <= word[k - 1]) return;
    int q = k - 1;
    while (q > 0 && word[q - 1] < w) {
      word[q] = word[q - 1];
      --q;
    }
    word[q] = w;
  }
};

}  // namespace ppf
}  // namespace pointops

namespace pointops {
namespace ppf {

// The cell a model pair row e votes for from a scene pair with alpha `scene_alpha`, or -1 when
// the row is malformed (a model point outside [0, nm) or a non-finite alpha: never in a model
// that ppf_model built, checked so that a bad description cannot index out of bounds).
POINTOPS_HOST_DEVICE inline int64_t vote_cell(int32_t model_point, float model_alpha, float scene_alpha, int64_t nm,
                                              const Binning& binning) {
  if (model_point < 0 || model_point >= nm || !finite(model_alpha)) return -1;
  const int32_t bin = alpha_bin(scene_alpha, model_alpha, binning.alpha_scale, binning.angle_bins);
  if (bin < 0 || bin >= binning.angle_bins) return -1;
  return static_cast<int64_t>(model_point) * binning.angle_bins + bin;
}

// The pair-list rows of key `key` in a model's CSR table, clamped to [0, pairs].
POINTOPS_HOST_DEVICE inline void key_rows(const int64_t* key_offsets, int64_t key, int64_t pairs, int64_t* lo,
                                          int64_t* hi) {
  int64_t a = key_offsets[key];
  int64_t b = key_offsets[key + 1];
  a = a < 0 ? 0 : (a > pairs ? pairs : a);
  b = b < a ? a : (b > pairs ? pairs : b);
  *lo = a;
  *hi = b;
}

}  // namespace ppf
}  // namespace pointops
