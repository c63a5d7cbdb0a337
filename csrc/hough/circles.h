// 2D circle Hough accumulator: the contract shared by the CPU and CUDA kernels.
//
// hough_circles_points(points, lengths?, weights?, gradients?, height, width, radii, max_angle) -> acc
//   points, lengths, weights, height, width: a point list (edges.h).
//   radii      R ints in [0, 32767], any order, repeats allowed.
//   gradients  (B, P, 2) floating (gx, gy) per point, or None. Given: a point votes only for the
//              centres along its gradient line (below). Rounded to float32.
//   max_angle  radians in (0, pi / 2): the gradient mode's tolerance; ignored without gradients.
//   acc        (B, R, height, width): acc[b, i, yc, xc] counts the votes for a circle of radius
//              radii[i] centred at pixel (xc, yc); int32, float32 when weighted (edges.h).
//
// Votes (scikit-image's hough_circle(image, radii, normalize=False, full_output=False)): each
// point (x, y) in the image adds one vote, or its weight, at (x + dx, y + dy) for every offset
// (dy, dx) of the rasterized circle of radius r, when that centre is inside the image. The offsets
// are skimage.draw.circle_perimeter(0, 0, r) exactly, repeats included: Bresenham's midpoint
// circle, 8 offsets per step (circle_offsets() below), so the axis points (and the diagonal ones
// when the walk lands on them) appear twice and vote twice, and radius 0 is (0, 0) eight times.
//
// Gradient mode (the direction test of OpenCV's HOUGH_GRADIENT, on the full accumulator): a point
// with gradient g = (gx, gy) votes through offset o = (dx, dy) only when o lies within max_angle
// of the line through g (towards or away from the gradient):
//   cross = dx*gy - dy*gx,  dot = dx*gx + dy*gy   (float32, every product and sum rounded alone)
//   vote iff |cross| <= t * |dot|,  t = float32(tan(max_angle))
// Points whose gradient is zero or not finite cast no vote. The CUDA kernel visits only the
// offsets near the two directions (a conservative bound), then applies this exact test.
//
// hough_circles_max_points(same arguments, normalize) -> (scores, radius_index)
//   The best radius of every centre, without the (B, R, H, W) accumulator (R >= 1):
//   scores        (B, height, width): max over i of acc[b, i, y, x], divided by the offset count
//                 of radius i (the size of its table) when normalize; int32 counts, float32 when
//                 weighted or normalize (float32(count) / float32(size), the wrappers' division).
//   radius_index  (B, height, width) int64: the first i with that score.
//   Equal to hough_circles_points(...) (divided by the sizes), then .max(1), bit for bit; a score is
//   compared through an order-preserving uint32 key (ordered_score) with the radius index below
//   it, so maxima taken in any order agree.
//
// Results are identical on CPU and CUDA, bit for bit: counts and fixed-point sums are integers.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/portable_math.h"
#include "hough/edges.h"

