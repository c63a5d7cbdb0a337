// Tables of the plane ops that depend on their arguments only (orientation normals, rho-bin
// centres), made once per (table, arguments, device) and kept for the life of the process.
//
// Why a cache: a call then builds no host tensor and copies nothing to the device, so the ops
// (and detect_planes, which is made of them) can be captured in a CUDA graph. The first call for
// a given grid builds its tables and copies them to the device; a capture cannot do that (host
// allocations and host-to-device copies are not capturable), so a first call during a capture is
// refused with a message that says to call once before capturing, as torch.cuda.graphs asks of
// every warm-up anyway. Entries are never evicted: a captured graph keeps reading the device
// copies it was captured with.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <functional>
#include <string>

namespace pointops {
namespace hough_detail {

// The table `key` on `device`. build() makes it on the CPU (contiguous) the first time the key is
// asked for; a CUDA device gets one copy of it, made on a pool stream and waited for (so it is
// ready for every stream). `capturing`: the caller's CUDA stream is being captured (only the .cu
// entry points can tell).
at::Tensor cached_table(const std::string& key, const at::Device& device, bool capturing,
                        const std::function<at::Tensor()>& build);

// The bin-centre planes of hough_peaks' bins, as pointops.hough.planes.peaks_to_planes and
// ball_peaks_to_planes compute them (float64 trigonometry by the same ATen CPU kernels, in the
// same order), rounded once to float32:
//   plane_cell_normals  (M, 3) float32, the unit normal of each orientation cell, accumulator
//                       order (M = n_phi n_theta for the grid, the ball's cell count for the ball);
//   plane_rho_centres   (n_rho,) float32, (r + 0.5) (2 rho_max / n_rho) - rho_max.
// (The vote kernels' normals, plane_normals() in planes.h, are another float32 rounding of the
// same angles, made with the C library's sin / cos.)
at::Tensor plane_cell_normals(bool ball, int64_t n_phi, int64_t n_theta, const at::Device& device, bool capturing);
at::Tensor plane_rho_centres(int64_t n_rho, double rho_max, const at::Device& device, bool capturing);

}  // namespace hough_detail
}  // namespace pointops
