// Plane labels and least-squares refits on CUDA (rules in plane_fit.h; the CPU twin is
// plane_fit_cpu.cpp).
//
// plane_refit runs a zero fill of the scratch, the clouds' extents (a max of |coordinate| bit
// patterns, exact and order-free), then per band the moments (each block stages its cloud's
// planes in shared memory, labels its points, and sums their integer moment terms per plane) and
// a thread per plane for the solve, which writes the planes the next band starts from (a band
// after the first clears the moments with a memset first). The moment sums are integers, so atomics give the same
// result in any order. Within a warp the lanes that share a label are summed with shuffles
// first: in a LiDAR scan most warps lie on one plane, and one lane then adds 16 words for 32
// points instead of every lane contending for the same 16 shared-memory words.
#include "hough/plane_fit.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/launch.cuh"

namespace pointops {
namespace {

using namespace plane_fit_detail;
using cuda::kFullMask;
using cuda::kWarpSize;

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;

__device__ __forceinline__ void stage_planes(const float* planes, int64_t k, float* staged) {
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) sanitize_plane(planes + 4 * j, staged + 4 * j);
}

// Grid (x: point blocks, y: clouds). Labels every row of its clouds.
__global__ void __launch_bounds__(kThreads)
    labels_kernel(const float* __restrict__ points, const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                  const float* __restrict__ planes, int64_t k, float threshold, int64_t* __restrict__ labels) {
  extern __shared__ float label_planes[];
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    __syncthreads();  // the previous cloud's planes are no longer read
    stage_planes(planes + 4 * b * k, k, label_planes);
    __syncthreads();
    const int64_t length = cloud_length(lengths, b, n);
    for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < n; p += int64_t{gridDim.x} * blockDim.x) {
      int64_t label = -1;
      if (p < length) {
        const float* q = points + 3 * (b * n + p);
        const float x = q[0], y = q[1], z = q[2];
        if (finite_point(x, y, z)) label = first_plane_within(label_planes, k, x, y, z, threshold);
      }
      labels[b * n + p] = label;
    }
  }
}

// Grid (x: point blocks, y: clouds). max_bits[b] = max float32 bit pattern of |coordinate| over
// cloud b's valid points.
__global__ void __launch_bounds__(kThreads)
    extent_kernel(const float* __restrict__ points, const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                  unsigned long long* __restrict__ max_bits) {
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const int64_t length = cloud_length(lengths, b, n);
    uint32_t largest = 0;
    for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < length; p += int64_t{gridDim.x} * blockDim.x) {
      const float* q = points + 3 * (b * n + p);
      const float x = q[0], y = q[1], z = q[2];
      if (finite_point(x, y, z)) {
        largest = max(largest, max(float_bits(fabsf(x)), max(float_bits(fabsf(y)), float_bits(fabsf(z)))));
      }
    }
    largest = __reduce_max_sync(kFullMask, largest);
    if (threadIdx.x % kWarpSize == 0 && largest != 0) atomicMax(max_bits + b, largest);
  }
}

__device__ __forceinline__ int64_t warp_sum(int64_t v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Grid (x: point blocks, y: clouds); dynamic shared memory: k x kMoments sums, then k planes.
// moments (B, k, kMoments) receives every block's sums.
__global__ void __launch_bounds__(kThreads)
    moments_kernel(const float* __restrict__ points, const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                   const float* __restrict__ planes, int64_t k, float threshold,
                   const unsigned long long* __restrict__ max_bits, unsigned long long* __restrict__ moments) {
  extern __shared__ unsigned long long moment_smem[];
  unsigned long long* sums = moment_smem;                         // [k][kMoments]
  float* staged = reinterpret_cast<float*>(sums + k * kMoments);  // [k][4]
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp_stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    __syncthreads();  // the previous cloud's sums are flushed
    stage_planes(planes + 4 * b * k, k, staged);
    for (int64_t i = threadIdx.x; i < k * kMoments; i += blockDim.x) sums[i] = 0;
    __syncthreads();
    const int shift = quant_shift(static_cast<uint32_t>(max_bits[b]));
    const int64_t length = cloud_length(lengths, b, n);
    // Warp-uniform trip count: every lane reaches the shuffles below.
    for (int64_t base = int64_t{blockIdx.x} * blockDim.x + (threadIdx.x - lane); base < length; base += warp_stride) {
      const int64_t p = base + lane;
      int64_t label = -1;
      int64_t terms[kMoments] = {};
      if (p < length) {
        const float* q = points + 3 * (b * n + p);
        const float x = q[0], y = q[1], z = q[2];
        if (finite_point(x, y, z)) label = first_plane_within(staged, k, x, y, z, threshold);
        if (label >= 0) {
          const int64_t quantized[3] = {quantize(x, shift), quantize(y, shift), quantize(z, shift)};
          moment_terms(quantized, terms);
        }
      }
      unsigned pending = __ballot_sync(kFullMask, label >= 0);
      while (pending != 0) {
        const int64_t target = __shfl_sync(kFullMask, label, __ffs(pending) - 1);
        const bool mine = label == target;
        pending &= ~__ballot_sync(kFullMask, mine);
        for (int t = 0; t < kMoments; ++t) {
          const int64_t total = warp_sum(mine ? terms[t] : 0);
          if (lane == t) atomicAdd(sums + target * kMoments + t, static_cast<unsigned long long>(total));
        }
      }
    }
    __syncthreads();
    unsigned long long* cloud_moments = moments + b * k * kMoments;
    for (int64_t i = threadIdx.x; i < k * kMoments; i += blockDim.x) {
      if (sums[i] != 0) atomicAdd(cloud_moments + i, sums[i]);
    }
  }
}

