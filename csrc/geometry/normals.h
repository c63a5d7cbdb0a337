// Normals and curvature from neighbourhood PCA: the contract shared by the CPU and CUDA kernels,
// and the per-point computation itself (one host/device function, so both backends run the same
// arithmetic).
//
// estimate_normals(points, lengths?, neighbors, viewpoints?, orientation) -> (normals, curvature)
//   points      (B, N, 3) float32/float64/float16/bfloat16; cloud b is rows [0, lengths[b]).
//   lengths     (B,) int64 or None (all N); clamped to [0, N].
//   neighbors   (B, N, K) int64: the neighbourhood of point i is the points neighbors[b, i, :]
//               (kNN of the cloud in itself, which lists the point itself). Entries outside
//               [0, lengths[b]) (the -1 padding of knn) and points with a NaN/Inf coordinate are
//               skipped; an index listed twice counts twice.
//   viewpoints  (B, 3) float or None (the origin): the point each cloud's normals face.
//   orientation 0: no orientation (the component of largest magnitude is made positive, ties to
//               the first); 1: toward the viewpoint (n . (v - p) >= 0); 2: away from it
//               (n . (p - v) >= 0). A normal perpendicular to the view ray (dot = 0) keeps the
//               rule of 0.
//   normals     (B, N, 3): unit normals; float64 for float64 points, float32 otherwise.
//   curvature   (B, N), same dtype: surface variation lambda_0 / (lambda_0 + lambda_1 + lambda_2)
//               of the covariance's eigenvalues lambda_0 <= lambda_1 <= lambda_2 (PCL's and
//               Open3D's curvature), 0 when all three are 0.
//
// Rules (identical on CPU and CUDA, bit for bit):
//   * Covariance in float64 over the m counted neighbours, in the order listed: the mean (sum,
//     then / m), then the centred second moments sum (p - mean)_i (p - mean)_j / m, every
//     product, sum and quotient rounded on its own (portable_math.h).
//   * Eigen-decomposition by cyclic Jacobi, 8 sweeps (common/symmetric_eigen.h); the normal is
//     the unit eigenvector of the smallest eigenvalue (ties to the lowest index), normalised in
//     float64, oriented, then rounded once to the output dtype.
//   * Undetermined neighbourhoods give normal (0, 0, 0), never NaN: fewer than 3 distinct
//     points, duplicates only, or all on one line (the middle eigenvalue is at most 1e-12 of the
//     largest, or the largest is 0). Their curvature follows the formula (0 for a line or a
//     single point). Rows past lengths[b] and points with a NaN/Inf coordinate get normal 0 and
//     curvature 0. A flat neighbourhood is well determined (lambda_0 = 0, curvature 0).
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/clouds.h"
#include "common/portable_math.h"
#include "common/symmetric_eigen.h"

namespace pointops {
namespace normals_detail {

enum Orientation : int64_t { kNone = 0, kTowardViewpoint = 1, kAwayFromViewpoint = 2 };

constexpr double kLineRatio = 1e-12;

POINTOPS_HOST_DEVICE inline bool finite3(double x, double y, double z) {
  return std::isfinite(x) && std::isfinite(y) && std::isfinite(z);
}

POINTOPS_HOST_DEVICE inline double dot3(const double a[3], const double b[3]) {
  return add(add(multiply(a[0], b[0]), multiply(a[1], b[1])), multiply(a[2], b[2]));
}

// Point i of a cloud: `cloud` is the cloud's (n, 3) rows, `neighbors` point i's K indices,
// `length` the cloud's valid rows, `viewpoint` its (3,) viewpoint (already float64).
// Writes normal[3] and *curvature in float64.
template <typename scalar_t>
POINTOPS_HOST_DEVICE inline void point_normal(const scalar_t* cloud, int64_t length, int64_t i,
                                              const int64_t* neighbors, int64_t k, const double viewpoint[3],
                                              int64_t orientation, double normal[3], double* curvature) {
  normal[0] = normal[1] = normal[2] = 0.0;
  *curvature = 0.0;
  const double p[3] = {static_cast<double>(cloud[3 * i]), static_cast<double>(cloud[3 * i + 1]),
                       static_cast<double>(cloud[3 * i + 2])};
  if (i >= length || !finite3(p[0], p[1], p[2])) return;

  // Pass 1: the mean of the counted neighbours.
  double mean[3] = {0.0, 0.0, 0.0};
  int64_t m = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t q = neighbors[j];
    if (q < 0 || q >= length) continue;
    const double x = static_cast<double>(cloud[3 * q]);
    const double y = static_cast<double>(cloud[3 * q + 1]);
    const double z = static_cast<double>(cloud[3 * q + 2]);
    if (!finite3(x, y, z)) continue;
    mean[0] = add(mean[0], x);
    mean[1] = add(mean[1], y);
    mean[2] = add(mean[2], z);
    ++m;
  }
  if (m == 0) return;
  const double count = static_cast<double>(m);
  for (int d = 0; d < 3; ++d) mean[d] = divide(mean[d], count);

