// PPF voting on the CPU: the twin of vote_cuda.cu (contract in vote.h). One task per (scene,
// model, reference), in parallel; both backends enumerate the same votes through
// reference_votes() and keep the same peaks:
//   dense: an (nm x angle_bins) int32 accumulator per task, reused across the tasks of a thread;
//   sort:  the task's votes as cell keys, counted by the CPU parallel hash array (radix sort +
//          run-length encoding): memory grows with the votes the reference casts.
#include "ppf/vote.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/hash_array_cpu.h"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {

VoteShape check_vote_args(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                          const std::optional<at::Tensor>& scene_lengths,
                          const at::Tensor& model_points, const at::Tensor& model_normals,
                          const at::Tensor& key_offsets, const at::Tensor& pair_ref,
                          const at::Tensor& pair_alpha, const at::Tensor& distance_step,
                          const at::Tensor& diameter, int64_t angle_bins, int64_t distance_bins,
                          int64_t stride, int64_t k, bool spread, const std::string& backend,
                          int64_t chunk_votes) {
  check_oriented_clouds(scene_points, scene_normals, scene_lengths, "scene_points",
                        "scene_normals", "scene_lengths");
  check_dim(model_points, "model_points", 3, "(M, Nm, 3)");
  check_dtype(model_points, "model_points", at::kFloat);
  TORCH_CHECK(model_points.size(2) == 3, "model_points must have shape (M, Nm, 3), got shape ",
              model_points.sizes());
  check_same_device(model_points, "model_points", scene_points, "scene_points");
  check_dtype(model_normals, "model_normals", at::kFloat);
  check_same_device(model_normals, "model_normals", scene_points, "scene_points");
  TORCH_CHECK(model_normals.sizes() == model_points.sizes(),
              "model_normals must have the shape of model_points ", model_points.sizes(), ", got ",
              model_normals.sizes());
  const int64_t models = model_points.size(0);
  const Binning binning = make_binning(angle_bins, distance_bins);
  TORCH_CHECK(binning.key_count() <= kMaxKeys,
              "distance_bins * ceil(angle_bins / 2)^3 keys must be at most 2^24, got ",
              binning.key_count());
  check_dtype(key_offsets, "key_offsets", at::kLong);
  check_same_device(key_offsets, "key_offsets", scene_points, "scene_points");
  check_shape(key_offsets, "key_offsets", {models, binning.key_count() + 1});
  check_dtype(pair_ref, "pair_ref", at::kInt);
  check_same_device(pair_ref, "pair_ref", scene_points, "scene_points");
  check_dim(pair_ref, "pair_ref", 2, "(M, P)");
  TORCH_CHECK(pair_ref.size(0) == models, "pair_ref must have shape (M, P) with M = ", models,
              ", got shape ", pair_ref.sizes());
  check_dtype(pair_alpha, "pair_alpha", at::kFloat);
  check_same_device(pair_alpha, "pair_alpha", scene_points, "scene_points");
  check_shape(pair_alpha, "pair_alpha", pair_ref.sizes());
  check_cloud_values(distance_step, "distance_step", models, scene_points, "scene_points");
  check_cloud_values(diameter, "diameter", models, scene_points, "scene_points");
  TORCH_CHECK(stride >= 1, "stride must be >= 1, got ", stride);
  TORCH_CHECK(k >= 0 && k <= kMaxPeaks, "k (peaks per reference) must be in [0, ", kMaxPeaks,
              "], got ", k);
  TORCH_CHECK(backend == "dense" || backend == "sort",
              "backend must be \"dense\" or \"sort\", got \"", backend, "\"");
  TORCH_CHECK(chunk_votes >= 1, "chunk_votes must be >= 1, got ", chunk_votes);
  const int64_t nm = model_points.size(1);
  TORCH_CHECK(nm <= 46340, "model_points may have at most 46340 points per model, got ", nm);

  VoteShape shape;
  shape.scenes = scene_points.size(0);
  shape.n = scene_points.size(1);
  shape.models = models;
  shape.nm = nm;
  shape.pairs = pair_ref.size(1);
  shape.stride = stride;
  shape.refs = (shape.n + stride - 1) / stride;
  shape.k = k;
  shape.keys = binning.key_count();
  shape.cells = nm * angle_bins;
  shape.spread = spread;
  shape.binning = binning;
  // per peak: votes, model_index, alpha_bin (int64), a quaternion and a translation (float32)
  check_output_fits(scene_points.device(), "k = " + std::to_string(k) + " peaks of every " + std::to_string(stride) +
                        "-th scene point (stride)",
                    {shape.scenes, models, shape.refs, k}, 3 * 8 + 7 * 4);
  return shape;
}

