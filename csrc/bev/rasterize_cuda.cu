// BEV rasterization on CUDA (rules and accumulators in rasterize.h; the CPU twin is
// rasterize_cpu.cpp).
//
// Scratch, one allocation: per cloud a flag word per 16 cells (2 bits a cell: claimed, ready) and
// a record per cell of kRecordHead + RecordLayout::stride 32-bit slots: the count, a pad slot
// (keeps the 64-bit fields 8-byte aligned), then the accumulators of rasterize.h. Only the flags
// are zeroed (2 bits per cell: 1.1 MB for 8 x 800 x 704 cells); records of empty cells are never
// written nor read.
//
// One memset and two launches on the current stream:
//   rasterize_points  one thread per point (2-D grid: points x clouds, so no 64-bit division):
//                     the cell; one relaxed-then-acquire load of the cell's flag word. If the cell
//                     is not ready yet, atomicOr the claimed bit: the point that claims the cell
//                     zeroes its record, fences, and sets the ready bit; a point that finds the cell
//                     claimed but not ready waits for the ready bit (only points arriving within the
//                     ~1 us between a claim and its ready bit wait). Then fire-and-forget integer
//                     atomics (RED: add for the count, max / add / or for the accumulators, see
//                     accumulate_point) into the record. Waiting on another thread of the same warp
//                     needs independent thread scheduling (sm_70+), hence the #error below.
//   finalize_cells    one thread per 4 consecutive cells of a cloud: one flag byte says which are
//                     occupied; a group with none (most of a BEV grid) stores a float4 of zeros per
//                     output channel, otherwise occupied_value (the CPU's arithmetic) fills each
//                     channel's float4 (scalar stores when cells % 4 != 0, where a float4 would be
//                     misaligned).
// Every accumulator is an integer and its identity is 0, so the result does not depend on the
// order of the atomics and equals the CPU's bit for bit.
//
// What bounds it: writing the output (case a of tools/bench.py: 8 x 3 x 800 x 704 float32 =
// 54 MB, ~15 us at ~3.5 TB/s) plus one read of the points (15 MB). The rest is small: the flags
// (1.1 MB memset + read), the records of occupied cells (~4 % of the cells), the top point's
// feature. Atomics: 2 per counted point for case a (count, top key), a few more for the 8-channel
// case b; there is no warp aggregation because LiDAR clouds come in scan (or random) order, so
// lanes of a warp rarely share a cell; same-cell contention is bounded by the hottest cell (~900
// points of a cloud next to the sensor in case a: ~900 serialized atomics per address, a few us,
// overlapped with the rest of the pass). Predicted for case a on an H200: ~2 us memset + ~6-8 us
// point pass + ~15-18 us finalize, ~25-30 us of GPU time plus the host's launch latency.
#include "bev/rasterize.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "bev rasterize_cuda.cu needs sm_70 or newer: a point may wait for another lane of its warp"
#endif

