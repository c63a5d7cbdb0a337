// Hough peaks (non-maximum suppression + top-k), shared by every Hough accumulator.
//
// hough_peaks(acc, radius, periodic, min_votes, k, plane_seam=False) -> (votes, indices)
//   acc       (B, *dims) int32 or float32, 1 <= len(dims) <= 8, at most 2^31 - 1 bins per cloud.
//   radius    one int >= 0 per dim: the neighbourhood is the box of offsets [-radius, radius].
//   periodic  one bool per dim: that dim wraps around (an offset past the end re-enters at the
//             start); otherwise neighbours outside the accumulator do not exist.
//   plane_seam  acc is a hough_planes grid (B, n_phi, n_theta, n_rho): neighbours are found on
//             the sphere (planes.h): a theta offset past either end of [0, pi) continues at
//             phi index n_phi-1-i with the rho bin mirrored (b -> n_rho-1-b); a phi offset past a
//             pole continues at i -/+ n_phi, rho mirrored. periodic must then be all False.
//   votes     (B, k) acc's dtype, descending; indices (B, k, ndim) int64 bin coordinates.
//             Rows with fewer than k peaks are padded with votes 0 and indices -1.
//
// A bin is a peak when its votes are > 0 and >= min_votes and no neighbour beats it; u beats v
// when u's votes are larger, or equal with a lower flat index (so a plateau keeps exactly its
// first bin). NaN bins are never peaks and never beat anything. Peaks are ranked by votes, ties
// to the lower flat index.
//
// How: a mark pass gives every bin a 64-bit key, (vote bits << 32) | (2^32 - 1 - flat index) for
// a peak and 0 otherwise. Positive int32 and positive float32 order like their bits, so a
// larger key is a better peak, and keys of distinct bins differ. The top-k of the keys (at::topk,
// values only: the only equal keys are the zeros, which decode to padding whichever comes first)
// then decodes to votes and coordinates, on the keys' device, without a host sync. Both backends
// share the key function below and the decoding code, so they agree bit for bit.
//
// Two ways to the same keys. Keys of distinct bins differ, and every bin that beats a candidate
// is a candidate itself, so a candidate is a peak exactly when its key is the largest candidate
// key in its box. The CPU scans each candidate's box (peak_key). CUDA takes the box maximum as
// one 1-D window maximum per dim (peaks_cuda.cu), which is the same box: windows are symmetric,
// and on the plane sphere each seam crossing mirrors only dims whose windows are already taken
// (rho first, then phi, whose pole crossing mirrors rho, then theta, whose seam mirrors both).
#pragma once

#include <ATen/core/List.h>
#include "common/aten.h"

#include <cstdint>
#include <tuple>

#include "common/argmax_key.h"
#include "common/float_bits.h"
#include "common/portable_math.h"

