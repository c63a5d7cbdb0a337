// Circle accumulators of edge maps on CUDA (rules in circles_map.h; the CPU twin is
// circles_map_cpu.cpp): two launches, pack_bits (the map as bits, one ballot per 32 pixels) and a
// vote kernel in which every lane owns a word of 32 centres and counts its rings' votes with
// bit-sliced carry-save adders (circle_bitmap.h). Sizes these kernels do not cover take the CPU's
// path, edge_points and the point-list kernels (circles_cuda.cu), on the GPU.
//
// Bitmap vote kernels. A block owns a run of 32 x word_warps consecutive words of centres (row
// major within a column tile of at most 32 words) and keeps the bits of the rows they need, +-
// r_max, in shared memory (the band, with ceil(r_max / 32) words of margin on the left and
// r_max / 32 + 1 on the right, zero outside the image). Its warps are word_warps groups of 32
// words times n_chunks radius lists (circles_map.h): a warp counts its list's rings for its 32
// words. A fetch is two shared loads and a funnel shift; the band's row stride is = the tile's
// width (mod 32), so the 32 words of a warp, consecutive in row-major order, sit in 32 different
// banks for every offset. Per offset and warp: 2 loads, 1 shift and ~2 logic ops for 1,024
// centre-votes; no atomics. The 512 x 512 image with radii 40..100 is 8,192 words x 24,650
// offsets = 2.0e8 warp-lane steps; the scatter kernel's 1.5e8 votes each cost a shared atomic.
//   hough_circles_max_map: each warp keeps its list's best count (bit-sliced, compared from the
//   top plane down) and position, or for normalize its best score per centre; the lists meet in
//   shared memory through 64-bit keys (atomicMax), and the block writes scores and indices
//   coalesced. No (B, R, H, W) accumulator, no global atomics.
//   hough_circles_map: after each radius the warp transposes its counters into counts, stages
//   them in shared memory and writes 128 contiguous bytes per store.
// Grid: enough (column tile, run, list) warps for ~16 per SM: lists are split (1, 2, 4 or 8)
// only when the images alone give too few.
#include "hough/circles_map.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "common/argmax_key.h"
#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using cuda::kFullMask;
using cuda::kWarpSize;
namespace bitmap = hough_images::bitmap;

constexpr int kPackThreads = 256;
constexpr int kPackUnroll = 4;
constexpr int kBlockWarps = 8;    // word_warps x n_chunks
constexpr int kMergeStride = 33;  // keys per word in the merge buffer: 32 centres + 1 (banks)
constexpr int kStageStride = 33;  // counts per word in a warp's staging buffer

// ---- the map as bits ----

template <typename scalar_t>
__global__ void __launch_bounds__(kPackThreads)
    pack_bits_kernel(const scalar_t* __restrict__ edges, int64_t n_words, int32_t width, int32_t words,
                     uint32_t* __restrict__ bits) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarpSize;
  const int64_t n_warps = int64_t{gridDim.x} * blockDim.x / kWarpSize;
  for (int64_t w0 = warp * kPackUnroll; w0 < n_words; w0 += n_warps * kPackUnroll) {
    bool on[kPackUnroll];
#pragma unroll
    for (int u = 0; u < kPackUnroll; ++u) {  // the loads first, so they are in flight together
      const int64_t w = w0 + u;
      on[u] = false;
      if (w < n_words) {
        const int64_t row = w / words;  // over all images' rows
        const int32_t x = static_cast<int32_t>(w - row * words) * 32 + lane;
        if (x < width) on[u] = edges[row * width + x] != scalar_t(0);  // NaN != 0: an edge
      }
    }
#pragma unroll
    for (int u = 0; u < kPackUnroll; ++u) {
      const uint32_t mask = __ballot_sync(kFullMask, on[u]);
      if (lane == 0 && w0 + u < n_words) bits[w0 + u] = mask;
    }
  }
}

