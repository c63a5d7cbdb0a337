// The CPU vote's AVX2 steps (vote_cpu.cpp): the distance test of 8 grid points at a time, the
// scene pairs' features of 8 partners at a time, the votes of 8 model pair rows at a time and the
// accumulator's peak scan.
//
// Each function repeats the scalar arithmetic of ppf_math.h / vote.h operation for operation:
// _mm256_add/sub/mul/div/sqrt_ps round like their scalar IEEE twins, _mm256_floor_ps is exact,
// the ordered compares reject NaN as the scalar comparisons do, and no product is fused into a
// sum (the build passes -ffp-contract=off), so every bin, key, alpha and vote cell equals the
// scalar path's and CUDA's (tests/test_cpu_simd.py holds the two CPU paths equal).
#pragma once

#include <cstdint>

#include "common/cpu_simd.h"
#include "ppf/ppf_math.h"
#include "ppf/vote.h"

#if POINTOPS_X86_DISPATCH

#define POINTOPS_PPF_AVX2 __attribute__((target("avx2,fma")))

namespace pointops {
namespace ppf {
namespace avx2 {

constexpr int kLanes = 8;

struct V3 {
  __m256 x, y, z;
};

POINTOPS_PPF_AVX2 inline __m256 negate(__m256 v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
POINTOPS_PPF_AVX2 inline __m256 less(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
POINTOPS_PPF_AVX2 inline __m256 select(__m256 mask, __m256 yes, __m256 no) { return _mm256_blendv_ps(no, yes, mask); }
POINTOPS_PPF_AVX2 inline __m256i select_i(__m256 mask, __m256i yes, __m256i no) {
  return _mm256_blendv_epi8(no, yes, _mm256_castps_si256(mask));
}

POINTOPS_PPF_AVX2 inline V3 broadcast(const Vec3& v) {
  return {_mm256_set1_ps(v.x), _mm256_set1_ps(v.y), _mm256_set1_ps(v.z)};
}

POINTOPS_PPF_AVX2 inline __m256 dot(const V3& a, const V3& b) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a.x, b.x), _mm256_mul_ps(a.y, b.y)), _mm256_mul_ps(a.z, b.z));
}

POINTOPS_PPF_AVX2 inline V3 cross(const V3& a, const V3& b) {
  return {_mm256_sub_ps(_mm256_mul_ps(a.y, b.z), _mm256_mul_ps(a.z, b.y)),
          _mm256_sub_ps(_mm256_mul_ps(a.z, b.x), _mm256_mul_ps(a.x, b.z)),
          _mm256_sub_ps(_mm256_mul_ps(a.x, b.y), _mm256_mul_ps(a.y, b.x))};
}

// ppf_atan2, lane by lane.
POINTOPS_PPF_AVX2 inline __m256 atan2(__m256 y, __m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 x_negative = less(x, zero);
  const __m256 y_negative = less(y, zero);
  const __m256 ax = select(x_negative, negate(x), x);
  const __m256 ay = select(y_negative, negate(y), y);
  const __m256 steep = _mm256_cmp_ps(ay, ax, _CMP_GT_OQ);
  const __m256 big = select(steep, ay, ax);
  const __m256 small = select(steep, ax, ay);
  const __m256 t = _mm256_div_ps(small, big);
  const __m256 s = _mm256_mul_ps(t, t);
  __m256 p = _mm256_set1_ps(atan_coefficient(kAtanDegree));
  for (int k = kAtanDegree - 1; k >= 0; --k) {
    p = _mm256_add_ps(_mm256_mul_ps(p, s), _mm256_set1_ps(atan_coefficient(k)));
  }
  __m256 r = _mm256_mul_ps(t, p);
  r = select(steep, _mm256_sub_ps(_mm256_set1_ps(kHalfPi), r), r);
  r = select(x_negative, _mm256_sub_ps(_mm256_set1_ps(kPi), r), r);
  r = select(y_negative, negate(r), r);
  return select(_mm256_cmp_ps(big, zero, _CMP_EQ_OQ), zero, r);
}

POINTOPS_PPF_AVX2 inline __m256 angle_between(const V3& a, const V3& b) {
  const V3 c = cross(a, b);
  return atan2(_mm256_sqrt_ps(dot(c, c)), dot(a, b));
}

// dim_bins, lane by lane; without `neighbours` only the bin (neighbour bins serve spread voting
// alone).
template <bool neighbours>
POINTOPS_PPF_AVX2 inline void dim_bins(__m256 value, __m256 step, int32_t bins, bool clamp_top, __m256i* bin,
                                       __m256i* neighbour) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 bins_f = _mm256_set1_ps(static_cast<float>(bins));
  const __m256i none = _mm256_set1_epi32(-1);
  const __m256 scaled = _mm256_div_ps(value, step);
  const __m256 lower = _mm256_floor_ps(scaled);
  const __m256 inside = less(lower, bins_f);
  const __m256i out_bin = select_i(inside, _mm256_cvttps_epi32(lower), _mm256_set1_epi32(clamp_top ? bins - 1 : -1));
  *bin = out_bin;
  if (!neighbours) return;
  const __m256 fraction = _mm256_sub_ps(scaled, lower);
  const __m256 side =
      select(less(fraction, _mm256_set1_ps(0.5f)), _mm256_sub_ps(lower, one), _mm256_add_ps(lower, one));
  const __m256i side_i = _mm256_cvttps_epi32(side);
  __m256 ok = _mm256_and_ps(_mm256_cmp_ps(side, _mm256_setzero_ps(), _CMP_GE_OQ), less(side, bins_f));
  ok = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(side_i, out_bin)), ok);
  if (!clamp_top) ok = _mm256_and_ps(ok, inside);
  *neighbour = select_i(ok, side_i, none);
}

