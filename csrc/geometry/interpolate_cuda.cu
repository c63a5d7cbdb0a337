// Weighted interpolation on CUDA (rules in interpolate.h; the CPU twin is interpolate_cpu.cpp).
// One thread per output value (b, m, c): consecutive threads take consecutive channels, so the
// feature reads of one neighbour and the output writes are coalesced; the K indices and weights of
// a row are re-read by its C threads from L1. Bound by memory traffic: (K + 1) C values per row.
#include "geometry/interpolate.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/squared_distance.h"

namespace pointops {
namespace {

constexpr int kThreads = 256;

template <typename scalar_t>
__global__ void interpolate_kernel(const scalar_t* __restrict__ features, const int64_t* __restrict__ indices,
                                   const scalar_t* __restrict__ weights, int64_t n, int64_t m, int64_t channels,
                                   int64_t k, int64_t total, scalar_t* __restrict__ out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t row = e / channels;
  const int64_t c = e - row * channels;
  const int64_t b = row / m;
  scalar_t acc = scalar_t(0);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = indices[row * k + j];
    const bool valid = i >= 0 && i < n;
    const scalar_t term = valid ? multiply(weights[row * k + j], features[(b * n + i) * channels + c]) : scalar_t(0);
    acc = add(acc, term);
  }
  out[e] = acc;
}

}  // namespace

at::Tensor interpolate_cuda(const at::Tensor& features, const at::Tensor& indices, const at::Tensor& weights) {
  neighbors::check_interpolate_args(features, indices, weights);
  check_device_type(features, "features", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(features.device());
  const at::Tensor f = neighbors::interpolate_compute(features);
  const at::Tensor w = neighbors::interpolate_compute(weights);
  const at::Tensor idx = indices.contiguous();
  const int64_t batch = features.size(0);
  const int64_t n = features.size(1);
  const int64_t channels = features.size(2);
  const int64_t m = indices.size(1);
  const int64_t k = indices.size(2);
  at::Tensor out = at::empty({batch, m, channels}, f.options());
  const int64_t total = batch * m * channels;
  if (total > 0) {
    AT_DISPATCH_FLOATING_TYPES(f.scalar_type(), "interpolate_cuda", [&] {
      interpolate_kernel<scalar_t>
          <<<static_cast<unsigned>(cuda::ceil_div(total, kThreads)), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              f.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(), w.data_ptr<scalar_t>(), n, m, channels, k, total,
              out.data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  return out.scalar_type() == features.scalar_type() ? out : out.to(features.scalar_type());
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("interpolate", &interpolate_cuda); }

}  // namespace pointops
