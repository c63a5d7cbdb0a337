// Ball query: the contract shared by the CPU and CUDA kernels.
//
// ball_query(queries, query_lengths?, points, lengths?, radius, k, repeat_first=True)
//     -> (indices, counts)
//   queries, query_lengths, points, lengths: as knn (knn.h): (B, M, 3), (B,), (B, N, 3), (B,).
//   radius         finite, >= 0; rounded to the compute type (float32, or float64 for float64
//                  points) and squared there: r2 = radius * radius.
//   k              the most neighbours kept per query, >= 0 (OpenPCDet's nsample, pytorch3d's K).
//   indices        (B, M, k) int64: the first k points of the cloud in index order whose squared
//                  distance (common/squared_distance.h) is < r2, ascending; then, when fewer were
//                  found, the first hit repeated (repeat_first, OpenPCDet) or -1 (pytorch3d).
//                  A query with no hit, past query_lengths[b] or with a NaN/Inf coordinate gets
//                  a row of -1 in both modes (OpenPCDet leaves such rows 0; pointops.nn does).
//   counts         (B, M) int64: the hits kept, min(hits, k).
//
// The comparison is strict, as in both peers (OpenPCDet's ball_query_gpu.cu and pytorch3d's
// ball_query.cu and ball_query_cpu.cpp test d2 < radius2): radius 0 finds nothing, and a point
// exactly at the radius is out. Points with a NaN/Inf coordinate are never hits.
//
// Strategies (grid.h): brute force (points in index order, stopping at the k-th hit) or a
// uniform grid with cells of at least the radius; identical results either way.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <tuple>

namespace pointops {

std::tuple<at::Tensor, at::Tensor> ball_query_cpu(const at::Tensor& queries,
                                                  const std::optional<at::Tensor>& query_lengths,
                                                  const at::Tensor& points,
                                                  const std::optional<at::Tensor>& lengths,
                                                  double radius, int64_t k, bool repeat_first);

namespace neighbors {

// Checks shared by both backends (defined in ball_query_cpu.cpp).
void check_ball_query_args(const at::Tensor& queries,
                           const std::optional<at::Tensor>& query_lengths,
                           const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                           double radius, int64_t k);

}  // namespace neighbors
}  // namespace pointops
