// Point pair features of given pairs on CUDA: one thread per pair (contract in features.h; all
// arithmetic in ppf_math.h, shared with the CPU twin features_cpu.cpp). Memory-bound: each pair
// reads two points and two normals and writes 28 bytes.
#include "ppf/features.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {
namespace {

constexpr int kThreads = 256;

__global__ void features_kernel(const float* __restrict__ points, const float* __restrict__ normals,
                                const int64_t* __restrict__ lengths, int64_t n, const int64_t* __restrict__ pairs,
                                int64_t count, int64_t total, const float* __restrict__ steps, Binning binning,
                                float* __restrict__ features, int64_t* __restrict__ keys, float* __restrict__ alpha) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t b = e / count;
    Binning bb = binning;
    bb.distance_step = steps[b];
    one_pair_feature(points + b * n * 3, normals + b * n * 3, cloud_length(lengths, b, n), pairs[e * 2],
                     pairs[e * 2 + 1], bb, features + e * 4, keys + e, alpha + e);
  }
}

}  // namespace

FeaturesResult ppf_features_cuda(const at::Tensor& points, const at::Tensor& normals, const at::Tensor& pairs,
                                 const std::optional<at::Tensor>& lengths, const at::Tensor& distance_step,
                                 int64_t angle_bins, int64_t distance_bins) {
  const Binning binning =
      check_features_args(points, normals, pairs, lengths, distance_step, angle_bins, distance_bins);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t count = pairs.size(1);
  const auto options = points.options().dtype(at::kFloat);
  at::Tensor features = at::empty({batch, count, 4}, options);
  at::Tensor keys = at::empty({batch, count}, options.dtype(at::kLong));
  at::Tensor alpha = at::empty({batch, count}, options);
  const int64_t total = batch * count;
  if (total == 0) return {features, keys, alpha};

  const at::Tensor pts = as_float(points);
  const at::Tensor nrm = as_float(normals);
  const at::Tensor prs = pairs.contiguous();
  const at::Tensor steps = as_float(distance_step);
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t blocks = std::min<int64_t>(cuda::ceil_div(total, kThreads), 65536);
  features_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      pts.data_ptr<float>(), nrm.data_ptr<float>(), lengths_c.data, n, prs.data_ptr<int64_t>(), count, total,
      steps.data_ptr<float>(), binning, features.data_ptr<float>(), keys.data_ptr<int64_t>(), alpha.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {features, keys, alpha};
}

}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("ppf_features", &ppf::ppf_features_cuda); }

}  // namespace pointops