at::Tensor pack_bits(const at::Tensor& edges, int64_t words, cudaStream_t stream) {
  const at::Tensor e = edges.contiguous();
  const int64_t batch = e.size(0), height = e.size(1), width = e.size(2);
  at::Tensor bits = at::empty({batch, height, words}, e.options().dtype(at::kInt));
  const int64_t n_words = batch * height * words;
  const int64_t warps = cuda::ceil_div(n_words, kPackUnroll);
  const unsigned grid =
      static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(warps * kWarpSize, kPackThreads), 1 << 20));
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, e.scalar_type(), "hough_circles_map_bits", [&] {
    pack_bits_kernel<scalar_t><<<grid, kPackThreads, 0, stream>>>(
        e.data_ptr<scalar_t>(), n_words, static_cast<int32_t>(width), static_cast<int32_t>(words),
        reinterpret_cast<uint32_t*>(bits.data_ptr<int32_t>()));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return bits;
}

// ---- votes ----

struct BitmapLaunch {
  const uint32_t* bits;                // (B, H, words)
  const int32_t* starts;               // [n_chunks + 1] into entries
  const bitmap::RadiusEntry* entries;  // the chunk lists
  int32_t height, width, words, n_radii;
  int32_t n_col_tiles, flat_blocks, word_warps, n_chunks;
  int32_t r_max, pad_left, pad_right;
  int32_t band_pairs;  // the largest band of the launch (rows x stride)
};

// A block's place: image b, column tile [c0, c0 + cols) of the word grid, flat words [f0, f1)
// (row-major within the tile), the band's first row and its stride.
struct BlockPlace {
  int64_t b;
  int32_t c0, cols, f0, f1, row_lo, band_rows, stride;
};

__device__ __forceinline__ bool block_place(const BitmapLaunch& a, BlockPlace& p) {
  int64_t id = blockIdx.x;
  const int32_t j = static_cast<int32_t>(id % a.flat_blocks);
  id /= a.flat_blocks;
  const int32_t ct = static_cast<int32_t>(id % a.n_col_tiles);
  p.b = id / a.n_col_tiles;
  p.c0 = ct * a.words / a.n_col_tiles;
  p.cols = (ct + 1) * a.words / a.n_col_tiles - p.c0;
  const int32_t total = a.height * p.cols;  // <= 32767 x 32: no overflow
  p.f0 = j * 32 * a.word_warps;
  if (p.f0 >= total) return false;  // the narrower tiles need fewer blocks
  p.f1 = min(p.f0 + 32 * a.word_warps, total);
  p.row_lo = p.f0 / p.cols;
  p.band_rows = (p.f1 - 1) / p.cols - p.row_lo + 1 + 2 * a.r_max;
  // = cols (mod 32): the words at consecutive flat indices fall in consecutive banks
  p.stride = p.cols + ((a.pad_left + a.pad_right + 31) / 32) * 32;
  return true;
}

// The band: rows [row_lo - r_max, row_hi + r_max], words [c0 - pad_left, c0 - pad_left + stride)
// of image b, zero outside the image, stored as pairs (word i, word i + 1): a fetch is then one
// 8-byte load (half a warp's 16 pairs per wavefront, in distinct banks) and a funnel shift.
__device__ __forceinline__ void load_band(const BitmapLaunch& a, const BlockPlace& p, uint2* band) {
  const uint32_t* image = a.bits + p.b * a.height * int64_t{a.words};
  const int32_t n = p.band_rows * p.stride;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t br = i / p.stride, bc = i - br * p.stride;
    const int32_t y = p.row_lo - a.r_max + br, w = p.c0 - a.pad_left + bc;
    const bool row_in = y >= 0 && y < a.height;
    const uint32_t* row = image + int64_t{y} * a.words;
    const uint32_t lo = row_in && w >= 0 && w < a.words ? row[w] : 0u;
    const uint32_t hi = row_in && w + 1 >= 0 && w + 1 < a.words ? row[w + 1] : 0u;
    band[i] = make_uint2(lo, hi);
  }
}

