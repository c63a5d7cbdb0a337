// BEV rasterization on CUDA (rules and accumulators in rasterize.h; the CPU twin is
// rasterize_cpu.cpp).
//
// One cooperative launch of resident blocks (rasterize_kernel) runs five phases separated by grid
// barriers. The per-cell state lives in compact arrays with one entry per occupied cell, in cell
// order, found through an occupancy bitmap:
//   1 clear    zeroes the bitmap.
//   2 mark     each counted point sets its cell's bit (atomicOr; each cloud's bits start on a word
//              boundary); then the image is filled with 0, the value of empty cells.
//   3 rank     an exclusive scan of the words' popcounts: a cell's rank (its index among the
//              occupied cells of the batch) is its word's prefix plus the set bits below it. Each
//              rank's cloud and cell are listed and its count and record zeroed.
//   4 vote     atomicAdd on the count and accumulate_point's integer atomics (max / add / or) into
//              the record at the point's rank: order-free, so the result is the same in any order.
//   5 write    finalize_cell writes each occupied cell's channels, rank by rank.
//
// Why this shape: dense per-cell counts and records (108 MB with the image in the KITTI case,
// more than L2) would make every point's atomics and every occupied cell's reads random 32-byte
// sectors in HBM; the bitmap (0.56 MB there), the prefixes and the compact state stay in L2. One
// cooperative launch, because separate kernels per phase leave the GPU idle between launches for
// about a fifth of the time. Each cell's state could live in its own slots of the zero-filled
// image instead (no bitmap, ranks or records), but its atomics then reach lines that the fill
// has pushed out of L2, and the top point needs a second pass over the points.
//
// What bounds it (KITTI case, 8 x 120k points, 800 x 704 cells, 3 channels): mark and vote wait
// on L2 operations per point (the point, its word, its atomics; ~2-4 32-byte sectors each), each
// SM on its own share, so a block filling on an SM slows the blocks marking there and work is
// not handed out through atomic counters (they serialize). The fill writes the 54 MB image at
// about the HBM's rate; a grid barrier costs ~1.2 us, and blocks reach each barrier up to several
// microseconds apart. The fill sits after the marks: elsewhere (the rank phase, after the vote,
// between the clouds' passes, on blocks without rows, as streaming stores or a separate memset)
// it hides less, and writing every cell of the occupied words instead of filling costs more.
// Figures and the designs measured against this one: docs/performance.md.
#include "bev/rasterize.h"

#include <ATen/Dispatch.h>
#include <cooperative_groups.h>
#include <torch/library.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/launch.cuh"

namespace pointops {
namespace {

using bev_detail::Raster;
namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWordBits = 32;

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

// A bitmap word and the number of set bits in the words before it, side by side so that a rank
// lookup reads one 32-byte sector.
struct alignas(16) RankWord {
  int64_t prefix;
  uint32_t bits;
};

// The kernel's scratch, one allocation. Cloud b's cell c is bit c % 32 of word
// b * words_per_cloud + c / 32. The arrays indexed by rank (slots, count, records) hold
// `capacity` entries: at most min(points, cells) cells are occupied.
struct Scratch {
  RankWord* words_of;     // words
  int64_t* block_totals;  // gridDim.x: the set bits in each block's share of the words
  int2* slots;            // capacity: {cloud, cell within the cloud} of each rank
  uint32_t* count;        // capacity
  uint32_t* records;      // capacity * record.stride
  int64_t words_per_cloud;
  int64_t words;
};

// Calls visit(b, rows) for the rows of every cloud that this thread owns in the grid,
// kRowsPerVisit at a time (rows[u] = -1 past the cloud's length): a visit issues the loads of its
// rows together, since each row's chain of dependent loads is long and a thread has few rows.
constexpr int kRowsPerVisit = 4;

template <typename Visit>
__device__ __forceinline__ void for_each_rows(int64_t batch, int64_t n, const int64_t* lengths, Visit visit) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = cloud_length(lengths, b, n);
    for (int64_t row0 = first; row0 < length; row0 += stride * kRowsPerVisit) {
      int64_t rows[kRowsPerVisit];
#pragma unroll
      for (int u = 0; u < kRowsPerVisit; ++u) {
        const int64_t row = row0 + u * stride;
        rows[u] = row < length ? row : -1;
      }
      visit(b, rows);
    }
  }
}

