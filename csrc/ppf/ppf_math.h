// Point pair feature arithmetic shared by every PPF kernel, CPU and CUDA alike.
//
// Every value that decides a key, a vote or a pose is computed here with float32 operations that
// round one at a time (never fused, no library transcendental), so the CPU kernels, the CUDA
// kernels and the pure-PyTorch oracle (pointops/reference/ppf.py, which repeats each step as one
// float32 torch op) agree bit for bit:
//   * products, sums, quotients and square roots are IEEE-rounded single operations;
//   * atan2 is a fixed polynomial (ppf_atan2 below) instead of the C library's or CUDA's atan2f,
//     which differ in the last bits;
//   * the cosines and sines of the alpha bin centres are computed once on the host (AlphaTable).
//
// The feature of an oriented pair (m1, n1), (m2, n2), d = m2 - m1 (Drost et al., CVPR 2010):
//   F = (|d|, angle(n1, d), angle(n2, d), angle(n1, n2)),  angle(a, b) = atan2(|a x b|, a . b)
// (atan2 of the cross product's norm and the dot product: accurate near 0 and pi, where acos is
// not). Bins: distance floor(|d| / distance_step) in [0, distance_bins); each angle
// floor(angle / angle_step), angle_step = 2 pi / angle_bins, clamped to [0, feature_bins),
// feature_bins = ceil(angle_bins / 2) (the angles lie in [0, pi]).
//
// Key packing (mixed radix, so two different bin tuples never share a key):
//   key = ((d_bin * feature_bins + a1_bin) * feature_bins + a2_bin) * feature_bins + a3_bin
// in [0, distance_bins * feature_bins^3).
//
// Alpha (the rotation about the normal that Drost's voting recovers): the reference point's frame
// has rows (n1, b1, b2), an orthonormal basis built from n1 alone (build_basis: Duff et al.'s
// branchless construction); alpha(pair) = atan2(b2 . d, b1 . d), the angle of d about n1.
// A scene pair matched with a model pair votes for the rotation alpha = alpha_scene -
// alpha_model, wrapped to [0, 2 pi) and binned as floor(alpha * alpha_scale), alpha_scale =
// float32(angle_bins / 2 pi); the pose of bin k uses the bin centre (k + 0.5) * 2 pi / angle_bins:
//   R = R_s^T Rx(alpha) R_m,  t = s_r - R m_r       (R_s, R_m: the reference frames' rows)
// which maps the model reference point onto the scene reference point, the model normal onto the
// scene normal, and the model partner's direction about the normal onto the scene partner's.
#pragma once

#include <cstdint>
#include <limits>

#include "common/portable_math.h"

namespace pointops {
namespace ppf {

// Most alpha bins a kernel accepts: the bin-centre table travels by value in kernel arguments.
constexpr int kMaxAngleBins = 360;

// Products, sums, quotients and square roots: portable_math.h's single-rounding steps.

POINTOPS_HOST_DEVICE inline float quiet_nan() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7fc00000);
#else
  return std::numeric_limits<float>::quiet_NaN();
#endif
}

// True for finite values (NaN and +-Inf give NaN when subtracted from themselves).
POINTOPS_HOST_DEVICE inline bool finite(float v) { return subtract(v, v) == 0.0f; }

struct Vec3 {
  float x, y, z;
};

POINTOPS_HOST_DEVICE inline Vec3 sub3(const Vec3& a, const Vec3& b) {
  return {subtract(a.x, b.x), subtract(a.y, b.y), subtract(a.z, b.z)};
}

// (a.x b.x + a.y b.y) + a.z b.z, each product and sum rounded: the order squared distances use.
POINTOPS_HOST_DEVICE inline float dot3(const Vec3& a, const Vec3& b) {
  return add(add(multiply(a.x, b.x), multiply(a.y, b.y)), multiply(a.z, b.z));
}

