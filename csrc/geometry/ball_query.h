// Ball query: the contract shared by the CPU and CUDA kernels.
//
// ball_query(queries, query_lengths?, points, lengths?, radius, k, repeat_first=True,
//            min_radius=0) -> (indices, counts)
//   queries, query_lengths, points, lengths: as knn (knn.h): (B, M, 3), (B,), (B, N, 3), (B,).
//   radius         finite, >= 0; rounded to the compute type (float32, or float64 for float64
//                  points) and squared there: r2 = radius * radius.
//   k              the most neighbours kept per query, >= 0 (OpenPCDet's nsample, pytorch3d's K).
//   min_radius     finite, >= 0 (mmcv's dilated ball query); rounded and squared like radius.
//   indices        (B, M, k) int64: the first k points of the cloud in index order that are hits
//                  (below), ascending; then, when fewer were found, the first hit repeated
//                  (repeat_first, OpenPCDet) or -1 (pytorch3d). A query with no hit, past
//                  query_lengths[b] or with a NaN/Inf coordinate gets a row of -1 in both modes
//                  (OpenPCDet leaves such rows 0; pointops.nn does).
//   counts         (B, M) int64: the hits kept, min(hits, k).
// ball_query_packed(queries, query_offsets, points, offsets, radius, k, repeat_first=True,
//                   min_radius=0) -> (indices, counts)
//   The same for packed clouds, laid out as knn_packed (knn.h): queries (Mq, 3), points (P, 3),
//   offsets (B + 1,) int64 each; indices (Mq, k) index rows of the packed points, counts (Mq,).
//   Query rows outside [query_offsets[0], query_offsets[B]) get empty rows.
//
// A point is a hit when its squared distance d2 (common/squared_distance.h) is < r2 and, with
// min_radius, d2 >= min_radius^2 or d2 == 0 (grid.h, BallTest). The comparison with the radius is
// strict, as in all the peers (OpenPCDet's ball_query_gpu.cu, pytorch3d's ball_query.cu and
// ball_query_cpu.cpp, mmcv's ball_query_cuda_kernel.cuh test d2 < radius2): radius 0 finds
// nothing, and a point exactly at the radius is out. Points with a NaN/Inf coordinate are never
// hits.
//
// Strategies (grid.h): brute force (points in index order, stopping at the k-th hit) or a
// uniform grid with cells of at least the radius searched in index order; identical results
// either way.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <tuple>

namespace pointops {

std::tuple<at::Tensor, at::Tensor> ball_query_cpu(const at::Tensor& queries,
                                                  const std::optional<at::Tensor>& query_lengths,
                                                  const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                                  double radius, int64_t k, bool repeat_first, double min_radius);
std::tuple<at::Tensor, at::Tensor> ball_query_packed_cpu(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                         const at::Tensor& points, const at::Tensor& offsets,
                                                         double radius, int64_t k, bool repeat_first,
                                                         double min_radius);

namespace neighbors {

// Checks of the radii and k shared by both backends and layouts, and that the (rows, k) indices
// fit in the device's memory (defined in ball_query_cpu.cpp); the caller checks the clouds
// (check_padded_pair / check_packed_pair).
void check_ball_query_args(const at::Tensor& points, int64_t rows, double radius, int64_t k, double min_radius);

}  // namespace neighbors
}  // namespace pointops
