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
// icp(sources, source_normals?, query_lengths?, targets, target_normals?, lengths?, poses, iterations,
//     max_correspondence_distance, tolerance, point_to_plane, max_normal_angle?, viewpoint?, centered,
//     max_step_angle?, max_step_translation?) -> (poses, rmse, inlier_fraction, converged)
//   sources        (B, N, 3) float; cloud b is rows [0, query_lengths[b]).
//   targets        (B, M, 3) float; cloud b is rows [0, lengths[b]). target_normals (B, M, 3), the
//                  targets' dtype (point_to_plane and max_normal_angle read them).
//   poses          (B, H, 4, 4) float32/float64: the initial pose of each of H hypotheses.
//   Every iteration of every hypothesis in one call. A pass of a hypothesis under its pose:
//   * m = the pose applied to source i in float64 (as transform_points, before its final
//     rounding); its target q is the nearest target of m rounded as transform_points rounds it,
//     searched through one uniform grid per cloud (grid.h, built once per call) and bounded by
//     search_limit (below), which returns the unbounded search's nearest target whenever that
//     one can be an inlier. d2 = (dx*dx + dy*dy) + dz*dz in float64 (common/squared_distance.h).
//     A source counts when it is in its cloud and finite; it is an inlier when it has a target,
//     q is finite and d2 <= max_correspondence_distance^2 (float64; +Inf keeps every match).
//   * rmse = sqrt(sum of inlier d2 / inliers) and inlier_fraction = inliers / counted sources,
//     both 0 when the denominator is 0 (float64 for float64 sources, float32 otherwise), measured
//     by a last pass at the final pose. As Open3D's inlier_rmse and fitness.
//   * Each of the `iterations` passes before it takes a step: the rigid increment D (below) moves
//     the pose to D * pose (float64), and the hypothesis stops (converged) when D rotates by
//     2 sin(angle / 2) <= tolerance and translates by <= tolerance (tolerance 0 stops only on an
//     exact identity step), or when no step can be taken (too few inliers, a non-finite system).
//     A stopped hypothesis skips its remaining steps (its pose cannot change). Poses stay in
//     float64 from step to step and are rounded once to the poses' dtype at the end (the last row
//     becomes 0 0 0 1).
//   * Point to point (Horn's closed form with unit quaternions): the rotation is the unit
//     eigenvector of the largest eigenvalue of Horn's symmetric 4x4 matrix of the inliers'
//     cross-covariance (Jacobi, common/symmetric_eigen.h), turned to w >= 0; t = q_mean - R m_mean.
//     Fewer than 3 inliers: no step.
//   * Point to plane (the linearised least squares of Chen & Medioni / Low): per inlier the
//     residual r = (m - q) . n and row J = (m x n, n); (sum J^T J) x = -sum J^T r solved by
//     Gaussian elimination in fixed order, where a pivot <= 1e-12 of the largest diagonal entry
//     marks an unconstrained direction whose component is set to 0 (a plane leaves its in-plane
//     motions free). x = (w, t): the rotation is the unit quaternion (1, w / 2) / |(1, w / 2)|,
//     the exact rotation by 2 atan(|w| / 2) about w, which needs no sin or cos (those round
//     differently on host and device). A NaN/Inf normal counts as 0. Fewer than 6 inliers: no
//     step.
//   The options (each off by default):
//   * source_normals (B, N, 3), the sources' dtype: read by the two tests below.
//   * max_normal_angle (radians): an inlier's target normal lies within this angle of the
//     source normal under the pose (a . b >= cos(angle) |a| |b|, float64; a zero or non-finite
//     normal never agrees); needs both normals.
//   * viewpoint [x, y, z]: a source takes part only when its normal under the pose faces the
//     viewpoint, n' . (m - viewpoint) < 0; one that does not is counted, never an inlier.
//   * centered: point-to-plane rows are ((m - o) x n, n) about o, the pose's translation, and
//     the system is turned to rows about the inliers' centroid c before the solve (P A P^T,
//     P b with P = [I, -[c - o]x; 0, I]), so the step turns about c; a step's translation, for
//     tolerance and max_step_translation, is the distance c moves (point to point: from the
//     sources' to the targets' inlier centroid).
//   * max_step_angle (radians), max_step_translation: a step beyond either, or with a non-finite
//     value, is not taken and the hypothesis stops (converged), as one with too few inliers.
//   A pose with a NaN/Inf among its 12 read entries is returned as given (all 16 entries), with
//   rmse and inlier_fraction 0 and converged false.
//
// Fixed-order sums. Each hypothesis's sums run over kLanes = 256 lanes: lane l adds the terms of
// sources l, l + 256, l + 512, ... in that order, in float64; then the lanes are combined by a
// fixed tree: within each group of 32 lanes, lane t adds lane t + s for s = 16, 8, 4, 2, 1
// (a warp's shuffle-down reduction), then the 8 group totals likewise for s = 4, 2, 1. On CUDA
// a block of threads sums each hypothesis in exactly this order (icp_cuda.cu) and the CPU kernel
// replays it (combine_lanes), so both produce the same bits, call after call.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "common/clouds.h"
#include "common/portable_math.h"
#include "common/squared_distance.h"
#include "common/symmetric_eigen.h"
#include "geometry/grid.h"

