// 2D circle Hough accumulator on CUDA (rules in circles.h; the CPU twin is circles_cpu.cpp).
//
// Layout: the accumulator is cut into tiles of (a few radii) x (a band of TB centre rows) x (the
// image width, or 2,048-column tiles of very wide images); one block owns a tile in shared memory
// and writes it out once, so the output needs no memset and no global atomics, and a vote is one
// shared-memory atomic add.
//
// Edges binned by row: a first pass counts the points of each (image, row), one CUB exclusive sum
// gives each row's first slot, and a second pass writes the points, packed (x | y << 16), into
// their row's slots. (Slots within a row are taken by atomics, so their order varies from run to
// run; the accumulator does not: it sums integers.) A block then reads exactly the points within
// r_max rows of its band: one contiguous run of the binned list.
//
// Votes without waste: the offset table (circles.h) is sorted by dy within each radius, so the
// offsets of a point that land in the band's rows are one contiguous run of the table,
// [dy_index[max(-r, y0 - y)], dy_index[min(r, y1 - y) + 1]). Each warp sets up 32 (point, radius)
// pairs at once, one per lane (the run, the shared address of the point's (0, 0) offset), then
// walks the non-empty runs one after the other, a lane per offset: ~2.8 TB offsets per run for a
// band of TB rows (two arcs of TB rows each, longer near the circle's top and bottom), so with
// TB = 32 a run is ~3 full passes of the warp. Only the image's left and right borders reject votes.
//
// Banks: a tile row is `stride` words with stride = 1 (mod 32). Consecutive offsets of a run
// mostly step one row with nearly the same column (the circle's steep arcs), which would put a
// warp's 32 votes in a handful of banks with a stride of 0 (mod 32); with 1 (mod 32) they spread.
//
// Gradient mode: each (point, radius) pair becomes two, one per direction (+g, -g); a pair's run
// is first cut to a conservative bound of the rows its wedge can reach (|o| in [r - 1, r + 1], the
// wedge widened by 0.01 rad, 2 rows of margin: Bresenham offsets are within 0.5 of r), so a band
// the wedge misses costs nothing, and the exact test along_gradient() then decides each vote.
//
// Weighted votes: the same kernel with int64 counters (fixed-point sums, edges.h), half as many
// per tile.
//
// hough_circles_max_points (circle_best_kernel): the same vote loop, one radius at a time into a
// one-radius tile, each radius folded into a per-centre best (ordered score key, radius byte) in
// shared memory; chunks of radii meet through 64-bit atomicMax keys. The (B, R, H, W) accumulator
// is never written (at 512^2 with 61 radii: 64 MB of writes and as many reads by max(1) saved).
//
// What bounds it: the votes. 512 x 512 with 6,059 edge points and radii 40..100 is 1.5e8 shared
// atomic adds (plus ~10 instructions each: the table load, unpacking, the border test, the
// address); the accumulator write-out is 64 MB (61 x 512 x 512 int32) at HBM bandwidth. The
// binning and the point reads (each band reads the points of its 2 r_max + TB rows) are small.
#include "hough/circles.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"

namespace pointops {
namespace {

using cuda::kFullMask;
using cuda::kWarpSize;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kBinThreads = 256;
constexpr float kWedgeWidening = 0.01f;  // radians added to max_angle for the row bound

// ---- binning by row ----

template <typename index_t>
__device__ __forceinline__ bool binned_point(const index_t* points, const int64_t* lengths, const float* weights,
                                             int64_t i, int64_t n, int32_t height, int32_t width, int64_t& b,
                                             int32_t& x, int32_t& y, int64_t& fixed) {
  b = i / n;
  if (i - b * n >= cloud_length(lengths, b, n)) return false;
  if (!hough_images::point_in_image(points + 2 * i, height, width, x, y)) return false;
  fixed = weights == nullptr ? 1 : hough_images::weight_to_fixed(weights[i]);
  return fixed != 0;  // a zero weight adds nothing
}

template <typename index_t>
__global__ void __launch_bounds__(kBinThreads)
    count_rows_kernel(const index_t* __restrict__ points, const int64_t* __restrict__ lengths,
                      const float* __restrict__ weights, int64_t total, int64_t n, int32_t height, int32_t width,
                      int32_t* __restrict__ row_count) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t b, fixed;
    int32_t x, y;
    if (binned_point(points, lengths, weights, i, n, height, width, b, x, y, fixed)) {
      atomicAdd(row_count + b * height + y, 1);
    }
  }
}