POINTOPS_HOST_DEVICE inline Vec3 cross3(const Vec3& a, const Vec3& b) {
  return {subtract(multiply(a.y, b.z), multiply(a.z, b.y)), subtract(multiply(a.z, b.x), multiply(a.x, b.z)),
          subtract(multiply(a.x, b.y), multiply(a.y, b.x))};
}

POINTOPS_HOST_DEVICE inline bool finite3(const Vec3& a) { return finite(a.x) && finite(a.y) && finite(a.z); }

// ---- atan2 -------------------------------------------------------------------------------------

// atan(t) = t * P(t^2) on [0, 1]: a degree-8 polynomial in t^2 fitted to relative error 1.4e-8
// (iteratively reweighted least squares, then rounded to float32); evaluated in float32 by Horner
// steps that round alone, its largest error over [0, 1] is 1.1e-7 rad. Hex literals, so the C++
// compilers and Python (float.fromhex) read the same float32 values.
constexpr int kAtanDegree = 8;

POINTOPS_HOST_DEVICE inline float atan_coefficient(int k) {
  switch (k) {
    case 0:
      return 0x1.0p+0f;
    case 1:
      return -0x1.5554b4p-2f;
    case 2:
      return 0x1.997532p-3f;
    case 3:
      return -0x1.22f66ap-3f;
    case 4:
      return 0x1.b46b62p-4f;
    case 5:
      return -0x1.3496a0p-4f;
    case 6:
      return 0x1.609a00p-5f;
    case 7:
      return -0x1.0acfb2p-6f;
    default:
      return 0x1.7ca3bep-9f;
  }
}

constexpr float kPi = 0x1.921fb6p+1f;      // float32(pi)
constexpr float kHalfPi = 0x1.921fb6p+0f;  // float32(pi / 2)
constexpr float kTwoPi = 0x1.921fb6p+2f;   // float32(2 pi)

// atan2(y, x) in [-pi, pi] for finite x, y; 0 for (0, 0). The signs of zero are ignored.
POINTOPS_HOST_DEVICE inline float ppf_atan2(float y, float x) {
  const float ax = x < 0.0f ? -x : x;
  const float ay = y < 0.0f ? -y : y;
  const float big = ay > ax ? ay : ax;
  const float small = ay > ax ? ax : ay;
  if (big == 0.0f) return 0.0f;
  const float t = divide(small, big);
  const float s = multiply(t, t);
  float p = atan_coefficient(kAtanDegree);
  for (int k = kAtanDegree - 1; k >= 0; --k) p = add(multiply(p, s), atan_coefficient(k));
  float r = multiply(t, p);
  if (ay > ax) r = subtract(kHalfPi, r);
  if (x < 0.0f) r = subtract(kPi, r);
  if (y < 0.0f) r = -r;
  return r;
}

// The angle between a and b in [0, pi] (neither needs unit length; 0 when one is zero).
POINTOPS_HOST_DEVICE inline float angle_between(const Vec3& a, const Vec3& b) {
  const Vec3 c = cross3(a, b);
  return ppf_atan2(square_root(dot3(c, c)), dot3(a, b));
}

// ---- oriented points and frames ------------------------------------------------------------------

// n / |n|; false when n has a non-finite entry or zero length.
POINTOPS_HOST_DEVICE inline bool unit_normal(const Vec3& n, Vec3* out) {
  if (!finite3(n)) return false;
  const float length = square_root(dot3(n, n));
  if (!(length > 0.0f) || !finite(length)) return false;
  *out = {divide(n.x, length), divide(n.y, length), divide(n.z, length)};
  return true;
}

// The oriented point `index` of a float32 (N, 3) cloud with `length` valid rows; false when it
// does not exist or is not finite with a nonzero normal.
POINTOPS_HOST_DEVICE inline bool load_oriented(const float* points, const float* normals, int64_t length, int64_t index,
                                               Vec3* p, Vec3* n) {
  if (index < 0 || index >= length) return false;
  const float* q = points + index * 3;
  const float* m = normals + index * 3;
  *p = {q[0], q[1], q[2]};
  return finite3(*p) && unit_normal({m[0], m[1], m[2]}, n);
}

