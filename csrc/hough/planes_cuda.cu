// 3D plane Hough accumulators on CUDA (rules in planes.h; the CPU twin is planes_cpu.cpp).
//
// Gather voting, as in plane-detection Hough transforms on GPUs (rather than scattering each
// point's votes with global atomics): a block owns a tile of orientations and their rho histograms
// live in shared memory, laid out [rho][column]; a thread owns whole columns, so a vote is a
// plain shared load, add and store with no atomics and no bank conflicts (lane L always touches
// bank L). Points stream through a shared tile, read as one broadcast float4 each.
//
// Counts (vote_counts_kernel): a column is one 32-bit word holding two 16-bit counters, i.e. two
// orientations per thread (a shared-memory word per orientation pair and rho bin is what bounds
// the orientations resident per SM: 448 for n_rho = 256). Per point a thread computes both rows,
// loads both words, adds (if both rows are the same word the second store carries both
// increments) and stores. The loop is software-pipelined: point i's loads are issued, then point
// i+1's rows are computed (point i+2 is read from the tile), then point i's stores, so the bin
// arithmetic hides the shared-memory latency. The bin is floor(t) from t + 2^23 added with
// round-down (FADD.RM; see vote_row), and the range check plus the discard row is one unsigned
// min, instead of two compares, a select and an F2I (a quarter-rate pipe). A 16-bit counter holds
// at most 65535 votes, so the block flushes its histograms into the output with coalesced integer
// atomics (exact and order-free, hence deterministic) at least every 65535 points, and at the end.
// Rejected votes go to a discard row (bin n_rho) instead of a branch.
// Work: the block width is the one that keeps the most word columns resident (n_rho = 256: one
// 224-thread block of 230 KB per SM); a long rho range (n_rho = 1,000: one warp per SM) is split
// into 256-bin windows, each a pass over the points with 7 warps resident. The grid is
// persistent: the units (cloud, orientation tile and rho window, 64-point tile) are split into
// equal contiguous runs, one per resident block, so all SMs
// finish together whatever the shapes. Point tiles are double-buffered (the next tile's loads are
// in flight while the current one votes): one barrier per 64 points.
//
// What bounds it (SASS and Nsight Compute source counters, sm_90): the inner loop, unrolled over
// a whole tile (so the scheduler can overlap points across what would be unroll boundaries), is
// ~21 instructions per point and thread (2 votes): 3 LDS (2 counter words + the broadcast point),
// 2 STS, 8 FMA-pipe (3 FFMA for t and FADD.RM per orientation: the point is scaled to bins once,
// when staged), 2 VIADDMNMX, 2 IMAD (address), ISETP + SEL + 2 IADD; no F2I. With 7 warps per SM,
// three of the four schedulers run two warps: 42 issue cycles per point there, against one warp's
// load -> add -> store chain of ~45 cycles. So the vote is bound by fixed-latency dependencies (the
// FFMA chains and the add -> select -> store after each load) with too few warps to hide them,
// not by the shared-memory pipe. The flushes (their shared reads conflict 32-way) and the padding
// columns of the last orientation tile (72.3 tiles of 448 for 180 x 180) take a few percent.
// ptxas: 72 registers, no spills; shared memory 2 x 66 x 16 B of point tiles + 257 x 224 x 4 B.
// Rates and the variants measured against this loop: docs/performance.md.
//
// Weighted (vote_weights_kernel): one float per column, two columns (orientations) per thread, and
// one block sees every point of its cloud in order, so each bin is the same float32 sum, in the
// same order, as on the CPU. Accumulators too large for shared memory fall back to
// vote_global_kernel: a thread per orientation updates its own rows in global memory, in point
// order (correct and deterministic, not fast).
#include "hough/planes.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <torch/library.h>

#include <algorithm>
#include <string>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/float_bits.h"
#include "common/launch.cuh"
#include "hough/plane_tables.h"