template <typename index_t>
__global__ void __launch_bounds__(kBinThreads)
    fill_rows_kernel(const index_t* __restrict__ points, const int64_t* __restrict__ lengths,
                     const float* __restrict__ weights, const float* __restrict__ gradients, int64_t total, int64_t n,
                     int32_t height, int32_t width, const int32_t* __restrict__ row_start,
                     int32_t* __restrict__ row_fill, uint32_t* __restrict__ packed, int64_t* __restrict__ fixed_out,
                     float2* __restrict__ gradients_out) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t b, fixed;
    int32_t x, y;
    if (!binned_point(points, lengths, weights, i, n, height, width, b, x, y, fixed)) continue;
    const int64_t row = b * height + y;
    const int32_t slot = row_start[row] + atomicAdd(row_fill + row, 1);
    packed[slot] = static_cast<uint32_t>(x) | static_cast<uint32_t>(y) << 16;
    if (fixed_out != nullptr) fixed_out[slot] = fixed;
    if (gradients_out != nullptr) gradients_out[slot] = make_float2(gradients[2 * i], gradients[2 * i + 1]);
  }
}

// ---- votes ----

struct CircleLaunch {
  const uint32_t* packed;    // binned points
  const int32_t* row_start;  // (B * height + 1) first slot of each (image, row)
  const int64_t* fixed;      // binned fixed-point weights (int64 counters only)
  const float2* gradients;   // binned gradients (gradient mode only)
  const int32_t* info;       // the circle table (circles.h), on the device
  const int32_t* entries;
  const int32_t* dy_index;
  int32_t n_radii, height, width;
  int32_t tile_rows, radii_per_block, tile_width, stride;
  int32_t n_bands, n_groups, n_col_tiles;
  float tan_angle;             // gradient mode: float32(tan(max_angle))
  float cos_bound, sin_bound;  // of max_angle + kWedgeWidening, for the row bound
  bool prune;                  // the row bound applies (the widened angle is below pi / 2)
};

__device__ __forceinline__ void shared_add(int32_t* address, int32_t v) { atomicAdd(address, v); }

__device__ __forceinline__ void shared_add(int64_t* address, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(v));
}

// Rows [lo, hi] of the centres that offsets within the widened wedge around sign * g can reach
// from a point, for radius r (a superset of those along_gradient() accepts; see the header).
__device__ __forceinline__ void wedge_rows(float gx, float gy, int sign, int32_t r, const CircleLaunch& a, int32_t& lo,
                                           int32_t& hi) {
  const float m = fmaxf(fabsf(gx), fabsf(gy));  // scaled first: no overflow in the norm
  const float sx = gx / m, sy = gy / m;
  const float inv = rsqrtf(sx * sx + sy * sy);
  const float ux = sign * sx * inv, uy = sign * sy * inv;
  // sin of the wedge's two edge angles; the wedge contains +-pi/2 where uy is within the
  // widened angle of +-1.
  const float s1 = uy * a.cos_bound - ux * a.sin_bound, s2 = uy * a.cos_bound + ux * a.sin_bound;
  float s_lo = fminf(s1, s2), s_hi = fmaxf(s1, s2);
  if (uy >= a.cos_bound) s_hi = 1.f;
  if (-uy >= a.cos_bound) s_lo = -1.f;
  const float near = static_cast<float>(max(r - 1, 0)), far = static_cast<float>(r + 1);
  lo = static_cast<int32_t>(floorf(fminf(s_lo * near, s_lo * far))) - 2;
  hi = static_cast<int32_t>(ceilf(fmaxf(s_hi * near, s_hi * far))) + 2;
}