namespace pointops {
namespace icp_detail {

constexpr int kLanes = 256;
constexpr int kGroup = 32;
constexpr int kGroups = kLanes / kGroup;

// Sum slots: 0 inliers, 1 sum of inlier d2, 2 counted sources, then the method's terms.
constexpr int kStats = 3;
constexpr int kPointTerms = kStats + 3 + 3 + 9;  // sum m, sum q, sum m_i q_j
constexpr int kCentroidSlot = kStats + 21 + 6;   // after the upper triangle of J^T J and J^T r:
constexpr int kPlaneTerms = kCentroidSlot + 3;   // the sum of (m - o) over the inliers (add_fit_terms)
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
  const double norm = square_root(
      add(add(add(multiply(q[0], q[0]), multiply(q[1], q[1])), multiply(q[2], q[2])), multiply(q[3], q[3])));
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
  const Pose rotation_only = {
      {step->r[0], step->r[1], step->r[2], step->r[3], step->r[4], step->r[5], step->r[6], step->r[7], step->r[8]},
      {0.0, 0.0, 0.0}};
  apply(rotation_only, mm, rotated);
  for (int d = 0; d < 3; ++d) step->t[d] = subtract(qm[d], rotated[d]);
  return true;
}

// The point-to-plane normal equations (sum J^T J) x = -sum J^T r from their sums, as a 6 x 7
// augmented matrix.
POINTOPS_HOST_DEVICE inline void plane_system(const double* sums, double a[6][7]) {
  int slot = kStats;
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j, ++slot) a[i][j] = a[j][i] = sums[slot];
  }
  for (int i = 0; i < 6; ++i, ++slot) a[i][6] = -sums[slot];
}

// Solves the augmented system by Gaussian elimination in fixed order (a pivot <= kPivotRatio of
// the largest diagonal entry leaves its direction at 0); false when an entry is not finite or the matrix is zero.
POINTOPS_HOST_DEVICE inline bool solve_plane_system(double a[6][7], double x[6]) {
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
  for (int j = 5; j >= 0; --j) {
    if (free_dir[j]) {
      x[j] = 0.0;
      continue;
    }
    double rhs = a[j][6];
    for (int c = j + 1; c < 6; ++c) rhs = subtract(rhs, multiply(a[j][c], x[c]));
    x[j] = divide(rhs, a[j][j]);
  }
  return true;
}

