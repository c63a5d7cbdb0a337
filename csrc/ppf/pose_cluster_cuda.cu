// Pose clustering on CUDA (contract in pose_cluster.h; the CPU twin is pose_cluster_cpu.cpp),
// with no host sync:
//   1. the cell key of every pose of the batch (b, cell packed in 63 bits, an invalid pose the
//      key B * 2^51);
//   2. the parallel hash array of the keys (common/hash_array.cuh), so a cell's poses come out by
//      index;
//   3. every pose as load_pose computes it (normalised quaternion, translation, validity),
//      once (prepare_kernel): the member tests below read it instead of normalising pose j
//      again for each centre (a float64 square root and seven divisions per test);
//   4. each pose's cluster score: a warp per pose walks the 27 cells around its own (binary
//      search of each cell key in the sorted unique keys), its lanes testing a cell's poses 32
//      at a time, and sums its members' votes (int64, exact, so the order does not matter);
//   5. selection: a block per batch entry runs the k rounds (block-wide maximum of
//      (score, ~index), then a pass that removes the poses within the suppression distance and angle);
//   6. the averages: a warp per chosen cluster tests 32 candidates at a time, then adds the
//      members in the fixed order of for_each_member (ballot order: cell, then pose index) in
//      float64, as the CPU does.
// What bounds it: step 4, whose cost is the sum over poses of the poses in their 27 cells (with
// thousands of near-identical poses of one instance in one cell, tens of millions of member
// tests), each a 32-byte read of the prepared pose and a distance and quaternion test.
#include "ppf/pose_cluster.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {
namespace {

using cuda::kFullMask;
using cuda::kWarpSize;

constexpr int kThreads = 256;
constexpr int kSelectThreads = 1024;

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, cuda::ceil_div(items, kThreads)));
}

struct PoseArgs {
  const float* q;
  const float* t;
  const int64_t* votes;
  const int64_t* lengths;
  const float* thresholds;
  const float* suppress;
  int64_t batch, poses, k;
  float cos_half, cos_suppress;

  __device__ Pose load(int64_t b, int64_t i) const {
    const int64_t e = b * poses + i;
    return load_pose(q + e * 4, t + e * 3, votes[e], i < cloud_length(lengths, b, poses), thresholds[b]);
  }
};

struct DeviceTable {
  cuda::HashArrayView h;
  int64_t poses;

  __device__ int64_t find(int64_t key) const { return h.find(key); }
  __device__ int64_t start(int64_t run) const { return h.starts[run]; }
  __device__ int64_t count(int64_t run) const { return h.counts[run]; }
  __device__ int64_t at(int64_t position) const { return h.perm[position] % poses; }
};

__global__ void cell_keys_kernel(PoseArgs a, int64_t key_bound, int64_t* __restrict__ keys) {
  const int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (e >= a.batch * a.poses) return;
  const int64_t b = e / a.poses;
  const Pose p = a.load(b, e - b * a.poses);
  keys[e] = p.valid ? cell_key(b, p.cell[0], p.cell[1], p.cell[2]) : key_bound;
}

// Poses as load() returns them: the quaternion, and the translation with w = 1 when valid.
struct PreparedPoses {
  const float4* q;
  const float4* t;
  const int64_t* votes;

  __device__ Pose get(int64_t e) const {
    const float4 qe = q[e];
    const float4 te = t[e];
    Pose p;
    p.q[0] = qe.x;
    p.q[1] = qe.y;
    p.q[2] = qe.z;
    p.q[3] = qe.w;
    p.t = {te.x, te.y, te.z};
    p.votes = votes[e];
    p.cell[0] = p.cell[1] = p.cell[2] = 0;  // not read: cells come from the centre
    p.valid = te.w != 0.0f;
    return p;
  }
};

__global__ void prepare_kernel(PoseArgs a, float4* __restrict__ q, float4* __restrict__ t) {
  const int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (e >= a.batch * a.poses) return;
  const int64_t b = e / a.poses;
  const Pose p = a.load(b, e - b * a.poses);
  q[e] = make_float4(p.q[0], p.q[1], p.q[2], p.q[3]);
  t[e] = make_float4(p.t.x, p.t.y, p.t.z, p.valid ? 1.0f : 0.0f);
}

