// Ball query on the CPU: the twin of ball_query_cuda.cu (rules in ball_query.h), with the grids
// and searches of grid.h that knn uses.
#include "geometry/ball_query.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "common/checks.h"
#include "geometry/grid.h"
#include "geometry/grid_cpu.h"
#include "geometry/knn.h"

namespace pointops {
namespace neighbors {

void check_ball_query_args(const at::Tensor& points, int64_t rows, double radius, int64_t k, double min_radius) {
  TORCH_CHECK(std::isfinite(radius) && radius >= 0, "radius must be finite and >= 0, got ", radius);
  TORCH_CHECK(std::isfinite(min_radius) && min_radius >= 0, "min_radius must be finite and >= 0, got ", min_radius);
  check_nonnegative(k, "k");
  check_output_fits(points.device(), "k = " + std::to_string(k), {rows, k}, 8);
}

}  // namespace neighbors

namespace {

using neighbors::BallTest;
using neighbors::CloudRows;
using neighbors::CpuGrid;
using neighbors::SortedPoint;
using neighbors::Strategy;

template <typename acc_t>
struct BallProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  const acc_t* points;
  CloudRows point_rows;
  int64_t total_points;
  acc_t radius;
  acc_t min_radius;
  int64_t k;
  bool repeat_first;
  int64_t* out_index;
  int64_t* out_count;
};

template <int K, typename acc_t>
void ball_search_cpu(const BallProblem<acc_t>& pb, Strategy strategy, const std::vector<CpuGrid<acc_t>>& grids,
                     const std::vector<SortedPoint<acc_t>>& row_points, const std::vector<int64_t>& order) {
  const BallTest<acc_t> test{multiply(pb.radius, pb.radius), multiply(pb.min_radius, pb.min_radius)};
  at::parallel_for(0, pb.total_queries, 64, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t row = order.empty() ? t : order[t];
      int64_t local = 0;
      const int64_t b = pb.query_rows.cloud_of(row, &local);
      if (b < 0) continue;
      const acc_t* q = pb.queries + row * 3;
      if (!neighbors::is_finite3(q[0], q[1], q[2])) continue;
      int64_t* out_index = pb.out_index + row * pb.k;
      auto search = [&](auto& list) {
        list.init(pb.k);
        if (strategy == Strategy::kBrute) {
          neighbors::ball_brute(row_points.data() + pb.point_rows.begin(b), pb.point_rows.length(b), q[0], q[1], q[2],
                                test, pb.k, list);
        } else {
          const CpuGrid<acc_t>& grid = grids[b];
          neighbors::ball_grid(grid.grid, grid.cell_start.data(), grid.points.data(), q[0], q[1], q[2], pb.radius, test,
                               list);
        }
        pb.out_count[row] =
            neighbors::write_ball_row(list, pb.k, pb.point_rows.index_base(b), pb.repeat_first, out_index);
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
void ball_query_cpu_impl(const BallProblem<acc_t>& pb) {
  if (pb.k == 0 || pb.total_queries == 0 || pb.point_rows.batch == 0) return;
  const Strategy strategy = neighbors::pick_strategy(false, pb.point_rows.batch, pb.total_queries, pb.total_points);
  std::vector<CpuGrid<acc_t>> grids;
  std::vector<SortedPoint<acc_t>> row_points;
  std::vector<int64_t> order;
  if (strategy == Strategy::kBrute) {
    row_points = neighbors::row_points_cpu(pb.points, pb.point_rows, pb.total_points);
  } else {
    const neighbors::CellBudget budget{2, 1};
    grids = neighbors::build_grids_cpu(pb.points, pb.point_rows, static_cast<double>(pb.radius), budget);
    order = neighbors::query_order_cpu(pb.queries, pb.query_rows, pb.total_queries, grids);
  }
  if (pb.k <= 4) {
    ball_search_cpu<4>(pb, strategy, grids, row_points, order);
  } else if (pb.k <= 8) {
    ball_search_cpu<8>(pb, strategy, grids, row_points, order);
  } else if (pb.k <= 16) {
    ball_search_cpu<16>(pb, strategy, grids, row_points, order);
  } else if (pb.k <= 32) {
    ball_search_cpu<32>(pb, strategy, grids, row_points, order);
  } else {
    ball_search_cpu<0>(pb, strategy, grids, row_points, order);
  }
}

// The outputs of queries that match nothing (rows of -1, zero counts), filled before the search,
// which overwrites them where a query is searched.
std::tuple<at::Tensor, at::Tensor> unmatched_ball_outputs(at::IntArrayRef rows, int64_t k, const at::Tensor& points) {
  std::vector<int64_t> shape(rows.begin(), rows.end());
  const auto options = points.options().dtype(at::kLong);
  at::Tensor counts = at::zeros(shape, options);
  shape.push_back(k);
  return {at::full(shape, -1, options), counts};
}

// Both layouts: the search into outputs from unmatched_ball_outputs.
void ball_query_cpu_run(const neighbors::SearchInputs& in, double radius, int64_t k, bool repeat_first,
                        double min_radius, const std::tuple<at::Tensor, at::Tensor>& outputs) {
  if (in.empty()) return;
  AT_DISPATCH_FLOATING_TYPES(in.points.scalar_type(), "ball_query_cpu", [&] {
    const BallProblem<scalar_t> pb{in.queries.data_ptr<scalar_t>(),
                                   in.query_rows,
                                   in.total_queries,
                                   in.points.data_ptr<scalar_t>(),
                                   in.point_rows,
                                   in.total_points,
                                   static_cast<scalar_t>(radius),
                                   static_cast<scalar_t>(min_radius),
                                   k,
                                   repeat_first,
                                   std::get<0>(outputs).data_ptr<int64_t>(),
                                   std::get<1>(outputs).data_ptr<int64_t>()};
    ball_query_cpu_impl(pb);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> ball_query_cpu(const at::Tensor& queries,
                                                  const std::optional<at::Tensor>& query_lengths,
                                                  const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                                  double radius, int64_t k, bool repeat_first, double min_radius) {
  neighbors::check_padded_pair("ball_query", queries, query_lengths, points, lengths);
  neighbors::check_ball_query_args(points, queries.size(0) * queries.size(1), radius, k, min_radius);
  auto outputs = unmatched_ball_outputs({points.size(0), queries.size(1)}, k, points);
  ball_query_cpu_run(neighbors::padded_search_inputs(queries, query_lengths, points, lengths), radius, k, repeat_first,
                     min_radius, outputs);
  return outputs;
}

std::tuple<at::Tensor, at::Tensor> ball_query_packed_cpu(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                         const at::Tensor& points, const at::Tensor& offsets,
                                                         double radius, int64_t k, bool repeat_first,
                                                         double min_radius) {
  neighbors::check_packed_pair("ball_query_packed", queries, query_offsets, points, offsets);
  neighbors::check_ball_query_args(points, queries.size(0), radius, k, min_radius);
  auto outputs = unmatched_ball_outputs({queries.size(0)}, k, points);
  ball_query_cpu_run(neighbors::packed_search_inputs(queries, query_offsets, points, offsets), radius, k, repeat_first,
                     min_radius, outputs);
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("ball_query", &ball_query_cpu);
  m.impl("ball_query_packed", &ball_query_packed_cpu);
}

}  // namespace pointops
