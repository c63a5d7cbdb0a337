// Hard voxelization on CUDA (rules in voxelize.h; the CPU twin is voxelize_cpu.cpp).
//
// mmcv's deterministic mode compares every point with every earlier one (O(N^2)) and assigns
// voxel slots in a <<<1, 1>>> loop. Here the whole batch goes through the parallel hash array
// (common/hash_array.cuh) once, with no atomics and no host sync:
//   1. key of each point: b * cells + cell, or B * cells when it is dropped;
//   2. stable radix sort + run-length encoding: one run per occupied voxel, listing its points
//      in point order, so a run's first element is the voxel's first point;
//   3. a voxel's slot is its order of first appearance in its cloud: flag every voxel's first
//      point, exclusive-scan the flags over all B * N points (clouds are consecutive, so the scan
//      counts the voxels of earlier clouds too), subtract the voxels of earlier clouds (found by
//      binary search of b * cells in the unique keys);
//   4. every point finds its run by binary search; its position in the run is its place in the
//      voxel, and the first max_points_per_voxel are copied.
// What bounds it: the radix sort of B * N (64-bit key, 32-bit index) pairs, one pass per digit
// of the bits the keys use, plus a handful of memory-bound passes over the points and the
// zero-fill of the (B, V, K, C) output, all at HBM bandwidth; at the bench's KITTI-like size
// (250k points, 40k x 32 x 4 floats) each moves a few MB, so the latency of ~25 launches (output
// fills, CUB's passes, six kernels here) is a large share (figures: docs/performance.md).
#include "bev/voxelize.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"

namespace pointops {
namespace {

using cuda::HashArrayView;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t items) { return static_cast<unsigned>(cuda::ceil_div(items, kThreads)); }

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <typename scalar_t, typename acc_t>
__global__ void cell_keys_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths, int64_t n,
                                 int64_t channels, int64_t total, VoxelGrid<acc_t> grid, int64_t key_bound,
                                 int64_t* __restrict__ keys) {
  const int64_t p = thread_index();
  if (p >= total) return;
  const int64_t b = p / n;
  const int64_t length = cloud_length(lengths, b, n);
  int64_t cell[3];
  const scalar_t* q = points + p * channels;
  keys[p] = p - b * n < length &&
                    grid.cell(static_cast<acc_t>(q[0]), static_cast<acc_t>(q[1]), static_cast<acc_t>(q[2]), cell)
                ? b * grid.cells() + grid.index(cell)
                : key_bound;
}

// Cloud b's voxels are the runs with keys in [b * cells, (b + 1) * cells).
__global__ void cloud_runs_kernel(HashArrayView h, int64_t batch, int64_t cells, int64_t max_voxels,
                                  int64_t* __restrict__ first_run, int64_t* __restrict__ num_voxels) {
  const int64_t b = thread_index();
  if (b >= batch) return;
  const int64_t runs = *h.num_unique;
  const int64_t begin = hash_array::lower_bound(h.unique_keys, runs, b * cells);
  const int64_t end = hash_array::lower_bound(h.unique_keys, runs, (b + 1) * cells);
  first_run[b] = begin;
  num_voxels[b] = min64(end - begin, max_voxels);
}

__global__ void flag_first_points_kernel(HashArrayView h, int64_t capacity, int32_t* __restrict__ is_first) {
  const int64_t r = thread_index();
  if (r >= capacity || r >= *h.num_unique) return;
  is_first[h.perm[h.starts[r]]] = 1;
}

// first_rank[p]: voxels of the whole batch whose first point comes before flat point p.
template <typename acc_t>
__global__ void assign_slots_kernel(HashArrayView h, int64_t capacity, VoxelGrid<acc_t> grid,
                                    const int32_t* __restrict__ first_rank, const int64_t* __restrict__ first_run,
                                    int64_t max_points, int64_t max_voxels, int32_t* __restrict__ slot_of_run,
                                    int32_t* __restrict__ coords, int32_t* __restrict__ num_points) {
  const int64_t r = thread_index();
  if (r >= capacity || r >= *h.num_unique) return;
  const int64_t cells = grid.cells();
  const int64_t key = h.unique_keys[r];
  const int64_t b = key / cells;
  const int64_t slot = first_rank[h.perm[h.starts[r]]] - first_run[b];
  if (slot >= max_voxels) {
    slot_of_run[r] = -1;
    return;
  }
  slot_of_run[r] = static_cast<int32_t>(slot);
  const int64_t row = b * max_voxels + slot;
  grid.zyx(key - b * cells, coords + row * 3);
  num_points[row] = static_cast<int32_t>(min64(h.counts[r], max_points));
}

