// Voxel-grid downsampling on CUDA (rules in voxel_downsample.h; the CPU twin is
// voxel_downsample_cpu.cpp). No atomics on floats and no host sync:
//   1. every point's cell; the lowest and highest cell of each cloud per axis by 64-bit integer
//      atomicMin / atomicMax (order-free);
//   2. for each cloud whose raw offsets (cell - lowest) do not fit the 62-bit key, the lowest and
//      highest offset of each of the 64 bit-width bins per axis (block-aggregated, then 64-bit
//      atomics: order-free); one thread per cloud then picks its path (voxel_downsample.h): the
//      direct key, the packed key (the bins become shifts), or the sorted path;
//   3. each point's key (the invalid key for points that do not count and for every point of a
//      sorted-path cloud, so steps 4-5 skip them) and the parallel hash array
//      (common/hash_array.cuh) of the keys of the whole batch: a stable radix sort + run-length
//      encoding. With B > 1 the keys of different clouds can collide, so a second hash array sorts
//      (cloud, run of the first) = b * total + run, which lists the voxels by cloud and then by
//      key, each voxel's points still in index order (both sorts are stable);
//   4. one thread per voxel sums its points in that order in float64 (the CPU kernel's order),
//      writes the means and each point's row;
//   5. sorted-path clouds, one thread block each (the block of any other cloud returns at once):
//      a merge sort of the cloud's counted points by (z, y, x cell, index), run heads by
//      comparing neighbours' cells, a block scan numbering the voxels, then step 4's sums, in the
//      same order, for its rows. Its size comes from the device, so it needs no host sync either.
// Clouds of fewer than kPackedMinRows rows (N) get no bins (their 3 KB each would outweigh the
// points): a tiny cloud whose raw offsets do not fit the key takes the sorted path, cheap at that
// size. The CPU packs every cloud; the results are the same either way.
// What bounds it: the radix sort of the B * N (62-bit key, 32-bit index) pairs, 8 passes over
// the key bits (plus ceil(bits(B * N) / 8) more for B > 1), each reading and writing the pairs
// at HBM bandwidth; the other passes each read the points once (step 2 returns at once for
// clouds whose raw offsets fit). The per-voxel sums gather points through the sorted
// permutation (scattered 12-byte reads), one thread per voxel, so a voxel with many points
// serialises that thread: clouds with a few dense voxels (a sensor's near field at a coarse voxel
// size) load the warps unevenly. Far outliers cost one more pass over the points (step 2) and
// take the packed key, at the common case's speed. Step 5 costs every call one launch of
// min(B, 65535) blocks that read their cloud's path and return; a sorted-path cloud of m counted
// points costs one SM: ceil(log2 m) merge passes in which every point binary-searches the other
// run, recomputing the cells it compares (O(m log^2 m) cell computations, latency-bound), then a
// scan and the sums: slow by design, and reached only by points spread thinly over more cells
// than the key holds even packed (a voxel far below the data's resolution).
#include "geometry/voxel_downsample.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"

namespace pointops {
namespace {

using namespace voxel_downsample_detail;
using cuda::HashArrayView;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;
// Clouds of at least this many rows get the bins of the packed key (3 KB a cloud).
constexpr int64_t kPackedMinRows = 256;

unsigned blocks_for(int64_t items) { return static_cast<unsigned>(cuda::ceil_div(items, kThreads)); }

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// int64 <-> uint64 preserving order, for unsigned atomicMin.
__device__ __forceinline__ unsigned long long ordered(int64_t v) {
  return static_cast<unsigned long long>(v) ^ 0x8000000000000000ull;
}
__device__ __forceinline__ int64_t unordered(unsigned long long v) {
  return static_cast<int64_t>(v ^ 0x8000000000000000ull);
}

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ bool point_cell(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths,
                                           int64_t n, int64_t p, const VoxelGrid<acc_t>& grid, int64_t* cell) {
  const int64_t b = p / n;
  if (p - b * n >= cloud_length(lengths, b, n)) return false;
  const scalar_t* q = points + 3 * p;
  return grid.cell(static_cast<acc_t>(q[0]), static_cast<acc_t>(q[1]), static_cast<acc_t>(q[2]), cell);
}

struct Smaller {
  __device__ __forceinline__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b < a ? b : a;
  }
};
struct Larger {
  __device__ __forceinline__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b > a ? b : a;
  }
};

