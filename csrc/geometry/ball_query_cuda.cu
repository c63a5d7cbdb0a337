// Ball query on CUDA (rules in ball_query.h; the CPU twin is ball_query_cpu.cpp).
//
// Two searches, chosen by pick_strategy from the sizes alone; both return the first k hits by
// index under grid.h's BallTest, so their rows are identical to each other and to the CPU's:
//   * brute force (queries x points per cloud <= 2^29): one warp per 4 consecutive queries walks
//     their cloud in index order, 32 consecutive points a step (coalesced loads of the
//     coordinates as given, each shared by the 4 queries), and a ballot per query ranks the
//     step's hits, which go straight to their place in the output row; the warp stops when its
//     queries have k hits. This is the classic kernel's scan with its points spread over the
//     lanes: a query costs about k / (hit fraction of the cloud) / 32 steps, a step's load
//     serves 4 queries, and there are 8 times as many threads in flight, so a batch of a few
//     thousand centres fills the GPU.
//   * grid: one uniform grid per cloud with cells of at least the radius (at most 2 cells per
//     point), queries sorted by cell; one thread per query walks the 8 to 27 cells that can hold
//     a hit together in index order (ball_grid in grid.h) and stops once k hits are kept, so a
//     dense ball costs about k / (hit fraction of those cells) point tests and its hits are
//     appended in order; k <= 32 keeps the list in registers, larger k in the output row.
// What bounds it: at the bench's sizes (16 x 16,384 points) the grid build's fixed chain of ~25
// launches; the search of a ball with h hits among c candidates costs min(c, k c / h) point
// tests plus ~c / 64 passes over its cells. At a radius that is large against the cloud (the
// ball covers much of it) brute force needs only ~k / h of the cloud and no build.
#include "geometry/ball_query.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "geometry/grid.h"
#include "geometry/grid_cuda.cuh"
#include "geometry/knn.h"

namespace pointops {
namespace {

using neighbors::BallTest;
using neighbors::CloudRows;
using neighbors::GridCloud;
using neighbors::SortedPoint;
using neighbors::Strategy;

constexpr int kSearchThreads = 128;
// pick_strategy's size threshold (queries x points per cloud <= 2^27 for brute force) was set for
// kNN's one-thread-per-query scan; ball query's brute force runs a warp per 4 queries and stops at
// their k-th hits, so it takes problems this many times larger (2^29: the bench's 16 x 1,024 centres in
// 16 x 16,384 points, where a large radius needs a few hundred points of the cloud and the grid's
// ~25 build launches would cost more than the whole search). The bench times both searches.
constexpr int64_t kBruteScale = 4;

template <typename acc_t>
struct BallProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  CloudRows point_rows;
  acc_t radius;
  acc_t min_radius;
  int64_t k;
  bool repeat_first;
  int64_t* out_index;
  int64_t* out_count;

  __device__ BallTest<acc_t> test() const {
    return BallTest<acc_t>{multiply(radius, radius), multiply(min_radius, min_radius)};
  }
};

template <typename acc_t>
struct GridData {
  const int32_t* order;  // query rows by cell
  const GridCloud* clouds;
  const int32_t* cell_start;
  const SortedPoint<acc_t>* points;
};

template <typename acc_t, int K>
__global__ void __launch_bounds__(kSearchThreads) ball_grid_kernel(BallProblem<acc_t> pb, GridData<acc_t> data) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= pb.total_queries) return;
  const int64_t row = data.order[t];
  int64_t* out_index = pb.out_index + row * pb.k;
  int64_t local = 0;
  const int64_t b = pb.query_rows.cloud_of(row, &local);
  const acc_t qx = pb.queries[row * 3];
  const acc_t qy = pb.queries[row * 3 + 1];
  const acc_t qz = pb.queries[row * 3 + 2];
  if (b < 0 || !neighbors::is_finite3(qx, qy, qz)) {
    for (int64_t j = 0; j < pb.k; ++j) out_index[j] = -1;
    pb.out_count[row] = 0;
    return;
  }
  const BallTest<acc_t> test = pb.test();
  auto search = [&](auto& list) {
    list.init(pb.k);
    neighbors::ball_grid(data.clouds[b], data.cell_start, data.points, qx, qy, qz, pb.radius, test, list);
    pb.out_count[row] = neighbors::write_ball_row(list, pb.k, pb.point_rows.index_base(b), pb.repeat_first, out_index);
  };
  if constexpr (K > 0) {
    neighbors::FixedIndexList<K> list;
    search(list);
  } else {
    neighbors::SpanIndexList<int64_t> list{out_index, pb.k};
    search(list);
  }
}

