// 2D line Hough accumulator: the contract shared by the CPU and CUDA kernels.
//
// hough_lines_points(points, lengths?, weights?, height, width, theta) -> acc
//   points, lengths, weights, height, width: a point list (edges.h).
//   theta   T finite angles in radians (any order, repeats allowed); scikit-image's default is
//           180 angles over [-pi/2, pi/2): -pi/2 + j pi / 180.
//   acc     (B, n_rho, T): acc[b, d, j] counts the points on the line rho = d - offset at angle
//           theta[j]; int32, float32 when weighted (edges.h).
//
// Exactly scikit-image's hough_line(image, theta) accumulator (its uint64 counts as int32):
//   offset = ceil(sqrt(height^2 + width^2)), n_rho = 2 offset + 1   (float64)
//   rho    = cos(theta_j) * x + sin(theta_j) * y   (float64; each product and the sum rounded
//            alone; cos/sin from the C library on the host, as numpy's, read by both backends)
//   d      = trunc(rho + 0.5) if rho > 0 else trunc(rho - 0.5), plus offset
// where (x, y) = (column, row). A point outside the image casts no vote, so d is always in
// [0, n_rho). Results are identical on CPU and CUDA, bit for bit.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "common/portable_math.h"
#include "hough/edges.h"

namespace pointops {
namespace hough_images {

// The rho bin of (x, y) for an angle with cosine c and sine s (see above).
POINTOPS_HOST_DEVICE inline int32_t line_bin(double c, double s, int32_t x, int32_t y, int32_t offset) {
  const double rho = add(multiply(c, static_cast<double>(x)), multiply(s, static_cast<double>(y)));
  const double shifted = rho > 0.0 ? add(rho, 0.5) : subtract(rho, 0.5);
  return static_cast<int32_t>(shifted) + offset;  // C++ and CUDA casts truncate toward zero
}

// offset = ceil(sqrt(height^2 + width^2)) (skimage's formula).
inline int64_t line_offset(int64_t height, int64_t width) {
  return static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(height * height + width * width))));
}

// Checks shared by both backends; returns the offset. Defined in lines_cpu.cpp.
int64_t check_lines_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& weights, int64_t height, int64_t width,
                         at::ArrayRef<double> theta);

// (T, 2) float64 CPU tensor of (cos, sin) per angle: both backends read this table.
at::Tensor line_trig(at::ArrayRef<double> theta);

}  // namespace hough_images
}  // namespace pointops
