// Circle and line detections from 2D Hough maps in one op each: non-maximum suppression, top-k,
// the vote threshold and the decoding to (x, y, r) / (rho, theta), on the maps' device, with no
// host sync. The contract shared by the CPU and CUDA kernels.
//
// circle_detections(scores, radius_index, radii, k, min_distance, threshold?) -> (circles, votes)
//   scores        (B, H, W) int32 or float32: the best score of every centre
//                 (hough_circles_max_points, hough_circles_max_map).
//   radius_index  (B, H, W) int64: the index into radii of that score's radius; read only at the
//                 detected centres, where it must be in [0, R).
//   radii         R ints: radius i of the circles.
//   k >= 0, min_distance >= 0, threshold: a float (not NaN) or None.
//   circles       (B, k, 3) float32 (x, y, r), descending votes; NaN rows past the detections.
//   votes         (B, k) float32: the score of each circle; 0 on the NaN rows.
//   Rules: a centre is a candidate when its score is > 0 and >= m, m = max(threshold, 0) (0
//   without a threshold), and a peak when no centre in the box of half-width min_distance in x
//   and y beats it (hough_peaks' rule: a larger score, or the same and a lower row-major index).
//   The k largest peaks (ties to the lower index) are kept when their float32 score is > float32(m)
//   with a threshold, > 0.5 * float32(max of the image's scores) without; the others become NaN
//   rows (always the last ones: the test is monotone in the score).
//
// line_detections(acc, theta, k, min_distance, min_angle, threshold?, glue) -> (lines, votes)
//   acc           (B, n_rho, T) int32 or float32: a hough_lines_points accumulator; offset = (n_rho-1)/2.
//   theta         T angles: the line of bin (d, j) is x cos(theta_j) + y sin(theta_j) = d - offset.
//   glue          true for the default angles (T over [-pi/2, pi/2)): the angle axis is glued into
//                 a circle as lines are, (rho, theta) = (-rho, theta + pi).
//   lines         (B, k, 2) float32 (rho, theta) (theta rounded from float64), NaN rows past the
//                 detections; votes (B, k) float32, 0 there.
//   Rules: without glue, hough_peaks on acc with the box [min_distance, min(min_angle, T)] and
//   min_votes m = threshold (0 without), the k largest, kept when votes > float32(m), or > 0.5 *
//   float32(max of acc) without a threshold. With glue, the same suppression on the (B, n_rho, 2T)
//   whole turn F = [acc, acc flipped along rho], periodic along the angles, with 2k peaks: bin
//   (d, j) of F with j >= T is the line (n_rho - 1 - d, j - T). Equal votes are ordered as in acc
//   (row-major, rho first), whichever copy a bin is: F's bins are ranked by glued_line_index, so
//   both copies of a line see the same neighbours in the same order and a plateau keeps the bin it
//   keeps without glue (ordering by F's own flat index would reverse rho in the mirrored copy and
//   keep a second bin of the plateau there). Rows that repeat an earlier kept line, or fail the
//   threshold, are dropped, and the first k kept rows come back in order.
//   These are pointops.hough's circle_peaks / line_peaks rules, bit for bit.
//
// Both backends share the generic implementation (hough_peaks and ATen ops, any device; defined
// in detections_cpu.cpp), the CPU's only one. CUDA runs a fused one (detections_cuda.cu), with the
// same results, wherever it applies: at most 1,024 peaks per image (k, or 2k for glued lines) and
// a suppression box small enough for a 32 x 32 tile and its halo to fit 96 KB of shared memory
// (for circles, min_distance <= 29); elsewhere, and for empty maps, the generic one.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <tuple>

#include "common/portable_math.h"

namespace pointops {
namespace hough_images {

// The rank of bin (y, x) of the glued line map F (n_rho x 2 n_theta) among equal votes, lower
// first: the row-major index of the accumulator bin it reads, doubled, plus one in the mirrored
// copy (x >= n_theta), so a bin and its own copy differ too. Below 2^31 (the checks bound
// 2 n_rho n_theta).
POINTOPS_HOST_DEVICE inline uint32_t glued_line_index(int64_t y, int64_t x, int64_t n_rho, int64_t n_theta) {
  return x < n_theta ? static_cast<uint32_t>(2 * (y * n_theta + x))
                     : static_cast<uint32_t>(2 * ((n_rho - 1 - y) * n_theta + (x - n_theta)) + 1);
}

// Checks shared by both backends (they name the argument, the expectation and the value).
void check_circle_detections_args(const at::Tensor& scores, const at::Tensor& radius_index, at::IntArrayRef radii,
                                  int64_t k, int64_t min_distance, std::optional<double> threshold);
void check_line_detections_args(const at::Tensor& acc, at::ArrayRef<double> theta, int64_t k, int64_t min_distance,
                                int64_t min_angle, std::optional<double> threshold);

// The generic implementations (device-agnostic: they run on the tensors' device).
std::tuple<at::Tensor, at::Tensor> circle_detections_generic(const at::Tensor& scores, const at::Tensor& radius_index,
                                                             at::IntArrayRef radii, int64_t k, int64_t min_distance,
                                                             std::optional<double> threshold);
std::tuple<at::Tensor, at::Tensor> line_detections_generic(const at::Tensor& acc, at::ArrayRef<double> theta, int64_t k,
                                                           int64_t min_distance, int64_t min_angle,
                                                           std::optional<double> threshold, bool glue);

}  // namespace hough_images
}  // namespace pointops
