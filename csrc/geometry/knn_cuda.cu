// k nearest neighbours on CUDA (rules in knn.h; the CPU twin is knn_cpu.cpp).
//
// One thread per query keeps its k best (distance, index) pairs sorted in registers (k <= 32,
// in 4, 8, 16 or 32 slots; larger k keeps the list in the output row) and runs the search of
// grid.h that the CPU runs too:
//   * brute force (small problems: queries x points per cloud <= 2^27): the cloud's points in row
//     order from a compact copy (16 bytes a point for float32) that the warp's threads read in
//     lockstep, so each load is one broadcast from L1;
//   * grid (everything larger): grid_cuda.cuh builds one uniform grid per cloud with the parallel
//     hash array (cells sized for about max(2, k/3) points), queries are sorted by cell, and each
//     searches ring by ring with the exact stopping rule of grid.h; a search that runs past its
//     work limit (a query far outside the cloud's box) is finished by a block instead ("Far
//     queries").
// What bounds it: at the bench's sizes (10^5 queries and points) the grid build's fixed chain of
// ~25 short launches (two radix sorts, run-length encoding, scans, tables) is comparable to the
// search, which is ~30 cells and ~6k candidate distances per query, issue-bound in the list
// insertions.
#include "geometry/knn.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <limits>
#include <type_traits>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/launch.cuh"
#include "geometry/grid.h"
#include "geometry/grid_cuda.cuh"

namespace pointops {
namespace {

using neighbors::CloudRows;
using neighbors::GridCloud;
using neighbors::SortedPoint;
using neighbors::Strategy;

constexpr int kSearchThreads = 128;

template <typename acc_t>
struct KnnProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  CloudRows point_rows;
  int64_t k;
  int64_t* out_index;
  acc_t* out_distance;
  acc_t limit;  // squared_limit(max_distance)
};

// Search state shared by the strategies: the grid (grid) or row-ordered points (brute).
template <typename acc_t>
struct SearchData {
  const int32_t* order;  // query rows by cell (grid), or null: row t is query t
  const GridCloud* clouds;
  const int32_t* cell_start;
  const SortedPoint<acc_t>* points;
};

// ---- Far queries -------------------------------------------------------------------------------
//
// A query far outside its cloud's trimmed box (one of 1 % of a scan's returns spread over
// kilometres, searched against its own cloud) can have its k-th neighbour farther away than the
// box is wide. Its ring search then visits every cell, and that one thread's scan of the whole
// cloud is the slowest thread of the launch: such a cloud of 100k points against itself took
// ~30x its clean twin. So the batch grid's search (k <= 32) lists the query's row when the query
// lies farther outside the grid than the grid is wide (its first ring is then at least a whole
// face, and each ring after it another plane of the grid) in a cloud of more than kFarMinPoints
// points, or when a search runs past far_work(n) cells and points; knn_far_kernel then scans the
// whole cloud for each listed query with a block: each thread keeps its own list, each warp
// merges its 32 lists, and the first warp merges the warps'. The k smallest (distance, index)
// pairs are the same either way.
struct FarQueries {
  int32_t* rows;   // (total_queries,) the listed query rows, the first *count of them
  int32_t* count;  // (1,) zeroed before the search
};

// The work after which a search is listed: past n / 16 it has cost a thread more than the
// block's scan (n / kSearchThreads points a thread) several times over.
__device__ inline int64_t far_work(int64_t n) { return 2048 + n / 16; }
// Below this many points a face of the grid costs a thread no more than the block's merges. At
// 16,384 instead, the few far points of a noisy small cloud walked to their work limit first:
// 32 x 4,096 points with 1 % noise over 4 km against themselves, k = 20, took 3.6-3.8 ms against
// 1.5-1.7 (8 x 8,192, k = 16: 3.6-3.8 against 0.8-0.9), while only a batch whose every query is
// far gained (64 x 20,000 queries 500 m from clouds of 2,000 points, k = 16: 52 against 97 ms;
// H200, interleaved runs).
constexpr int64_t kFarMinPoints = 8 * kSearchThreads;

template <typename acc_t, int K, bool kGrid>
__global__ void __launch_bounds__(kSearchThreads)
    knn_search_kernel(KnnProblem<acc_t> pb, SearchData<acc_t> data, FarQueries far) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= pb.total_queries) return;
  const int64_t row = data.order != nullptr ? data.order[t] : t;
  int64_t* out_index = pb.out_index + row * pb.k;
  acc_t* out_distance = pb.out_distance + row * pb.k;
  int64_t local = 0;
  const int64_t b = pb.query_rows.cloud_of(row, &local);
  const acc_t qx = pb.queries[row * 3];
  const acc_t qy = pb.queries[row * 3 + 1];
  const acc_t qz = pb.queries[row * 3 + 2];
  if (b < 0 || !neighbors::is_finite3(qx, qy, qz)) {
    for (int64_t j = 0; j < pb.k; ++j) {
      out_index[j] = -1;
      out_distance[j] = std::numeric_limits<acc_t>::infinity();
    }
    return;
  }
  auto search = [&](auto& list) {
    list.init(pb.k, pb.limit);
    if constexpr (kGrid && K > 0) {
      const GridCloud& g = data.clouds[b];
      const int64_t n = data.cell_start[g.base + g.cells()] - data.cell_start[g.base];
      int64_t cq[3];
      cq[0] = g.query_cell(0, static_cast<double>(qx));
      cq[1] = g.query_cell(1, static_cast<double>(qy));
      cq[2] = g.query_cell(2, static_cast<double>(qz));
      const bool beyond = n > kFarMinPoints && g.first_ring(cq) >= g.widest();
      if (beyond ||
          !neighbors::knn_grid(g, data.cell_start, data.points, qx, qy, qz, list, neighbors::WorkLimit{far_work(n)})) {
        far.rows[atomicAdd(far.count, 1)] = static_cast<int32_t>(row);
        return;
      }
    } else if constexpr (kGrid) {
      neighbors::knn_grid(data.clouds[b], data.cell_start, data.points, qx, qy, qz, list);
    } else {
      neighbors::knn_brute(data.points + pb.point_rows.begin(b), pb.point_rows.length(b), qx, qy, qz, list);
    }
    neighbors::write_knn_row(list, pb.k, pb.point_rows.index_base(b), out_index, out_distance);
  };
  if constexpr (K > 0) {
    neighbors::FixedKnnList<acc_t, K> list;
    search(list);
  } else {
    neighbors::SpanKnnList<acc_t> list{out_distance, out_index, pb.k};
    search(list);
  }
}

