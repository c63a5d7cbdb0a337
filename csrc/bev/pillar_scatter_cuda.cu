// Pillar scatter on CUDA (rules in pillar_scatter.h; the CPU twin is pillar_scatter_cpu.cpp).
//
// Two launches on the current stream, after a zero fill of an int32 owner per cell:
//   claim_cells   one thread per pillar: atomicMax of (P - p) on its cell's owner, so the lowest
//                 pillar index wins whatever the order of the atomics.
//   fill_canvas   one thread per cell: its F channels, the owner's features or 0, so the canvas
//                 is written exactly once and coalesced (no separate zero fill of it).
// What bounds it: writing the canvas (B * F * H * W elements); the owner map is 4 bytes per cell
// and the features are read once per placed pillar.
#include "bev/pillar_scatter.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

constexpr int kThreads = 256;

__global__ void claim_cells(const int32_t* __restrict__ coords, const int64_t* __restrict__ num_voxels, int64_t batch,
                            int64_t pillars, int64_t height, int64_t width, uint32_t* __restrict__ owner) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * pillars;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / pillars;
    const int64_t p = k - b * pillars;
    if (p >= num_voxels[b]) continue;  // a negative count places nothing
    const int32_t* zyx = coords + k * 3;
    if (zyx[0] != 0 || zyx[1] < 0 || zyx[1] >= height || zyx[2] < 0 || zyx[2] >= width) continue;
    atomicMax(owner + b * height * width + int64_t{zyx[1]} * width + zyx[2], static_cast<uint32_t>(pillars - p));
  }
}

template <typename scalar_t>
__global__ void fill_canvas(const scalar_t* __restrict__ features, const uint32_t* __restrict__ owner, int64_t batch,
                            int64_t pillars, int64_t channels, int64_t cells, scalar_t* __restrict__ canvas) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < batch * cells;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k / cells;
    const int64_t cell = k - b * cells;
    const uint32_t o = owner[k];
    scalar_t* out = canvas + b * channels * cells + cell;
    if (o == 0) {
      for (int64_t f = 0; f < channels; ++f) out[f * cells] = scalar_t(0);
    } else {
      const scalar_t* row = features + (b * pillars + (pillars - o)) * channels;
      for (int64_t f = 0; f < channels; ++f) out[f * cells] = row[f];
    }
  }
}

unsigned blocks_for(int64_t items) {
  const int64_t most = int64_t{at::cuda::getCurrentDeviceProperties()->multiProcessorCount} * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(cuda::ceil_div(items, kThreads), most)));
}

at::Tensor pillar_scatter_cuda(const at::Tensor& features, const at::Tensor& coords, const at::Tensor& num_voxels,
                               int64_t height, int64_t width) {
  pillar_detail::check_pillar_scatter_args(features, coords, num_voxels, height, width);
  check_device_type(features, "features", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(features.device());
  const int64_t batch = features.size(0);
  const int64_t pillars = features.size(1);
  const int64_t channels = features.size(2);
  const int64_t cells = height * width;
  at::Tensor canvas = at::empty({batch, channels, height, width}, features.options());
  if (batch * cells == 0) return canvas;
  const at::Tensor feats = features.contiguous();
  const at::Tensor coords_c = coords.contiguous();
  const at::Tensor counts = num_voxels.contiguous();
  const at::Tensor owner = at::zeros({batch, cells}, features.options().dtype(at::kInt));
  uint32_t* owner_ptr = reinterpret_cast<uint32_t*>(owner.data_ptr<int32_t>());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (batch * pillars > 0) {
    claim_cells<<<blocks_for(batch * pillars), kThreads, 0, stream>>>(
        coords_c.data_ptr<int32_t>(), counts.data_ptr<int64_t>(), batch, pillars, height, width, owner_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, feats.scalar_type(), "pillar_scatter_cuda", [&] {
    fill_canvas<scalar_t><<<blocks_for(batch * cells), kThreads, 0, stream>>>(
        feats.data_ptr<scalar_t>(), owner_ptr, batch, pillars, channels, cells, canvas.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return canvas;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("pillar_scatter", &pillar_scatter_cuda); }

}  // namespace pointops