namespace pointops {
namespace {

using cuda::kWarpSize;
using hough_detail::PlaneLayout;
using hough_detail::RhoBinning;

constexpr int kTilePoints = 256;  // vote_weights_kernel's point tile
constexpr int kMaxThreads = 256;

// vote_counts_kernel: points per staged tile, and the tile's stride in float4 (two spare entries
// that the software pipeline may read past the tile's end, never used).
constexpr int kCountTile = 64;
constexpr int kCountTileStride = kCountTile + 2;
// Rho bins per window when n_rho is split (see planes_cuda), and the most rho bins the counts
// kernel takes: its binning is exact below 2^23.
constexpr int64_t kRhoWindow = 256;
constexpr int32_t kMaxWindowedRhoBins = 1 << 22;
// Flush before a 16-bit counter could pass 65535: at most 65535 points between flushes.
constexpr int64_t kFlushPoints = 65535;
// float32 2^23: for 0 <= t < 2^23, t + 2^23 rounded down is 2^23 + floor(t), whose low mantissa
// bits are floor(t).
constexpr float kTwo23 = 8388608.f;
constexpr uint32_t kTwo23Bits = 0x4b000000u;

// Loads point `row` of a cloud (row >= end: x = NaN, no vote) with no check, so that the loads
// stay in flight until binned_point() reads them.
__device__ __forceinline__ float4 fetch_point(const float* cloud, int64_t row, int64_t end) {
  float4 p = make_float4(nanf(""), 0.f, 0.f, 1.f);
  if (row < end) {
    p.x = cloud[3 * row];
    p.y = cloud[3 * row + 1];
    p.z = cloud[3 * row + 2];
  }
  return p;
}

// A fetched point as the vote loops read it: coordinates in rho bins (to_bins), and x = NaN,
// which every normal rejects, when a coordinate is NaN/Inf.
__device__ __forceinline__ float4 binned_point(float4 p, const RhoBinning& binning) {
  if (!(isfinite(p.x) && isfinite(p.y) && isfinite(p.z))) p.x = nanf("");
  p.x = hough_detail::to_bins(p.x, binning);
  p.y = hough_detail::to_bins(p.y, binning);
  p.z = hough_detail::to_bins(p.z, binning);
  return p;
}

// Stages points [first, first + count) of a cloud (binned_point, weight in w; a non-finite
// weight: no vote) into tile[0, kTilePoints).
__device__ __forceinline__ void stage_tile(float4* tile, const float* cloud, const float* weights, int64_t first,
                                           int64_t count, const RhoBinning& binning) {
  for (int i = threadIdx.x; i < kTilePoints; i += blockDim.x) {
    float4 p = make_float4(nanf(""), 0.f, 0.f, 0.f);
    if (i < count) {
      const int64_t row = first + i;
      p.x = cloud[3 * row];
      p.y = cloud[3 * row + 1];
      p.z = cloud[3 * row + 2];
      p.w = weights == nullptr ? 1.f : weights[row];
      if (!isfinite(p.w)) p.x = nanf("");
      p = binned_point(p, binning);
    }
    tile[i] = p;
  }
}

__device__ __forceinline__ float3 load_normal(const float* normals, int64_t m, int64_t m_total) {
  if (m >= m_total) return make_float3(nanf(""), 0.f, 0.f);  // a padding column: never votes
  return make_float3(normals[3 * m], normals[3 * m + 1], normals[3 * m + 2]);
}

__device__ __forceinline__ int32_t bin_of(float3 nrm, float4 p, const RhoBinning& binning) {
  return hough_detail::rho_bin(nrm.x, nrm.y, nrm.z, p.x, p.y, p.z, binning);
}

// The counter row of binned point p for normal nrm: rho_bin()'s bin, or n_rho (the discard row)
// for a rejected vote. t is rho_bin()'s, bit for bit; the bin floor(t) + floor_half comes from the
// float32 sum t + (2^23 + floor_half) rounded down (FADD.RM) instead of a floor and a conversion
// (F2I, a quarter-rate pipe): with the integer 2^23 + floor_half, a sum in [2^23, 2^24) rounds down
// to 2^23 + floor(t) + floor_half, whose bits are 0x4b000000 + the bin. Every rejected t lands
// outside [0x4b000000, 0x4b000000 + n_rho) as an unsigned difference: a bin below 0 gives a sum
// below 2^23 (or a negative float: sign bit set), a bin of n_rho or more a sum of at least
// 2^23 + n_rho, NaN a NaN (exponent all ones); so one unsigned min (VIADDMNMX.U32, fused with the
// subtraction) both checks the range and picks the discard row.
// With rho windows (vote_counts_kernel), the row is relative to the window's first bin w0: base =
// 0x4b000000 + w0 and limit = the window's rows, which is also its discard row; bins past n_rho in
// a last, partial window land in rows that are never flushed.
__device__ __forceinline__ uint32_t vote_row(float3 nrm, float4 p, const RhoBinning& binning, uint32_t base,
                                             uint32_t limit) {
  const float t =
      fused_multiply_add(nrm.z, p.z, fused_multiply_add(nrm.y, p.y, fused_multiply_add(nrm.x, p.x, binning.frac)));
  const uint32_t bits = float_bits(__fadd_rd(t, kTwo23 + static_cast<float>(binning.floor_half)));
  return min(bits - base, limit);
}

// Shared-memory word access by 32-bit shared-window address, so that a vote's address is one
// IMAD (row * stride + column). The "memory" clobber keeps these in program order with every other
// memory access, as plain loads and stores would be.
__device__ __forceinline__ uint32_t load_shared(uint32_t address) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(address) : "memory");
  return v;
}