// The votes of radii [i0, i0 + nr) into a shared tile acc [nr][tile_rows][stride] that holds
// centre rows [y0, y0 + rows) and columns [x0, x0 + cols) of image b, from the binned points
// [first, last) (those within reach of the band's rows). Every thread of the block calls it.
template <typename acc_t, bool kGradient>
__device__ __forceinline__ void vote_tile(const CircleLaunch& a, acc_t* acc, int64_t b, int32_t y0, int32_t rows,
                                          int32_t x0, int32_t cols, int32_t i0, int32_t nr, int32_t first,
                                          int32_t last) {
  constexpr int kSides = kGradient ? 2 : 1;
  const int32_t per_point = nr * kSides;
  const int64_t pairs = int64_t{last - first} * per_point;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t base = int64_t{warp} * kWarpSize; base < pairs; base += int64_t{kWarps} * kWarpSize) {
    // Lane l sets up pair base + l: its run [t0, t1) of the table, the shared address `at` of the
    // point's (0, 0) offset, its column in the tile, its vote and gradient.
    int32_t t0 = 0, t1 = 0, at = 0, col = 0;
    acc_t vote = 1;
    float gx = 0.f, gy = 0.f;
    int sign = 0;
    const int64_t p = base + lane;
    if (p < pairs) {
      const int32_t point = first + static_cast<int32_t>(p / per_point);
      const int32_t rem = static_cast<int32_t>(p % per_point);
      const int32_t ri = rem / kSides;
      const uint32_t xy = a.packed[point];
      const int32_t x = static_cast<int32_t>(xy & 0xffffu), y = static_cast<int32_t>(xy >> 16);
      const int32_t r = a.info[4 * (i0 + ri)], dy_base = a.info[4 * (i0 + ri) + 3];
      int32_t dy_lo = max(-r, y0 - y), dy_hi = min(r, y0 + rows - 1 - y);
      bool live = x + r >= x0 && x - r < x0 + cols;
      if constexpr (kGradient) {
        sign = rem % kSides == 0 ? 1 : -1;
        const float2 g = a.gradients[point];
        gx = g.x;
        gy = g.y;
        live = live && hough_images::gradient_usable(gx, gy);
        if (live && a.prune) {
          int32_t w_lo, w_hi;
          wedge_rows(gx, gy, sign, r, a, w_lo, w_hi);
          dy_lo = max(dy_lo, w_lo);
          dy_hi = min(dy_hi, w_hi);
        }
      }
      if constexpr (std::is_same_v<acc_t, int64_t>) vote = a.fixed[point];
      if (live && dy_lo <= dy_hi) {
        t0 = a.dy_index[dy_base + dy_lo + r];
        t1 = a.dy_index[dy_base + dy_hi + r + 1];
        col = x - x0;
        at = (ri * a.tile_rows + (y - y0)) * a.stride + col;
      }
    }
    uint32_t pending = __ballot_sync(kFullMask, t0 < t1);
    while (pending != 0) {
      const int j = __ffs(pending) - 1;
      pending &= pending - 1;
      const int32_t j_t0 = __shfl_sync(kFullMask, t0, j), j_t1 = __shfl_sync(kFullMask, t1, j);
      const int32_t j_at = __shfl_sync(kFullMask, at, j), j_col = __shfl_sync(kFullMask, col, j);
      acc_t j_vote = 1;
      if constexpr (std::is_same_v<acc_t, int64_t>) {
        j_vote = __shfl_sync(kFullMask, static_cast<long long>(vote), j);
      }
      float j_gx = 0.f, j_gy = 0.f;
      int j_sign = 0;
      if constexpr (kGradient) {
        j_gx = __shfl_sync(kFullMask, gx, j);
        j_gy = __shfl_sync(kFullMask, gy, j);
        j_sign = __shfl_sync(kFullMask, sign, j);
      }
#pragma unroll 4
      for (int32_t t = j_t0 + lane; t < j_t1; t += kWarpSize) {
        const int32_t e = __ldg(a.entries + t);
        const int32_t dx = hough_images::offset_dx(e), dy = hough_images::offset_dy(e);
        bool vote_here = static_cast<uint32_t>(j_col + dx) < static_cast<uint32_t>(cols);
        if constexpr (kGradient) {
          vote_here = vote_here && hough_images::along_gradient(dx, dy, j_gx, j_gy, a.tan_angle, j_sign);
        }
        if (vote_here) shared_add(acc + (j_at + dy * a.stride + dx), j_vote);
      }
    }
  }
}

// The binned points within reach of centre rows [y0, y0 + rows) for radius r_max: [first, last).
__device__ __forceinline__ void points_in_reach(const CircleLaunch& a, int64_t b, int32_t y0, int32_t rows,
                                                int32_t r_max, int32_t& first, int32_t& last) {
  const int32_t lo_row = max(0, y0 - r_max), hi_row = min(a.height - 1, y0 + rows - 1 + r_max);
  const int32_t* row_start = a.row_start + b * a.height;
  first = row_start[lo_row];
  last = row_start[hi_row + 1];
}

