// Voxel-grid downsampling on CUDA (rules in voxel_downsample.h; the CPU twin is
// voxel_downsample_cpu.cpp). No atomics on floats and no host sync:
//   1. every point's cell; the lowest and highest cell of each cloud per axis by 64-bit integer
//      atomicMin / atomicMax (order-free);
//   2. for each cloud whose raw offsets (cell - lowest) do not fit the 62-bit key, the lowest and
//      highest offset of each of the 64 bit-width bins per axis (block-aggregated, then 64-bit
//      atomics: order-free); one thread per cloud then picks its path (voxel_downsample.h): the
//      direct key, the packed key (the bins become shifts), or the sorted path (a sorted-path
//      cloud of more than kChunkRows rows is appended to step 5's list);
//   3. each point's key (the invalid key for points that do not count and for every point of a
//      sorted-path cloud, so steps 4-5 skip them) and the parallel hash array
//      (common/hash_array.cuh) of the keys of the whole batch: a stable radix sort + run-length
//      encoding. With B > 1 the keys of different clouds can collide, so a second hash array sorts
//      (cloud, run of the first) = b * total + run, which lists the voxels by cloud and then by
//      key, each voxel's points still in index order (both sorts are stable);
//   4. one thread per voxel sums its points in that order in float64 (the CPU kernel's order),
//      writes the means and each point's row;
//   5. sorted-path clouds, in one cooperative launch of as many blocks as are resident (a cloud of
//      any other path is skipped): each cloud's rows are sorted by (z, y, x cell, index), rows
//      that do not count last, run heads found by comparing neighbours' cells, a scan numbers the
//      voxels, then step 4's sums, in the same order, fill its rows. A cloud of at most
//      kChunkRows (1,024) rows is one block's, sorted in shared memory; step 2 lists the larger
//      ones, and the whole grid sorts them together: chunks of kChunkRows rows in shared memory,
//      then merge passes over the grid (grid barriers between them) that move (cell, row)
//      records, so no cell is computed twice, a grid-wide scan and the sums. Sizes come from the
//      device and buffers from the shapes, so it needs no host sync either.
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
// take the packed key, at the common case's speed. Step 5 costs every call one cooperative
// launch whose blocks read the paths of their share of the clouds and the list's length, and
// return. The sorted path is reached only by points spread thinly over more cells than the key
// holds even packed (a voxel far below the data's resolution, far outliers scattered on every
// axis). A cloud of at most kChunkRows rows costs its block ~10 shared-memory merge passes (each
// row binary-searches the other run on cached cells), a scan and the sums. Larger clouds, all
// together, cost: the chunk sorts (the same, one block per chunk, the cells computed once and
// written with the rows as 32-byte (cell, row) records); then ceil(log2(rows / kChunkRows))
// grid-wide merge passes over the records, each a grid barrier (~1-2 us) plus, per warp and
// kMergeRows outputs, one merge-path search (~4 rounds of one probe a lane), then rounds of 32
// outputs, each two coalesced 32-record reads, 12 shuffle steps of a record (the ranks) and a
// coalesced write: about 96 bytes a row a pass of streaming reads and writes, from HBM once the
// two record buffers outgrow L2 (1M rows: 64 MB), and the shuffles (96 a round); then two passes
// over the records for the heads and the scan (two grid barriers), and the sums, one thread per
// voxel as in step 4.
#include "geometry/voxel_downsample.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/library.h>

#include <cooperative_groups.h>
#include <algorithm>
#include <atomic>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <limits>
#include <type_traits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"
#include "common/launch.cuh"