// A point's coordinates and feature in the compute type.
template <typename acc_t>
struct PointValues {
  acc_t x, y, z, feature;
};

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ PointValues<acc_t> read_point(const Raster<acc_t>& r, const scalar_t* p, bool with_feature) {
  return {static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), static_cast<acc_t>(p[2]),
          with_feature ? static_cast<acc_t>(p[r.feature_column]) : acc_t(0)};
}

// The points of rows (visited by for_each_rows) and their cells (-1: no row, or the point does
// not count).
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void read_rows(const Raster<acc_t>& r, const scalar_t* points, int64_t b, int64_t n,
                                          const int64_t (&rows)[kRowsPerVisit], bool with_feature,
                                          PointValues<acc_t> (&v)[kRowsPerVisit], int64_t (&cell)[kRowsPerVisit]) {
#pragma unroll
  for (int u = 0; u < kRowsPerVisit; ++u) {
    if (rows[u] < 0) {
      cell[u] = -1;
      continue;
    }
    v[u] = read_point(r, points + (b * n + rows[u]) * r.dims, with_feature);
    cell[u] = bev_detail::point_cell(r, v[u].x, v[u].y, v[u].z);
  }
}

__device__ __forceinline__ int64_t word_of(const Scratch& s, int64_t b, int64_t cell) {
  return b * s.words_per_cloud + static_cast<int64_t>(static_cast<uint64_t>(cell) / kWordBits);
}

__device__ __forceinline__ uint32_t bit_of(int64_t cell) { return 1u << (static_cast<uint32_t>(cell) % kWordBits); }

// The rank phase scans the bitmap a tile of kTileWords words at a time, kWordsPerThread words per
// thread (blocked: thread t holds words 2t and 2t + 1 of the tile).
constexpr int kWordsPerThread = 2;
constexpr int kTileWords = kThreads * kWordsPerThread;
// A tile's set bits fit in 32 bits; sums over blocks need 64.
using TileScan = cub::BlockScan<int32_t, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
using BlockReduce = cub::BlockReduce<int64_t, kThreads, cub::BLOCK_REDUCE_WARP_REDUCTIONS>;
union ScanStorage {
  TileScan::TempStorage scan;
  BlockReduce::TempStorage reduce;
};