// Merges the k-lists of a warp's 32 lanes (each ascending, as FixedKnnList keeps them): emit(j,
// d, i) is called on every lane with the j-th smallest pair, j = 0, 1, ... up to k - 1 or up to
// the first empty slot (index INT32_MAX). Each step takes the lanes' smallest untaken pairs'
// minimum over the warp; the lane that held it marks that slot as padding (-inf, -1), which its
// list skips from then on. Every index is a compile-time constant once the loops unroll.
template <typename acc_t, int K, typename Emit>
__device__ inline void warp_merge_lists(neighbors::FixedKnnList<acc_t, K>& list, int64_t k, Emit emit) {
  constexpr int32_t kEmpty = std::numeric_limits<int32_t>::max();
  for (int64_t j = 0; j < k; ++j) {
    acc_t d = std::numeric_limits<acc_t>::infinity();
    int32_t i = kEmpty;
    int slot = -1;
    POINTOPS_UNROLL
    for (int s = K - 1; s >= 0; --s) {
      if (list.index[s] != -1) {
        d = list.dist[s];
        i = list.index[s];
        slot = s;
      }
    }
    acc_t best_d = d;
    int32_t best_i = i;
    for (int offset = cuda::kWarpSize / 2; offset > 0; offset /= 2) {
      const acc_t other_d = __shfl_xor_sync(cuda::kFullMask, best_d, offset);
      const int32_t other_i = __shfl_xor_sync(cuda::kFullMask, best_i, offset);
      if (neighbors::comes_before(other_d, other_i, best_d, best_i)) {
        best_d = other_d;
        best_i = other_i;
      }
    }
    if (best_i == kEmpty) return;      // every pair left is empty
    if (best_i == i && best_d == d) {  // indices are unique: only the lane that held it
      POINTOPS_UNROLL
      for (int s = 0; s < K; ++s) {
        if (s == slot) {
          list.dist[s] = -std::numeric_limits<acc_t>::infinity();
          list.index[s] = -1;
        }
      }
    }
    emit(j, best_d, best_i);
  }
}

