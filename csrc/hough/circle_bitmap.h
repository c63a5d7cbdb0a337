// Circle votes of an edge map counted 32 centres at a time: the CUDA kernels of hough_circles_map
// and hough_circles_max_map (circles_map_cuda.cu). The ring sizes and the radius entries are also
// what the host builds the kernels' chunk table from (circles_map_cpu.cpp).
//
// Gather instead of scatter. The count of radius r at centre c is the number of offsets o of the
// ring (circles.h: skimage's circle_perimeter(0, 0, r), repeats included) whose pixel c - o is an
// edge. With the edge map packed into bits (bit j of word q of a row is pixel 32 q + j), the 32
// centres of one word (x = 32 w .. 32 w + 31, row y) read one offset's 32 pixels with a funnel
// shift of two words of row y - dy: a 32-bit vector of votes, one bit per centre. Each word of
// centres then adds its ring's vectors into a bit-sliced counter (plane k holds bit k of the 32
// counts) with carry-save adders (Harley-Seal: 15 adders of 2 three-input logic ops per 16
// vectors, the 16s carried up the higher planes), so a vote costs a fraction of an instruction per
// centre and no atomics, and the work is (pixels / 32) x (ring offsets), whatever the edge density.
// The order of the offsets does not matter (integer counts), so the ring is walked as Bresenham's
// midpoint circle produces it, 8 offsets per step, with no table: the set {(+-r', +-c), (+-c, +-r')}
// of each step is closed under negation, so the same walk gives the source pixels c - o.
//
// A pixel outside the image is a zero bit (the bitmap is padded), so no border test: the centres
// inside the image get exactly the votes of edge_points + hough_circles_points (a map has no repeated
// points, and every pixel votes 1).
//
// Counts are below 2^16 (rings of fewer than 65,536 offsets: r < ~11,500). A radius' count needs
// only bit_length(ring) planes, so the carries stop there.
#pragma once

#include <cstdint>

#include "common/portable_math.h"
#include "hough/circles.h"

namespace pointops {
namespace hough_images {
namespace bitmap {

constexpr int kPlanes = 16;      // bit planes of a count
constexpr int kIndexPlanes = 8;  // bit planes of a radius' position in its chunk
constexpr int64_t kMaxRing = (int64_t{1} << kPlanes) - 1;
constexpr int64_t kMaxChunkRadii = int64_t{1} << kIndexPlanes;

// The number of offsets of radius r (circle_perimeter_size): 8 per Bresenham step.
inline int32_t ring_size(int32_t radius) {
  int32_t c = 0, r = radius, d = 3 - 2 * radius, steps = 0;
  while (r >= c) {
    ++steps;
    if (d < 0) {
      d += 4 * c + 6;
    } else {
      d += 4 * (c - r) + 10;
      r -= 1;
    }
    c += 1;
  }
  return 8 * steps;
}

inline int bit_length(uint32_t v) {
  int n = 0;
  while (v != 0) {
    ++n;
    v >>= 1;
  }
  return n;
}

// (hi:lo) >> (shift mod 32), the low 32 bits (the hardware funnel shift wraps its amount).
POINTOPS_HOST_DEVICE inline uint32_t funnel(uint32_t lo, uint32_t hi, int32_t shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, static_cast<uint32_t>(shift));
#else
  const uint32_t s = static_cast<uint32_t>(shift) & 31u;
  return s == 0 ? lo : (lo >> s) | (hi << (32 - s));
#endif
}

// One carry-save adder: sum + a + b = 2 carry + sum'.
POINTOPS_HOST_DEVICE inline void csa(uint32_t& carry, uint32_t& sum, uint32_t a, uint32_t b) {
  const uint32_t u = sum ^ a;
  carry = (sum & a) | (u & b);
  sum = u ^ b;
}

// Adds `carry` (a vector of weight 2^first) into planes [first, planes) of p. The count never
// exceeds 2^planes - 1, so nothing carries out of the last plane. `planes` is the same for every
// lane of a warp (a radius' plane count), so the early exit does not diverge.
POINTOPS_HOST_DEVICE inline void ripple(uint32_t (&p)[kPlanes], uint32_t carry, int first, int planes) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 3; k < kPlanes; ++k) {
    if (k < first) continue;
    if (k >= planes) break;
    const uint32_t t = p[k] & carry;
    p[k] ^= carry;
    carry = t;
  }
}

