// Ball query on CUDA (rules in ball_query.h; the CPU twin is ball_query_cpu.cpp).
//
// One thread per query keeps the k smallest hit indices in registers (k <= 32; larger k keeps
// them in the output row) and runs a search of grid.h:
//   * brute force (queries x points per cloud <= 2^27): the cloud's points in index order from a
//     compact copy, read in lockstep by the warp, stopping at the k-th hit as OpenPCDet does;
//   * grid: one uniform grid per cloud with cells of at least the radius (at most 2 cells per
//     point), queries sorted by cell; each scans the 8 to 27 cells that can hold a hit, skips
//     cells bounded away from the ball, and stops scanning a cell at the k-th smallest hit
//     index found so far (a cell lists its points by index), so a dense ball costs about k
//     hits per cell rather than every point in it.
// What bounds it: at the bench's sizes (16 x 16,384 points, 4,096 centres) the grid build's
// fixed chain of ~25 launches dominates; the search reads ~27 cells of a few points per query.
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

using neighbors::CloudRows;
using neighbors::GridCloud;
using neighbors::SortedPoint;
using neighbors::Strategy;

constexpr int kSearchThreads = 128;

template <typename acc_t>
struct BallProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  CloudRows point_rows;
  acc_t radius;
  int64_t k;
  bool repeat_first;
  int64_t* out_index;
  int64_t* out_count;
};

template <typename acc_t>
struct SearchData {
  const int32_t* order;  // query rows by cell (grid), or null
  const GridCloud* clouds;
  const int32_t* cell_start;
  const SortedPoint<acc_t>* points;
};

template <typename acc_t, int K, bool kGrid>
__global__ void __launch_bounds__(kSearchThreads)
    ball_search_kernel(BallProblem<acc_t> pb, SearchData<acc_t> data) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= pb.total_queries) return;
  const int64_t row = data.order != nullptr ? data.order[t] : t;
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
  const acc_t radius2 = multiply(pb.radius, pb.radius);
  auto search = [&](auto& list) {
    list.init(pb.k);
    if constexpr (kGrid) {
      neighbors::ball_grid(data.clouds[b], data.cell_start, data.points, qx, qy, qz, pb.radius,
                           radius2, list);
    } else {
      neighbors::ball_brute(data.points + pb.point_rows.begin(b), pb.point_rows.length(b), qx, qy,
                            qz, radius2, pb.k, list);
    }
    pb.out_count[row] = neighbors::write_ball_row(list, pb.k, pb.point_rows.index_base(b),
                                                  pb.repeat_first, out_index);
  };
  if constexpr (K > 0) {
    neighbors::FixedIndexList<K> list;
    search(list);
  } else {
    neighbors::SpanIndexList<int64_t> list{out_index, pb.k};
    search(list);
  }
}

template <typename acc_t, bool kGrid>
void launch_search(const BallProblem<acc_t>& pb, const SearchData<acc_t>& data) {
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(pb.total_queries, kSearchThreads));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (pb.k <= 4) {
    ball_search_kernel<acc_t, 4, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 8) {
    ball_search_kernel<acc_t, 8, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 16) {
    ball_search_kernel<acc_t, 16, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 32) {
    ball_search_kernel<acc_t, 32, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else {
    ball_search_kernel<acc_t, 0, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename acc_t>
void ball_query_cuda_impl(const BallProblem<acc_t>& pb, const at::Tensor& q, const at::Tensor& p,
                          int64_t total_points) {
  if (pb.total_queries == 0) return;
  cuda::check_cub_items(pb.total_queries, "ball_query: total queries");
  const Strategy strategy = neighbors::pick_strategy(true, pb.point_rows.batch, pb.total_queries,
                                                     total_points);
  if (strategy == Strategy::kBrute || pb.k == 0) {
    const at::Tensor points = neighbors::grid_cuda::row_points<acc_t>(p, pb.point_rows, total_points);
    const SearchData<acc_t> data{
        nullptr, nullptr, nullptr,
        reinterpret_cast<const SortedPoint<acc_t>*>(points.data_ptr<uint8_t>())};
    launch_search<acc_t, false>(pb, data);
    return;
  }
  const neighbors::CellBudget budget{2, 1};
  const auto grid = neighbors::grid_cuda::build_grid<acc_t>(
      p, pb.point_rows, total_points, static_cast<double>(pb.radius), budget);
  const at::Tensor order =
      neighbors::grid_cuda::sort_queries_by_cell<acc_t>(q, pb.query_rows, pb.total_queries, grid);
  const SearchData<acc_t> data{order.data_ptr<int32_t>(), grid.cloud_ptr(),
                               grid.cell_start.template data_ptr<int32_t>(), grid.point_ptr()};
  launch_search<acc_t, true>(pb, data);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> ball_query_cuda(const at::Tensor& queries,
                                                   const std::optional<at::Tensor>& query_lengths,
                                                   const at::Tensor& points,
                                                   const std::optional<at::Tensor>& lengths,
                                                   double radius, int64_t k, bool repeat_first) {
  neighbors::check_ball_query_args(queries, query_lengths, points, lengths, radius, k);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  const int64_t batch = points.size(0);
  const auto options = points.options().dtype(at::kLong);
  // Every row and count is written by the search kernel, empty ones included.
  at::Tensor indices = at::empty({batch, queries.size(1), k}, options);
  at::Tensor counts = at::empty({batch, queries.size(1)}, options);
  const at::Tensor q = neighbors::compute_coords(queries);
  const at::Tensor p = neighbors::compute_coords(points);
  const CloudLengths qlen = contiguous_lengths(query_lengths);
  const CloudLengths plen = contiguous_lengths(lengths);
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "ball_query_cuda", [&] {
    const BallProblem<scalar_t> pb{q.data_ptr<scalar_t>(),
                                   CloudRows{qlen.data, batch, queries.size(1), false},
                                   batch * queries.size(1),
                                   CloudRows{plen.data, batch, points.size(1), false},
                                   static_cast<scalar_t>(radius),
                                   k,
                                   repeat_first,
                                   indices.data_ptr<int64_t>(),
                                   counts.data_ptr<int64_t>()};
    ball_query_cuda_impl(pb, q, p, batch * points.size(1));
  });
  return {indices, counts};
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("ball_query", &ball_query_cuda); }

}  // namespace pointops
