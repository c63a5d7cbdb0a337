// The grid of grid.h on CUDA, for a whole batch of clouds at once, with no host sync:
//   1. bounding box of each cloud's finite points (block min/max, then 64-bit atomics on
//      order-preserving bits: exact, so the result does not depend on the order), and where the
//      batch averages kTrimMinAverage points a cloud or more, the trimmed box of grid.h: the
//      magnitude histograms in the same pass, one warp per cloud and axis picks the bins, a pass
//      for the linear histograms, a warp per cloud and axis again (integer counts: exact, so the
//      CPU, which walks the same histograms, gets the same box);
//   2. each cloud's cell size and dims (one thread per cloud) and its key range, the exclusive
//      sum of the clouds' cell budgets (one block: the budgets come from lengths on the device,
//      and their total is bounded on the host by CellBudget::total_cells_bound);
//   3. a cell key per point (an invalid key for absent points) and the parallel hash array of
//      common/hash_array.cuh over them: stable radix sort + run-length encoding + scan;
//   4. the cell table, cell_start[c] = sorted position of the first point with key >= c, by a
//      binary search of c in the unique keys per table entry;
//   5. the sorted points (compute type, 16 or 32 bytes each, with their index in the cloud).
// Queries are then ordered by their cell (sort_queries_by_cell), so that neighbouring threads
// search neighbouring cells.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include "common/aten.h"

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <limits>

#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"
#include "geometry/grid.h"