__device__ __forceinline__ void store_shared(uint32_t address, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(address), "r"(v) : "memory");
}

// Adds the block's 16-bit histograms into out (one cloud's rows), then clears this thread's
// column. Word column c holds orientation m_base + c (low half) and m_base + T + c (high half).
// A warp per column and a lane per rho bin, so the global atomics coalesce; the shared reads
// conflict (a column's words share a bank), which costs ~2% of the votes between flushes.
// Rows [0, rows) of the block's counters are bins [w0, w0 + rows) of the output; all `window` + 1
// counter rows are cleared.
__device__ __forceinline__ void flush_counts(uint32_t* counters, int64_t m_base, int64_t m_total, int32_t n_rho,
                                             int32_t w0, int32_t rows, int32_t window, int32_t* out_cloud) {
  __syncthreads();
  const int threads = blockDim.x;
  const int lane = threadIdx.x % kWarpSize;
  for (int column = threadIdx.x / kWarpSize; column < threads; column += threads / kWarpSize) {
    const int64_t m_lo = m_base + column, m_hi = m_base + threads + column;
    if (m_lo >= m_total) continue;
    int32_t* row_lo = out_cloud + m_lo * n_rho + w0;
    int32_t* row_hi = out_cloud + m_hi * n_rho + w0;
    const bool has_hi = m_hi < m_total;
    for (int32_t r = lane; r < rows; r += kWarpSize) {
      const uint32_t word = counters[r * threads + column];
      const uint32_t lo = word & 0xffffu, hi = word >> 16;
      if (lo != 0) atomicAdd(row_lo + r, static_cast<int32_t>(lo));
      if (has_hi && hi != 0) atomicAdd(row_hi + r, static_cast<int32_t>(hi));
    }
  }
  __syncthreads();
  for (int32_t r = 0; r <= window; ++r) counters[r * threads + threadIdx.x] = 0;
}

