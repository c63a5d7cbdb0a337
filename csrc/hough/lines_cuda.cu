// 2D line Hough accumulator on CUDA (rules in lines.h; the CPU twin is lines_cpu.cpp).
//
// A block owns the rho column of a few angles of one image in shared memory ([angle][rho], rows
// of `stride` = 1 (mod 32) words) and streams that image's points through it: a thread per point,
// one shared atomic add per angle. The angle tile is as small as keeps about one block per SM,
// because every block reads all of its image's points (8 bytes each, from L2): 180 angles of one
// 1920 x 1080 image with 100k edges are 90 blocks of 2 angles, 72 MB of L2 reads and 200k votes
// per block. The points are then cut into chunks until there are two blocks per SM; each chunk's
// block adds its nonzero bins into the zeroed output with global atomics (integers: exact and
// order-free). With one chunk a block writes its columns with plain stores and nothing is zeroed.
// Each thread issues the loads of 4 points before their votes: one at a time, the loop would wait
// on an L2 read (~600 cycles) per point.
//
// The rho bin is skimage's float64 arithmetic (lines.h: two products, a sum, the half step, a
// truncation): FP64 runs at half the FP32 rate on H100/H200, so the ~8 instructions of a vote are
// not the limit; the shared atomics (random rows: ~3-way bank conflicts among a warp's 32 points)
// and the L2 reads of the points are.
//
// Images whose rho column does not fit shared memory (a diagonal over ~14,000 pixels for counts)
// vote with global atomics, a thread per (point, angle): correct and deterministic, not fast.
//
// Weighted votes: int64 fixed-point counters (edges.h), converted once at the end.
#include "hough/lines.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using cuda::kWarpSize;

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // points in flight per thread

struct LineLaunch {
  const double2* trig;  // (T) cos, sin
  const int64_t* lengths;
  const float* weights;  // (B, P) float32 or null
  int64_t n;             // P
  int32_t n_theta, n_rho, offset, height, width;
  int32_t theta_tile, n_theta_tiles, n_chunks, stride;
};

__device__ __forceinline__ void shared_add(int32_t* address, int32_t v) { atomicAdd(address, v); }
__device__ __forceinline__ void shared_add(int64_t* address, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void global_add(int32_t* address, int32_t v) { atomicAdd(address, v); }
__device__ __forceinline__ void global_add(int64_t* address, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(v));
}

// A point's vote: false for points past the image's length, outside the image, or of zero
// fixed-point weight.
template <typename index_t, typename acc_t>
__device__ __forceinline__ bool line_point(const index_t* points, const LineLaunch& a, int64_t b, int64_t p, int32_t& x,
                                           int32_t& y, acc_t& vote) {
  if (!hough_images::point_in_image(points + 2 * (b * a.n + p), a.height, a.width, x, y)) return false;
  if constexpr (std::is_same_v<acc_t, int64_t>) {
    vote = a.weights == nullptr ? 1 : hough_images::weight_to_fixed(a.weights[b * a.n + p]);
    return vote != 0;
  } else {
    vote = 1;
    return true;
  }
}