// The rotation of a solution x = (w, t): the unit quaternion (1, w / 2) / |(1, w / 2)|; returns
// 2 sin(angle / 2) of it.
POINTOPS_HOST_DEVICE inline double plane_rotation(const double x[6], double r[9]) {
  double q[4] = {1.0, multiply(0.5, x[0]), multiply(0.5, x[1]), multiply(0.5, x[2])};
  const double angle = normalise_quaternion(q);
  quaternion_rotation(q, r);
  return angle;
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

// The search radius's margin (see search_limit).
constexpr double kSearchMargin = 1.0 / 1048576.0;  // 2^-20

// The icp op's options as its kernels read them (prepare_fit_inputs fills them on the host, so
// both backends read the same values).
struct FitRules {
  int64_t iterations;
  double max_distance;  // the correspondence distance (+inf: any)
  double max_d2;        // its square in float64
  double tolerance;
  bool check_normals;
  double normal_cosine;  // cos(max_normal_angle)
  bool check_facing;
  double viewpoint[3];
  bool centered;
  double max_chord;  // 2 sin(max_step_angle / 2); +inf: no limit
  double max_shift;  // max_step_translation; +inf: no limit
};

POINTOPS_HOST_DEVICE inline double dot3(const double a[3], const double b[3]) {
  return add(add(multiply(a[0], b[0]), multiply(a[1], b[1])), multiply(a[2], b[2]));
}

// R x, every product and sum rounded on its own (apply without the translation).
POINTOPS_HOST_DEVICE inline void rotate(const Pose& p, const double x[3], double out[3]) {
  for (int i = 0; i < 3; ++i) {
    const double* row = p.r + 3 * i;
    out[i] = add(add(multiply(row[0], x[0]), multiply(row[1], x[1])), multiply(row[2], x[2]));
  }
}

// Two normals of any length lie within acos(cosine) of each other: a . b >= cosine |a| |b|;
// false for a zero or non-finite normal.
POINTOPS_HOST_DEVICE inline bool normals_agree(const double a[3], const double b[3], double cosine) {
  if (!finite3(a[0], a[1], a[2]) || !finite3(b[0], b[1], b[2])) return false;
  const double scale = square_root(multiply(squared_norm3(a), squared_norm3(b)));
  return scale > 0.0 && std::isfinite(scale) && dot3(a, b) >= multiply(cosine, scale);
}

template <typename pose_t>
POINTOPS_HOST_DEVICE inline bool pose_finite(const pose_t* m) {
  for (int i = 0; i < 12; ++i) {
    if (!std::isfinite(static_cast<double>(m[i]))) return false;
  }
  return true;
}

// The squared search radius, in the compute type, of the query of a moved source m (float64)
// for a correspondence distance R. A target within R of m in float64 (the inlier test) is
// within this radius of the rounded query in the compute type: rounding the query moves it by
// at most 2^-24 |m|_max per axis and the distance's own roundings add a few 2^-24 relative, far
// below the margin 2^-20 (R + |m|_max) (and 2^-20 relative on the square). So the bounded search
// returns the nearest target exactly when it can be an inlier, as an unbounded search followed
// by the test would, and a wrong pose far from the targets searches only that far.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t search_limit(double max_distance, const double m[3]) {
  if (!(max_distance <= 1.7e308)) return std::numeric_limits<acc_t>::infinity();
  double big = 0.0;
  for (int d = 0; d < 3; ++d) {
    const double a = m[d] < 0.0 ? -m[d] : m[d];
    if (a > big) big = a;
  }
  const double reach = add(max_distance, multiply(kSearchMargin, add(max_distance, big)));
  return static_cast<acc_t>(multiply(multiply(reach, reach), add(1.0, kSearchMargin)));
}

// What a source is in a pass of the icp op (fit_match).
constexpr int32_t kNotCounted = -2;  // not finite: not counted at all
constexpr int32_t kNoMatch = -1;     // counted, not an inlier

