// Rigid transforms and ICP on CUDA (rules in icp.h; the CPU twin is icp_cpu.cpp).
//
// transform_points: one thread per output row (B * H * N), float64 arithmetic, memory-bound.
//
// icp has two launch plans with the same arithmetic, in the same order, so the same bits (the
// CPU kernel's):
// * fused (many hypotheses, or few sources): one block per hypothesis runs all its passes in one
//   launch; a stopped hypothesis skips its remaining steps.
// * wide (fewer hypotheses than the fused blocks the GPU holds at once, each of at least
//   kWideSources sources): a block per hypothesis would leave most SMs idle while its threads
//   walk the sources chunk after chunk, so each pass is two launches instead: every
//   (hypothesis, source) correspondence at once over the whole GPU (fit_match_kernel, the
//   costly part: a grid search per source), then one block per hypothesis sums its terms and
//   steps (fit_sum_kernel). The poses live in float64 on the device between passes; nothing
//   goes back to the host.
// In both, the sums of a hypothesis are those of icp.h's kLanes lanes: thread l adds the terms of
// sources l, l + 256, ... in float64 registers, a warp's lanes are combined by shuffle-down
// (s = 16 .. 1), the 8 warp totals by a fixed tree in thread 0, which solves the 4x4 (Horn) or
// 6x6 (point-to-plane) system. No atomics, no host sync.
// What bounds it: per pass and source a grid search (a few cells of the targets, dependent
// loads) and ~60 (point-to-point) or ~120 (point-to-plane) float64 operations; the search
// dominates, and the wide plan spreads it over every SM. The sums of one hypothesis are latency-
// bound (256 threads each walking N / 256 sources), a few microseconds a pass.
#include "geometry/icp.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <type_traits>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/launch.cuh"
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

// Lanes 0 .. kLanes - 1 of a block hand their sums to thread 0 in icp.h's fixed tree. First
// stage (every lane): within the warp lane t adds lane t + s, s = 16 .. 1, and the warp's first
// lane writes the total to group_sums[warp].
template <int kTerms>
__device__ __forceinline__ void warp_totals(double (&acc)[kTerms], double (*group_sums)[kTerms], int lane) {
#pragma unroll
  for (int j = 0; j < kTerms; ++j) {
    double v = acc[j];
#pragma unroll
    for (int s = kGroup / 2; s >= 1; s /= 2) v = add(v, __shfl_down_sync(cuda::kFullMask, v, s));
    acc[j] = v;
  }
  if (lane % kGroup == 0) {
#pragma unroll
    for (int j = 0; j < kTerms; ++j) group_sums[lane / kGroup][j] = acc[j];
  }
}

// Second stage (thread 0, after a __syncthreads): group g adds group g + s, s = 4, 2, 1.
template <int kTerms>
__device__ __forceinline__ void block_totals(const double (*group_sums)[kTerms], double (&sums)[kTerms]) {
  for (int j = 0; j < kTerms; ++j) {
    double g[kGroups];
    for (int w = 0; w < kGroups; ++w) g[w] = group_sums[w][j];
    for (int s = kGroups / 2; s >= 1; s /= 2) {
      for (int w = 0; w < s; ++w) g[w] = add(g[w], g[w + s]);
    }
    sums[j] = g[0];
  }
}

// The targets' grid as the kernels read it (null pointers: no targets, every source unmatched).
template <typename tgt_t>
struct GridView {
  const neighbors::GridCloud* clouds;
  const int32_t* cell_start;
  const neighbors::SortedPoint<tgt_t>* points;
};

// The clouds of one call as the kernels read them.
template <typename src_t, typename tgt_t>
struct FitClouds {
  const src_t* sources;
  const src_t* source_normals;  // null unless a rule reads them
  const int64_t* query_lengths;
  const tgt_t* targets;
  const tgt_t* target_normals;  // null unless a rule reads them
  GridView<tgt_t> grid;
  int64_t n, m, h;
};

// The correspondence of source i of cloud b under `pose` (fit_match on that cloud's rows).
template <typename src_t, typename tgt_t>
__device__ __forceinline__ int32_t match_source(const FitClouds<src_t, tgt_t>& c, const FitRules& rules,
                                                const Pose& pose, int64_t b, int64_t i) {
  const int64_t row = b * c.n + i;
  return fit_match(pose, rules, c.sources + 3 * row, c.source_normals != nullptr ? c.source_normals + 3 * row : nullptr,
                   c.targets + 3 * b * c.m, c.target_normals != nullptr ? c.target_normals + 3 * b * c.m : nullptr,
                   c.grid.clouds != nullptr ? c.grid.clouds + b : nullptr, c.grid.cell_start, c.grid.points);
}

