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
//     searches ring by ring with the exact stopping rule of grid.h.
// What bounds it: at the bench's sizes (10^5 queries and points) the grid build's fixed chain of
// ~25 short launches (two radix sorts, run-length encoding, scans, tables) is comparable to the
// search, which is ~30 cells and ~6k candidate distances per query, issue-bound in the list
// insertions.
#include "geometry/knn.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
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

template <typename acc_t, int K, bool kGrid>
__global__ void __launch_bounds__(kSearchThreads)
    knn_search_kernel(KnnProblem<acc_t> pb, SearchData<acc_t> data) {
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
    if constexpr (kGrid) {
      neighbors::knn_grid(data.clouds[b], data.cell_start, data.points, qx, qy, qz, list);
    } else {
      neighbors::knn_brute(data.points + pb.point_rows.begin(b), pb.point_rows.length(b), qx, qy,
                           qz, list);
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

template <typename acc_t, bool kGrid>
void launch_search(const KnnProblem<acc_t>& pb, const SearchData<acc_t>& data) {
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(pb.total_queries, kSearchThreads));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (pb.k <= 4) {
    knn_search_kernel<acc_t, 4, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 8) {
    knn_search_kernel<acc_t, 8, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 16) {
    knn_search_kernel<acc_t, 16, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else if (pb.k <= 32) {
    knn_search_kernel<acc_t, 32, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  } else {
    knn_search_kernel<acc_t, 0, kGrid><<<blocks, kSearchThreads, 0, stream>>>(pb, data);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// q, p: contiguous (rows, 3) in the compute type.
template <typename acc_t>
void knn_cuda_impl(const KnnProblem<acc_t>& pb, const at::Tensor& q, const at::Tensor& p,
                   int64_t total_points) {
  if (pb.k == 0 || pb.total_queries == 0) return;
  cuda::check_cub_items(pb.total_queries, "knn: total queries");
  const Strategy strategy = neighbors::pick_strategy(true, pb.point_rows.batch, pb.total_queries,
                                                     total_points);
  if (strategy == Strategy::kBrute || pb.point_rows.batch == 0) {
    const at::Tensor points = neighbors::grid_cuda::row_points<acc_t>(p, pb.point_rows, total_points);
    const SearchData<acc_t> data{nullptr, nullptr, nullptr,
                                 reinterpret_cast<const SortedPoint<acc_t>*>(points.data_ptr<uint8_t>())};
    launch_search<acc_t, false>(pb, data);
    return;
  }
  const int64_t cell_points = neighbors::knn_cell_points(pb.k);
  const neighbors::CellBudget budget{1, cell_points};
  const auto grid = neighbors::grid_cuda::build_grid<acc_t>(p, pb.point_rows, total_points, 0.0,
                                                            budget, static_cast<double>(cell_points));
  const at::Tensor order =
      neighbors::grid_cuda::sort_queries_by_cell<acc_t>(q, pb.query_rows, pb.total_queries, grid);
  const SearchData<acc_t> data{order.data_ptr<int32_t>(), grid.cloud_ptr(),
                               grid.cell_start.template data_ptr<int32_t>(), grid.point_ptr()};
  launch_search<acc_t, true>(pb, data);
}

std::tuple<at::Tensor, at::Tensor> knn_outputs(at::IntArrayRef rows, int64_t k,
                                               const at::Tensor& points) {
  std::vector<int64_t> shape(rows.begin(), rows.end());
  shape.push_back(k);
  const auto options = points.options();
  // Every row is written by the search kernel, empty ones included.
  return {at::empty(shape, options.dtype(at::kLong)),
          at::empty(shape, options.dtype(neighbors::distance_dtype(points)))};
}

// Both layouts: the search into outputs from knn_outputs (every row written).
void knn_cuda_run(const neighbors::SearchInputs& in, int64_t k,
                  const std::optional<double>& max_distance,
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

std::tuple<at::Tensor, at::Tensor> knn_cuda(const at::Tensor& queries,
                                            const std::optional<at::Tensor>& query_lengths,
                                            const at::Tensor& points,
                                            const std::optional<at::Tensor>& lengths, int64_t k,
                                            std::optional<double> max_distance) {
  neighbors::check_padded_pair("knn", queries, query_lengths, points, lengths);
  neighbors::check_neighbour_k(points, queries.size(0) * queries.size(1), k);
  neighbors::squared_limit<double>(max_distance);  // checks it before any early return
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  auto outputs = knn_outputs({queries.size(0), queries.size(1)}, k, points);
  knn_cuda_run(neighbors::padded_search_inputs(queries, query_lengths, points, lengths), k,
               max_distance, outputs);
  return outputs;
}

std::tuple<at::Tensor, at::Tensor> knn_packed_cuda(const at::Tensor& queries,
                                                   const at::Tensor& query_offsets,
                                                   const at::Tensor& points,
                                                   const at::Tensor& offsets, int64_t k) {
  neighbors::check_packed_pair("knn_packed", queries, query_offsets, points, offsets);
  neighbors::check_neighbour_k(points, queries.size(0), k);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  auto outputs = knn_outputs({queries.size(0)}, k, points);
  knn_cuda_run(neighbors::packed_search_inputs(queries, query_offsets, points, offsets), k,
               std::nullopt, outputs);
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("knn", &knn_cuda);
  m.impl("knn_packed", &knn_packed_cuda);
}

}  // namespace pointops