namespace pointops {
namespace hough_detail {

constexpr int kMaxPeakDims = 8;

struct PeakGrid {
  int ndim;
  int64_t size[kMaxPeakDims];
  int64_t stride[kMaxPeakDims];  // row-major, within one cloud's accumulator
  int64_t radius[kMaxPeakDims];
  bool periodic[kMaxPeakDims];
  bool plane_seam;
  double min_votes;
};

POINTOPS_HOST_DEVICE inline uint32_t vote_bits(int32_t v) { return static_cast<uint32_t>(v); }

POINTOPS_HOST_DEVICE inline uint32_t vote_bits(float v) { return float_bits(v); }

POINTOPS_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Flat index of the neighbour at `offset` from `coord`, or -1 when there is none.
POINTOPS_HOST_DEVICE inline int64_t neighbour_index(const PeakGrid& g, const int64_t* coord, const int64_t* offset) {
  if (g.plane_seam) {
    const int64_t n_phi = g.size[0], n_theta = g.size[1], n_rho = g.size[2];
    int64_t i = coord[0] + offset[0], j = coord[1] + offset[1], r = coord[2] + offset[2];
    const int64_t poles = floor_div(i, n_phi);  // each half-turn in phi negates the normal
    i -= poles * n_phi;
    const int64_t seams = floor_div(j, n_theta);  // each half-turn in theta: phi -> pi - phi, negated
    j -= seams * n_theta;
    if (seams & 1) i = n_phi - 1 - i;
    if ((poles + seams) & 1) r = n_rho - 1 - r;
    if (r < 0 || r >= n_rho) return -1;
    return i * g.stride[0] + j * g.stride[1] + r;
  }
  int64_t flat = 0;
  for (int d = 0; d < g.ndim; ++d) {
    int64_t c = coord[d] + offset[d];
    if (g.periodic[d]) {
      c -= floor_div(c, g.size[d]) * g.size[d];
    } else if (c < 0 || c >= g.size[d]) {
      return -1;
    }
    flat += c * g.stride[d];
  }
  return flat;
}

// The key bin `flat` holding v would have as a peak, or 0 when it cannot be one (votes not > 0,
// below min_votes, or NaN).
template <typename T>
POINTOPS_HOST_DEVICE inline int64_t candidate_key(T v, int64_t flat, const PeakGrid& g) {
  if (!(v > T(0)) || !(static_cast<double>(v) >= g.min_votes)) return 0;
  return static_cast<int64_t>(argmax_key(vote_bits(v), static_cast<uint32_t>(flat)));
}

// The key of bin `flat` of one cloud's accumulator `acc` (see the header comment).
template <typename T>
POINTOPS_HOST_DEVICE inline int64_t peak_key(const T* acc, int64_t flat, const PeakGrid& g) {
  const T v = acc[flat];
  const int64_t key = candidate_key(v, flat, g);
  if (key == 0) return 0;
  int64_t coord[kMaxPeakDims], offset[kMaxPeakDims];
  for (int d = 0; d < g.ndim; ++d) {
    coord[d] = (flat / g.stride[d]) % g.size[d];
    offset[d] = -g.radius[d];
  }
  while (true) {
    const int64_t nb = neighbour_index(g, coord, offset);
    if (nb >= 0 && nb != flat) {
      const T u = acc[nb];
      if (u > v || (u == v && nb < flat)) return 0;
    }
    int d = g.ndim - 1;  // odometer over the box of offsets
    while (d >= 0 && ++offset[d] > g.radius[d]) {
      offset[d] = -g.radius[d];
      --d;
    }
    if (d < 0) break;
  }
  return key;
}

// Checks shared by both backends; returns the grid. Defined in peaks_cpu.cpp.
PeakGrid check_peaks_args(const at::Tensor& acc, at::IntArrayRef radius, const c10::List<bool>& periodic,
                          double min_votes, int64_t k, bool plane_seam);

// The peaks' keys (see above), zeros elsewhere: (B, S) int64 on acc's device, acc contiguous,
// S <= bins. The CPU returns every bin's key in place (S = bins); CUDA a pool of the peaks per
// cloud, in no particular order. Only the values count: hough_peaks and plane_detections take
// their top-k (top_peak_keys), which is the same for both.
at::Tensor peak_keys_cpu(const at::Tensor& acc, const PeakGrid& grid);
at::Tensor peak_keys_cuda(const at::Tensor& acc, const PeakGrid& grid);

// The k largest keys of each row, descending, padded with 0 (no peak) past the row's bins.
at::Tensor top_peak_keys(const at::Tensor& keys, int64_t k);

// keys (B, S) int64 -> (votes (B, k), indices (B, k, ndim)); runs on the keys' device.
std::tuple<at::Tensor, at::Tensor> decode_peak_keys(const at::Tensor& keys, const PeakGrid& grid, int64_t k,
                                                    at::ScalarType vote_dtype);

}  // namespace hough_detail
}  // namespace pointops
