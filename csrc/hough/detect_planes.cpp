// detect_planes: the multi-plane detector, one op whose kernel is written once here and runs on
// every device. It is made of the plane ops, called through the dispatcher (so each runs its CPU
// or CUDA kernel), and a few ATen ops; nothing is read back to the host and every size comes from
// the arguments, so a CUDA call can be captured in a CUDA graph (after a first call has made the
// plane tables, plane_tables.h).
//
// detect_planes(points, lengths?, k, n_phi, n_theta, rho_step, rho_max, distance_threshold,
//               min_inliers, min_votes=1, peak_radius=2, iterations=1, layout="grid")
//   -> (planes (B, k, 4) float32, votes (B, k) float32, labels (B, N) int64)
// points (B, N, C >= 3) floating (the first three columns, rounded to float32); lengths (B,)
// int64. Points past lengths[b] or with a NaN/Inf coordinate take no part.
//
// One round (rounds = min(iterations, k); round r looks for take_r of the k planes, the first
// k % rounds rounds one more):
//   1. every point still voting votes (hough_planes, or hough_planes_ball for layout "ball");
//   2. plane_detections: the strongest `candidates` peaks as bin-centre planes (4 x take for the
//      grid, 16 x take for the ball, whose peaks have no neighbourhood across cells), at most
//      1024 planes in all;
//   3. after the planes of earlier rounds: plane_suppress at bin resolution (two bins' angle,
//      2 rho_step + distance_threshold), plane_refit in the bands 3, 2, 1, 0.5 x
//      distance_threshold, plane_suppress of what the refit shows to be one plane (1 degree,
//      2 distance_threshold), and plane_refit's inlier counts at distance_threshold: a plane
//      with fewer than max(3, min_inliers x the cloud's valid points) is dropped (NaN);
//   4. the first take_r surviving candidates (in vote order) join the planes, with their votes;
//      before the next round, the points within 2 distance_threshold of a plane stop voting.
// Then every plane is refit in the bands once more, turned to d >= 0, and each point labelled
// with the first plane within distance_threshold.
#include "common/aten.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/all.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/sum.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <tuple>

#include "common/checks.h"
#include "hough/plane_fit.h"
#include "hough/planes.h"

namespace pointops {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kBands[] = {3.0, 2.0, 1.0, 0.5};  // the shrinking refit bands, x distance_threshold

using Accumulate = at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                              int64_t, int64_t, double, double);
using Detect = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t, int64_t, double, double, int64_t, int64_t,
                                                  double);
using Suppress = at::Tensor(const at::Tensor&, double, double);
using Refit = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                                                 double, at::ArrayRef<double>);
using Label = at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&, double);

