// BEV rasterization on CUDA (rules and accumulators in rasterize.h; the CPU twin is
// rasterize_cpu.cpp).
//
// A zero fill of the counts (and of the image when the leaders finalize), then on the current
// stream:
//   count_points        cell, atomicAdd on the count; the point that finds the count at 0 is the
//                       cell's leader: it zeroes the cell's record (records of empty cells are
//                       never written nor read) and, when the leaders finalize, lists its cell.
//   accumulate_points   (when a channel needs a record) accumulate_point's integer atomics (max /
//                       add / or) into the record. They are order-free, so the result is the same
//                       in any order.
//   finalize            finalize_cell writes each occupied cell's channels, either
//     finalize_occupied   once per listed cell, after the fill wrote 0 to every channel, or
//     finalize_cells      by a thread per cell, every channel of every cell written once.
// The point launches run a 2-D grid (x: rows of a cloud, y: clouds), so no thread divides a flat
// index.
//
// Leaders finalize when a cloud's points times the output channels are at most its cells (from
// H200 measurements of issue 3's two cases, tools/bench.py). A pass over the cells reads every
// count and, for each occupied cell, the record and then the top point: dependent loads that
// left it latency-bound (62 of 119 us with 8 x 120k points on 800 x 704 cells, 3 channels),
// where the fill runs at memset speed. With many points and channels per cell (8 x 300k points
// on 1024 x 1024 cells, 8 channels) the listed cells' scattered partial-sector stores cost more
// than the pass over the cells.
//
// What bounds it (H200, KITTI case, torch.profiler): the fills 18 us (72 MB), count_points 24 us,
// accumulate_points 16 us, finalize_occupied 32 us. None is near bandwidth: the counts, records
// and image (108 MB, more than L2) are touched at random, one 32-byte sector per access, and
// finalize_occupied's ~1.1M random sectors in 32 us are ~35e9 per second, the order of what HBM
// row activations allow. Giving each thread 1, 2 or 4 points with their loads and atomics
// issued together changed nothing.
#include "bev/rasterize.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using bev_detail::Raster;

constexpr int kThreads = 256;

struct AtomicOps {
  __device__ static void max64(uint64_t* p, uint64_t v) {
    atomicMax(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }
  __device__ static void max32(uint32_t* p, uint32_t v) { atomicMax(p, v); }
  __device__ static uint64_t add64(uint64_t* p, uint64_t v) {
    return atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }
  __device__ static void or32(uint32_t* p, uint32_t v) { atomicOr(p, v); }
};

// Calls visit(b, row) for each row of cloud b this thread owns in the 2-D grid; row is -1 past the
// cloud's length. Whole blocks take the same trips, so every thread reaches append_block's
// barriers.
template <typename Visit>
__device__ __forceinline__ void for_each_row(int64_t batch, int64_t n, const int64_t* lengths,
                                             Visit visit) {
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const int64_t length = cloud_length(lengths, b, n);
    for (int64_t first = blockIdx.x * int64_t{blockDim.x}; first < length;
         first += int64_t{gridDim.x} * blockDim.x) {
      const int64_t row = first + threadIdx.x;
      visit(b, row < length ? row : -1);
    }
  }
}

// A point's coordinates and feature in the compute type.
template <typename acc_t>
struct PointValues {
  acc_t x, y, z, feature;
};

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ PointValues<acc_t> read_point(const Raster<acc_t>& r, const scalar_t* p,
                                                         bool with_feature) {
  return {static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), static_cast<acc_t>(p[2]),
          with_feature ? static_cast<acc_t>(p[r.feature_column]) : acc_t(0)};
}

// The slot (cloud b's cell) of a point, or -1 when it does not count.
template <typename acc_t>
__device__ __forceinline__ int64_t point_slot(const Raster<acc_t>& r, const PointValues<acc_t>& v,
                                              int64_t b) {
  const int64_t cell = bev_detail::point_cell(r, v.x, v.y, v.z);
  return cell < 0 ? -1 : b * r.nx * r.ny + cell;
}