// The correspondence of a source under `pose`: its inlier target's index, or kNoMatch /
// kNotCounted. A finite source is counted; it takes part when it faces the viewpoint
// (check_facing: its rotated normal n' has n' . (m - viewpoint) < 0); its match is the nearest
// target within the search limit (the targets' grid; none when `grid` is null), an inlier when
// within max_distance of m in float64 and, with check_normals, when its normal lies within the
// angle of n'.
template <typename src_t, typename tgt_t>
POINTOPS_HOST_DEVICE inline int32_t fit_match(const Pose& pose, const FitRules& rules, const src_t* source,
                                              const src_t* source_normal, const tgt_t* targets,
                                              const tgt_t* target_normals, const neighbors::GridCloud* grid,
                                              const int32_t* cell_start,
                                              const neighbors::SortedPoint<tgt_t>* grid_points) {
  const double s[3] = {static_cast<double>(source[0]), static_cast<double>(source[1]), static_cast<double>(source[2])};
  if (!finite3(s[0], s[1], s[2])) return kNotCounted;
  if (grid == nullptr) return kNoMatch;
  double m[3];
  apply(pose, s, m);
  double turned[3] = {0.0, 0.0, 0.0};
  if (rules.check_normals || rules.check_facing) {
    const double sn[3] = {static_cast<double>(source_normal[0]), static_cast<double>(source_normal[1]),
                          static_cast<double>(source_normal[2])};
    rotate(pose, sn, turned);
  }
  if (rules.check_facing) {
    const double view[3] = {subtract(m[0], rules.viewpoint[0]), subtract(m[1], rules.viewpoint[1]),
                            subtract(m[2], rules.viewpoint[2])};
    if (!(dot3(turned, view) < 0.0)) return kNoMatch;
  }
  // The query as transform_points rounds it (float32 unless the sources are float64), in the
  // targets' compute type.
  const tgt_t qx = static_cast<tgt_t>(static_cast<src_t>(m[0]));
  const tgt_t qy = static_cast<tgt_t>(static_cast<src_t>(m[1]));
  const tgt_t qz = static_cast<tgt_t>(static_cast<src_t>(m[2]));
  if (!neighbors::is_finite3(qx, qy, qz)) return kNoMatch;
  neighbors::FixedKnnList<tgt_t, 1> list;
  list.init(1, search_limit<tgt_t>(rules.max_distance, m));
  neighbors::knn_grid(*grid, cell_start, grid_points, qx, qy, qz, list);
  const int64_t t = list.result_index(1, 0);
  if (t < 0) return kNoMatch;
  const tgt_t* target = targets + 3 * t;
  const double q[3] = {static_cast<double>(target[0]), static_cast<double>(target[1]), static_cast<double>(target[2])};
  if (!finite3(q[0], q[1], q[2])) return kNoMatch;
  const double diff[3] = {subtract(m[0], q[0]), subtract(m[1], q[1]), subtract(m[2], q[2])};
  if (!(squared_norm3(diff) <= rules.max_d2)) return kNoMatch;
  if (rules.check_normals) {
    const tgt_t* tn = target_normals + 3 * t;
    const double nq[3] = {static_cast<double>(tn[0]), static_cast<double>(tn[1]), static_cast<double>(tn[2])};
    if (!normals_agree(turned, nq, rules.normal_cosine)) return kNoMatch;
  }
  return static_cast<int32_t>(t);
}

