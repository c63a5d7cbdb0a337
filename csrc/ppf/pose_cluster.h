// Pose clustering by spatial hashing: the contract shared by the CPU and CUDA kernels.
//
// pose_cluster(quaternions, translations, votes, lengths?, distance_threshold, angle_threshold,
//              suppression_distance, k, suppression_angle) -> (quaternions, translations, scores,
//              members, centers)
//   quaternions  (B, M, 4) floating (w, x, y, z), normalized here; translations (B, M, 3)
//                floating; votes (B, M) int64: M candidate poses per batch entry (computed in
//                float32). A pose takes part when it lies in [0, lengths[b]), has votes > 0, a
//                finite nonzero quaternion, a finite translation and a cell within 2^16 cells
//                of the origin on every axis.
//   lengths      (B,) int64 or None.
//   distance_threshold (B,) floating: the translation radius of a cluster and the cell size of
//                the spatial hash (a batch entry with a threshold that is not finite and > 0 has
//                no poses).
//   angle_threshold: rotation radius in radians, in (0, pi]: poses i and j are within it when
//                |q_i . q_j| >= cos(angle_threshold / 2), so q and -q are the same rotation.
//   suppression_distance (B,) floating: a chosen cluster removes every pose whose translation
//                lies within this distance of its centre's (several instances of one model come
//                out when they are farther apart than this) ...
//   k            clusters returned per batch entry.
//   suppression_angle ... and whose rotation lies within this angle of the centre's, in (0, pi]
//                radians (|q_i . q_c| >= cos(suppression_angle / 2)); pi (the default) removes
//                every rotation. A smaller angle keeps a differently turned pose at the same
//                place for a later round, where a wrong rotation won the votes of an instance.
// Clusters (the spatial hash clustering of Avrutin's GPU PPF registration): pose i's cell is
// floor(t_i / distance_threshold) per axis; its cluster is the poses j of the 27 cells around it
// with |t_i - t_j|^2 <= distance_threshold^2 (squared distances (dx dx + dy dy) + dz dz, float32)
// and the rotation test; its score is the sum of their votes (exact, int64). Selection: the
// best-scored remaining pose (ties to the lowest index) becomes a centre, then it and every pose
// within suppression_distance (and suppression_angle) of it leave; k times, or until no pose
// remains. Each chosen cluster is averaged over its members, weighted by votes, in a fixed order
// (cells by dx, dy, dz from -1 to 1, then by pose index) in float64: the translation is the
// weighted mean, the quaternion the normalized weighted sum of the members' quaternions each
// turned into the centre's hemisphere (w >= 0 on output).
// Outputs (B, k): quaternions (.., 4) and translations (.., 3) float32 (NaN where there is no
// cluster), scores int64 (0), members int64 (0), centers int64 (the centre pose's index, -1).
// Identical on CPU and CUDA, bit for bit.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <tuple>

#include "common/hash_array.h"
#include "ppf/ppf_math.h"