struct SmemFetch {
  using Row = const char*;
  using Pair = uint2;
  static constexpr int32_t kWordStep = 8;  // addresses in bytes of the pair array
  Row base;                                // this lane's word's pair
  int32_t row_step;                        // stride * 8
  __device__ __forceinline__ Row row(int32_t offset) const { return base + offset; }
  __device__ __forceinline__ Pair load(Row row, int32_t q) const { return *reinterpret_cast<const uint2*>(row + q); }
  __device__ __forceinline__ static uint32_t shift(Pair w, int32_t s) { return bitmap::funnel(w.x, w.y, s); }
  __device__ __forceinline__ uint32_t operator()(Row row, int32_t q, int32_t s) const { return shift(load(row, q), s); }
};

// This lane's word: its flat index in the block (clamped to the block's first word for the lanes
// past the run, which compute and discard), row and column in the tile, and its band fetch.
struct LaneWord {
  int32_t f, row, col;
  bool active;
};

__device__ __forceinline__ LaneWord lane_word(const BlockPlace& p, int32_t word_warp) {
  LaneWord w;
  w.f = p.f0 + word_warp * 32 + static_cast<int32_t>(threadIdx.x % kWarpSize);
  w.active = w.f < p.f1;
  if (!w.active) w.f = p.f0;
  w.row = w.f / p.cols;
  w.col = w.f - w.row * p.cols;
  return w;
}

// Centre e of a block's run (word e / 32, bit e % 32): its column, and its index in (B, H, W).
__device__ __forceinline__ int32_t centre_x(const BlockPlace& p, int32_t e) {
  const int32_t f = p.f0 + e / 32;
  return 32 * (p.c0 + f % p.cols) + e % 32;
}

__device__ __forceinline__ int64_t centre_index(const BitmapLaunch& a, const BlockPlace& p, int32_t e, int32_t x) {
  const int32_t row = (p.f0 + e / 32) / p.cols;
  return (p.b * a.height + row) * int64_t{a.width} + x;
}

// Counts: at most 85 registers (3 blocks of 256 threads per SM; the vote loop needs ~80, the
// epilogue's transposes would otherwise raise the kernel to 128). Normalize keeps 32 scores and
// positions per lane: 2 blocks.
template <bool kNormalize>
__global__ void __launch_bounds__(kBlockWarps* kWarpSize, kNormalize ? 2 : 3)
    circle_bitmap_max_kernel(BitmapLaunch a, uint32_t* __restrict__ score_bits, int64_t* __restrict__ radius_index) {
  extern __shared__ __align__(16) unsigned char bitmap_smem[];
  uint2* band = reinterpret_cast<uint2*>(bitmap_smem);
  unsigned long long* merge = reinterpret_cast<unsigned long long*>(bitmap_smem);  // after the votes
  BlockPlace p;
  if (!block_place(a, p)) return;  // the whole block: no barrier is skipped by part of it
  load_band(a, p, band);
  __syncthreads();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int32_t word_warp = warp % a.word_warps, chunk = warp / a.word_warps;
  const LaneWord w = lane_word(p, word_warp);
  const SmemFetch fetch{
      reinterpret_cast<const char*>(band + (w.row - p.row_lo + a.r_max) * p.stride + a.pad_left + w.col), p.stride * 8};
  const int32_t first = a.starts[chunk], last = a.starts[chunk + 1];
  using Best = std::conditional_t<kNormalize, bitmap::BestScores, bitmap::BestPlanes>;
  Best best;
  best.clear();
  uint32_t counts[bitmap::kPlanes];
  for (int32_t e = first; e < last; ++e) {
    const bitmap::RadiusEntry radius = a.entries[e];
    bitmap::ring_counts(radius.r, radius.planes, fetch, counts);
    if constexpr (kNormalize) {
      best.fold(counts, radius.ring, static_cast<uint32_t>(e - first));
    } else {
      best.fold(counts, static_cast<uint32_t>(e - first));
    }
  }
  __syncthreads();                       // the band is read no more: its memory becomes the merge / staging buffer
  const int32_t n = (p.f1 - p.f0) * 32;  // the run's centres, written coalesced: thread e takes
  const int32_t slot0 = (word_warp * 32 + lane) * kMergeStride;  // centre e % 32 of word e / 32
  if (a.n_chunks > 1) {  // the lists meet through 64-bit keys (atomicMax: any order, one result)
    for (int32_t i = threadIdx.x; i < 32 * a.word_warps * kMergeStride; i += blockDim.x) merge[i] = 0;
    __syncthreads();
    if (first < last) {
      best.emit([&](int j, uint32_t score_key, uint32_t position) {
        atomicMax(merge + slot0 + j, argmax_key(score_key, static_cast<uint32_t>(a.entries[first + position].index)));
      });
    }
    __syncthreads();
    for (int32_t e = threadIdx.x; e < n; e += blockDim.x) {
      const int32_t x = centre_x(p, e);
      if (x >= a.width) continue;
      const unsigned long long key = merge[(e / 32) * kMergeStride + e % 32];
      const int64_t i = centre_index(a, p, e, x);
      score_bits[i] = hough_images::unordered_bits(argmax_key_value(key), kNormalize);
      radius_index[i] = static_cast<int64_t>(argmax_key_index(key));
    }
  } else {  // one list: no merge; scores, then indices, staged as 32-bit words (half the memory)
    uint32_t* stage = reinterpret_cast<uint32_t*>(bitmap_smem);
    for (int pass = 0; pass < 2; ++pass) {
      best.emit([&](int j, uint32_t score_key, uint32_t position) {
        stage[slot0 + j] = pass == 0 ? hough_images::unordered_bits(score_key, kNormalize)
                                     : static_cast<uint32_t>(a.entries[first + position].index);
      });
      __syncthreads();
      for (int32_t e = threadIdx.x; e < n; e += blockDim.x) {
        const int32_t x = centre_x(p, e);
        if (x >= a.width) continue;
        const uint32_t v = stage[(e / 32) * kMergeStride + e % 32];
        const int64_t i = centre_index(a, p, e, x);
        if (pass == 0) {
          score_bits[i] = v;
        } else {
          radius_index[i] = static_cast<int64_t>(v);
        }
      }
      __syncthreads();  // the next pass overwrites the stage
    }
  }
}