// An orthonormal basis (b1, b2) completing a unit normal n to a right-handed frame with rows
// (n, b1, b2): Duff et al., "Building an Orthonormal Basis, Revisited" (JCGT 2017). Branch-free
// but for the sign, and exact in the sense that every step rounds alone, so any backend builds
// the same frame from the same normal. The frame depends on n only, which is all voting needs.
POINTOPS_HOST_DEVICE inline void build_basis(const Vec3& n, Vec3* b1, Vec3* b2) {
  const float sign = n.z >= 0.0f ? 1.0f : -1.0f;
  const float a = divide(-1.0f, add(sign, n.z));
  const float b = multiply(multiply(n.x, n.y), a);
  *b1 = {add(1.0f, multiply(multiply(multiply(sign, n.x), n.x), a)), multiply(sign, b), multiply(-sign, n.x)};
  *b2 = {b, add(sign, multiply(multiply(n.y, n.y), a)), -n.y};
}

// A reference point: position, unit normal and the basis completing its frame.
struct Frame {
  Vec3 p, n, b1, b2;
};

POINTOPS_HOST_DEVICE inline Frame make_frame(const Vec3& p, const Vec3& unit_n) {
  Frame f;
  f.p = p;
  f.n = unit_n;
  build_basis(unit_n, &f.b1, &f.b2);
  return f;
}

// The angle of d about the frame's normal: atan2(b2 . d, b1 . d), in [-pi, pi].
POINTOPS_HOST_DEVICE inline float pair_alpha(const Frame& f, const Vec3& d) {
  return ppf_atan2(dot3(f.b2, d), dot3(f.b1, d));
}

// ---- binning -----------------------------------------------------------------------------------

struct Binning {
  float distance_step;  // > 0
  int32_t distance_bins;
  int32_t angle_bins;    // alpha bins over [0, 2 pi); also sets the feature angle step
  int32_t feature_bins;  // (angle_bins + 1) / 2: bins of a feature angle over [0, pi]
  float angle_step;      // float32(2 pi / angle_bins), computed on the host in double
  float alpha_scale;     // float32(angle_bins / (2 pi)): alpha bins by a product (one per vote)

  POINTOPS_HOST_DEVICE int64_t key_count() const {
    return static_cast<int64_t>(distance_bins) * feature_bins * feature_bins * feature_bins;
  }
};

// The feature of a pair whose first point's frame is f1 and second point has unit normal n2,
// d = p2 - p1: distance and three angles, as in the header comment.
struct PairFeature {
  float distance, a1, a2, a3;
};

POINTOPS_HOST_DEVICE inline PairFeature pair_feature(const Frame& f1, const Vec3& n2, const Vec3& d) {
  PairFeature out;
  out.distance = square_root(dot3(d, d));
  out.a1 = angle_between(f1.n, d);
  out.a2 = angle_between(n2, d);
  out.a3 = angle_between(f1.n, n2);
  return out;
}

// One feature dimension: its bin and, for neighbour-bin voting, the adjacent bin on the side
// the value is nearer to (-1 when that bin does not exist).
struct DimBins {
  int32_t bin;
  int32_t neighbour;
};

// value >= 0 (and finite); bins >= 1. `clamp_top`: values at or past the last bin's end go to the
// last bin (the angles, where pi itself lands there); otherwise such values have bin = -1.
POINTOPS_HOST_DEVICE inline DimBins dim_bins(float value, float step, int32_t bins, bool clamp_top) {
  const float scaled = divide(value, step);
  const float lower = floor_value(scaled);
  DimBins out;
  if (!(lower < static_cast<float>(bins))) {
    if (!clamp_top) return {-1, -1};
    out.bin = bins - 1;
  } else {
    out.bin = static_cast<int32_t>(lower);
  }
  // scaled - floor(scaled) is exact (Sterbenz), so the side is decided the same everywhere.
  const float fraction = subtract(scaled, lower);
  const float side = fraction < 0.5f ? subtract(lower, 1.0f) : add(lower, 1.0f);
  out.neighbour = (side >= 0.0f && side < static_cast<float>(bins) && static_cast<int32_t>(side) != out.bin)
                      ? static_cast<int32_t>(side)
                      : -1;
  return out;
}

