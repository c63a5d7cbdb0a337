// 2D Hough input: edge maps, edge point lists, and the rules every 2D accumulator shares.
//
// edge_points(edges, capacity=-1) -> (points, lengths)
//   edges     (B, H, W) bool, integer or floating; a pixel is an edge iff its value != 0 (NaN
//             counts, as in numpy.nonzero). H * W <= 2^31 - 1.
//   capacity  C, the most points kept per image; -1 means H * W (every pixel fits).
//   points    (B, C, 2) int32 (x, y) = (column, row) of the edge pixels in row-major order (row
//             by row, left to right: numpy.nonzero's order), rows past lengths[b] are -1.
//   lengths   (B,) int64: min(number of edge pixels of image b, C).
//   CUDA: a count pass over 4,096-pixel tiles, one CUB exclusive scan of the tile counts, and a
//   write pass that ranks the pixels of each tile with a block scan, so the order is the image's
//   own and no atomics decide it.
//
// Point lists (the accumulators' input; edge_points turns a map into one):
//   points    (B, P, 2) int32 or int64 pixel coordinates (x, y) = (column, row).
//   lengths   (B,) int64 or None (all P); clamped to [0, P]; rows past lengths[b] are not read.
//   weights   (B, P) floating or None. None: each point casts one vote per offset and the
//             accumulator counts them, int32. Given: each point votes its weight and the
//             accumulator is float32 (below).
//   height, width: the image; 0 <= height, width <= 32767. A point outside [0, width) x
//             [0, height) casts no vote, so an int64 point never overflows the offset arithmetic.
//
// Weighted votes are summed exactly, so that every order of summation (CPU loops, CUDA atomics)
// gives the same bits: a weight w becomes the integer q = round_half_even(clamp(w, -2^24, 2^24) *
// 2^16) (NaN/Inf: q = 0, no vote), each bin sums its q in int64, and the float32 bin is
// float32(sum) * 2^-16 (one rounding). So a bin equals the exact sum of its weights rounded to
// multiples of 2^-16, then to float32. float64 / float16 / bfloat16 weights are rounded to float32
// first.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "common/portable_math.h"

namespace pointops {
namespace hough_images {

constexpr int64_t kMaxImageSide = 32767;
constexpr float kWeightScale = 65536.f;   // 2^16: fixed-point steps per unit weight
constexpr float kMaxWeight = 16777216.f;  // 2^24: |q| <= 2^40, sums of 2^23 votes fit int64
constexpr float kInverseWeightScale = 1.f / 65536.f;

// The fixed-point vote of weight w (see above).
POINTOPS_HOST_DEVICE inline int64_t weight_to_fixed(float w) {
#if defined(__CUDA_ARCH__)
  if (!isfinite(w)) return 0;
  const float c = fminf(fmaxf(w, -kMaxWeight), kMaxWeight);
  return static_cast<int64_t>(rintf(c * kWeightScale));  // exact product: a power of two
#else
  if (!std::isfinite(w)) return 0;
  const float c = std::fmin(std::fmax(w, -kMaxWeight), kMaxWeight);
  return static_cast<int64_t>(std::nearbyint(c * kWeightScale));
#endif
}

// A point's coordinates, or false when it lies outside the image (no vote).
template <typename index_t>
POINTOPS_HOST_DEVICE inline bool point_in_image(const index_t* point, int32_t height, int32_t width, int32_t& x,
                                                int32_t& y) {
  const index_t px = point[0], py = point[1];
  if (px < 0 || py < 0 || px >= width || py >= height) return false;
  x = static_cast<int32_t>(px);
  y = static_cast<int32_t>(py);
  return true;
}

// Checks shared by every point-list accumulator (both backends); defined in edges_cpu.cpp.
void check_point_lists(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                       const std::optional<at::Tensor>& weights, int64_t height, int64_t width);

// The capacity edge_points uses: C, or H * W for -1. Defined in edges_cpu.cpp.
int64_t edge_capacity(const at::Tensor& edges, int64_t capacity);

// float32(sum) * 2^-16 of int64 fixed-point sums, on their device (the weighted accumulators'
// last step; torch's int64 -> float32 conversion rounds to nearest on both backends).
inline at::Tensor fixed_to_float(const at::Tensor& sums) { return sums.to(at::kFloat).mul_(kInverseWeightScale); }

}  // namespace hough_images
}  // namespace pointops
