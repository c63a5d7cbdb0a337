// Rigid transforms and the ICP iteration: the contract shared by the CPU and CUDA kernels, and
// the arithmetic itself (host/device functions both backends call, so they round alike).
//
// transform_points(points, lengths?, poses) -> moved
//   points   (B, N, 3) float32/float64/float16/bfloat16; cloud b is rows [0, lengths[b]).
//   lengths  (B,) int64 or None (all N); clamped to [0, N].
//   poses    (B, H, 4, 4) float: H rigid transforms per cloud, [R t; 0 0 0 1] (the last row is
//            not read).
//   moved    (B, H, N, 3), float64 for float64 points, float32 otherwise: R p + t, computed in
//            float64 as ((r0 x + r1 y) + r2 z) + t with every product and sum rounded on its
//            own, then rounded once; rows past lengths[b] are 0. NaN/Inf points give NaN/Inf.
//
// icp_step(sources, query_lengths?, targets, target_normals?, poses, indices, converged,
//          max_correspondence_distance, tolerance, point_to_plane, update)
//     -> (poses, rmse, inlier_fraction, converged)
//   sources        (B, N, 3) float; cloud b is rows [0, query_lengths[b]).
//   targets        (B, M, 3) float, target_normals (B, M, 3) float (point_to_plane only).
//   poses          (B, H, 4, 4) float32/float64: the current pose of each hypothesis.
//   indices        (B, H, N) int64: the target matched to source i under hypothesis h (the
//                  nearest neighbour of transform_points(...)[b, h, i]); -1 or >= M for none.
//   converged      (B, H) bool: hypotheses that have stopped (their poses pass through).
//   One step of ICP for every hypothesis at once:
//   * m = pose applied to source i in float64 (as transform_points, before its final rounding),
//     q = its target; d2 = (dx*dx + dy*dy) + dz*dz in float64 (common/squared_distance.h). A
//     source counts when it is in its cloud and finite; it is an inlier when its index is
//     valid, q is finite and d2 <= max_correspondence_distance^2 (float64; +Inf keeps every
//     match).
//   * rmse = sqrt(sum of inlier d2 / inliers) and inlier_fraction = inliers / counted sources,
//     both 0 when the denominator is 0; they describe the pose passed in (float64 for float64
//     sources, float32 otherwise). As Open3D's inlier_rmse and fitness.
//   * With update and not converged, the step's rigid increment D (below) moves the pose to
//     D * pose (float64, rounded once to the poses' dtype; the last row becomes 0 0 0 1), and the
//     hypothesis converges when D rotates by 2 sin(angle / 2) <= tolerance and translates by
//     |t| <= tolerance (so tolerance 0 stops only on an exact identity step). Otherwise the pose
//     and the flag pass through.
//   * Point to point (Horn's closed form with unit quaternions): the rotation is the unit
//     eigenvector of the largest eigenvalue of Horn's symmetric 4x4 matrix of the inliers'
//     cross-covariance (Jacobi, common/symmetric_eigen.h), turned to w >= 0; t = q_mean - R m_mean.
//     Fewer than 3 inliers: D = identity.
//   * Point to plane (the linearised least squares of Chen & Medioni / Low): per inlier the
//     residual r = (m - q) . n and row J = (m x n, n); (sum J^T J) x = -sum J^T r solved by
//     Gaussian elimination in fixed order, where a pivot <= 1e-12 of the largest diagonal entry
//     marks an unconstrained direction whose component is set to 0 (a plane leaves its in-plane
//     motions free). x = (w, t): the rotation is the unit quaternion (1, w / 2) / |(1, w / 2)|,
//     the exact rotation by 2 atan(|w| / 2) about w, which needs no sin or cos (those round
//     differently on host and device). A NaN/Inf normal counts as 0. Fewer than 6 inliers:
//     D = identity.
//
// Fixed-order sums. Each hypothesis's sums run over kLanes = 256 lanes: lane l adds the terms of
// sources l, l + 256, l + 512, ... in that order, in float64; then the lanes are combined by a
// fixed tree: within each group of 32 lanes, lane t adds lane t + s for s = 16, 8, 4, 2, 1
// (a warp's shuffle-down reduction), then the 8 group totals likewise for s = 4, 2, 1. The
// CUDA kernel runs one block of 256 threads per hypothesis in exactly this order and the CPU
// kernel replays it, so both produce the same bits, call after call.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/clouds.h"
#include "common/portable_math.h"
#include "common/squared_distance.h"
#include "common/symmetric_eigen.h"

