// Voxel-grid downsampling on CUDA (rules in voxel_downsample.h; the CPU twin is
// voxel_downsample_cpu.cpp). No atomics on floats and no host sync:
//   1. every point's cell; the lowest cell of each cloud per axis by 64-bit integer atomicMin
//      (order-free), then each point's 63-bit key relative to it;
//   2. the parallel hash array (common/hash_array.cuh) of the keys of the whole batch: a stable
//      radix sort + run-length encoding. With B > 1 the keys of different clouds can collide, so
//      a second hash array sorts (cloud, run of the first) = b * total + run, which lists the
//      voxels by cloud and then by key, each voxel's points still in index order (both sorts
//      are stable);
//   3. one thread per voxel sums its points in that order in float64 (the CPU kernel's order),
//      writes the means and each point's row.
// What bounds it: the radix sort of the B * N (63-bit key, 32-bit index) pairs, 8 passes over
// the key bits (plus ceil(bits(B * N) / 8) more for B > 1), each reading and writing the pairs
// at HBM bandwidth; the other passes each read the points once. The per-voxel sums gather
// points through the sorted permutation (scattered 12-byte reads), one thread per voxel, so a
// voxel with many points serialises that thread: clouds with a few dense voxels (a sensor's
// near field at a coarse voxel size) load the warps unevenly.
#include "geometry/voxel_downsample.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <type_traits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"

namespace pointops {
namespace {

using namespace voxel_downsample_detail;
using cuda::HashArrayView;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

unsigned blocks_for(int64_t items) { return static_cast<unsigned>(cuda::ceil_div(items, kThreads)); }

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// int64 <-> uint64 preserving order, for unsigned atomicMin.
__device__ __forceinline__ unsigned long long ordered(int64_t v) {
  return static_cast<unsigned long long>(v) ^ 0x8000000000000000ull;
}
__device__ __forceinline__ int64_t unordered(unsigned long long v) {
  return static_cast<int64_t>(v ^ 0x8000000000000000ull);
}

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ bool point_cell(const scalar_t* __restrict__ points,
                                           const int64_t* __restrict__ lengths, int64_t n,
                                           int64_t p, const DownsampleGrid<acc_t>& grid,
                                           int64_t* cell) {
  const int64_t b = p / n;
  if (p - b * n >= cloud_length(lengths, b, n)) return false;
  const scalar_t* q = points + 3 * p;
  return grid.cell(static_cast<acc_t>(q[0]), static_cast<acc_t>(q[1]), static_cast<acc_t>(q[2]), cell);
}

struct Smaller {
  __device__ __forceinline__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return b < a ? b : a;
  }
};

// low (B, 3) starts at the largest value. Blocks are 2D: x tiles cloud y's points, so a block
// reduces within one cloud and issues 3 atomics, not 3 per point (one address per cloud would
// serialise a million same-address atomics).
template <typename scalar_t, typename acc_t>
__global__ void lowest_cells_kernel(const scalar_t* __restrict__ points,
                                    const int64_t* __restrict__ lengths, int64_t batch, int64_t n,
                                    DownsampleGrid<acc_t> grid, unsigned long long* __restrict__ low) {
  using BlockReduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    unsigned long long mine[3] = {~0ull, ~0ull, ~0ull};
    int64_t cell[3];
    if (i < n && point_cell(points, lengths, n, b * n + i, grid, cell)) {
      for (int d = 0; d < 3; ++d) mine[d] = ordered(cell[d]);
    }
    for (int d = 0; d < 3; ++d) {
      const unsigned long long lowest = BlockReduce(temp).Reduce(mine[d], Smaller());
      __syncthreads();  // temp is reused by the next reduction
      if (threadIdx.x == 0 && lowest != ~0ull) atomicMin(low + 3 * b + d, lowest);
    }
  }
}

template <typename scalar_t, typename acc_t>
__global__ void keys_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths,
                            int64_t n, int64_t total, DownsampleGrid<acc_t> grid,
                            const unsigned long long* __restrict__ low, int64_t* __restrict__ keys) {
  const int64_t p = thread_index();
  if (p >= total) return;
  int64_t cell[3];
  int64_t key = kInvalidKey;
  if (point_cell(points, lengths, n, p, grid, cell)) {
    const int64_t b = p / n;
    const int64_t lowest[3] = {unordered(low[3 * b]), unordered(low[3 * b + 1]), unordered(low[3 * b + 2])};
    key = relative_key(cell, lowest);
  }
  keys[p] = key;
}

// Second level (B > 1): b * total + the point's run in the first hash array.
__global__ void cloud_keys_kernel(HashArrayView h, const int64_t* __restrict__ keys, int64_t n,
                                  int64_t total, int64_t* __restrict__ cloud_keys) {
  const int64_t p = thread_index();
  if (p >= total) return;
  const int64_t key = keys[p];
  const int64_t bound = (total / n) * total;
  cloud_keys[p] = key == kInvalidKey ? bound : (p / n) * total + h.find(key);
}

// new_lengths[b] and the first run of cloud b (runs are sorted by cloud).
__global__ void cloud_runs_kernel(HashArrayView h, int64_t batch, int64_t total,
                                  int64_t* __restrict__ first_run, int64_t* __restrict__ new_lengths) {
  const int64_t b = thread_index();
  if (b >= batch) return;
  const int64_t runs = *h.num_unique;
  if (batch == 1) {
    first_run[0] = 0;
    new_lengths[0] = runs;
    return;
  }
  const int64_t begin = hash_array::lower_bound(h.unique_keys, runs, b * total);
  const int64_t end = hash_array::lower_bound(h.unique_keys, runs, (b + 1) * total);
  first_run[b] = begin;
  new_lengths[b] = end - begin;
}