// kUnroll points per thread and pass, their loads issued before any vote.
template <typename index_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    line_votes_kernel(const index_t* __restrict__ points, LineLaunch a, bool direct, acc_t* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char line_smem[];
  double2* trig = reinterpret_cast<double2*>(line_smem);
  acc_t* acc = reinterpret_cast<acc_t*>(trig + a.theta_tile);
  int64_t id = blockIdx.x;
  const int32_t chunk = static_cast<int32_t>(id % a.n_chunks);
  id /= a.n_chunks;
  const int32_t tile = static_cast<int32_t>(id % a.n_theta_tiles);
  const int64_t b = id / a.n_theta_tiles;
  const int32_t j0 = tile * a.theta_tile, nt = min(a.theta_tile, a.n_theta - j0);
  for (int32_t j = threadIdx.x; j < nt; j += kThreads) trig[j] = a.trig[j0 + j];
  for (int32_t i = threadIdx.x; i < nt * a.stride; i += kThreads) acc[i] = 0;
  const int64_t length = cloud_length(a.lengths, b, a.n);
  const int64_t p_first = length * chunk / a.n_chunks, p_last = length * (chunk + 1) / a.n_chunks;
  __syncthreads();

  for (int64_t p0 = p_first + threadIdx.x; p0 < p_last; p0 += int64_t{kUnroll} * kThreads) {
    int32_t x[kUnroll], y[kUnroll];
    acc_t vote[kUnroll];
    bool live[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = p0 + int64_t{u} * kThreads;
      live[u] = p < p_last && line_point(points, a, b, p, x[u], y[u], vote[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!live[u]) continue;
      for (int32_t j = 0; j < nt; ++j) {
        const double2 cs = trig[j];
        const int32_t d = hough_images::line_bin(cs.x, cs.y, x[u], y[u], a.offset);
        if (static_cast<uint32_t>(d) < static_cast<uint32_t>(a.n_rho)) shared_add(acc + j * a.stride + d, vote[u]);
      }
    }
  }
  __syncthreads();

  // Bin (d, j0 + j) of the image: consecutive threads take consecutive angles of one rho row
  // (contiguous in the output; their shared rows are `stride` = 1 (mod 32) words apart).
  acc_t* image = out + b * a.n_rho * a.n_theta;
  const int32_t bins = nt * a.n_rho;
  for (int32_t k = threadIdx.x; k < bins; k += kThreads) {
    const int32_t d = k / nt, j = k - d * nt;
    const acc_t v = acc[j * a.stride + d];
    acc_t* dst = image + int64_t{d} * a.n_theta + j0 + j;
    if (direct) {
      *dst = v;
    } else if (v != 0) {
      global_add(dst, v);
    }
  }
}

template <typename index_t, typename acc_t>
__global__ void __launch_bounds__(256)
    line_votes_global_kernel(const index_t* __restrict__ points, LineLaunch a, int64_t batch, acc_t* __restrict__ out) {
  const int64_t total = batch * a.n * a.n_theta;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int32_t j = static_cast<int32_t>(i % a.n_theta);
    const int64_t bp = i / a.n_theta, b = bp / a.n, p = bp - b * a.n;
    if (p >= cloud_length(a.lengths, b, a.n)) continue;
    int32_t x, y;
    acc_t vote;
    if (!line_point(points, a, b, p, x, y, vote)) continue;
    const double2 cs = a.trig[j];
    const int32_t d = hough_images::line_bin(cs.x, cs.y, x, y, a.offset);
    if (static_cast<uint32_t>(d) < static_cast<uint32_t>(a.n_rho)) {
      global_add(out + (b * a.n_rho + d) * a.n_theta + j, vote);
    }
  }
}