__device__ __forceinline__ int64_t warp_index() { return (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarpSize; }

// A warp per pose; the lanes split each cell's poses.
__global__ void scores_kernel(PoseArgs a, PreparedPoses poses, DeviceTable table, int64_t* __restrict__ scores) {
  const int64_t e = warp_index();
  if (e >= a.batch * a.poses) return;  // the whole warp
  const int lane = threadIdx.x % kWarpSize;
  const int64_t b = e / a.poses;
  const Pose centre = a.load(b, e - b * a.poses);
  int64_t score = 0;
  if (centre.valid) {
    const float max_square = multiply(a.thresholds[b], a.thresholds[b]);
    for_each_cell_run(centre, b, table, [&](int64_t start, int64_t count) {
      for (int64_t c = lane; c < count; c += kWarpSize) {
        const Pose other = poses.get(b * a.poses + table.at(start + c));
        if (is_member(centre, other, max_square, a.cos_half)) score += other.votes;
      }
    });
  }
  for (int d = kWarpSize / 2; d > 0; d >>= 1) score += __shfl_down_sync(kFullMask, score, d);
  if (lane == 0) scores[e] = score;
}

// The largest 64-bit word of the block; every thread gets it.
__device__ uint64_t block_max(uint64_t value, uint64_t* slots) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const uint64_t other = __shfl_down_sync(kFullMask, value, d);
    value = other > value ? other : value;
  }
  __syncthreads();
  if (lane == 0) slots[warp] = value;
  __syncthreads();
  uint64_t best = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) best = slots[w] > best ? slots[w] : best;
  return best;
}

// One block per batch entry: k rounds of choose-then-remove. `removed` (B, M) starts at 0.
// Scores are compared exactly: the block first finds the largest score, then the lowest index
// holding it (two maxima of 64-bit words), so no score is truncated.
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(PoseArgs a, PreparedPoses poses, const int64_t* __restrict__ scores, uint8_t* __restrict__ removed,
                  int64_t* __restrict__ centers) {
  __shared__ uint64_t slots[kSelectThreads / kWarpSize];
  const int64_t b = blockIdx.x;
  const int64_t* score = scores + b * a.poses;
  uint8_t* gone = removed + b * a.poses;
  const float suppress_square = multiply(a.suppress[b], a.suppress[b]);
  for (int64_t round = 0; round < a.k; ++round) {
    uint64_t top = 0;
    for (int64_t i = threadIdx.x; i < a.poses; i += blockDim.x) {
      if (gone[i] || score[i] <= 0) continue;
      const uint64_t v = static_cast<uint64_t>(score[i]);
      top = v > top ? v : top;
    }
    top = block_max(top, slots);
    if (top == 0) {
      for (int64_t rest = round + threadIdx.x; rest < a.k; rest += blockDim.x) {
        centers[b * a.k + rest] = -1;
      }
      return;
    }
    uint64_t lowest = 0;  // ~index of the lowest index with the top score
    for (int64_t i = threadIdx.x; i < a.poses; i += blockDim.x) {
      if (gone[i] || static_cast<uint64_t>(score[i]) != top || score[i] <= 0) continue;
      const uint64_t w = ~static_cast<uint64_t>(i);
      lowest = w > lowest ? w : lowest;
    }
    lowest = block_max(lowest, slots);
    const int64_t best = static_cast<int64_t>(~lowest);
    if (threadIdx.x == 0) centers[b * a.k + round] = best;
    const Pose centre = a.load(b, best);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < a.poses; i += blockDim.x) {
      if (i == best || is_suppressed(centre, poses.get(b * a.poses + i), suppress_square, a.cos_suppress)) {
        gone[i] = 1;
      }
    }
    __syncthreads();
  }
}

