// Rigid transforms and ICP on the CPU: the twin of icp_cuda.cu (rules in icp.h). The sums
// replay the CUDA blocks' lanes and their reduction tree (combine_lanes), so they round
// identically.
#include "geometry/icp.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "geometry/grid_cpu.h"
#include "geometry/knn.h"

namespace pointops {
namespace icp_detail {

void check_poses(const at::Tensor& poses, const at::Tensor& points, const char* points_name) {
  check_dim(poses, "poses", 4, "(B, H, 4, 4)");
  TORCH_CHECK(poses.scalar_type() == at::kFloat || poses.scalar_type() == at::kDouble,
              "poses must be float32 or float64, got ", poses.scalar_type());
  TORCH_CHECK(poses.size(0) == points.size(0) && poses.size(2) == 4 && poses.size(3) == 4,
              "poses must have shape (B, H, 4, 4) with B = ", points.size(0), " (as ", points_name, "), got shape ",
              poses.sizes());
  check_same_device(poses, "poses", points, points_name);
}

// The clouds icp takes: sources (B, N, 3) with their lengths, targets (B, M, 3).
static void check_icp_clouds(const at::Tensor& sources, const std::optional<at::Tensor>& query_lengths,
                             const at::Tensor& targets) {
  check_dim(sources, "sources", 3, "(B, N, 3)");
  check_floating(sources, "sources");
  TORCH_CHECK(sources.size(2) == 3, "sources must have shape (B, N, 3), got shape ", sources.sizes());
  check_optional_batch_vector(query_lengths, "query_lengths", sources.size(0), sources, "sources");
  check_dim(targets, "targets", 3, "(B, M, 3)");
  check_floating(targets, "targets");
  TORCH_CHECK(targets.size(0) == sources.size(0) && targets.size(2) == 3,
              "targets must have shape (B, M, 3) with B = ", sources.size(0), " (as sources), got shape ",
              targets.sizes());
  check_same_device(targets, "targets", sources, "sources");
}

FitInputs prepare_fit_inputs(const at::Tensor& sources, const std::optional<at::Tensor>& source_normals,
                             const std::optional<at::Tensor>& query_lengths, const at::Tensor& targets,
                             const std::optional<at::Tensor>& target_normals, const std::optional<at::Tensor>& lengths,
                             const at::Tensor& poses, int64_t iterations, double max_correspondence_distance,
                             double tolerance, bool point_to_plane, std::optional<double> max_normal_angle,
                             std::optional<at::ArrayRef<double>> viewpoint, bool centered,
                             std::optional<double> max_step_angle, std::optional<double> max_step_translation) {
  check_icp_clouds(sources, query_lengths, targets);
  check_optional_batch_vector(lengths, "lengths", sources.size(0), sources, "sources");
  check_fits_int32(targets.size(1), "targets.size(1) (targets per cloud)");
  check_poses(poses, sources, "sources");
  TORCH_CHECK(iterations >= 0, "iterations must be >= 0, got ", iterations);
  TORCH_CHECK(max_correspondence_distance >= 0, "max_correspondence_distance must be >= 0, got ",
              max_correspondence_distance);
  TORCH_CHECK(tolerance >= 0, "tolerance must be >= 0, got ", tolerance);
  const bool check_normals = max_normal_angle.has_value();
  if (check_normals) {
    TORCH_CHECK(*max_normal_angle >= 0, "max_normal_angle must be >= 0 (radians) or None, got ", *max_normal_angle);
  }
  const bool check_facing = viewpoint.has_value();
  if (check_facing) {
    TORCH_CHECK(viewpoint->size() == 3, "viewpoint must have 3 values [x, y, z], got ", viewpoint->size(), ": ",
                *viewpoint);
    TORCH_CHECK(std::isfinite((*viewpoint)[0]) && std::isfinite((*viewpoint)[1]) && std::isfinite((*viewpoint)[2]),
                "viewpoint must be finite, got ", *viewpoint);
  }
  if (max_step_angle.has_value()) {
    TORCH_CHECK(*max_step_angle >= 0, "max_step_angle must be >= 0 (radians) or None, got ", *max_step_angle);
  }
  if (max_step_translation.has_value()) {
    TORCH_CHECK(*max_step_translation >= 0, "max_step_translation must be >= 0 or None, got ", *max_step_translation);
  }
  // Normals are checked whenever given, and kept where a rule reads them.
  const bool need_target_normals = point_to_plane || check_normals;
  TORCH_CHECK(!need_target_normals || target_normals.has_value(), "target_normals are required for ",
              point_to_plane ? "point-to-plane ICP" : "max_normal_angle");
  if (target_normals.has_value()) {
    check_dtype(*target_normals, "target_normals (the dtype of targets)", targets.scalar_type());
    check_shape(*target_normals, "target_normals", targets.sizes());
    check_same_device(*target_normals, "target_normals", sources, "sources");
  }
  const bool need_source_normals = check_normals || check_facing;
  TORCH_CHECK(!need_source_normals || source_normals.has_value(), "source_normals are required for ",
              check_normals ? "max_normal_angle" : "viewpoint");
  if (source_normals.has_value()) {
    check_dtype(*source_normals, "source_normals (the dtype of sources)", sources.scalar_type());
    check_shape(*source_normals, "source_normals", sources.sizes());
    check_same_device(*source_normals, "source_normals", sources, "sources");
  }
  auto widen = [](const at::Tensor& t) {
    return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat).contiguous()
                                                                            : t.contiguous();
  };
  FitInputs in;
  in.sources = widen(sources);
  in.source_normals = need_source_normals ? widen(*source_normals) : at::Tensor();
  in.targets = widen(targets);
  in.target_normals = need_target_normals ? widen(*target_normals) : at::Tensor();
  in.poses = poses.contiguous();
  in.query_lengths = contiguous_lengths(query_lengths);
  in.lengths = contiguous_lengths(lengths);
  in.batch = sources.size(0);
  in.n = sources.size(1);
  in.m = targets.size(1);
  in.hypotheses = poses.size(1);
  in.plane = point_to_plane;
  FitRules& r = in.rules;
  r.iterations = iterations;
  r.max_distance = max_correspondence_distance;
  r.max_d2 = multiply(max_correspondence_distance, max_correspondence_distance);
  r.tolerance = tolerance;
  r.check_normals = check_normals;
  r.normal_cosine = check_normals ? std::cos(*max_normal_angle) : -1.0;
  r.check_facing = check_facing;
  for (int d = 0; d < 3; ++d) r.viewpoint[d] = check_facing ? (*viewpoint)[d] : 0.0;
  r.centered = centered;
  constexpr double kPi = 3.14159265358979323846;
  r.max_chord = max_step_angle.has_value() && *max_step_angle < kPi ? 2.0 * std::sin(0.5 * *max_step_angle)
                                                                    : std::numeric_limits<double>::infinity();
  r.max_shift = max_step_translation.has_value() ? *max_step_translation : std::numeric_limits<double>::infinity();
  return in;
}

}  // namespace icp_detail