// Per cloud b, row b of low and high (`stride` values each): the lowest / highest cell per axis
// (ordered bits) in entries 0-2, then, when stride > 3, the lowest / highest offset of each
// bit-width bin, axis-major (plain unsigned values, step 2). low starts at all ones (the largest
// value), high at 0. Blocks are 2D: x tiles cloud y's points, so a block reduces within one
// cloud and issues 6 atomics, not 6 per point (one address per cloud would serialise a million
// same-address atomics).
template <typename scalar_t, typename acc_t>
__global__ void cell_bounds_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths,
                                   int64_t batch, int64_t n, VoxelGrid<acc_t> grid, int64_t stride,
                                   unsigned long long* __restrict__ low, unsigned long long* __restrict__ high) {
  using BlockReduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    unsigned long long mine_low[3] = {~0ull, ~0ull, ~0ull};
    unsigned long long mine_high[3] = {0ull, 0ull, 0ull};
    int64_t cell[3];
    if (i < n && point_cell(points, lengths, n, b * n + i, grid, cell)) {
      for (int d = 0; d < 3; ++d) mine_low[d] = mine_high[d] = ordered(cell[d]);
    }
    for (int d = 0; d < 3; ++d) {
      const unsigned long long lowest = BlockReduce(temp).Reduce(mine_low[d], Smaller());
      __syncthreads();  // temp is reused by the next reduction
      const unsigned long long highest = BlockReduce(temp).Reduce(mine_high[d], Larger());
      __syncthreads();
      if (threadIdx.x == 0 && lowest != ~0ull) {
        atomicMin(low + stride * b + d, lowest);
        atomicMax(high + stride * b + d, highest);
      }
    }
  }
}

// Cloud b's lowest and highest cells; false when it has no counted point (they are then
// meaningless).
__device__ __forceinline__ bool cloud_bounds(const unsigned long long* __restrict__ low,
                                             const unsigned long long* __restrict__ high, int64_t stride, int64_t b,
                                             int64_t lowest[3], int64_t highest[3]) {
  if (low[stride * b] == ~0ull) return false;
  for (int d = 0; d < 3; ++d) {
    lowest[d] = unordered(low[stride * b + d]);
    highest[d] = unordered(high[stride * b + d]);
  }
  return true;
}

// Step 2: folds one run of offsets (all in bin k of an axis) into the block's bins.
__device__ __forceinline__ void fold_run(unsigned long long* bin_low, unsigned long long* bin_high, int k,
                                         unsigned long long lowest, unsigned long long highest) {
  atomicMin(bin_low + k, lowest);
  atomicMax(bin_high + k, highest);
}

constexpr int kBinRowsPerThread = 8;

