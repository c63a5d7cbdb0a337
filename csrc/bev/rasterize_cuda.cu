// BEV rasterization on CUDA (rules and accumulators in rasterize.h; the CPU twin is
// rasterize_cpu.cpp).
//
// Three launches on the current stream, after a zero fill of the int32 counts:
//   count_points        one thread per point: cell, atomicAdd on the count; the point that finds
//                       the count at 0 zeroes the cell's record.
//   accumulate_points   one thread per point (only when a channel needs a record): integer
//                       atomics (max / add / or) into the record, see accumulate_point.
//   finalize_cells      one thread per cell: every output channel, written once and coalesced.
// Every accumulator is an integer, so the result is the same in any order of the atomics.
//
// What bounds it: memory traffic. The output is written once, the counts are zeroed and read
// once, points are read twice, and records (8 to 40 bytes without slices) are touched only for
// occupied cells, so grids that are mostly empty (BEV images are) cost little more than
// the output itself. The atomics land in L2; contention is per cell.
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

// Point k of the flattened (B, N) batch, or false when it lies past its cloud's length.
__device__ __forceinline__ bool point_in_cloud(int64_t k, int64_t n, const int64_t* lengths,
                                               int64_t* b, int64_t* i) {
  *b = k / n;
  *i = k - *b * n;
  return *i < cloud_length(lengths, *b, n);
}

template <typename scalar_t, typename acc_t>
__global__ void count_points(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch,
                             int64_t n, const int64_t* __restrict__ lengths,
                             uint32_t* __restrict__ count, uint32_t* __restrict__ records) {
  const int64_t cells = r.nx * r.ny;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * n;
       k += int64_t{gridDim.x} * blockDim.x) {
    int64_t b, i;
    if (!point_in_cloud(k, n, lengths, &b, &i)) continue;
    const scalar_t* p = points + k * r.dims;
    const int64_t cell = bev_detail::point_cell(r, static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]),
                                                static_cast<acc_t>(p[2]));
    if (cell < 0) continue;
    const int64_t slot = b * cells + cell;
    if (atomicAdd(count + slot, 1u) == 0u && r.record.stride > 0) {
      // The next launch accumulates, so these stores are visible to every atomic there.
      uint64_t* record = reinterpret_cast<uint64_t*>(records + slot * r.record.stride);
      for (int32_t w = 0; w < r.record.stride / 2; ++w) record[w] = 0;
    }
  }
}

template <typename scalar_t, typename acc_t>
__global__ void accumulate_points(Raster<acc_t> r, const scalar_t* __restrict__ points,
                                  int64_t batch, int64_t n, const int64_t* __restrict__ lengths,
                                  uint32_t* __restrict__ records) {
  const int64_t cells = r.nx * r.ny;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * n;
       k += int64_t{gridDim.x} * blockDim.x) {
    int64_t b, i;
    if (!point_in_cloud(k, n, lengths, &b, &i)) continue;
    const scalar_t* p = points + k * r.dims;
    const acc_t z = static_cast<acc_t>(p[2]);
    const int64_t cell =
        bev_detail::point_cell(r, static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), z);
    if (cell < 0) continue;
    const acc_t feature = r.read_feature ? static_cast<acc_t>(p[r.feature_column]) : acc_t(0);
    bev_detail::accumulate_point<AtomicOps>(r, records + (b * cells + cell) * r.record.stride, z,
                                            feature, static_cast<uint32_t>(i));
  }
}

template <typename scalar_t, typename acc_t>
__global__ void finalize_cells(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch,
                               int64_t n, const uint32_t* __restrict__ count,
                               const uint32_t* __restrict__ records, float* __restrict__ image) {
  const int64_t cells = r.nx * r.ny;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * cells;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / cells;
    const int64_t cell = k - b * cells;
    bev_detail::finalize_cell<scalar_t, acc_t>(r, count[k], records + k * r.record.stride,
                                               points + b * n * r.dims,
                                               image + b * r.out_channels * cells + cell, cells);
  }
}

// Enough blocks to fill the device a few times over; the kernels stride over the rest.
unsigned blocks_for(int64_t items) {
  const int64_t most = int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(cuda::ceil_div(items, kThreads), most)));
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

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "bev_rasterize_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const Raster<acc_t> r = bev_detail::make_raster<acc_t>(args, dims);
    const at::Tensor count = at::zeros({batch, cells}, points.options().dtype(at::kInt));
    // Records of empty cells are never read, so only the counts need zeroing.
    const at::Tensor records = at::empty({batch, cells * r.record.stride}, points.options().dtype(at::kInt));
    uint32_t* count_ptr = reinterpret_cast<uint32_t*>(count.data_ptr<int32_t>());
    uint32_t* records_ptr = reinterpret_cast<uint32_t*>(records.data_ptr<int32_t>());
    const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();
    if (batch * n > 0) {
      count_points<scalar_t, acc_t><<<blocks_for(batch * n), kThreads, 0, stream>>>(
          r, pts_ptr, batch, n, lengths_ptr, count_ptr, records_ptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      if (r.record.stride > 0) {
        accumulate_points<scalar_t, acc_t><<<blocks_for(batch * n), kThreads, 0, stream>>>(
            r, pts_ptr, batch, n, lengths_ptr, records_ptr);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    }
    finalize_cells<scalar_t, acc_t><<<blocks_for(batch * cells), kThreads, 0, stream>>>(
        r, pts_ptr, batch, n, count_ptr, records_ptr, image.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return image;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("bev_rasterize", &bev_rasterize_cuda); }

}  // namespace pointops