namespace pointops {
namespace {

using namespace voxel_downsample_detail;
using cuda::HashArrayView;
namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;
// Clouds of at least this many rows get the bins of the packed key (3 KB a cloud).
constexpr int64_t kPackedMinRows = 256;
// Step 5 (sorted-path clouds): threads a block; rows a block sorts in shared memory (a cloud of
// at most this many rows is sorted by one block alone, a larger one in chunks of it); outputs a
// warp merges in a pass of the grid-wide merge. 1,024 rows: their cells and row buffers (28 KB)
// fit static shared memory with two blocks an SM, so the whole of such a cloud sorts on cached
// cells with block barriers only; a larger cloud goes to the whole grid (a grid barrier per
// merge pass and two for the scan, ~1-2 us each), as one block on it would leave the other SMs
// idle. kMergeRows divides kChunkRows (a warp's outputs lie in one merge).
constexpr int kWideThreads = 512;
constexpr int kChunkRows = 1024;
constexpr int kMergeRows = 8 * cuda::kWarpSize;
static_assert(kChunkRows % kMergeRows == 0 && kChunkRows <= 65536, "rows of a chunk are uint16 offsets");

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
// shifts in place (pack_axis). A sorted-path cloud of more than kChunkRows rows is appended to
// sorted_clouds, sorted_header[0] counting them and sorted_header[1] their most rows (both start
// at 0), so that step 5 finds them without reading every cloud's layout in every block.
__global__ void key_layout_kernel(const int64_t* __restrict__ lengths, int64_t batch, int64_t n, int64_t stride,
                                  unsigned long long* __restrict__ low, const unsigned long long* __restrict__ high,
                                  KeyLayout* __restrict__ layouts, unsigned long long* __restrict__ sorted_header,
                                  int32_t* __restrict__ sorted_clouds) {
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
      const int64_t len = cloud_length(lengths, b, n);
      if (layout.path == static_cast<int32_t>(CloudPath::kSorted) && len > kChunkRows) {
        sorted_clouds[atomicAdd(sorted_header, 1ull)] = static_cast<int32_t>(b);
        atomicMax(sorted_header + 1, static_cast<unsigned long long>(len));
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

// Step 5: sorted-path clouds, in one cooperative launch (every block resident). A cloud of at
// most kChunkRows rows is sorted by one block in shared memory, which holds the cells of all its
// rows, so it needs no grid barrier; the blocks share out such clouds as they share out the batch.
// The rows of each larger cloud are sorted in chunks of kChunkRows the same way, then the whole
// grid merges the chunks of all those clouds at once, runs doubling each pass, one grid barrier a
// pass; a grid-wide scan numbers the voxels and the grid sums them.
// The sort order is (cell, row) with the rows that do not count last (their cell is kNoCell on
// every axis, above any counted cell), so no compaction (and its grid-wide scan) comes first:
// the counted rows end up first, in the order the CPU kernel sorts them.
constexpr int64_t kNoCell = std::numeric_limits<int64_t>::max();

// The sort cell of row i of a cloud; false (and kNoCell) for a row that does not count.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ bool sort_cell(const scalar_t* __restrict__ cloud, int64_t i, const VoxelGrid<acc_t>& grid,
                                          int64_t* cell) {
  const scalar_t* q = cloud + 3 * i;
  if (grid.cell(static_cast<acc_t>(q[0]), static_cast<acc_t>(q[1]), static_cast<acc_t>(q[2]), cell)) return true;
  cell[0] = cell[1] = cell[2] = kNoCell;
  return false;
}

// A row of a listed cloud (more than kChunkRows rows) in the grid-wide sort: its sort cell and
// its row in the cloud, the whole (cell, row) key. The chunk sorts write them with the cells they
// hold in shared memory, and the merge passes move them (a warp reads 32 consecutive records, one
// 32-byte sector each, with two 16-byte loads a lane), so no cell is computed from a point again.
// Counted iff cell[0] != kNoCell (a counted cell lies in [-2^62, 2^62)).
struct alignas(16) SortRow {
  int64_t cell[3];
  int64_t row;
};
static_assert(sizeof(SortRow) == 32, "a SortRow is one 32-byte sector");

__device__ __forceinline__ bool row_less(const SortRow& a, const SortRow& c) {
  return cell_index_less(a.cell, a.row, c.cell, c.row);
}

using WideScan = cub::BlockScan<int, kWideThreads>;
using WideReduce = cub::BlockReduce<int, kWideThreads>;

// A block's shared memory: the cells of one chunk's rows and two buffers of its rows (offsets in
// the chunk), 28 KB with kChunkRows = 1024.
struct ChunkStorage {
  int64_t cell[kChunkRows][3];
  uint16_t rows[2][kChunkRows];
  union {
    typename WideScan::TempStorage scan;
    typename WideReduce::TempStorage reduce;
  } temp;
  int total;
};

// How many of run[first, last) (chunk rows in (cell, row) order) come before chunk row `row`.
__device__ int rows_before(const uint16_t* run, int first, int last, const int64_t (*cell)[3], int row) {
  const int begin = first;
  while (first < last) {
    const int mid = (first + last) / 2;
    const int q = run[mid];
    if (cell_index_less(cell[q], q, cell[row], row)) {
      first = mid + 1;
    } else {
      last = mid;
    }
  }
  return first - begin;
}

// Rows [first, first + count) of a cloud (count <= kChunkRows) sorted by (cell, row), the rows
// that do not count last, by the whole block. Leaves each row's cell in s.cell (by its offset in
// the chunk) and returns the buffer of s.rows that holds the sorted offsets, which every thread
// may read at once (a block barrier follows their last write); *counted gets the rows that
// count. A bottom-up merge sort, runs of width 1, 2, 4, ...: an element's place in the merged
// pair is its place in its run plus the number of the other run's elements before it (keys are
// distinct, so the places form a permutation).
template <typename scalar_t, typename acc_t>
__device__ const uint16_t* sort_chunk(const scalar_t* __restrict__ cloud, int64_t first, int count,
                                      const VoxelGrid<acc_t>& grid, ChunkStorage& s, int* counted) {
  int valid = 0;
  for (int base = 0; base < count; base += kWideThreads) {
    const int r = base + threadIdx.x;
    bool in = false;
    if (r < count) {
      in = sort_cell(cloud, first + r, grid, s.cell[r]);
      s.rows[0][r] = static_cast<uint16_t>(r);
    }
    valid += __syncthreads_count(in);
  }
  uint16_t* src = s.rows[0];
  uint16_t* dst = s.rows[1];
  for (int width = 1; width < count; width *= 2) {
    for (int r = threadIdx.x; r < count; r += kWideThreads) {
      const int lo = r / (2 * width) * (2 * width);
      const int mid = min(lo + width, count);
      const int hi = min(lo + 2 * width, count);
      const int row = src[r];
      const int at = r < mid ? r + rows_before(src, mid, hi, s.cell, row)
                             : lo + (r - mid) + rows_before(src, lo, mid, s.cell, row);
      dst[at] = static_cast<uint16_t>(row);
    }
    __syncthreads();
    uint16_t* sorted = dst;
    dst = src;
    src = sorted;
  }
  *counted = valid;
  return src;
}

// The outputs and inputs every step-5 phase reads.
template <typename scalar_t, typename feature_t>
struct SortedOutputs {
  const scalar_t* points;
  const feature_t* features;
  int64_t f;
  scalar_t* centroids;
  feature_t* mean_features;
  int64_t* new_lengths;
  int64_t* point_voxel;

  // Voxel v of cloud b: rows members[0, count) in increasing index.
  __device__ __forceinline__ void voxel(const int32_t* members, int64_t count, int64_t b, int64_t n, int64_t v) const {
    write_voxel(members, count, b * n, b * n + v, v, points, features, f, centroids, mean_features, point_voxel);
  }
};

// A cloud of at most kChunkRows rows, by one block: its sorted rows go to order (its row of it),
// runs of equal cells are its voxels.
template <typename scalar_t, typename feature_t, typename acc_t>
__device__ void sort_small_cloud(int64_t b, int64_t n, int len, const VoxelGrid<acc_t>& grid,
                                 const SortedOutputs<scalar_t, feature_t>& o, int32_t* order, ChunkStorage& s) {
  int m = 0;
  const uint16_t* sorted = sort_chunk(o.points + 3 * b * n, 0, len, grid, s, &m);
  for (int r = threadIdx.x; r < len; r += kWideThreads) order[b * n + r] = static_cast<int32_t>(sorted[r]);
  uint16_t* starts = sorted == s.rows[0] ? s.rows[1] : s.rows[0];  // the sort is done with it
  int voxels = 0;
  for (int base = 0; base < m; base += kWideThreads) {
    const int r = base + threadIdx.x;
    const int head = r < m && (r == 0 || !same_cell(s.cell[sorted[r]], s.cell[sorted[r - 1]])) ? 1 : 0;
    int at = 0;
    int tile = 0;
    WideScan(s.temp.scan).ExclusiveSum(head, at, tile);
    if (head) starts[voxels + at] = static_cast<uint16_t>(r);
    voxels += tile;
    __syncthreads();  // temp is reused; starts is complete after the last tile
  }
  if (threadIdx.x == 0) o.new_lengths[b] = voxels;
  for (int v = threadIdx.x; v < voxels; v += kWideThreads) {
    const int begin = starts[v];
    const int end = v + 1 < voxels ? starts[v + 1] : m;
    o.voxel(order + b * n + begin, end - begin, b, n, v);
  }
  __syncthreads();  // s is reused by the block's next cloud
}

// The clouds of more than kChunkRows rows that take the sorted path (key_layout_kernel lists
// them, in any order: each is sorted on its own).
struct SortedList {
  const unsigned long long* header;  // [0]: clouds listed, [1]: the most rows of a listed cloud
  const int32_t* clouds;
  int32_t* block_heads;  // per block of the launch: the voxel heads in its range (the grid-wide scan)
};

// Item e of the listed clouds, each padded to `rows` rows: row *i of cloud *b; false past the
// cloud's length.
__device__ __forceinline__ bool listed_row(const SortedList& list, const int64_t* __restrict__ lengths, int64_t n,
                                           int64_t rows, int64_t e, int64_t* b, int64_t* i) {
  *b = list.clouds[e / rows];
  *i = e % rows;
  return *i < cloud_length(lengths, *b, n);
}

// Past the end of a run: after every row, so a merge never takes it.
__device__ __forceinline__ SortRow past_run() {
  return SortRow{{kNoCell, kNoCell, kNoCell}, std::numeric_limits<int64_t>::max()};
}

__device__ __forceinline__ SortRow shuffle_row(const SortRow& r, int lane) {
  SortRow out;
  for (int d = 0; d < 3; ++d) out.cell[d] = __shfl_sync(cuda::kFullMask, r.cell[d], lane);
  out.row = __shfl_sync(cuda::kFullMask, r.row, lane);
  return out;
}

// How many rows of a warp's window (one a lane, in (cell, row) order) come before r: a binary
// search over the lanes by shuffles (the whole warp takes part).
__device__ __forceinline__ int window_rank(const SortRow& window, const SortRow& r) {
  int count = 0;
  for (int step = cuda::kWarpSize; step > 0; step /= 2) {
    const int probe = count + step - 1;
    const SortRow other = shuffle_row(window, min(probe, cuda::kWarpSize - 1));
    if (probe < cuda::kWarpSize && row_less(other, r)) count += step;
  }
  return count;
}

// One cloud's records in a merge pass: read from src, written to dst.
struct RecordRuns {
  const SortRow* src;
  SortRow* dst;
  __device__ __forceinline__ SortRow load(int64_t k) const { return src[k]; }
  __device__ __forceinline__ void store(int64_t x, const SortRow& r) const { dst[x] = r; }
  __device__ __forceinline__ void copy(int64_t x) const { dst[x] = src[x]; }
};

// Pass `width` of the grid-wide merge on one cloud of len rows, by one warp: outputs [start,
// start + kMergeRows) of the merge of the runs [lo, mid) and [mid, hi) that hold them. The warp
// finds where they begin in both runs (merge path: a search on the diagonal, 33-way, each lane
// probing one point a round), then merges in rounds of 32 outputs: each lane reads the next row
// of each run (coalesced), ranks it in the other run's window by shuffles, and the rows ranked
// below 32 go to their place (the 32 smallest rows left lie in the two windows). So each output
// costs two coalesced reads and no binary search through memory.
template <typename Runs>
__device__ void merge_tile(const Runs& runs, int64_t len, int64_t width, int64_t start) {
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t lo = start / (2 * width) * (2 * width);
  const int64_t mid = min(lo + width, len);
  const int64_t hi = min(lo + 2 * width, len);
  const int64_t end = min(start + kMergeRows, hi);
  if (mid == hi) {  // a run without a partner: already in place
    for (int64_t x = start + lane; x < end; x += cuda::kWarpSize) runs.copy(x);
    return;
  }
  // i of the first run's rows (and d - i of the second's) precede output d: the first i such
  // that the first run's row i does not come before the second run's row d - 1 - i (true below
  // it, false from it on).
  const int64_t d = start - lo;
  int64_t i = max(int64_t{0}, d - (hi - mid));
  int64_t last = min(d, mid - lo);
  while (i < last) {
    const int64_t span = last - i;
    const bool few = span <= cuda::kWarpSize;
    const int64_t k = few ? i + lane : i + (lane + 1) * span / (cuda::kWarpSize + 1);
    const bool before = k < last && row_less(runs.load(lo + k), runs.load(mid + d - 1 - k));
    const int count = __popc(__ballot_sync(cuda::kFullMask, before));
    if (few) {
      i += count;
      break;
    }
    // Probes k(c) = i + (c + 1) * span / 33 increase with c: the first `count` hold.
    const int64_t next_i = count > 0 ? i + count * span / (cuda::kWarpSize + 1) + 1 : i;
    if (count < cuda::kWarpSize) last = i + (count + 1) * span / (cuda::kWarpSize + 1);
    i = next_i;
  }
  int64_t ia = lo + i;
  int64_t ic = mid + d - i;
  for (int64_t x = start; x < end;) {
    const SortRow a = ia + lane < mid ? runs.load(ia + lane) : past_run();
    const SortRow c = ic + lane < hi ? runs.load(ic + lane) : past_run();
    const int out = static_cast<int>(min(int64_t{cuda::kWarpSize}, end - x));
    const int rank_a = lane + window_rank(c, a);
    const int rank_c = lane + window_rank(a, c);
    if (rank_a < out) runs.store(x + rank_a, a);
    if (rank_c < out) runs.store(x + rank_c, c);
    const int from_a = __popc(__ballot_sync(cuda::kFullMask, rank_a < out));
    ia += from_a;
    ic += out - from_a;
    x += out;
  }
}

// Sum of v over the block, returned to every thread.
__device__ __forceinline__ int block_total(int v, ChunkStorage& s) {
  v = WideReduce(s.temp.reduce).Sum(v);
  if (threadIdx.x == 0) s.total = v;
  __syncthreads();
  v = s.total;
  __syncthreads();  // temp and total are free again
  return v;
}

// order and scratch: (B, N) int32 each (a cloud's sorted rows and the listed clouds' voxel
// marks). sorted_rows: two (B, N) buffers of SortRow, the merge passes' source and destination;
// read only when a cloud is listed, which needs N > kChunkRows (null otherwise). A cloud of any
// other path is skipped: steps 1-4 wrote its outputs. A sorted-path cloud's outputs are still as
// empty_downsample_outputs left them (its points had the invalid key), and this kernel fills its
// rows. Every block reaches every grid.sync(): the listed clouds' count is the same for all.
template <typename scalar_t, typename feature_t, typename acc_t>
__global__ void __launch_bounds__(kWideThreads, 2)
    sorted_clouds_kernel(const int64_t* __restrict__ lengths, int64_t batch, int64_t n, VoxelGrid<acc_t> grid,
                         const KeyLayout* __restrict__ layouts, SortedList list, int32_t* order, int32_t* scratch,
                         SortRow* sorted_rows, SortedOutputs<scalar_t, feature_t> o) {
  __shared__ ChunkStorage s;
  for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
    if (layouts[b].path != static_cast<int32_t>(CloudPath::kSorted)) continue;
    const int64_t len = cloud_length(lengths, b, n);
    if (len <= kChunkRows) sort_small_cloud(b, n, static_cast<int>(len), grid, o, order, s);
  }
  const int64_t clouds = static_cast<int64_t>(list.header[0]);
  if (clouds == 0) return;
  const int64_t rows = static_cast<int64_t>(list.header[1]);
  const cg::grid_group all = cg::this_grid();
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kWideThreads + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * kWideThreads;

  // Each chunk of kChunkRows rows of each listed cloud, sorted by a block, written as records
  // with the cells the block computed.
  const int64_t chunks = cuda::ceil_div(rows, int64_t{kChunkRows});
  for (int64_t t = blockIdx.x; t < clouds * chunks; t += gridDim.x) {
    const int64_t b = list.clouds[t / chunks];
    const int64_t first = t % chunks * kChunkRows;
    const int64_t len = cloud_length(lengths, b, n);
    if (first >= len) continue;
    const int count = static_cast<int>(min(len - first, int64_t{kChunkRows}));
    int counted = 0;
    const uint16_t* sorted = sort_chunk(o.points + 3 * b * n, first, count, grid, s, &counted);
    SortRow* out = sorted_rows + b * n + first;
    for (int r = threadIdx.x; r < count; r += kWideThreads) {
      const int q = sorted[r];
      out[r] = SortRow{{s.cell[q][0], s.cell[q][1], s.cell[q][2]}, first + q};
    }
    __syncthreads();  // s is reused by the block's next chunk
  }
  all.sync();

  // The merge passes, runs of kChunkRows, 2 kChunkRows, ... rows, kMergeRows outputs a warp
  // (kMergeRows divides every run, so a warp's outputs lie in one merge; the loop is the same
  // for every lane of a warp, as the shuffles need).
  SortRow* src = sorted_rows;
  SortRow* dst = sorted_rows + batch * n;
  const int64_t tiles = cuda::ceil_div(rows, int64_t{kMergeRows});
  const int64_t warp = thread / cuda::kWarpSize;
  const int64_t warps = threads / cuda::kWarpSize;
  for (int64_t width = kChunkRows; width < rows; width *= 2) {
    for (int64_t t = warp; t < clouds * tiles; t += warps) {
      const int64_t b = list.clouds[t / tiles];
      const int64_t len = cloud_length(lengths, b, n);
      const int64_t start = t % tiles * kMergeRows;
      if (start < len) merge_tile(RecordRuns{src + b * n, dst + b * n}, len, width, start);
    }
    all.sync();
    SortRow* sorted = dst;
    dst = src;
    src = sorted;
  }

  // Voxel heads (counted rows whose cell differs from the previous row's), numbered by a
  // grid-wide scan over the items of all listed clouds, each block a contiguous range: order
  // gets each sorted record's row, scratch 1 for a head, 0 for another counted row, -2 for a row
  // that does not count; then the head's number among all listed clouds' voxels, -1, -2.
  const int64_t items = clouds * rows;
  const int64_t begin = items * blockIdx.x / gridDim.x;
  const int64_t end = items * (blockIdx.x + 1) / gridDim.x;
  int heads = 0;
  for (int64_t e = begin + threadIdx.x; e < end; e += kWideThreads) {
    int64_t b, i;
    if (!listed_row(list, lengths, n, rows, e, &b, &i)) continue;
    const SortRow* sorted = src + b * n;
    const SortRow row = sorted[i];
    order[b * n + i] = static_cast<int32_t>(row.row);
    int mark = row.cell[0] != kNoCell ? 1 : -2;
    if (mark == 1 && i > 0 && same_cell(row.cell, sorted[i - 1].cell)) mark = 0;
    scratch[b * n + i] = mark;
    heads += mark == 1 ? 1 : 0;
  }
  heads = block_total(heads, s);
  if (threadIdx.x == 0) list.block_heads[blockIdx.x] = heads;
  all.sync();
  int before = 0;
  for (int k = threadIdx.x; k < static_cast<int>(blockIdx.x); k += kWideThreads) before += list.block_heads[k];
  before = block_total(before, s);
  for (int64_t base = begin; base < end; base += kWideThreads) {
    const int64_t e = base + threadIdx.x;
    int64_t b, i;
    int32_t* mark = nullptr;
    if (e < end && listed_row(list, lengths, n, rows, e, &b, &i)) mark = scratch + b * n + i;
    const int head = mark != nullptr && *mark == 1 ? 1 : 0;
    int at = 0;
    int tile = 0;
    WideScan(s.temp.scan).ExclusiveSum(head, at, tile);
    if (mark != nullptr) *mark = head ? before + at : (*mark == 0 ? -1 : -2);
    before += tile;
    __syncthreads();  // temp is reused
  }
  all.sync();

  // The sums: a head's voxel spans the rows up to the next head or uncounted row; its row in the
  // outputs is its number less that of the cloud's first row (a head: the cloud has a counted
  // point, and those sort first).
  for (int64_t e = thread; e < items; e += threads) {
    int64_t b, i;
    if (!listed_row(list, lengths, n, rows, e, &b, &i)) continue;
    const int32_t* marks = scratch + b * n;
    const int32_t number = marks[i];
    if (number < 0) continue;
    const int64_t len = cloud_length(lengths, b, n);
    int64_t j = i + 1;
    while (j < len && marks[j] == -1) ++j;
    const int64_t v = number - marks[0];
    o.voxel(order + b * n + i, j - i, b, n, v);
    if (j == len || marks[j] == -2) o.new_lengths[b] = v + 1;
  }
}

// The grid of sorted_clouds_kernel on the current device: as many blocks as are resident at once
// (a cooperative launch). The occupancy is queried once per device, as the GPUs of one process
// may differ in architecture; two first calls on one device may both query it and store the same
// value (relaxed atomics suffice). A device past the table's size queries it every call.
template <typename scalar_t, typename feature_t, typename acc_t>
int sorted_clouds_blocks() {
  static std::atomic<int> cached[C10_COMPILE_TIME_MAX_GPUS] = {};  // 0: not queried yet
  const int device = c10::cuda::current_device();
  const bool cacheable = device >= 0 && device < C10_COMPILE_TIME_MAX_GPUS;
  int per_sm = cacheable ? cached[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    per_sm = cuda::blocks_per_sm(sorted_clouds_kernel<scalar_t, feature_t, acc_t>, kWideThreads);
    TORCH_CHECK(per_sm > 0, "voxel_downsample: the sorted-path kernel cannot be resident on this device");
    if (cacheable) cached[device].store(per_sm, std::memory_order_relaxed);
  }
  return per_sm * cuda::sm_count();
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
  // high's last two entries are the header of step 5's list (zero like the rest).
  const int64_t stride = n >= kPackedMinRows ? 3 + 3 * kOffsetBins : 3;
  at::Tensor low = at::full({batch, stride}, -1, options.dtype(at::kLong));
  at::Tensor high = at::zeros({batch * stride + 2}, options.dtype(at::kLong));
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
  // One allocation: the layouts, then step 5's list of clouds (B int32) and its blocks' head
  // counts.
  const int sorted_blocks = sorted_clouds_blocks<scalar_t, feature_t, acc_t>();
  at::Tensor layouts = at::empty({batch * static_cast<int64_t>(sizeof(KeyLayout) + sizeof(int32_t)) +
                                  sorted_blocks * static_cast<int64_t>(sizeof(int32_t))},
                                 options.dtype(at::kByte));
  auto* layout_ptr = reinterpret_cast<KeyLayout*>(layouts.data_ptr<uint8_t>());
  auto* sorted_clouds = reinterpret_cast<int32_t*>(layout_ptr + batch);
  unsigned long long* sorted_header = high_ptr + batch * stride;
  key_layout_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(lengths, batch, n, stride, low_ptr, high_ptr,
                                                                layout_ptr, sorted_header, sorted_clouds);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor keys = at::empty({total}, options.dtype(at::kLong));
  keys_kernel<scalar_t, acc_t><<<blocks_for(total), kThreads, 0, stream>>>(
      pts_ptr, lengths, n, total, grid, stride, low_ptr, layout_ptr, keys.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  {  // the hash arrays are dead once step 4 is launched: freed here, before step 5's records
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
        h, total, batch, n, total, first_run.data_ptr<int64_t>(), pts_ptr,
        f > 0 ? feats.data_ptr<feature_t>() : nullptr, f, std::get<0>(outputs).data_ptr<scalar_t>(),
        f > 0 ? std::get<1>(outputs).data_ptr<feature_t>() : nullptr, std::get<3>(outputs).data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // Sorted-path clouds. The keys are dead once the hash arrays are built (stream order), so
  // their 8 * B * N bytes hold the two (B, N) int32 buffers of step 5 (order, scratch). A listed
  // cloud (more than kChunkRows rows, so only when N > kChunkRows) also needs two (B, N) buffers
  // of SortRow records: 64 * B * N bytes, sized from the shape (whether any cloud is listed is
  // known on the device only), allocated after the hash arrays are freed so that the caching
  // allocator can hand their blocks back (stream order makes the reuse safe).
  int32_t* order = reinterpret_cast<int32_t*>(keys.data_ptr<int64_t>());
  at::Tensor sorted_rows;
  SortRow* sorted_rows_ptr = nullptr;
  if (n > kChunkRows) {
    sorted_rows =
        at::empty({2 * total * static_cast<int64_t>(sizeof(SortRow) / sizeof(int64_t))}, options.dtype(at::kLong));
    sorted_rows_ptr = reinterpret_cast<SortRow*>(sorted_rows.data_ptr<int64_t>());
  }
  const SortedList list{sorted_header, sorted_clouds, sorted_clouds + batch};
  const SortedOutputs<scalar_t, feature_t> o{pts_ptr,
                                             f > 0 ? feats.data_ptr<feature_t>() : nullptr,
                                             f,
                                             std::get<0>(outputs).data_ptr<scalar_t>(),
                                             f > 0 ? std::get<1>(outputs).data_ptr<feature_t>() : nullptr,
                                             std::get<2>(outputs).data_ptr<int64_t>(),
                                             std::get<3>(outputs).data_ptr<int64_t>()};
  cuda::LaunchShape shape{dim3(static_cast<unsigned>(sorted_blocks)), dim3(kWideThreads)};
  shape.cooperative = true;
  cuda::launch(sorted_clouds_kernel<scalar_t, feature_t, acc_t>, shape, stream, lengths, batch, n, grid, layout_ptr,
               list, order, order + total, sorted_rows_ptr, o);
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