// Step 2: the bins of every cloud whose raw offsets do not fit the key (others return at once).
// Each thread keeps the run of its last points' bin per axis (a cloud's bulk lies in one or two
// bins, so runs are long), a warp whose lanes end in one bin folds it once, the block's bins go
// to the cloud's row with one atomic per occupied bin.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    offset_bins_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths, int64_t batch,
                       int64_t n, VoxelGrid<acc_t> grid, int64_t stride, unsigned long long* __restrict__ low,
                       unsigned long long* __restrict__ high) {
  __shared__ unsigned long long bin_low[3 * kOffsetBins];
  __shared__ unsigned long long bin_high[3 * kOffsetBins];
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kThreads * kBinRowsPerThread;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    int64_t lowest[3], highest[3];
    int32_t bits[3];
    if (!cloud_bounds(low, high, stride, b, lowest, highest) || direct_layout(lowest, highest, bits)) continue;
    for (int e = threadIdx.x; e < 3 * kOffsetBins; e += kThreads) {
      bin_low[e] = ~0ull;
      bin_high[e] = 0ull;
    }
    __syncthreads();
    int run_bin[3] = {-1, -1, -1};
    unsigned long long run_low[3] = {0ull, 0ull, 0ull};
    unsigned long long run_high[3] = {0ull, 0ull, 0ull};
    for (int j = 0; j < kBinRowsPerThread; ++j) {
      const int64_t i = tile + static_cast<int64_t>(j) * kThreads + threadIdx.x;
      int64_t cell[3];
      if (i >= n || !point_cell(points, lengths, n, b * n + i, grid, cell)) continue;
      for (int d = 0; d < 3; ++d) {
        const unsigned long long offset = static_cast<unsigned long long>(cell[d] - lowest[d]);
        const int k = offset_bin(offset);
        if (k == run_bin[d]) {
          run_low[d] = offset < run_low[d] ? offset : run_low[d];
          run_high[d] = offset > run_high[d] ? offset : run_high[d];
        } else {
          if (run_bin[d] >= 0)
            fold_run(bin_low + d * kOffsetBins, bin_high + d * kOffsetBins, run_bin[d], run_low[d], run_high[d]);
          run_bin[d] = k;
          run_low[d] = run_high[d] = offset;
        }
      }
    }
    for (int d = 0; d < 3; ++d) {
      const int first = __shfl_sync(cuda::kFullMask, run_bin[d], 0);
      if (__all_sync(cuda::kFullMask, run_bin[d] == first)) {
        if (first < 0) continue;  // the whole warp: no counted point
        unsigned long long lowest_run = run_low[d];
        unsigned long long highest_run = run_high[d];
        for (int offset = cuda::kWarpSize / 2; offset > 0; offset /= 2) {
          const unsigned long long other_low = __shfl_xor_sync(cuda::kFullMask, lowest_run, offset);
          const unsigned long long other_high = __shfl_xor_sync(cuda::kFullMask, highest_run, offset);
          lowest_run = other_low < lowest_run ? other_low : lowest_run;
          highest_run = other_high > highest_run ? other_high : highest_run;
        }
        if (threadIdx.x % cuda::kWarpSize == 0) {
          fold_run(bin_low + d * kOffsetBins, bin_high + d * kOffsetBins, first, lowest_run, highest_run);
        }
      } else if (run_bin[d] >= 0) {
        fold_run(bin_low + d * kOffsetBins, bin_high + d * kOffsetBins, run_bin[d], run_low[d], run_high[d]);
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 3 * kOffsetBins; e += kThreads) {
      if (bin_low[e] <= bin_high[e]) {
        atomicMin(low + stride * b + 3 + e, bin_low[e]);
        atomicMax(high + stride * b + 3 + e, bin_high[e]);
      }
    }
    __syncthreads();  // the bins are reset for the next cloud
  }
}

// Each cloud's path and key bits (one thread per cloud). A packed cloud's bin lows become its
// shifts in place (pack_axis).
__global__ void key_layout_kernel(int64_t batch, int64_t stride, unsigned long long* __restrict__ low,
                                  const unsigned long long* __restrict__ high, KeyLayout* __restrict__ layouts) {
  const int64_t b = thread_index();
  if (b >= batch) return;
  KeyLayout layout{{0, 0, 0}, static_cast<int32_t>(CloudPath::kEmpty)};
  int64_t lowest[3], highest[3];
  if (cloud_bounds(low, high, stride, b, lowest, highest)) {
    if (direct_layout(lowest, highest, layout.bits)) {
      layout.path = static_cast<int32_t>(CloudPath::kDirect);
    } else {
      layout.path = static_cast<int32_t>(CloudPath::kSorted);
      if (stride > 3) {
        uint64_t top[3];
        for (int d = 0; d < 3; ++d) {
          top[d] = pack_axis(reinterpret_cast<uint64_t*>(low + stride * b + 3 + d * kOffsetBins),
                             reinterpret_cast<const uint64_t*>(high + stride * b + 3 + d * kOffsetBins));
        }
        if (packed_layout(top, layout.bits)) layout.path = static_cast<int32_t>(CloudPath::kPacked);
      }
    }
  }
  layouts[b] = layout;
}