namespace pointops {
namespace ppf {

using ClusterResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// A cell coordinate takes 17 bits (offset 2^16); keys are ((b * 2^17 + x) * 2^17 + y) * 2^17 + z,
// so B <= 4095 keeps every key and the invalid key B * 2^51 below 2^63.
constexpr int kCellBits = 17;
constexpr int64_t kCellOffset = int64_t{1} << (kCellBits - 1);
constexpr int64_t kCellSpan = int64_t{1} << kCellBits;
constexpr int64_t kMaxClusterBatch = 4095;

struct ClusterArgs {
  int64_t batch, poses, k;
  float cos_half;      // float32(cos(angle_threshold / 2)), from double on the host
  float cos_suppress;  // float32(cos(suppression_angle / 2)); -1 for pi (every rotation)
};

ClusterArgs check_cluster_args(const at::Tensor& quaternions, const at::Tensor& translations, const at::Tensor& votes,
                               const std::optional<at::Tensor>& lengths, const at::Tensor& distance_threshold,
                               double angle_threshold, const at::Tensor& suppression_distance, int64_t k,
                               double suppression_angle);

ClusterResult empty_cluster_outputs(const at::Tensor& quaternions, const ClusterArgs& args);

// A pose as the kernels read it: unit quaternion, translation, votes and its cell; `valid` says
// whether it takes part.
struct Pose {
  float q[4];
  Vec3 t;
  int64_t votes;
  int64_t cell[3];
  bool valid;
};

// Pose i of a batch entry (rows q: 4 floats, t: 3 floats), the entry's threshold `cell_size`.
POINTOPS_HOST_DEVICE inline Pose load_pose(const float* q, const float* t, int64_t votes, bool inside,
                                           float cell_size) {
  Pose p;
  p.valid = false;
  p.votes = votes;
  p.t = {t[0], t[1], t[2]};
  for (int c = 0; c < 4; ++c) p.q[c] = q[c];
  for (int c = 0; c < 3; ++c) p.cell[c] = 0;
  if (!inside || votes <= 0 || !(cell_size > 0.0f) || !finite(cell_size) || !finite3(p.t)) return p;
  for (int c = 0; c < 4; ++c) {
    if (!finite(q[c])) return p;
  }
  const float norm = square_root(
      add(add(add(multiply(q[0], q[0]), multiply(q[1], q[1])), multiply(q[2], q[2])), multiply(q[3], q[3])));
  if (!(norm > 0.0f) || !finite(norm)) return p;
  for (int c = 0; c < 4; ++c) p.q[c] = divide(q[c], norm);
  const float xyz[3] = {p.t.x, p.t.y, p.t.z};
  for (int c = 0; c < 3; ++c) {
    const float f = floor_value(divide(xyz[c], cell_size));
    if (!(f >= static_cast<float>(-kCellOffset) && f < static_cast<float>(kCellOffset))) return p;
    p.cell[c] = static_cast<int64_t>(f);
  }
  p.valid = true;
  return p;
}

POINTOPS_HOST_DEVICE inline int64_t cell_key(int64_t b, int64_t x, int64_t y, int64_t z) {
  return ((b * kCellSpan + (x + kCellOffset)) * kCellSpan + (y + kCellOffset)) * kCellSpan + (z + kCellOffset);
}

POINTOPS_HOST_DEVICE inline float quaternion_dot(const float* a, const float* b) {
  return add(add(add(multiply(a[0], b[0]), multiply(a[1], b[1])), multiply(a[2], b[2])), multiply(a[3], b[3]));
}

// Whether pose j belongs to the cluster centred on pose i (both valid, j in a neighbouring cell).
POINTOPS_HOST_DEVICE inline bool is_member(const Pose& i, const Pose& j, float max_square, float cos_half) {
  const Vec3 d = sub3(j.t, i.t);
  if (!(dot3(d, d) <= max_square)) return false;
  const float c = quaternion_dot(i.q, j.q);
  return (c < 0.0f ? -c : c) >= cos_half;
}

// Calls visit(j) for every member j of pose i's cluster, cells by dx, dy, dz in -1..1, then by
// pose index. `Table` finds runs: find(key) -> run or -1, start(run), count(run), at(position)
// -> pose index within the batch entry (the flat index minus b * M); `load(j)` gives pose j.
// Calls visit(start, count) for the run of every occupied cell around pose i's own, by dx, dy, dz
// in -1..1: its poses are table.at(start) .. table.at(start + count - 1), by pose index.
template <typename Table, typename Visit>
POINTOPS_HOST_DEVICE inline void for_each_cell_run(const Pose& centre, int64_t b, const Table& table, Visit&& visit) {
  for (int dx = -1; dx <= 1; ++dx) {
    for (int dy = -1; dy <= 1; ++dy) {
      for (int dz = -1; dz <= 1; ++dz) {
        const int64_t x = centre.cell[0] + dx;
        const int64_t y = centre.cell[1] + dy;
        const int64_t z = centre.cell[2] + dz;
        if (x < -kCellOffset || x >= kCellOffset || y < -kCellOffset || y >= kCellOffset || z < -kCellOffset ||
            z >= kCellOffset) {
          continue;
        }
        const int64_t run = table.find(cell_key(b, x, y, z));
        if (run >= 0) visit(table.start(run), table.count(run));
      }
    }
  }
}

// Calls visit(j) for every member j of pose i's cluster, cells by dx, dy, dz in -1..1, then by
// pose index. `Table` finds runs: find(key) -> run or -1, start(run), count(run), at(position)
// -> pose index within the batch entry (the flat index minus b * M); `load(j)` gives pose j.
template <typename Table, typename Load, typename Visit>
POINTOPS_HOST_DEVICE inline void for_each_member(const Pose& centre, int64_t b, float max_square, float cos_half,
                                                 const Table& table, const Load& load, Visit&& visit) {
  for_each_cell_run(centre, b, table, [&](int64_t start, int64_t count) {
    for (int64_t e = 0; e < count; ++e) {
      const int64_t j = table.at(start + e);
      const Pose other = load(j);
      if (is_member(centre, other, max_square, cos_half)) visit(j, other);
    }
  });
}

// Whether the chosen centre removes pose i (loaded; `valid` or not) in the selection rounds.
POINTOPS_HOST_DEVICE inline bool is_suppressed(const Pose& centre, const Pose& i, float suppress_square,
                                               float cos_suppress) {
  const Vec3 d = sub3(i.t, centre.t);
  if (!(dot3(d, d) <= suppress_square)) return false;
  const float c = quaternion_dot(centre.q, i.q);
  return (c < 0.0f ? -c : c) >= cos_suppress;
}

// The vote-weighted average of a cluster, accumulated in float64 in visiting order.
struct ClusterSum {
  double w, q[4], t[3];
  int64_t score, members;

  POINTOPS_HOST_DEVICE void reset() {
    w = 0.0;
    for (int c = 0; c < 4; ++c) q[c] = 0.0;
    for (int c = 0; c < 3; ++c) t[c] = 0.0;
    score = 0;
    members = 0;
  }
  POINTOPS_HOST_DEVICE void add_member(const Pose& centre, const Pose& p) {
    const double weight = static_cast<double>(p.votes);
    const double signed_weight = quaternion_dot(centre.q, p.q) < 0.0f ? -weight : weight;
    for (int c = 0; c < 4; ++c) q[c] = add(q[c], multiply(signed_weight, static_cast<double>(p.q[c])));
    const float xyz[3] = {p.t.x, p.t.y, p.t.z};
    for (int c = 0; c < 3; ++c) t[c] = add(t[c], multiply(weight, static_cast<double>(xyz[c])));
    w = add(w, weight);
    score += p.votes;
    members += 1;
  }
  // Writes the averaged quaternion (w >= 0) and translation.
  POINTOPS_HOST_DEVICE void write(float* quaternion, float* translation) const {
    const double norm = square_root(
        add(add(add(multiply(q[0], q[0]), multiply(q[1], q[1])), multiply(q[2], q[2])), multiply(q[3], q[3])));
    const double sign = q[0] < 0.0 ? -1.0 : 1.0;
    for (int c = 0; c < 4; ++c) quaternion[c] = static_cast<float>(divide(multiply(q[c], sign), norm));
    for (int c = 0; c < 3; ++c) translation[c] = static_cast<float>(divide(t[c], w));
  }
};

}  // namespace ppf
}  // namespace pointops
