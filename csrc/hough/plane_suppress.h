// Greedy suppression of repeated planes: the contract shared by the CPU and CUDA kernels.
//
// plane_suppress(planes, max_angle, max_offset) -> planes
//   planes      (B, K, 4) float32/float64/float16/bfloat16 (rounded to float32 first), K <= 1024:
//               rows (nx, ny, nz, d) of the planes n . p = d, strongest first.
//   max_angle   radians, finite and >= 0; max_offset finite and >= 0.
//   out         (B, K, 4) float32: row j as given where it is kept, NaN where it is not.
// Row j is kept when its d is not NaN and no kept row i < j is close to it. Rows j and i are close
// when, in float32 with every product and sum rounded alone,
//   c = (n_j.x n_i.x + n_j.y n_i.y) + n_j.z n_i.z,   |c| >= float32(cos(max_angle)),  and
//   |d_j - s d_i| <= float32(max_offset),            s = 1 if c >= 0 else -1
// (a plane and its flip (-n, -d) are one plane; the normals need not be unit, c is the plain dot
// product). A NaN entry makes a comparison false, so a row with a NaN normal is close to none.
// The greedy pass is sequential in j on both backends, so they agree bit for bit.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>

#include "common/portable_math.h"

namespace pointops {
namespace hough_detail {

constexpr int64_t kMaxSuppressPlanes = 1024;

POINTOPS_HOST_DEVICE inline bool planes_close(const float* a, const float* b, float min_cos, float max_offset) {
  const float c = add(add(multiply(a[0], b[0]), multiply(a[1], b[1])), multiply(a[2], b[2]));
  const float d = c >= 0.f ? subtract(a[3], b[3]) : add(a[3], b[3]);
  return std::fabs(c) >= min_cos && std::fabs(d) <= max_offset;
}

struct SuppressArgs {
  at::Tensor planes;  // (B, K, 4) float32, contiguous
  float min_cos, max_offset;
};

// Checks shared by both backends (plane_suppress_cpu.cpp).
SuppressArgs check_suppress_args(const at::Tensor& planes, double max_angle, double max_offset);

}  // namespace hough_detail
}  // namespace pointops