// p += v[0] + ... + v[7] (Harley-Seal: planes 0, 1, 2 are the adders' ones, twos and fours).
POINTOPS_HOST_DEVICE inline uint32_t add8_carry(uint32_t (&p)[kPlanes], const uint32_t* v) {
  uint32_t twos_a, twos_b, fours_a, fours_b, eights;
  csa(twos_a, p[0], v[0], v[1]);
  csa(twos_b, p[0], v[2], v[3]);
  csa(fours_a, p[1], twos_a, twos_b);
  csa(twos_a, p[0], v[4], v[5]);
  csa(twos_b, p[0], v[6], v[7]);
  csa(fours_b, p[1], twos_a, twos_b);
  csa(eights, p[2], fours_a, fours_b);
  return eights;
}

POINTOPS_HOST_DEVICE inline void add8(uint32_t (&p)[kPlanes], const uint32_t* v, int planes) {
  ripple(p, add8_carry(p, v), 3, planes);
}

// p += v[0] + ... + v[15] but the carry of weight 16, returned (planes 0..3 are the adders').
POINTOPS_HOST_DEVICE inline uint32_t add16_carry(uint32_t (&p)[kPlanes], const uint32_t* v) {
  const uint32_t eights_a = add8_carry(p, v);
  const uint32_t eights_b = add8_carry(p, v + 8);
  uint32_t sixteens;
  csa(sixteens, p[3], eights_a, eights_b);
  return sixteens;
}

// A fetch reads the 32 vote bits of one offset for the caller's word of centres, in two parts:
// fetch.row(offset) is the caller's row moved by offset = drow * fetch.row_step (a pointer: rows
// are carried along the walk, so each costs an add per step), and fetch(row, q, shift) the bits
// of pixels 32 w + dcol + j, j = 0..31, of that row, with q = (dcol >> 5) * Fetch::kWordStep (the
// word, in the fetch's address units) and shift = dcol (only its low 5 bits count). An offset then
// costs one add for its address, one load and one funnel shift.
//
// The 8 vote vectors of one Bresenham step (c, r): the source pixels at (drow, dcol) = (+-r, +-c)
// and (+-c, +-r), from the rows -r, +r, -c, +c.
template <class Fetch, class Row>
POINTOPS_HOST_DEVICE inline void fetch_step(const Fetch& fetch, int32_t c, int32_t r, Row up_r, Row down_r, Row up_c,
                                            Row down_c, uint32_t* v) {
  constexpr int32_t kStep = Fetch::kWordStep;
  const int32_t qc = (c >> 5) * kStep, qnc = ((-c) >> 5) * kStep;
  const int32_t qr = (r >> 5) * kStep, qnr = ((-r) >> 5) * kStep;
  v[0] = fetch(up_r, qnc, -c);    // (drow, dcol) = (-r, -c)
  v[1] = fetch(down_r, qnc, -c);  // (r, -c)
  v[2] = fetch(up_r, qc, c);      // (-r, c)
  v[3] = fetch(down_r, qc, c);    // (r, c)
  v[4] = fetch(up_c, qnr, -r);    // (-c, -r)
  v[5] = fetch(down_c, qnr, -r);  // (c, -r)
  v[6] = fetch(up_c, qr, r);      // (-c, r)
  v[7] = fetch(down_c, qr, r);    // (c, r)
}

// The midpoint walk (circle_offsets() in circles.h) with its four source rows.
template <class Fetch>
struct Walk {
  using Row = typename Fetch::Row;
  int32_t c, r, d, row_step;
  Row up_r, down_r, up_c, down_c;