namespace {

using namespace icp_detail;

at::Tensor transform_points_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                const at::Tensor& poses) {
  check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3);
  check_poses(poses, points, "points");
  const int64_t batch = points.size(0), n = points.size(1), h = poses.size(1);
  const auto out_type = points.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor moved = at::empty({batch, h, n, 3}, points.options().dtype(out_type));
  if (moved.numel() == 0) return moved;
  const at::Tensor pts = points.contiguous();
  const at::Tensor pose = poses.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "transform_points_cpu", [&] {
    using point_t = scalar_t;
    using out_t = std::conditional_t<std::is_same_v<point_t, double>, double, float>;
    AT_DISPATCH_FLOATING_TYPES(pose.scalar_type(), "transform_points_cpu", [&] {
      const point_t* src = pts.data_ptr<point_t>();
      const scalar_t* pose_ptr = pose.data_ptr<scalar_t>();
      out_t* out = moved.data_ptr<out_t>();
      at::parallel_for(0, batch * h * n, 4096, [&](int64_t first, int64_t last) {
        for (int64_t row = first; row < last; ++row) {
          const int64_t bh = row / n, i = row - bh * n, b = bh / h;
          out_t* o = out + 3 * row;
          if (i >= cloud_length(lengths_c.data, b, n)) {
            o[0] = o[1] = o[2] = out_t(0);
            continue;
          }
          const Pose p = load_pose(pose_ptr + 16 * bh);
          const point_t* s = src + 3 * (b * n + i);
          const double x[3] = {static_cast<double>(s[0]), static_cast<double>(s[1]), static_cast<double>(s[2])};
          double y[3];
          apply(p, x, y);
          for (int d = 0; d < 3; ++d) o[d] = static_cast<out_t>(y[d]);
        }
      });
    });
  });
  return moved;
}

