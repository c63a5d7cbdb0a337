// The strongest peaks of a plane accumulator as planes: the contract shared by the CPU and CUDA
// kernels.
//
// plane_detections(acc, n_phi, n_theta, rho_step, rho_max, k, radius=1, min_votes=1.0) -> (planes, votes)
//   acc      a hough_planes grid (B, n_phi, n_theta, n_rho) or a hough_planes_ball accumulator
//            (B, n_cells, n_rho), int32 or float32, made with these n_phi, n_theta, rho_step and
//            rho_max (its shape is checked against them).
//   peaks    hough_peaks' (peaks.h): a bin is a peak when its votes are > 0, >= min_votes, and no
//            bin of its box beats it. The grid's box is radius bins in phi, theta and rho, glued
//            along the sphere's seams (plane_seam); the ball's is radius rho bins of its own cell.
//            The k strongest, ties to the lower flat index.
//   planes   (B, k, 4) float32: the bin centre of each peak as a plane (nx, ny, nz, d),
//            n . p = d: the cell's unit normal and the rho bin's centre, both computed in float64
//            as pointops.peaks_to_planes / ball_peaks_to_planes do and rounded once to float32
//            (plane_tables.h); NaN rows past the peaks found.
//   votes    (B, k) float32: each peak's votes (int32 counts rounded to float32); 0 past them.
// Both backends compute the same keys (hough_peaks'), the same top-k and the same decoding, so
// they agree bit for bit.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>

#include "common/float_bits.h"
#include "common/portable_math.h"
#include "hough/peaks.h"

namespace pointops {
namespace hough_detail {

// What both backends decode with, after the checks (plane_detections_cpu.cpp).
struct PlaneDetectionArgs {
  PeakGrid grid;
  bool ball;
  int64_t n_rho;
};

PlaneDetectionArgs check_plane_detections_args(const at::Tensor& acc, int64_t n_phi, int64_t n_theta, double rho_step,
                                               double rho_max, int64_t k, int64_t radius, double min_votes);

// Peak key -> plane row and votes; key 0 (no peak): a NaN row and 0 votes.
POINTOPS_HOST_DEVICE inline void decode_plane_key(int64_t key, const float* normals, const float* rho_centres,
                                                  int64_t n_rho, bool float_votes, float* plane, float* votes) {
  if (key == 0) {
    for (int c = 0; c < 4; ++c) plane[c] = NAN;
    *votes = 0.f;
    return;
  }
  const uint32_t bits = static_cast<uint32_t>(static_cast<uint64_t>(key) >> 32);
  const int64_t flat = int64_t{0xffffffff} - static_cast<int64_t>(static_cast<uint64_t>(key) & 0xffffffffu);
  const int64_t cell = flat / n_rho;
  const int64_t r = flat - cell * n_rho;
  plane[0] = normals[3 * cell];
  plane[1] = normals[3 * cell + 1];
  plane[2] = normals[3 * cell + 2];
  plane[3] = rho_centres[r];
  *votes = float_votes ? bits_float(bits) : static_cast<float>(static_cast<int32_t>(bits));
}

}  // namespace hough_detail
}  // namespace pointops