namespace pointops {
namespace icp_detail {

constexpr int kLanes = 256;
constexpr int kGroup = 32;
constexpr int kGroups = kLanes / kGroup;

// Sum slots: 0 inliers, 1 sum of inlier d2, 2 counted sources, then the method's terms.
constexpr int kStats = 3;
constexpr int kPointTerms = kStats + 3 + 3 + 9;   // sum m, sum q, sum m_i q_j
constexpr int kPlaneTerms = kStats + 21 + 6;      // upper triangle of J^T J, J^T r
constexpr int kMinPointInliers = 3;
constexpr int kMinPlaneInliers = 6;
constexpr double kPivotRatio = 1e-12;

// A pose as float64: R row-major in [0, 9), t in [9, 12).
struct Pose {
  double r[9];
  double t[3];
};

template <typename pose_t>
POINTOPS_HOST_DEVICE inline Pose load_pose(const pose_t* m) {
  Pose p;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) p.r[3 * i + j] = static_cast<double>(m[4 * i + j]);
    p.t[i] = static_cast<double>(m[4 * i + 3]);
  }
  return p;
}

template <typename pose_t>
POINTOPS_HOST_DEVICE inline void store_pose(const Pose& p, pose_t* m) {
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[4 * i + j] = static_cast<pose_t>(p.r[3 * i + j]);
    m[4 * i + 3] = static_cast<pose_t>(p.t[i]);
  }
  m[12] = static_cast<pose_t>(0.0);
  m[13] = static_cast<pose_t>(0.0);
  m[14] = static_cast<pose_t>(0.0);
  m[15] = static_cast<pose_t>(1.0);
}

// R x + t, every product and sum rounded on its own.
POINTOPS_HOST_DEVICE inline void apply(const Pose& p, const double x[3], double out[3]) {
  for (int i = 0; i < 3; ++i) {
    const double* row = p.r + 3 * i;
    out[i] = add(add(add(multiply(row[0], x[0]), multiply(row[1], x[1])), multiply(row[2], x[2])), p.t[i]);
  }
}

// a * b (a applied after b).
POINTOPS_HOST_DEVICE inline Pose compose(const Pose& a, const Pose& b) {
  Pose c;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      c.r[3 * i + j] = add(add(multiply(a.r[3 * i], b.r[j]), multiply(a.r[3 * i + 1], b.r[3 + j])),
                           multiply(a.r[3 * i + 2], b.r[6 + j]));
    }
  }
  apply(a, b.t, c.t);
  return c;
}

POINTOPS_HOST_DEVICE inline bool finite3(double x, double y, double z) {
  return std::isfinite(x) && std::isfinite(y) && std::isfinite(z);
}

// The squared-distance formula of common/squared_distance.h, in float64.
POINTOPS_HOST_DEVICE inline double squared_norm3(const double v[3]) {
  return pointops::squared_norm3<double>(v[0], v[1], v[2]);
}