  POINTOPS_HOST_DEVICE inline Walk(const Fetch& fetch, int32_t radius)
      : c(0),
        r(radius),
        d(3 - 2 * radius),
        row_step(fetch.row_step),
        up_r(fetch.row(-radius * fetch.row_step)),
        down_r(fetch.row(radius * fetch.row_step)),
        up_c(fetch.row(0)),
        down_c(fetch.row(0)) {}

  POINTOPS_HOST_DEVICE inline void step() {
    if (d < 0) {
      d += 4 * c + 6;
    } else {
      d += 4 * (c - r) + 10;
      r -= 1;
      up_r += row_step;
      down_r -= row_step;
    }
    c += 1;
    up_c -= row_step;
    down_c += row_step;
  }
  POINTOPS_HOST_DEVICE inline bool done() const { return r < c; }

  POINTOPS_HOST_DEVICE inline void fetch8(const Fetch& fetch, uint32_t* v) const {
    fetch_step(fetch, c, r, up_r, down_r, up_c, down_c, v);
  }
};

// p = the counts of radius `radius` (ring of < 2^planes offsets) at the caller's 32 centres.
// Four steps (32 vectors) per pass: two 16-vector adder trees whose 16s meet in plane 4, so the
// carries ripple up from plane 5 once per 32 vectors; a walk that ends mid-pass adds what it has.
template <class Fetch>
POINTOPS_HOST_DEVICE inline void ring_counts(int32_t radius, int planes, const Fetch& fetch, uint32_t (&p)[kPlanes]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int k = 0; k < kPlanes; ++k) p[k] = 0;
  Walk<Fetch> walk(fetch, radius);
  uint32_t v[16];
  while (true) {
    walk.fetch8(fetch, v);
    walk.step();
    if (walk.done()) {  // 8 vectors
      add8(p, v, planes);
      return;
    }
    walk.fetch8(fetch, v + 8);
    walk.step();
    const uint32_t sixteens_a = add16_carry(p, v);  // pending: weight 16
    if (walk.done()) {                              // 16
      ripple(p, sixteens_a, 4, planes);
      return;
    }
    walk.fetch8(fetch, v);
    walk.step();
    if (walk.done()) {  // 24
      ripple(p, sixteens_a, 4, planes);
      add8(p, v, planes);
      return;
    }
    walk.fetch8(fetch, v + 8);
    walk.step();
    const uint32_t sixteens_b = add16_carry(p, v);
    uint32_t thirty_twos;
    csa(thirty_twos, p[4], sixteens_a, sixteens_b);  // a ring of >= 32 offsets has >= 6 planes
    ripple(p, thirty_twos, 5, planes);
    if (walk.done()) return;
  }
}

// In-place transpose of 16 bit planes of 32 counts into the counts, two per word:
// a[j] = count(j) | count(j + 16) << 16 (block swaps of 8, 4, 2, 1 bits; bit 4 of the centre index
// is left alone, so the 16 x 32 matrix becomes two 16 x 16 blocks side by side).
POINTOPS_HOST_DEVICE inline void transpose16(uint32_t (&a)[kPlanes]) {
  constexpr uint32_t kMasks[4] = {0x00FF00FFu, 0x0F0F0F0Fu, 0x33333333u, 0x55555555u};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int level = 0; level < 4; ++level) {
    const int s = 8 >> level;
    const uint32_t m = kMasks[level];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < 16; ++k) {
      if (k & s) continue;
      const uint32_t t = ((a[k] >> s) ^ a[k + s]) & m;
      a[k + s] ^= t;
      a[k] ^= t << s;
    }
  }
}

// The same for 8 planes of bytes: a[j] = byte(j) | byte(j + 8) << 8 | byte(j + 16) << 16 |
// byte(j + 24) << 24.
POINTOPS_HOST_DEVICE inline void transpose8(uint32_t (&a)[kIndexPlanes]) {
  constexpr uint32_t kMasks[3] = {0x0F0F0F0Fu, 0x33333333u, 0x55555555u};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int level = 0; level < 3; ++level) {
    const int s = 4 >> level;
    const uint32_t m = kMasks[level];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < 8; ++k) {
      if (k & s) continue;
      const uint32_t t = ((a[k] >> s) ^ a[k + s]) & m;
      a[k + s] ^= t;
      a[k] ^= t << s;
    }
  }
}

