// Cube query on CUDA (rules and search in cube_query.h; the CPU twin is cube_query_cpu.cpp).
//
// One uniform grid per cloud with cells of at least `distance` (grid_cuda.cuh, the build ball
// query uses), queries sorted by cell, then one thread per query runs cube_grid: it tests every
// candidate point of the 8 to 64 cells its cube meets (the count needs them all) and keeps the
// first k hits, walking the cells together in index order so that they reach the list almost in
// order; k <= 32 keeps the list in registers, larger k in the output row.
// What bounds it: a query costs its candidates (about (3 distance)^3 of the cloud's density,
// a few times the cube's own points), plus the grid build's fixed chain of ~25 launches.
#include "geometry/cube_query.h"

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
using neighbors::CubeTest;
using neighbors::GridCloud;
using neighbors::SortedPoint;

constexpr int kSearchThreads = 128;

template <typename acc_t>
struct CubeProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  CloudRows point_rows;
  CubeTest<acc_t> test;
  int64_t k;
  int64_t* out_index;
  int64_t* out_count;
};

template <typename acc_t>
struct GridData {
  const int32_t* order;  // query rows by cell
  const GridCloud* clouds;
  const int32_t* cell_start;
  const SortedPoint<acc_t>* points;
};

template <typename acc_t, int K>
__global__ void __launch_bounds__(kSearchThreads) cube_grid_kernel(CubeProblem<acc_t> pb, GridData<acc_t> data) {
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
  auto search = [&](auto& list) {
    list.init(pb.k);
    pb.out_count[row] = neighbors::cube_grid(data.clouds[b], data.cell_start, data.points, qx, qy, qz, pb.test, list);
    neighbors::write_ball_row(list, pb.k, pb.point_rows.index_base(b), false, out_index);
  };
  if constexpr (K > 0) {
    neighbors::FixedIndexList<K> list;
    search(list);
  } else {
    neighbors::SpanIndexList<int64_t> list{out_index, pb.k};
    search(list);
  }
}

template <typename acc_t>
void launch_cube_search(const CubeProblem<acc_t>& pb, const GridData<acc_t>& data) {
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(pb.total_queries, kSearchThreads));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (pb.k <= 4) {
    cube_grid_kernel<acc_t, 4><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 8) {
    cube_grid_kernel<acc_t, 8><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 16) {
    cube_grid_kernel<acc_t, 16><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 32) {
    cube_grid_kernel<acc_t, 32><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else {
    cube_grid_kernel<acc_t, 0><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// q, p: contiguous (rows, 3) in the compute type; every row of the outputs is written.
template <typename acc_t>
void cube_query_cuda_impl(const CubeProblem<acc_t>& pb, const at::Tensor& q, const at::Tensor& p,
                          int64_t total_points) {
  const neighbors::CellBudget budget{2, 1};
  const auto grid = neighbors::grid_cuda::build_grid<acc_t>(p, pb.point_rows, total_points,
                                                            static_cast<double>(pb.test.distance), budget);
  const at::Tensor order = neighbors::grid_cuda::sort_queries_by_cell<acc_t>(q, pb.query_rows, pb.total_queries, grid);
  const GridData<acc_t> data{order.data_ptr<int32_t>(), grid.cloud_ptr(), grid.cell_start.template data_ptr<int32_t>(),
                             grid.point_ptr()};
  launch_cube_search<acc_t>(pb, data);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> cube_query_packed_cuda(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                          const at::Tensor& points, const at::Tensor& offsets,
                                                          double distance, int64_t k, bool ball) {
  neighbors::check_packed_pair("cube_query_packed", queries, query_offsets, points, offsets);
  neighbors::check_cube_query_args(points, queries.size(0), distance, k);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  const auto options = points.options().dtype(at::kLong);
  const neighbors::SearchInputs in = neighbors::packed_search_inputs(queries, query_offsets, points, offsets);
  if (in.empty() || in.total_points == 0) {
    return {at::full({queries.size(0), k}, -1, options), at::zeros({queries.size(0)}, options)};
  }
  at::Tensor indices = at::empty({queries.size(0), k}, options);
  at::Tensor counts = at::empty({queries.size(0)}, options);
  AT_DISPATCH_FLOATING_TYPES(in.points.scalar_type(), "cube_query_packed_cuda", [&] {
    const scalar_t d = static_cast<scalar_t>(distance);
    const CubeProblem<scalar_t> pb{in.queries.data_ptr<scalar_t>(),
                                   in.query_rows,
                                   in.total_queries,
                                   in.point_rows,
                                   CubeTest<scalar_t>{d, multiply(d, d), ball},
                                   k,
                                   indices.data_ptr<int64_t>(),
                                   counts.data_ptr<int64_t>()};
    cube_query_cuda_impl(pb, in.queries, in.points, in.total_points);
  });
  return {indices, counts};
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("cube_query_packed", &cube_query_packed_cuda); }

}  // namespace pointops
