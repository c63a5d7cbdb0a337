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
  const auto stat_type = sources.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor poses_out = at::empty_like(in.poses);
  at::Tensor rmse = at::empty({in.batch, in.hypotheses}, sources.options().dtype(stat_type));
  at::Tensor fraction = at::empty_like(rmse);
  at::Tensor converged_out = at::empty_like(in.converged);
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

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("transform_points", &transform_points_cuda);
  m.impl("icp_step", &icp_step_cuda);
}

}  // namespace pointops