// The key of every point; kInvalidKey for points that do not count and for every point of a
// sorted-path cloud (step 5 handles those clouds).
template <typename scalar_t, typename acc_t>
__global__ void keys_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths, int64_t n,
                            int64_t total, VoxelGrid<acc_t> grid, int64_t stride,
                            const unsigned long long* __restrict__ low, const KeyLayout* __restrict__ layouts,
                            int64_t* __restrict__ keys) {
  const int64_t p = thread_index();
  if (p >= total) return;
  int64_t cell[3];
  int64_t key = kInvalidKey;
  const int64_t b = p / n;
  const KeyLayout layout = layouts[b];
  const bool packed = layout.path == static_cast<int32_t>(CloudPath::kPacked);
  if ((packed || layout.path == static_cast<int32_t>(CloudPath::kDirect)) &&
      point_cell(points, lengths, n, p, grid, cell)) {
    int64_t lowest[3];
    for (int d = 0; d < 3; ++d) lowest[d] = unordered(low[stride * b + d]);
    key =
        cell_key(cell, lowest, packed ? reinterpret_cast<const uint64_t*>(low + stride * b + 3) : nullptr, layout.bits);
  }
  keys[p] = key;
}

// Second level (B > 1): b * total + the point's run in the first hash array.
__global__ void cloud_keys_kernel(HashArrayView h, const int64_t* __restrict__ keys, int64_t n, int64_t total,
                                  int64_t* __restrict__ cloud_keys) {
  const int64_t p = thread_index();
  if (p >= total) return;
  const int64_t key = keys[p];
  const int64_t bound = (total / n) * total;
  cloud_keys[p] = key == kInvalidKey ? bound : (p / n) * total + h.find(key);
}

// new_lengths[b] and the first run of cloud b (runs are sorted by cloud).
__global__ void cloud_runs_kernel(HashArrayView h, int64_t batch, int64_t total, int64_t* __restrict__ first_run,
                                  int64_t* __restrict__ new_lengths) {
  const int64_t b = thread_index();
  if (b >= batch) return;
  const int64_t runs = *h.num_unique;
  if (batch == 1) {
    first_run[0] = 0;
    new_lengths[0] = runs;
    return;
  }
  const int64_t begin = hash_array::lower_bound(h.unique_keys, runs, b * total);
  const int64_t end = hash_array::lower_bound(h.unique_keys, runs, (b + 1) * total);
  first_run[b] = begin;
  new_lengths[b] = end - begin;
}

// The voxel whose points are offset + members[0, count) (increasing index): its mean at row out
// of the outputs (b * n + row), and row in point_voxel for each of its points.
template <typename scalar_t, typename feature_t>
__device__ __forceinline__ void write_voxel(const int32_t* __restrict__ members, int64_t count, int64_t offset,
                                            int64_t out, int64_t row, const scalar_t* __restrict__ points,
                                            const feature_t* __restrict__ features, int64_t f,
                                            scalar_t* __restrict__ centroids, feature_t* __restrict__ mean_features,
                                            int64_t* __restrict__ point_voxel) {
  const double divisor = static_cast<double>(count);
  double sum[3] = {0.0, 0.0, 0.0};
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = offset + members[t];
    point_voxel[p] = row;
    for (int d = 0; d < 3; ++d) sum[d] = add(sum[d], static_cast<double>(points[3 * p + d]));
  }
  for (int d = 0; d < 3; ++d) centroids[3 * out + d] = static_cast<scalar_t>(divide(sum[d], divisor));
  for (int64_t c = 0; c < f; ++c) {
    double s = 0.0;
    for (int64_t t = 0; t < count; ++t) s = add(s, static_cast<double>(features[f * (offset + members[t]) + c]));
    mean_features[f * out + c] = static_cast<feature_t>(divide(s, divisor));
  }
}