// One block per listed far query: the cloud's stored points, a stride of kSearchThreads a
// thread, then the two merges (see "Far queries"). The grid loops over the list, whose length
// only the device knows.
template <typename acc_t, int K>
__global__ void __launch_bounds__(kSearchThreads)
    knn_far_kernel(KnnProblem<acc_t> pb, SearchData<acc_t> data, FarQueries far) {
  constexpr int kWarps = kSearchThreads / cuda::kWarpSize;
  __shared__ acc_t warp_dist[kWarps][K];
  __shared__ int32_t warp_index[kWarps][K];
  const int warp = threadIdx.x / cuda::kWarpSize;
  const int count = *far.count;
  for (int f = blockIdx.x; f < count; f += gridDim.x) {
    const int64_t row = far.rows[f];
    int64_t local = 0;
    const int64_t b = pb.query_rows.cloud_of(row, &local);
    const acc_t qx = pb.queries[row * 3];
    const acc_t qy = pb.queries[row * 3 + 1];
    const acc_t qz = pb.queries[row * 3 + 2];
    const GridCloud& g = data.clouds[b];
    const int64_t begin = data.cell_start[g.base];
    const int64_t end = data.cell_start[g.base + g.cells()];
    neighbors::FixedKnnList<acc_t, K> list;
    list.init(pb.k, pb.limit);
    for (int64_t j = begin + threadIdx.x; j < end; j += kSearchThreads) {
      const SortedPoint<acc_t> p = data.points[j];
      list.push(squared_distance3(qx, qy, qz, p.x, p.y, p.z), p.index);
    }
    const int lane = threadIdx.x % cuda::kWarpSize;
    if (lane < pb.k) warp_index[warp][lane] = std::numeric_limits<int32_t>::max();
    __syncwarp();
    warp_merge_lists(list, pb.k, [&](int64_t j, acc_t d, int32_t i) {
      if (lane == 0) {
        warp_dist[warp][j] = d;
        warp_index[warp][j] = i;
      }
    });
    __syncthreads();
    if (warp == 0) {
      // The warps' lists as one pool of kWarps * k pairs, a few a lane, merged once more into the
      // output row (a SpanKnnList there, written as every search writes its row).
      list.init(pb.k, pb.limit);
      for (int e = threadIdx.x; e < kWarps * K; e += cuda::kWarpSize) {
        const int w = e / K;
        const int j = e % K;
        if (j < pb.k && warp_index[w][j] != std::numeric_limits<int32_t>::max()) {
          list.push(warp_dist[w][j], warp_index[w][j]);
        }
      }
      int64_t* out_index = pb.out_index + row * pb.k;
      acc_t* out_distance = pb.out_distance + row * pb.k;
      neighbors::SpanKnnList<acc_t> merged{out_distance, out_index, pb.k};
      if (threadIdx.x == 0) merged.init(pb.k, pb.limit);
      warp_merge_lists(list, pb.k, [&](int64_t, acc_t d, int32_t i) {
        if (threadIdx.x == 0) merged.push(d, i);
      });
      if (threadIdx.x == 0)
        neighbors::write_knn_row(merged, pb.k, pb.point_rows.index_base(b), out_index, out_distance);
    }
    __syncthreads();  // the shared lists are the next query's
  }
}

