// plane_detections on the CPU (rules in plane_detections.h); the argument checks serve both
// backends.
#include "hough/plane_detections.h"

#include <torch/library.h>

#include <vector>

#include "common/checks.h"
#include "hough/plane_tables.h"
#include "hough/planes.h"

namespace pointops {
namespace hough_detail {

PlaneDetectionArgs check_plane_detections_args(const at::Tensor& acc, int64_t n_phi, int64_t n_theta, double rho_step,
                                               double rho_max, int64_t k, int64_t radius, double min_votes) {
  TORCH_CHECK(acc.dim() == 3 || acc.dim() == 4,
              "acc must be a hough_planes grid (B, n_phi, n_theta, n_rho) or a hough_planes_ball "
              "accumulator (B, n_cells, n_rho), got shape ",
              acc.sizes());
  TORCH_CHECK(n_phi >= 1 && n_phi <= 1 << 20, "n_phi must be in [1, 2^20], got ", n_phi);
  TORCH_CHECK(n_theta >= 1 && n_theta <= 1 << 20, "n_theta must be in [1, 2^20], got ", n_theta);
  check_nonnegative(radius, "radius");
  const bool ball = acc.dim() == 3;
  const int64_t n_rho = rho_binning(rho_step, rho_max).n_rho;
  const std::vector<int64_t> expected =
      planes_output_shape(ball ? PlaneLayout::kBall : PlaneLayout::kGrid, acc.size(0), n_phi, n_theta, n_rho);
  TORCH_CHECK(acc.sizes() == at::IntArrayRef(expected), "acc must have shape ", at::IntArrayRef(expected), " (the ",
              ball ? "ball" : "grid", " of n_phi = ", n_phi, ", n_theta = ", n_theta, ", rho_step = ", rho_step,
              ", rho_max = ", rho_max, "), got ", acc.sizes());
  const std::vector<int64_t> box = ball ? std::vector<int64_t>{0, radius} : std::vector<int64_t>(3, radius);
  c10::List<bool> periodic;
  for (size_t d = 0; d < box.size(); ++d) periodic.push_back(false);
  return {check_peaks_args(acc, box, periodic, min_votes, k, !ball), ball, n_rho};
}

}  // namespace hough_detail

namespace {

using namespace hough_detail;

std::tuple<at::Tensor, at::Tensor> plane_detections_cpu(const at::Tensor& acc, int64_t n_phi, int64_t n_theta,
                                                        double rho_step, double rho_max, int64_t k, int64_t radius,
                                                        double min_votes) {
  const PlaneDetectionArgs args =
      check_plane_detections_args(acc, n_phi, n_theta, rho_step, rho_max, k, radius, min_votes);
  const at::Tensor a = acc.contiguous();
  const at::Tensor top = top_peak_keys(peak_keys_cpu(a, args.grid), k);
  const int64_t batch = a.size(0);
  at::Tensor planes = at::empty({batch, k, 4}, a.options().dtype(at::kFloat));
  at::Tensor votes = at::empty({batch, k}, a.options().dtype(at::kFloat));
  if (batch * k == 0) return {planes, votes};
  const at::Tensor normals = plane_cell_normals(args.ball, n_phi, n_theta, a.device(), false);
  const at::Tensor rho = plane_rho_centres(args.n_rho, rho_max, a.device(), false);
  const int64_t* keys = top.data_ptr<int64_t>();
  const float* normal_ptr = normals.data_ptr<float>();
  const float* rho_ptr = rho.data_ptr<float>();
  float* plane_ptr = planes.data_ptr<float>();
  float* vote_ptr = votes.data_ptr<float>();
  const bool float_votes = a.scalar_type() == at::kFloat;
  for (int64_t i = 0; i < batch * k; ++i) {
    decode_plane_key(keys[i], normal_ptr, rho_ptr, args.n_rho, float_votes, plane_ptr + 4 * i, vote_ptr + i);
  }
  return {planes, votes};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("plane_detections", &plane_detections_cpu); }

}  // namespace pointops