// One thread per voxel (run r): its points in index order, summed in float64.
template <typename scalar_t, typename feature_t>
__global__ void voxel_means_kernel(HashArrayView h, int64_t capacity, int64_t batch, int64_t n, int64_t total,
                                   const int64_t* __restrict__ first_run, const scalar_t* __restrict__ points,
                                   const feature_t* __restrict__ features, int64_t f, scalar_t* __restrict__ centroids,
                                   feature_t* __restrict__ mean_features, int64_t* __restrict__ point_voxel) {
  const int64_t r = thread_index();
  if (r >= capacity || r >= *h.num_unique) return;
  const int64_t b = batch == 1 ? 0 : h.unique_keys[r] / total;
  const int64_t row = r - first_run[b];
  write_voxel(h.perm + h.starts[r], h.counts[r], 0, b * n + row, row, points, features, f, centroids, mean_features,
              point_voxel);
}

// Step 5: sorted-path clouds, one block each.
constexpr int kWideThreads = 512;
constexpr int64_t kMaxWideBlocks = 65535;

// The cell of point i of a cloud, which counted it.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void counted_cell(const scalar_t* __restrict__ cloud, int64_t i,
                                             const VoxelGrid<acc_t>& grid, int64_t* cell) {
  const scalar_t* q = cloud + 3 * i;
  grid.cell(static_cast<acc_t>(q[0]), static_cast<acc_t>(q[1]), static_cast<acc_t>(q[2]), cell);
}

// How many of sorted[first, last) (point indices of the cloud, in (cell, index) order) come
// before (cell, index).
template <typename scalar_t, typename acc_t>
__device__ int64_t count_before(const int32_t* sorted, int64_t first, int64_t last, const int64_t cell[3],
                                int64_t index, const scalar_t* __restrict__ cloud, const VoxelGrid<acc_t>& grid) {
  const int64_t begin = first;
  while (first < last) {
    const int64_t mid = first + (last - first) / 2;
    const int64_t q = sorted[mid];
    int64_t c[3];
    counted_cell(cloud, q, grid, c);
    if (cell_index_less(c, q, cell, index)) {
      first = mid + 1;
    } else {
      last = mid;
    }
  }
  return first - begin;
}

