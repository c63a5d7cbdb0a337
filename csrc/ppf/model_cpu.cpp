// PPF model description on the CPU: the twin of model_cuda.cu (contract in model.h). Models are
// built one after another, each from the CPU parallel hash array of its N^2 pair keys (key K,
// one past the last, marks a non-pair), in parallel over reference points where it pays.
#include "ppf/model.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/hash_array_cpu.h"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {

Binning check_model_args(const at::Tensor& points, const at::Tensor& normals, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& diameter, double tau_d, int64_t angle_bins,
                         int64_t distance_bins, int64_t max_pairs_per_key) {
  check_oriented_clouds(points, normals, lengths, "points", "normals", "lengths");
  TORCH_CHECK(points.size(1) <= 46340,
              "ppf_model: a model may have at most 46340 points (its ordered pairs index int32), "
              "got N = ",
              points.size(1));
  // pair_ref, pair_partner and pair_alpha: 12 bytes for each ordered pair
  check_output_fits(points.device(), "N = " + std::to_string(points.size(1)) + " model points (N (N - 1) pairs)",
                    {points.size(0), points.size(1) * std::max<int64_t>(points.size(1) - 1, 0)}, 12);
  if (diameter.has_value()) {
    check_cloud_values(*diameter, "diameter", points.size(0), points, "points");
  }
  TORCH_CHECK(tau_d > 0.0 && tau_d <= 1.0, "tau_d must be in (0, 1], got ", tau_d);
  TORCH_CHECK(max_pairs_per_key >= 0, "max_pairs_per_key must be >= 0 (0: no cap), got ", max_pairs_per_key);
  const Binning b = make_binning(angle_bins, distance_bins);
  TORCH_CHECK(b.key_count() <= kMaxKeys,
              "ppf_model: distance_bins * ceil(angle_bins / 2)^3 keys must be at most 2^24 (the "
              "dense key table), got ",
              distance_bins, " * ", b.feature_bins, "^3 = ", b.key_count());
  return b;
}

ModelOutputs empty_model_outputs(const at::Tensor& points, const Binning& binning) {
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t pairs = n * (n > 0 ? n - 1 : 0);
  const int64_t keys = binning.key_count();
  const int64_t unique = std::min(pairs, keys);
  const auto f32 = points.options().dtype(at::kFloat);
  const auto i64 = points.options().dtype(at::kLong);
  const auto i32 = points.options().dtype(at::kInt);
  return {at::empty({batch, n, 3}, f32),
          at::empty({batch}, f32),
          at::empty({batch}, f32),
          at::zeros({batch, keys + 1}, i64),
          at::full({batch, unique}, -1, i64),
          at::zeros({batch, unique}, i64),
          at::zeros({batch, unique}, i64),
          at::zeros({batch}, i64),
          at::full({batch, pairs}, -1, i32),
          at::full({batch, pairs}, -1, i32),
          at::full({batch, pairs}, std::numeric_limits<float>::quiet_NaN(), f32)};
}

ModelInputs model_inputs(const at::Tensor& points, const at::Tensor& normals, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& diameter) {
  return {as_float(points), as_float(normals), diameter.has_value() ? as_float(*diameter) : at::Tensor(),
          contiguous_lengths(lengths)};
}