// Adds a source's terms to the lane sums acc given its fit_match result (kNotCounted: nothing;
// kNoMatch: counted only): its d2, then Horn's sums, or the point-to-plane rows
// ((m - o) x n, n) about `origin` o (centered; else about 0) and the sum of m - o.
template <bool kPlane, typename src_t, typename tgt_t>
POINTOPS_HOST_DEVICE inline void add_fit_terms(const Pose& pose, const double origin[3], bool centered,
                                               const src_t* source, int32_t match, const tgt_t* targets,
                                               const tgt_t* target_normals, double* acc) {
  if (match == kNotCounted) return;
  acc[2] = add(acc[2], 1.0);
  if (match < 0) return;
  const double s[3] = {static_cast<double>(source[0]), static_cast<double>(source[1]), static_cast<double>(source[2])};
  const tgt_t* target = targets + 3 * static_cast<int64_t>(match);
  const double q[3] = {static_cast<double>(target[0]), static_cast<double>(target[1]), static_cast<double>(target[2])};
  double m[3];
  apply(pose, s, m);
  const double diff[3] = {subtract(m[0], q[0]), subtract(m[1], q[1]), subtract(m[2], q[2])};
  const double d2 = squared_norm3(diff);
  acc[0] = add(acc[0], 1.0);
  acc[1] = add(acc[1], d2);
  if (kPlane) {
    const tgt_t* normal = target_normals + 3 * static_cast<int64_t>(match);
    double n[3] = {static_cast<double>(normal[0]), static_cast<double>(normal[1]), static_cast<double>(normal[2])};
    if (!finite3(n[0], n[1], n[2])) n[0] = n[1] = n[2] = 0.0;
    double mc[3] = {m[0], m[1], m[2]};
    if (centered) {
      for (int d = 0; d < 3; ++d) mc[d] = subtract(m[d], origin[d]);
    }
    const double r = add(add(multiply(diff[0], n[0]), multiply(diff[1], n[1])), multiply(diff[2], n[2]));
    const double j[6] = {subtract(multiply(mc[1], n[2]), multiply(mc[2], n[1])),
                         subtract(multiply(mc[2], n[0]), multiply(mc[0], n[2])),
                         subtract(multiply(mc[0], n[1]), multiply(mc[1], n[0])),
                         n[0],
                         n[1],
                         n[2]};
    int slot = kStats;
    for (int a = 0; a < 6; ++a) {
      for (int b = a; b < 6; ++b, ++slot) acc[slot] = add(acc[slot], multiply(j[a], j[b]));
    }
    for (int a = 0; a < 6; ++a, ++slot) acc[slot] = add(acc[slot], multiply(j[a], r));
    for (int d = 0; d < 3; ++d, ++slot) acc[slot] = add(acc[slot], mc[d]);
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

// The point-to-plane system of rows J = (v x n, n) turned into that of rows about c,
// ((v - c) x n, n) = P J with P = [I, -[c]x; 0, I] ([c]x y = c x y): A <- P A P^T, b <- P b,
// sums in a fixed order (A stays symmetric: its upper triangle is mirrored).
POINTOPS_HOST_DEVICE inline void center_plane_system(double a[6][7], const double c[3]) {
  double p[6][6];
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) p[i][j] = i == j ? 1.0 : 0.0;
  }
  p[0][4] = c[2];
  p[0][5] = -c[1];
  p[1][3] = -c[2];
  p[1][5] = c[0];
  p[2][3] = c[1];
  p[2][4] = -c[0];
  double pa[6][7];
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 7; ++j) {
      double sum = 0.0;
      for (int k = 0; k < 6; ++k) sum = add(sum, multiply(p[i][k], a[k][j]));
      pa[i][j] = sum;
    }
  }
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) {
      double sum = 0.0;
      for (int k = 0; k < 6; ++k) sum = add(sum, multiply(pa[i][k], p[j][k]));
      a[i][j] = a[j][i] = sum;
    }
    a[i][6] = pa[i][6];
  }
}