// Adds the terms of source i of cloud b, matched to `match`, to lane sums acc.
template <bool kPlane, int kTerms, typename src_t, typename tgt_t>
__device__ __forceinline__ void add_source(const FitClouds<src_t, tgt_t>& c, const FitRules& rules, const Pose& pose,
                                           const double origin[3], int64_t b, int64_t i, int32_t match,
                                           double (&acc)[kTerms]) {
  add_fit_terms<kPlane>(pose, origin, rules.centered, c.sources + 3 * (b * c.n + i), match, c.targets + 3 * b * c.m,
                        c.target_normals != nullptr ? c.target_normals + 3 * b * c.m : nullptr, acc);
}

// The start of a pass, in both plans: the origin of the pass' rows (the pose's translation when
// centered, else 0) and zeroed lane sums.
template <int kTerms>
__device__ __forceinline__ void begin_pass(const FitRules& rules, const Pose& pose, double (&origin)[3],
                                           double (&acc)[kTerms]) {
  for (int d = 0; d < 3; ++d) origin[d] = rules.centered ? pose.t[d] : 0.0;
#pragma unroll
  for (int j = 0; j < kTerms; ++j) acc[j] = 0.0;
}

// A non-finite pose comes back as given, with zero statistics, not converged.
template <typename pose_t, typename stat_t>
__device__ __forceinline__ void pass_through(const pose_t* pose_in, int thread, pose_t* pose_out, stat_t* rmse,
                                             stat_t* fraction, bool* converged) {
  if (thread < 16) pose_out[thread] = pose_in[thread];
  if (thread == 0) {
    *rmse = *fraction = stat_t(0);
    *converged = false;
  }
}

// ---- the fused plan --------------------------------------------------------------------------
// One block of kFitThreads threads per hypothesis runs every pass of it. A pass takes the
// sources kFitThreads at a time: each thread finds the correspondence of one (fit_match: the
// bounded nearest-neighbour search in the targets' grid, built once per call by
// grid_cuda.cuh), then threads 0 .. kLanes - 1, icp.h's lanes, add the chunk's terms in lane
// order (lane l: sources l, l + 256, ...); thread 0 combines the lane sums in the fixed tree,
// solves the step and broadcasts the pose through shared memory. The search, not the sums,
// costs: so more threads search than sum.
constexpr int kFitThreads = 2 * kLanes;