// One warp per kBruteRows consecutive query rows: the brute-force search of ball_brute (grid.h)
// with the points of a step spread over the lanes. Rows of the same cloud share each step's
// loads: a lane reads one point and tests it against every one of those rows that still lacks
// hits, so a warp reads the cloud once for kBruteRows queries (the scan is bound by loads, not by
// the tests) and stops when all its rows have k hits or the cloud ends. Rows of other clouds
// (a warp that straddles two clouds) scan their own cloud in a second pass. `points` are the
// coordinates as given (rows, 3): a point with a NaN/Inf coordinate has a NaN or +inf squared
// distance from a finite query, so BallTest rejects it as the CPU's NaN-marked copy does.
constexpr int kBruteRows = 4;

template <typename acc_t>
__global__ void __launch_bounds__(kSearchThreads)
    ball_brute_warp_kernel(BallProblem<acc_t> pb, const acc_t* __restrict__ points) {
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / cuda::kWarpSize * kBruteRows;
  if (row0 >= pb.total_queries) return;  // the whole warp: row0 is the same for its lanes
  const BallTest<acc_t> test = pb.test();
  const unsigned lanes_below = (1u << lane) - 1u;
  int64_t cloud[kBruteRows];  // -1: no search (past the rows, past its cloud, non-finite)
  acc_t q[kBruteRows][3];
  int64_t found[kBruteRows];
  int64_t first[kBruteRows];
  int64_t base[kBruteRows];
#pragma unroll
  for (int i = 0; i < kBruteRows; ++i) {
    const int64_t row = row0 + i;
    cloud[i] = -1;
    found[i] = 0;
    first[i] = -1;
    base[i] = 0;
    if (row < pb.total_queries) {
      int64_t local = 0;
      const int64_t b = pb.query_rows.cloud_of(row, &local);
      for (int d = 0; d < 3; ++d) q[i][d] = pb.queries[row * 3 + d];
      if (b >= 0 && neighbors::is_finite3(q[i][0], q[i][1], q[i][2])) cloud[i] = b;
    }
  }
  unsigned pending = 0;  // rows whose cloud is still to scan
#pragma unroll
  for (int i = 0; i < kBruteRows; ++i) pending |= cloud[i] >= 0 ? 1u << i : 0u;
  while (pending != 0u) {
    // The rows of the lowest pending row's cloud (warp-uniform: every value here is).
    int64_t b = -1;
#pragma unroll
    for (int i = kBruteRows - 1; i >= 0; --i) b = (pending >> i) & 1u ? cloud[i] : b;
    unsigned rows = 0;
#pragma unroll
    for (int i = 0; i < kBruteRows; ++i) rows |= ((pending >> i) & 1u) && cloud[i] == b ? 1u << i : 0u;
    pending &= ~rows;
    const int64_t n = pb.point_rows.length(b);
    const int64_t cloud_base = pb.point_rows.index_base(b);
    const acc_t* cloud_points = points + pb.point_rows.begin(b) * 3;
#pragma unroll
    for (int i = 0; i < kBruteRows; ++i) base[i] = (rows >> i) & 1u ? cloud_base : base[i];
    // The next step's point is loaded while this step's is tested, so a load's latency overlaps
    // a step of tests.
    acc_t next[3] = {acc_t(0), acc_t(0), acc_t(0)};
    if (lane < n) {
      for (int d = 0; d < 3; ++d) next[d] = cloud_points[lane * 3 + d];
    }
    for (int64_t step = 0; step < n; step += cuda::kWarpSize) {
      bool searching = false;
#pragma unroll
      for (int i = 0; i < kBruteRows; ++i) searching |= ((rows >> i) & 1u) && found[i] < pb.k;
      if (!searching) break;
      const int64_t j = step + lane;
      const acc_t p[3] = {next[0], next[1], next[2]};
      if (j + cuda::kWarpSize < n) {
        for (int d = 0; d < 3; ++d) next[d] = cloud_points[(j + cuda::kWarpSize) * 3 + d];
      }
#pragma unroll
      for (int i = 0; i < kBruteRows; ++i) {
        if (!((rows >> i) & 1u) || found[i] >= pb.k) continue;
        const bool hit = j < n && test.hit(squared_distance3(q[i][0], q[i][1], q[i][2], p[0], p[1], p[2]));
        const unsigned mask = __ballot_sync(cuda::kFullMask, hit);
        if (mask == 0u) continue;
        if (found[i] == 0) first[i] = step + (__ffs(mask) - 1);
        const int64_t slot = found[i] + __popc(mask & lanes_below);
        if (hit && slot < pb.k) pb.out_index[(row0 + i) * pb.k + slot] = j + cloud_base;
        found[i] += __popc(mask);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kBruteRows; ++i) {
    const int64_t row = row0 + i;
    if (row >= pb.total_queries) break;
    int64_t* out_index = pb.out_index + row * pb.k;
    const int64_t count = found[i] < pb.k ? found[i] : pb.k;
    const int64_t pad = pb.repeat_first && count > 0 ? first[i] + base[i] : -1;
    for (int64_t j = count + lane; j < pb.k; j += cuda::kWarpSize) out_index[j] = pad;
    if (lane == 0) pb.out_count[row] = count;
  }
}

template <typename acc_t>
void launch_grid_search(const BallProblem<acc_t>& pb, const GridData<acc_t>& data) {
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(pb.total_queries, kSearchThreads));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (pb.k <= 4) {
    ball_grid_kernel<acc_t, 4><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 8) {
    ball_grid_kernel<acc_t, 8><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 16) {
    ball_grid_kernel<acc_t, 16><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 32) {
    ball_grid_kernel<acc_t, 32><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else {
    ball_grid_kernel<acc_t, 0><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// q, p: contiguous (rows, 3) in the compute type.
template <typename acc_t>
void ball_query_cuda_impl(const BallProblem<acc_t>& pb, const at::Tensor& q, const at::Tensor& p,
                          int64_t total_points) {
  if (pb.total_queries == 0) return;
  cuda::check_cub_items(pb.total_queries, "ball_query: total queries");
  const Strategy strategy =
      neighbors::pick_strategy(true, pb.point_rows.batch, pb.total_queries, total_points / kBruteScale);
  if (strategy == Strategy::kBrute || pb.k == 0 || pb.point_rows.batch == 0) {
    const int64_t threads = cuda::ceil_div(pb.total_queries, kBruteRows) * cuda::kWarpSize;
    const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(threads, kSearchThreads));
    ball_brute_warp_kernel<acc_t>
        <<<blocks, kSearchThreads, 0, at::cuda::getCurrentCUDAStream()>>>(pb, p.data_ptr<acc_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const neighbors::CellBudget budget{2, 1};
  const auto grid =
      neighbors::grid_cuda::build_grid<acc_t>(p, pb.point_rows, total_points, static_cast<double>(pb.radius), budget);
  const at::Tensor order = neighbors::grid_cuda::sort_queries_by_cell<acc_t>(q, pb.query_rows, pb.total_queries, grid);
  const GridData<acc_t> data{order.data_ptr<int32_t>(), grid.cloud_ptr(), grid.cell_start.template data_ptr<int32_t>(),
                             grid.point_ptr()};
  launch_grid_search<acc_t>(pb, data);
}

std::tuple<at::Tensor, at::Tensor> ball_outputs(at::IntArrayRef rows, int64_t k, const at::Tensor& points) {
  std::vector<int64_t> shape(rows.begin(), rows.end());
  const auto options = points.options().dtype(at::kLong);
  // Every row and count is written by the search kernels, empty ones included.
  at::Tensor counts = at::empty(shape, options);
  shape.push_back(k);
  return {at::empty(shape, options), counts};
}

// Both layouts: the search into outputs from ball_outputs (every row and count written).
void ball_query_cuda_run(const neighbors::SearchInputs& in, double radius, int64_t k, bool repeat_first,
                         double min_radius, const std::tuple<at::Tensor, at::Tensor>& outputs) {
  AT_DISPATCH_FLOATING_TYPES(in.points.scalar_type(), "ball_query_cuda", [&] {
    const BallProblem<scalar_t> pb{in.queries.data_ptr<scalar_t>(),
                                   in.query_rows,
                                   in.total_queries,
                                   in.point_rows,
                                   static_cast<scalar_t>(radius),
                                   static_cast<scalar_t>(min_radius),
                                   k,
                                   repeat_first,
                                   std::get<0>(outputs).data_ptr<int64_t>(),
                                   std::get<1>(outputs).data_ptr<int64_t>()};
    ball_query_cuda_impl(pb, in.queries, in.points, in.total_points);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> ball_query_cuda(const at::Tensor& queries,
                                                   const std::optional<at::Tensor>& query_lengths,
                                                   const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                                   double radius, int64_t k, bool repeat_first, double min_radius) {
  neighbors::check_padded_pair("ball_query", queries, query_lengths, points, lengths);
  neighbors::check_ball_query_args(points, queries.size(0) * queries.size(1), radius, k, min_radius);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  auto outputs = ball_outputs({points.size(0), queries.size(1)}, k, points);
  ball_query_cuda_run(neighbors::padded_search_inputs(queries, query_lengths, points, lengths), radius, k, repeat_first,
                      min_radius, outputs);
  return outputs;
}

std::tuple<at::Tensor, at::Tensor> ball_query_packed_cuda(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                          const at::Tensor& points, const at::Tensor& offsets,
                                                          double radius, int64_t k, bool repeat_first,
                                                          double min_radius) {
  neighbors::check_packed_pair("ball_query_packed", queries, query_offsets, points, offsets);
  neighbors::check_ball_query_args(points, queries.size(0), radius, k, min_radius);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  auto outputs = ball_outputs({queries.size(0)}, k, points);
  ball_query_cuda_run(neighbors::packed_search_inputs(queries, query_offsets, points, offsets), radius, k, repeat_first,
                      min_radius, outputs);
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("ball_query", &ball_query_cuda);
  m.impl("ball_query_packed", &ball_query_packed_cuda);
}

}  // namespace pointops