struct FeatureBins {
  DimBins dim[4];  // distance, a1, a2, a3
  bool valid;      // false when the distance bin is past distance_bins
};

POINTOPS_HOST_DEVICE inline FeatureBins feature_bins(const PairFeature& f, const Binning& b) {
  FeatureBins out;
  out.dim[0] = dim_bins(f.distance, b.distance_step, b.distance_bins, false);
  out.dim[1] = dim_bins(f.a1, b.angle_step, b.feature_bins, true);
  out.dim[2] = dim_bins(f.a2, b.angle_step, b.feature_bins, true);
  out.dim[3] = dim_bins(f.a3, b.angle_step, b.feature_bins, true);
  out.valid = out.dim[0].bin >= 0;
  return out;
}

POINTOPS_HOST_DEVICE inline int64_t pack_key(int32_t d, int32_t a1, int32_t a2, int32_t a3, int32_t feature_bins) {
  const int64_t fb = feature_bins;
  return ((static_cast<int64_t>(d) * fb + a1) * fb + a2) * fb + a3;
}

// The exact bin's key.
POINTOPS_HOST_DEVICE inline int64_t exact_key(const FeatureBins& f, int32_t feature_bins) {
  return pack_key(f.dim[0].bin, f.dim[1].bin, f.dim[2].bin, f.dim[3].bin, feature_bins);
}

// Neighbour-bin voting: lookup `mask` in [0, 16) takes, in dimension q, the neighbour bin where
// bit q is set and the exact bin where it is clear (mask 0 is the exact key). Returns -1 when a
// requested neighbour does not exist, so no key is looked up twice.
POINTOPS_HOST_DEVICE inline int64_t spread_key(const FeatureBins& f, int mask, int32_t feature_bins) {
  int32_t bins[4];
  for (int q = 0; q < 4; ++q) {
    if (mask & (1 << q)) {
      if (f.dim[q].neighbour < 0) return -1;
      bins[q] = f.dim[q].neighbour;
    } else {
      bins[q] = f.dim[q].bin;
    }
  }
  return pack_key(bins[0], bins[1], bins[2], bins[3], feature_bins);
}

// The alpha bin of a vote: alpha_scene - alpha_model wrapped to [0, 2 pi), times alpha_scale,
// floored (a product rather than a quotient: this runs once per vote).
POINTOPS_HOST_DEVICE inline int32_t alpha_bin(float alpha_scene, float alpha_model, float alpha_scale,
                                              int32_t angle_bins) {
  float alpha = subtract(alpha_scene, alpha_model);
  if (alpha < 0.0f) alpha = add(alpha, kTwoPi);
  int32_t bin = static_cast<int32_t>(floor_value(multiply(alpha, alpha_scale)));
  if (bin >= angle_bins) bin -= angle_bins;  // alpha rounded up to 2 pi: the same as 0
  return bin;
}

// ---- poses -------------------------------------------------------------------------------------

// cos and sin of the alpha bin centres (k + 0.5) * 2 pi / angle_bins, computed on the host in
// double and rounded to float32 (make_alpha_table in ppf_args.h); passed by value to kernels.
struct AlphaTable {
  float cos[kMaxAngleBins];
  float sin[kMaxAngleBins];
};