POINTOPS_HOST_DEVICE inline uint32_t count_of(const uint32_t (&t)[kPlanes], int j) {
  return j < 16 ? t[j] & 0xffffu : t[j - 16] >> 16;
}

POINTOPS_HOST_DEVICE inline uint32_t byte_of(const uint32_t (&t)[kIndexPlanes], int j) {
  return (t[j & 7] >> (8 * (j >> 3))) & 0xffu;
}

// The best count so far of each of the 32 centres, bit-sliced, and its position in the chunk:
// fold() keeps count p where it is strictly larger (so a tie keeps the earlier position). The
// compare runs from the top plane down: gt = the lanes where p > best at the first differing plane.
struct BestPlanes {
  uint32_t best[kPlanes];
  uint32_t pos[kIndexPlanes];

  POINTOPS_HOST_DEVICE inline void clear() {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kPlanes; ++k) best[k] = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kIndexPlanes; ++k) pos[k] = 0;
  }

  POINTOPS_HOST_DEVICE inline void fold(const uint32_t (&p)[kPlanes], uint32_t position) {
    uint32_t gt = 0, eq = 0xffffffffu;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = kPlanes - 1; k >= 0; --k) {
      gt |= eq & p[k] & ~best[k];
      eq &= ~(p[k] ^ best[k]);
    }
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kPlanes; ++k) best[k] = (p[k] & gt) | (best[k] & ~gt);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kIndexPlanes; ++k) pos[k] = ((position >> k) & 1u) != 0 ? (pos[k] | gt) : (pos[k] & ~gt);
  }

  // emit(j, ordered score key, position) for the 32 centres.
  template <class Emit>
  POINTOPS_HOST_DEVICE inline void emit(const Emit& out) const {
    uint32_t counts[kPlanes], positions[kIndexPlanes];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kPlanes; ++k) counts[k] = best[k];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kIndexPlanes; ++k) positions[k] = pos[k];
    transpose16(counts);
    transpose8(positions);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 32; ++j) {
      out(j, ordered_score(static_cast<int32_t>(count_of(counts, j))), byte_of(positions, j));
    }
  }
};

// The best normalized score so far of each of the 32 centres (float32(count) / float32(ring), as
// ordered keys) and its position in the chunk; positions are bytes, four per word.
struct BestScores {
  uint32_t key[32];
  uint32_t pos[8];

  POINTOPS_HOST_DEVICE inline void clear() {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 32; ++j) key[j] = ordered_score(0.f);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 8; ++j) pos[j] = 0;
  }

  POINTOPS_HOST_DEVICE inline void fold(const uint32_t (&p)[kPlanes], int32_t ring, uint32_t position) {
    uint32_t counts[kPlanes];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = 0; k < kPlanes; ++k) counts[k] = p[k];
    transpose16(counts);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 32; ++j) {
      const uint32_t k = ordered_score(float_score(count_of(counts, j), false, true, ring));
      if (k > key[j]) {  // strictly larger: ties keep the earlier radius
        key[j] = k;
        const int shift = 8 * (j & 3);
        pos[j >> 2] = (pos[j >> 2] & ~(0xffu << shift)) | (position << shift);
      }
    }
  }

  template <class Emit>
  POINTOPS_HOST_DEVICE inline void emit(const Emit& out) const {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < 32; ++j) out(j, key[j], (pos[j >> 2] >> (8 * (j & 3))) & 0xffu);
  }
};

// A radius of a chunk's list (the chunk table, host-built): its value, ring size, bit planes
// and index into the op's radii.
struct RadiusEntry {
  int32_t r, ring, planes, index;
};

}  // namespace bitmap
}  // namespace hough_images
}  // namespace pointops