// The features of reference frame f with 8 oriented partners (positions p, unit normals n):
// bins and neighbour bins of the 4 dimensions (distance, a1, a2, a3) and the scene alpha, as
// oriented_scene_pair computes them (the caller has already kept only partners with
// 0 < |d|^2 <= max_square). A lane whose distance bin is past the last has bin[0] = -1. Without
// `neighbours` the neighbour bins are left unwritten.
template <bool neighbours>
POINTOPS_PPF_AVX2 inline void pair_features(const Frame& f, const V3& p, const V3& n, const Binning& b, int32_t* bin,
                                            int32_t* neighbour, float* alpha, int64_t stride) {
  const V3 fp = broadcast(f.p);
  const V3 fn = broadcast(f.n);
  const V3 d = {_mm256_sub_ps(p.x, fp.x), _mm256_sub_ps(p.y, fp.y), _mm256_sub_ps(p.z, fp.z)};
  const __m256 distance = _mm256_sqrt_ps(dot(d, d));
  const __m256 a1 = angle_between(fn, d);
  const __m256 a2 = angle_between(n, d);
  const __m256 a3 = angle_between(fn, n);
  const __m256 distance_step = _mm256_set1_ps(b.distance_step);
  const __m256 angle_step = _mm256_set1_ps(b.angle_step);
  __m256i bins[4], near[4];
  dim_bins<neighbours>(distance, distance_step, b.distance_bins, false, &bins[0], &near[0]);
  dim_bins<neighbours>(a1, angle_step, b.feature_bins, true, &bins[1], &near[1]);
  dim_bins<neighbours>(a2, angle_step, b.feature_bins, true, &bins[2], &near[2]);
  dim_bins<neighbours>(a3, angle_step, b.feature_bins, true, &bins[3], &near[3]);
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bin + q * stride), bins[q]);
    if (neighbours) _mm256_storeu_si256(reinterpret_cast<__m256i*>(neighbour + q * stride), near[q]);
  }
  const V3 b1 = broadcast(f.b1);
  const V3 b2 = broadcast(f.b2);
  _mm256_storeu_ps(alpha, atan2(dot(b2, d), dot(b1, d)));
}