VoteResult empty_vote_outputs(const at::Tensor& scene_points, const VoteShape& s) {
  const auto options = scene_points.options();
  const std::vector<int64_t> peaks = {s.scenes, s.models, s.refs, s.k};
  return {at::zeros(peaks, options.dtype(at::kLong)), at::full(peaks, -1, options.dtype(at::kLong)),
          at::full(peaks, -1, options.dtype(at::kLong)),
          at::full({s.scenes, s.models, s.refs, s.k, 4}, std::numeric_limits<float>::quiet_NaN(),
                   options.dtype(at::kFloat)),
          at::full({s.scenes, s.models, s.refs, s.k, 3}, std::numeric_limits<float>::quiet_NaN(),
                   options.dtype(at::kFloat))};
}

namespace {

// Every vote of reference `ref` (frame f) of a scene against one model, in the order scene
// point, lookup, pair row: vote(cell) per vote.
template <typename Vote>
void reference_votes(const float* points, const float* normals, int64_t length, int64_t ref,
                     const Frame& f, float max_square, const Binning& binning, bool spread,
                     int64_t nm, int64_t pairs, const int64_t* offsets, const int32_t* pair_ref,
                     const float* pair_alpha, Vote&& vote) {
  const int lookups = spread ? 16 : 1;
  for (int64_t j = 0; j < length; ++j) {
    ScenePair pair;
    if (!scene_pair(points, normals, length, ref, f, j, max_square, binning, &pair)) continue;
    for (int mask = 0; mask < lookups; ++mask) {
      const int64_t key = lookup_key(pair, mask, binning.feature_bins);
      if (key < 0) continue;
      int64_t lo, hi;
      key_rows(offsets, key, pairs, &lo, &hi);
      for (int64_t e = lo; e < hi; ++e) {
        const int64_t cell = vote_cell(pair_ref[e], pair_alpha[e], pair.alpha, nm, binning);
        if (cell >= 0) vote(cell);
      }
    }
  }
}

VoteResult ppf_vote_cpu(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                        const std::optional<at::Tensor>& scene_lengths,
                        const at::Tensor& model_points, const at::Tensor& model_normals,
                        const at::Tensor& key_offsets, const at::Tensor& pair_ref,
                        const at::Tensor& pair_alpha, const at::Tensor& distance_step,
                        const at::Tensor& diameter, int64_t angle_bins, int64_t distance_bins,
                        int64_t stride, int64_t k, bool spread, c10::string_view backend_view,
                        int64_t chunk_votes) {
  const std::string backend(backend_view);
  const VoteShape s = check_vote_args(scene_points, scene_normals, scene_lengths, model_points,
                                      model_normals, key_offsets, pair_ref, pair_alpha,
                                      distance_step, diameter, angle_bins, distance_bins, stride,
                                      k, spread, backend, chunk_votes);
  VoteResult out = empty_vote_outputs(scene_points, s);
  const int64_t tasks = s.scenes * s.models * s.refs;
  if (tasks == 0 || s.k == 0) return out;
  at::Tensor votes = std::get<0>(out);
  at::Tensor model_index = std::get<1>(out);
  at::Tensor alpha_bin = std::get<2>(out);
  at::Tensor quaternions = std::get<3>(out);
  at::Tensor translations = std::get<4>(out);

  const at::Tensor sp = as_float(scene_points);
  const at::Tensor sn = as_float(scene_normals);
  const at::Tensor mp = model_points.contiguous();
  const at::Tensor mn = model_normals.contiguous();
  const at::Tensor offsets = key_offsets.contiguous();
  const at::Tensor refs = pair_ref.contiguous();
  const at::Tensor alphas = pair_alpha.contiguous();
  const at::Tensor steps = as_float(distance_step);
  const at::Tensor diameters = as_float(diameter);
  const CloudLengths lengths_c = contiguous_lengths(scene_lengths);
  const AlphaTable table = make_alpha_table(angle_bins);
  const bool dense = backend == "dense";

  at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
    std::vector<int32_t> acc;
    std::vector<int64_t> cells;
    for (int64_t task = first; task < last; ++task) {
      const int64_t r = task % s.refs;
      const int64_t m = (task / s.refs) % s.models;
      const int64_t scene = task / (s.refs * s.models);
      const int64_t length = cloud_length(lengths_c.data, scene, s.n);
      const float* points = sp.data_ptr<float>() + scene * s.n * 3;
      const float* normals = sn.data_ptr<float>() + scene * s.n * 3;
      const int64_t ref = r * s.stride;
      Frame f{};
      TopWords top;
      top.reset(static_cast<int>(s.k));
      Binning binning = s.binning;
      binning.distance_step = steps.data_ptr<float>()[m];
      const float diam = diameters.data_ptr<float>()[m];
      const bool usable = binning.distance_step > 0.0f && finite(binning.distance_step) &&
                          finite(diam) && s.pairs > 0;
      if (usable && load_reference(points, normals, length, ref, &f)) {
        const float max_square = multiply(diam, diam);
        const int64_t* off = offsets.data_ptr<int64_t>() + m * (s.keys + 1);
        const int32_t* pr = refs.data_ptr<int32_t>() + m * s.pairs;
        const float* pa = alphas.data_ptr<float>() + m * s.pairs;
        if (dense) {
          acc.assign(static_cast<size_t>(s.cells), 0);
          reference_votes(points, normals, length, ref, f, max_square, binning, s.spread, s.nm,
                          s.pairs, off, pr, pa, [&](int64_t cell) { ++acc[cell]; });
          for (int64_t c = 0; c < s.cells; ++c) {
            if (acc[c] > 0) top.push(peak_word(static_cast<uint32_t>(acc[c]), static_cast<uint32_t>(c)));
          }
        } else {
          cells.clear();
          reference_votes(points, normals, length, ref, f, max_square, binning, s.spread, s.nm,
                          s.pairs, off, pr, pa, [&](int64_t cell) { cells.push_back(cell); });
          const HashArrayCpu h = build_hash_array_cpu(cells.data(), static_cast<int64_t>(cells.size()), s.cells);
          for (int64_t run = 0; run < h.num_unique(); ++run) {
            top.push(peak_word(static_cast<uint32_t>(h.counts[run]), static_cast<uint32_t>(h.unique_keys[run])));
          }
        }
      }
      const float* model_p = mp.data_ptr<float>() + m * s.nm * 3;
      const float* model_n = mn.data_ptr<float>() + m * s.nm * 3;
      for (int64_t q = 0; q < s.k; ++q) {
        const int64_t row = task * s.k + q;
        write_peak(top.word[q], f, model_p, model_n, s.binning.angle_bins, table,
                   votes.data_ptr<int64_t>() + row, model_index.data_ptr<int64_t>() + row,
                   alpha_bin.data_ptr<int64_t>() + row, quaternions.data_ptr<float>() + row * 4,
                   translations.data_ptr<float>() + row * 3);
      }
    }
  });
  return out;
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("ppf_vote", &ppf::ppf_vote_cpu); }

}  // namespace pointops
