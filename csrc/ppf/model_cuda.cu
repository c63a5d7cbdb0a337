// PPF model description on CUDA (contract in model.h; the CPU twin is model_cpu.cpp).
//
// Models go through in groups of at most 2^25 candidate pairs (G models of N^2 each), with no
// host sync:
//   1. unit normals, one thread per point;
//   2. the key of every (b, i, j) of the group: b * K + key, or G * K for a non-pair;
//   3. the parallel hash array of those keys (common/hash_array.cuh: stable radix sort over the
//      bits G * K needs, run-length encoding, exclusive scan), so a key's pairs come out by
//      (i, j) ascending, as on the CPU;
//   4. per model, its first run (a binary search of b * K); per run, the pairs it keeps
//      (kept_pairs: all of them without a cap) and, by an exclusive scan, its first row;
//   5. key_offsets by a binary search of b * K + k per key among the runs, the runs copied into
//      unique_keys / starts / counts, and every kept pair written with its alpha.
// What bounds it: the radix sort of 4M (key, int32) pairs per 2,000-point model (17 key bits
// plus the group's: 3 passes), and the key pass's 4M features; both at HBM bandwidth
// (`python tools/bench.py --ops ppf_model` times it).
#include "ppf/model.h"

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

constexpr int kThreads = 256;
constexpr int64_t kGroupPairs = int64_t{1} << 25;

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(cuda::ceil_div(items, kThreads), 1), 1 << 20));
}

#define GRID_STRIDE(e, total) \
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < (total); e += int64_t{gridDim.x} * blockDim.x)

__global__ void unit_normals_kernel(const float* __restrict__ points, const float* __restrict__ normals,
                                    const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                                    float* __restrict__ unit) {
  GRID_STRIDE(e, batch * n) {
    const int64_t b = e / n;
    model_unit_normal(points + b * n * 3, normals + b * n * 3, e - b * n, cloud_length(lengths, b, n),
                      unit + b * n * 3 + (e - b * n) * 3);
  }
}

// One block per model: its diameter (given, or its bounding-box diagonal: min / max are exact,
// so the block's reduction order does not matter) and its distance step.
constexpr int kBoxThreads = 256;

__global__ void __launch_bounds__(kBoxThreads)
    diameter_kernel(const float* __restrict__ points, const int64_t* __restrict__ lengths, int64_t n,
                    const float* __restrict__ given, float tau, float* __restrict__ diameters,
                    float* __restrict__ steps) {
  __shared__ BoundingBox boxes[kBoxThreads];
  const int64_t b = blockIdx.x;
  const int64_t length = cloud_length(lengths, b, n);
  BoundingBox box;
  box.reset();
  if (given == nullptr) {
    for (int64_t i = threadIdx.x; i < length; i += blockDim.x) box.add(points + (b * n + i) * 3);
  }
  boxes[threadIdx.x] = box;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int t = 1; t < kBoxThreads; ++t) box.merge(boxes[t]);
  const float diameter = given != nullptr ? given[b] : box.diagonal();
  diameters[b] = diameter;
  steps[b] = multiply(tau, diameter);
}

// Group-local model g = b - first; flat pair e = g * N^2 + i * N + j.
__global__ void pair_keys_kernel(const float* __restrict__ points, const float* __restrict__ unit,
                                 const int64_t* __restrict__ lengths, const float* __restrict__ steps, int64_t first,
                                 int64_t group, int64_t n, Binning binning, int64_t* __restrict__ keys) {
  const int64_t square = n * n;
  const int64_t count = binning.key_count();
  const int64_t bound = group * count;
  GRID_STRIDE(e, group * square) {
    const int64_t g = e / square;
    const int64_t rest = e - g * square;
    const int64_t i = rest / n;
    const int64_t j = rest - i * n;
    const int64_t b = first + g;
    const int64_t length = cloud_length(lengths, b, n);
    int64_t key = -1;
    Binning bb = binning;
    bb.distance_step = steps[b];
    if (i < length && j < length && bb.distance_step > 0.0f && finite(bb.distance_step)) {
      key = model_pair_key(points + b * n * 3, unit + b * n * 3, i, j, bb);
    }
    keys[e] = key < 0 ? bound : g * count + key;
  }
}

