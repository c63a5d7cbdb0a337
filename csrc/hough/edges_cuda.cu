// Edge maps to point lists on CUDA (rules in edges.h; the CPU twin is edges_cpu.cpp): ordered
// stream compaction in two passes over 4,096-pixel tiles (a tile never spans two images).
//
//   count: each warp ballots its pixels (32 consecutive pixels per ballot, so the loads coalesce)
//          and the block adds the popcounts: one int64 count per tile;
//   scan:  one CUB exclusive sum over the tile counts (the batch's tiles in order), so a tile's
//          first point index is its offset minus its image's first tile's offset;
//   write: the tile's ballots again; the (step, warp) counts are scanned in shared memory and a
//          pixel's rank is its (step, warp) prefix plus the set bits below its lane, i.e. its
//          position in row-major order. The last tile of an image writes the image's length.
// The map is read twice (bool: 2 bytes per pixel in all), points are written once; no atomics,
// so the output is the same on every run.
#include "hough/edges.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"

namespace pointops {
namespace {

using cuda::kFullMask;
using cuda::kWarpSize;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kSteps = 16;                             // ballots per thread and tile
constexpr int64_t kTile = int64_t{kThreads} * kSteps;  // pixels per tile

// Ballot k of warp w covers pixels first + k * kThreads + w * 32 + [0, 32): row-major order is
// (k, w, lane) order.
template <typename scalar_t>
__device__ __forceinline__ void tile_ballots(const scalar_t* __restrict__ image, int64_t first, int64_t pixels,
                                             uint32_t (&masks)[kSteps]) {
  bool flags[kSteps];
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {  // all loads first, so they are in flight together
    const int64_t i = first + int64_t{k} * kThreads + threadIdx.x;
    flags[k] = i < pixels && image[i] != scalar_t(0);
  }
#pragma unroll
  for (int k = 0; k < kSteps; ++k) masks[k] = __ballot_sync(kFullMask, flags[k]);
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    count_tiles_kernel(const scalar_t* __restrict__ edges, int64_t pixels, int64_t tiles_per_image, int64_t n_tiles,
                       int64_t* __restrict__ counts) {
  __shared__ int32_t warp_counts[kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t b = tile / tiles_per_image;
    const int64_t first = (tile - b * tiles_per_image) * kTile;
    uint32_t masks[kSteps];
    tile_ballots(edges + b * pixels, first, pixels, masks);
    int32_t count = 0;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) count += __popc(masks[k]);
    if (lane == 0) warp_counts[warp] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t total = 0;
      for (int w = 0; w < kWarps; ++w) total += warp_counts[w];
      counts[tile] = total;
    }
    __syncthreads();
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    write_points_kernel(const scalar_t* __restrict__ edges, int64_t pixels, int32_t width, int64_t tiles_per_image,
                        int64_t n_tiles, const int64_t* __restrict__ offsets, int64_t capacity,
                        int32_t* __restrict__ points, int64_t* __restrict__ lengths) {
  __shared__ int32_t prefix[kSteps * kWarps];  // exclusive prefix of the (step, warp) counts
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t b = tile / tiles_per_image;
    const int64_t t = tile - b * tiles_per_image;
    const int64_t first = t * kTile;
    const int64_t image_base = offsets[b * tiles_per_image];
    const int64_t tile_base = offsets[tile] - image_base;  // points of this image before the tile
    uint32_t masks[kSteps];
    tile_ballots(edges + b * pixels, first, pixels, masks);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) prefix[k * kWarps + warp] = __popc(masks[k]);
    }
    __syncthreads();
    if (warp == 0) {  // exclusive scan of kSteps * kWarps = 128 counts, 4 per lane
      constexpr int kPer = kSteps * kWarps / kWarpSize;
      int32_t v[kPer], sum = 0;
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        v[q] = prefix[lane * kPer + q];
        sum += v[q];
      }
      int32_t inclusive = sum;
#pragma unroll
      for (int d = 1; d < kWarpSize; d *= 2) {
        const int32_t up = __shfl_up_sync(kFullMask, inclusive, d);
        if (lane >= d) inclusive += up;
      }
      int32_t running = inclusive - sum;
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        prefix[lane * kPer + q] = running;
        running += v[q];
      }
    }
    __syncthreads();
    int32_t* image_points = points + b * capacity * 2;
    const uint32_t below = (1u << lane) - 1u;
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      if (masks[k] >> lane & 1u) {
        const int64_t pos = tile_base + prefix[k * kWarps + warp] + __popc(masks[k] & below);
        if (pos < capacity) {
          const int64_t i = first + int64_t{k} * kThreads + threadIdx.x;
          image_points[pos * 2] = static_cast<int32_t>(i % width);
          image_points[pos * 2 + 1] = static_cast<int32_t>(i / width);
        }
      }
    }
    if (t == tiles_per_image - 1 && threadIdx.x == 0) {
      const int64_t total = offsets[tile + 1] - image_base;
      lengths[b] = total < capacity ? total : capacity;
    }
    __syncthreads();  // prefix is rewritten by the next tile
  }
}

std::tuple<at::Tensor, at::Tensor> edge_points_cuda(const at::Tensor& edges, int64_t capacity) {
  const int64_t cap = hough_images::edge_capacity(edges, capacity);
  const c10::cuda::CUDAGuard guard(edges.device());
  const at::Tensor e = edges.contiguous();
  const int64_t batch = e.size(0), height = e.size(1), width = e.size(2);
  at::Tensor points = at::full({batch, cap, 2}, -1, e.options().dtype(at::kInt));
  at::Tensor lengths = at::zeros({batch}, e.options().dtype(at::kLong));
  const int64_t pixels = height * width;
  const int64_t tiles_per_image = cuda::ceil_div(pixels, kTile);
  const int64_t n_tiles = batch * tiles_per_image;
  if (n_tiles == 0) return {points, lengths};
  cuda::check_cub_items(n_tiles + 1, "edge_points (tiles of 4096 pixels)");
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // counts[n_tiles] stays 0, so offsets[n_tiles] is the batch's total.
  at::Tensor counts = at::zeros({n_tiles + 1}, e.options().dtype(at::kLong));
  at::Tensor offsets = at::empty({n_tiles + 1}, e.options().dtype(at::kLong));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(n_tiles, 1 << 20));
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, e.scalar_type(), "edge_points_cuda", [&] {
    count_tiles_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(e.data_ptr<scalar_t>(), pixels, tiles_per_image,
                                                                n_tiles, counts.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t* in = counts.data_ptr<int64_t>();
    int64_t* out = offsets.data_ptr<int64_t>();
    cuda::cub_call(e.device(), [&](void* temp, size_t& bytes) {
      return cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, static_cast<int>(n_tiles + 1), stream);
    });
    write_points_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
        e.data_ptr<scalar_t>(), pixels, static_cast<int32_t>(width), tiles_per_image, n_tiles,
        offsets.data_ptr<int64_t>(), cap, points.data_ptr<int32_t>(), lengths.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {points, lengths};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("edge_points", &edge_points_cuda); }

}  // namespace pointops