namespace {

ModelResult ppf_model_cpu(const at::Tensor& points, const at::Tensor& normals, const std::optional<at::Tensor>& lengths,
                          const std::optional<at::Tensor>& diameter, double tau_d, int64_t angle_bins,
                          int64_t distance_bins, int64_t max_pairs_per_key) {
  const Binning binning =
      check_model_args(points, normals, lengths, diameter, tau_d, angle_bins, distance_bins, max_pairs_per_key);
  const ModelOutputs out = empty_model_outputs(points, binning);
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  if (batch == 0) return out.result();
  const int64_t pair_capacity = out.pair_ref.size(1);
  const int64_t unique_capacity = out.unique_keys.size(1);
  const int64_t keys = binning.key_count();

  const ModelInputs in = model_inputs(points, normals, lengths, diameter);
  const float tau = static_cast<float>(tau_d);
  float* diameter_ptr = out.diameters.data_ptr<float>();
  float* step_ptr = out.steps.data_ptr<float>();

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = cloud_length(in.lengths.data, b, n);
    const float* p = in.points.data_ptr<float>() + b * n * 3;
    if (in.diameter.defined()) {
      diameter_ptr[b] = in.diameter.data_ptr<float>()[b];
    } else {
      BoundingBox box;
      box.reset();
      for (int64_t i = 0; i < length; ++i) box.add(p + i * 3);
      diameter_ptr[b] = box.diagonal();
    }
    step_ptr[b] = multiply(tau, diameter_ptr[b]);
    float* unit = out.unit_normals.data_ptr<float>() + b * n * 3;
    for (int64_t i = 0; i < n; ++i) {
      model_unit_normal(p, in.normals.data_ptr<float>() + b * n * 3, i, length, unit + i * 3);
    }
    Binning bb = binning;
    bb.distance_step = step_ptr[b];
    const bool step_ok = bb.distance_step > 0.0f && finite(bb.distance_step);
    // Pair e = i * length + j; the stable sort lists a key's pairs by (i, j), as on CUDA where
    // the flat index is i * N + j (the same order).
    const int64_t count = length * length;
    std::vector<int64_t> pair_keys(static_cast<size_t>(count), keys);
    if (step_ok) {
      at::parallel_for(0, length, 16, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) {
          for (int64_t j = 0; j < length; ++j) {
            const int64_t key = model_pair_key(p, unit, i, j, bb);
            if (key >= 0) pair_keys[i * length + j] = key;
          }
        }
      });
    }
    const HashArrayCpu h = build_hash_array_cpu(pair_keys.data(), count, keys);

    int64_t* offsets = out.key_offsets.data_ptr<int64_t>() + b * (keys + 1);
    int64_t* uk = out.unique_keys.data_ptr<int64_t>() + b * unique_capacity;
    int64_t* st = out.starts.data_ptr<int64_t>() + b * unique_capacity;
    int64_t* ct = out.counts.data_ptr<int64_t>() + b * unique_capacity;
    // Run r's kept pairs become rows [first[r], first[r + 1]) of the pair list.
    const int64_t runs = h.num_unique();
    std::vector<int64_t> first(static_cast<size_t>(runs + 1), 0);
    for (int64_t r = 0; r < runs; ++r) first[r + 1] = first[r] + kept_pairs(h.counts[r], max_pairs_per_key);
    const int64_t total = first[runs];
    int64_t next_key = 0;
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t key = h.unique_keys[r];
      for (; next_key <= key; ++next_key) offsets[next_key] = first[r];
      uk[r] = key;
      st[r] = first[r];
      ct[r] = first[r + 1] - first[r];
    }
    for (; next_key <= keys; ++next_key) offsets[next_key] = total;
    out.num_unique.data_ptr<int64_t>()[b] = runs;

    int32_t* ref = out.pair_ref.data_ptr<int32_t>() + b * pair_capacity;
    int32_t* partner = out.pair_partner.data_ptr<int32_t>() + b * pair_capacity;
    float* alpha = out.pair_alpha.data_ptr<float>() + b * pair_capacity;
    at::parallel_for(0, runs, 64, [&](int64_t first_run, int64_t last_run) {
      for (int64_t r = first_run; r < last_run; ++r) {
        for (int64_t t = 0; t < first[r + 1] - first[r]; ++t) {
          const int64_t e = h.perm[h.starts[r] + kept_position(t, h.counts[r], max_pairs_per_key)];
          const int64_t i = e / length;
          const int64_t j = e - i * length;
          const int64_t pos = first[r] + t;
          ref[pos] = static_cast<int32_t>(i);
          partner[pos] = static_cast<int32_t>(j);
          alpha[pos] = model_pair_alpha(p, unit, i, j);
        }
      }
    });
  }
  return out.result();
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("ppf_model", &ppf::ppf_model_cpu); }

}  // namespace pointops