__global__ void __launch_bounds__(kBlockWarps* kWarpSize)
    circle_bitmap_map_kernel(BitmapLaunch a, int32_t* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char bitmap_smem[];
  BlockPlace p;
  if (!block_place(a, p)) return;
  uint2* band = reinterpret_cast<uint2*>(bitmap_smem);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  // after the band (sized for the largest band of the launch): one staging buffer per warp
  uint32_t* stage = reinterpret_cast<uint32_t*>(band + a.band_pairs) + warp * 32 * kStageStride;
  load_band(a, p, band);
  __syncthreads();
  const int32_t word_warp = warp % a.word_warps, chunk = warp / a.word_warps;
  const LaneWord w = lane_word(p, word_warp);
  const SmemFetch fetch{
      reinterpret_cast<const char*>(band + (w.row - p.row_lo + a.r_max) * p.stride + a.pad_left + w.col), p.stride * 8};
  const int32_t first = a.starts[chunk], last = a.starts[chunk + 1];
  uint32_t counts[bitmap::kPlanes];
  for (int32_t e = first; e < last; ++e) {
    const bitmap::RadiusEntry radius = a.entries[e];
    bitmap::ring_counts(radius.r, radius.planes, fetch, counts);
    bitmap::transpose16(counts);
#pragma unroll
    for (int j = 0; j < 32; ++j) stage[lane * kStageStride + j] = bitmap::count_of(counts, j);
    __syncwarp();
    int32_t* plane = out + (p.b * a.n_radii + radius.index) * a.height * int64_t{a.width};
    for (int32_t q = lane; q < 32 * 32; q += kWarpSize) {  // word q / 32 of the warp, centre q % 32
      const int32_t f = p.f0 + word_warp * 32 + q / 32;
      if (f >= p.f1) break;  // the same for the whole warp: q / 32 is uniform per pass
      const int32_t row = f / p.cols, col = f - row * p.cols;
      const int32_t x = 32 * (p.c0 + col) + q % 32;
      if (x < a.width)
        plane[int64_t{row} * a.width + x] = static_cast<int32_t>(stage[(q / 32) * kStageStride + q % 32]);
    }
    __syncwarp();  // the next radius overwrites the stage
  }
}

// ---- plan ----

struct BitmapPlan {
  bool ok = false;
  BitmapLaunch a{};
  int64_t blocks = 0, smem = 0;
};