// ---- Small clouds: a grid per block, in shared memory ---------------------------------------
//
// Padded clouds of up to kBlockPointBytes of sorted points (4,096 float32 points, 2,048 float64),
// searched for k <= kBlockMaxK neighbours (three_nn, interpolation, small-k kNN), skip the batch
// grid's ~25 launches: each block copies its cloud into shared memory, builds its grid there by
// the same rules (make_grid_cloud over the trimmed box, the occupancy refinement,
// within kBlockCells cells), and searches the cloud's query rows kQueryRound at a time, ordered by
// cell (so that a warp's queries visit neighbouring cells), with the same knn_grid. The blocks of
// a cloud take its rounds from a counter as they finish them: blocks with the same work differed
// 2x in search time (590k-1,225k cycles, 16 x 16,384 queries into 16 x 4,096, H100), so fixed
// slices made the launch end with the slowest block. The blocks of one cloud build the same
// grid: the build, a few passes over at most 4,096 points in shared memory, costs less than one
// launch of the batch grid. The launch is one wave (blocks per cloud from the occupancy). Shared
// memory holds the sorted points, the rows as given and the table (144 KB for 4,096 float32
// points: one block an SM). Points of a cell are stored in the order the block's atomics place
// them; the k smallest (distance, index) pairs do not depend on it.
constexpr int kBlockThreads = 512;
constexpr int64_t kBlockPointBytes = 65536;
constexpr int kBlockCells = 8192;
// Query rows a thread takes in a round, by the kernel's K. For k <= 4 one: rounds of 512 rows let
// a cloud's blocks share several rounds each (three_nn, 16 x 16,384 queries into 16 x 4,096, 8
// blocks a cloud: 0.46-0.48 ms, against 0.50-0.52 with rounds of 1,024 and 0.57-0.60 with fixed
// slices, H200). For k = 8 two: its longer searches gain more from a warp's queries lying in
// neighbouring cells of a 1,024-row sort than from the finer sharing (32 x 4,096 queries into
// 32 x 4,096: 0.39 ms, against 0.42-0.43 with rounds of 512; 64 x 20,000 into 64 x 2,000: 2.31-2.34
// against 2.52-2.57).
template <int K>
constexpr int kQueriesPerThread = K <= 4 ? 1 : 2;
template <int K>
constexpr int64_t kQueryRound = int64_t{kBlockThreads} * kQueriesPerThread<K>;
// int32 entries after the points: the trimmed box's histograms, then the cell table.
constexpr int kBlockTable = kBlockCells + 1 > 3 * neighbors::kBoxBins ? kBlockCells + 1 : 3 * neighbors::kBoxBins;

struct MinOp {
  __device__ double operator()(double a, double b) const { return fmin(a, b); }
};
struct MaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

// Zeroes table[0, count) (then the block waits).
__device__ inline void zero_table(int32_t* table, int64_t count) {
  for (int64_t e = threadIdx.x; e < count; e += kBlockThreads) table[e] = 0;
  __syncthreads();
}

