// Farthest point sampling: the contract shared by the CPU and CUDA kernels.
//
// fps(points, lengths?, start?, k) -> (indices, distances)
//   points    (B, N, D) float32/float64/float16/bfloat16, any D >= 1; cloud b is rows [0, lengths[b]).
//   lengths   (B,) int64 or None (every cloud has N points); values are clamped to [0, N].
//   start     (B,) int64 or None (0): index of the first pick in each cloud.
//   k         number of picks per cloud, >= 0.
//   indices   (B, k) int64: point indices within the cloud, in pick order.
//   distances (B, k) float32 (float64 for float64 points): the squared distance from each picked
//             point to the set picked before it, i.e. the selection radius squared. The first pick
//             has +inf (the distance to an empty set).
// fps_packed(points, offsets, start?, k) -> (indices, distances)
//   points    (P, D); cloud b is rows [offsets[b], offsets[b+1]) (offsets (B+1,) int64,
//             non-decreasing in [0, P]). indices index rows of P. The CPU kernel raises an error
//             for other offsets; the CUDA kernel, which cannot read them without a host sync,
//             clamps them to [0, P] and makes them non-decreasing (a decreasing pair is an empty
//             cloud).
//
// Rules (identical on CPU and CUDA, bit for bit):
//   * Each step picks the point farthest from the picked set; ties go to the lowest index.
//   * A point is never picked twice: once every remaining distance is 0 (duplicates) the next pick
//     is the lowest-index point not picked yet.
//   * Points with a NaN or Inf coordinate are absent: never picked, never counted.
//   * A start outside [0, length) or at an absent point falls back to the lowest-index present point.
//   * When a cloud runs out of points (k > present points), the rest of its row is index -1 and
//     distance -1.
//   * Squared distances are common/squared_distance.h's formula for any D: each difference
//     p[d] - q[d] and each square rounded alone, the squares summed in dimension order
//     (((dx*dx + dy*dy) + dz*dz for D = 3, no fused multiply-add), in the compute type (float32,
//     or float64 for float64 points; float16/bfloat16 are widened to float32 first).
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/portable_math.h"

namespace pointops {

std::tuple<at::Tensor, at::Tensor> fps_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                           const std::optional<at::Tensor>& start, int64_t k);
std::tuple<at::Tensor, at::Tensor> fps_packed_cpu(const at::Tensor& points, const at::Tensor& offsets,
                                                  const std::optional<at::Tensor>& start, int64_t k);

namespace fps_detail {

// The one distance formula both backends use (see the rounding rule above). Summing from 0 leaves
// the first square as it is (0 + x == x for every square, NaN included), so for D = 3 the steps
// are squared_norm3's.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t squared_distance(const acc_t* p, const acc_t* q, int64_t dims) {
  acc_t acc = 0;
  for (int64_t d = 0; d < dims; ++d) {
    const acc_t diff = subtract(p[d], q[d]);
    acc = add(acc, multiply(diff, diff));
  }
  return acc;
}

// Markers kept in the running min-distance array besides real squared distances (>= 0).
template <typename acc_t>
POINTOPS_HOST_DEVICE constexpr acc_t picked_marker() {
  return acc_t(-1);
}

// Checks shared by both backends (defined in fps_cpu.cpp).
void check_fps_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                    const std::optional<at::Tensor>& start, int64_t k);
void check_fps_packed_args(const at::Tensor& points, const at::Tensor& offsets, const std::optional<at::Tensor>& start,
                           int64_t k);

// Output dtype of the distances: float64 for float64 points, float32 otherwise.
inline at::ScalarType distance_dtype(const at::Tensor& points) {
  return points.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace fps_detail
}  // namespace pointops