// The grid of the bitmap kernels (see the header), or ok = false when the band of even one word
// warp per block does not fit shared memory. stage: the map kernel's per-warp staging buffers.
BitmapPlan plan_bitmap(int64_t batch, int64_t height, int64_t width, int64_t n_radii, int32_t r_max, bool merge,
                       const cudaDeviceProp& prop) {
  BitmapPlan plan;
  BitmapLaunch& a = plan.a;
  const int64_t words = cuda::ceil_div(width, 32);
  const int64_t n_col_tiles = cuda::ceil_div(words, 32);
  const int64_t cols_max = cuda::ceil_div(words, n_col_tiles), cols_min = words / n_col_tiles;
  const int64_t word_warps_total = batch * n_col_tiles * cuda::ceil_div(height * cols_max, 32);
  const int64_t target = 16 * int64_t{prop.multiProcessorCount};
  int64_t chunks = 1;
  while (chunks < kBlockWarps && chunks < n_radii && word_warps_total * chunks < target) chunks *= 2;
  while (chunks < hough_images::min_chunks(n_radii)) chunks *= 2;
  if (chunks > kBlockWarps) return plan;
  a.pad_left = (r_max + 31) / 32;
  a.pad_right = r_max / 32 + 1;
  const int64_t stride_max = cols_max + cuda::round_up(a.pad_left + a.pad_right, 32);
  const int64_t budget = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  for (int64_t word_warps = kBlockWarps / chunks; word_warps >= 1; word_warps /= 2) {
    const int64_t run = 32 * word_warps;
    const int64_t rows = std::min<int64_t>(cuda::ceil_div(run, cols_min) + 1, height) + 2 * int64_t{r_max};
    const int64_t band = rows * stride_max * 8;
    a.band_pairs = static_cast<int32_t>(rows * stride_max);
    // max kernel: the band, then (aliased) 64-bit merge keys with several lists, 32-bit staging
    // with one; map kernel: the band and a staging buffer per warp
    const int64_t smem = merge ? std::max<int64_t>(band, run * kMergeStride * (chunks > 1 ? 8 : 4))
                               : band + word_warps * chunks * 32 * kStageStride * 4;
    if (smem > budget) continue;
    const int64_t flat_blocks = cuda::ceil_div(height * cols_max, run);
    // smaller blocks while the grid is under ~6 blocks per SM: the last blocks to finish are
    // then a small share of the work (a batch of 64 256^2 images: 1,024 blocks of 4 warps,
    // not 512 of 8 in 1.3 waves)
    if (word_warps > 1 && batch * n_col_tiles * flat_blocks < 6 * int64_t{prop.multiProcessorCount}) {
      const int64_t smaller = batch * n_col_tiles * cuda::ceil_div(height * cols_max, run / 2);
      if (smaller <= 12 * int64_t{prop.multiProcessorCount}) continue;
    }
    plan.blocks = batch * n_col_tiles * flat_blocks;
    if (plan.blocks > std::numeric_limits<int32_t>::max()) return plan;
    plan.smem = smem;
    a.word_warps = static_cast<int32_t>(word_warps);
    a.n_chunks = static_cast<int32_t>(chunks);
    a.flat_blocks = static_cast<int32_t>(flat_blocks);
    a.n_col_tiles = static_cast<int32_t>(n_col_tiles);
    a.height = static_cast<int32_t>(height);
    a.width = static_cast<int32_t>(width);
    a.words = static_cast<int32_t>(words);
    a.n_radii = static_cast<int32_t>(n_radii);
    a.r_max = r_max;
    plan.ok = true;
    return plan;
  }
  return plan;
}

bool bitmap_usable(at::IntArrayRef radii) {
  return hough_images::bitmap_rings_fit(radii) &&
         hough_images::min_chunks(static_cast<int64_t>(radii.size())) <= hough_images::kMaxChunks;
}

int32_t max_radius(at::IntArrayRef radii) {
  int64_t r = 0;
  for (const int64_t v : radii) r = std::max(r, v);
  return static_cast<int32_t>(r);
}