template <bool kPlane, typename src_t, typename tgt_t, typename pose_t, typename stat_t>
__global__ void __launch_bounds__(kFitThreads)
    icp_kernel(FitClouds<src_t, tgt_t> c, const pose_t* __restrict__ poses, FitRules rules,
               pose_t* __restrict__ poses_out, stat_t* __restrict__ rmse, stat_t* __restrict__ fraction,
               bool* __restrict__ converged_out) {
  constexpr int kTerms = kPlane ? kPlaneTerms : kPointTerms;
  __shared__ double group_sums[kGroups][kTerms];
  __shared__ double shared_pose[12];
  __shared__ int32_t matches[kFitThreads];
  __shared__ bool shared_stop;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / c.h;
  const int thread = threadIdx.x;
  const pose_t* pose_in = poses + 16 * bh;
  if (!pose_finite(pose_in)) {  // the same answer in every thread: the block leaves together
    pass_through(pose_in, thread, poses_out + 16 * bh, rmse + bh, fraction + bh, converged_out + bh);
    return;
  }
  const int64_t length = cloud_length(c.query_lengths, b, c.n);
  const bool lane = thread < kLanes;
  Pose pose = load_pose(pose_in);
  bool stopped = false;
  for (int64_t pass = 0; pass <= rules.iterations; ++pass) {
    const bool update = pass < rules.iterations;
    if (update && stopped) continue;  // stopped is the broadcast value: uniform over the block
    double origin[3], acc[kTerms];
    begin_pass(rules, pose, origin, acc);
    for (int64_t chunk = 0; chunk < length; chunk += kFitThreads) {
      const int64_t i = chunk + thread;
      if (i < length) matches[thread] = match_source(c, rules, pose, b, i);
      __syncthreads();
      if (lane) {
#pragma unroll
        for (int k = 0; k < kFitThreads / kLanes; ++k) {
          const int64_t j = chunk + k * kLanes + thread;
          if (j < length) add_source<kPlane>(c, rules, pose, origin, b, j, matches[k * kLanes + thread], acc);
        }
      }
      __syncthreads();
    }
    if (lane) warp_totals(acc, group_sums, thread);
    __syncthreads();
    if (thread == 0) {
      double sums[kTerms];
      block_totals(group_sums, sums);
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

// ---- the wide plan ---------------------------------------------------------------------------
// Between passes each hypothesis keeps its float64 pose (12 values: R row-major, t) and flags.
constexpr uint8_t kFinite = 1;   // its initial pose is finite (else it is passed through)
constexpr uint8_t kStopped = 2;  // it has stopped stepping
constexpr int kMatchThreads = 256;
// Sources per cloud from which the wide plan pays: a pass of fewer is a chunk or two of the
// fused block, cheaper than two launches.
constexpr int64_t kWideSources = 4 * kFitThreads;
// The most (hypothesis, source) rows of the wide plan's int32 correspondences (512 MB).
constexpr int64_t kMaxWideRows = int64_t{1} << 27;

__device__ __forceinline__ Pose state_pose(const double* state) {
  Pose p;
  for (int k = 0; k < 9; ++k) p.r[k] = state[k];
  for (int d = 0; d < 3; ++d) p.t[d] = state[9 + d];
  return p;
}

__device__ __forceinline__ void store_state(const Pose& p, double* state) {
  for (int k = 0; k < 9; ++k) state[k] = p.r[k];
  for (int d = 0; d < 3; ++d) state[9 + d] = p.t[d];
}

template <typename pose_t>
__global__ void fit_begin_kernel(const pose_t* __restrict__ poses, int64_t count, double* __restrict__ state,
                                 uint8_t* __restrict__ flags) {
  const int64_t bh = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (bh >= count) return;
  const pose_t* pose = poses + 16 * bh;
  const bool finite = pose_finite(pose);
  if (finite) store_state(load_pose(pose), state + 12 * bh);
  flags[bh] = finite ? kFinite : 0;
}

// The correspondences of one pass: a thread per (hypothesis, source) row of the hypotheses that
// take part (finite, and for a step not stopped).
template <typename src_t, typename tgt_t>
__global__ void __launch_bounds__(kMatchThreads)
    fit_match_kernel(FitClouds<src_t, tgt_t> c, FitRules rules, const double* __restrict__ state,
                     const uint8_t* __restrict__ flags, bool update, int64_t rows, int32_t* __restrict__ matches) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int64_t bh = row / c.n, i = row - bh * c.n, b = bh / c.h;
  const uint8_t f = flags[bh];
  if (!(f & kFinite) || (update && (f & kStopped)) || i >= cloud_length(c.query_lengths, b, c.n)) return;
  matches[row] = match_source(c, rules, state_pose(state + 12 * bh), b, i);
}

// The sums and step of one pass (a block of kLanes threads per hypothesis); the last pass, which
// measures, writes the outputs.
template <bool kPlane, typename src_t, typename tgt_t, typename pose_t, typename stat_t>
__global__ void __launch_bounds__(kLanes)
    fit_sum_kernel(FitClouds<src_t, tgt_t> c, FitRules rules, const int32_t* __restrict__ matches, bool update,
                   const pose_t* __restrict__ poses, double* __restrict__ state, uint8_t* __restrict__ flags,
                   pose_t* __restrict__ poses_out, stat_t* __restrict__ rmse, stat_t* __restrict__ fraction,
                   bool* __restrict__ converged_out) {
  constexpr int kTerms = kPlane ? kPlaneTerms : kPointTerms;
  __shared__ double group_sums[kGroups][kTerms];
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / c.h;
  const int lane = threadIdx.x;
  const uint8_t f = flags[bh];
  if (!(f & kFinite)) {
    if (!update) pass_through(poses + 16 * bh, lane, poses_out + 16 * bh, rmse + bh, fraction + bh, converged_out + bh);
    return;
  }
  if (update && (f & kStopped)) return;
  Pose pose = state_pose(state + 12 * bh);
  double origin[3], acc[kTerms];
  begin_pass(rules, pose, origin, acc);
  const int64_t length = cloud_length(c.query_lengths, b, c.n);
  const int32_t* match = matches + bh * c.n;
  for (int64_t i = lane; i < length; i += kLanes) add_source<kPlane>(c, rules, pose, origin, b, i, match[i], acc);
  warp_totals(acc, group_sums, lane);
  __syncthreads();
  if (lane != 0) return;
  double sums[kTerms];
  block_totals(group_sums, sums);
  if (update) {
    const bool stop = fit_update<kPlane>(sums, origin, rules, &pose);
    store_state(pose, state + 12 * bh);
    if (stop) flags[bh] = kFinite | kStopped;
  } else {
    fit_statistics(sums, rmse + bh, fraction + bh);
    store_pose(pose, poses_out + 16 * bh);
    converged_out[bh] = (f & kStopped) != 0;
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
                                          max_normal_angle, viewpoint, centered, max_step_angle, max_step_translation);
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
      const FitClouds<src_t, tgt_t> clouds{
          in.sources.data_ptr<src_t>(),
          in.source_normals.defined() ? in.source_normals.data_ptr<src_t>() : nullptr,
          in.query_lengths.data,
          in.targets.data_ptr<tgt_t>(),
          in.target_normals.defined() ? in.target_normals.data_ptr<tgt_t>() : nullptr,
          searched ? GridView<tgt_t>{grid.cloud_ptr(), grid.cell_start.template data_ptr<int32_t>(), grid.point_ptr()}
                   : GridView<tgt_t>{nullptr, nullptr, nullptr},
          in.n,
          in.m,
          in.hypotheses};
      AT_DISPATCH_FLOATING_TYPES(in.poses.scalar_type(), "icp_cuda", [&] {
        using pose_t = scalar_t;
        auto launch = [&](auto plane) {
          constexpr bool kPlane = decltype(plane)::value;
          const auto fused = icp_kernel<kPlane, src_t, tgt_t, pose_t, stat_t>;
          const int64_t rows = blocks * in.n;
          const bool wide = in.n >= kWideSources && rows <= kMaxWideRows &&
                            blocks < int64_t{cuda::sm_count()} * cuda::blocks_per_sm(fused, kFitThreads);
          if (!wide) {
            icp_kernel<kPlane, src_t, tgt_t, pose_t, stat_t><<<static_cast<unsigned>(blocks), kFitThreads, 0, stream>>>(
                clouds, in.poses.data_ptr<pose_t>(), in.rules, poses_out.data_ptr<pose_t>(), rmse.data_ptr<stat_t>(),
                fraction.data_ptr<stat_t>(), converged.data_ptr<bool>());
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            return;
          }
          at::Tensor state = at::empty({blocks, 12}, in.sources.options().dtype(at::kDouble));
          at::Tensor flags = at::empty({blocks}, in.sources.options().dtype(at::kByte));
          at::Tensor matches = at::empty({rows}, in.sources.options().dtype(at::kInt));
          fit_begin_kernel<<<static_cast<unsigned>(cuda::ceil_div(blocks, kMatchThreads)), kMatchThreads, 0, stream>>>(
              in.poses.data_ptr<pose_t>(), blocks, state.data_ptr<double>(), flags.data_ptr<uint8_t>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
          const unsigned match_blocks = static_cast<unsigned>(cuda::ceil_div(rows, kMatchThreads));
          for (int64_t pass = 0; pass <= in.rules.iterations; ++pass) {
            const bool update = pass < in.rules.iterations;
            fit_match_kernel<<<match_blocks, kMatchThreads, 0, stream>>>(clouds, in.rules, state.data_ptr<double>(),
                                                                         flags.data_ptr<uint8_t>(), update, rows,
                                                                         matches.data_ptr<int32_t>());
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            fit_sum_kernel<kPlane, src_t, tgt_t, pose_t, stat_t><<<static_cast<unsigned>(blocks), kLanes, 0, stream>>>(
                clouds, in.rules, matches.data_ptr<int32_t>(), update, in.poses.data_ptr<pose_t>(),
                state.data_ptr<double>(), flags.data_ptr<uint8_t>(), poses_out.data_ptr<pose_t>(),
                rmse.data_ptr<stat_t>(), fraction.data_ptr<stat_t>(), converged.data_ptr<bool>());
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          }
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
  m.impl("icp", &icp_cuda);
}

}  // namespace pointops