// One thread per voxel (run r): its points in index order, summed in float64.
template <typename scalar_t, typename feature_t>
__global__ void voxel_means_kernel(HashArrayView h, int64_t capacity, int64_t batch, int64_t n,
                                   int64_t total, const int64_t* __restrict__ first_run,
                                   const scalar_t* __restrict__ points,
                                   const feature_t* __restrict__ features, int64_t f,
                                   scalar_t* __restrict__ centroids,
                                   feature_t* __restrict__ mean_features,
                                   int64_t* __restrict__ point_voxel) {
  const int64_t r = thread_index();
  if (r >= capacity || r >= *h.num_unique) return;
  const int64_t b = batch == 1 ? 0 : h.unique_keys[r] / total;
  const int64_t row = r - first_run[b];
  const int64_t begin = h.starts[r];
  const int64_t count = h.counts[r];
  const double divisor = static_cast<double>(count);
  double sum[3] = {0.0, 0.0, 0.0};
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = h.perm[begin + t];
    point_voxel[p] = row;
    for (int d = 0; d < 3; ++d) sum[d] = add(sum[d], static_cast<double>(points[3 * p + d]));
  }
  scalar_t* out = centroids + 3 * (b * n + row);
  for (int d = 0; d < 3; ++d) out[d] = static_cast<scalar_t>(divide(sum[d], divisor));
  for (int64_t c = 0; c < f; ++c) {
    double s = 0.0;
    for (int64_t t = 0; t < count; ++t) s = add(s, static_cast<double>(features[f * h.perm[begin + t] + c]));
    mean_features[f * (b * n + row) + c] = static_cast<feature_t>(divide(s, divisor));
  }
}

template <typename scalar_t, typename feature_t>
void downsample_cuda_typed(const at::Tensor& pts, const at::Tensor& feats, const int64_t* lengths,
                           const DownsampleArgs& args, VoxelDownsampleResult& outputs) {
  using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
  const auto grid = make_grid<acc_t>(args);
  const int64_t batch = pts.size(0);
  const int64_t n = pts.size(1);
  const int64_t total = batch * n;
  const int64_t f = args.features;
  const auto options = pts.options();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();

  at::Tensor low = at::full({batch, 3}, -1, options.dtype(at::kLong));  // all ones: the largest
  const dim3 tiles(blocks_for(n), static_cast<unsigned>(std::min<int64_t>(batch, kMaxGridY)));
  lowest_cells_kernel<scalar_t, acc_t><<<tiles, kThreads, 0, stream>>>(
      pts_ptr, lengths, batch, n, grid, reinterpret_cast<unsigned long long*>(low.data_ptr<int64_t>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor keys = at::empty({total}, options.dtype(at::kLong));
  keys_kernel<scalar_t, acc_t><<<blocks_for(total), kThreads, 0, stream>>>(
      pts_ptr, lengths, n, total, grid,
      reinterpret_cast<const unsigned long long*>(low.data_ptr<int64_t>()), keys.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  cuda::HashArray hash = cuda::build_hash_array(keys, kInvalidKey);
  if (batch > 1) {
    at::Tensor cloud_keys = at::empty({total}, options.dtype(at::kLong));
    cloud_keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        hash.view(), keys.data_ptr<int64_t>(), n, total, cloud_keys.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    hash = cuda::build_hash_array(cloud_keys, batch * total);
  }
  const HashArrayView h = hash.view();

  at::Tensor first_run = at::empty({batch}, options.dtype(at::kLong));
  cloud_runs_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(
      h, batch, total, first_run.data_ptr<int64_t>(), std::get<2>(outputs).data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  voxel_means_kernel<scalar_t, feature_t><<<blocks_for(total), kThreads, 0, stream>>>(
      h, total, batch, n, total, first_run.data_ptr<int64_t>(), pts_ptr,
      f > 0 ? feats.data_ptr<feature_t>() : nullptr, f, std::get<0>(outputs).data_ptr<scalar_t>(),
      f > 0 ? std::get<1>(outputs).data_ptr<feature_t>() : nullptr,
      std::get<3>(outputs).data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

VoxelDownsampleResult voxel_downsample_cuda(const at::Tensor& points,
                                            const std::optional<at::Tensor>& lengths,
                                            const std::optional<at::Tensor>& features,
                                            at::ArrayRef<double> voxel_size,
                                            std::optional<at::ArrayRef<double>> point_range) {
  const DownsampleArgs args = check_downsample_args(points, lengths, features, voxel_size, point_range);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  VoxelDownsampleResult outputs = empty_downsample_outputs(points, features);
  const int64_t total = points.size(0) * points.size(1);
  if (total == 0) return outputs;
  cuda::check_cub_items(total, "voxel_downsample: B * N points");
  TORCH_CHECK(points.size(0) <= std::numeric_limits<int64_t>::max() / total,
              "voxel_downsample: B * B * N must fit int64, got B = ", points.size(0), ", N = ",
              points.size(1));
  const at::Tensor pts = points.contiguous();
  const at::Tensor feats = args.features > 0 ? features->contiguous() : pts;
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "voxel_downsample_cuda", [&] {
    using point_t = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, feats.scalar_type(), "voxel_downsample_cuda", [&] {
      downsample_cuda_typed<point_t, scalar_t>(pts, feats, lengths_c.data, args, outputs);
    });
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("voxel_downsample", &voxel_downsample_cuda); }

}  // namespace pointops
