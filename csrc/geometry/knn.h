// k nearest neighbours: the contract shared by the CPU and CUDA kernels.
//
// knn(queries, query_lengths?, points, lengths?, k, max_distance?) -> (indices, distances)
//   queries        (B, M, 3) float32/float64/float16/bfloat16; cloud b's queries are rows
//                  [0, query_lengths[b]) (None: all M; values clamped to [0, M]).
//   points         (B, N, 3), the same dtype and device; cloud b is rows [0, lengths[b]).
//   k              neighbours per query, >= 0.
//   max_distance   None, or >= 0: only points whose squared distance is <= max_distance^2
//                  (rounded once to the distance dtype) are neighbours; the search stops at that
//                  radius, so queries far from every point cost little.
//   indices        (B, M, k) int64: rows of points[b], nearest first.
//   distances      (B, M, k) squared distances, float64 for float64 inputs, float32 otherwise.
// knn_packed(queries, query_offsets, points, offsets, k) -> (indices, distances)
//   queries (Mq, 3), points (P, 3): cloud b is rows [offsets[b], offsets[b + 1]) of points and
//   [query_offsets[b], query_offsets[b + 1]) of queries (both (B + 1,) int64; each is clamped to
//   [0, rows] and made non-decreasing by a running maximum). indices (Mq, k) index rows of the
//   packed points; query rows outside [query_offsets[0], query_offsets[B]) get empty rows.
//
// Rules (identical on CPU and CUDA, bit for bit, and whichever search strategy runs):
//   * distance: common/squared_distance.h, (dx*dx + dy*dy) + dz*dz with every step rounded on its
//     own, in float32 (float64 for float64 inputs; float16/bfloat16 are widened to float32);
//   * a row holds the k smallest (distance, index) pairs in ascending order: equal distances go
//     to the lowest index;
//   * points with a NaN/Inf coordinate are never neighbours; a finite point whose squared
//     distance overflows to +inf still is (after every point at a finite distance);
//   * a row with fewer than k neighbours (k > points in the cloud) is padded with index -1 and
//     distance +inf; query rows past query_lengths[b], and queries with a NaN/Inf coordinate,
//     are all -1 / +inf.
//
// Strategies (grid.h): brute force over the cloud, or a uniform grid searched ring by ring with an
// exact stopping rule. pick_strategy chooses from the sizes alone.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "geometry/grid.h"

namespace pointops {

std::tuple<at::Tensor, at::Tensor> knn_cpu(const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                                           const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                           int64_t k, std::optional<double> max_distance);
std::tuple<at::Tensor, at::Tensor> knn_packed_cpu(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                  const at::Tensor& points, const at::Tensor& offsets, int64_t k);

namespace neighbors {

// Argument checks shared by both backends and by ball_query (defined in knn_cpu.cpp). `op` names
// the operator in messages.
void check_padded_pair(const char* op, const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                       const at::Tensor& points, const std::optional<at::Tensor>& lengths);
// k >= 0 and its (rows, k) outputs (int64 indices, distances of `points`' dtype) fit the device.
void check_neighbour_k(const at::Tensor& points, int64_t rows, int64_t k);

void check_packed_pair(const char* op, const at::Tensor& queries, const at::Tensor& query_offsets,
                       const at::Tensor& points, const at::Tensor& offsets);

// Inputs as the kernels read them: contiguous, float32 or float64 (float16/bfloat16 widened).
at::Tensor compute_coords(const at::Tensor& t);

// Packed offsets as the kernels read them: clamped to [0, rows], then a running maximum, on the
// offsets' device (no host sync).
at::Tensor effective_offsets(const at::Tensor& offsets, int64_t rows);

// A neighbour search's inputs as the kernels of knn and ball_query read them, on either backend:
// coordinates from compute_coords and where each cloud's query and point rows are (padded: the
// contiguous lengths; packed: effective_offsets), with the tensors those rows point into.
struct SearchInputs {
  at::Tensor queries;
  at::Tensor points;
  at::Tensor query_counts;  // lengths (undefined when absent) or effective offsets
  at::Tensor point_counts;
  CloudRows query_rows;
  CloudRows point_rows;
  int64_t total_queries;  // padded: B * M; packed: Mq
  int64_t total_points;   // padded: B * N; packed: P

  // Nothing to search (no cloud or no query row): the outputs stay as allocated.
  bool empty() const { return point_rows.batch == 0 || total_queries == 0; }
};

// After check_padded_pair: queries (B, M, 3), points (B, N, 3).
SearchInputs padded_search_inputs(const at::Tensor& queries, const std::optional<at::Tensor>& query_lengths,
                                  const at::Tensor& points, const std::optional<at::Tensor>& lengths);
// After check_packed_pair: queries (Mq, 3), points (P, 3), offsets (B + 1,) each.
SearchInputs packed_search_inputs(const at::Tensor& queries, const at::Tensor& query_offsets, const at::Tensor& points,
                                  const at::Tensor& offsets);

inline at::ScalarType distance_dtype(const at::Tensor& points) {
  return points.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The largest squared distance a neighbour may have: max_distance^2 in float64, rounded once to
// acc_t; +inf without max_distance. Checks max_distance >= 0 (NaN fails).
template <typename acc_t>
acc_t squared_limit(const std::optional<double>& max_distance) {
  if (!max_distance.has_value()) return std::numeric_limits<acc_t>::infinity();
  const double r = *max_distance;
  TORCH_CHECK(r >= 0.0, "max_distance must be >= 0 (or None), got ", r);
  return static_cast<acc_t>(r * r);
}

}  // namespace neighbors
}  // namespace pointops