// order and scratch: (B, N) int32 each. The block of a cloud of any other path returns at once:
// steps 1-4 wrote its outputs. A sorted-path cloud's outputs are still as
// empty_downsample_outputs left them (its points had the invalid key), and this block fills its
// rows.
template <typename scalar_t, typename feature_t, typename acc_t>
__global__ void __launch_bounds__(kWideThreads)
    wide_clouds_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths, int64_t batch,
                       int64_t n, VoxelGrid<acc_t> grid, const KeyLayout* __restrict__ layouts,
                       const feature_t* __restrict__ features, int64_t f, int32_t* order, int32_t* scratch,
                       scalar_t* __restrict__ centroids, feature_t* __restrict__ mean_features,
                       int64_t* __restrict__ new_lengths, int64_t* __restrict__ point_voxel) {
  using BlockScan = cub::BlockScan<int, kWideThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    if (layouts[b].path != static_cast<int32_t>(CloudPath::kSorted)) continue;
    const int64_t len = cloud_length(lengths, b, n);
    const scalar_t* cloud = points + 3 * b * n;
    int32_t* src = order + b * n;
    int32_t* dst = scratch + b * n;

    // The counted points, in increasing index.
    int64_t m = 0;
    for (int64_t base = 0; base < len; base += kWideThreads) {
      const int64_t i = base + threadIdx.x;
      int64_t cell[3];
      const int flag = i < len && grid.cell(static_cast<acc_t>(cloud[3 * i]), static_cast<acc_t>(cloud[3 * i + 1]),
                                            static_cast<acc_t>(cloud[3 * i + 2]), cell)
                           ? 1
                           : 0;
      int at = 0;
      int tile = 0;
      BlockScan(temp).ExclusiveSum(flag, at, tile);
      if (flag) src[m + at] = static_cast<int32_t>(i);
      m += tile;
      __syncthreads();  // temp is reused; src is complete after the last tile
    }

    // Bottom-up merge sort by (cell, index), runs of width 1, 2, 4, ...: an element's place in
    // the merged pair is its place in its run plus the number of the other run's elements
    // before it (keys are distinct, so the places form a permutation).
    for (int64_t width = 1; width < m; width *= 2) {
      for (int64_t i = threadIdx.x; i < m; i += kWideThreads) {
        const int64_t lo = i / (2 * width) * (2 * width);
        const int64_t mid = min(lo + width, m);
        const int64_t hi = min(lo + 2 * width, m);
        const int64_t p = src[i];
        int64_t cell[3];
        counted_cell(cloud, p, grid, cell);
        const int64_t at = i < mid ? i + count_before(src, mid, hi, cell, p, cloud, grid)
                                   : lo + (i - mid) + count_before(src, lo, mid, cell, p, cloud, grid);
        dst[at] = static_cast<int32_t>(p);
      }
      __syncthreads();
      int32_t* sorted = dst;
      dst = src;
      src = sorted;
    }

    // Voxels: runs of equal cells; dst[v] = the sorted position where voxel v starts.
    int64_t voxels = 0;
    for (int64_t base = 0; base < m; base += kWideThreads) {
      const int64_t i = base + threadIdx.x;
      int head = 0;
      if (i < m) {
        head = 1;
        if (i > 0) {
          int64_t cell[3], previous[3];
          counted_cell(cloud, src[i], grid, cell);
          counted_cell(cloud, src[i - 1], grid, previous);
          head = same_cell(cell, previous) ? 0 : 1;
        }
      }
      int at = 0;
      int tile = 0;
      BlockScan(temp).ExclusiveSum(head, at, tile);
      if (head) dst[voxels + at] = static_cast<int32_t>(i);
      voxels += tile;
      __syncthreads();
    }
    if (threadIdx.x == 0) new_lengths[b] = voxels;
    for (int64_t v = threadIdx.x; v < voxels; v += kWideThreads) {
      const int64_t begin = dst[v];
      const int64_t end = v + 1 < voxels ? dst[v + 1] : m;
      write_voxel(src + begin, end - begin, b * n, b * n + v, v, points, features, f, centroids, mean_features,
                  point_voxel);
    }
    __syncthreads();
  }
}