// Appends the slots of the block's picked threads to list: one atomic on *list_count per block
// and call, since one counter shared by every warp serializes in L2 (measured: a warp-level
// append took count_points from 24 to 62 us in the KITTI case). Every thread of the block calls
// it (it has barriers).
__device__ __forceinline__ void append_block(bool picked, int64_t slot, int64_t* list,
                                             unsigned long long* list_count) {
  __shared__ uint32_t warp_totals[kThreads / cuda::kWarpSize];
  __shared__ unsigned long long block_base;
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int warp = threadIdx.x / cuda::kWarpSize;
  const uint32_t ballot = __ballot_sync(cuda::kFullMask, picked);
  if (lane == 0) warp_totals[warp] = __popc(ballot);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kThreads / cuda::kWarpSize; ++w) total += warp_totals[w];
    block_base = total == 0 ? 0 : atomicAdd(list_count, static_cast<unsigned long long>(total));
  }
  __syncthreads();
  if (picked) {
    unsigned long long at = block_base + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) at += warp_totals[w];
    list[at] = slot;
  }
  __syncthreads();  // warp_totals and block_base are rewritten by the next call
}

// leader_list / leader_count: null unless the leaders finalize; then every leader's slot is
// listed, in no particular order: each cell is finalized alone.
template <typename scalar_t, typename acc_t>
__global__ void count_points(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch,
                             int64_t n, const int64_t* __restrict__ lengths,
                             uint32_t* __restrict__ count, uint32_t* __restrict__ records,
                             int64_t* __restrict__ leader_list,
                             unsigned long long* __restrict__ leader_count) {
  for_each_row(batch, n, lengths, [&](int64_t b, int64_t row) {
    const int64_t slot =
        row >= 0 ? point_slot(r, read_point(r, points + (b * n + row) * r.dims, false), b) : -1;
    const bool leads = slot >= 0 && atomicAdd(count + slot, 1u) == 0u;
    if (leads && r.record.stride > 0) {
      // accumulate_points runs next, so these stores are visible to every atomic there.
      uint64_t* record = reinterpret_cast<uint64_t*>(records + slot * r.record.stride);
      for (int32_t w = 0; w < r.record.stride / 2; ++w) record[w] = 0;
    }
    if (leader_list != nullptr) append_block(leads, slot, leader_list, leader_count);
  });
}

template <typename scalar_t, typename acc_t>
__global__ void accumulate_points(Raster<acc_t> r, const scalar_t* __restrict__ points,
                                  int64_t batch, int64_t n, const int64_t* __restrict__ lengths,
                                  uint32_t* __restrict__ records) {
  for_each_row(batch, n, lengths, [&](int64_t b, int64_t row) {
    if (row < 0) return;
    const PointValues<acc_t> v = read_point(r, points + (b * n + row) * r.dims, r.read_feature);
    const int64_t slot = point_slot(r, v, b);
    if (slot >= 0) {
      bev_detail::accumulate_point<AtomicOps>(r, records + slot * r.record.stride, v.z, v.feature,
                                              static_cast<uint32_t>(row));
    }
  });
}

template <typename scalar_t, typename acc_t>
__global__ void finalize_occupied(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t n,
                                  const int64_t* __restrict__ leader_list,
                                  const unsigned long long* __restrict__ leader_count,
                                  const uint32_t* __restrict__ count,
                                  const uint32_t* __restrict__ records, float* __restrict__ image) {
  const int64_t cells = r.nx * r.ny;
  const int64_t leaders = static_cast<int64_t>(*leader_count);
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < leaders;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t slot = leader_list[j];
    const int64_t b = slot / cells;
    const int64_t cell = slot - b * cells;
    bev_detail::finalize_cell<scalar_t, acc_t>(r, count[slot], records + slot * r.record.stride,
                                               points + b * n * r.dims,
                                               image + b * r.out_channels * cells + cell, cells);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void finalize_cells(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch,
                               int64_t n, const uint32_t* __restrict__ count,
                               const uint32_t* __restrict__ records, float* __restrict__ image) {
  const int64_t cells = r.nx * r.ny;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    for (int64_t cell = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; cell < cells;
         cell += int64_t{gridDim.x} * blockDim.x) {
      const int64_t slot = b * cells + cell;
      bev_detail::finalize_cell<scalar_t, acc_t>(r, count[slot], records + slot * r.record.stride,
                                                 points + b * n * r.dims,
                                                 image + b * r.out_channels * cells + cell, cells);
    }
  }
}