// Sum of v over the block, returned to every thread.
__device__ __forceinline__ int64_t block_sum(int64_t v, ScanStorage& storage) {
  __shared__ int64_t sum;
  __syncthreads();  // storage may still be read by the previous scan
  v = BlockReduce(storage.reduce).Sum(v);
  if (threadIdx.x == 0) sum = v;
  __syncthreads();
  return sum;
}

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads, 4)
    rasterize_kernel(Raster<acc_t> r, const scalar_t* __restrict__ points, int64_t batch, int64_t n,
                     const int64_t* __restrict__ lengths, Scratch s, float* __restrict__ image, int64_t image_size) {
  __shared__ ScanStorage scan_storage;
  __shared__ uint32_t tile_bits[kTileWords];
  __shared__ int32_t tile_first[kTileWords];
  const cg::grid_group grid = cg::this_grid();
  const int64_t thread = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const int64_t threads = int64_t{gridDim.x} * kThreads;
  const int64_t cells = r.nx * r.ny;

  // 1 clear: whole 16-byte pairs (the rank phase rewrites the prefix): full stores are faster
  // than the 4-byte bits alone at a 16-byte stride.
  for (int64_t w = thread; w < s.words; w += threads) s.words_of[w] = RankWord{0, 0u};
  grid.sync();

  // 2 mark, then fill the image
  for_each_rows(batch, n, lengths, [&](int64_t b, const int64_t(&rows)[kRowsPerVisit]) {
    PointValues<acc_t> v[kRowsPerVisit];
    int64_t cell[kRowsPerVisit];
    read_rows(r, points, b, n, rows, false, v, cell);
    // A word's 32 cells make it hot, and a thread's later points find most bits set: reading
    // first skips their atomics (a stale read costs one atomic more, never a missed bit).
    uint32_t seen[kRowsPerVisit];
#pragma unroll
    for (int u = 0; u < kRowsPerVisit; ++u) seen[u] = cell[u] < 0 ? 0u : s.words_of[word_of(s, b, cell[u])].bits;
#pragma unroll
    for (int u = 0; u < kRowsPerVisit; ++u) {
      if (cell[u] >= 0 && (seen[u] & bit_of(cell[u])) == 0)
        atomicOr(&s.words_of[word_of(s, b, cell[u])].bits, bit_of(cell[u]));
    }
  });
  float4* image4 = reinterpret_cast<float4*>(image);
  for (int64_t i = thread; i < image_size / 4; i += threads) image4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int64_t i = image_size / 4 * 4 + thread; i < image_size; i += threads) image[i] = 0.f;
  grid.sync();

  // 3 rank: block k scans words [begin, end); first the blocks' totals, then each block's base
  // from the totals before it.
  const int64_t begin = s.words * blockIdx.x / gridDim.x;
  const int64_t end = s.words * (blockIdx.x + 1) / gridDim.x;
  {
    int64_t bits = 0;
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) bits += __popc(s.words_of[w].bits);
    bits = block_sum(bits, scan_storage);
    if (threadIdx.x == 0) s.block_totals[blockIdx.x] = bits;
  }
  grid.sync();
  int64_t base = 0;
  for (int64_t k = threadIdx.x; k < blockIdx.x; k += kThreads) base += s.block_totals[k];
  base = block_sum(base, scan_storage);
  for (int64_t tile = begin; tile < end; tile += kTileWords) {
    uint32_t bits[kWordsPerThread];
    int32_t ones[kWordsPerThread], prefix[kWordsPerThread];
#pragma unroll
    for (int u = 0; u < kWordsPerThread; ++u) {
      const int64_t w = tile + threadIdx.x * kWordsPerThread + u;
      bits[u] = w < end ? s.words_of[w].bits : 0u;
      ones[u] = __popc(bits[u]);
    }
    int32_t total;
    __syncthreads();  // the previous tile's listing and scan are done with the shared arrays
    TileScan(scan_storage.scan).ExclusiveSum(ones, prefix, total);
#pragma unroll
    for (int u = 0; u < kWordsPerThread; ++u) {
      const int j = threadIdx.x * kWordsPerThread + u;
      if (tile + j < end) s.words_of[tile + j].prefix = base + prefix[u];
      tile_bits[j] = bits[u];
      tile_first[j] = prefix[u];
    }
    // A cloud has fewer than 2^26 words (cells <= INT_MAX), so a word's offset from the tile's
    // first cloud fits in 32 bits.
    const int64_t tile_cloud = tile / s.words_per_cloud;
    __syncthreads();
    // A thread per occupied cell, in rank order (balanced, coalesced stores): the tile's i-th
    // occupied cell lies in the last word whose first rank within the tile is <= i (words past
    // `end` start at `total`), at that word's (i - first)-th set bit (__fns counts from 1).
    for (int32_t i = threadIdx.x; i < total; i += kThreads) {
      int j = 0;
      for (int step = kTileWords / 2; step > 0; step /= 2) {
        if (tile_first[j + step] <= i) j += step;
      }
      const uint32_t bit = __fns(tile_bits[j], 0, i - tile_first[j] + 1);
      const uint32_t offset = static_cast<uint32_t>(tile + j - tile_cloud * s.words_per_cloud);
      const uint32_t clouds_on = offset / static_cast<uint32_t>(s.words_per_cloud);
      const uint32_t word = offset - clouds_on * static_cast<uint32_t>(s.words_per_cloud);
      const int64_t rank = base + i;
      s.slots[rank] = make_int2(static_cast<int>(tile_cloud + clouds_on), static_cast<int>(word * kWordBits + bit));
      s.count[rank] = 0;
      uint64_t* record = reinterpret_cast<uint64_t*>(s.records + rank * r.record.stride);
      for (int32_t k = 0; k < r.record.stride / 2; ++k) record[k] = 0;
    }
    base += total;
  }
  grid.sync();

  // 4 vote
  for_each_rows(batch, n, lengths, [&](int64_t b, const int64_t(&rows)[kRowsPerVisit]) {
    PointValues<acc_t> v[kRowsPerVisit];
    int64_t cell[kRowsPerVisit];
    read_rows(r, points, b, n, rows, r.read_feature, v, cell);
    RankWord word[kRowsPerVisit];
#pragma unroll
    for (int u = 0; u < kRowsPerVisit; ++u) {
      if (cell[u] >= 0) word[u] = s.words_of[word_of(s, b, cell[u])];
    }
#pragma unroll
    for (int u = 0; u < kRowsPerVisit; ++u) {
      if (cell[u] < 0) continue;
      const int64_t rank = word[u].prefix + __popc(word[u].bits & (bit_of(cell[u]) - 1u));
      atomicAdd(s.count + rank, 1u);
      if (r.record.stride > 0) {
        bev_detail::accumulate_point<AtomicOps>(r, s.records + rank * r.record.stride, v[u].z, v[u].feature,
                                                static_cast<uint32_t>(rows[u]));
      }
    }
  });
  grid.sync();

  // 5 write
  const RankWord last = s.words_of[s.words - 1];
  const int64_t occupied = last.prefix + __popc(last.bits);
  for (int64_t rank = thread; rank < occupied; rank += threads) {
    const int2 slot = s.slots[rank];
    bev_detail::finalize_cell<scalar_t, acc_t>(r, true, s.count[rank], s.records + rank * r.record.stride,
                                               points + slot.x * n * r.dims,
                                               image + slot.x * r.out_channels * cells + slot.y, cells);
  }
}