template <typename scalar_t, typename feature_t>
void downsample_cuda_typed(const at::Tensor& pts, const at::Tensor& feats, const int64_t* lengths,
                           const DownsampleArgs& args, VoxelDownsampleResult& outputs) {
  using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
  const auto grid = make_grid<acc_t>(args);
  const int64_t batch = pts.size(0);
  const int64_t n = pts.size(1);
  const int64_t total = batch * n;
  const int64_t f = args.features;
  const auto options = pts.options();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();

  // Per cloud: the lowest / highest cells (ordered bits), then, for clouds of kPackedMinRows rows
  // or more, the bins of the packed key. low starts at all ones (the largest), high at 0.
  const int64_t stride = n >= kPackedMinRows ? 3 + 3 * kOffsetBins : 3;
  at::Tensor low = at::full({batch, stride}, -1, options.dtype(at::kLong));
  at::Tensor high = at::zeros({batch, stride}, options.dtype(at::kLong));
  auto* low_ptr = reinterpret_cast<unsigned long long*>(low.data_ptr<int64_t>());
  auto* high_ptr = reinterpret_cast<unsigned long long*>(high.data_ptr<int64_t>());
  const unsigned clouds_y = static_cast<unsigned>(std::min<int64_t>(batch, kMaxGridY));
  cell_bounds_kernel<scalar_t, acc_t><<<dim3(blocks_for(n), clouds_y), kThreads, 0, stream>>>(
      pts_ptr, lengths, batch, n, grid, stride, low_ptr, high_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (stride > 3) {
    const dim3 tiles(static_cast<unsigned>(cuda::ceil_div(n, int64_t{kThreads} * kBinRowsPerThread)), clouds_y);
    offset_bins_kernel<scalar_t, acc_t>
        <<<tiles, kThreads, 0, stream>>>(pts_ptr, lengths, batch, n, grid, stride, low_ptr, high_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  at::Tensor layouts = at::empty({batch * static_cast<int64_t>(sizeof(KeyLayout))}, options.dtype(at::kByte));
  auto* layout_ptr = reinterpret_cast<KeyLayout*>(layouts.data_ptr<uint8_t>());
  key_layout_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(batch, stride, low_ptr, high_ptr, layout_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor keys = at::empty({total}, options.dtype(at::kLong));
  keys_kernel<scalar_t, acc_t><<<blocks_for(total), kThreads, 0, stream>>>(
      pts_ptr, lengths, n, total, grid, stride, low_ptr, layout_ptr, keys.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  cuda::HashArray hash = cuda::build_hash_array(keys, kInvalidKey);
  if (batch > 1) {
    at::Tensor cloud_keys = at::empty({total}, options.dtype(at::kLong));
    cloud_keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(hash.view(), keys.data_ptr<int64_t>(), n, total,
                                                                  cloud_keys.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    hash = cuda::build_hash_array(cloud_keys, batch * total);
  }
  const HashArrayView h = hash.view();

  at::Tensor first_run = at::empty({batch}, options.dtype(at::kLong));
  cloud_runs_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(h, batch, total, first_run.data_ptr<int64_t>(),
                                                                std::get<2>(outputs).data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  voxel_means_kernel<scalar_t, feature_t><<<blocks_for(total), kThreads, 0, stream>>>(
      h, total, batch, n, total, first_run.data_ptr<int64_t>(), pts_ptr, f > 0 ? feats.data_ptr<feature_t>() : nullptr,
      f, std::get<0>(outputs).data_ptr<scalar_t>(), f > 0 ? std::get<1>(outputs).data_ptr<feature_t>() : nullptr,
      std::get<3>(outputs).data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  // Sorted-path clouds. The keys are dead once the hash arrays are built (stream order), so
  // their 8 * B * N bytes hold the two (B, N) int32 buffers of the merge sort.
  int32_t* order = reinterpret_cast<int32_t*>(keys.data_ptr<int64_t>());
  wide_clouds_kernel<scalar_t, feature_t, acc_t>
      <<<static_cast<unsigned>(std::min<int64_t>(batch, kMaxWideBlocks)), kWideThreads, 0, stream>>>(
          pts_ptr, lengths, batch, n, grid, layout_ptr, f > 0 ? feats.data_ptr<feature_t>() : nullptr, f, order,
          order + total, std::get<0>(outputs).data_ptr<scalar_t>(),
          f > 0 ? std::get<1>(outputs).data_ptr<feature_t>() : nullptr, std::get<2>(outputs).data_ptr<int64_t>(),
          std::get<3>(outputs).data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

VoxelDownsampleResult voxel_downsample_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                            const std::optional<at::Tensor>& features, at::ArrayRef<double> voxel_size,
                                            std::optional<at::ArrayRef<double>> point_range) {
  const DownsampleArgs args = check_downsample_args(points, lengths, features, voxel_size, point_range);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  VoxelDownsampleResult outputs = empty_downsample_outputs(points, features);
  const int64_t total = points.size(0) * points.size(1);
  if (total == 0) return outputs;
  cuda::check_cub_items(total, "voxel_downsample: B * N points");
  TORCH_CHECK(points.size(0) <= std::numeric_limits<int64_t>::max() / total,
              "voxel_downsample: B * B * N must fit int64, got B = ", points.size(0), ", N = ", points.size(1));
  const at::Tensor pts = points.contiguous();
  const at::Tensor feats = args.features > 0 ? features->contiguous() : pts;
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "voxel_downsample_cuda", [&] {
    using point_t = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, feats.scalar_type(), "voxel_downsample_cuda", [&] {
      downsample_cuda_typed<point_t, scalar_t>(pts, feats, lengths_c.data, args, outputs);
    });
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("voxel_downsample", &voxel_downsample_cuda); }

}  // namespace pointops