namespace pointops {
namespace neighbors {
namespace grid_cuda {

constexpr int kThreads = 256;
constexpr int kRowsPerThread = 8;
constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kRowsPerThread;
constexpr int kParamThreads = 1024;

inline unsigned blocks_for(int64_t items, int64_t per_block) {
  return static_cast<unsigned>(cuda::ceil_div(items, per_block));
}

__device__ inline unsigned long long ordered_bits(double v) {
  const long long bits = __double_as_longlong(v);
  return bits < 0 ? ~static_cast<unsigned long long>(bits)
                  : static_cast<unsigned long long>(bits) | 0x8000000000000000ull;
}

__device__ inline double from_ordered_bits(unsigned long long u) {
  const unsigned long long bits = (u & 0x8000000000000000ull) ? (u & 0x7fffffffffffffffull) : ~u;
  return __longlong_as_double(static_cast<long long>(bits));
}

// The cloud a row would belong to, ignoring lengths (padded: row / N; packed: the last b with
// offsets[b] <= row, possibly -1 or B). Rows of one segment share a cloud or none.
__device__ inline int64_t segment_of(const CloudRows& rows, int64_t row) {
  if (!rows.packed) return row / rows.rows_per_cloud;
  int64_t lo = 0;
  int64_t hi = rows.batch + 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (rows.counts[mid] <= row) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

__device__ inline void flush_box(unsigned long long* box, int64_t b, const double lo[3], const double hi[3]) {
  if (b < 0 || !(lo[0] <= hi[0])) return;
  for (int d = 0; d < 3; ++d) {
    atomicMin(box + b * 6 + d, ordered_bits(lo[d]));
    atomicMax(box + b * 6 + 3 + d, ordered_bits(hi[d]));
  }
}

// Clouds get the trimmed box (grid.h) on CUDA where the batch averages this many points a cloud
// or more: its two histograms take 2 x 3 x kBoxBins int32 (48 KB) a cloud, 12 bytes a point at
// this average.
constexpr int64_t kTrimMinAverage = 4096;

constexpr unsigned long long kNoBin = ~0ull;

// Adds one to hist[key] for each lane with a key (kNoBin: none); lanes of a warp with the same
// key add once. Every lane of the warp must call it.
__device__ inline void count_in_warp(int32_t* __restrict__ hist, unsigned long long key) {
  const unsigned group = __match_any_sync(cuda::kFullMask, key);
  if (key != kNoBin && static_cast<int>(threadIdx.x % cuda::kWarpSize) == __ffs(group) - 1) {
    atomicAdd(hist + key, __popc(group));
  }
}

// box (B, 6): min x, y, z then max x, y, z as ordered bits; initialised to (all ones, zero).
// hist (B, 3, kBoxBins), zeroed, or null: each cloud's magnitude histograms per axis.
template <typename acc_t>
__global__ void __launch_bounds__(kThreads)
    bounding_box_kernel(const acc_t* __restrict__ points, CloudRows rows, int64_t total_rows,
                        unsigned long long* __restrict__ box, int32_t* __restrict__ hist) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t tile_end = tile_begin + kTile < total_rows ? tile_begin + kTile : total_rows;
  const bool one_segment = segment_of(rows, tile_begin) == segment_of(rows, tile_end - 1);
  double lo[3] = {kInf, kInf, kInf};
  double hi[3] = {-kInf, -kInf, -kInf};
  int64_t current = -1;
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int64_t row = tile_begin + static_cast<int64_t>(i) * kThreads + threadIdx.x;
    if (row >= tile_end) break;
    int64_t local = 0;
    const int64_t b = rows.cloud_of(row, &local);
    if (b < 0) continue;
    const acc_t* p = points + row * 3;
    if (!is_finite3(p[0], p[1], p[2])) continue;
    if (b != current && !one_segment) {
      flush_box(box, current, lo, hi);
      for (int d = 0; d < 3; ++d) {
        lo[d] = kInf;
        hi[d] = -kInf;
      }
    }
    current = b;
    for (int d = 0; d < 3; ++d) {
      const double v = static_cast<double>(p[d]);
      lo[d] = fmin(lo[d], v);
      hi[d] = fmax(hi[d], v);
    }
  }
  if (hist != nullptr) {
    for (int i = 0; i < kRowsPerThread; ++i) {  // every lane runs every step (count_in_warp)
      const int64_t row = tile_begin + static_cast<int64_t>(i) * kThreads + threadIdx.x;
      int64_t local = 0;
      const int64_t b = row < tile_end ? rows.cloud_of(row, &local) : -1;
      const acc_t* p = points + row * 3;
      const bool counted = b >= 0 && is_finite3(p[0], p[1], p[2]);
      for (int d = 0; d < 3; ++d) {
        count_in_warp(hist, counted ? static_cast<unsigned long long>((b * 3 + d) * kBoxBins +
                                                                      magnitude_bin(static_cast<double>(p[d])))
                                    : kNoBin);
      }
    }
  }
  if (!one_segment) {
    flush_box(box, current, lo, hi);
    return;
  }
  // The whole tile is one cloud (or none): reduce in the block, then one thread's atomics.
  __shared__ double shared[kThreads / cuda::kWarpSize][6];
  __shared__ long long cloud;
  if (threadIdx.x == 0) cloud = -1;
  __syncthreads();
  if (current >= 0) cloud = current;  // every thread that saw a point saw the same cloud
  for (int offset = cuda::kWarpSize / 2; offset > 0; offset /= 2) {
    for (int d = 0; d < 3; ++d) {
      lo[d] = fmin(lo[d], __shfl_xor_sync(cuda::kFullMask, lo[d], offset));
      hi[d] = fmax(hi[d], __shfl_xor_sync(cuda::kFullMask, hi[d], offset));
    }
  }
  const int warp = threadIdx.x / cuda::kWarpSize;
  if (threadIdx.x % cuda::kWarpSize == 0) {
    for (int d = 0; d < 3; ++d) {
      shared[warp][d] = lo[d];
      shared[warp][3 + d] = hi[d];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / cuda::kWarpSize; ++w) {
      for (int d = 0; d < 3; ++d) {
        lo[d] = fmin(lo[d], shared[w][d]);
        hi[d] = fmax(hi[d], shared[w][3 + d]);
      }
    }
    flush_box(box, cloud, lo, hi);
  }
}

// The linear histograms of the trimmed box: hist (B, 3, kBoxBins), zeroed; bounds (B, 6) the
// magnitude pass's box (lo x, y, z, hi x, y, z).
template <typename acc_t>
__global__ void __launch_bounds__(kThreads)
    linear_bins_kernel(const acc_t* __restrict__ points, CloudRows rows, int64_t total_rows,
                       const double* __restrict__ bounds, int32_t* __restrict__ hist) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t local = 0;
  const int64_t b = row < total_rows ? rows.cloud_of(row, &local) : -1;
  const acc_t* p = points + row * 3;
  const bool counted = b >= 0 && is_finite3(p[0], p[1], p[2]);
  for (int d = 0; d < 3; ++d) {
    count_in_warp(hist, counted ? static_cast<unsigned long long>(
                                      (b * 3 + d) * kBoxBins +
                                      linear_bin(static_cast<double>(p[d]), bounds[b * 6 + d], bounds[b * 6 + 3 + d]))
                                : kNoBin);
  }
}

// Kernels that are not templates are static: this header is compiled into several .cu files, and
// each would otherwise define them again at link time.

// The axis box [lo, hi] narrowed to the trimmed bins of its histogram h (kBoxBins counts, global
// or shared memory), by one whole warp: trimmed_bins' bins, found by a scan of the lanes' 64-bin
// slices, for both trims, then narrow_axis_trimmed. Every lane gets the result.
constexpr int kBinsPerLane = kBoxBins / cuda::kWarpSize;

__device__ inline void warp_trim_axis(const int32_t* h, bool linear, double* lo, double* hi) {
  const int lane = static_cast<int>(threadIdx.x % cuda::kWarpSize);
  long long mine = 0;
  for (int j = 0; j < kBinsPerLane; ++j) mine += h[lane * kBinsPerLane + j];
  long long below = mine;  // inclusive scan over the lanes
  for (int offset = 1; offset < cuda::kWarpSize; offset *= 2) {
    const long long other = __shfl_up_sync(cuda::kFullMask, below, offset);
    if (lane >= offset) below += other;
  }
  const long long total = __shfl_sync(cuda::kFullMask, below, cuda::kWarpSize - 1);
  if (total / kTrimFarDivisor == 0) return;
  const long long above = total - below + mine;  // this slice and every slice after it
  // The bins of one trim: the lane whose slice holds the first bin counted past trim from below
  // walks its slice; the same from above.
  auto bins = [&](long long trim, int* first_bin, int* last_bin) {
    const unsigned first_lanes = __ballot_sync(cuda::kFullMask, below > trim);
    const unsigned last_lanes = __ballot_sync(cuda::kFullMask, above > trim);
    const int first_lane = __ffs(first_lanes) - 1;
    const int last_lane = cuda::kWarpSize - 1 - __clz(last_lanes);
    int first = 0;
    int last = 0;
    if (lane == first_lane) {
      long long count = below - mine;
      int j = 0;
      while (j < kBinsPerLane - 1 && (count += h[lane * kBinsPerLane + j]) <= trim) ++j;
      first = lane * kBinsPerLane + j;
    }
    if (lane == last_lane) {
      long long count = above - mine;
      int j = kBinsPerLane - 1;
      while (j > 0 && (count += h[lane * kBinsPerLane + j]) <= trim) --j;
      last = lane * kBinsPerLane + j;
    }
    *first_bin = __shfl_sync(cuda::kFullMask, first, first_lane);
    *last_bin = __shfl_sync(cuda::kFullMask, last, last_lane);
  };
  int near_first, near_last, far_first, far_last;
  bins(total / kTrimDivisor, &near_first, &near_last);
  bins(total / kTrimFarDivisor, &far_first, &far_last);
  narrow_axis_trimmed(linear, near_first, near_last, far_first, far_last, lo, hi);
}

// One warp per (cloud, axis): its box narrowed by its histogram (warp_trim_axis). The magnitude
// pass starts from the bounding box (box, ordered bits), the linear one from bounds (B, 6), which
// both write. A cloud without points keeps its entries unwritten (grid_params_kernel ignores them).
static __global__ void trim_box_kernel(const int32_t* __restrict__ hist, const unsigned long long* __restrict__ box,
                                       int64_t batch, bool linear, double* __restrict__ bounds) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / cuda::kWarpSize;
  const int64_t b = warp / 3;
  const int d = static_cast<int>(warp % 3);
  if (b >= batch || box[b * 6] == ~0ull) return;  // the whole warp
  double lo = linear ? bounds[b * 6 + d] : from_ordered_bits(box[b * 6 + d]);
  double hi = linear ? bounds[b * 6 + 3 + d] : from_ordered_bits(box[b * 6 + 3 + d]);
  warp_trim_axis(hist + (b * 3 + d) * kBoxBins, linear, &lo, &hi);
  if (threadIdx.x % cuda::kWarpSize == 0) {
    bounds[b * 6 + d] = lo;
    bounds[b * 6 + 3 + d] = hi;
  }
}