template <typename acc_t, int K>
__global__ void __launch_bounds__(kBlockThreads)
    knn_block_grid_kernel(KnnProblem<acc_t> pb, const acc_t* __restrict__ points, int64_t parts, int64_t cell_points,
                          int32_t* __restrict__ next_round) {
  using neighbors::kBoxBins;
  using Reduce = cub::BlockReduce<double, kBlockThreads>;
  using Count = cub::BlockReduce<long long, kBlockThreads>;
  using Scan = cub::BlockScan<long long, kBlockThreads>;
  constexpr int kQueries = kQueriesPerThread<K>;
  constexpr int64_t kRound = kQueryRound<K>;
  using QuerySort = cub::BlockRadixSort<uint32_t, kBlockThreads, kQueries, int32_t>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Count::TempStorage count;
    typename Scan::TempStorage scan;
    typename QuerySort::TempStorage sort;
  } temp;
  __shared__ double box[6];
  __shared__ long long finite_points;
  __shared__ GridCloud grid;
  __shared__ int64_t taken;
  extern __shared__ __align__(32) unsigned char dynamic[];
  const int64_t rows_per_cloud = pb.point_rows.rows_per_cloud;
  SortedPoint<acc_t>* stored = reinterpret_cast<SortedPoint<acc_t>*>(dynamic);
  acc_t* cloud = reinterpret_cast<acc_t*>(dynamic + rows_per_cloud * sizeof(SortedPoint<acc_t>));
  int32_t* table =
      reinterpret_cast<int32_t*>(dynamic + rows_per_cloud * (sizeof(SortedPoint<acc_t>) + 3 * sizeof(acc_t)));

  const int64_t b = blockIdx.x / parts;
  const int64_t n = pb.point_rows.length(b);
  // The cloud's rows, copied once (every load in flight together): each build pass below reads
  // shared memory, not a dependent chain of global loads.
  const acc_t* rows = points + pb.point_rows.begin(b) * 3;
  for (int64_t e = threadIdx.x; e < 3 * n; e += kBlockThreads) cloud[e] = rows[e];
  __syncthreads();
  auto finite_at = [&](int64_t i) {
    return i < n && neighbors::is_finite3(cloud[3 * i], cloud[3 * i + 1], cloud[3 * i + 2]);
  };

  // The bounding box of the finite points and their count.
  {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    double lo[3] = {kInf, kInf, kInf};
    double hi[3] = {-kInf, -kInf, -kInf};
    long long finite = 0;
    for (int64_t i = threadIdx.x; i < n; i += kBlockThreads) {
      if (!finite_at(i)) continue;
      ++finite;
      for (int d = 0; d < 3; ++d) {
        lo[d] = fmin(lo[d], static_cast<double>(cloud[3 * i + d]));
        hi[d] = fmax(hi[d], static_cast<double>(cloud[3 * i + d]));
      }
    }
    for (int d = 0; d < 3; ++d) {
      const double low = Reduce(temp.reduce).Reduce(lo[d], MinOp());
      __syncthreads();
      const double high = Reduce(temp.reduce).Reduce(hi[d], MaxOp());
      __syncthreads();
      if (threadIdx.x == 0) {
        box[d] = low;
        box[3 + d] = high;
      }
    }
    const long long total = Count(temp.count).Sum(finite);
    if (threadIdx.x == 0) finite_points = total;
    __syncthreads();
  }
  const long long finite = finite_points;
  const bool any = finite > 0;

  // The trimmed box: the two histograms in the table's space, a warp per axis.
  if (finite / neighbors::kTrimFarDivisor > 0) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool linear = pass == 1;  // the magnitude histograms first
      zero_table(table, 3 * kBoxBins);
      for (int64_t base = 0; base < n; base += kBlockThreads) {  // every lane runs every step
        const int64_t i = base + threadIdx.x;
        const bool counted = finite_at(i);
        for (int d = 0; d < 3; ++d) {
          const double v = counted ? static_cast<double>(cloud[3 * i + d]) : 0.0;
          const int bin = linear ? neighbors::linear_bin(v, box[d], box[3 + d]) : neighbors::magnitude_bin(v);
          neighbors::grid_cuda::count_in_warp(
              table, counted ? static_cast<unsigned long long>(d * kBoxBins + bin) : neighbors::grid_cuda::kNoBin);
        }
      }
      __syncthreads();
      const int warp = static_cast<int>(threadIdx.x / cuda::kWarpSize);
      if (warp < 3) {
        double lo = box[warp];
        double hi = box[3 + warp];
        neighbors::grid_cuda::warp_trim_axis(table + warp * kBoxBins, linear, &lo, &hi);
        if (threadIdx.x % cuda::kWarpSize == 0) {
          box[warp] = lo;
          box[3 + warp] = hi;
        }
      }
      __syncthreads();
    }
  }

  // The first grid and its occupancy, then the refined grid (grid.h: refined_cell_size).
  const int64_t budget = neighbors::CellBudget{1, cell_points}.cells(n);
  const double lo[3] = {box[0], box[1], box[2]};
  const double hi[3] = {box[3], box[4], box[5]};
  if (threadIdx.x == 0) grid = neighbors::make_grid_cloud(lo, hi, any, 0.0, budget, 0);
  __syncthreads();
  auto key_of = [&](int64_t i) {
    return grid.point_key(static_cast<double>(cloud[3 * i]), static_cast<double>(cloud[3 * i + 1]),
                          static_cast<double>(cloud[3 * i + 2]));
  };
  auto count_cells = [&]() {
    zero_table(table, grid.cells() + 1);
    for (int64_t base = 0; base < n; base += kBlockThreads) {
      const int64_t i = base + threadIdx.x;
      const bool counted = finite_at(i);
      neighbors::grid_cuda::count_in_warp(
          table, counted ? static_cast<unsigned long long>(key_of(i)) : neighbors::grid_cuda::kNoBin);
    }
    __syncthreads();
  };
  count_cells();
  long long squares = 0;
  for (int64_t c = threadIdx.x; c < grid.cells(); c += kBlockThreads) {
    squares += static_cast<long long>(table[c]) * table[c];
  }
  const long long sum_squares = Count(temp.count).Sum(squares);
  if (threadIdx.x == 0) {
    const double size = neighbors::refined_cell_size(grid, static_cast<double>(sum_squares),
                                                     static_cast<double>(finite), static_cast<double>(cell_points));
    const int64_t cap =
        neighbors::kRefineBudget * budget < kBlockCells ? neighbors::kRefineBudget * budget : kBlockCells;
    if (size != grid.size) grid = neighbors::make_grid_cloud(lo, hi, any, size, cap, 0);  // else the same grid
  }
  __syncthreads();

  // The cell table: counts, an inclusive scan (table[c] = the end of cell c), then each point
  // takes the slot before its cell's end, which leaves table[c] at the start of cell c.
  count_cells();
  const int64_t cells = grid.cells();
  const int64_t per_thread = (cells + kBlockThreads - 1) / kBlockThreads;
  const int64_t chunk_begin = threadIdx.x * per_thread < cells ? threadIdx.x * per_thread : cells;
  const int64_t chunk_end = chunk_begin + per_thread < cells ? chunk_begin + per_thread : cells;
  long long chunk = 0;
  for (int64_t c = chunk_begin; c < chunk_end; ++c) chunk += table[c];
  long long before = 0;
  Scan(temp.scan).ExclusiveSum(chunk, before);
  for (int64_t c = chunk_begin; c < chunk_end; ++c) {
    before += table[c];
    table[c] = static_cast<int32_t>(before);
  }
  if (threadIdx.x == 0) table[cells] = static_cast<int32_t>(finite);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kBlockThreads) {
    if (!finite_at(i)) continue;
    const int32_t at = atomicSub(table + key_of(i), 1) - 1;
    stored[at] = neighbors::make_point(cloud[3 * i], cloud[3 * i + 1], cloud[3 * i + 2], i);
  }
  __syncthreads();

  // The cloud's rounds of kRound query rows, as this block takes them from the cloud's counter,
  // each ordered by cell first so that a warp's queries search neighbouring cells (the batch grid
  // sorts its queries likewise). Which block searches a row does not change its output.
  const GridCloud g = grid;
  const int64_t m = pb.query_rows.rows_per_cloud;
  const int64_t rounds = (m + kRound - 1) / kRound;
  const int64_t query_length = pb.query_rows.length(b);
  const int64_t base_row = pb.query_rows.begin(b);
  const int key_bits = bit_width(static_cast<uint64_t>(g.cells()));  // keys in [0, cells]: cells last
  for (;;) {
    __syncthreads();  // every thread has read the last round's number, and the sort's storage is free
    if (threadIdx.x == 0) taken = atomicAdd(next_round + b, 1);
    __syncthreads();
    if (taken >= rounds) break;
    const int64_t round = taken * kRound;
    const int64_t last = round + kRound < m ? round + kRound : m;
    uint32_t keys[kQueries];
    int32_t slots[kQueries];
    for (int j = 0; j < kQueries; ++j) {
      const int64_t t = round + threadIdx.x * kQueries + j;
      slots[j] = static_cast<int32_t>(t - round);
      keys[j] = static_cast<uint32_t>(g.cells());
      if (t < last && t < query_length) {
        const acc_t* q = pb.queries + (base_row + t) * 3;
        if (neighbors::is_finite3(q[0], q[1], q[2])) {
          keys[j] = static_cast<uint32_t>(
              g.point_key(static_cast<double>(q[0]), static_cast<double>(q[1]), static_cast<double>(q[2])));
        }
      }
    }
    QuerySort(temp.sort).SortBlockedToStriped(keys, slots, 0, key_bits);
    for (int j = 0; j < kQueries; ++j) {
      const int64_t t = round + slots[j];
      if (t >= last) continue;
      const int64_t row = base_row + t;
      int64_t* out_index = pb.out_index + row * pb.k;
      acc_t* out_distance = pb.out_distance + row * pb.k;
      const acc_t qx = pb.queries[row * 3];
      const acc_t qy = pb.queries[row * 3 + 1];
      const acc_t qz = pb.queries[row * 3 + 2];
      if (t >= query_length || !neighbors::is_finite3(qx, qy, qz)) {
        for (int64_t c = 0; c < pb.k; ++c) {
          out_index[c] = -1;
          out_distance[c] = std::numeric_limits<acc_t>::infinity();
        }
        continue;
      }
      neighbors::FixedKnnList<acc_t, K> list;  // K = 4 or 8 (takes_block_grid)
      list.init(pb.k, pb.limit);
      neighbors::knn_grid(g, table, stored, qx, qy, qz, list);
      neighbors::write_knn_row(list, pb.k, 0, out_index, out_distance);
    }
  }
}