// One thread per sorted position j; dropped points (key_bound) sort last and keep -1.
template <typename scalar_t>
__global__ void scatter_points_kernel(HashArrayView h, int64_t total, int64_t key_bound, int64_t n, int64_t channels,
                                      const int32_t* __restrict__ slot_of_run, int64_t max_points, int64_t max_voxels,
                                      const scalar_t* __restrict__ points, scalar_t* __restrict__ voxels,
                                      int64_t* __restrict__ point_voxel) {
  const int64_t j = thread_index();
  if (j >= total) return;
  const int64_t key = h.sorted_keys[j];
  if (key == key_bound) return;
  const int64_t r = h.find(key);
  const int64_t slot = slot_of_run[r];
  const int64_t p = h.perm[j];
  point_voxel[p] = slot;
  const int64_t place = j - h.starts[r];
  if (slot < 0 || place >= max_points) return;
  const int64_t b = p / n;
  const scalar_t* src = points + p * channels;
  scalar_t* dst = voxels + ((b * max_voxels + slot) * max_points + place) * channels;
  for (int64_t c = 0; c < channels; ++c) dst[c] = src[c];
}

}  // namespace

VoxelizeResult voxelize_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             at::ArrayRef<double> voxel_size, at::ArrayRef<double> point_range,
                             int64_t max_points_per_voxel, int64_t max_voxels) {
  const auto args =
      voxelize_detail::check_voxelize_args(points, lengths, voxel_size, point_range, max_points_per_voxel, max_voxels);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  VoxelizeResult outputs = voxelize_detail::empty_outputs(points, max_points_per_voxel, max_voxels);
  at::Tensor voxels, coords, num_points, num_voxels, point_voxel;
  std::tie(voxels, coords, num_points, num_voxels, point_voxel) = outputs;
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t channels = points.size(2);
  const int64_t total = batch * n;
  if (total == 0) return outputs;
  cuda::check_cub_items(total, "voxelize: B * N points");

  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* length_ptr = lengths_c.data;
  const auto options = pts.options();
  const at::Device device = pts.device();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t cells = args.dims[0] * args.dims[1] * args.dims[2];
  const int64_t key_bound = batch * cells;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "voxelize_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const auto grid = voxelize_detail::make_grid<acc_t>(args);
    const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();

    at::Tensor keys = at::empty({total}, options.dtype(at::kLong));
    cell_keys_kernel<scalar_t, acc_t><<<blocks_for(total), kThreads, 0, stream>>>(
        pts_ptr, length_ptr, n, channels, total, grid, key_bound, keys.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const cuda::HashArray hash = cuda::build_hash_array(keys, key_bound);
    const HashArrayView h = hash.view();

    at::Tensor first_run = at::empty({batch}, options.dtype(at::kLong));
    cloud_runs_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(
        h, batch, cells, max_voxels, first_run.data_ptr<int64_t>(), num_voxels.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    at::Tensor is_first = at::zeros({total}, options.dtype(at::kInt));
    flag_first_points_kernel<<<blocks_for(total), kThreads, 0, stream>>>(h, total, is_first.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::Tensor first_rank = at::empty({total}, options.dtype(at::kInt));
    cuda::exclusive_sum(is_first.data_ptr<int32_t>(), first_rank.data_ptr<int32_t>(), total, device);

    at::Tensor slot_of_run = at::empty({total}, options.dtype(at::kInt));
    assign_slots_kernel<acc_t><<<blocks_for(total), kThreads, 0, stream>>>(
        h, total, grid, first_rank.data_ptr<int32_t>(), first_run.data_ptr<int64_t>(), max_points_per_voxel, max_voxels,
        slot_of_run.data_ptr<int32_t>(), coords.data_ptr<int32_t>(), num_points.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    scatter_points_kernel<scalar_t><<<blocks_for(total), kThreads, 0, stream>>>(
        h, total, key_bound, n, channels, slot_of_run.data_ptr<int32_t>(), max_points_per_voxel, max_voxels, pts_ptr,
        voxels.data_ptr<scalar_t>(), point_voxel.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("voxelize", &voxelize_cuda); }

}  // namespace pointops
