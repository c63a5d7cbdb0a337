// Normals and curvature on the CPU: the twin of normals_cuda.cu. Both call point_normal()
// (normals.h) for every point, so they run the same float64 arithmetic.
#include "geometry/normals.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <type_traits>

#include "common/checks.h"

namespace pointops {
namespace normals_detail {

NormalsInputs prepare_normals_inputs(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                     const at::Tensor& neighbors, const std::optional<at::Tensor>& viewpoints,
                                     int64_t orientation) {
  check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3);
  check_dim(neighbors, "neighbors", 3, "(B, N, K)");
  check_dtype(neighbors, "neighbors", at::kLong);
  TORCH_CHECK(neighbors.size(0) == points.size(0) && neighbors.size(1) == points.size(1),
              "neighbors must have shape (B, N, K) with B, N = ", points.size(0), ", ", points.size(1),
              " (as points), got shape ", neighbors.sizes());
  check_same_device(neighbors, "neighbors", points, "points");
  TORCH_CHECK(orientation >= kNone && orientation <= kAwayFromViewpoint,
              "orientation must be 0 (none), 1 (toward the viewpoint) or 2 (away from it), got ", orientation);
  at::Tensor view;
  if (viewpoints.has_value()) {
    check_floating(*viewpoints, "viewpoints");
    check_shape(*viewpoints, "viewpoints", {points.size(0), 3});
    check_same_device(*viewpoints, "viewpoints", points, "points");
    view = viewpoints->to(at::kDouble).contiguous();
  } else {
    view = at::zeros({points.size(0), 3}, points.options().dtype(at::kDouble));
  }
  return {points.contiguous(), neighbors.contiguous(), view,       contiguous_lengths(lengths), points.size(0),
          points.size(1),      neighbors.size(2),      orientation};
}

}  // namespace normals_detail

namespace {

using namespace normals_detail;

constexpr int64_t kPointsPerTask = 2048;

std::tuple<at::Tensor, at::Tensor> estimate_normals_cpu(const at::Tensor& points,
                                                        const std::optional<at::Tensor>& lengths,
                                                        const at::Tensor& neighbors,
                                                        const std::optional<at::Tensor>& viewpoints,
                                                        int64_t orientation) {
  const NormalsInputs in = prepare_normals_inputs(points, lengths, neighbors, viewpoints, orientation);
  const auto out_type = points.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor normals = at::empty({in.batch, in.n, 3}, points.options().dtype(out_type));
  at::Tensor curvature = at::empty({in.batch, in.n}, points.options().dtype(out_type));
  if (in.batch * in.n == 0) return {normals, curvature};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.points.scalar_type(), "estimate_normals_cpu", [&] {
    using out_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* pts = in.points.data_ptr<scalar_t>();
    const int64_t* nbr = in.neighbors.data_ptr<int64_t>();
    const double* view = in.viewpoints.data_ptr<double>();
    out_t* normal_out = normals.data_ptr<out_t>();
    out_t* curvature_out = curvature.data_ptr<out_t>();
    at::parallel_for(0, in.batch * in.n, kPointsPerTask, [&](int64_t first, int64_t last) {
      for (int64_t p = first; p < last; ++p) {
        const int64_t b = p / in.n;
        double normal[3], curv;
        point_normal<scalar_t>(pts + 3 * b * in.n, cloud_length(in.lengths.data, b, in.n), p - b * in.n, nbr + p * in.k,
                               in.k, view + 3 * b, in.orientation, normal, &curv);
        for (int d = 0; d < 3; ++d) normal_out[3 * p + d] = static_cast<out_t>(normal[d]);
        curvature_out[p] = static_cast<out_t>(curv);
      }
    });
  });
  return {normals, curvature};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("estimate_normals", &estimate_normals_cpu); }

}  // namespace pointops