template <typename acc_t>
void vote_lines(const at::Tensor& pts, LineLaunch a, int64_t batch, const cudaDeviceProp& prop, at::Tensor& out,
                cudaStream_t stream) {
  const int64_t acc_bytes = sizeof(acc_t);
  a.stride = static_cast<int32_t>(cuda::round_up(a.n_rho, kWarpSize) + 1);
  const int64_t budget = std::min<int64_t>(static_cast<int64_t>(prop.sharedMemPerBlockOptin),
                                           static_cast<int64_t>(prop.sharedMemPerMultiprocessor) / 2 - 2048);
  const int64_t column = int64_t{a.stride} * acc_bytes + int64_t{sizeof(double2)};
  const int64_t fit = budget / column;
  const int64_t sms = prop.multiProcessorCount;
  if (fit < 1) {
    out.zero_();
    const int64_t total = batch * a.n * a.n_theta;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(total, 256), 1 << 20));
    AT_DISPATCH_INDEX_TYPES(pts.scalar_type(), "hough_lines_global", [&] {
      line_votes_global_kernel<index_t, acc_t>
          <<<grid, 256, 0, stream>>>(pts.data_ptr<index_t>(), a, batch, out.data_ptr<acc_t>());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // About one (image, angle tile) block per SM; chunks of points when that leaves SMs idle.
  const int64_t tiles_wanted = std::max<int64_t>(1, sms / std::max<int64_t>(batch, 1));
  const int64_t tile = std::clamp<int64_t>(cuda::ceil_div(a.n_theta, tiles_wanted), 1, fit);
  const int64_t n_tiles = cuda::ceil_div(a.n_theta, tile);
  // at least two blocks per SM: one (image, angle tile) block per SM leaves SMs idle (90 tiles
  // of 2 angles on 132 SMs) and hides the point loads with only 16 warps
  const int64_t chunks =
      std::clamp<int64_t>(cuda::ceil_div(2 * sms, batch * n_tiles), 1, std::max<int64_t>(1, a.n / 4096));
  a.theta_tile = static_cast<int32_t>(tile);
  a.n_theta_tiles = static_cast<int32_t>(n_tiles);
  a.n_chunks = static_cast<int32_t>(chunks);
  const bool direct = chunks == 1;
  if (!direct) out.zero_();
  const int64_t blocks = batch * n_tiles * chunks;
  TORCH_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "hough_lines_points: too many blocks (", blocks, ")");
  const int64_t smem = tile * column;
  AT_DISPATCH_INDEX_TYPES(pts.scalar_type(), "hough_lines_points", [&] {
    auto kernel = line_votes_kernel<index_t, acc_t>;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<static_cast<unsigned>(blocks), kThreads, static_cast<size_t>(smem), stream>>>(
        pts.data_ptr<index_t>(), a, direct, out.data_ptr<acc_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor hough_lines_points_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                   const std::optional<at::Tensor>& weights, int64_t height, int64_t width,
                                   at::ArrayRef<double> theta) {
  const int64_t offset = hough_images::check_lines_args(points, lengths, weights, height, width, theta);
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t batch = points.size(0), n = points.size(1);
  const int64_t n_theta = static_cast<int64_t>(theta.size()), n_rho = 2 * offset + 1;
  const bool weighted = weights.has_value();
  const at::TensorOptions options = points.options().dtype(weighted ? at::kLong : at::kInt);
  if (batch * n_theta == 0 || n == 0 || height * width == 0) {
    at::Tensor zeros = at::zeros({batch, n_rho, n_theta}, options);
    return weighted ? hough_images::fixed_to_float(zeros) : zeros;
  }
  at::Tensor out = at::empty({batch, n_rho, n_theta}, options);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const at::Tensor w = weighted ? weights->to(at::kFloat).contiguous() : at::Tensor();
  // The (cos, sin) table of the CPU kernel, copied stream-ordered from page-locked memory.
  const at::Tensor trig = hough_images::line_trig(theta).pin_memory().to(points.device(), /*non_blocking=*/true);
  LineLaunch a{};
  a.trig = reinterpret_cast<const double2*>(trig.data_ptr<double>());
  a.lengths = lengths_c.data;
  a.weights = weighted ? w.data_ptr<float>() : nullptr;
  a.n = n;
  a.n_theta = static_cast<int32_t>(n_theta);
  a.n_rho = static_cast<int32_t>(n_rho);
  a.offset = static_cast<int32_t>(offset);
  a.height = static_cast<int32_t>(height);
  a.width = static_cast<int32_t>(width);
  if (weighted) {
    vote_lines<int64_t>(pts, a, batch, *prop, out, stream);
    return hough_images::fixed_to_float(out);
  }
  vote_lines<int32_t>(pts, a, batch, *prop, out, stream);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("hough_lines_points", &hough_lines_points_cuda); }

}  // namespace pointops