// One block: each cloud's grid and the exclusive sum of the cell budgets as its key base. With
// `first` (the kNN refinement), each cloud's smallest cell edge comes from the occupancy that
// its first grid measured (stats: sum of count^2 and of count per cloud).
static __global__ void __launch_bounds__(kParamThreads)
    grid_params_kernel(const unsigned long long* __restrict__ box, const double* __restrict__ bounds, CloudRows rows,
                       double min_size, CellBudget budget, const GridCloud* __restrict__ first,
                       const unsigned long long* __restrict__ stats, double target, GridCloud* __restrict__ clouds) {
  using Scan = cub::BlockScan<long long, kParamThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ long long carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t chunk = 0; chunk < rows.batch; chunk += kParamThreads) {
    const int64_t b = chunk + threadIdx.x;
    const long long cap = b < rows.batch ? budget.cells(rows.length(b)) : 0;
    long long offset = 0;
    long long total = 0;
    Scan(temp).ExclusiveSum(cap, offset, total);
    if (b < rows.batch) {
      const bool any = box[b * 6] != ~0ull;
      double lo[3] = {0.0, 0.0, 0.0};
      double hi[3] = {0.0, 0.0, 0.0};
      for (int d = 0; any && d < 3; ++d) {  // bounds of a cloud without points are never written
        lo[d] = bounds != nullptr ? bounds[b * 6 + d] : from_ordered_bits(box[b * 6 + d]);
        hi[d] = bounds != nullptr ? bounds[b * 6 + 3 + d] : from_ordered_bits(box[b * 6 + 3 + d]);
      }
      const double size = first == nullptr ? min_size
                                           : refined_cell_size(first[b], static_cast<double>(stats[b * 2]),
                                                               static_cast<double>(stats[b * 2 + 1]), target);
      clouds[b] = make_grid_cloud(lo, hi, any, size, cap, carry + offset);
    }
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
}