  // Pass 2: centred second moments, upper triangle.
  double s[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};  // xx xy xz yy yz zz
  for (int64_t j = 0; j < k; ++j) {
    const int64_t q = neighbors[j];
    if (q < 0 || q >= length) continue;
    const double x = static_cast<double>(cloud[3 * q]);
    const double y = static_cast<double>(cloud[3 * q + 1]);
    const double z = static_cast<double>(cloud[3 * q + 2]);
    if (!finite3(x, y, z)) continue;
    const double c[3] = {subtract(x, mean[0]), subtract(y, mean[1]), subtract(z, mean[2])};
    s[0] = add(s[0], multiply(c[0], c[0]));
    s[1] = add(s[1], multiply(c[0], c[1]));
    s[2] = add(s[2], multiply(c[0], c[2]));
    s[3] = add(s[3], multiply(c[1], c[1]));
    s[4] = add(s[4], multiply(c[1], c[2]));
    s[5] = add(s[5], multiply(c[2], c[2]));
  }
  double a[3][3];
  a[0][0] = divide(s[0], count);
  a[0][1] = a[1][0] = divide(s[1], count);
  a[0][2] = a[2][0] = divide(s[2], count);
  a[1][1] = divide(s[3], count);
  a[1][2] = a[2][1] = divide(s[4], count);
  a[2][2] = divide(s[5], count);
  if (!(std::isfinite(a[0][0]) && std::isfinite(a[0][1]) && std::isfinite(a[0][2]) && std::isfinite(a[1][1]) &&
        std::isfinite(a[1][2]) && std::isfinite(a[2][2]))) {
    return;  // coordinates near the float64 limit overflow the squares
  }
  double v[3][3];
  symmetric_eigen::decompose<3>(a, v);
  const int low = symmetric_eigen::smallest<3>(a);
  const int high = symmetric_eigen::largest<3>(a);
  const int middle = low == high ? (low + 1) % 3 : 3 - low - high;
  // Round-off can leave eigenvalues of a positive semi-definite matrix a hair below 0.
  const double l0 = a[low][low] > 0.0 ? a[low][low] : 0.0;
  const double l1 = a[middle][middle] > 0.0 ? a[middle][middle] : 0.0;
  const double l2 = a[high][high] > 0.0 ? a[high][high] : 0.0;
  const double sum = add(add(l0, l1), l2);
  *curvature = sum > 0.0 ? divide(l0, sum) : 0.0;
  if (!(l2 > 0.0) || !(l1 > multiply(kLineRatio, l2))) return;

  double n[3] = {v[0][low], v[1][low], v[2][low]};
  const double norm = square_root(dot3(n, n));
  for (int d = 0; d < 3; ++d) n[d] = divide(n[d], norm);
  // The rule of orientation 0: the largest |component| positive (ties to the first).
  int big = 0;
  for (int d = 1; d < 3; ++d) {
    if (std::fabs(n[d]) > std::fabs(n[big])) big = d;
  }
  bool flip = n[big] < 0.0;
  if (orientation != kNone) {
    const double ray[3] = {subtract(viewpoint[0], p[0]), subtract(viewpoint[1], p[1]), subtract(viewpoint[2], p[2])};
    const double facing = dot3(n, ray);
    if (facing != 0.0) flip = orientation == kTowardViewpoint ? facing < 0.0 : facing > 0.0;
  }
  for (int d = 0; d < 3; ++d) normal[d] = flip ? -n[d] : n[d];
}

// The checked inputs both backends' kernels read (defined in normals_cpu.cpp).
struct NormalsInputs {
  at::Tensor points;      // (B, N, 3) contiguous, as given
  at::Tensor neighbors;   // (B, N, K) int64 contiguous
  at::Tensor viewpoints;  // (B, 3) float64 contiguous (zeros when not given)
  CloudLengths lengths;
  int64_t batch, n, k, orientation;
};

NormalsInputs prepare_normals_inputs(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                     const at::Tensor& neighbors, const std::optional<at::Tensor>& viewpoints,
                                     int64_t orientation);

}  // namespace normals_detail
}  // namespace pointops
