// k nearest neighbours on the CPU: the twin of knn_cuda.cu (rules in knn.h). Clouds build their
// grids in parallel, then queries search in parallel, each with the host/device search of grid.h.
// Also holds the argument checks and strategy choices that both backends and ball_query share.
#include "geometry/knn.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <vector>

#include "common/checks.h"
#include "geometry/grid.h"
#include "geometry/grid_cpu.h"

namespace pointops {
namespace neighbors {

namespace {

void check_coords(const at::Tensor& t, const char* name, int64_t dims, const char* layout) {
  check_dim(t, name, dims, layout);
  check_floating(t, name);
  TORCH_CHECK(t.size(dims - 1) == 3, name, " must have shape ", layout, " (x, y, z), got shape ", t.sizes());
}

void check_offsets(const at::Tensor& offsets, const char* name, const at::Tensor& ref, const char* ref_name) {
  check_dim(offsets, name, 1, "(B + 1,)");
  check_dtype(offsets, name, at::kLong);
  TORCH_CHECK(offsets.size(0) >= 1, name, " must have B + 1 >= 1 entries, got shape ", offsets.sizes());
  check_same_device(offsets, name, ref, ref_name);
}

}  // namespace

void check_padded_pair(const char* op, const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                       const at::Tensor& points, const std::optional<at::Tensor>& lengths) {
  check_coords(queries, "queries", 3, "(B, M, 3)");
  check_coords(points, "points", 3, "(B, N, 3)");
  TORCH_CHECK(queries.size(0) == points.size(0), op,
              ": queries and points must have the same batch size B, got queries of shape ", queries.sizes(),
              " and points of shape ", points.sizes());
  TORCH_CHECK(queries.scalar_type() == points.scalar_type(), op, ": queries must have the dtype of points (",
              points.scalar_type(), "), got ", queries.scalar_type());
  check_same_device(queries, "queries", points, "points");
  check_optional_batch_vector(lengths, "lengths", points.size(0), points, "points");
  check_optional_batch_vector(query_lengths, "query_lengths", points.size(0), points, "points");
  check_fits_int32(points.size(1), "points.size(1) (points per cloud)");
}

void check_neighbour_k(const at::Tensor& points, int64_t rows, int64_t k) {
  check_nonnegative(k, "k");
  const int64_t distance_size = points.scalar_type() == at::kDouble ? 8 : 4;
  check_output_fits(points.device(), "k = " + std::to_string(k), {rows, k}, 8 + distance_size);
}

void check_packed_pair(const char* op, const at::Tensor& queries, const at::Tensor& query_offsets,
                       const at::Tensor& points, const at::Tensor& offsets) {
  check_coords(queries, "queries", 2, "(Mq, 3)");
  check_coords(points, "points", 2, "(P, 3)");
  TORCH_CHECK(queries.scalar_type() == points.scalar_type(), op, ": queries must have the dtype of points (",
              points.scalar_type(), "), got ", queries.scalar_type());
  check_same_device(queries, "queries", points, "points");
  check_offsets(offsets, "offsets", points, "points");
  check_offsets(query_offsets, "query_offsets", points, "points");
  TORCH_CHECK(query_offsets.size(0) == offsets.size(0), op,
              ": query_offsets and offsets must both have B + 1 entries, got ", query_offsets.size(0), " and ",
              offsets.size(0));
  check_fits_int32(points.size(0), "points.size(0) (total points)");
}

at::Tensor compute_coords(const at::Tensor& t) {
  if (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) {
    return t.to(at::kFloat).contiguous();
  }
  return t.contiguous();
}

at::Tensor effective_offsets(const at::Tensor& offsets, int64_t rows) {
  return std::get<0>(at::cummax(offsets.clamp(0, rows), 0)).contiguous();
}

SearchInputs padded_search_inputs(const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                                  const at::Tensor& points, const std::optional<at::Tensor>& lengths) {
  const int64_t batch = points.size(0);
  const CloudLengths qlen = contiguous_lengths(query_lengths);
  const CloudLengths plen = contiguous_lengths(lengths);
  return {compute_coords(queries),
          compute_coords(points),
          qlen.tensor,
          plen.tensor,
          CloudRows{qlen.data, batch, queries.size(1), false},
          CloudRows{plen.data, batch, points.size(1), false},
          batch * queries.size(1),
          batch * points.size(1)};
}

SearchInputs packed_search_inputs(const at::Tensor& queries, const at::Tensor& query_offsets, const at::Tensor& points,
                                  const at::Tensor& offsets) {
  const int64_t batch = offsets.size(0) - 1;
  at::Tensor qoff = effective_offsets(query_offsets, queries.size(0));
  at::Tensor poff = effective_offsets(offsets, points.size(0));
  const CloudRows query_rows{qoff.data_ptr<int64_t>(), batch, 0, true};
  const CloudRows point_rows{poff.data_ptr<int64_t>(), batch, 0, true};
  return {compute_coords(queries), compute_coords(points), std::move(qoff), std::move(poff), query_rows, point_rows,
          queries.size(0),         points.size(0)};
}

Strategy pick_strategy(bool cuda, int64_t batch, int64_t queries, int64_t points) {
  const int64_t clouds = batch > 0 ? batch : 1;
  const int64_t per_cloud = points / clouds;
  if (cuda) {
    // A grid costs ~25 launches (two radix sorts, run-length encoding, scans, the tables) before
    // any query runs; brute force costs a pair test per (query, point) at a few per ns.
    return static_cast<double>(queries) * static_cast<double>(per_cloud) <= 134217728.0 ? Strategy::kBrute
                                                                                        : Strategy::kGrid;
  }
  // On the CPU a grid costs a few tens of ns per point to build and saves a pair test of a few
  // ns for most of the cloud's points per query.
  return per_cloud <= 128 || queries / clouds <= 8 ? Strategy::kBrute : Strategy::kGrid;
}

int64_t knn_cell_points(int64_t k) { return (k + 1) / 3 > 2 ? (k + 1) / 3 : 2; }

}  // namespace neighbors

namespace {

using neighbors::CloudRows;
using neighbors::CpuGrid;
using neighbors::SortedPoint;
using neighbors::Strategy;

template <typename acc_t>
struct KnnProblem {
  const acc_t* queries;
  CloudRows query_rows;
  int64_t total_queries;
  const acc_t* points;
  CloudRows point_rows;
  int64_t total_points;
  int64_t k;
  int64_t* out_index;
  acc_t* out_distance;
  acc_t limit;  // squared_limit(max_distance)
};

// K > 0: the fixed list of K slots; K == 0: the list kept in the output row.
template <typename acc_t, int K>
void knn_search_cpu(const KnnProblem<acc_t>& pb, Strategy strategy, const std::vector<CpuGrid<acc_t>>& grids,
                    const std::vector<SortedPoint<acc_t>>& row_points, const std::vector<int64_t>& order) {
  at::parallel_for(0, pb.total_queries, 64, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const int64_t row = order.empty() ? t : order[t];
      int64_t local = 0;
      const int64_t b = pb.query_rows.cloud_of(row, &local);
      if (b < 0) continue;
      const acc_t* q = pb.queries + row * 3;
      if (!neighbors::is_finite3(q[0], q[1], q[2])) continue;
      int64_t* out_index = pb.out_index + row * pb.k;
      acc_t* out_distance = pb.out_distance + row * pb.k;
      auto search = [&](auto& list) {
        list.init(pb.k, pb.limit);
        if (strategy == Strategy::kBrute) {
          neighbors::knn_brute(row_points.data() + pb.point_rows.begin(b), pb.point_rows.length(b), q[0], q[1], q[2],
                               list);
        } else {
          const CpuGrid<acc_t>& grid = grids[b];
          neighbors::knn_grid(grid.grid, grid.cell_start.data(), grid.points.data(), q[0], q[1], q[2], list);
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
  });
}

template <typename acc_t>
void knn_cpu_impl(const KnnProblem<acc_t>& pb) {
  if (pb.k == 0 || pb.total_queries == 0) return;
  const Strategy strategy = neighbors::pick_strategy(false, pb.point_rows.batch, pb.total_queries, pb.total_points);
  std::vector<CpuGrid<acc_t>> grids;
  std::vector<SortedPoint<acc_t>> row_points;
  std::vector<int64_t> order;
  if (strategy == Strategy::kBrute) {
    row_points = neighbors::row_points_cpu(pb.points, pb.point_rows, pb.total_points);
  } else {
    const int64_t cell_points = neighbors::knn_cell_points(pb.k);
    const neighbors::CellBudget budget{1, cell_points};
    grids = neighbors::build_grids_cpu(pb.points, pb.point_rows, 0.0, budget, static_cast<double>(cell_points));
    order = neighbors::query_order_cpu(pb.queries, pb.query_rows, pb.total_queries, grids);
  }
  if (pb.k <= 4) {
    knn_search_cpu<acc_t, 4>(pb, strategy, grids, row_points, order);
  } else if (pb.k <= 8) {
    knn_search_cpu<acc_t, 8>(pb, strategy, grids, row_points, order);
  } else if (pb.k <= 16) {
    knn_search_cpu<acc_t, 16>(pb, strategy, grids, row_points, order);
  } else if (pb.k <= 32) {
    knn_search_cpu<acc_t, 32>(pb, strategy, grids, row_points, order);
  } else {
    knn_search_cpu<acc_t, 0>(pb, strategy, grids, row_points, order);
  }
}

std::tuple<at::Tensor, at::Tensor> empty_knn_outputs(at::IntArrayRef rows, int64_t k, const at::Tensor& points) {
  std::vector<int64_t> shape(rows.begin(), rows.end());
  shape.push_back(k);
  const auto options = points.options();
  return {at::full(shape, -1, options.dtype(at::kLong)),
          at::full(shape, std::numeric_limits<double>::infinity(), options.dtype(neighbors::distance_dtype(points)))};
}

// Both layouts: the search into outputs from empty_knn_outputs.
void knn_cpu_run(const neighbors::SearchInputs& in, int64_t k, const std::optional<double>& max_distance,
                 const std::tuple<at::Tensor, at::Tensor>& outputs) {
  if (in.empty()) return;
  AT_DISPATCH_FLOATING_TYPES(in.points.scalar_type(), "knn_cpu", [&] {
    const KnnProblem<scalar_t> pb{in.queries.data_ptr<scalar_t>(),
                                  in.query_rows,
                                  in.total_queries,
                                  in.points.data_ptr<scalar_t>(),
                                  in.point_rows,
                                  in.total_points,
                                  k,
                                  std::get<0>(outputs).data_ptr<int64_t>(),
                                  std::get<1>(outputs).data_ptr<scalar_t>(),
                                  neighbors::squared_limit<scalar_t>(max_distance)};
    knn_cpu_impl(pb);
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> knn_cpu(const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                                           const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                           int64_t k, std::optional<double> max_distance) {
  neighbors::check_padded_pair("knn", queries, query_lengths, points, lengths);
  neighbors::check_neighbour_k(points, queries.size(0) * queries.size(1), k);
  neighbors::squared_limit<double>(max_distance);  // checks it before any early return
  auto outputs = empty_knn_outputs({queries.size(0), queries.size(1)}, k, points);
  knn_cpu_run(neighbors::padded_search_inputs(queries, query_lengths, points, lengths), k, max_distance, outputs);
  return outputs;
}

std::tuple<at::Tensor, at::Tensor> knn_packed_cpu(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                  const at::Tensor& points, const at::Tensor& offsets, int64_t k) {
  neighbors::check_packed_pair("knn_packed", queries, query_offsets, points, offsets);
  neighbors::check_neighbour_k(points, queries.size(0), k);
  auto outputs = empty_knn_outputs({queries.size(0)}, k, points);
  knn_cpu_run(neighbors::packed_search_inputs(queries, query_offsets, points, offsets), k, std::nullopt, outputs);
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("knn", &knn_cpu);
  m.impl("knn_packed", &knn_packed_cpu);
}

}  // namespace pointops
