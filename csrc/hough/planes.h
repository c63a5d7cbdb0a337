// 3D plane Hough accumulators: the contract shared by the CPU and CUDA kernels.
//
// hough_planes(points, lengths?, weights?, n_phi, n_theta, rho_step, rho_max) -> acc
//   points   (B, N, 3) float32/float64/float16/bfloat16; cloud b is rows [0, lengths[b]).
//            Coordinates are rounded to float32 first; all arithmetic below is float32.
//   lengths  (B,) int64 or None (every cloud has N points); clamped to [0, N].
//   weights  (B, N) floating or None. None: acc counts votes, int32. Given: acc sums the weights
//            (rounded to float32) of the voting points, float32.
//   acc      (B, n_phi, n_theta, n_rho).
// hough_planes_ball(same arguments) -> acc (B, n_cells, n_rho): the equal-area "ball" layout.
//
// Orientations. A plane is {p : n . p = rho} with n = (sin phi cos theta, sin phi sin theta,
// cos phi). Grid cell (i, j) has the centre phi_i = (i + 0.5) pi / n_phi, theta_j = (j + 0.5) pi /
// n_theta: phi spans [0, pi], theta a half-turn [0, pi). n and -n give the same plane, and exactly
// one of them has n_y > 0, so every plane (apart from the measure-zero n_y = 0 set, which falls on
// cell borders) has one home. The sphere's seams, used by hough_peaks(plane_seam=True): stepping
// past theta = pi gives n(phi, theta + pi) = -n(pi - phi, theta), i.e. cell (n_phi-1-i, j) with
// rho -> -rho; stepping past a pole gives n(phi + pi, theta) = -n(phi, theta), i.e. phi index
// i -/+ n_phi with rho -> -rho.
// Ball: ring i keeps phi_i and has n_i = max(1, floor(n_theta * sin(phi_i) + 0.5)) cells with
// theta_ij = (j + 0.5) pi / n_i; cells are numbered ring by ring. n_theta is the cell count of the
// equator ring: n_theta = n_phi gives square cells (about 2/pi of the grid's cells), n_theta =
// 2 n_phi is Borrmann et al.'s ring length.
// The unit normals of either layout come from plane_normals(): float64 trigonometry on the host,
// rounded once to float32; both backends read that same table.
//
// Rho bins. n_rho = max(1, floor(2 rho_max / rho_step + 0.5)) (float64), so the effective step is
// 2 rho_max / n_rho and the bins tile [-rho_max, rho_max) symmetrically: bin b <-> bin n_rho-1-b
// under rho -> -rho. In float32, with fma rounding once: each coordinate is first scaled to bins
// (once per point, so a vote costs three fused multiply-adds and the CUDA bin one more add),
//   x' = x * scale, y' = y * scale, z' = z * scale,   scale = float32(n_rho / (2 rho_max))
//   t   = fma(nz, z', fma(ny, y', fma(nx, x', f))),   f = n_rho / 2 - floor(n_rho / 2) (0 or 1/2)
//   bin = floor(t) + floor(n_rho / 2) when that is in [0, n_rho); otherwise (rho out of range)
//         no vote.
// t is rho / step + f, so bin = floor(rho / step + n_rho / 2) up to float32 rounding.
// Points with a NaN/Inf coordinate, points past lengths[b] and, when weighted, points with a
// non-finite weight cast no vote.
//
// Results are identical on CPU and CUDA, bit for bit: counts are integers, and every weighted bin
// is the float32 sum of its weights in point order on both backends.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "common/portable_math.h"

namespace pointops {
namespace hough_detail {

enum class PlaneLayout { kGrid, kBall };

// Rho binning as both kernels evaluate it (see above).
struct RhoBinning {
  float scale;         // float32(n_rho / (2 rho_max))
  float frac;          // n_rho / 2 - floor_half: 0 or 0.5, exact
  int32_t floor_half;  // floor(n_rho / 2)
  int32_t n_rho;
};

// A coordinate in rho bins (x' above).
POINTOPS_HOST_DEVICE inline float to_bins(float v, const RhoBinning& binning) { return multiply(v, binning.scale); }

// The rho bin of the point (x', y', z') (coordinates already to_bins) for normal (nx, ny, nz);
// n_rho means "no vote", which the CUDA kernels use as a discard row instead of a branch.
POINTOPS_HOST_DEVICE inline int32_t rho_bin(float nx, float ny, float nz, float x, float y, float z,
                                            const RhoBinning& binning) {
  const float t = fused_multiply_add(nz, z, fused_multiply_add(ny, y, fused_multiply_add(nx, x, binning.frac)));
  // floor(t) and both bounds are integers of at most 2^24 in magnitude: exact in float32.
  const float f = floor_value(t);
  const float low = -static_cast<float>(binning.floor_half);
  const float high = static_cast<float>(binning.n_rho - binning.floor_half);
  return (f >= low && f < high) ? static_cast<int32_t>(f) + binning.floor_half : binning.n_rho;
}

// The rho binning of (rho_step, rho_max), both checked (finite, > 0, at most 2^24 bins).
// Defined in planes_cpu.cpp, like the two below.
RhoBinning rho_binning(double rho_step, double rho_max);

// Checks shared by both backends; returns the rho binning.
RhoBinning check_planes_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta, double rho_step,
                             double rho_max);

// (M, 3) float32 CPU tensor of the layout's unit normals, in accumulator order.
at::Tensor plane_normals(PlaneLayout layout, int64_t n_phi, int64_t n_theta);

// Cells of the equal-area ball with these arguments.
int64_t ball_cell_count(int64_t n_phi, int64_t n_theta);

// Output shape for a batch of `batch` clouds.
std::vector<int64_t> planes_output_shape(PlaneLayout layout, int64_t batch, int64_t n_phi, int64_t n_theta,
                                         int64_t n_rho);

}  // namespace hough_detail
}  // namespace pointops