template <typename acc_t>
__global__ void point_keys_kernel(const acc_t* __restrict__ points, CloudRows rows, int64_t total_rows,
                                  const GridCloud* __restrict__ clouds, int64_t key_bound, int64_t* __restrict__ keys) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= total_rows) return;
  int64_t local = 0;
  const int64_t b = rows.cloud_of(row, &local);
  const acc_t* p = points + row * 3;
  keys[row] = b >= 0 && is_finite3(p[0], p[1], p[2])
                  ? clouds[b].point_key(static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]))
                  : key_bound;
}

// Points per cell of a first grid (the kNN refinement).
template <typename acc_t>
__global__ void cell_counts_kernel(const acc_t* __restrict__ points, CloudRows rows, int64_t total_rows,
                                   const GridCloud* __restrict__ clouds, int32_t* __restrict__ counts) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= total_rows) return;
  int64_t local = 0;
  const int64_t b = rows.cloud_of(row, &local);
  const acc_t* p = points + row * 3;
  if (b < 0 || !is_finite3(p[0], p[1], p[2])) return;
  atomicAdd(
      counts + clouds[b].point_key(static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2])), 1);
}

// stats (B, 2): sum over the cloud's cells of count^2, and of count (integer atomics: exact).
// A warp whose entries all belong to one cloud adds its sums once.
static __global__ void occupancy_kernel(const int32_t* __restrict__ counts, int64_t entries,
                                        const GridCloud* __restrict__ clouds, int64_t batch,
                                        unsigned long long* __restrict__ stats) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned long long c = e < entries ? static_cast<unsigned long long>(counts[e]) : 0ull;
  int64_t b = -1;
  if (c > 0) {  // the last cloud whose key base is <= e
    int64_t lo = 0;
    int64_t hi = batch;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (clouds[mid].base <= e) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    b = lo - 1;
  }
  const unsigned any = __ballot_sync(cuda::kFullMask, b >= 0);
  if (any == 0) return;  // the whole warp: no count here
  const long long lead = __shfl_sync(cuda::kFullMask, static_cast<long long>(b), __ffs(any) - 1);
  if (__all_sync(cuda::kFullMask, b == lead || b < 0)) {
    unsigned long long squares = c * c;
    unsigned long long count = c;
    for (int offset = cuda::kWarpSize / 2; offset > 0; offset /= 2) {
      squares += __shfl_xor_sync(cuda::kFullMask, squares, offset);
      count += __shfl_xor_sync(cuda::kFullMask, count, offset);
    }
    if (threadIdx.x % cuda::kWarpSize == 0) {
      atomicAdd(stats + lead * 2, squares);
      atomicAdd(stats + lead * 2 + 1, count);
    }
  } else if (b >= 0) {
    atomicAdd(stats + b * 2, c * c);
    atomicAdd(stats + b * 2 + 1, c);
  }
}