template <typename acc_t, bool kGradient>
__global__ void __launch_bounds__(kThreads) circle_votes_kernel(CircleLaunch a, acc_t* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char circle_smem[];
  acc_t* acc = reinterpret_cast<acc_t*>(circle_smem);
  int64_t id = blockIdx.x;
  const int32_t col_tile = static_cast<int32_t>(id % a.n_col_tiles);
  id /= a.n_col_tiles;
  const int32_t band = static_cast<int32_t>(id % a.n_bands);
  id /= a.n_bands;
  const int32_t group = static_cast<int32_t>(id % a.n_groups);
  const int64_t b = id / a.n_groups;
  const int32_t y0 = band * a.tile_rows, rows = min(a.tile_rows, a.height - y0);
  const int32_t x0 = col_tile * a.tile_width, cols = min(a.tile_width, a.width - x0);
  const int32_t i0 = group * a.radii_per_block, nr = min(a.radii_per_block, a.n_radii - i0);

  const int32_t tile_words = a.radii_per_block * a.tile_rows * a.stride;
  for (int32_t i = threadIdx.x; i < tile_words; i += kThreads) acc[i] = 0;
  int32_t r_max = 0;
  for (int32_t i = 0; i < nr; ++i) r_max = max(r_max, a.info[4 * (i0 + i)]);
  int32_t first, last;
  points_in_reach(a, b, y0, rows, r_max, first, last);
  __syncthreads();
  vote_tile<acc_t, kGradient>(a, acc, b, y0, rows, x0, cols, i0, nr, first, last);
  __syncthreads();

  // Write the tile: a warp per row, coalesced along x.
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int32_t rr = warp; rr < nr * rows; rr += kWarps) {
    const int32_t ri = rr / rows, t = rr - ri * rows;
    const acc_t* src = acc + (ri * a.tile_rows + t) * a.stride;
    acc_t* dst = out + ((b * a.n_radii + i0 + ri) * a.height + y0 + t) * int64_t{a.width} + x0;
    for (int32_t c = lane; c < cols; c += kWarpSize) dst[c] = src[c];
  }
}

// hough_circles_max_points: a block owns centre rows [y0, y0 + rows) x columns [x0, x0 + cols) of image
// b and a chunk of consecutive radii; it votes one radius at a time into a one-radius tile and
// folds each into the best (ordered score key, radius) of every centre, kept in shared memory.
// The chunks' bests meet in a (B, H, W) array of 64-bit keys (key << 32 | ~radius index): a
// global atomicMax when there are several chunks, a store when one; so the larger score wins and
// a tie goes to the lower radius index, in any order.
struct BestLaunch {
  int32_t chunk, n_chunks;
  bool float_scores, weighted, normalize, direct;
};