// Adds source i's terms to the lane sums acc[terms]. `source` is the point (3,), `target` and
// `normal` its match's rows (null when it has no valid match).
template <bool kPlane, typename src_t, typename tgt_t>
POINTOPS_HOST_DEVICE inline void add_terms(const Pose& pose, const src_t* source, const tgt_t* target,
                                           const tgt_t* normal, double max_d2, double* acc) {
  const double s[3] = {static_cast<double>(source[0]), static_cast<double>(source[1]),
                       static_cast<double>(source[2])};
  if (!finite3(s[0], s[1], s[2])) return;
  acc[2] = add(acc[2], 1.0);
  if (target == nullptr) return;
  const double q[3] = {static_cast<double>(target[0]), static_cast<double>(target[1]),
                       static_cast<double>(target[2])};
  if (!finite3(q[0], q[1], q[2])) return;
  double m[3];
  apply(pose, s, m);
  const double diff[3] = {subtract(m[0], q[0]), subtract(m[1], q[1]), subtract(m[2], q[2])};
  const double d2 = squared_norm3(diff);
  if (!(d2 <= max_d2)) return;
  acc[0] = add(acc[0], 1.0);
  acc[1] = add(acc[1], d2);
  if (kPlane) {
    double n[3] = {static_cast<double>(normal[0]), static_cast<double>(normal[1]),
                   static_cast<double>(normal[2])};
    if (!finite3(n[0], n[1], n[2])) n[0] = n[1] = n[2] = 0.0;
    const double r = add(add(multiply(diff[0], n[0]), multiply(diff[1], n[1])), multiply(diff[2], n[2]));
    const double j[6] = {subtract(multiply(m[1], n[2]), multiply(m[2], n[1])),
                         subtract(multiply(m[2], n[0]), multiply(m[0], n[2])),
                         subtract(multiply(m[0], n[1]), multiply(m[1], n[0])), n[0], n[1], n[2]};
    int slot = kStats;
    for (int a = 0; a < 6; ++a) {
      for (int b = a; b < 6; ++b, ++slot) acc[slot] = add(acc[slot], multiply(j[a], j[b]));
    }
    for (int a = 0; a < 6; ++a, ++slot) acc[slot] = add(acc[slot], multiply(j[a], r));
  } else {
    for (int d = 0; d < 3; ++d) {
      acc[kStats + d] = add(acc[kStats + d], m[d]);
      acc[kStats + 3 + d] = add(acc[kStats + 3 + d], q[d]);
    }
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        acc[kStats + 6 + 3 * a + b] = add(acc[kStats + 6 + 3 * a + b], multiply(m[a], q[b]));
      }
    }
  }
}

// Rotation of the unit quaternion (w, x, y, z).
POINTOPS_HOST_DEVICE inline void quaternion_rotation(const double q[4], double r[9]) {
  const double w = q[0], x = q[1], y = q[2], z = q[3];
  const double xx = multiply(x, x), yy = multiply(y, y), zz = multiply(z, z);
  const double xy = multiply(x, y), xz = multiply(x, z), yz = multiply(y, z);
  const double wx = multiply(w, x), wy = multiply(w, y), wz = multiply(w, z);
  r[0] = subtract(1.0, multiply(2.0, add(yy, zz)));
  r[1] = multiply(2.0, subtract(xy, wz));
  r[2] = multiply(2.0, add(xz, wy));
  r[3] = multiply(2.0, add(xy, wz));
  r[4] = subtract(1.0, multiply(2.0, add(xx, zz)));
  r[5] = multiply(2.0, subtract(yz, wx));
  r[6] = multiply(2.0, subtract(xz, wy));
  r[7] = multiply(2.0, add(yz, wx));
  r[8] = subtract(1.0, multiply(2.0, add(xx, yy)));
}

// Normalises q (w, x, y, z) in place and returns 2 |(x, y, z)| = 2 sin(angle / 2).
POINTOPS_HOST_DEVICE inline double normalise_quaternion(double q[4]) {
  const double norm = square_root(add(add(add(multiply(q[0], q[0]), multiply(q[1], q[1])),
                                          multiply(q[2], q[2])), multiply(q[3], q[3])));
  for (int i = 0; i < 4; ++i) q[i] = divide(q[i], norm);
  const double v[3] = {q[1], q[2], q[3]};
  return multiply(2.0, square_root(squared_norm3(v)));
}