// Per group model g: its first run, and its number of runs.
__global__ void model_bounds_kernel(cuda::HashArrayView h, int64_t group, int64_t count,
                                    int64_t* __restrict__ first_run, int64_t* __restrict__ num_unique) {
  GRID_STRIDE(g, group + 1) {
    const int64_t runs = *h.num_unique;
    first_run[g] = hash_array::lower_bound(h.unique_keys, runs, g * count);
    if (g > 0) {
      const int64_t begin = hash_array::lower_bound(h.unique_keys, runs, (g - 1) * count);
      num_unique[g - 1] = hash_array::lower_bound(h.unique_keys, runs, g * count) - begin;
    }
  }
}

// kept[r]: the pairs run r keeps, 0 past the runs (entries [0, total]).
__global__ void kept_kernel(cuda::HashArrayView h, int64_t total, int64_t cap, int32_t* __restrict__ kept) {
  GRID_STRIDE(r, total + 1) { kept[r] = r < *h.num_unique ? static_cast<int32_t>(kept_pairs(h.counts[r], cap)) : 0; }
}

// first[r]: the first row of run r over the group (exclusive scan of kept); model g's rows
// start at first[first_run[g]].
__global__ void key_offsets_kernel(cuda::HashArrayView h, int64_t group, int64_t count,
                                   const int64_t* __restrict__ first_run, const int32_t* __restrict__ first,
                                   int64_t* __restrict__ offsets) {
  GRID_STRIDE(e, group * (count + 1)) {
    const int64_t g = e / (count + 1);
    const int64_t k = e - g * (count + 1);
    const int64_t r = hash_array::lower_bound(h.unique_keys, *h.num_unique, g * count + k);
    offsets[e] = int64_t{first[r]} - first[first_run[g]];
  }
}

__global__ void runs_kernel(cuda::HashArrayView h, int64_t capacity, int64_t count, int64_t unique_capacity,
                            const int64_t* __restrict__ first_run, const int32_t* __restrict__ first,
                            const int32_t* __restrict__ kept, int64_t* __restrict__ unique_keys,
                            int64_t* __restrict__ starts, int64_t* __restrict__ counts) {
  GRID_STRIDE(r, capacity) {
    if (r >= *h.num_unique) return;
    const int64_t key = h.unique_keys[r];
    const int64_t g = key / count;
    const int64_t u = g * unique_capacity + (r - first_run[g]);
    unique_keys[u] = key - g * count;
    starts[u] = int64_t{first[r]} - first[first_run[g]];
    counts[u] = kept[r];
  }
}

// One thread per sorted pair: a pair its key keeps goes to row first[r] + t of the pair list
// (t: its place among the kept pairs of its run r), with its alpha.
__global__ void pairs_kernel(cuda::HashArrayView h, int64_t total, int64_t bound, int64_t count, int64_t cap,
                             int64_t first_model, int64_t n, int64_t pair_capacity, const float* __restrict__ points,
                             const float* __restrict__ unit, const int64_t* __restrict__ first_run,
                             const int32_t* __restrict__ first, int32_t* __restrict__ pair_ref,
                             int32_t* __restrict__ pair_partner, float* __restrict__ pair_alpha) {
  const int64_t square = n * n;
  GRID_STRIDE(pos, total) {
    const int64_t key = h.sorted_keys[pos];
    if (key == bound) return;  // non-pairs sort last
    const int64_t r = hash_array::lower_bound(h.unique_keys, *h.num_unique, key);
    const int64_t place = pos - h.starts[r];
    const int64_t c = h.counts[r];
    int64_t t = place;
    if (kept_pairs(c, cap) < c) {     // kept positions are floor(t c / cap): the smallest t at or
      t = (place * cap + c - 1) / c;  // past this place, kept when it lands exactly on it
      if (t >= cap || kept_position(t, c, cap) != place) continue;
    }
    const int64_t g = key / count;
    const int64_t e = h.perm[pos] - g * square;
    const int64_t i = e / n;
    const int64_t j = e - i * n;
    const int64_t b = first_model + g;
    const int64_t row = g * pair_capacity + (int64_t{first[r]} + t - first[first_run[g]]);
    pair_ref[row] = static_cast<int32_t>(i);
    pair_partner[row] = static_cast<int32_t>(j);
    pair_alpha[row] = model_pair_alpha(points + b * n * 3, unit + b * n * 3, i, j);
  }
}