static __global__ void cell_table_kernel(cuda::HashArrayView h, int64_t table_size, int32_t* __restrict__ cell_start) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= table_size) return;
  const int64_t runs = *h.num_unique;
  const int64_t stored = runs > 0 ? static_cast<int64_t>(h.starts[runs - 1]) + h.counts[runs - 1] : 0;
  const int64_t r = hash_array::lower_bound(h.unique_keys, runs, c);
  cell_start[c] = static_cast<int32_t>(r < runs ? h.starts[r] : stored);
}

template <typename acc_t>
__global__ void sorted_points_kernel(const acc_t* __restrict__ points, CloudRows rows, int64_t total_rows,
                                     cuda::HashArrayView h, int64_t key_bound, SortedPoint<acc_t>* __restrict__ out) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= total_rows || h.sorted_keys[j] == key_bound) return;
  const int64_t row = h.perm[j];
  int64_t local = 0;
  rows.cloud_of(row, &local);
  const acc_t* p = points + row * 3;
  out[j] = make_point(p[0], p[1], p[2], local);
}

// The points in row order for the brute-force searches (x = NaN where absent).
template <typename acc_t>
__global__ void row_points_kernel(const acc_t* __restrict__ points, CloudRows rows, int64_t total_rows,
                                  SortedPoint<acc_t>* __restrict__ out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= total_rows) return;
  int64_t local = 0;
  const int64_t b = rows.cloud_of(row, &local);
  const acc_t* p = points + row * 3;
  const acc_t nan = std::numeric_limits<acc_t>::quiet_NaN();
  out[row] = b >= 0 ? make_point(p[0], p[1], p[2], local) : make_point(nan, nan, nan, local);
}

template <typename acc_t>
struct DeviceGrid {
  at::Tensor clouds;      // (B,) GridCloud, as bytes
  at::Tensor cell_start;  // (cells + 1,) int32
  at::Tensor points;      // (rows,) SortedPoint<acc_t>, as bytes; the first `stored` are valid
  int64_t key_bound;      // the table's cell count: no key reaches it

  const GridCloud* cloud_ptr() const { return reinterpret_cast<const GridCloud*>(clouds.data_ptr<uint8_t>()); }
  const SortedPoint<acc_t>* point_ptr() const {
    return reinterpret_cast<const SortedPoint<acc_t>*>(points.data_ptr<uint8_t>());
  }
};