// Horn's increment from the point-to-point sums; returns false when there are too few inliers.
POINTOPS_HOST_DEVICE inline bool point_increment(const double* sums, Pose* step, double* angle) {
  const double n = sums[0];
  if (!(n >= kMinPointInliers)) return false;
  const double* sm = sums + kStats;
  const double* sq = sums + kStats + 3;
  const double* smq = sums + kStats + 6;
  double mm[3], qm[3];
  for (int d = 0; d < 3; ++d) {
    mm[d] = divide(sm[d], n);
    qm[d] = divide(sq[d], n);
  }
  // Cross-covariance S_ab = sum (m_a - mm_a)(q_b - qm_b) = sum m_a q_b - sum m_a * qm_b.
  double s[3][3];
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) s[a][b] = subtract(smq[3 * a + b], multiply(sm[a], qm[b]));
  }
  double k[4][4];
  k[0][0] = add(add(s[0][0], s[1][1]), s[2][2]);
  k[0][1] = k[1][0] = subtract(s[1][2], s[2][1]);
  k[0][2] = k[2][0] = subtract(s[2][0], s[0][2]);
  k[0][3] = k[3][0] = subtract(s[0][1], s[1][0]);
  k[1][1] = subtract(subtract(s[0][0], s[1][1]), s[2][2]);
  k[1][2] = k[2][1] = add(s[0][1], s[1][0]);
  k[1][3] = k[3][1] = add(s[2][0], s[0][2]);
  k[2][2] = subtract(subtract(s[1][1], s[0][0]), s[2][2]);
  k[2][3] = k[3][2] = add(s[1][2], s[2][1]);
  k[3][3] = subtract(subtract(s[2][2], s[0][0]), s[1][1]);
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      if (!std::isfinite(k[a][b])) return false;
    }
  }
  double v[4][4];
  symmetric_eigen::decompose<4>(k, v);
  const int best = symmetric_eigen::largest<4>(k);
  double q[4] = {v[0][best], v[1][best], v[2][best], v[3][best]};
  if (q[0] < 0.0) {
    for (int i = 0; i < 4; ++i) q[i] = -q[i];
  }
  *angle = normalise_quaternion(q);
  quaternion_rotation(q, step->r);
  double rotated[3];
  const Pose rotation_only = {{step->r[0], step->r[1], step->r[2], step->r[3], step->r[4], step->r[5],
                               step->r[6], step->r[7], step->r[8]}, {0.0, 0.0, 0.0}};
  apply(rotation_only, mm, rotated);
  for (int d = 0; d < 3; ++d) step->t[d] = subtract(qm[d], rotated[d]);
  return true;
}

// The point-to-plane increment from its sums; returns false when there are too few inliers.
POINTOPS_HOST_DEVICE inline bool plane_increment(const double* sums, Pose* step, double* angle) {
  if (!(sums[0] >= kMinPlaneInliers)) return false;
  double a[6][7];
  int slot = kStats;
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j, ++slot) a[i][j] = a[j][i] = sums[slot];
  }
  for (int i = 0; i < 6; ++i, ++slot) a[i][6] = -sums[slot];
  double scale = 0.0;
  for (int i = 0; i < 6; ++i) {
    if (!std::isfinite(a[i][6])) return false;
    for (int j = 0; j < 6; ++j) {
      if (!std::isfinite(a[i][j])) return false;
    }
    if (a[i][i] > scale) scale = a[i][i];
  }
  if (!(scale > 0.0)) return false;
  const double threshold = multiply(kPivotRatio, scale);
  bool free_dir[6];
  for (int j = 0; j < 6; ++j) {
    free_dir[j] = !(a[j][j] > threshold);
    if (free_dir[j]) continue;
    for (int i = j + 1; i < 6; ++i) {
      const double f = divide(a[i][j], a[j][j]);
      for (int c = j; c < 7; ++c) a[i][c] = subtract(a[i][c], multiply(f, a[j][c]));
    }
  }
  double x[6];
  for (int j = 5; j >= 0; --j) {
    if (free_dir[j]) {
      x[j] = 0.0;
      continue;
    }
    double rhs = a[j][6];
    for (int c = j + 1; c < 6; ++c) rhs = subtract(rhs, multiply(a[j][c], x[c]));
    x[j] = divide(rhs, a[j][j]);
  }
  double q[4] = {1.0, multiply(0.5, x[0]), multiply(0.5, x[1]), multiply(0.5, x[2])};
  *angle = normalise_quaternion(q);
  quaternion_rotation(q, step->r);
  for (int d = 0; d < 3; ++d) step->t[d] = x[3 + d];
  return true;
}

