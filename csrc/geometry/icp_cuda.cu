// Rigid transforms and the ICP step on CUDA (rules in icp.h; the CPU twin is icp_cpu.cpp).
//
// transform_points: one thread per output row (B * H * N), float64 arithmetic, memory-bound.
//
// icp_step: one block of kLanes = 256 threads per hypothesis. Thread l is lane l of icp.h's
// fixed-order sums: it adds the terms of sources l, l + 256, ... in float64 registers; the lanes
// of each warp are combined by shuffle-down (s = 16 .. 1), the 8 warp totals by a fixed tree in
// shared memory, and thread 0 solves the 4x4 (Horn) or 6x6 (point-to-plane) system and writes the
// pose, so the result is the CPU kernel's to the bit. No atomics, no host sync.
// What bounds it: per source one 12-byte source read, one 8-byte index read and a dependent
// 12-byte gather of the target (and normal) row, then ~60 (point-to-point) or ~120
// (point-to-plane) float64 operations; with N = 10,000 a thread handles ~40 sources, so a step
// is a few microseconds of latency per hypothesis, and the B * H blocks (16 at the bench's size)
// leave most SMs idle: the step is latency-bound, and the ICP loop's cost is the kNN search.
// The final solve is one thread's serial float64 work (10 Jacobi sweeps of a 4x4, or a 6x6
// elimination), a few microseconds.
#include "geometry/icp.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <type_traits>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "geometry/grid_cuda.cuh"