// Resident blocks of rasterize_kernel<scalar_t, acc_t> per SM (for the cooperative launch),
// queried once per process: the GPUs of one machine share an architecture.
template <typename scalar_t, typename acc_t>
int cached_blocks_per_sm() {
  static const int blocks = cuda::blocks_per_sm(rasterize_kernel<scalar_t, acc_t>, kThreads);
  return blocks;
}

at::Tensor bev_rasterize_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                              c10::ArrayRef<double> point_range, c10::ArrayRef<double> cell_size,
                              c10::ArrayRef<std::string> channels, int64_t feature_column, double density_base,
                              int64_t height_slices, bool forward_up) {
  const bev_detail::RasterArgs args = bev_detail::parse_raster_args(
      points, lengths, point_range, cell_size, channels, feature_column, density_base, height_slices, forward_up);
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t dims = points.size(2);
  at::Tensor image = at::empty(bev_detail::image_shape(args, batch), points.options().dtype(at::kFloat));
  if (image.numel() == 0) return image;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (n == 0) {
    C10_CUDA_CHECK(cudaMemsetAsync(image.data_ptr(), 0, image.nbytes(), stream));
    return image;
  }
  const int64_t cells = args.nx * args.ny;
  TORCH_CHECK(cells <= INT_MAX, "bev_rasterize on CUDA: the grid must have at most ", INT_MAX, " cells, got ", args.nx,
              " x ", args.ny);
  TORCH_CHECK(batch <= INT_MAX, "bev_rasterize on CUDA: at most ", INT_MAX, " clouds, got ", batch);
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* lengths_ptr = lengths_c.data;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "bev_rasterize_cuda", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const Raster<acc_t> r = bev_detail::make_raster<acc_t>(args, dims);
    const int blocks = cached_blocks_per_sm<scalar_t, acc_t>() * cuda::sm_count();
    TORCH_CHECK(blocks > 0, "bev_rasterize: the kernel cannot be resident on this device");
    Scratch s{};
    s.words_per_cloud = cuda::ceil_div(cells, kWordBits);
    s.words = batch * s.words_per_cloud;
    const int64_t capacity = std::min(batch * n, batch * cells);
    // One allocation: the word pairs, then the 64-bit arrays, then the 32-bit ones (an even
    // count of count words keeps the records 8-byte aligned).
    const int64_t wide = 2 * s.words + blocks + capacity;
    const int64_t narrow = cuda::round_up(capacity, 2) + capacity * r.record.stride;
    const at::Tensor scratch = at::empty({wide + cuda::ceil_div(narrow, 2)}, points.options().dtype(at::kLong));
    s.words_of = reinterpret_cast<RankWord*>(scratch.data_ptr<int64_t>());
    s.block_totals = reinterpret_cast<int64_t*>(s.words_of + s.words);
    s.slots = reinterpret_cast<int2*>(s.block_totals + blocks);
    s.count = reinterpret_cast<uint32_t*>(s.slots + capacity);
    s.records = s.count + cuda::round_up(capacity, 2);
    cuda::LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads)};
    shape.cooperative = true;
    cuda::launch(rasterize_kernel<scalar_t, acc_t>, shape, stream, r, pts.data_ptr<scalar_t>(), batch, n, lengths_ptr,
                 s, image.data_ptr<float>(), image.numel());
  });
  return image;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("bev_rasterize", &bev_rasterize_cuda); }

}  // namespace pointops
