// Cube query on the CPU: the twin of cube_query_cuda.cu (rules and search in cube_query.h), on
// the grids of grid_cpu.h that ball query builds.
#include "geometry/cube_query.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/checks.h"
#include "geometry/grid.h"
#include "geometry/grid_cpu.h"
#include "geometry/knn.h"

namespace pointops {
namespace neighbors {

void check_cube_query_args(const at::Tensor& points, int64_t rows, double distance, int64_t k) {
  TORCH_CHECK(std::isfinite(distance) && distance >= 0, "distance must be finite and >= 0, got ", distance);
  check_nonnegative(k, "k");
  check_output_fits(points.device(), "k = " + std::to_string(k), {rows, k}, 8);
}

}  // namespace neighbors

namespace {

using neighbors::CloudRows;
using neighbors::CpuGrid;
using neighbors::CubeTest;

template <typename acc_t>
struct CubeProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  const acc_t* points;
  CloudRows point_rows;
  CubeTest<acc_t> test;
  int64_t k;
  int64_t* out_index;
  int64_t* out_count;
};

template <int K, typename acc_t>
void cube_search_cpu(const CubeProblem<acc_t>& pb, const std::vector<CpuGrid<acc_t>>& grids,
                     const std::vector<int64_t>& order) {
  at::parallel_for(0, pb.total_queries, 16, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t row = order[t];
      int64_t* out_index = pb.out_index + row * pb.k;
      int64_t local = 0;
      const int64_t b = pb.query_rows.cloud_of(row, &local);
      const acc_t* q = pb.queries + row * 3;
      if (b < 0 || !neighbors::is_finite3(q[0], q[1], q[2])) {
        std::fill(out_index, out_index + pb.k, int64_t{-1});
        pb.out_count[row] = 0;
        continue;
      }
      const CpuGrid<acc_t>& grid = grids[b];
      auto search = [&](auto& list) {
        list.init(pb.k);
        pb.out_count[row] = neighbors::cube_grid(grid.grid, grid.cell_start.data(), grid.points.data(), q[0], q[1],
                                                 q[2], pb.test, list);
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
  });
}

template <typename acc_t>
void cube_query_cpu_impl(const CubeProblem<acc_t>& pb) {
  if (pb.total_queries == 0 || pb.point_rows.batch == 0) return;
  const neighbors::CellBudget budget{2, 1};
  const auto grids =
      neighbors::build_grids_cpu(pb.points, pb.point_rows, static_cast<double>(pb.test.distance), budget);
  const auto order = neighbors::query_order_cpu(pb.queries, pb.query_rows, pb.total_queries, grids);
  if (pb.k <= 4) {
    cube_search_cpu<4>(pb, grids, order);
  } else if (pb.k <= 8) {
    cube_search_cpu<8>(pb, grids, order);
  } else if (pb.k <= 16) {
    cube_search_cpu<16>(pb, grids, order);
  } else if (pb.k <= 32) {
    cube_search_cpu<32>(pb, grids, order);
  } else {
    cube_search_cpu<0>(pb, grids, order);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> cube_query_packed_cpu(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                         const at::Tensor& points, const at::Tensor& offsets,
                                                         double distance, int64_t k, bool ball) {
  neighbors::check_packed_pair("cube_query_packed", queries, query_offsets, points, offsets);
  neighbors::check_cube_query_args(points, queries.size(0), distance, k);
  const auto options = points.options().dtype(at::kLong);
  const neighbors::SearchInputs in = neighbors::packed_search_inputs(queries, query_offsets, points, offsets);
  if (in.empty() || in.total_points == 0) {
    return {at::full({queries.size(0), k}, -1, options), at::zeros({queries.size(0)}, options)};
  }
  // Every row and count is written by the search, empty ones included.
  at::Tensor indices = at::empty({queries.size(0), k}, options);
  at::Tensor counts = at::empty({queries.size(0)}, options);
  AT_DISPATCH_FLOATING_TYPES(in.points.scalar_type(), "cube_query_packed_cpu", [&] {
    const scalar_t d = static_cast<scalar_t>(distance);
    const CubeProblem<scalar_t> pb{in.queries.data_ptr<scalar_t>(),
                                   in.query_rows,
                                   in.total_queries,
                                   in.points.data_ptr<scalar_t>(),
                                   in.point_rows,
                                   CubeTest<scalar_t>{d, multiply(d, d), ball},
                                   k,
                                   indices.data_ptr<int64_t>(),
                                   counts.data_ptr<int64_t>()};
    cube_query_cpu_impl(pb);
  });
  return {indices, counts};
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("cube_query_packed", &cube_query_packed_cpu); }

}  // namespace pointops