// One step of a moving hypothesis from its pass's sums (origin: that of the rows). Moves *pose
// and returns true when the hypothesis stops: too few inliers, a system with a non-finite sum,
// a step beyond max_step_angle / max_step_translation or not finite (the pose stays), or a step
// within tolerance (taken). A step's translation is how far it moves the inliers' centroid when
// centered, else its t.
template <bool kPlane>
POINTOPS_HOST_DEVICE inline bool fit_update(const double* sums, const double origin[3], const FitRules& rules,
                                            Pose* pose) {
  Pose step;
  double angle = 0.0;
  double shift = 0.0;
  if (kPlane) {
    if (!(sums[0] >= kMinPlaneInliers)) return true;
    double a[6][7];
    plane_system(sums, a);
    double c[3] = {0.0, 0.0, 0.0};
    if (rules.centered) {
      for (int d = 0; d < 3; ++d) c[d] = divide(sums[kCentroidSlot + d], sums[0]);
      center_plane_system(a, c);
    }
    double x[6];
    if (!solve_plane_system(a, x)) return true;
    angle = plane_rotation(x, step.r);
    if (rules.centered) {
      // the rotation turns about the centroid o + c, which then moves by x[3..5]
      const double centroid[3] = {add(origin[0], c[0]), add(origin[1], c[1]), add(origin[2], c[2])};
      double turned[3];
      rotate(step, centroid, turned);
      for (int d = 0; d < 3; ++d) step.t[d] = subtract(add(centroid[d], x[3 + d]), turned[d]);
      const double move[3] = {x[3], x[4], x[5]};
      shift = square_root(squared_norm3(move));
    } else {
      for (int d = 0; d < 3; ++d) step.t[d] = x[3 + d];
      shift = square_root(squared_norm3(step.t));
    }
  } else {
    if (!point_increment(sums, &step, &angle)) return true;
    if (rules.centered) {
      const double n = sums[0];
      double move[3];
      for (int d = 0; d < 3; ++d) move[d] = subtract(divide(sums[kStats + 3 + d], n), divide(sums[kStats + d], n));
      shift = square_root(squared_norm3(move));
    } else {
      shift = square_root(squared_norm3(step.t));
    }
  }
  if (!std::isfinite(angle) || !std::isfinite(shift) || !finite3(step.t[0], step.t[1], step.t[2])) return true;
  if (!(angle <= rules.max_chord) || !(shift <= rules.max_shift)) return true;
  *pose = compose(step, *pose);
  return angle <= rules.tolerance && shift <= rules.tolerance;
}

// rmse and inlier fraction from a pass's sums.
template <typename stat_t>
POINTOPS_HOST_DEVICE inline void fit_statistics(const double* sums, stat_t* rmse, stat_t* fraction) {
  const double inliers = sums[0];
  *rmse = static_cast<stat_t>(inliers > 0.0 ? square_root(divide(sums[1], inliers)) : 0.0);
  *fraction = static_cast<stat_t>(sums[2] > 0.0 ? divide(inliers, sums[2]) : 0.0);
}

// The checked arguments of the icp op (defined in icp_cpu.cpp): contiguous float32 / float64
// tensors (float16 / bfloat16 widened), undefined normals where none are needed.
struct FitInputs {
  at::Tensor sources, source_normals, targets, target_normals, poses;
  CloudLengths query_lengths, lengths;
  int64_t batch, n, m, hypotheses;
  bool plane;
  FitRules rules;
};

FitInputs prepare_fit_inputs(const at::Tensor& sources, const std::optional<at::Tensor>& source_normals,
                             const std::optional<at::Tensor>& query_lengths, const at::Tensor& targets,
                             const std::optional<at::Tensor>& target_normals, const std::optional<at::Tensor>& lengths,
                             const at::Tensor& poses, int64_t iterations, double max_correspondence_distance,
                             double tolerance, bool point_to_plane, std::optional<double> max_normal_angle,
                             std::optional<at::ArrayRef<double>> viewpoint, bool centered,
                             std::optional<double> max_step_angle, std::optional<double> max_step_translation);

void check_poses(const at::Tensor& poses, const at::Tensor& points, const char* points_name);

// The outputs of icp on both backends, left for the kernels to write in full:
// (poses (B, H, 4, 4) like the checked poses, rmse and fraction (B, H) float64 for float64
// sources and float32 otherwise, converged (B, H) bool).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> empty_pose_outputs(const at::Tensor& sources,
                                                                                     const at::Tensor& poses,
                                                                                     int64_t batch,
                                                                                     int64_t hypotheses) {
  const auto stat_type = sources.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor rmse = at::empty({batch, hypotheses}, sources.options().dtype(stat_type));
  return {at::empty_like(poses), rmse, at::empty_like(rmse),
          at::empty({batch, hypotheses}, sources.options().dtype(at::kBool))};
}

}  // namespace icp_detail
}  // namespace pointops