// Counts. The work is a list of units (cloud b, tile, 64-point tile), tile-major per cloud, where a
// tile is an orientation tile and a rho window of `window` bins (tile = orientation tile *
// n_windows + window index; one window of n_rho bins unless n_rho is too large for enough
// resident columns); block k takes the contiguous run [k U / G, (k+1) U / G) (a persistent grid, G = the
// resident blocks), so every SM gets the same number of point-orientation pairs whatever the
// shapes. A block flushes when its run moves to another (cloud, tile), before a
// 16-bit counter could overflow, and at the end. Point tiles are double-buffered: the next tile's
// points are loaded from global memory into registers while the current tile votes, then stored;
// one barrier per tile.
__global__ void __launch_bounds__(kMaxThreads, 1)
    vote_counts_kernel(const float* __restrict__ points, const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                       const float* __restrict__ normals, int64_t m_total, RhoBinning binning, int64_t n_tiles,
                       int32_t window, int64_t n_windows, int32_t* __restrict__ out) {
  extern __shared__ float4 vote_smem[];
  float4* tiles = vote_smem;  // [2][kCountTileStride]
  uint32_t* counters = reinterpret_cast<uint32_t*>(vote_smem + 2 * kCountTileStride);
  const int threads = blockDim.x;
  const int32_t n_rho = binning.n_rho;
  const uint32_t stride = 4u * static_cast<uint32_t>(threads);
  const uint32_t column = static_cast<uint32_t>(__cvta_generic_to_shared(counters)) + 4u * threadIdx.x;

  const int64_t point_tiles = cuda::ceil_div(n, kCountTile);
  const int64_t units = batch * n_tiles * point_tiles;
  const int64_t u_end = units * (blockIdx.x + 1) / gridDim.x;
  // The block's position: unit u = ((b * n_tiles) + tile) * point_tiles + first / kCountTile,
  // kept incrementally (no 64-bit divisions per tile). Units past a cloud's length are skipped.
  struct Cursor {
    int64_t u, group_end, b, tile, first, length;
  } cur;
  {
    cur.u = units * blockIdx.x / gridDim.x;
    const int64_t group = cur.u / point_tiles;
    cur.group_end = (group + 1) * point_tiles;
    cur.b = group / n_tiles;
    cur.tile = group - cur.b * n_tiles;
    cur.first = (cur.u - group * point_tiles) * kCountTile;
    cur.length = cur.u < u_end ? cloud_length(lengths, cur.b, n) : 0;
  }
  // Moves c to its first unit that has points, or to u_end.
  auto settle = [&](Cursor& c) {
    while (c.u < u_end && c.first >= c.length) {
      c.u = c.group_end;
      c.group_end += point_tiles;
      c.first = 0;
      if (++c.tile == n_tiles) {
        c.tile = 0;
        ++c.b;
        c.length = c.u < u_end ? cloud_length(lengths, c.b, n) : 0;
      }
    }
  };
  // This thread's points of c's tile (thread t stages points t and t + T; T >= kCountTile / 2).
  auto fetch = [&](const Cursor& c, float4(&p)[2]) {
    const float* cloud = points + c.b * n * 3;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = threadIdx.x + j * threads;
      if (i < kCountTile) p[j] = fetch_point(cloud, c.first + i, c.length);
    }
  };
  auto stage = [&](float4* tile, const float4(&p)[2]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = threadIdx.x + j * threads;
      if (i < kCountTile) tile[i] = binned_point(p[j], binning);
    }
  };

  for (int32_t r = 0; r <= window; ++r) counters[r * threads + threadIdx.x] = 0;
  settle(cur);
  if (cur.u >= u_end) return;
  float4 staged[2];
  fetch(cur, staged);
  stage(tiles, staged);
  // The tile's orientations and rho window.
  int64_t m_base = 0;
  int32_t w0 = 0, w_rows = 0;
  uint32_t base = 0;
  auto enter = [&](int64_t tile) {
    const int64_t orientation_tile = tile / n_windows;
    m_base = orientation_tile * 2 * threads;
    w0 = static_cast<int32_t>(tile - orientation_tile * n_windows) * window;
    w_rows = min(window, n_rho - w0);
    base = kTwo23Bits + static_cast<uint32_t>(w0);
  };
  enter(cur.tile);
  const uint32_t limit = static_cast<uint32_t>(window);
  float3 lo = load_normal(normals, m_base + threadIdx.x, m_total);
  float3 hi = load_normal(normals, m_base + threads + threadIdx.x, m_total);
  __syncthreads();
  int buffer = 0;
  int64_t since_flush = 0;
  while (true) {
    Cursor next = cur;
    ++next.u;
    next.first += kCountTile;
    if (next.u == next.group_end) next.first = next.length;  // the group is done: settle moves on
    settle(next);
    const bool last = next.u >= u_end;
    if (!last) fetch(next, staged);  // in flight while this tile votes

    // Vote the 64 points of this tile (padding points are NaN: the discard row). Software
    // pipelined: point i's counter words are read before point i+1's rows are computed and point
    // i+2 is read from the tile, so the bin arithmetic overlaps the shared-memory latency. Same
    // word for both orientations: the second store carries both increments. (Choosing the high
    // increment from the rows instead, off the load -> store chain, measured slower.)
    const float4* tile = tiles + buffer * kCountTileStride;
    float4 q = tile[1];
    uint32_t row_lo = vote_row(lo, tile[0], binning, base, limit);
    uint32_t row_hi = vote_row(hi, tile[0], binning, base, limit);
#pragma unroll
    for (int i = 0; i < kCountTile; ++i) {
      const uint32_t at_lo = row_lo * stride + column;  // one IMAD each
      const uint32_t at_hi = row_hi * stride + column;
      uint32_t a = load_shared(at_lo);
      uint32_t c = load_shared(at_hi);
      const float4 q2 = tile[i + 2];  // i + 2 <= kCountTile + 1 < kCountTileStride
      const uint32_t next_lo = vote_row(lo, q, binning, base, limit);
      const uint32_t next_hi = vote_row(hi, q, binning, base, limit);
      a += 1u;
      c = (row_lo == row_hi ? a : c) + 0x10000u;
      store_shared(at_lo, a);
      store_shared(at_hi, c);
      row_lo = next_lo;
      row_hi = next_hi;
      q = q2;
    }
    since_flush += kCountTile;

    const bool new_group = last || next.b != cur.b || next.tile != cur.tile;
    if (!last) stage(tiles + (buffer ^ 1) * kCountTileStride, staged);
    if (new_group || since_flush + kCountTile > kFlushPoints) {
      flush_counts(counters, m_base, m_total, n_rho, w0, w_rows, window,
                   out + cur.b * m_total * n_rho);  // its barriers also publish the staged tile
      since_flush = 0;
    } else {
      __syncthreads();
    }
    if (last) break;
    if (new_group) {
      enter(next.tile);
      lo = load_normal(normals, m_base + threadIdx.x, m_total);
      hi = load_normal(normals, m_base + threads + threadIdx.x, m_total);
    }
    cur = next;
    buffer ^= 1;
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
      stage_tile(tile, cloud, cloud_weights, first, count, binning);
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
__global__ void vote_global_kernel(const float* __restrict__ points, const float* __restrict__ weights,
                                   const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                                   const float* __restrict__ normals, int64_t m_total, RhoBinning binning,
                                   void* __restrict__ out) {
  const int64_t m = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (m >= m_total) return;
  const float3 nrm = load_normal(normals, m, m_total);
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const int64_t length = cloud_length(lengths, b, n);
    const float* cloud = points + b * n * 3;
    const int64_t row = (b * m_total + m) * binning.n_rho;
    for (int64_t i = 0; i < length; ++i) {
      float4 p = make_float4(cloud[3 * i], cloud[3 * i + 1], cloud[3 * i + 2], WEIGHTED ? weights[b * n + i] : 1.f);
      if (!isfinite(p.w)) continue;
      const int32_t r = bin_of(nrm, binned_point(p, binning), binning);
      if (r == binning.n_rho) continue;
      if constexpr (WEIGHTED) {
        static_cast<float*>(out)[row + r] += p.w;
      } else {
        static_cast<int32_t*>(out)[row + r] += 1;
      }
    }
  }
}

