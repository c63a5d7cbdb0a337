// 3D plane Hough accumulators on CUDA (rules in planes.h; the CPU twin is planes_cpu.cpp).
//
// Gather, not scatter (seed 000): a block owns a tile of orientations and their rho histograms
// live in shared memory, laid out [rho][column]; a thread owns whole columns, so a vote is a
// plain shared load, add and store with no atomics and no bank conflicts (lane L always touches
// bank L). Points stream through a shared tile, read as one broadcast float4 each.
//
// Counts (vote_counts_kernel): a column is one 32-bit word holding two 16-bit counters, i.e. two
// orientations per thread. Per point a thread computes both bins, loads both words, adds (if both
// bins land in the same word the second store carries both increments) and stores: two
// independent loads in flight per point instead of a load-add-store chain per vote, and half the
// shared memory per orientation of 32-bit counters, so more orientations (warps) stay resident.
// A 16-bit counter holds at most 65535 votes, so the block flushes its histograms into the
// output with coalesced integer atomics (exact and order-free, hence deterministic) at least
// every 65535 points, and at the end. Rejected votes go to a discard row (bin n_rho) instead of a
// branch. Blocks also split the points into chunks so that small batches still fill the GPU.
//
// What bounds it (estimated from the code, not yet measured on a GPU): about 13 instructions per
// vote (4 flops for the bin, 2 compares, the conversion, address, load/add/store), i.e. the issue
// rate, and latency hiding with the ~6 warps per SM that n_rho = 256 histograms leave room for
// (64 threads x 70 KB blocks, 3 per SM; ptxas: 48 registers, no spills). The flushes add 4 bytes
// of global atomics per (orientation, rho bin) per 65280 points.
//
// Weighted (vote_weights_kernel): one float per column, two columns (orientations) per thread, and
// one block sees every point of its cloud in order, so each bin is the same float32 sum, in the
// same order, as on the CPU. Accumulators too large for shared memory fall back to
// vote_global_kernel: a thread per orientation updates its own rows in global memory, in point
// order (correct and deterministic, not fast).
#include "hough/planes.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using hough_detail::PlaneLayout;
using hough_detail::RhoBinning;
using cuda::kWarpSize;

constexpr int kTilePoints = 256;
constexpr int kMaxThreads = 256;
// Flush before a 16-bit counter could pass 65535: a whole number of tiles.
constexpr int64_t kFlushPoints = (65535 / kTilePoints) * kTilePoints;
// Chunks smaller than this would spend more on flushing than on voting.
constexpr int64_t kMinChunkPoints = 16384;

// Stages points [first, first + count) of a cloud as float4 (x, y, z, weight); a point that casts
// no vote gets x = NaN, which every normal turns into a rejected bin.
__device__ __forceinline__ void stage_tile(float4* tile, const float* cloud, const float* weights,
                                           int64_t first, int64_t count) {
  for (int i = threadIdx.x; i < kTilePoints; i += blockDim.x) {
    float4 p = make_float4(nanf(""), 0.f, 0.f, 0.f);
    if (i < count) {
      const int64_t row = first + i;
      p.x = cloud[3 * row];
      p.y = cloud[3 * row + 1];
      p.z = cloud[3 * row + 2];
      p.w = weights == nullptr ? 1.f : weights[row];
      if (!(isfinite(p.x) && isfinite(p.y) && isfinite(p.z) && isfinite(p.w))) p.x = nanf("");
    }
    tile[i] = p;
  }
}

__device__ __forceinline__ float3 load_normal(const float* normals, int64_t m, int64_t m_total) {
  if (m >= m_total) return make_float3(nanf(""), 0.f, 0.f);  // a padding column: never votes
  return make_float3(normals[3 * m], normals[3 * m + 1], normals[3 * m + 2]);
}

__device__ __forceinline__ int64_t cloud_length(const int64_t* lengths, int64_t b, int64_t n) {
  if (lengths == nullptr) return n;
  const int64_t v = lengths[b];
  return v < 0 ? 0 : (v > n ? n : v);
}

__device__ __forceinline__ int32_t bin_of(float3 nrm, float4 p, const RhoBinning& binning) {
  return hough_detail::rho_bin(nrm.x, nrm.y, nrm.z, p.x, p.y, p.z, binning);
}

