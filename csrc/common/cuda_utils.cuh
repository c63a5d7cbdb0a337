// CUDA helpers shared by every kernel file: launch sizing, 64-bit grid-stride loops,
// device properties, and CUB temporary storage taken from torch's caching allocator.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

namespace pointops {
namespace cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int64_t round_up(int64_t a, int64_t multiple) { return ceil_div(a, multiple) * multiple; }

// Blocks for a grid-stride loop over n items: enough to fill every SM a few times over, never
// more than the work needs, at least one (a launch with zero blocks is an error).
inline int grid_size(int64_t n, int threads, int blocks_per_sm = 4) {
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t needed = ceil_div(n, threads);
  const int64_t cap = static_cast<int64_t>(sms) * blocks_per_sm;
  return static_cast<int>(std::max<int64_t>(1, std::min(needed, cap)));
}

// Index math in 64 bits: blockIdx.x * blockDim.x is a 32-bit product unless widened first.
__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t global_thread_count() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace cuda
}  // namespace pointops