// points (total_rows, 3) contiguous acc_t on the current device. refine_target > 0 (kNN: the
// points a cell should hold) refines each cloud's cells to the density its points see, from a
// first grid's cell counts (refined_cell_size in grid.h), within kRefineBudget times the budget.
template <typename acc_t>
DeviceGrid<acc_t> build_grid(const at::Tensor& points, const CloudRows& rows, int64_t total_rows, double min_size,
                             const CellBudget& first_budget, double refine_target = 0.0) {
  cuda::check_cub_items(total_rows, "neighbour grid: total points");
  const auto options = points.options();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const acc_t* pts = points.data_ptr<acc_t>();
  DeviceGrid<acc_t> grid;
  // The refined grid's budget: kRefineBudget times the first, less where the cell table would
  // outgrow int32 (the refinement is skipped when not even twice the first budget fits).
  int64_t multiplier = kRefineBudget;
  while (multiplier >= 2 && CellBudget{first_budget.num * multiplier, first_budget.den}.total_cells_bound(
                                total_rows, rows.batch) >= std::numeric_limits<int32_t>::max()) {
    multiplier /= 2;
  }
  const bool refine = refine_target > 0.0 && multiplier >= 2;
  const CellBudget budget = refine ? CellBudget{first_budget.num * multiplier, first_budget.den} : first_budget;
  grid.key_bound = budget.total_cells_bound(total_rows, rows.batch);
  TORCH_CHECK(grid.key_bound < std::numeric_limits<int32_t>::max(), "neighbour grid: the cell table would need ",
              grid.key_bound, " entries, more than int32 indexes");

  at::Tensor box = at::empty({rows.batch, 6}, options.dtype(at::kLong));
  box.narrow(1, 0, 3).fill_(-1);  // all ones: above every ordered value
  box.narrow(1, 3, 3).fill_(0);
  auto* box_ptr = reinterpret_cast<unsigned long long*>(box.data_ptr<int64_t>());
  // The trimmed box (grid.h) where the batch averages kTrimMinAverage points a cloud or more.
  const bool trim = rows.batch > 0 && total_rows / rows.batch >= kTrimMinAverage;
  at::Tensor hist, bounds;
  if (trim) {
    hist = at::zeros({2, rows.batch, 3, kBoxBins}, options.dtype(at::kInt));
    bounds = at::empty({rows.batch, 6}, options.dtype(at::kDouble));
  }
  int32_t* hist_ptr = trim ? hist.data_ptr<int32_t>() : nullptr;
  double* bounds_ptr = trim ? bounds.data_ptr<double>() : nullptr;
  if (total_rows > 0) {
    bounding_box_kernel<acc_t>
        <<<blocks_for(total_rows, kTile), kThreads, 0, stream>>>(pts, rows, total_rows, box_ptr, hist_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (trim && total_rows > 0) {
    const unsigned select_blocks = blocks_for(rows.batch * 3 * cuda::kWarpSize, kThreads);
    trim_box_kernel<<<select_blocks, kThreads, 0, stream>>>(hist_ptr, box_ptr, rows.batch, false, bounds_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    int32_t* linear_hist = hist_ptr + rows.batch * 3 * kBoxBins;
    linear_bins_kernel<acc_t>
        <<<blocks_for(total_rows, kThreads), kThreads, 0, stream>>>(pts, rows, total_rows, bounds_ptr, linear_hist);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    trim_box_kernel<<<select_blocks, kThreads, 0, stream>>>(linear_hist, box_ptr, rows.batch, true, bounds_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  grid.clouds = at::empty({rows.batch * static_cast<int64_t>(sizeof(GridCloud))}, options.dtype(at::kByte));
  auto* clouds = reinterpret_cast<GridCloud*>(grid.clouds.template data_ptr<uint8_t>());
  if (rows.batch > 0 && !refine) {
    grid_params_kernel<<<1, kParamThreads, 0, stream>>>(box_ptr, bounds_ptr, rows, min_size, budget, nullptr, nullptr,
                                                        0.0, clouds);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else if (rows.batch > 0) {
    at::Tensor first = at::empty_like(grid.clouds);
    auto* first_ptr = reinterpret_cast<GridCloud*>(first.data_ptr<uint8_t>());
    grid_params_kernel<<<1, kParamThreads, 0, stream>>>(box_ptr, bounds_ptr, rows, min_size, first_budget, nullptr,
                                                        nullptr, 0.0, first_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t entries = first_budget.total_cells_bound(total_rows, rows.batch);
    at::Tensor counts = at::zeros({entries}, options.dtype(at::kInt));
    at::Tensor stats = at::zeros({rows.batch, 2}, options.dtype(at::kLong));
    auto* stats_ptr = reinterpret_cast<unsigned long long*>(stats.data_ptr<int64_t>());
    if (total_rows > 0) {
      cell_counts_kernel<acc_t><<<blocks_for(total_rows, kThreads), kThreads, 0, stream>>>(
          pts, rows, total_rows, first_ptr, counts.data_ptr<int32_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      occupancy_kernel<<<blocks_for(entries, kThreads), kThreads, 0, stream>>>(counts.data_ptr<int32_t>(), entries,
                                                                               first_ptr, rows.batch, stats_ptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    grid_params_kernel<<<1, kParamThreads, 0, stream>>>(box_ptr, bounds_ptr, rows, min_size, budget, first_ptr,
                                                        stats_ptr, refine_target, clouds);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  at::Tensor keys = at::empty({total_rows}, options.dtype(at::kLong));
  if (total_rows > 0) {
    point_keys_kernel<acc_t><<<blocks_for(total_rows, kThreads), kThreads, 0, stream>>>(
        pts, rows, total_rows, clouds, grid.key_bound, keys.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const cuda::HashArray hash = cuda::build_hash_array(keys, grid.key_bound);
  const int64_t table_size = grid.key_bound + 1;
  grid.cell_start = at::empty({table_size}, options.dtype(at::kInt));
  cell_table_kernel<<<blocks_for(table_size, kThreads), kThreads, 0, stream>>>(
      hash.view(), table_size, grid.cell_start.template data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  grid.points = at::empty({total_rows * static_cast<int64_t>(sizeof(SortedPoint<acc_t>))}, options.dtype(at::kByte));
  if (total_rows > 0) {
    sorted_points_kernel<acc_t><<<blocks_for(total_rows, kThreads), kThreads, 0, stream>>>(
        pts, rows, total_rows, hash.view(), grid.key_bound,
        reinterpret_cast<SortedPoint<acc_t>*>(grid.points.template data_ptr<uint8_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return grid;
}

template <typename acc_t>
at::Tensor row_points(const at::Tensor& points, const CloudRows& rows, int64_t total_rows) {
  at::Tensor out =
      at::empty({total_rows * static_cast<int64_t>(sizeof(SortedPoint<acc_t>))}, points.options().dtype(at::kByte));
  if (total_rows > 0) {
    row_points_kernel<acc_t><<<blocks_for(total_rows, kThreads), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        points.data_ptr<acc_t>(), rows, total_rows, reinterpret_cast<SortedPoint<acc_t>*>(out.data_ptr<uint8_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

// A query's cell key in its cloud's grid (clamped into the grid), for ordering only.
template <typename acc_t>
__global__ void query_keys_kernel(const acc_t* __restrict__ queries, CloudRows rows, int64_t total_rows,
                                  const GridCloud* __restrict__ clouds, int64_t key_bound, int64_t* __restrict__ keys,
                                  int32_t* __restrict__ order) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= total_rows) return;
  int64_t local = 0;
  const int64_t b = rows.cloud_of(row, &local);
  const acc_t* q = queries + row * 3;
  keys[row] = b >= 0 && is_finite3(q[0], q[1], q[2])
                  ? clouds[b].point_key(static_cast<double>(q[0]), static_cast<double>(q[1]), static_cast<double>(q[2]))
                  : key_bound;
  order[row] = static_cast<int32_t>(row);
}

// The query rows ordered by cell (int32, total_rows), so a warp's queries search nearby cells.
template <typename acc_t>
at::Tensor sort_queries_by_cell(const at::Tensor& queries, const CloudRows& rows, int64_t total_rows,
                                const DeviceGrid<acc_t>& grid) {
  cuda::check_cub_items(total_rows, "neighbour search: total queries");
  const auto options = queries.options();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  at::Tensor keys = at::empty({total_rows}, options.dtype(at::kLong));
  at::Tensor sorted_keys = at::empty({total_rows}, options.dtype(at::kLong));
  at::Tensor rows_in = at::empty({total_rows}, options.dtype(at::kInt));
  at::Tensor order = at::empty({total_rows}, options.dtype(at::kInt));
  if (total_rows == 0) return order;
  query_keys_kernel<acc_t><<<blocks_for(total_rows, kThreads), kThreads, 0, stream>>>(
      queries.data_ptr<acc_t>(), rows, total_rows, grid.cloud_ptr(), grid.key_bound, keys.data_ptr<int64_t>(),
      rows_in.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  int end_bit = 1;
  while (end_bit < 63 && (grid.key_bound >> end_bit) != 0) ++end_bit;
  const auto* keys_in = reinterpret_cast<const uint64_t*>(keys.data_ptr<int64_t>());
  auto* keys_out = reinterpret_cast<uint64_t*>(sorted_keys.data_ptr<int64_t>());
  const int32_t* values_in = rows_in.data_ptr<int32_t>();
  int32_t* values_out = order.data_ptr<int32_t>();
  const int items = static_cast<int>(total_rows);
  cuda::cub_call(queries.device(), [&](void* temp, size_t& bytes) {
    return cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys_out, values_in, values_out, items, 0, end_bit,
                                           stream);
  });
  return order;
}

}  // namespace grid_cuda
}  // namespace neighbors
}  // namespace pointops
