// Point pair features of given pairs on the CPU: the twin of features_cuda.cu (contract in
// features.h; all arithmetic in ppf_math.h, shared with the CUDA kernel).
#include "ppf/features.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/clouds.h"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {

Binning check_features_args(const at::Tensor& points, const at::Tensor& normals, const at::Tensor& pairs,
                            const std::optional<at::Tensor>& lengths, const at::Tensor& distance_step,
                            int64_t angle_bins, int64_t distance_bins) {
  check_oriented_clouds(points, normals, lengths, "points", "normals", "lengths");
  check_dim(pairs, "pairs", 3, "(B, P, 2)");
  check_dtype(pairs, "pairs", at::kLong);
  check_same_device(pairs, "pairs", points, "points");
  TORCH_CHECK(pairs.size(0) == points.size(0) && pairs.size(2) == 2,
              "pairs must have shape (B, P, 2) with B = ", points.size(0), ", got shape ", pairs.sizes());
  check_cloud_values(distance_step, "distance_step", points.size(0), points, "points");
  return make_binning(angle_bins, distance_bins);
}

FeaturesResult ppf_features_cpu(const at::Tensor& points, const at::Tensor& normals, const at::Tensor& pairs,
                                const std::optional<at::Tensor>& lengths, const at::Tensor& distance_step,
                                int64_t angle_bins, int64_t distance_bins) {
  const Binning binning =
      check_features_args(points, normals, pairs, lengths, distance_step, angle_bins, distance_bins);
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t count = pairs.size(1);
  const auto options = points.options().dtype(at::kFloat);
  at::Tensor features = at::empty({batch, count, 4}, options);
  at::Tensor keys = at::empty({batch, count}, options.dtype(at::kLong));
  at::Tensor alpha = at::empty({batch, count}, options);
  if (batch * count == 0) return {features, keys, alpha};

  const at::Tensor pts = as_float(points);
  const at::Tensor nrm = as_float(normals);
  const at::Tensor prs = pairs.contiguous();
  const at::Tensor steps = as_float(distance_step);
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const float* pts_ptr = pts.data_ptr<float>();
  const float* nrm_ptr = nrm.data_ptr<float>();
  const int64_t* pair_ptr = prs.data_ptr<int64_t>();
  const float* step_ptr = steps.data_ptr<float>();
  float* feature_ptr = features.data_ptr<float>();
  int64_t* key_ptr = keys.data_ptr<int64_t>();
  float* alpha_ptr = alpha.data_ptr<float>();
  at::parallel_for(0, batch * count, 2048, [&](int64_t first, int64_t last) {
    for (int64_t e = first; e < last; ++e) {
      const int64_t b = e / count;
      Binning bb = binning;
      bb.distance_step = step_ptr[b];
      one_pair_feature(pts_ptr + b * n * 3, nrm_ptr + b * n * 3, cloud_length(lengths_c.data, b, n), pair_ptr[e * 2],
                       pair_ptr[e * 2 + 1], bb, feature_ptr + e * 4, key_ptr + e, alpha_ptr + e);
    }
  });
  return {features, keys, alpha};
}

}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("ppf_features", &ppf::ppf_features_cpu); }

}  // namespace pointops