// Adds the block's 16-bit histograms into out (b's rows), then clears this thread's column.
// Thread t's word column holds orientation m_base + t (low half) and m_base + T + t (high half).
__device__ __forceinline__ void flush_counts(uint32_t* counters, int64_t m_base, int64_t m_total,
                                             int32_t n_rho, int32_t* out_cloud) {
  __syncthreads();
  const int threads = blockDim.x;
  const int lane = threadIdx.x % kWarpSize;
  // A warp per orientation and a lane per rho bin: the global atomics coalesce. The shared reads
  // conflict (a column's words share a bank), which costs ~1% of the votes between flushes.
  for (int local = threadIdx.x / kWarpSize; local < 2 * threads; local += threads / kWarpSize) {
    const int64_t m = m_base + local;
    if (m >= m_total) continue;
    const int column = local < threads ? local : local - threads;
    const int shift = local < threads ? 0 : 16;
    for (int32_t r = lane; r < n_rho; r += kWarpSize) {
      const uint32_t count = (counters[r * threads + column] >> shift) & 0xffffu;
      if (count != 0) atomicAdd(out_cloud + m * n_rho + r, static_cast<int32_t>(count));
    }
  }
  __syncthreads();
  for (int32_t r = 0; r <= n_rho; ++r) counters[r * threads + threadIdx.x] = 0;
}

__global__ void __launch_bounds__(kMaxThreads)
    vote_counts_kernel(const float* __restrict__ points, const int64_t* __restrict__ lengths,
                       int64_t batch, int64_t n, const float* __restrict__ normals,
                       int64_t m_total, RhoBinning binning, int64_t chunk_points,
                       int32_t* __restrict__ out) {
  extern __shared__ float4 vote_smem[];
  float4* tile = vote_smem;
  uint32_t* counters = reinterpret_cast<uint32_t*>(vote_smem + kTilePoints);  // [n_rho + 1][T]
  const int threads = blockDim.x;
  const int32_t n_rho = binning.n_rho;
  const int64_t m_base = int64_t{blockIdx.x} * 2 * threads;
  const float3 lo = load_normal(normals, m_base + threadIdx.x, m_total);
  const float3 hi = load_normal(normals, m_base + threads + threadIdx.x, m_total);
  uint32_t* column = counters + threadIdx.x;
  for (int32_t r = 0; r <= n_rho; ++r) column[r * threads] = 0;

  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const int64_t length = cloud_length(lengths, b, n);
    const int64_t begin = int64_t{blockIdx.y} * chunk_points;
    const int64_t end = min(length, begin + chunk_points);
    const float* cloud = points + b * n * 3;
    int32_t* out_cloud = out + b * m_total * n_rho;
    int64_t since_flush = 0;
    for (int64_t first = begin; first < end; first += kTilePoints) {
      if (since_flush == kFlushPoints) {
        flush_counts(counters, m_base, m_total, n_rho, out_cloud);
        since_flush = 0;
      }
      const int count = static_cast<int>(min(int64_t{kTilePoints}, end - first));
      __syncthreads();  // everyone is done with the previous tile
      stage_tile(tile, cloud, nullptr, first, count);
      __syncthreads();
      // The next point is loaded before this one's stores, which the compiler could not hoist.
      float4 p = tile[0];
      for (int i = 0; i < count; ++i) {
        const float4 next = tile[i + 1 < count ? i + 1 : i];
        const int32_t r_lo = bin_of(lo, p, binning);
        const int32_t r_hi = bin_of(hi, p, binning);
        uint32_t* w_lo = column + r_lo * threads;
        uint32_t* w_hi = column + r_hi * threads;
        uint32_t a = *w_lo;
        uint32_t c = *w_hi;
        a += 1u;
        c = (r_lo == r_hi ? a : c) + 0x10000u;  // same word: the second store carries both
        *w_lo = a;
        *w_hi = c;
        p = next;
      }
      since_flush += count;
    }
    flush_counts(counters, m_base, m_total, n_rho, out_cloud);
  }
}