// A 2-D grid over (items per cloud, clouds) that fills the device a few times over; the kernels
// stride over the rest.
dim3 grid_for(int64_t items, int64_t batch) {
  const int64_t most = int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} * 32;
  const int64_t clouds = std::min<int64_t>(batch, 65535);
  const int64_t x = std::max<int64_t>(1, std::min(cuda::ceil_div(items, kThreads), cuda::ceil_div(most, clouds)));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(clouds));
}

at::Tensor bev_rasterize_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                              c10::ArrayRef<double> point_range, c10::ArrayRef<double> cell_size,
                              c10::ArrayRef<std::string> channels, int64_t feature_column,
                              double density_base, int64_t height_slices, bool seed_layout) {
  const bev_detail::RasterArgs args =
      bev_detail::parse_raster_args(points, lengths, point_range, cell_size, channels,
                                    feature_column, density_base, height_slices, seed_layout);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t dims = points.size(2);
  at::Tensor image = at::empty(bev_detail::image_shape(args, batch), points.options().dtype(at::kFloat));
  if (batch == 0) return image;
  const int64_t cells = args.nx * args.ny;
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* lengths_ptr = lengths_c.data;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  auto fill_zero = [&](const at::Tensor& t) {
    if (t.nbytes() > 0) C10_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream));
  };
  // See the file comment. With no points, the fill is the whole image.
  const bool by_leaders = n * args.out_channels <= cells;
  if (n == 0) {
    fill_zero(image);
    return image;
  }

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "bev_rasterize_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const Raster<acc_t> r = bev_detail::make_raster<acc_t>(args, dims);
    // The counts, then (8-byte aligned) the number of leaders; one fill zeroes both.
    const int64_t count_words = cuda::round_up(batch * cells, 2);
    const at::Tensor count = at::empty({count_words + 2}, points.options().dtype(at::kInt));
    fill_zero(count);
    // Records of empty cells are never read, so only the counts need zeroing.
    const at::Tensor records = at::empty({batch, cells * r.record.stride}, points.options().dtype(at::kInt));
    at::Tensor leader_list;
    if (by_leaders) leader_list = at::empty({batch * n}, points.options().dtype(at::kLong));
    uint32_t* count_ptr = reinterpret_cast<uint32_t*>(count.data_ptr<int32_t>());
    auto* leader_count = reinterpret_cast<unsigned long long*>(count_ptr + count_words);
    uint32_t* records_ptr = reinterpret_cast<uint32_t*>(records.data_ptr<int32_t>());
    int64_t* leader_ptr = by_leaders ? leader_list.data_ptr<int64_t>() : nullptr;
    const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();
    const dim3 point_grid = grid_for(n, batch);
    count_points<scalar_t, acc_t><<<point_grid, kThreads, 0, stream>>>(
        r, pts_ptr, batch, n, lengths_ptr, count_ptr, records_ptr, leader_ptr,
        by_leaders ? leader_count : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (r.record.stride > 0) {
      accumulate_points<scalar_t, acc_t><<<point_grid, kThreads, 0, stream>>>(
          r, pts_ptr, batch, n, lengths_ptr, records_ptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    float* image_ptr = image.data_ptr<float>();
    if (by_leaders) {
      // Every channel of the empty cells is 0; the leaders overwrite the occupied cells.
      fill_zero(image);
      // One resident wave of threads; each takes the leaders its stride reaches.
      const int64_t wave = int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} *
                           (2048 / kThreads);
      const auto blocks = static_cast<unsigned>(std::min(wave, cuda::ceil_div(batch * n, kThreads)));
      finalize_occupied<scalar_t, acc_t><<<blocks, kThreads, 0, stream>>>(
          r, pts_ptr, n, leader_ptr, leader_count, count_ptr, records_ptr, image_ptr);
    } else {
      finalize_cells<scalar_t, acc_t><<<grid_for(cells, batch), kThreads, 0, stream>>>(
          r, pts_ptr, batch, n, count_ptr, records_ptr, image_ptr);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return image;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("bev_rasterize", &bev_rasterize_cuda); }

}  // namespace pointops