namespace pointops {
namespace {

using namespace icp_detail;

constexpr int kTransformThreads = 256;

template <typename point_t, typename pose_t, typename out_t>
__global__ void transform_kernel(const point_t* __restrict__ points, const int64_t* __restrict__ lengths,
                                 const pose_t* __restrict__ poses, int64_t n, int64_t h, int64_t rows,
                                 out_t* __restrict__ out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int64_t bh = row / n, i = row - bh * n, b = bh / h;
  out_t* o = out + 3 * row;
  if (i >= cloud_length(lengths, b, n)) {
    o[0] = o[1] = o[2] = out_t(0);
    return;
  }
  const Pose p = load_pose(poses + 16 * bh);
  const point_t* s = points + 3 * (b * n + i);
  const double x[3] = {static_cast<double>(s[0]), static_cast<double>(s[1]), static_cast<double>(s[2])};
  double y[3];
  apply(p, x, y);
  for (int d = 0; d < 3; ++d) o[d] = static_cast<out_t>(y[d]);
}

at::Tensor transform_points_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                 const at::Tensor& poses) {
  check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3);
  check_poses(poses, points, "points");
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  const int64_t batch = points.size(0), n = points.size(1), h = poses.size(1);
  const auto out_type = points.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor moved = at::empty({batch, h, n, 3}, points.options().dtype(out_type));
  const int64_t rows = batch * h * n;
  if (rows == 0) return moved;
  const at::Tensor pts = points.contiguous();
  const at::Tensor pose = poses.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(rows, kTransformThreads));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "transform_points_cuda", [&] {
    using point_t = scalar_t;
    using out_t = std::conditional_t<std::is_same_v<point_t, double>, double, float>;
    AT_DISPATCH_FLOATING_TYPES(pose.scalar_type(), "transform_points_cuda", [&] {
      transform_kernel<point_t, scalar_t, out_t><<<blocks, kTransformThreads, 0, stream>>>(
          pts.data_ptr<point_t>(), lengths_c.data, pose.data_ptr<scalar_t>(), n, h, rows, moved.data_ptr<out_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return moved;
}

template <bool kPlane, typename src_t, typename tgt_t, typename pose_t, typename stat_t>
__global__ void __launch_bounds__(kLanes) icp_step_kernel(
    const src_t* __restrict__ sources, const int64_t* __restrict__ lengths, const tgt_t* __restrict__ targets,
    const tgt_t* __restrict__ normals, const pose_t* __restrict__ poses, const int64_t* __restrict__ indices,
    const bool* __restrict__ converged, int64_t n, int64_t m, int64_t h, double max_d2, double tolerance,
    bool update, pose_t* __restrict__ poses_out, stat_t* __restrict__ rmse, stat_t* __restrict__ fraction,
    bool* __restrict__ converged_out) {
  constexpr int kTerms = kPlane ? kPlaneTerms : kPointTerms;
  __shared__ double group_sums[kGroups][kTerms];
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / h;
  const int lane = threadIdx.x;
  const int64_t length = cloud_length(lengths, b, n);
  const Pose pose = load_pose(poses + 16 * bh);
  double acc[kTerms];
#pragma unroll
  for (int j = 0; j < kTerms; ++j) acc[j] = 0.0;
  for (int64_t i = lane; i < length; i += kLanes) {
    const int64_t t = indices[bh * n + i];
    const bool matched = t >= 0 && t < m;
    const tgt_t* target = matched ? targets + 3 * (b * m + t) : nullptr;
    const tgt_t* normal = matched ? normals + 3 * (b * m + t) : nullptr;
    add_terms<kPlane>(pose, sources + 3 * (b * n + i), target, normal, max_d2, acc);
  }
  // Within the warp: lane t adds lane t + s, s = 16 .. 1 (combine_lanes' first stage).
#pragma unroll
  for (int j = 0; j < kTerms; ++j) {
    double v = acc[j];
#pragma unroll
    for (int s = kGroup / 2; s >= 1; s /= 2) v = add(v, __shfl_down_sync(cuda::kFullMask, v, s));
    acc[j] = v;
  }
  const int warp = lane / kGroup;
  if (lane % kGroup == 0) {
#pragma unroll
    for (int j = 0; j < kTerms; ++j) group_sums[warp][j] = acc[j];
  }
  __syncthreads();
  if (lane != 0) return;
  // The warp totals: group g adds group g + s, s = 4, 2, 1 (combine_lanes' second stage).
  double sums[kTerms];
  for (int j = 0; j < kTerms; ++j) {
    double g[kGroups];
    for (int w = 0; w < kGroups; ++w) g[w] = group_sums[w][j];
    for (int s = kGroups / 2; s >= 1; s /= 2) {
      for (int w = 0; w < s; ++w) g[w] = add(g[w], g[w + s]);
    }
    sums[j] = g[0];
  }
  finish_step<kPlane>(sums, poses + 16 * bh, converged[bh], tolerance, update, poses_out + 16 * bh, rmse + bh,
                      fraction + bh, converged_out + bh);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> icp_step_cuda(
    const at::Tensor& sources, const std::optional<at::Tensor>& query_lengths, const at::Tensor& targets,
    const std::optional<at::Tensor>& target_normals, const at::Tensor& poses, const at::Tensor& indices,
    const at::Tensor& converged, double max_correspondence_distance, double tolerance, bool point_to_plane,
    bool update) {
  check_device_type(sources, "sources", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(sources.device());
  const StepInputs in = prepare_step_inputs(sources, query_lengths, targets, target_normals, poses, indices,
                                            converged, max_correspondence_distance, tolerance, point_to_plane);
  at::Tensor poses_out, rmse, fraction, converged_out;
  std::tie(poses_out, rmse, fraction, converged_out) = empty_pose_outputs(sources, in.poses, in.batch, in.hypotheses);
  const int64_t blocks = in.batch * in.hypotheses;
  if (blocks == 0) return {poses_out, rmse, fraction, converged_out};
  TORCH_CHECK(blocks <= INT_MAX, "icp_step: B * H must be at most ", INT_MAX, ", got ", blocks);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(in.sources.scalar_type(), "icp_step_cuda", [&] {
    using src_t = scalar_t;
    using stat_t = std::conditional_t<std::is_same_v<src_t, double>, double, float>;
    AT_DISPATCH_FLOATING_TYPES(in.targets.scalar_type(), "icp_step_cuda", [&] {
      using tgt_t = scalar_t;
      AT_DISPATCH_FLOATING_TYPES(in.poses.scalar_type(), "icp_step_cuda", [&] {
        auto launch = [&](auto plane) {
          constexpr bool kPlane = decltype(plane)::value;
          icp_step_kernel<kPlane, src_t, tgt_t, scalar_t, stat_t><<<static_cast<unsigned>(blocks), kLanes, 0, stream>>>(
              in.sources.data_ptr<src_t>(), in.lengths.data, in.targets.data_ptr<tgt_t>(),
              in.normals.data_ptr<tgt_t>(), in.poses.data_ptr<scalar_t>(), in.indices.data_ptr<int64_t>(),
              in.converged.data_ptr<bool>(), in.n, in.m, in.hypotheses, in.max_d2, tolerance, update,
              poses_out.data_ptr<scalar_t>(), rmse.data_ptr<stat_t>(), fraction.data_ptr<stat_t>(),
              converged_out.data_ptr<bool>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        if (point_to_plane) {
          launch(std::true_type{});
        } else {
          launch(std::false_type{});
        }
      });
    });
  });
  return {poses_out, rmse, fraction, converged_out};
}

// icp: one block of kFitThreads threads per hypothesis runs every pass of it. A pass takes the
// sources kFitThreads at a time: each thread finds the correspondence of one (fit_match: the
// bounded nearest-neighbour search in the targets' grid, built once per call by
// grid_cuda.cuh), then threads 0 .. kLanes - 1, icp.h's lanes, add the chunk's terms in lane
// order (lane l: sources l, l + 256, ...); thread 0 combines the lane sums in the fixed tree,
// solves the step and broadcasts the pose through shared memory. The search, not the sums,
// costs: so more threads search than sum.
constexpr int kFitThreads = 2 * kLanes;

template <bool kPlane, typename src_t, typename tgt_t, typename pose_t, typename stat_t>
__global__ void __launch_bounds__(kFitThreads) icp_kernel(
    const src_t* __restrict__ sources, const src_t* __restrict__ source_normals,
    const int64_t* __restrict__ query_lengths, const tgt_t* __restrict__ targets,
    const tgt_t* __restrict__ target_normals, const neighbors::GridCloud* __restrict__ clouds,
    const int32_t* __restrict__ cell_start, const neighbors::SortedPoint<tgt_t>* __restrict__ grid_points,
    const pose_t* __restrict__ poses, int64_t n, int64_t m, int64_t h, FitRules rules,
    pose_t* __restrict__ poses_out, stat_t* __restrict__ rmse, stat_t* __restrict__ fraction,
    bool* __restrict__ converged_out) {
  constexpr int kTerms = kPlane ? kFitPlaneTerms : kPointTerms;
  __shared__ double group_sums[kGroups][kTerms];
  __shared__ double shared_pose[12];
  __shared__ int32_t matches[kFitThreads];
  __shared__ bool shared_stop;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / h;
  const int thread = threadIdx.x;
  const pose_t* pose_in = poses + 16 * bh;
  if (!pose_finite(pose_in)) {  // the same answer in every thread: the block leaves together
    if (thread < 16) poses_out[16 * bh + thread] = pose_in[thread];
    if (thread == 0) {
      rmse[bh] = fraction[bh] = stat_t(0);
      converged_out[bh] = false;
    }
    return;
  }
  const int64_t length = cloud_length(query_lengths, b, n);
  const src_t* src = sources + 3 * b * n;
  const src_t* src_n = source_normals != nullptr ? source_normals + 3 * b * n : nullptr;
  const tgt_t* tgt = targets + 3 * b * m;
  const tgt_t* tgt_n = target_normals != nullptr ? target_normals + 3 * b * m : nullptr;
  const neighbors::GridCloud* grid = clouds != nullptr ? clouds + b : nullptr;
  const bool lane = thread < kLanes;
  Pose pose = load_pose(pose_in);
  bool stopped = false;
  for (int64_t pass = 0; pass <= rules.iterations; ++pass) {
    const bool update = pass < rules.iterations;
    if (update && stopped) continue;  // stopped is the broadcast value: uniform over the block
    double origin[3] = {0.0, 0.0, 0.0};
    if (rules.centered) {
      for (int d = 0; d < 3; ++d) origin[d] = pose.t[d];
    }
    double acc[kTerms];
#pragma unroll
    for (int j = 0; j < kTerms; ++j) acc[j] = 0.0;
    for (int64_t chunk = 0; chunk < length; chunk += kFitThreads) {
      const int64_t i = chunk + thread;
      if (i < length) {
        matches[thread] = fit_match(pose, rules, src + 3 * i, src_n != nullptr ? src_n + 3 * i : nullptr, tgt, tgt_n,
                                    grid, cell_start, grid_points);
      }
      __syncthreads();
      if (lane) {
#pragma unroll
        for (int k = 0; k < kFitThreads / kLanes; ++k) {
          const int64_t j = chunk + k * kLanes + thread;
          if (j < length) {
            add_fit_terms<kPlane>(pose, origin, rules.centered, src + 3 * j, matches[k * kLanes + thread], tgt, tgt_n,
                                  acc);
          }
        }
      }
      __syncthreads();
    }
    if (lane) {
      // Within the warp: lane t adds lane t + s, s = 16 .. 1 (combine_lanes' first stage).
#pragma unroll
      for (int j = 0; j < kTerms; ++j) {
        double v = acc[j];
#pragma unroll
        for (int s = kGroup / 2; s >= 1; s /= 2) v = add(v, __shfl_down_sync(cuda::kFullMask, v, s));
        acc[j] = v;
      }
      if (thread % kGroup == 0) {
#pragma unroll
        for (int j = 0; j < kTerms; ++j) group_sums[thread / kGroup][j] = acc[j];
      }
    }
    __syncthreads();
    if (thread == 0) {
      // The warp totals: group g adds group g + s, s = 4, 2, 1 (combine_lanes' second stage).
      double sums[kTerms];
      for (int j = 0; j < kTerms; ++j) {
        double g[kGroups];
        for (int w = 0; w < kGroups; ++w) g[w] = group_sums[w][j];
        for (int s = kGroups / 2; s >= 1; s /= 2) {
          for (int w = 0; w < s; ++w) g[w] = add(g[w], g[w + s]);
        }
        sums[j] = g[0];
      }
      if (update) {
        shared_stop = fit_update<kPlane>(sums, origin, rules, &pose);
        for (int k = 0; k < 9; ++k) shared_pose[k] = pose.r[k];
        for (int d = 0; d < 3; ++d) shared_pose[9 + d] = pose.t[d];
      } else {
        fit_statistics(sums, rmse + bh, fraction + bh);
      }
    }
    __syncthreads();
    if (update) {
      for (int k = 0; k < 9; ++k) pose.r[k] = shared_pose[k];
      for (int d = 0; d < 3; ++d) pose.t[d] = shared_pose[9 + d];
      stopped = shared_stop;
    }
  }
  if (thread == 0) {
    store_pose(pose, poses_out + 16 * bh);
    converged_out[bh] = stopped;
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> icp_cuda(
    const at::Tensor& sources, const std::optional<at::Tensor>& source_normals,
    const std::optional<at::Tensor>& query_lengths, const at::Tensor& targets,
    const std::optional<at::Tensor>& target_normals, const std::optional<at::Tensor>& lengths, const at::Tensor& poses,
    int64_t iterations, double max_correspondence_distance, double tolerance, bool point_to_plane,
    std::optional<double> max_normal_angle, std::optional<at::ArrayRef<double>> viewpoint, bool centered,
    std::optional<double> max_step_angle, std::optional<double> max_step_translation) {
  check_device_type(sources, "sources", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(sources.device());
  const FitInputs in = prepare_fit_inputs(sources, source_normals, query_lengths, targets, target_normals, lengths,
                                          poses, iterations, max_correspondence_distance, tolerance, point_to_plane,
                                          max_normal_angle, viewpoint, centered, max_step_angle,
                                          max_step_translation);
  at::Tensor poses_out, rmse, fraction, converged;
  std::tie(poses_out, rmse, fraction, converged) = empty_pose_outputs(sources, in.poses, in.batch, in.hypotheses);
  const int64_t blocks = in.batch * in.hypotheses;
  if (blocks == 0) return {poses_out, rmse, fraction, converged};
  TORCH_CHECK(blocks <= INT_MAX, "icp: B * H must be at most ", INT_MAX, ", got ", blocks);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(in.sources.scalar_type(), "icp_cuda", [&] {
    using src_t = scalar_t;
    using stat_t = std::conditional_t<std::is_same_v<src_t, double>, double, float>;
    AT_DISPATCH_FLOATING_TYPES(in.targets.scalar_type(), "icp_cuda", [&] {
      using tgt_t = scalar_t;
      const int64_t total_targets = in.batch * in.m;
      neighbors::grid_cuda::DeviceGrid<tgt_t> grid;
      const bool searched = total_targets > 0;
      if (searched) {
        const int64_t cell_points = neighbors::knn_cell_points(1);
        grid = neighbors::grid_cuda::build_grid<tgt_t>(
            in.targets, neighbors::CloudRows{in.lengths.data, in.batch, in.m, false}, total_targets, 0.0,
            neighbors::CellBudget{1, cell_points}, static_cast<double>(cell_points));
      }
      const src_t* source_normals_ptr = in.source_normals.defined() ? in.source_normals.data_ptr<src_t>() : nullptr;
      const tgt_t* target_normals_ptr = in.target_normals.defined() ? in.target_normals.data_ptr<tgt_t>() : nullptr;
      AT_DISPATCH_FLOATING_TYPES(in.poses.scalar_type(), "icp_cuda", [&] {
        auto launch = [&](auto plane) {
          constexpr bool kPlane = decltype(plane)::value;
          icp_kernel<kPlane, src_t, tgt_t, scalar_t, stat_t><<<static_cast<unsigned>(blocks), kFitThreads, 0, stream>>>(
              in.sources.data_ptr<src_t>(), source_normals_ptr, in.query_lengths.data, in.targets.data_ptr<tgt_t>(),
              target_normals_ptr, searched ? grid.cloud_ptr() : nullptr,
              searched ? grid.cell_start.template data_ptr<int32_t>() : nullptr,
              searched ? grid.point_ptr() : nullptr, in.poses.data_ptr<scalar_t>(), in.n, in.m, in.hypotheses,
              in.rules, poses_out.data_ptr<scalar_t>(), rmse.data_ptr<stat_t>(), fraction.data_ptr<stat_t>(),
              converged.data_ptr<bool>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        if (in.plane) {
          launch(std::true_type{});
        } else {
          launch(std::false_type{});
        }
      });
    });
  });
  return {poses_out, rmse, fraction, converged};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("transform_points", &transform_points_cuda);
  m.impl("icp_step", &icp_step_cuda);
  m.impl("icp", &icp_cuda);
}

}  // namespace pointops