ModelResult ppf_model_cuda(const at::Tensor& points, const at::Tensor& normals,
                           const std::optional<at::Tensor>& lengths, const std::optional<at::Tensor>& diameter,
                           double tau_d, int64_t angle_bins, int64_t distance_bins, int64_t max_pairs_per_key) {
  const Binning binning =
      check_model_args(points, normals, lengths, diameter, tau_d, angle_bins, distance_bins, max_pairs_per_key);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard guard(points.device());
  const ModelOutputs out = empty_model_outputs(points, binning);
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  if (batch == 0) return out.result();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const ModelInputs in = model_inputs(points, normals, lengths, diameter);
  diameter_kernel<<<static_cast<unsigned>(batch), kBoxThreads, 0, stream>>>(
      in.points.data_ptr<float>(), in.lengths.data, n, in.diameter.defined() ? in.diameter.data_ptr<float>() : nullptr,
      static_cast<float>(tau_d), out.diameters.data_ptr<float>(), out.steps.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (n == 0) return out.result();
  const int64_t count = binning.key_count();
  const int64_t pair_capacity = out.pair_ref.size(1);
  const int64_t unique_capacity = out.unique_keys.size(1);
  const float* unit = out.unit_normals.data_ptr<float>();

  unit_normals_kernel<<<blocks_for(batch * n), kThreads, 0, stream>>>(in.points.data_ptr<float>(),
                                                                      in.normals.data_ptr<float>(), in.lengths.data,
                                                                      batch, n, out.unit_normals.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const int64_t square = n * n;
  const int64_t group_size = std::max<int64_t>(1, kGroupPairs / square);
  const auto i64 = in.points.options().dtype(at::kLong);
  for (int64_t first = 0; first < batch; first += group_size) {
    const int64_t group = std::min(group_size, batch - first);
    const int64_t total = group * square;
    const int64_t bound = group * count;
    at::Tensor keys = at::empty({total}, i64);
    pair_keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(in.points.data_ptr<float>(), unit, in.lengths.data,
                                                                 out.steps.data_ptr<float>(), first, group, n, binning,
                                                                 keys.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const cuda::HashArray hash = cuda::build_hash_array(keys, bound);
    const cuda::HashArrayView h = hash.view();

    at::Tensor first_run = at::empty({group + 1}, i64);
    model_bounds_kernel<<<blocks_for(group + 1), kThreads, 0, stream>>>(h, group, count, first_run.data_ptr<int64_t>(),
                                                                        out.num_unique.data_ptr<int64_t>() + first);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::Tensor kept = at::empty({total + 1}, i64.dtype(at::kInt));
    at::Tensor first_row = at::empty({total + 1}, i64.dtype(at::kInt));
    kept_kernel<<<blocks_for(total + 1), kThreads, 0, stream>>>(h, total, max_pairs_per_key, kept.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    cuda::exclusive_sum(kept.data_ptr<int32_t>(), first_row.data_ptr<int32_t>(), total + 1, in.points.device());
    key_offsets_kernel<<<blocks_for(group * (count + 1)), kThreads, 0, stream>>>(
        h, group, count, first_run.data_ptr<int64_t>(), first_row.data_ptr<int32_t>(),
        out.key_offsets.data_ptr<int64_t>() + first * (count + 1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    runs_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        h, total, count, unique_capacity, first_run.data_ptr<int64_t>(), first_row.data_ptr<int32_t>(),
        kept.data_ptr<int32_t>(), out.unique_keys.data_ptr<int64_t>() + first * unique_capacity,
        out.starts.data_ptr<int64_t>() + first * unique_capacity,
        out.counts.data_ptr<int64_t>() + first * unique_capacity);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    pairs_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        h, total, bound, count, max_pairs_per_key, first, n, pair_capacity, in.points.data_ptr<float>(), unit,
        first_run.data_ptr<int64_t>(), first_row.data_ptr<int32_t>(),
        out.pair_ref.data_ptr<int32_t>() + first * pair_capacity,
        out.pair_partner.data_ptr<int32_t>() + first * pair_capacity,
        out.pair_alpha.data_ptr<float>() + first * pair_capacity);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out.result();
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("ppf_model", &ppf::ppf_model_cuda); }

}  // namespace pointops
