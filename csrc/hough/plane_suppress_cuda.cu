// plane_suppress on CUDA (rules in plane_suppress.h; the CPU twin is plane_suppress_cpu.cpp).
//
// One block per cloud: its rows sit in shared memory and thread t owns rows t, t + T, ...; for
// each row j in turn, every thread tests its kept rows i < j against j and one __syncthreads_or
// tells the block whether any is close, so row j's owner knows whether it is kept. K rows cost K
// barriers: a few microseconds for the tens of rows detect_planes passes.
#include "hough/plane_suppress.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>

#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using namespace hough_detail;

constexpr int kThreads = 256;
constexpr int kRowsPerThread = static_cast<int>(kMaxSuppressPlanes / kThreads);
constexpr int64_t kMaxGrid = 65535;

__global__ void __launch_bounds__(kThreads) suppress_kernel(const float* __restrict__ planes, int64_t batch, int64_t k,
                                                            float min_cos, float max_offset, float* __restrict__ out) {
  extern __shared__ float4 rows[];
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    __syncthreads();  // the previous cloud's rows are no longer read
    const float* cloud = planes + 4 * b * k;
    for (int64_t j = threadIdx.x; j < k; j += kThreads) {
      rows[j] = make_float4(cloud[4 * j], cloud[4 * j + 1], cloud[4 * j + 2], cloud[4 * j + 3]);
    }
    __syncthreads();
    uint32_t kept = 0;  // bit s: row threadIdx.x + s * kThreads is kept
    for (int64_t j = 0; j < k; ++j) {
      const float4 pj = rows[j];
      const float a[4] = {pj.x, pj.y, pj.z, pj.w};
      bool close = false;
#pragma unroll
      for (int s = 0; s < kRowsPerThread; ++s) {
        const int64_t i = threadIdx.x + int64_t{s} * kThreads;
        if (i < j && ((kept >> s) & 1u)) {
          const float4 pi = rows[i];
          const float c[4] = {pi.x, pi.y, pi.z, pi.w};
          close = close || planes_close(a, c, min_cos, max_offset);
        }
      }
      const bool repeated = __syncthreads_or(close) != 0;
      if (j % kThreads == threadIdx.x && !repeated && !isnan(pj.w)) kept |= 1u << (j / kThreads);
    }
    float* target = out + 4 * b * k;
#pragma unroll
    for (int s = 0; s < kRowsPerThread; ++s) {
      const int64_t i = threadIdx.x + int64_t{s} * kThreads;
      if (i < k) {
        const float4 row = ((kept >> s) & 1u) ? rows[i] : make_float4(NAN, NAN, NAN, NAN);
        target[4 * i] = row.x;
        target[4 * i + 1] = row.y;
        target[4 * i + 2] = row.z;
        target[4 * i + 3] = row.w;
      }
    }
  }
}

at::Tensor plane_suppress_cuda(const at::Tensor& planes, double max_angle, double max_offset) {
  const SuppressArgs args = check_suppress_args(planes, max_angle, max_offset);
  const c10::cuda::CUDAGuard guard(planes.device());
  const int64_t batch = args.planes.size(0), k = args.planes.size(1);
  at::Tensor out = at::empty({batch, k, 4}, args.planes.options());
  if (batch * k == 0) return out;
  const size_t smem = static_cast<size_t>(k) * sizeof(float4);
  suppress_kernel<<<static_cast<unsigned>(std::min(batch, kMaxGrid)), kThreads, smem,
                    at::cuda::getCurrentCUDAStream()>>>(args.planes.data_ptr<float>(), batch, k, args.min_cos,
                                                        args.max_offset, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("plane_suppress", &plane_suppress_cuda); }

}  // namespace pointops