// The chunk lists on the device, for the plan's chunk count.
at::Tensor device_chunks(at::IntArrayRef radii, BitmapLaunch& a, const at::Device& device) {
  const hough_images::ChunkTable table = hough_images::chunk_table(radii, a.n_chunks, /*pinned=*/true);
  at::Tensor data = table.data.to(device, /*non_blocking=*/true);
  a.starts = data.data_ptr<int32_t>();
  a.entries = reinterpret_cast<const bitmap::RadiusEntry*>(a.starts + a.n_chunks + 1);
  return data;
}

at::Tensor hough_circles_map_cuda(const at::Tensor& edges, at::IntArrayRef radii) {
  hough_images::check_map_args(edges, radii, "hough_circles_map");
  if (!bitmap_usable(radii)) {
    return hough_images::hough_circles_map_points(edges, radii);
  }
  const c10::cuda::CUDAGuard guard(edges.device());
  const int64_t batch = edges.size(0), height = edges.size(1), width = edges.size(2);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  if (batch * n_radii * height * width == 0) {
    return at::zeros({batch, n_radii, height, width}, edges.options().dtype(at::kInt));
  }
  BitmapPlan plan = plan_bitmap(batch, height, width, n_radii, max_radius(radii), /*merge=*/false,
                                *at::cuda::getCurrentDeviceProperties());
  if (!plan.ok) return hough_images::hough_circles_map_points(edges, radii);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor chunks = device_chunks(radii, plan.a, edges.device());
  const at::Tensor bits = pack_bits(edges, plan.a.words, stream);
  plan.a.bits = reinterpret_cast<const uint32_t*>(bits.data_ptr<int32_t>());
  at::Tensor out = at::empty({batch, n_radii, height, width}, edges.options().dtype(at::kInt));
  auto kernel = circle_bitmap_map_kernel;
  C10_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem)));
  kernel<<<static_cast<unsigned>(plan.blocks), plan.a.word_warps * plan.a.n_chunks * kWarpSize,
           static_cast<size_t>(plan.smem), stream>>>(plan.a, out.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_map_cuda(const at::Tensor& edges, at::IntArrayRef radii,
                                                              bool normalize) {
  hough_images::check_map_args(edges, radii, "hough_circles_max_map");
  TORCH_CHECK(!radii.empty(), "radii must hold at least one radius for hough_circles_max_map");
  if (!bitmap_usable(radii)) {
    return hough_images::hough_circles_max_map_points(edges, radii, normalize);
  }
  const c10::cuda::CUDAGuard guard(edges.device());
  const int64_t batch = edges.size(0), height = edges.size(1), width = edges.size(2);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  at::Tensor scores = at::empty({batch, height, width}, edges.options().dtype(normalize ? at::kFloat : at::kInt));
  at::Tensor index = at::empty({batch, height, width}, edges.options().dtype(at::kLong));
  if (batch * height * width == 0) return {scores, index};
  BitmapPlan plan = plan_bitmap(batch, height, width, n_radii, max_radius(radii), /*merge=*/true,
                                *at::cuda::getCurrentDeviceProperties());
  if (!plan.ok) return hough_images::hough_circles_max_map_points(edges, radii, normalize);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor chunks = device_chunks(radii, plan.a, edges.device());
  const at::Tensor bits = pack_bits(edges, plan.a.words, stream);
  plan.a.bits = reinterpret_cast<const uint32_t*>(bits.data_ptr<int32_t>());
  auto* score_bits = reinterpret_cast<uint32_t*>(scores.data_ptr());
  const unsigned blocks = static_cast<unsigned>(plan.blocks);
  const unsigned threads = static_cast<unsigned>(plan.a.word_warps * plan.a.n_chunks * kWarpSize);
  auto kernel = normalize ? circle_bitmap_max_kernel<true> : circle_bitmap_max_kernel<false>;
  C10_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.smem)));
  kernel<<<blocks, threads, static_cast<size_t>(plan.smem), stream>>>(plan.a, score_bits, index.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {scores, index};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("hough_circles_map", &hough_circles_map_cuda);
  m.impl("hough_circles_max_map", &hough_circles_max_map_cuda);
}

}  // namespace pointops