namespace pointops {
namespace hough_images {

constexpr int64_t kMaxRadius = 32767;
constexpr int64_t kMaxCircleOffsets = int64_t{1} << 26;  // all radii's tables together

// An offset packed in one int32: dy in the high 16 bits, dx in the low 16 (two's complement).
POINTOPS_HOST_DEVICE inline int32_t pack_offset(int32_t dx, int32_t dy) {
  return static_cast<int32_t>((static_cast<uint32_t>(dy) << 16) | (static_cast<uint32_t>(dx) & 0xffffu));
}
POINTOPS_HOST_DEVICE inline int32_t offset_dx(int32_t packed) {
  return static_cast<int16_t>(static_cast<uint16_t>(static_cast<uint32_t>(packed) & 0xffffu));
}
POINTOPS_HOST_DEVICE inline int32_t offset_dy(int32_t packed) { return packed >> 16; }

// The offsets of radius r in skimage.draw.circle_perimeter's order, as (dy, dx) pairs.
inline std::vector<std::pair<int32_t, int32_t>> circle_offsets(int32_t radius) {
  std::vector<std::pair<int32_t, int32_t>> out;
  int32_t c = 0, r = radius, d = 3 - 2 * radius;
  while (r >= c) {
    const int32_t rr[8] = {r, -r, r, -r, c, -c, c, -c};
    const int32_t cc[8] = {c, c, -c, -c, r, r, -r, -r};
    for (int i = 0; i < 8; ++i) out.emplace_back(rr[i], cc[i]);
    if (d < 0) {
      d += 4 * c + 6;
    } else {
      d += 4 * (c - r) + 10;
      r -= 1;
    }
    c += 1;
  }
  return out;
}

// All radii's offsets in one int32 table, sorted by dy within each radius, so that the offsets
// landing in a band of centre rows are one contiguous run (what the CUDA kernel walks):
//   info     [4 R]: per radius i: r, first entry, end entry, base of its dy index
//   entries  [n_entries]: pack_offset(dx, dy)
//   dy_index [sum of 2 r + 2]: dy_index[base + dy + r] = first entry of radius i with that dy or
//            more; dy_index[base + 2 r + 1] = end entry. Entry numbers count from entries[0].
struct CircleTable {
  at::Tensor data;  // int32 CPU: info, entries, dy_index one after the other
  int64_t n_radii = 0, n_entries = 0;
  int32_t max_radius = 0;
  const int32_t* info() const { return data.data_ptr<int32_t>(); }
  const int32_t* entries() const { return info() + 4 * n_radii; }
  const int32_t* dy_index() const { return entries() + n_entries; }
};

// The table of `radii` (cached: it is built once per radius list). pinned = true returns it in
// page-locked memory, for stream-ordered copies to a GPU. Defined in circles_cpu.cpp.
CircleTable circle_table(at::IntArrayRef radii, bool pinned);

// Whether a gradient can steer votes: finite and not zero.
POINTOPS_HOST_DEVICE inline bool gradient_usable(float gx, float gy) {
#if defined(__CUDA_ARCH__)
  return isfinite(gx) && isfinite(gy) && (gx != 0.f || gy != 0.f);
#else
  return std::isfinite(gx) && std::isfinite(gy) && (gx != 0.f || gy != 0.f);
#endif
}

// The gradient mode's vote test (see above); sign > 0 keeps only offsets with dot >= 0 and
// sign < 0 only those with dot < 0 (the two halves the CUDA kernel visits apart); sign 0 both.
POINTOPS_HOST_DEVICE inline bool along_gradient(int32_t dx, int32_t dy, float gx, float gy, float tan_angle, int sign) {
  const float fx = static_cast<float>(dx), fy = static_cast<float>(dy);
  const float cross = multiply(fx, gy) - multiply(fy, gx);
  const float dot = multiply(fx, gx) + multiply(fy, gy);
  if (sign > 0 && !(dot >= 0.f)) return false;
  if (sign < 0 && !(dot < 0.f)) return false;
#if defined(__CUDA_ARCH__)
  return fabsf(cross) <= multiply(tan_angle, fabsf(dot));
#else
  return std::fabs(cross) <= multiply(tan_angle, std::fabs(dot));
#endif
}

// Order-preserving uint32 keys of scores: a larger score has a larger key.
POINTOPS_HOST_DEVICE inline uint32_t ordered_score(int32_t v) { return static_cast<uint32_t>(v) ^ 0x80000000u; }
POINTOPS_HOST_DEVICE inline uint32_t ordered_score(float v) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
#endif
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
POINTOPS_HOST_DEVICE inline uint32_t unordered_bits(uint32_t key, bool is_float) {
  if (!is_float) return key ^ 0x80000000u;
  return (key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key;
}

// The float score of a bin's integer sum: the count, or float32(sum) * 2^-16 when weighted,
// divided by the radius' offset count when normalize (each step rounded once, as the wrappers').
POINTOPS_HOST_DEVICE inline float float_score(int64_t sum, bool weighted, bool normalize, int32_t ring) {
  float v = static_cast<float>(sum);
  if (weighted) v = v * kInverseWeightScale;  // a power of two: exact
  return normalize ? v / static_cast<float>(ring) : v;
}

// hough_circles_max_points' scores from its uint32 keys (stored in an int32 tensor), on their device:
// int32 counts, or float32 when is_float. Defined in circles_cpu.cpp.
at::Tensor scores_from_keys(const at::Tensor& keys, bool is_float);

// Checks shared by both backends; returns float32(tan(max_angle)) (0 without gradients).
// Defined in circles_cpu.cpp.
// The (B, R, H, W) accumulator of hough_circles_points fits the device (int64 while weighted votes add up).
inline void check_circles_output(const at::Tensor& points, at::IntArrayRef radii, int64_t height, int64_t width,
                                 bool weighted) {
  check_output_fits(
      points.device(),
      std::to_string(radii.size()) + " radii of a " + std::to_string(height) + " x " + std::to_string(width) + " image",
      {points.size(0), static_cast<int64_t>(radii.size()), height, width}, weighted ? 8 : 4);
}

float check_circles_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& weights, const std::optional<at::Tensor>& gradients,
                         int64_t height, int64_t width, at::IntArrayRef radii, double max_angle);

}  // namespace hough_images
}  // namespace pointops