// The fixed combination of kLanes lane sums (laid out lane-major: lanes[l * terms + j]) into
// lanes[0 .. terms): the CUDA kernel's shuffle and shared-memory tree, replayed.
POINTOPS_HOST_DEVICE inline void combine_lanes(double* lanes, int terms) {
  for (int g = 0; g < kGroups; ++g) {
    double* group = lanes + g * kGroup * terms;
    for (int s = kGroup / 2; s >= 1; s /= 2) {
      for (int t = 0; t < s; ++t) {
        for (int j = 0; j < terms; ++j) group[t * terms + j] = add(group[t * terms + j], group[(t + s) * terms + j]);
      }
    }
  }
  for (int s = kGroups / 2; s >= 1; s /= 2) {
    for (int g = 0; g < s; ++g) {
      for (int j = 0; j < terms; ++j) {
        lanes[g * kGroup * terms + j] = add(lanes[g * kGroup * terms + j], lanes[(g + s) * kGroup * terms + j]);
      }
    }
  }
}

// From a hypothesis's totals: its statistics and next pose. `pose_in` / `pose_out` are its
// (4, 4) rows.
template <bool kPlane, typename pose_t, typename stat_t>
POINTOPS_HOST_DEVICE inline void finish_step(const double* sums, const pose_t* pose_in, bool converged_in,
                                             double tolerance, bool update, pose_t* pose_out,
                                             stat_t* rmse, stat_t* fraction, bool* converged_out) {
  const double inliers = sums[0];
  *rmse = static_cast<stat_t>(inliers > 0.0 ? square_root(divide(sums[1], inliers)) : 0.0);
  *fraction = static_cast<stat_t>(sums[2] > 0.0 ? divide(inliers, sums[2]) : 0.0);
  bool converged = converged_in;
  const Pose pose = load_pose(pose_in);
  Pose next = pose;
  if (update && !converged_in) {
    Pose step;
    double angle = 0.0;
    const bool moved = kPlane ? plane_increment(sums, &step, &angle) : point_increment(sums, &step, &angle);
    if (moved) {
      next = compose(step, pose);
      converged = angle <= tolerance && square_root(squared_norm3(step.t)) <= tolerance;
    } else {
      converged = true;  // no increment: the pose cannot change again
    }
  }
  store_pose(next, pose_out);
  *converged_out = converged;
}

// The checked arguments of icp_step (defined in icp_cpu.cpp).
struct StepInputs {
  at::Tensor sources, targets, normals, poses, indices, converged;  // contiguous
  CloudLengths lengths;
  int64_t batch, n, m, hypotheses;
  double max_d2;
};

StepInputs prepare_step_inputs(const at::Tensor& sources, const std::optional<at::Tensor>& query_lengths,
                               const at::Tensor& targets, const std::optional<at::Tensor>& target_normals,
                               const at::Tensor& poses, const at::Tensor& indices,
                               const at::Tensor& converged, double max_correspondence_distance,
                               double tolerance, bool point_to_plane);

void check_poses(const at::Tensor& poses, const at::Tensor& points, const char* points_name);

}  // namespace icp_detail
}  // namespace pointops