template <typename Signature>
c10::TypedOperatorHandle<Signature> plane_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// Python's math.radians.
double radians(double degrees) { return degrees * (kPi / 180.0); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> detect_planes_kernel(
    const at::Tensor& points, const std::optional<at::Tensor>& lengths, int64_t k, int64_t n_phi, int64_t n_theta,
    double rho_step, double rho_max, double distance_threshold, double min_inliers, double min_votes,
    int64_t peak_radius, int64_t iterations, c10::string_view layout) {
  check_padded_clouds(points, lengths, "(B, N, C) with C >= 3", 3);
  TORCH_CHECK(layout == "grid" || layout == "ball", "layout must be \"grid\" or \"ball\", got \"", std::string(layout),
              "\"");
  TORCH_CHECK(k >= 0 && k <= plane_fit_detail::kMaxPlanes, "k must be in [0, ", plane_fit_detail::kMaxPlanes, "], got ",
              k);
  TORCH_CHECK(iterations >= 1, "iterations must be >= 1, got ", iterations);
  TORCH_CHECK(std::isfinite(distance_threshold) && distance_threshold > 0,
              "distance_threshold must be finite and > 0, got ", distance_threshold);
  TORCH_CHECK(min_inliers >= 0.0 && min_inliers <= 1.0, "min_inliers must be a share in [0, 1] of the points, got ",
              min_inliers);
  TORCH_CHECK(n_phi >= 1 && n_phi <= 1 << 20, "n_phi must be in [1, 2^20], got ", n_phi);
  TORCH_CHECK(n_theta >= 1 && n_theta <= 1 << 20, "n_theta must be in [1, 2^20], got ", n_theta);
  hough_detail::rho_binning(rho_step, rho_max);  // rho_step and rho_max: finite, > 0, at most 2^24 bins
  check_nonnegative(peak_radius, "peak_radius");
  TORCH_CHECK(!std::isnan(min_votes), "min_votes must not be NaN");

  const c10::OptionalDeviceGuard device_guard(points.device());
  // Nothing here has a gradient: the ops below skip the autograd layer.
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const int64_t batch = points.size(0), n = points.size(1);
  const auto floats = points.options().dtype(at::kFloat);
  if (k == 0) {
    return {at::empty({batch, 0, 4}, floats), at::empty({batch, 0}, floats),
            at::full({batch, n}, -1, points.options().dtype(at::kLong))};
  }
  at::Tensor pts = points.size(2) == 3 ? points : points.narrow(2, 0, 3);
  if (pts.scalar_type() != at::kFloat || !pts.is_contiguous()) pts = pts.to(at::kFloat).contiguous();

  static const auto accumulate_grid = plane_op<Accumulate>("pointops::hough_planes");
  static const auto accumulate_ball = plane_op<Accumulate>("pointops::hough_planes_ball");
  static const auto detect = plane_op<Detect>("pointops::plane_detections");
  static const auto suppress = plane_op<Suppress>("pointops::plane_suppress");
  static const auto refit = plane_op<Refit>("pointops::plane_refit");
  static const auto label = plane_op<Label>("pointops::plane_labels");

  // A plane needs max(3, min_inliers x valid points) inliers (float32, as the comparison below);
  // counted after the first vote is queued, so the GPU starts on it sooner.
  at::Tensor enough;
  auto count_enough = [&] {
    at::Tensor valid = at::isfinite(pts).all(2);
    if (lengths.has_value()) {
      valid = valid.logical_and(at::arange(n, lengths->options()).lt(lengths->unsqueeze(1)));
    }
    return valid.sum(1, /*keepdim=*/true).to(at::kFloat).mul(min_inliers);
  };

  const bool ball = layout == "ball";
  const double bin_angle = 180.0 / static_cast<double>(std::min(n_phi, n_theta));
  const int64_t rounds = std::min(iterations, k);
  at::Tensor planes = at::empty({batch, 0, 4}, floats);
  at::Tensor votes = at::empty({batch, 0}, floats);
  at::Tensor voters = pts;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t take = k / rounds + (r < k % rounds ? 1 : 0);
    const int64_t known = planes.size(1);
    // Extra peaks: one plane's echoes in neighbouring cells are merged below.
    const int64_t candidates = std::max(take, std::min((ball ? 16 : 4) * take, plane_fit_detail::kMaxPlanes - known));
    const at::Tensor acc = (ball ? accumulate_ball : accumulate_grid)
                               .call(voters, lengths, std::nullopt, n_phi, n_theta, rho_step, rho_max);
    auto [found, peak_votes] = detect.call(acc, n_phi, n_theta, rho_step, rho_max, candidates, peak_radius, min_votes);
    if (!enough.defined()) enough = count_enough();
    // One plane peaks in several neighbouring cells (near the poles, on the ball): merge those
    // echoes at bin resolution, refit (bin centres are up to half a bin off), merge what the
    // refit shows to be one plane, and drop planes with too little support; vote order holds.
    at::Tensor every = known > 0 ? at::cat({planes, found}, 1) : found;
    every = suppress.call(every, radians(2.0 * bin_angle), 2.0 * rho_step + distance_threshold);
    every = std::get<0>(refit.call(pts, lengths, every, distance_threshold, kBands));
    every = suppress.call(every, radians(1.0), 2.0 * distance_threshold);
    const at::Tensor support = std::get<1>(refit.call(pts, lengths, every, distance_threshold, {1.0}));
    const at::Tensor weak = support.to(at::kFloat).lt(enough).logical_or(support.lt(3));
    every = at::where(weak.unsqueeze(-1), NAN, every);
    // The first `take` new rows that hold a plane, in order (a stable sort puts them first).
    const at::Tensor fresh = known > 0 ? every.narrow(1, known, candidates) : every;
    const at::Tensor held = fresh.select(2, 3).isnan().logical_not();
    const at::Tensor order =
        std::get<1>(at::sort(held.logical_not().to(at::kByte), /*stable=*/true, 1, false)).narrow(1, 0, take);
    found = at::gather(fresh, 1, order.unsqueeze(-1).expand({batch, take, 4}));
    peak_votes = at::gather(at::where(held, peak_votes, 0.0), 1, order);
    planes = known > 0 ? at::cat({every.narrow(1, 0, known), found}, 1) : found;
    votes = known > 0 ? at::cat({votes, peak_votes}, 1) : peak_votes;
    if (r + 1 < rounds) {
      const at::Tensor on_plane = label.call(pts, lengths, planes, 2.0 * distance_threshold).ge(0);
      voters = at::where(on_plane.unsqueeze(-1), NAN, voters);
    }
  }
  planes = std::get<0>(refit.call(pts, lengths, planes, distance_threshold, kBands));
  // One sign for every plane, the one pointops.scenes' ground truth has: offset >= 0, the normal
  // pointing away from the origin (the sensor); the peaks' half-turn of orientations gives either.
  planes = at::where(planes.narrow(2, 3, 1).lt(0), planes.neg(), planes);
  return {planes, votes, label.call(pts, lengths, planes, distance_threshold)};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CompositeExplicitAutograd, m) { m.impl("detect_planes", &detect_planes_kernel); }

}  // namespace pointops