// Every hypothesis goes through the passes in lockstep: a pass first finds the correspondences of
// all (hypothesis, source) rows in parallel, then sums each hypothesis's terms in icp.h's lane
// order (hypotheses in parallel), so one hypothesis of many sources uses every core too.
template <bool kPlane, typename src_t, typename tgt_t, typename pose_t, typename stat_t>
void fit_cpu_typed(const FitInputs& in, const std::vector<neighbors::CpuGrid<tgt_t>>& grids, at::Tensor& poses_out,
                   at::Tensor& rmse, at::Tensor& fraction, at::Tensor& converged_out) {
  constexpr int kTerms = kPlane ? kPlaneTerms : kPointTerms;
  const FitRules rules = in.rules;
  const src_t* sources = in.sources.data_ptr<src_t>();
  const src_t* source_normals = in.source_normals.defined() ? in.source_normals.data_ptr<src_t>() : nullptr;
  const tgt_t* targets = in.targets.data_ptr<tgt_t>();
  const tgt_t* target_normals = in.target_normals.defined() ? in.target_normals.data_ptr<tgt_t>() : nullptr;
  const pose_t* poses_in = in.poses.data_ptr<pose_t>();
  pose_t* poses_next = poses_out.data_ptr<pose_t>();
  stat_t* rmse_ptr = rmse.data_ptr<stat_t>();
  stat_t* fraction_ptr = fraction.data_ptr<stat_t>();
  bool* converged_ptr = converged_out.data_ptr<bool>();
  const int64_t n = in.n, m = in.m, h = in.hypotheses, count = in.batch * h;
  std::vector<Pose> pose(static_cast<size_t>(count));
  std::vector<double> origin(static_cast<size_t>(3 * count), 0.0);
  std::vector<char> finite(static_cast<size_t>(count)), stopped(static_cast<size_t>(count), 0),
      runs(static_cast<size_t>(count));
  std::vector<int32_t> matches(static_cast<size_t>(count * n));
  for (int64_t bh = 0; bh < count; ++bh) {
    finite[bh] = pose_finite(poses_in + 16 * bh);
    if (finite[bh]) pose[bh] = load_pose(poses_in + 16 * bh);
  }
  for (int64_t pass = 0; pass <= rules.iterations; ++pass) {
    const bool update = pass < rules.iterations;
    bool any = false;
    for (int64_t bh = 0; bh < count; ++bh) {
      runs[bh] = finite[bh] && !(update && stopped[bh]);
      any = any || runs[bh];
      for (int d = 0; d < 3; ++d) origin[3 * bh + d] = rules.centered ? pose[bh].t[d] : 0.0;
    }
    if (!any) continue;
    at::parallel_for(0, count * n, 256, [&](int64_t first, int64_t last) {
      for (int64_t row = first; row < last; ++row) {
        const int64_t bh = row / n, i = row - bh * n, b = bh / h;
        if (!runs[bh] || i >= cloud_length(in.query_lengths.data, b, n)) continue;
        const neighbors::CpuGrid<tgt_t>* grid = grids.empty() ? nullptr : &grids[b];
        matches[row] = fit_match(
            pose[bh], rules, sources + 3 * (b * n + i),
            source_normals != nullptr ? source_normals + 3 * (b * n + i) : nullptr, targets + 3 * b * m,
            target_normals != nullptr ? target_normals + 3 * b * m : nullptr, grid != nullptr ? &grid->grid : nullptr,
            grid != nullptr ? grid->cell_start.data() : nullptr, grid != nullptr ? grid->points.data() : nullptr);
      }
    });
    at::parallel_for(0, count, 1, [&](int64_t first, int64_t last) {
      std::vector<double> lanes(static_cast<size_t>(kLanes * kTerms));
      for (int64_t bh = first; bh < last; ++bh) {
        if (!runs[bh]) continue;
        const int64_t b = bh / h;
        const int64_t length = cloud_length(in.query_lengths.data, b, n);
        std::fill(lanes.begin(), lanes.end(), 0.0);
        // Source i goes to lane i % kLanes, each lane in increasing order (the CUDA block's lanes).
        for (int64_t i = 0; i < length; ++i) {
          add_fit_terms<kPlane>(pose[bh], origin.data() + 3 * bh, rules.centered, sources + 3 * (b * n + i),
                                matches[bh * n + i], targets + 3 * b * m,
                                target_normals != nullptr ? target_normals + 3 * b * m : nullptr,
                                lanes.data() + (i % kLanes) * kTerms);
        }
        combine_lanes(lanes.data(), kTerms);
        if (update) {
          stopped[bh] = fit_update<kPlane>(lanes.data(), origin.data() + 3 * bh, rules, &pose[bh]);
        } else {
          fit_statistics(lanes.data(), rmse_ptr + bh, fraction_ptr + bh);
        }
      }
    });
  }
  for (int64_t bh = 0; bh < count; ++bh) {
    if (finite[bh]) {
      store_pose(pose[bh], poses_next + 16 * bh);
      converged_ptr[bh] = stopped[bh] != 0;
    } else {
      std::copy(poses_in + 16 * bh, poses_in + 16 * bh + 16, poses_next + 16 * bh);
      rmse_ptr[bh] = fraction_ptr[bh] = stat_t(0);
      converged_ptr[bh] = false;
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> icp_cpu(
    const at::Tensor& sources, const std::optional<at::Tensor>& source_normals,
    const std::optional<at::Tensor>& query_lengths, const at::Tensor& targets,
    const std::optional<at::Tensor>& target_normals, const std::optional<at::Tensor>& lengths, const at::Tensor& poses,
    int64_t iterations, double max_correspondence_distance, double tolerance, bool point_to_plane,
    std::optional<double> max_normal_angle, std::optional<at::ArrayRef<double>> viewpoint, bool centered,
    std::optional<double> max_step_angle, std::optional<double> max_step_translation) {
  const FitInputs in = prepare_fit_inputs(sources, source_normals, query_lengths, targets, target_normals, lengths,
                                          poses, iterations, max_correspondence_distance, tolerance, point_to_plane,
                                          max_normal_angle, viewpoint, centered, max_step_angle, max_step_translation);
  at::Tensor poses_out, rmse, fraction, converged;
  std::tie(poses_out, rmse, fraction, converged) = empty_pose_outputs(sources, in.poses, in.batch, in.hypotheses);
  if (in.batch * in.hypotheses == 0) return {poses_out, rmse, fraction, converged};
  AT_DISPATCH_FLOATING_TYPES(in.sources.scalar_type(), "icp_cpu", [&] {
    using src_t = scalar_t;
    using stat_t = std::conditional_t<std::is_same_v<src_t, double>, double, float>;
    AT_DISPATCH_FLOATING_TYPES(in.targets.scalar_type(), "icp_cpu", [&] {
      using tgt_t = scalar_t;
      std::vector<neighbors::CpuGrid<tgt_t>> grids;
      if (in.m > 0) {
        const int64_t cell_points = neighbors::knn_cell_points(1);
        grids = neighbors::build_grids_cpu(in.targets.data_ptr<tgt_t>(),
                                           neighbors::CloudRows{in.lengths.data, in.batch, in.m, false}, 0.0,
                                           neighbors::CellBudget{1, cell_points}, static_cast<double>(cell_points));
      }
      AT_DISPATCH_FLOATING_TYPES(in.poses.scalar_type(), "icp_cpu", [&] {
        if (in.plane) {
          fit_cpu_typed<true, src_t, tgt_t, scalar_t, stat_t>(in, grids, poses_out, rmse, fraction, converged);
        } else {
          fit_cpu_typed<false, src_t, tgt_t, scalar_t, stat_t>(in, grids, poses_out, rmse, fraction, converged);
        }
      });
    });
  });
  return {poses_out, rmse, fraction, converged};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("transform_points", &transform_points_cpu);
  m.impl("icp", &icp_cpu);
}

}  // namespace pointops