__global__ void __launch_bounds__(kMaxThreads)
    vote_weights_kernel(const float* __restrict__ points, const float* __restrict__ weights,
                        const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                        const float* __restrict__ normals, int64_t m_total, RhoBinning binning,
                        float* __restrict__ out) {
  extern __shared__ float4 vote_smem[];
  float4* tile = vote_smem;
  float* sums = reinterpret_cast<float*>(vote_smem + kTilePoints);  // [n_rho + 1][2T]
  const int threads = blockDim.x;
  const int width = 2 * threads;
  const int32_t n_rho = binning.n_rho;
  const int64_t m_base = int64_t{blockIdx.x} * width;
  const float3 nrm0 = load_normal(normals, m_base + threadIdx.x, m_total);
  const float3 nrm1 = load_normal(normals, m_base + threads + threadIdx.x, m_total);
  float* col0 = sums + threadIdx.x;
  float* col1 = sums + threads + threadIdx.x;

  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    for (int32_t r = 0; r <= n_rho; ++r) col0[r * width] = col1[r * width] = 0.f;
    const int64_t length = cloud_length(lengths, b, n);
    const float* cloud = points + b * n * 3;
    const float* cloud_weights = weights + b * n;
    for (int64_t first = 0; first < length; first += kTilePoints) {
      const int count = static_cast<int>(min(int64_t{kTilePoints}, length - first));
      __syncthreads();
      stage_tile(tile, cloud, cloud_weights, first, count);
      __syncthreads();
      for (int i = 0; i < count; ++i) {
        const float4 p = tile[i];
        float* s0 = col0 + bin_of(nrm0, p, binning) * width;
        float* s1 = col1 + bin_of(nrm1, p, binning) * width;
        const float v0 = *s0, v1 = *s1;  // different columns: never the same word
        *s0 = v0 + p.w;
        *s1 = v1 + p.w;
      }
    }
    __syncthreads();
    float* out_cloud = out + b * m_total * n_rho;
    const int lane = threadIdx.x % kWarpSize;
    for (int local = threadIdx.x / kWarpSize; local < width; local += threads / kWarpSize) {
      const int64_t m = m_base + local;
      if (m >= m_total) continue;
      for (int32_t r = lane; r < n_rho; r += kWarpSize) out_cloud[m * n_rho + r] = sums[r * width + local];
    }
    __syncthreads();
  }
}

template <bool WEIGHTED>
__global__ void vote_global_kernel(const float* __restrict__ points,
                                   const float* __restrict__ weights,
                                   const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                                   const float* __restrict__ normals, int64_t m_total,
                                   RhoBinning binning, void* __restrict__ out) {
  const int64_t m = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (m >= m_total) return;
  const float3 nrm = load_normal(normals, m, m_total);
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const int64_t length = cloud_length(lengths, b, n);
    const float* cloud = points + b * n * 3;
    const int64_t row = (b * m_total + m) * binning.n_rho;
    for (int64_t i = 0; i < length; ++i) {
      float4 p = make_float4(cloud[3 * i], cloud[3 * i + 1], cloud[3 * i + 2],
                             WEIGHTED ? weights[b * n + i] : 1.f);
      if (!(isfinite(p.x) && isfinite(p.y) && isfinite(p.z) && isfinite(p.w))) continue;
      const int32_t r = bin_of(nrm, p, binning);
      if (r == binning.n_rho) continue;
      if constexpr (WEIGHTED) {
        static_cast<float*>(out)[row + r] += p.w;
      } else {
        static_cast<int32_t*>(out)[row + r] += 1;
      }
    }
  }
}

// The normal table as both backends compute it, on the device without blocking the host: a
// pinned staging copy is stream-ordered, and the caching host allocator keeps the buffer alive
// until the copy has run.
at::Tensor device_normals(PlaneLayout layout, int64_t n_phi, int64_t n_theta,
                          const at::Device& device) {
  return hough_detail::plane_normals(layout, n_phi, n_theta).pin_memory().to(device, /*non_blocking=*/true);
}

