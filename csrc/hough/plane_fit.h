// Plane inliers and least-squares plane refits: the contract shared by the CPU and CUDA kernels.
//
// plane_labels(points, lengths?, planes, threshold) -> labels
//   points     (B, N, 3) float32/float64/float16/bfloat16, rounded to float32 first; cloud b is
//              rows [0, lengths[b]) (lengths (B,) int64 or None: all N; clamped to [0, N]).
//   planes     (B, K, 4) float32 (rounded to float32 first), K <= 1024: row (nx, ny, nz, d) is the
//              plane n . p = d (n need not be unit: the residual is then scaled by |n|). A row
//              with a NaN/Inf entry matches no point.
//   threshold  float >= 0, rounded to float32.
//   labels     (B, N) int64: the first (lowest) k with |residual_k(p)| <= threshold, else -1; -1
//              for rows past lengths[b] and for points with a NaN/Inf coordinate.
//   residual_k(p) = fma(nz, z, fma(ny, y, nx * x)) - d in float32, rounded like this on both
//   backends.
//
// plane_refit(points, lengths?, planes, threshold, bands=[1.0]) -> (refit, inliers)
//   Labels the points as plane_labels does; then plane k's inliers (the points labelled k)
//   give its least-squares plane: the unit normal is the eigenvector of the smallest eigenvalue
//   of the inliers' covariance, turned to within 90 degrees of row k's normal, through their
//   centroid. refit (B, K, 4) float32; inliers (B, K) int64, the inlier counts. A row keeps its
//   input values when it has fewer than 3 inliers or its inliers leave the plane undetermined
//   (all on one line: the middle eigenvalue is at most 1e-12 of the largest).
//   bands: one refit per entry, in order, each of the previous one's planes with the threshold
//   band * threshold (the product in float64, then rounded to float32; every one finite and
//   >= 0): plane_refit with bands [a, b] is plane_refit(plane_refit(planes, a t)[0], b t). The
//   inlier counts are the last refit's. Shrinking bands (detect_planes: 3, 2, 1, 0.5) let a
//   coarse plane reach its far points before the band tightens.
//
// Exactness. The moments are exact integers, so the sums do not depend on the order in which
// points are added and both backends get the same moments: each cloud's coordinates are scaled by
// 2^s, s = 30 - e, where 2^e is the smallest power of two above the largest |coordinate| of its
// valid points, and rounded to integers q (|q| <= 2^30; half to even). A 2^-30 step of the cloud's
// extent is far below float32's own resolution at that extent. Per plane the kernels sum 1, q_i
// and each q_i q_j, the last as two int64 sums of the 30-bit halves (fits for N < 2^32). The
// solve (PlaneMoments -> plane) is integer covariance (n S_ij - S_i S_j, exact in 128 bits)
// rounded to float64, then cyclic Jacobi in float64 with every rounding spelled out, identical on
// both backends; so CPU and CUDA agree bit for bit.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/clouds.h"
#include "common/float_bits.h"
#include "common/portable_math.h"
#include "common/symmetric_eigen.h"