// The rigid transform of a vote: R = R_s^T Rx(alpha) R_m, t = s - R m (header comment), as a
// unit quaternion (w, x, y, z) with w >= 0 and a translation.
POINTOPS_HOST_DEVICE inline void vote_pose(const Frame& scene, const Frame& model, float cos_a, float sin_a,
                                           float* quaternion, float* translation) {
  // Rows of Rx(alpha) R_m: n_m, c b1_m - s b2_m, s b1_m + c b2_m.
  const Vec3 row0 = model.n;
  const Vec3 row1 = {subtract(multiply(cos_a, model.b1.x), multiply(sin_a, model.b2.x)),
                     subtract(multiply(cos_a, model.b1.y), multiply(sin_a, model.b2.y)),
                     subtract(multiply(cos_a, model.b1.z), multiply(sin_a, model.b2.z))};
  const Vec3 row2 = {add(multiply(sin_a, model.b1.x), multiply(cos_a, model.b2.x)),
                     add(multiply(sin_a, model.b1.y), multiply(cos_a, model.b2.y)),
                     add(multiply(sin_a, model.b1.z), multiply(cos_a, model.b2.z))};
  const float sn[3] = {scene.n.x, scene.n.y, scene.n.z};
  const float s1[3] = {scene.b1.x, scene.b1.y, scene.b1.z};
  const float s2[3] = {scene.b2.x, scene.b2.y, scene.b2.z};
  const float r0[3] = {row0.x, row0.y, row0.z};
  const float r1[3] = {row1.x, row1.y, row1.z};
  const float r2[3] = {row2.x, row2.y, row2.z};
  float r[3][3];
  for (int a = 0; a < 3; ++a) {
    for (int c = 0; c < 3; ++c) {
      r[a][c] = add(add(multiply(sn[a], r0[c]), multiply(s1[a], r1[c])), multiply(s2[a], r2[c]));
    }
  }
  const float m[3] = {model.p.x, model.p.y, model.p.z};
  const float s[3] = {scene.p.x, scene.p.y, scene.p.z};
  for (int a = 0; a < 3; ++a) {
    translation[a] =
        subtract(s[a], add(add(multiply(r[a][0], m[0]), multiply(r[a][1], m[1])), multiply(r[a][2], m[2])));
  }
  // Rotation matrix -> quaternion (Shepperd): divide by the largest of 4w^2, 4x^2, 4y^2, 4z^2.
  float w, x, y, z;
  const float trace = add(add(r[0][0], r[1][1]), r[2][2]);
  if (trace > 0.0f) {
    const float q = multiply(square_root(add(trace, 1.0f)), 2.0f);
    w = multiply(0.25f, q);
    x = divide(subtract(r[2][1], r[1][2]), q);
    y = divide(subtract(r[0][2], r[2][0]), q);
    z = divide(subtract(r[1][0], r[0][1]), q);
  } else if (r[0][0] > r[1][1] && r[0][0] > r[2][2]) {
    const float q = multiply(square_root(subtract(subtract(add(1.0f, r[0][0]), r[1][1]), r[2][2])), 2.0f);
    w = divide(subtract(r[2][1], r[1][2]), q);
    x = multiply(0.25f, q);
    y = divide(add(r[0][1], r[1][0]), q);
    z = divide(add(r[0][2], r[2][0]), q);
  } else if (r[1][1] > r[2][2]) {
    const float q = multiply(square_root(subtract(subtract(add(1.0f, r[1][1]), r[0][0]), r[2][2])), 2.0f);
    w = divide(subtract(r[0][2], r[2][0]), q);
    x = divide(add(r[0][1], r[1][0]), q);
    y = multiply(0.25f, q);
    z = divide(add(r[1][2], r[2][1]), q);
  } else {
    const float q = multiply(square_root(subtract(subtract(add(1.0f, r[2][2]), r[0][0]), r[1][1])), 2.0f);
    w = divide(subtract(r[1][0], r[0][1]), q);
    x = divide(add(r[0][2], r[2][0]), q);
    y = divide(add(r[1][2], r[2][1]), q);
    z = multiply(0.25f, q);
  }
  const float norm = square_root(add(add(add(multiply(w, w), multiply(x, x)), multiply(y, y)), multiply(z, z)));
  const float sign = w < 0.0f ? -1.0f : 1.0f;
  const float scale = divide(sign, norm);
  quaternion[0] = multiply(w, scale);
  quaternion[1] = multiply(x, scale);
  quaternion[2] = multiply(y, scale);
  quaternion[3] = multiply(z, scale);
}

}  // namespace ppf
}  // namespace pointops