// Bit l set where point l of 8 (structure of arrays) lies at 0 < |d|^2 <= max_square from p,
// d = point - p and |d|^2 = (dx dx + dy dy) + dz dz (sub3 and dot3's rounding).
POINTOPS_PPF_AVX2 inline int within(const Vec3& p, const float* x, const float* y, const float* z, float max_square) {
  const __m256 dx = _mm256_sub_ps(_mm256_loadu_ps(x), _mm256_set1_ps(p.x));
  const __m256 dy = _mm256_sub_ps(_mm256_loadu_ps(y), _mm256_set1_ps(p.y));
  const __m256 dz = _mm256_sub_ps(_mm256_loadu_ps(z), _mm256_set1_ps(p.z));
  const __m256 square =
      _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy)), _mm256_mul_ps(dz, dz));
  const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(square, _mm256_setzero_ps(), _CMP_GT_OQ),
                                  _mm256_cmp_ps(square, _mm256_set1_ps(max_square), _CMP_LE_OQ));
  return _mm256_movemask_ps(ok);
}

// For each 8-bit mask, the lanes whose bit is set, in order, then zeros: the permutation that
// packs a vector's chosen lanes to its front.
struct PackTable {
  alignas(32) int32_t lanes[256][kLanes];
  PackTable() {
    for (int mask = 0; mask < 256; ++mask) {
      int at = 0;
      for (int l = 0; l < kLanes; ++l) {
        if (mask & (1 << l)) lanes[mask][at++] = l;
      }
      while (at < kLanes) lanes[mask][at++] = 0;
    }
  }
};

// Appends element l of src[a][0, 8) to dst[a] at `at` for every lane l set in mask, in lane
// order, for each of `arrays` arrays; writes whole vectors (the caller keeps 8 slots free past
// the appended ones). Returns the number appended.
template <int arrays>
POINTOPS_PPF_AVX2 inline int pack(int mask, const float* const* src, int64_t offset, float* const* dst, int64_t at) {
  static const PackTable table;
  const __m256i order = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.lanes[mask]));
  for (int a = 0; a < arrays; ++a) {
    _mm256_storeu_ps(dst[a] + at, _mm256_permutevar8x32_ps(_mm256_loadu_ps(src[a] + offset), order));
  }
  return __builtin_popcount(static_cast<unsigned>(mask));
}

// pair_features over partners [0, count) of structure-of-arrays buffers padded to whole vectors.
template <bool neighbours>
POINTOPS_PPF_AVX2 inline void partner_features(const Frame& f, const Binning& b, int64_t count, const float* px,
                                               const float* py, const float* pz, const float* nx, const float* ny,
                                               const float* nz, int32_t* bin, int32_t* neighbour, float* alpha,
                                               int64_t stride) {
  for (int64_t k = 0; k < count; k += kLanes) {
    const V3 p = {_mm256_loadu_ps(px + k), _mm256_loadu_ps(py + k), _mm256_loadu_ps(pz + k)};
    const V3 n = {_mm256_loadu_ps(nx + k), _mm256_loadu_ps(ny + k), _mm256_loadu_ps(nz + k)};
    pair_features<neighbours>(f, p, n, b, bin + k, neighbour + k, alpha + k, stride);
  }
}