namespace pointops {
namespace plane_fit_detail {

constexpr int64_t kMaxPlanes = 1024;
// count, S_x, S_y, S_z, then (high, low) halves of S_xx, S_xy, S_xz, S_yy, S_yz, S_zz.
constexpr int kMoments = 16;
constexpr int kHalfBits = 30;
constexpr int kQuantBits = 30;
constexpr int kJacobiSweeps = 8;

// A row that must never match: any non-finite entry turns it into (0, 0, 0, NaN), whose residual
// is NaN for every point.
POINTOPS_HOST_DEVICE inline void sanitize_plane(const float* in, float* out) {
  const bool finite = std::isfinite(in[0]) && std::isfinite(in[1]) && std::isfinite(in[2]) && std::isfinite(in[3]);
  out[0] = finite ? in[0] : 0.f;
  out[1] = finite ? in[1] : 0.f;
  out[2] = finite ? in[2] : 0.f;
  out[3] = finite ? in[3] : NAN;
}

// The first plane of sanitized rows planes[0, k) within threshold of (x, y, z), else -1.
POINTOPS_HOST_DEVICE inline int64_t first_plane_within(const float* planes, int64_t k, float x, float y, float z,
                                                       float threshold) {
  for (int64_t j = 0; j < k; ++j) {
    const float* pl = planes + 4 * j;
    const float rho = fused_multiply_add(pl[2], z, fused_multiply_add(pl[1], y, multiply(pl[0], x)));
    if (std::fabs(rho - pl[3]) <= threshold) return j;
  }
  return -1;
}

POINTOPS_HOST_DEVICE inline bool finite_point(float x, float y, float z) {
  return std::isfinite(x) && std::isfinite(y) && std::isfinite(z);
}

// The float32 bit pattern of max |coordinate| -> the scale exponent s of the quantization.
POINTOPS_HOST_DEVICE inline int quant_shift(uint32_t max_abs_bits) {
  if (max_abs_bits == 0) return kQuantBits;
  const int biased = static_cast<int>(max_abs_bits >> 23);  // sign bit clear: |x|
  // max_abs < 2^e with e = biased - 126 for normal numbers; subnormals are below 2^-126.
  const int e = biased == 0 ? -126 : biased - 126;
  return kQuantBits - e;
}

// round(x 2^shift) to an integer, half to even; x 2^shift is exact in float64.
POINTOPS_HOST_DEVICE inline int64_t quantize(float x, int shift) {
  const double scaled = std::ldexp(static_cast<double>(x), shift);
#if defined(__CUDA_ARCH__)
  return __double2ll_rn(scaled);
#else
  return static_cast<int64_t>(std::nearbyint(scaled));
#endif
}

// The 16 moment terms of one inlier with quantized coordinates q.
POINTOPS_HOST_DEVICE inline void moment_terms(const int64_t q[3], int64_t terms[kMoments]) {
  terms[0] = 1;
  terms[1] = q[0];
  terms[2] = q[1];
  terms[3] = q[2];
  int t = 4;
  for (int i = 0; i < 3; ++i) {
    for (int j = i; j < 3; ++j, t += 2) {
      const int64_t product = q[i] * q[j];  // |product| <= 2^60
      terms[t] = product >> kHalfBits;      // floor
      terms[t + 1] = product & ((int64_t{1} << kHalfBits) - 1);
    }
  }
}

// A signed 128-bit integer rounded to float64 the same way on both backends: the high word
// (rounded once), scaled by 2^64 (exact), plus the low word (rounded once more).
POINTOPS_HOST_DEVICE inline double int128_to_double(__int128 v) {
  const int64_t high = static_cast<int64_t>(v >> 64);
  const uint64_t low = static_cast<uint64_t>(v);
#if defined(__CUDA_ARCH__)
  return add(std::ldexp(__ll2double_rn(high), 64), __ull2double_rn(low));
#else
  return add(std::ldexp(static_cast<double>(high), 64), static_cast<double>(low));
#endif
}

// Plane k's refit from its moments (see the header comment); `plane` is its sanitized input row,
// `original` the row as given (kept when the refit is undetermined).
POINTOPS_HOST_DEVICE inline void solve_plane(const int64_t moments[kMoments], int shift, const float plane[4],
                                             const float original[4], float out[4]) {
  const int64_t n = moments[0];
  bool keep = n < 3 || !std::isfinite(plane[3]);
  double a[3][3];
  double v[3][3] = {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}, {0.0, 0.0, 1.0}};
  if (!keep) {
    int t = 4;
    for (int i = 0; i < 3; ++i) {
      for (int j = i; j < 3; ++j, t += 2) {
        const __int128 sij = (static_cast<__int128>(moments[t]) << kHalfBits) + static_cast<__int128>(moments[t + 1]);
        const __int128 cov = static_cast<__int128>(n) * sij - static_cast<__int128>(moments[1 + i]) * moments[1 + j];
        a[i][j] = a[j][i] = int128_to_double(cov);
      }
    }
    // every rotation of every sweep (symmetric_eigen::decompose would skip negligible entries)
    for (int sweep = 0; sweep < kJacobiSweeps; ++sweep) {
      symmetric_eigen::rotate<3>(a, v, 0, 1);
      symmetric_eigen::rotate<3>(a, v, 0, 2);
      symmetric_eigen::rotate<3>(a, v, 1, 2);
    }
    int low = 0, high = 0;
    for (int i = 1; i < 3; ++i) {
      if (a[i][i] < a[low][low]) low = i;
      if (a[i][i] > a[high][high]) high = i;
    }
    const int middle = low == high ? (low + 1) % 3 : 3 - low - high;
    keep = !(a[middle][middle] > multiply(1e-12, a[high][high]));
    if (!keep) {
      double normal[3] = {v[0][low], v[1][low], v[2][low]};
      const double length = square_root(fused_multiply_add(
          normal[2], normal[2], fused_multiply_add(normal[1], normal[1], multiply(normal[0], normal[0]))));
      const double turn = fused_multiply_add(normal[2], static_cast<double>(plane[2]),
                                             fused_multiply_add(normal[1], static_cast<double>(plane[1]),
                                                                multiply(normal[0], static_cast<double>(plane[0]))));
      const double sign = turn < 0.0 ? -1.0 : 1.0;
      double offset = 0.0;
      for (int i = 0; i < 3; ++i) {
        normal[i] = divide(multiply(sign, normal[i]), length);
        const double centroid = std::ldexp(divide(static_cast<double>(moments[1 + i]), static_cast<double>(n)), -shift);
        offset = fused_multiply_add(normal[i], centroid, offset);
        out[i] = static_cast<float>(normal[i]);
      }
      out[3] = static_cast<float>(offset);
    }
  }
  if (keep) {
    for (int i = 0; i < 4; ++i) out[i] = original[i];
  }
}

// The arguments as both backends' kernels read them, after the checks. Defined in
// plane_fit_cpu.cpp.
struct FitInputs {
  at::Tensor points;  // (B, N, 3) float32, contiguous
  at::Tensor planes;  // (B, K, 4) float32, contiguous, as given (kernels sanitize as they read)
  CloudLengths lengths;
  int64_t batch, n, k;
  float threshold;                // plane_labels'
  std::vector<float> thresholds;  // plane_refit's, one per band
};

FitInputs prepare_fit_inputs(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const at::Tensor& planes, double threshold, at::ArrayRef<double> bands = {1.0});

}  // namespace plane_fit_detail
}  // namespace pointops