// Whether the sizes take the block grid: padded clouds whose points fit kBlockPointBytes, and k
// <= 8. At 512 threads a block ptxas holds the search to 128 registers; the lists of 16 and 32
// then go to local memory (32 registers, 6-9 KB of spills a thread), which made k = 16-32 over
// clouds of 4,096 points 9-20x slower than the batch grid, whose 128-thread search keeps them in
// registers (k = 20 over 32 x 4,096: 20.9 against 1.42 ms, H100).
constexpr int64_t kBlockMaxK = 8;

template <typename acc_t>
bool takes_block_grid(const KnnProblem<acc_t>& pb) {
  return !pb.point_rows.packed && pb.k <= kBlockMaxK &&
         pb.point_rows.rows_per_cloud * static_cast<int64_t>(sizeof(SortedPoint<acc_t>)) <= kBlockPointBytes;
}

template <typename acc_t, int K>
void launch_block_grid_k(const KnnProblem<acc_t>& pb, const at::Tensor& points, int64_t cell_points) {
  // Blocks per cloud: each with at least a query row per thread.
  const int64_t sms = cuda::sm_count();
  const int64_t batch = pb.point_rows.batch;
  const int64_t most = std::max<int64_t>(1, cuda::ceil_div(pb.query_rows.rows_per_cloud, kBlockThreads));
  const size_t smem =
      static_cast<size_t>(pb.point_rows.rows_per_cloud) * (sizeof(SortedPoint<acc_t>) + 3 * sizeof(acc_t)) +
      static_cast<size_t>(kBlockTable) * sizeof(int32_t);
  auto kernel = knn_block_grid_kernel<acc_t, K>;
  cuda::set_dynamic_smem(kernel, smem);
  // One wave: as many blocks as fit the GPU at once (a second, partial wave would double the time).
  const int per_sm = cuda::blocks_per_sm(kernel, kBlockThreads, smem);
  const int64_t parts = std::clamp<int64_t>(sms * std::max(per_sm, 1) / batch, 1, most);
  // Each cloud's round counter, zeroed on the stream before the launch.
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor next_round = at::empty({batch}, points.options().dtype(at::kInt));
  C10_CUDA_CHECK(cudaMemsetAsync(next_round.data_ptr<int32_t>(), 0, batch * sizeof(int32_t), stream));
  kernel<<<static_cast<unsigned>(batch * parts), kBlockThreads, smem, stream>>>(
      pb, points.data_ptr<acc_t>(), parts, cell_points, next_round.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename acc_t>
void launch_block_grid(const KnnProblem<acc_t>& pb, const at::Tensor& points, int64_t cell_points) {
  static_assert(kBlockMaxK == 8, "the lists below cover k <= kBlockMaxK");
  if (pb.k <= 4) {
    launch_block_grid_k<acc_t, 4>(pb, points, cell_points);
  } else {
    launch_block_grid_k<acc_t, 8>(pb, points, cell_points);
  }
}

// The search, then (grid, k <= 32) the far queries it listed; `far` is unused by brute force.
template <typename acc_t, bool kGrid>
void launch_search(const KnnProblem<acc_t>& pb, const SearchData<acc_t>& data, FarQueries far) {
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(pb.total_queries, kSearchThreads));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  auto run = [&](auto k_slots) {
    constexpr int K = decltype(k_slots)::value;
    knn_search_kernel<acc_t, K, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data, far);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if constexpr (kGrid && K > 0) {
      // A few blocks an SM: the list is short, or empty, but its length is not read back.
      const unsigned far_blocks = static_cast<unsigned>(
          std::min<int64_t>(4 * static_cast<int64_t>(cuda::sm_count()), std::max<int64_t>(pb.total_queries, 1)));
      knn_far_kernel<acc_t, K><<<far_blocks, kSearchThreads, 0, stream>>>(pb, data, far);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  };
  if (pb.k <= 4) {
    run(std::integral_constant<int, 4>());
  } else if (pb.k <= 8) {
    run(std::integral_constant<int, 8>());
  } else if (pb.k <= 16) {
    run(std::integral_constant<int, 16>());
  } else if (pb.k <= 32) {
    run(std::integral_constant<int, 32>());
  } else {
    run(std::integral_constant<int, 0>());
  }
}

// q, p: contiguous (rows, 3) in the compute type.
template <typename acc_t>
void knn_cuda_impl(const KnnProblem<acc_t>& pb, const at::Tensor& q, const at::Tensor& p, int64_t total_points) {
  if (pb.k == 0 || pb.total_queries == 0) return;
  cuda::check_cub_items(pb.total_queries, "knn: total queries");
  const Strategy strategy = neighbors::pick_strategy(true, pb.point_rows.batch, pb.total_queries, total_points);
  if (strategy == Strategy::kBrute || pb.point_rows.batch == 0) {
    const at::Tensor points = neighbors::grid_cuda::row_points<acc_t>(p, pb.point_rows, total_points);
    const SearchData<acc_t> data{nullptr, nullptr, nullptr,
                                 reinterpret_cast<const SortedPoint<acc_t>*>(points.data_ptr<uint8_t>())};
    launch_search<acc_t, false>(pb, data, FarQueries{nullptr, nullptr});
    return;
  }
  const int64_t cell_points = neighbors::knn_cell_points(pb.k);
  if (takes_block_grid(pb)) {
    launch_block_grid(pb, p, cell_points);
    return;
  }
  const neighbors::CellBudget budget{1, cell_points};
  const auto grid = neighbors::grid_cuda::build_grid<acc_t>(p, pb.point_rows, total_points, 0.0, budget,
                                                            static_cast<double>(cell_points));
  const at::Tensor order = neighbors::grid_cuda::sort_queries_by_cell<acc_t>(q, pb.query_rows, pb.total_queries, grid);
  const SearchData<acc_t> data{order.data_ptr<int32_t>(), grid.cloud_ptr(),
                               grid.cell_start.template data_ptr<int32_t>(), grid.point_ptr()};
  // The far-query list and its count (zeroed) in one allocation.
  const at::Tensor far_rows = at::empty({pb.total_queries + 1}, order.options());
  int32_t* far_count = far_rows.data_ptr<int32_t>() + pb.total_queries;
  C10_CUDA_CHECK(cudaMemsetAsync(far_count, 0, sizeof(int32_t), at::cuda::getCurrentCUDAStream()));
  launch_search<acc_t, true>(pb, data, FarQueries{far_rows.data_ptr<int32_t>(), far_count});
}

std::tuple<at::Tensor, at::Tensor> knn_outputs(at::IntArrayRef rows, int64_t k, const at::Tensor& points) {
  std::vector<int64_t> shape(rows.begin(), rows.end());
  shape.push_back(k);
  const auto options = points.options();
  // Every row is written by the search kernel, empty ones included.
  return {at::empty(shape, options.dtype(at::kLong)),
          at::empty(shape, options.dtype(neighbors::distance_dtype(points)))};
}

// Both layouts: the search into outputs from knn_outputs (every row written).
void knn_cuda_run(const neighbors::SearchInputs& in, int64_t k, const std::optional<double>& max_distance,
                  const std::tuple<at::Tensor, at::Tensor>& outputs) {
  AT_DISPATCH_FLOATING_TYPES(in.points.scalar_type(), "knn_cuda", [&] {
    const KnnProblem<scalar_t> pb{in.queries.data_ptr<scalar_t>(),
                                  in.query_rows,
                                  in.total_queries,
                                  in.point_rows,
                                  k,
                                  std::get<0>(outputs).data_ptr<int64_t>(),
                                  std::get<1>(outputs).data_ptr<scalar_t>(),
                                  neighbors::squared_limit<scalar_t>(max_distance)};
    knn_cuda_impl(pb, in.queries, in.points, in.total_points);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> knn_cuda(const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                                            const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                            int64_t k, std::optional<double> max_distance) {
  neighbors::check_padded_pair("knn", queries, query_lengths, points, lengths);
  neighbors::check_neighbour_k(points, queries.size(0) * queries.size(1), k);
  neighbors::squared_limit<double>(max_distance);  // checks it before any early return
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  auto outputs = knn_outputs({queries.size(0), queries.size(1)}, k, points);
  knn_cuda_run(neighbors::padded_search_inputs(queries, query_lengths, points, lengths), k, max_distance, outputs);
  return outputs;
}

std::tuple<at::Tensor, at::Tensor> knn_packed_cuda(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                   const at::Tensor& points, const at::Tensor& offsets, int64_t k) {
  neighbors::check_packed_pair("knn_packed", queries, query_offsets, points, offsets);
  neighbors::check_neighbour_k(points, queries.size(0), k);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  auto outputs = knn_outputs({queries.size(0)}, k, points);
  knn_cuda_run(neighbors::packed_search_inputs(queries, query_offsets, points, offsets), k, std::nullopt, outputs);
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("knn", &knn_cuda);
  m.impl("knn_packed", &knn_packed_cuda);
}

}  // namespace pointops