// The layout's normals (plane_normals(), the table both backends vote with) on the device, made
// once per grid and device (plane_tables.h): a call copies nothing from the host.
at::Tensor device_normals(PlaneLayout layout, int64_t n_phi, int64_t n_theta, const at::Device& device) {
  const bool capturing = c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
  const std::string key = std::string("vote normals ") + (layout == PlaneLayout::kGrid ? "grid " : "ball ") +
                          std::to_string(n_phi) + " x " + std::to_string(n_theta);
  return hough_detail::cached_table(key, device, capturing,
                                    [&] { return hough_detail::plane_normals(layout, n_phi, n_theta); });
}

at::Tensor planes_cuda(PlaneLayout layout, const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                       const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta, double rho_step,
                       double rho_max) {
  const RhoBinning binning =
      hough_detail::check_planes_args(points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t batch = points.size(0), n = points.size(1);
  const at::Tensor pts = points.to(at::kFloat).contiguous();
  const at::Tensor w = weights.has_value() ? weights->to(at::kFloat).contiguous() : at::Tensor();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* lengths_ptr = lengths_c.data;
  const auto shape = hough_detail::planes_output_shape(layout, batch, n_phi, n_theta, binning.n_rho);
  at::Tensor out = at::zeros(shape, points.options().dtype(w.defined() ? at::kFloat : at::kInt));
  if (out.numel() == 0 || n == 0) return out;
  const at::Tensor normals = device_normals(layout, n_phi, n_theta, points.device());
  const int64_t m_total = normals.size(0);

  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const int64_t batch_blocks = std::min<int64_t>(batch, 65535);
  const int64_t rows = int64_t{binning.n_rho} + 1;  // + the discard row
  const int64_t most = static_cast<int64_t>(prop->sharedMemPerBlockOptin);
  // Counts: 16-bit counter pairs, one word column per thread and window row (+ the discard row),
  // after two point tiles.
  auto count_smem = [&](int64_t threads, int64_t window) {
    return 2 * kCountTileStride * int64_t{sizeof(float4)} + (window + 1) * threads * 4;
  };
  // Weighted: the widest block whose histograms leave room for two blocks per SM; else one block
  // per SM.
  const int64_t half_sm = static_cast<int64_t>(prop->sharedMemPerMultiprocessor) / 2 - 1024;
  auto weight_smem = [&](int64_t threads) { return kTilePoints * int64_t{sizeof(float4)} + rows * threads * 2 * 4; };
  int64_t weight_threads = kMaxThreads;
  while (weight_threads > kWarpSize && weight_smem(weight_threads) > half_sm) weight_threads /= 2;
  // Else global memory: weights too wide for shared memory, or counts with so many rho bins that
  // the counts kernel's binning (exact for bins below 2^23) cannot take them.
  if (w.defined() ? weight_smem(weight_threads) > most : binning.n_rho >= kMaxWindowedRhoBins) {
    const int64_t block = 128;
    const dim3 grid(static_cast<unsigned>(cuda::ceil_div(m_total, block)), static_cast<unsigned>(batch_blocks));
    if (w.defined()) {
      vote_global_kernel<true><<<grid, block, 0, stream>>>(pts.data_ptr<float>(), w.data_ptr<float>(), lengths_ptr,
                                                           batch, n, normals.data_ptr<float>(), m_total, binning,
                                                           out.data_ptr());
    } else {
      vote_global_kernel<false><<<grid, block, 0, stream>>>(pts.data_ptr<float>(), nullptr, lengths_ptr, batch, n,
                                                            normals.data_ptr<float>(), m_total, binning,
                                                            out.data_ptr());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  if (w.defined()) {
    const int smem = static_cast<int>(weight_smem(weight_threads));
    const int64_t tiles = cuda::ceil_div(m_total, 2 * weight_threads);
    cuda::set_dynamic_smem(vote_weights_kernel, smem);
    const dim3 grid(static_cast<unsigned>(tiles), 1, static_cast<unsigned>(batch_blocks));
    vote_weights_kernel<<<grid, static_cast<unsigned>(weight_threads), smem, stream>>>(
        pts.data_ptr<float>(), w.data_ptr<float>(), lengths_ptr, batch, n, normals.data_ptr<float>(), m_total, binning,
        out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  // Counts: for a rho window, the block width (a whole number of warps, no wider than the
  // orientations need) that keeps the most word columns resident per SM; the first such, i.e.
  // the narrowest, on a tie. With n_rho = 256 that is one 224-thread block per SM (230 KB: 7
  // warps, 448 orientations). The window is all n_rho bins, or kRhoWindow bins when n_rho is so
  // large that few warps stay resident: each window re-reads the points, but up to ~7 resident
  // warps the vote rate grows with the warps (their load-add-store chains overlap), so the
  // layout with the larger min(warps, 7) / windows wins (n_rho = 1000: 1 warp in one window, 7
  // in four windows of 256).
  cuda::set_dynamic_smem(vote_counts_kernel, most);
  const int64_t widest = std::min<int64_t>(kMaxThreads, cuda::round_up(cuda::ceil_div(m_total, 2), kWarpSize));
  struct CountLayout {
    int64_t window = 0, n_windows = 0, threads = 0, resident = 0;
    int per_sm = 0;
    double score() const { return threads == 0 ? 0.0 : std::min(resident / double(kWarpSize), 7.0) / n_windows; }
  };
  auto layout_for = [&](int64_t window) {
    CountLayout c;
    c.window = window;
    c.n_windows = cuda::ceil_div(binning.n_rho, window);
    for (int64_t t = kWarpSize; t <= widest && count_smem(t, window) <= most; t += kWarpSize) {
      const int blocks =
          cuda::blocks_per_sm(vote_counts_kernel, static_cast<int>(t), static_cast<size_t>(count_smem(t, window)));
      if (t * blocks > c.resident) {
        c.threads = t;
        c.resident = t * blocks;
        c.per_sm = blocks;
      }
    }
    return c;
  };
  CountLayout chosen = layout_for(binning.n_rho);
  if (binning.n_rho > kRhoWindow) {
    const CountLayout windowed = layout_for(kRhoWindow);
    if (windowed.score() > chosen.score()) chosen = windowed;
  }
  const int64_t threads = chosen.threads;
  TORCH_CHECK(threads > 0, "hough_planes: no resident block fits the accumulator");
  const int smem = static_cast<int>(count_smem(threads, chosen.window));
  const int64_t n_tiles = cuda::ceil_div(m_total, 2 * threads) * chosen.n_windows;
  const int64_t units = batch * n_tiles * cuda::ceil_div(n, kCountTile);
  const int64_t grid =
      std::clamp<int64_t>(int64_t{chosen.per_sm} * prop->multiProcessorCount, 1, std::min<int64_t>(units, 1 << 30));
  vote_counts_kernel<<<static_cast<unsigned>(grid), static_cast<unsigned>(threads), smem, stream>>>(
      pts.data_ptr<float>(), lengths_ptr, batch, n, normals.data_ptr<float>(), m_total, binning, n_tiles,
      static_cast<int32_t>(chosen.window), chosen.n_windows, out.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor hough_planes_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta, double rho_step,
                             double rho_max) {
  return planes_cuda(PlaneLayout::kGrid, points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
}

at::Tensor hough_planes_ball_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                  const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta,
                                  double rho_step, double rho_max) {
  return planes_cuda(PlaneLayout::kBall, points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("hough_planes", &hough_planes_cuda);
  m.impl("hough_planes_ball", &hough_planes_ball_cuda);
}

}  // namespace pointops