namespace pointops {
namespace {

using bev_detail::Channel;
using bev_detail::Raster;

constexpr int kThreads = 256;
constexpr int kCellsPerWord = 16;  // flag bits 2c (claimed) and 2c + 1 (ready) of word cell / 16
constexpr int kGroup = 4;          // cells per finalize thread: one float4 per channel
constexpr int32_t kRecordHead = 2; // count, pad; then the RecordLayout slots
constexpr int kUnroll = 4;         // finalize groups per thread (their flag bytes share a word)
static_assert(kUnroll * 8 <= 32 && kCellsPerWord % kGroup == 0, "flag bytes of a thread fit a word");

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

// The flag word as L2 holds it (not a stale L1 copy). A relaxed load, not an acquire: on sm_90 an
// acquire load also invalidates the SM's whole L1 (CCTL.IVALL), once per point. The atomics that
// follow a ready bit read this way are issued only once the load has returned (they depend on it
// through a branch; the GPU does not speculate) and are performed at L2, where the claimer's zeros
// were already acknowledged before its release of the ready bit; so they land after the zeros.
__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Pairs with the claimer's release of the ready bit (used while waiting, which is rare).
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Sets bits in *p after every earlier store of this thread is visible GPU-wide.
__device__ __forceinline__ void or_release(uint32_t* p, uint32_t bits) {
  asm volatile("red.release.gpu.global.or.b32 [%0], %1;" : : "l"(p), "r"(bits) : "memory");
}

// The cell is not ready: claim it (and zero its record) or wait until its claimer has.
__device__ __noinline__ void claim_or_wait(uint32_t* word, uint32_t claimed, uint32_t* record,
                                           int32_t stride) {
  const uint32_t ready = claimed << 1;
  if (!(atomicOr(word, claimed) & claimed)) {
    uint64_t* slots = reinterpret_cast<uint64_t*>(record);
    for (int32_t w = 0; w < stride / 2; ++w) slots[w] = 0;
    or_release(word, ready);  // the zeros reach L2 before anyone sees the ready bit
  } else {
    while (!(load_acquire(word) & ready)) __nanosleep(64);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    rasterize_points(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch, int64_t n,
                     const int64_t* __restrict__ lengths, uint32_t* __restrict__ flags,
                     uint32_t* __restrict__ records, int64_t words, int32_t stride) {
  const int64_t cells = r.nx * r.ny;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    int64_t length = n;
    if (lengths != nullptr) {
      const int64_t l = lengths[b];
      length = l < 0 ? 0 : (l < n ? l : n);
    }
    const scalar_t* cloud = points + b * n * r.dims;
    uint32_t* cloud_flags = flags + b * words;
    uint32_t* cloud_records = records + b * cells * stride;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < length;
         i += int64_t{gridDim.x} * blockDim.x) {
      const scalar_t* p = cloud + i * r.dims;
      const acc_t z = static_cast<acc_t>(p[2]);
      const int64_t cell =
          bev_detail::point_cell(r, static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), z);
      if (cell < 0) continue;
      uint32_t* record = cloud_records + cell * stride;
      uint32_t* word = cloud_flags + cell / kCellsPerWord;
      const uint32_t claimed = 1u << (2 * static_cast<int32_t>(cell % kCellsPerWord));
      if (!(load_relaxed(word) & (claimed << 1))) claim_or_wait(word, claimed, record, stride);
      atomicAdd(record, 1u);
      const acc_t feature = r.read_feature ? static_cast<acc_t>(p[r.feature_column]) : acc_t(0);
      bev_detail::accumulate_point<AtomicOps>(r, record + kRecordHead, z, feature,
                                              static_cast<uint32_t>(i));
    }
  }
}

// Stores 4 consecutive cells of one channel plane: a float4 when cells % 4 == 0 (then every
// group starts 16-byte aligned), else the `left` (< 4 at the end of a plane) cells one by one.
__device__ __forceinline__ void store_group(float* out, const float (&v)[kGroup], bool vector,
                                            int64_t left) {
  if (vector) {
    *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      if (j < left) out[j] = v[j];
    }
  }
}