// The votes of model pair rows [lo, hi) from a scene pair with alpha `scene_alpha`: ++acc[cell]
// for every row whose vote_cell is valid, 8 cells computed at a time.
POINTOPS_PPF_AVX2 inline void vote_rows(const int32_t* pair_ref, const float* pair_alpha, int64_t lo, int64_t hi,
                                        float scene_alpha, int32_t nm, const Binning& b, uint32_t* acc) {
  const __m256 as = _mm256_set1_ps(scene_alpha);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 two_pi = _mm256_set1_ps(kTwoPi);
  const __m256 scale = _mm256_set1_ps(b.alpha_scale);
  const __m256i bins = _mm256_set1_epi32(b.angle_bins);
  const __m256i last_bin = _mm256_set1_epi32(b.angle_bins - 1);
  const __m256i last_point = _mm256_set1_epi32(nm - 1);
  const __m256i minus_one = _mm256_set1_epi32(-1);
  alignas(32) int32_t cell[kLanes];
  int64_t e = lo;
  for (; e + kLanes <= hi; e += kLanes) {
    const __m256i i = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_ref + e));
    const __m256 am = _mm256_loadu_ps(pair_alpha + e);
    __m256 alpha = _mm256_sub_ps(as, am);
    alpha = select(less(alpha, zero), _mm256_add_ps(alpha, two_pi), alpha);
    __m256i bin = _mm256_cvttps_epi32(_mm256_floor_ps(_mm256_mul_ps(alpha, scale)));
    bin = _mm256_sub_epi32(bin, _mm256_and_si256(_mm256_cmpgt_epi32(bin, last_bin), bins));
    // vote_cell: 0 <= i < nm, a finite model alpha, 0 <= bin < angle_bins
    __m256i ok = _mm256_andnot_si256(_mm256_cmpgt_epi32(i, last_point), _mm256_cmpgt_epi32(i, minus_one));
    ok = _mm256_and_si256(ok, _mm256_castps_si256(_mm256_cmp_ps(_mm256_sub_ps(am, am), zero, _CMP_EQ_OQ)));
    ok = _mm256_and_si256(ok, _mm256_cmpgt_epi32(bin, minus_one));
    ok = _mm256_andnot_si256(_mm256_cmpgt_epi32(bin, last_bin), ok);
    _mm256_store_si256(reinterpret_cast<__m256i*>(cell), _mm256_add_epi32(_mm256_mullo_epi32(i, bins), bin));
    const int mask = _mm256_movemask_ps(_mm256_castsi256_ps(ok));
    if (mask == 0xFF) {
      for (int l = 0; l < kLanes; ++l) ++acc[cell[l]];
    } else {
      for (int l = 0; l < kLanes; ++l) {
        if (mask & (1 << l)) ++acc[cell[l]];
      }
    }
  }
  for (; e < hi; ++e) {
    const int64_t c = vote_cell(pair_ref[e], pair_alpha[e], scene_alpha, nm, b);
    if (c >= 0) ++acc[c];
  }
}

// Pushes every nonzero cell of acc[0, cells) that can enter `top` (more votes than its k-th word,
// which ties to the lower, earlier cell), 8 cells compared at a time.
POINTOPS_PPF_AVX2 inline void scan_peaks(const uint32_t* acc, int64_t cells, TopWords* top) {
  const __m256i flip = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  uint32_t floor_votes = top->k > 0 ? peak_votes(top->word[top->k - 1]) : 0xFFFFFFFFu;
  int64_t c = 0;
  for (; c + kLanes <= cells; c += kLanes) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + c)), flip);
    const __m256i bar = _mm256_xor_si256(_mm256_set1_epi32(static_cast<int32_t>(floor_votes)), flip);
    int mask = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(v, bar)));
    while (mask != 0) {
      const int l = __builtin_ctz(static_cast<unsigned>(mask));
      mask &= mask - 1;
      top->push(peak_word(acc[c + l], static_cast<uint32_t>(c + l)));
      floor_votes = peak_votes(top->word[top->k - 1]);
    }
  }
  for (; c < cells; ++c) {
    if (acc[c] > floor_votes) {
      top->push(peak_word(acc[c], static_cast<uint32_t>(c)));
      floor_votes = peak_votes(top->word[top->k - 1]);
    }
  }
}

}  // namespace avx2
}  // namespace ppf
}  // namespace pointops

#endif  // POINTOPS_X86_DISPATCH