template <typename acc_t, bool kGradient>
__global__ void __launch_bounds__(kThreads)
    circle_best_kernel(CircleLaunch a, BestLaunch m, unsigned long long* __restrict__ keys) {
  extern __shared__ __align__(16) unsigned char circle_smem[];
  acc_t* acc = reinterpret_cast<acc_t*>(circle_smem);
  uint32_t* best = reinterpret_cast<uint32_t*>(acc + a.tile_rows * a.stride);  // [tile_rows][tile_width]
  uint8_t* best_radius = reinterpret_cast<uint8_t*>(best + a.tile_rows * a.tile_width);
  int64_t id = blockIdx.x;
  const int32_t col_tile = static_cast<int32_t>(id % a.n_col_tiles);
  id /= a.n_col_tiles;
  const int32_t band = static_cast<int32_t>(id % a.n_bands);
  id /= a.n_bands;
  const int32_t chunk = static_cast<int32_t>(id % m.n_chunks);
  const int64_t b = id / m.n_chunks;
  const int32_t y0 = band * a.tile_rows, rows = min(a.tile_rows, a.height - y0);
  const int32_t x0 = col_tile * a.tile_width, cols = min(a.tile_width, a.width - x0);
  const int32_t i0 = chunk * m.chunk, i1 = min(i0 + m.chunk, a.n_radii);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int32_t tile_words = a.tile_rows * a.stride;

  for (int32_t i = i0; i < i1; ++i) {
    for (int32_t k = threadIdx.x; k < tile_words; k += kThreads) acc[k] = 0;
    int32_t first, last;
    points_in_reach(a, b, y0, rows, a.info[4 * i], first, last);
    __syncthreads();
    vote_tile<acc_t, kGradient>(a, acc, b, y0, rows, x0, cols, i, 1, first, last);
    __syncthreads();
    const int32_t ring = a.info[4 * i + 2] - a.info[4 * i + 1];
    for (int32_t t = warp; t < rows; t += kWarps) {
      for (int32_t c = lane; c < cols; c += kWarpSize) {
        const acc_t v = acc[t * a.stride + c];
        const uint32_t key =
            m.float_scores ? hough_images::ordered_score(hough_images::float_score(v, m.weighted, m.normalize, ring))
                           : hough_images::ordered_score(static_cast<int32_t>(v));
        const int32_t slot = t * a.tile_width + c;
        if (i == i0 || key > best[slot]) {  // strictly larger: ties keep the lower radius
          best[slot] = key;
          best_radius[slot] = static_cast<uint8_t>(i - i0);
        }
      }
    }
    __syncthreads();  // the next radius clears the tile
  }
  for (int32_t t = warp; t < rows; t += kWarps) {
    unsigned long long* dst = keys + (b * a.height + y0 + t) * int64_t{a.width} + x0;
    for (int32_t c = lane; c < cols; c += kWarpSize) {
      const int32_t slot = t * a.tile_width + c;
      const unsigned long long key = static_cast<unsigned long long>(best[slot]) << 32 |
                                     (0xffffffffull - static_cast<unsigned long long>(i0 + best_radius[slot]));
      if (m.direct) {
        dst[c] = key;
      } else {
        atomicMax(dst + c, key);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    decode_best_kernel(const unsigned long long* __restrict__ keys, int64_t total, int32_t* __restrict__ score_keys,
                       int64_t* __restrict__ radius_index) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const unsigned long long key = keys[i];
    score_keys[i] = static_cast<int32_t>(static_cast<uint32_t>(key >> 32));
    radius_index[i] = static_cast<int64_t>(0xffffffffull - (key & 0xffffffffull));
  }
}

struct TilePlan {
  int32_t tile_rows, radii_per_block, tile_width, stride;
  int64_t n_bands, n_groups, n_col_tiles, blocks, smem;
};

// The tile shape (see the header): TB = 32 rows where it fits, as many radii as the shared-memory
// budget of two blocks per SM allows, then fewer radii and rows until the grid has two blocks per
// SM (small images).
TilePlan plan_tiles(int64_t batch, int64_t n_radii, int64_t height, int64_t width, int64_t acc_bytes,
                    const cudaDeviceProp& prop) {
  TilePlan p{};
  p.tile_width = static_cast<int32_t>(std::min<int64_t>(width, acc_bytes == 4 ? 2048 : 1024));
  p.stride = static_cast<int32_t>(cuda::round_up(p.tile_width, kWarpSize) + 1);
  const int64_t budget = std::min<int64_t>(static_cast<int64_t>(prop.sharedMemPerBlockOptin),
                                           static_cast<int64_t>(prop.sharedMemPerMultiprocessor) / 2 - 2048);
  const int64_t row_bytes = int64_t{p.stride} * acc_bytes;
  int64_t rows = 32;
  while (rows > 1 && rows * row_bytes > budget) rows /= 2;
  rows = std::min<int64_t>(rows, height);
  int64_t radii = std::clamp<int64_t>(budget / (rows * row_bytes), 1, n_radii);
  const int64_t col_tiles = cuda::ceil_div(width, p.tile_width);
  auto blocks = [&] { return batch * cuda::ceil_div(n_radii, radii) * cuda::ceil_div(height, rows) * col_tiles; };
  const int64_t target = 2 * int64_t{prop.multiProcessorCount};
  while (blocks() < target && radii > 1) radii = (radii + 1) / 2;
  while (blocks() < target && rows > 8) rows /= 2;
  p.tile_rows = static_cast<int32_t>(rows);
  p.radii_per_block = static_cast<int32_t>(radii);
  p.n_bands = cuda::ceil_div(height, rows);
  p.n_groups = cuda::ceil_div(n_radii, radii);
  p.n_col_tiles = col_tiles;
  p.blocks = blocks();
  p.smem = radii * rows * row_bytes;
  return p;
}

template <typename acc_t, bool kGradient>
void launch_votes(const CircleLaunch& a, const TilePlan& plan, acc_t* out, cudaStream_t stream) {
  auto kernel = circle_votes_kernel<acc_t, kGradient>;
  C10_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem)));
  kernel<<<static_cast<unsigned>(plan.blocks), kThreads, static_cast<size_t>(plan.smem), stream>>>(a, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// hough_circles_max_points' tiles: one radius of votes plus the best key (4 bytes) and radius (1 byte)
// of each centre, 512 columns wide; as many rows (up to 32) as two blocks per SM allow; then the
// radii are cut into chunks (at most 255 radii, the best radius is a byte) until the grid has
// four blocks per SM.
TilePlan plan_best(int64_t batch, int64_t n_radii, int64_t height, int64_t width, int64_t acc_bytes,
                   const cudaDeviceProp& prop, int64_t& chunk, int64_t& n_chunks) {
  TilePlan p{};
  p.tile_width = static_cast<int32_t>(std::min<int64_t>(width, 512));
  p.stride = static_cast<int32_t>(cuda::round_up(p.tile_width, kWarpSize) + 1);
  const int64_t budget = std::min<int64_t>(static_cast<int64_t>(prop.sharedMemPerBlockOptin),
                                           static_cast<int64_t>(prop.sharedMemPerMultiprocessor) / 2 - 2048);
  const int64_t row_bytes = int64_t{p.stride} * acc_bytes + int64_t{p.tile_width} * 5;
  int64_t rows = 32;
  while (rows > 1 && rows * row_bytes > budget) rows /= 2;
  rows = std::min<int64_t>(rows, height);
  p.tile_rows = static_cast<int32_t>(rows);
  p.radii_per_block = 1;
  p.n_bands = cuda::ceil_div(height, rows);
  p.n_col_tiles = cuda::ceil_div(width, p.tile_width);
  const int64_t base = batch * p.n_bands * p.n_col_tiles;
  // four blocks per SM: blocks differ in work (bands near the image's top and bottom reach fewer
  // points), so a few waves balance better than one
  n_chunks = std::clamp<int64_t>(cuda::ceil_div(4 * int64_t{prop.multiProcessorCount}, base), 1, n_radii);
  chunk = std::min<int64_t>(cuda::ceil_div(n_radii, n_chunks), 255);
  n_chunks = cuda::ceil_div(n_radii, chunk);
  p.n_groups = n_chunks;
  p.blocks = base * n_chunks;
  p.smem = rows * row_bytes;
  return p;
}

// Points binned by (image, row), the offset table on the device, and the launch arguments they
// fill (the tile fields are the caller's).
struct Prepared {
  at::Tensor row_count, row_start, packed, fixed, gradients, table;
  CircleLaunch a{};
};

Prepared prepare_votes(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                       const std::optional<at::Tensor>& weights, const std::optional<at::Tensor>& gradients,
                       int64_t height, int64_t width, at::IntArrayRef radii, double max_angle, float tan_angle,
                       cudaStream_t stream) {
  const int64_t batch = points.size(0), n = points.size(1), total = batch * n;
  const bool weighted = weights.has_value(), with_gradients = gradients.has_value();
  const at::TensorOptions options = points.options();
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const at::Tensor w = weighted ? weights->to(at::kFloat).contiguous() : at::Tensor();
  const at::Tensor g = with_gradients ? gradients->to(at::kFloat).contiguous() : at::Tensor();
  const float* w_ptr = weighted ? w.data_ptr<float>() : nullptr;
  const float* g_ptr = with_gradients ? g.data_ptr<float>() : nullptr;
  Prepared prep;

  const int64_t rows_total = batch * height;
  cuda::check_cub_items(rows_total + 1, "hough_circles_points (image rows)");
  prep.row_count = at::zeros({rows_total + 1}, options.dtype(at::kInt));
  prep.row_start = at::empty({rows_total + 1}, options.dtype(at::kInt));
  prep.packed = at::empty({total}, options.dtype(at::kInt));
  if (weighted) prep.fixed = at::empty({total}, options.dtype(at::kLong));
  if (with_gradients) prep.gradients = at::empty({total, 2}, options.dtype(at::kFloat));
  const unsigned bin_grid = static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(total, kBinThreads), 1 << 16));
  AT_DISPATCH_INDEX_TYPES(pts.scalar_type(), "hough_circles_bin", [&] {
    if (total == 0) {  // no points: every row is empty
      cuda::exclusive_sum(prep.row_count.data_ptr<int32_t>(), prep.row_start.data_ptr<int32_t>(), rows_total + 1,
                          points.device());
      return;
    }
    count_rows_kernel<index_t><<<bin_grid, kBinThreads, 0, stream>>>(
        pts.data_ptr<index_t>(), lengths_c.data, w_ptr, total, n, static_cast<int32_t>(height),
        static_cast<int32_t>(width), prep.row_count.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    cuda::exclusive_sum(prep.row_count.data_ptr<int32_t>(), prep.row_start.data_ptr<int32_t>(), rows_total + 1,
                        points.device());
    C10_CUDA_CHECK(cudaMemsetAsync(prep.row_count.data_ptr<int32_t>(), 0, sizeof(int32_t) * rows_total, stream));
    fill_rows_kernel<index_t><<<bin_grid, kBinThreads, 0, stream>>>(
        pts.data_ptr<index_t>(), lengths_c.data, w_ptr, g_ptr, total, n, static_cast<int32_t>(height),
        static_cast<int32_t>(width), prep.row_start.data_ptr<int32_t>(), prep.row_count.data_ptr<int32_t>(),
        reinterpret_cast<uint32_t*>(prep.packed.data_ptr<int32_t>()),
        weighted ? prep.fixed.data_ptr<int64_t>() : nullptr,
        with_gradients ? reinterpret_cast<float2*>(prep.gradients.data_ptr<float>()) : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });

  // The offset table, copied stream-ordered from page-locked memory (cached per radius list).
  const hough_images::CircleTable table = hough_images::circle_table(radii, /*pinned=*/true);
  prep.table = table.data.to(points.device(), /*non_blocking=*/true);
  CircleLaunch& a = prep.a;
  a.packed = reinterpret_cast<const uint32_t*>(prep.packed.data_ptr<int32_t>());
  a.row_start = prep.row_start.data_ptr<int32_t>();
  a.fixed = weighted ? prep.fixed.data_ptr<int64_t>() : nullptr;
  a.gradients = with_gradients ? reinterpret_cast<const float2*>(prep.gradients.data_ptr<float>()) : nullptr;
  a.info = prep.table.data_ptr<int32_t>();
  a.entries = a.info + 4 * table.n_radii;
  a.dy_index = a.entries + table.n_entries;
  a.n_radii = static_cast<int32_t>(radii.size());
  a.height = static_cast<int32_t>(height);
  a.width = static_cast<int32_t>(width);
  a.tan_angle = tan_angle;
  const double bound = max_angle + kWedgeWidening;
  a.prune = with_gradients && bound < 1.5707963267948966;
  a.cos_bound = static_cast<float>(std::cos(bound));
  a.sin_bound = static_cast<float>(std::sin(bound));
  return prep;
}

void set_tiles(CircleLaunch& a, const TilePlan& plan) {
  TORCH_CHECK(plan.blocks <= std::numeric_limits<int32_t>::max(),
              "hough_circles_points: the accumulator has too many tiles (", plan.blocks, ")");
  a.tile_rows = plan.tile_rows;
  a.radii_per_block = plan.radii_per_block;
  a.tile_width = plan.tile_width;
  a.stride = plan.stride;
  a.n_bands = static_cast<int32_t>(plan.n_bands);
  a.n_groups = static_cast<int32_t>(plan.n_groups);
  a.n_col_tiles = static_cast<int32_t>(plan.n_col_tiles);
}

at::Tensor hough_circles_points_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                     const std::optional<at::Tensor>& weights,
                                     const std::optional<at::Tensor>& gradients, int64_t height, int64_t width,
                                     at::IntArrayRef radii, double max_angle) {
  const float tan_angle =
      hough_images::check_circles_args(points, lengths, weights, gradients, height, width, radii, max_angle);
  hough_images::check_circles_output(points, radii, height, width, weights.has_value());
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t batch = points.size(0), n = points.size(1);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  const bool weighted = weights.has_value(), with_gradients = gradients.has_value();
  const at::TensorOptions options = points.options();
  if (batch * n_radii * height * width == 0 || n == 0) {
    at::Tensor zeros = at::zeros({batch, n_radii, height, width}, options.dtype(weighted ? at::kLong : at::kInt));
    return weighted ? hough_images::fixed_to_float(zeros) : zeros;
  }
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  Prepared prep =
      prepare_votes(points, lengths, weights, gradients, height, width, radii, max_angle, tan_angle, stream);
  const TilePlan plan =
      plan_tiles(batch, n_radii, height, width, weighted ? 8 : 4, *at::cuda::getCurrentDeviceProperties());
  set_tiles(prep.a, plan);
  if (weighted) {
    at::Tensor sums = at::empty({batch, n_radii, height, width}, options.dtype(at::kLong));
    if (with_gradients) {
      launch_votes<int64_t, true>(prep.a, plan, sums.data_ptr<int64_t>(), stream);
    } else {
      launch_votes<int64_t, false>(prep.a, plan, sums.data_ptr<int64_t>(), stream);
    }
    return hough_images::fixed_to_float(sums);
  }
  at::Tensor counts = at::empty({batch, n_radii, height, width}, options.dtype(at::kInt));
  if (with_gradients) {
    launch_votes<int32_t, true>(prep.a, plan, counts.data_ptr<int32_t>(), stream);
  } else {
    launch_votes<int32_t, false>(prep.a, plan, counts.data_ptr<int32_t>(), stream);
  }
  return counts;
}