at::Tensor planes_cuda(PlaneLayout layout, const at::Tensor& points,
                       const std::optional<at::Tensor>& lengths,
                       const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta,
                       double rho_step, double rho_max) {
  const RhoBinning binning =
      hough_detail::check_planes_args(points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t batch = points.size(0), n = points.size(1);
  const at::Tensor pts = points.to(at::kFloat).contiguous();
  const at::Tensor w = weights.has_value() ? weights->to(at::kFloat).contiguous() : at::Tensor();
  const at::Tensor lengths_c = lengths.has_value() ? lengths->contiguous() : at::Tensor();
  const int64_t* lengths_ptr = lengths_c.defined() ? lengths_c.data_ptr<int64_t>() : nullptr;
  const auto shape =
      hough_detail::planes_output_shape(layout, batch, n_phi, n_theta, binning.n_rho);
  at::Tensor out = at::zeros(shape, points.options().dtype(w.defined() ? at::kFloat : at::kInt));
  if (out.numel() == 0 || n == 0) return out;
  const at::Tensor normals = device_normals(layout, n_phi, n_theta, points.device());
  const int64_t m_total = normals.size(0);

  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const int64_t batch_blocks = std::min<int64_t>(batch, 65535);
  const int64_t rows = int64_t{binning.n_rho} + 1;  // + the discard row
  // The widest block whose histograms leave room for two blocks per SM; else one block per SM;
  // else global memory.
  const int64_t half_sm = static_cast<int64_t>(prop->sharedMemPerMultiprocessor) / 2 - 1024;
  const int64_t most = static_cast<int64_t>(prop->sharedMemPerBlockOptin);
  const int64_t words_per_thread = w.defined() ? 2 : 1;
  auto smem_for = [&](int64_t threads) {
    return kTilePoints * int64_t{sizeof(float4)} + rows * threads * words_per_thread * 4;
  };
  int64_t threads = kMaxThreads;
  while (threads > kWarpSize && smem_for(threads) > half_sm) threads /= 2;
  if (smem_for(threads) > most) {
    const int64_t block = 128;
    const dim3 grid(static_cast<unsigned>(cuda::ceil_div(m_total, block)),
                    static_cast<unsigned>(batch_blocks));
    if (w.defined()) {
      vote_global_kernel<true><<<grid, block, 0, stream>>>(
          pts.data_ptr<float>(), w.data_ptr<float>(), lengths_ptr, batch, n,
          normals.data_ptr<float>(), m_total, binning, out.data_ptr());
    } else {
      vote_global_kernel<false><<<grid, block, 0, stream>>>(
          pts.data_ptr<float>(), nullptr, lengths_ptr, batch, n, normals.data_ptr<float>(),
          m_total, binning, out.data_ptr());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  const int smem = static_cast<int>(smem_for(threads));
  const int64_t tiles = cuda::ceil_div(m_total, 2 * threads);
  if (w.defined()) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(vote_weights_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(batch_blocks));
    vote_weights_kernel<<<grid, static_cast<unsigned>(threads), smem, stream>>>(
        pts.data_ptr<float>(), w.data_ptr<float>(), lengths_ptr, batch, n,
        normals.data_ptr<float>(), m_total, binning, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  C10_CUDA_CHECK(cudaFuncSetAttribute(vote_counts_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, vote_counts_kernel, static_cast<int>(threads), smem));
  // Two waves of blocks over (orientation tiles x clouds x point chunks).
  const int64_t wanted = 2 * std::max(1, per_sm) * int64_t{prop->multiProcessorCount};
  const int64_t most_chunks = std::max<int64_t>(1, cuda::ceil_div(n, kMinChunkPoints));
  const int64_t chunks =
      std::clamp<int64_t>(cuda::ceil_div(wanted, tiles * batch_blocks), 1, std::min<int64_t>(most_chunks, 65535));
  const int64_t chunk_points = cuda::round_up(cuda::ceil_div(n, chunks), kTilePoints);
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>(cuda::ceil_div(n, chunk_points)),
                  static_cast<unsigned>(batch_blocks));
  vote_counts_kernel<<<grid, static_cast<unsigned>(threads), smem, stream>>>(
      pts.data_ptr<float>(), lengths_ptr, batch, n, normals.data_ptr<float>(), m_total, binning,
      chunk_points, out.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor hough_planes_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const std::optional<at::Tensor>& weights, int64_t n_phi,
                             int64_t n_theta, double rho_step, double rho_max) {
  return planes_cuda(PlaneLayout::kGrid, points, lengths, weights, n_phi, n_theta, rho_step,
                     rho_max);
}

at::Tensor hough_planes_ball_cuda(const at::Tensor& points,
                                  const std::optional<at::Tensor>& lengths,
                                  const std::optional<at::Tensor>& weights, int64_t n_phi,
                                  int64_t n_theta, double rho_step, double rho_max) {
  return planes_cuda(PlaneLayout::kBall, points, lengths, weights, n_phi, n_theta, rho_step,
                     rho_max);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("hough_planes", &hough_planes_cuda);
  m.impl("hough_planes_ball", &hough_planes_ball_cuda);
}

}  // namespace pointops
