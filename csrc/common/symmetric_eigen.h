// Eigen-decomposition of small symmetric matrices (3x3 covariances, Horn's 4x4 quaternion
// matrix) in float64, written once for host and device and rounded identically on both.
//
// Cyclic Jacobi with a fixed number of sweeps. A closed-form 3x3 solver (Cardano / the
// trigonometric formula) needs acos and cos, whose results differ in the last bits between the
// host's libm and CUDA's libdevice, so CPU and CUDA could not agree bit for bit. A Jacobi sweep
// uses only +, -, *, / and sqrt, each correctly rounded by IEEE 754 on both sides, and a fixed
// sweep count gives a fixed sequence of operations: the same bits on CPU and CUDA, with no
// data-dependent loop. Jacobi converges quadratically; for 3x3 and 4x4 matrices 8 sweeps reach
// float64 round-off (the off-diagonal mass squares each sweep once it is small).
//
// plane_refit (csrc/hough/plane_fit.h) runs its fixed sweeps of rotate<3>() without decompose()'s
// negligible-entry test; estimate_normals and ICP call decompose().
#pragma once

#include <cmath>

#include "common/portable_math.h"

namespace pointops {
namespace symmetric_eigen {

constexpr int kDefaultSweeps = 8;

// One Jacobi rotation zeroing a[p][q] (p < q) of the symmetric matrix a; v collects the
// rotations (its columns become the eigenvectors).
template <int N>
POINTOPS_HOST_DEVICE inline void rotate(double (&a)[N][N], double (&v)[N][N], int p, int q) {
  const double apq = a[p][q];
  if (apq == 0.0) return;
  const double theta = divide(subtract(a[q][q], a[p][p]), multiply(2.0, apq));
  // t = sign(theta) / (|theta| + sqrt(theta^2 + 1)): the smaller rotation angle. A huge theta
  // overflows theta^2 to Inf and gives t = 0, a rotation too small to matter.
  const double root = square_root(add(multiply(theta, theta), 1.0));
  double t = divide(1.0, add(std::fabs(theta), root));
  if (theta < 0.0) t = -t;
  const double c = divide(1.0, square_root(add(multiply(t, t), 1.0)));
  const double s = multiply(t, c);
  const double tapq = multiply(t, apq);
  a[p][p] = subtract(a[p][p], tapq);
  a[q][q] = add(a[q][q], tapq);
  a[p][q] = a[q][p] = 0.0;
  for (int r = 0; r < N; ++r) {
    if (r == p || r == q) continue;
    const double arp = a[r][p], arq = a[r][q];
    a[r][p] = a[p][r] = subtract(multiply(c, arp), multiply(s, arq));
    a[r][q] = a[q][r] = add(multiply(s, arp), multiply(c, arq));
  }
  for (int row = 0; row < N; ++row) {
    const double vp = v[row][p], vq = v[row][q];
    v[row][p] = subtract(multiply(c, vp), multiply(s, vq));
    v[row][q] = add(multiply(s, vp), multiply(c, vq));
  }
}

// Diagonalises the symmetric matrix a in place: afterwards a[i][i] are the eigenvalues (in no
// particular order) and column i of v is the unit eigenvector of a[i][i]. Non-finite entries
// give non-finite results; callers check their inputs.
//
// An off-diagonal entry too small to change either diagonal entry it couples (|a_pp| + 100 |a_pq|
// rounds to |a_pp|, and likewise a_qq: the test of Numerical Recipes' jacobi) is set to 0 instead
// of rotated. Its rotation would move the eigenvalues by less than their own rounding, and
// skipping it makes the sweeps after convergence nearly free: most matrices converge in 3 or 4 of
// the 8. The test is a comparison of correctly rounded values, so both backends skip alike.
template <int N>
POINTOPS_HOST_DEVICE inline void decompose(double (&a)[N][N], double (&v)[N][N], int sweeps = kDefaultSweeps) {
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) v[i][j] = i == j ? 1.0 : 0.0;
  }
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    bool rotated = false;
    for (int p = 0; p < N - 1; ++p) {
      for (int q = p + 1; q < N; ++q) {
        if (a[p][q] == 0.0) continue;
        const double g = multiply(100.0, std::fabs(a[p][q]));
        const double app = std::fabs(a[p][p]), aqq = std::fabs(a[q][q]);
        if (add(app, g) == app && add(aqq, g) == aqq) {
          a[p][q] = a[q][p] = 0.0;
          continue;
        }
        rotate<N>(a, v, p, q);
        rotated = true;
      }
    }
    if (!rotated) break;  // every off-diagonal entry is 0: later sweeps would change nothing
  }
}

// Index of the smallest / largest diagonal entry (eigenvalue); ties go to the lowest index.
template <int N>
POINTOPS_HOST_DEVICE inline int smallest(const double (&a)[N][N]) {
  int best = 0;
  for (int i = 1; i < N; ++i) {
    if (a[i][i] < a[best][best]) best = i;
  }
  return best;
}

template <int N>
POINTOPS_HOST_DEVICE inline int largest(const double (&a)[N][N]) {
  int best = 0;
  for (int i = 1; i < N; ++i) {
    if (a[i][i] > a[best][best]) best = i;
  }
  return best;
}

}  // namespace symmetric_eigen
}  // namespace pointops