// A warp per chosen cluster: its lanes test 32 of a cell's poses at a time, then every lane adds
// the members in ballot order (by pose index within the cell, cells in for_each_member's order),
// so the float64 sums are the CPU's, one rounded add at a time.
__global__ void average_kernel(PoseArgs a, PreparedPoses poses, DeviceTable table, const int64_t* __restrict__ centers,
                               float* __restrict__ out_q, float* __restrict__ out_t, int64_t* __restrict__ out_scores,
                               int64_t* __restrict__ out_members) {
  const int64_t row = warp_index();
  if (row >= a.batch * a.k) return;  // the whole warp
  const int lane = threadIdx.x % kWarpSize;
  const int64_t b = row / a.k;
  const int64_t best = centers[row];
  if (best < 0) return;
  const Pose centre = a.load(b, best);
  const float max_square = multiply(a.thresholds[b], a.thresholds[b]);
  ClusterSum sum;
  sum.reset();
  for_each_cell_run(centre, b, table, [&](int64_t start, int64_t count) {
    for (int64_t base = 0; base < count; base += kWarpSize) {
      Pose other;
      bool member = false;
      if (base + lane < count) {
        other = poses.get(b * a.poses + table.at(start + base + lane));
        member = is_member(centre, other, max_square, a.cos_half);
      }
      for (unsigned mask = __ballot_sync(kFullMask, member); mask != 0u; mask &= mask - 1u) {
        const int source = __ffs(mask) - 1;
        Pose p;
        for (int c = 0; c < 4; ++c) p.q[c] = __shfl_sync(kFullMask, other.q[c], source);
        p.t = {__shfl_sync(kFullMask, other.t.x, source), __shfl_sync(kFullMask, other.t.y, source),
               __shfl_sync(kFullMask, other.t.z, source)};
        p.votes = __shfl_sync(kFullMask, other.votes, source);
        sum.add_member(centre, p);
      }
    }
  });
  if (lane != 0) return;
  sum.write(out_q + row * 4, out_t + row * 3);
  out_scores[row] = sum.score;
  out_members[row] = sum.members;
}

ClusterResult pose_cluster_cuda(const at::Tensor& quaternions, const at::Tensor& translations, const at::Tensor& votes,
                                const std::optional<at::Tensor>& lengths, const at::Tensor& distance_threshold,
                                double angle_threshold, const at::Tensor& suppression_distance, int64_t k,
                                double suppression_angle) {
  const ClusterArgs args = check_cluster_args(quaternions, translations, votes, lengths, distance_threshold,
                                              angle_threshold, suppression_distance, k, suppression_angle);
  check_device_type(quaternions, "quaternions", at::kCUDA);
  const c10::cuda::CUDAGuard guard(quaternions.device());
  ClusterResult out = empty_cluster_outputs(quaternions, args);
  const int64_t total = args.batch * args.poses;
  if (total == 0 || k == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor q = as_float(quaternions);
  const at::Tensor t = as_float(translations);
  const at::Tensor v = votes.contiguous();
  const at::Tensor thresholds = as_float(distance_threshold);
  const at::Tensor suppress = as_float(suppression_distance);
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const PoseArgs a{q.data_ptr<float>(),
                   t.data_ptr<float>(),
                   v.data_ptr<int64_t>(),
                   lengths_c.data,
                   thresholds.data_ptr<float>(),
                   suppress.data_ptr<float>(),
                   args.batch,
                   args.poses,
                   k,
                   args.cos_half,
                   args.cos_suppress};
  const auto options = q.options();

  const int64_t key_bound = args.batch << (3 * kCellBits);
  at::Tensor keys = at::empty({total}, options.dtype(at::kLong));
  cell_keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(a, key_bound, keys.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const cuda::HashArray hash = cuda::build_hash_array(keys, key_bound);
  const DeviceTable table{hash.view(), args.poses};

  at::Tensor prepared = at::empty({2, total, 4}, options);
  float4* prepared_q = reinterpret_cast<float4*>(prepared.data_ptr<float>());
  float4* prepared_t = prepared_q + total;
  prepare_kernel<<<blocks_for(total), kThreads, 0, stream>>>(a, prepared_q, prepared_t);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const PreparedPoses poses{prepared_q, prepared_t, v.data_ptr<int64_t>()};

  at::Tensor scores = at::empty({total}, options.dtype(at::kLong));
  scores_kernel<<<blocks_for(total * kWarpSize), kThreads, 0, stream>>>(a, poses, table, scores.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  at::Tensor removed = at::zeros({total}, options.dtype(at::kByte));
  at::Tensor centers = std::get<4>(out);
  select_kernel<<<static_cast<unsigned>(args.batch), kSelectThreads, 0, stream>>>(
      a, poses, scores.data_ptr<int64_t>(), removed.data_ptr<uint8_t>(), centers.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  average_kernel<<<blocks_for(args.batch * k * kWarpSize), kThreads, 0, stream>>>(
      a, poses, table, centers.data_ptr<int64_t>(), std::get<0>(out).data_ptr<float>(),
      std::get<1>(out).data_ptr<float>(), std::get<2>(out).data_ptr<int64_t>(), std::get<3>(out).data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("pose_cluster", &ppf::pose_cluster_cuda); }

}  // namespace pointops