// The claimed bits of group g's 4 cells: bits 0, 2, 4, 6 of its byte of the flag words.
__device__ __forceinline__ uint32_t group_flags(const uint32_t* flags, int64_t g) {
  constexpr int kGroupsPerWord = kCellsPerWord / kGroup;
  return (flags[g / kGroupsPerWord] >> (8 * static_cast<int32_t>(g % kGroupsPerWord))) & 0x55u;
}

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    finalize_cells(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch, int64_t n,
                   const uint32_t* __restrict__ flags, const uint32_t* __restrict__ records,
                   int64_t words, int32_t stride, float* __restrict__ image) {
  const int64_t cells = r.nx * r.ny;
  const int64_t groups = cuda::ceil_div(cells, kGroup);
  const bool vector = cells % kGroup == 0;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const scalar_t* cloud = points + b * n * r.dims;
    const uint32_t* cloud_flags = flags + b * words;
    const uint32_t* cloud_records = records + b * cells * stride;
    float* cloud_image = image + b * r.out_channels * cells;
    // kUnroll groups per thread, `step` apart (so a warp's stores stay contiguous), their flags
    // loaded up front so that the loads' latency overlaps.
    for (int64_t g0 = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g0 < groups; g0 += step * kUnroll) {
      uint32_t flag_bytes = 0;  // group q's flags in byte q
#pragma unroll
      for (int q = 0; q < kUnroll; ++q) {
        const int64_t g = g0 + q * step;
        if (g < groups) flag_bytes |= group_flags(cloud_flags, g) << (8 * q);
      }
#pragma unroll 1
      for (int q = 0; q < kUnroll; ++q) {
        const int64_t g = g0 + q * step;
        if (g >= groups) break;
        const int64_t first = g * kGroup;
        const int64_t left = cells - first;
        float* out = cloud_image + first;
        const uint32_t occupied = (flag_bytes >> (8 * q)) & 0xffu;
        if (occupied == 0) {
          const float zeros[kGroup] = {0.f, 0.f, 0.f, 0.f};
          for (int64_t c = 0; c < r.out_channels; ++c) store_group(out + c * cells, zeros, vector, left);
          continue;
        }
        // Some cell of the group is occupied (~10 % of the groups of case a): the CPU's
        // finalize_cell per cell, scalar stores; one cell at a time keeps the registers low.
#pragma unroll 1
        for (int j = 0; j < kGroup && j < left; ++j) {
          const uint32_t* record = cloud_records + (first + j) * stride;
          const uint32_t count = ((occupied >> (2 * j)) & 1u) ? record[0] : 0u;
          bev_detail::finalize_cell<scalar_t, acc_t>(r, count, record + kRecordHead, cloud, out + j, cells);
        }
      }
    }
  }
}

// A 2-D grid: x over `items` per cloud (grid-stride beyond the cap), y over clouds.
dim3 grid_for(int64_t items, int64_t batch) {
  const int64_t x = std::clamp<int64_t>(cuda::ceil_div(items, kThreads), 1, int64_t{1} << 16);
  const int64_t y = std::clamp<int64_t>(batch, 1, 65535);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
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
  const at::Tensor lengths_c = lengths.has_value() ? lengths->contiguous() : at::Tensor();
  const int64_t* lengths_ptr = lengths_c.defined() ? lengths_c.data_ptr<int64_t>() : nullptr;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "bev_rasterize_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const Raster<acc_t> r = bev_detail::make_raster<acc_t>(args, dims);
    const int32_t stride = kRecordHead + r.record.stride;  // even, so records stay 8-byte aligned
    const int64_t words = cuda::ceil_div(cells, kCellsPerWord);
    const int64_t flag_slots = cuda::round_up(batch * words, 4);  // records start 16-byte aligned
    // Flags, then records; only the flags are zeroed (records are zeroed by their claimer).
    const at::Tensor scratch =
        at::empty({flag_slots + batch * cells * stride}, points.options().dtype(at::kInt));
    uint32_t* flags = reinterpret_cast<uint32_t*>(scratch.data_ptr<int32_t>());
    uint32_t* records = flags + flag_slots;
    C10_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(uint32_t) * batch * words, stream));
    const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();
    if (n > 0) {
      rasterize_points<scalar_t, acc_t><<<grid_for(n, batch), kThreads, 0, stream>>>(
          r, pts_ptr, batch, n, lengths_ptr, flags, records, words, stride);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    finalize_cells<scalar_t, acc_t><<<grid_for(cuda::ceil_div(cells, kGroup * kUnroll), batch), kThreads, 0, stream>>>(
        r, pts_ptr, batch, n, flags, records, words, stride, image.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return image;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("bev_rasterize", &bev_rasterize_cuda); }

}  // namespace pointops