// A thread per (cloud, plane); planes and refit may be the same rows.
__global__ void solve_kernel(const unsigned long long* __restrict__ moments,
                             const unsigned long long* __restrict__ max_bits, const float* planes, int64_t batch,
                             int64_t k, float* refit, int64_t* __restrict__ inliers) {
  const int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (row >= batch * k) return;
  int64_t m[kMoments];
  for (int t = 0; t < kMoments; ++t) m[t] = static_cast<int64_t>(moments[row * kMoments + t]);
  float original[4], clean[4];
  for (int c = 0; c < 4; ++c) original[c] = planes[4 * row + c];  // planes may be refit (in place)
  sanitize_plane(original, clean);
  solve_plane(m, quant_shift(static_cast<uint32_t>(max_bits[row / k])), clean, original, refit + 4 * row);
  inliers[row] = m[0];
}

struct Launch {
  dim3 grid;
  cudaStream_t stream;
};

// Point blocks per cloud: enough blocks in all to fill the GPU a few times over.
Launch point_launch(int64_t batch, int64_t n) {
  const int sms = cuda::sm_count();
  const int64_t clouds = std::min<int64_t>(batch, kMaxGridY);
  const int64_t per_cloud = std::clamp<int64_t>(cuda::ceil_div(4 * int64_t{sms}, clouds), 1,
                                                std::max<int64_t>(1, cuda::ceil_div(n, kThreads)));
  return {dim3(static_cast<unsigned>(per_cloud), static_cast<unsigned>(clouds)), at::cuda::getCurrentCUDAStream()};
}

at::Tensor plane_labels_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const at::Tensor& planes, double threshold) {
  const c10::cuda::CUDAGuard guard(points.device());
  const FitInputs in = prepare_fit_inputs(points, lengths, planes, threshold);
  const int64_t batch = in.batch, n = in.n, k = in.k;
  at::Tensor labels = at::empty({batch, n}, points.options().dtype(at::kLong));
  if (batch * n == 0) return labels;
  const Launch launch = point_launch(batch, n);
  labels_kernel<<<launch.grid, kThreads, static_cast<size_t>(16 * k), launch.stream>>>(
      in.points.data_ptr<float>(), in.lengths.data, batch, n, in.planes.data_ptr<float>(), k, in.threshold,
      labels.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return labels;
}

std::tuple<at::Tensor, at::Tensor> plane_refit_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                                    const at::Tensor& planes, double threshold,
                                                    at::ArrayRef<double> bands) {
  const c10::cuda::CUDAGuard guard(points.device());
  const FitInputs in = prepare_fit_inputs(points, lengths, planes, threshold, bands);
  const int64_t batch = in.batch, n = in.n, k = in.k;
  const float* pts = in.points.data_ptr<float>();
  at::Tensor refit = at::empty({batch, k, 4}, points.options().dtype(at::kFloat));
  at::Tensor inliers = at::empty({batch, k}, points.options().dtype(at::kLong));
  if (batch * k == 0) return {refit, inliers};
  // One scratch buffer, zeroed by one fill: the moments (B, k, kMoments), then max_bits (B,).
  at::Tensor scratch = at::zeros({batch * k * kMoments + batch}, points.options().dtype(at::kLong));
  auto* moments = reinterpret_cast<unsigned long long*>(scratch.data_ptr<int64_t>());
  unsigned long long* max_bits = moments + batch * k * kMoments;
  const size_t moment_bytes = static_cast<size_t>(batch * k * kMoments) * sizeof(unsigned long long);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const Launch launch = point_launch(batch, std::max<int64_t>(n, 1));
  if (n > 0) {
    extent_kernel<<<launch.grid, kThreads, 0, stream>>>(pts, in.lengths.data, batch, n, max_bits);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const size_t smem = static_cast<size_t>(k) * (kMoments * sizeof(unsigned long long) + 4 * sizeof(float));
  if (n > 0) cuda::set_dynamic_smem(moments_kernel, smem);
  const int64_t rows = batch * k;
  // Each band refits the previous band's planes (the first band the input rows), in place.
  const float* current = in.planes.data_ptr<float>();
  float* out = refit.data_ptr<float>();
  for (size_t band = 0; band < in.thresholds.size(); ++band) {
    if (band > 0) C10_CUDA_CHECK(cudaMemsetAsync(moments, 0, moment_bytes, stream));
    if (n > 0) {
      moments_kernel<<<launch.grid, kThreads, smem, stream>>>(pts, in.lengths.data, batch, n, current, k,
                                                              in.thresholds[band], max_bits, moments);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    solve_kernel<<<static_cast<unsigned>(cuda::ceil_div(rows, 128)), 128, 0, stream>>>(
        moments, max_bits, current, batch, k, out, inliers.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    current = out;
  }
  return {refit, inliers};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("plane_labels", &plane_labels_cuda);
  m.impl("plane_refit", &plane_refit_cuda);
}

}  // namespace pointops