template <typename acc_t, bool kGradient>
void launch_best(const CircleLaunch& a, const BestLaunch& m, const TilePlan& plan, unsigned long long* keys,
                 cudaStream_t stream) {
  auto kernel = circle_best_kernel<acc_t, kGradient>;
  C10_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem)));
  kernel<<<static_cast<unsigned>(plan.blocks), kThreads, static_cast<size_t>(plan.smem), stream>>>(a, m, keys);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_points_cuda(const at::Tensor& points,
                                                                 const std::optional<at::Tensor>& lengths,
                                                                 const std::optional<at::Tensor>& weights,
                                                                 const std::optional<at::Tensor>& gradients,
                                                                 int64_t height, int64_t width, at::IntArrayRef radii,
                                                                 double max_angle, bool normalize) {
  const float tan_angle =
      hough_images::check_circles_args(points, lengths, weights, gradients, height, width, radii, max_angle);
  TORCH_CHECK(!radii.empty(), "radii must hold at least one radius for hough_circles_max_points");
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t batch = points.size(0), n = points.size(1);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  const bool weighted = weights.has_value(), with_gradients = gradients.has_value();
  const bool float_scores = weighted || normalize;
  const at::TensorOptions options = points.options();
  const int64_t bins = batch * height * width;
  at::Tensor score_keys = at::empty({batch, height, width}, options.dtype(at::kInt));
  at::Tensor radius_index = at::empty({batch, height, width}, options.dtype(at::kLong));
  if (bins == 0) return {hough_images::scores_from_keys(score_keys, float_scores), radius_index};
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // With no points at all the kernels still run (every score is the one of an empty circle).
  Prepared prep =
      prepare_votes(points, lengths, weights, gradients, height, width, radii, max_angle, tan_angle, stream);
  int64_t chunk = 0, n_chunks = 0;
  const TilePlan plan = plan_best(batch, n_radii, height, width, weighted ? 8 : 4,
                                  *at::cuda::getCurrentDeviceProperties(), chunk, n_chunks);
  set_tiles(prep.a, plan);
  BestLaunch m{};
  m.chunk = static_cast<int32_t>(chunk);
  m.n_chunks = static_cast<int32_t>(n_chunks);
  m.float_scores = float_scores;
  m.weighted = weighted;
  m.normalize = normalize;
  m.direct = n_chunks == 1;
  at::Tensor keys =
      m.direct ? at::empty({bins}, options.dtype(at::kLong)) : at::zeros({bins}, options.dtype(at::kLong));
  auto* key_ptr = reinterpret_cast<unsigned long long*>(keys.data_ptr<int64_t>());
  if (weighted) {
    if (with_gradients) {
      launch_best<int64_t, true>(prep.a, m, plan, key_ptr, stream);
    } else {
      launch_best<int64_t, false>(prep.a, m, plan, key_ptr, stream);
    }
  } else if (with_gradients) {
    launch_best<int32_t, true>(prep.a, m, plan, key_ptr, stream);
  } else {
    launch_best<int32_t, false>(prep.a, m, plan, key_ptr, stream);
  }
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(bins, kThreads), 1 << 16));
  decode_best_kernel<<<grid, kThreads, 0, stream>>>(key_ptr, bins, score_keys.data_ptr<int32_t>(),
                                                    radius_index.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {hough_images::scores_from_keys(score_keys, float_scores), radius_index};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("hough_circles_points", &hough_circles_points_cuda);
  m.impl("hough_circles_max_points", &hough_circles_max_points_cuda);
}

}  // namespace pointops
