// Circle and line detections on CUDA (rules in detections.h): two or three launches in all,
//   peak_tiles   a block per 32 x 32 tile of the map: the candidate keys of the tile and its halo
//                in shared memory (the hough_peaks key: vote bits << 32 | ~flat index, 0 for a
//                bin that cannot be a peak), the box maximum as a row pass and a column pass,
//                the tile's peaks (key == box maximum) sorted (bitonic) and its best kt written to
//                a pool, kt = min(k, the most peaks a tile can hold: they are more than the box
//                radius apart); and the tile's largest score, for the default threshold;
//   select       a block per image: the k-th largest key of the pool by radix select (passes of
//                8 bits over the keys in shared memory, from the highest bit where they differ),
//                the k keys at or above it sorted, then
//                the decoding (threshold, coordinates, radius or angle; for lines the glued
//                copies merged and the first k kept). A pool too large for one block's shared
//                memory is first cut to the top k of each part by the same kernel.
// Where these do not apply (more than 1,024 peaks per image, a box too large for a tile's shared
// memory, empty maps) the generic implementation runs (detections_cpu.cpp: hough_peaks and about
// 25 small ATen launches).
// Keys of distinct bins differ, so the top k is unique and both implementations return the same bits.
// The glued line map (the accumulator and its rho-mirrored copy side by side, periodic along the
// angles) is never built: the tiles read the accumulator at the mirrored bin, and its keys carry
// glued_line_index (detections.h) in place of the flat index, as the generic implementation's do.
#include "hough/detections.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "common/argmax_key.h"
#include "common/checks.h"
#include "common/cuda_utils.cuh"
#include "common/float_bits.h"
#include "hough/circles.h"
#include "hough/peaks.h"

namespace pointops {
namespace {

using cuda::kFullMask;
using cuda::kWarpSize;

constexpr int kTile = 32;  // peak tiles are kTile x kTile bins
constexpr int kTileThreads = 256;
constexpr int kSelectThreads = 512;
constexpr int64_t kMaxTileSmem = 96 * 1024;  // larger boxes take the generic path
constexpr int64_t kMaxFusedWanted = 1024;    // peaks per image the fused path returns at most

// ---- tables on the device ----

// Small per-call tables (radii, angles), cached page-locked on the host and copied stream-ordered.
// The cache is never destroyed: freeing its pinned tensors from a static destructor at exit, after
// CUDA's host allocator is gone, aborts the process ("invalid resource handle").
template <typename T>
at::Tensor device_table(const std::vector<T>& values, at::ScalarType dtype, const at::Device& device) {
  static std::mutex mutex;
  static auto& cache = *new std::map<std::vector<T>, at::Tensor>;
  at::Tensor host;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cache.find(values);
    if (found != cache.end()) {
      host = found->second;
    } else {
      if (cache.size() >= 64) cache.clear();
      host = at::empty({static_cast<int64_t>(values.size())}, at::TensorOptions().dtype(dtype)).pin_memory();
      std::copy(values.begin(), values.end(), static_cast<T*>(host.data_ptr()));
      cache.emplace(values, host);
    }
  }
  return host.to(device, /*non_blocking=*/true);
}

// ---- peak tiles ----

struct PeakMap {
  const void* values;     // (B, height, src_width) int32 or float32
  int64_t image_size;     // height * src_width
  int32_t height, width;  // the map whose peaks are taken (glued lines: width = 2 src_width)
  int32_t src_width;
  int32_t ry, rx;  // box half-widths along y and x
  bool glue;       // x >= src_width reads the source at (height - 1 - y, x - src_width)
  bool periodic_x;
  double min_votes;
  int32_t n_tiles_x, n_tiles, kt;
};

template <typename T>
__device__ __forceinline__ T map_value(const PeakMap& m, int64_t b, int32_t y, int32_t x) {
  const T* image = static_cast<const T*>(m.values) + b * m.image_size;
  if (m.glue && x >= m.src_width) return image[int64_t{m.height - 1 - y} * m.src_width + (x - m.src_width)];
  return image[int64_t{y} * m.src_width + x];
}

// hough_peaks' candidate key (peaks.h), 0 when the bin cannot be a peak.
template <typename T>
__device__ __forceinline__ unsigned long long candidate_key(T v, uint32_t flat, double min_votes) {
  if (!(v > T(0)) || !(static_cast<double>(v) >= min_votes)) return 0;
  return argmax_key(hough_detail::vote_bits(v), flat);
}

// An order-preserving key of a score for the image maximum; NaN above everything (torch's amax
// returns NaN then).
__device__ __forceinline__ uint32_t max_key(int32_t v) { return hough_images::ordered_score(v); }
__device__ __forceinline__ uint32_t max_key(float v) { return isnan(v) ? 0xffffffffu : hough_images::ordered_score(v); }

// Descending bitonic sort of s[0, n) in shared memory, n a power of two; every thread calls it.
__device__ void bitonic_sort_descending(unsigned long long* s, int32_t n) {
  for (int32_t size = 2; size <= n; size <<= 1) {
    for (int32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int32_t i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int32_t lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const unsigned long long a = s[lo], c = s[hi];
        if ((a < c) == descending) {
          s[lo] = c;
          s[hi] = a;
        }
      }
      __syncthreads();
    }
  }
}

__host__ __device__ inline int32_t pow2_at_least(int32_t n) {
  int32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    peak_tiles_kernel(PeakMap m, unsigned long long* __restrict__ pool, uint32_t* __restrict__ tile_max) {
  extern __shared__ __align__(16) unsigned char tile_smem[];
  const int32_t kh = kTile + 2 * m.ry, kw = kTile + 2 * m.rx;
  unsigned long long* keys = reinterpret_cast<unsigned long long*>(tile_smem);  // [kh][kw]
  unsigned long long* rows = keys + kh * kw;                                    // [kh][kTile]
  unsigned long long* list = rows + kh * kTile;                                 // the tile's peaks
  __shared__ int32_t count;
  __shared__ uint32_t block_max;
  const int64_t b = blockIdx.x / m.n_tiles;
  const int32_t tile = static_cast<int32_t>(blockIdx.x % m.n_tiles);
  const int32_t y0 = (tile / m.n_tiles_x) * kTile, x0 = (tile % m.n_tiles_x) * kTile;
  if (threadIdx.x == 0) {
    count = 0;
    block_max = 0;
  }
  // The keys of the tile and its halo; the halo wraps along a periodic x and is 0 past the map.
  uint32_t own_max = 0;
  for (int32_t i = threadIdx.x; i < kh * kw; i += blockDim.x) {
    const int32_t ky = i / kw, kx = i - ky * kw;
    const int32_t y = y0 - m.ry + ky, xu = x0 - m.rx + kx;
    int32_t x = xu;
    bool inside = y >= 0 && y < m.height;
    if (m.periodic_x) {
      x %= m.width;
      if (x < 0) x += m.width;
    } else {
      inside = inside && x >= 0 && x < m.width;
    }
    unsigned long long key = 0;
    if (inside) {
      const T v = map_value<T>(m, b, y, x);
      // equal votes rank as in the accumulator in both copies of a glued map (detections.h)
      const uint32_t index = m.glue
                                 ? hough_images::glued_line_index(y, x, m.height, m.src_width)
                                 : static_cast<uint32_t>(y) * static_cast<uint32_t>(m.width) + static_cast<uint32_t>(x);
      key = candidate_key(v, index, m.min_votes);
      const bool own = ky >= m.ry && ky < m.ry + kTile && kx >= m.rx && kx < m.rx + kTile && xu < m.width;
      if (own) own_max = max(own_max, max_key(v));
    }
    keys[i] = key;
  }
  own_max = __reduce_max_sync(kFullMask, own_max);
  __syncthreads();  // count and block_max are set
  if (threadIdx.x % kWarpSize == 0) atomicMax(&block_max, own_max);
  // Box maximum: along x for every row of the halo, then along y.
  for (int32_t i = threadIdx.x; i < kh * kTile; i += blockDim.x) {
    const int32_t r = i / kTile, c = i - r * kTile;
    const unsigned long long* src = keys + r * kw + c;
    unsigned long long best = 0;
    for (int32_t dx = 0; dx <= 2 * m.rx; ++dx) best = max(best, src[dx]);
    rows[i] = best;
  }
  __syncthreads();
  for (int32_t i = threadIdx.x; i < kTile * kTile; i += blockDim.x) {
    const int32_t r = i / kTile, c = i - r * kTile;
    unsigned long long best = 0;
    for (int32_t dy = 0; dy <= 2 * m.ry; ++dy) best = max(best, rows[(r + dy) * kTile + c]);
    const unsigned long long key = keys[(r + m.ry) * kw + c + m.rx];
    // bins past the map (a partial last tile; wrapped copies along a periodic x) are not the tile's
    if (key != 0 && key == best && y0 + r < m.height && x0 + c < m.width) list[atomicAdd(&count, 1)] = key;
  }
  __syncthreads();
  const int32_t n = count;
  if (n > m.kt) {  // keep the best kt: sort (the order of the atomics varies; the sorted list does not)
    const int32_t n2 = pow2_at_least(n);
    for (int32_t i = n + threadIdx.x; i < n2; i += blockDim.x) list[i] = 0;
    __syncthreads();
    bitonic_sort_descending(list, n2);
  }
  unsigned long long* out = pool + (b * m.n_tiles + tile) * int64_t{m.kt};
  for (int32_t i = threadIdx.x; i < m.kt; i += blockDim.x) out[i] = i < n ? list[i] : 0ull;
  if (threadIdx.x == 0) tile_max[b * m.n_tiles + tile] = block_max;
}

// ---- select: top k of a pool of keys, and the decoding ----

struct SelectLaunch {
  const unsigned long long* in;  // (B, n_in) keys, 0 = none
  int64_t n_in;
  int32_t group, n_groups;  // keys per block, blocks per image
  int32_t kk, kk_pow2;      // keys kept
  unsigned long long* out;  // (B, n_groups, kk), reduce passes
};

// The default threshold's inputs and the outputs both decoders share.
struct Decode {
  const uint32_t* tile_max;  // (B, n_tiles) max_key of each tile's scores
  int32_t n_tiles;
  bool has_threshold, is_float;
  float threshold;  // float32(threshold) when given
  int32_t k;
  float* rows;   // circles (B, k, 3) or lines (B, k, 2)
  float* votes;  // (B, k)
  // circles
  const int64_t* radius_index;  // (B, H * W)
  const int32_t* radii;
  int32_t n_radii, width;
  int64_t bins;
  // lines
  const double* theta;
  int32_t n_theta, offset, wanted;
  bool glue;
};

constexpr int kReduce = 0, kCircles = 1, kLines = 2;

__device__ __forceinline__ float key_votes(unsigned long long key, bool is_float) {
  const uint32_t bits = static_cast<uint32_t>(key >> 32);
  return is_float ? __uint_as_float(bits) : __int2float_rn(static_cast<int32_t>(bits));
}

// The threshold every kept row must exceed: float32(threshold), or 0.5 * float32(max of the
// image's scores) (the pipelines' rule); every thread calls it.
__device__ float image_limit(const Decode& d, int64_t b, uint32_t* scratch) {
  if (d.has_threshold) return d.threshold;
  uint32_t best = 0;
  for (int32_t i = threadIdx.x; i < d.n_tiles; i += blockDim.x) best = max(best, d.tile_max[b * d.n_tiles + i]);
  best = __reduce_max_sync(kFullMask, best);
  if (threadIdx.x == 0) *scratch = 0;
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) atomicMax(scratch, best);
  __syncthreads();
  const uint32_t key = *scratch;
  const uint32_t bits = hough_images::unordered_bits(key, d.is_float);
  const float v = d.is_float ? __uint_as_float(bits) : __int2float_rn(static_cast<int32_t>(bits));
  return __fmul_rn(v, 0.5f);
}

template <int kMode>
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SelectLaunch s, Decode d) {
  extern __shared__ __align__(16) unsigned char select_smem[];
  unsigned long long* keys = reinterpret_cast<unsigned long long*>(select_smem);  // [group]
  unsigned long long* top = keys + s.group;                                       // [kk_pow2]
  __shared__ uint32_t hist[256];
  __shared__ int32_t count, taken;
  __shared__ uint32_t pick_digit, pick_remaining, scratch;
  __shared__ unsigned long long block_and, block_or;
  const int64_t b = blockIdx.x / s.n_groups;
  const int32_t g = static_cast<int32_t>(blockIdx.x % s.n_groups);
  const int64_t first = int64_t{g} * s.group;
  const int64_t left = s.n_in - first;
  const int32_t n = left < s.group ? static_cast<int32_t>(left) : s.group;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (threadIdx.x == 0) {
    count = 0;
    taken = 0;
  }
  __syncthreads();
  int32_t nonzero = 0;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned long long key = s.in[b * s.n_in + first + i];
    keys[i] = key;
    nonzero += key != 0;
  }
  nonzero = __reduce_add_sync(kFullMask, nonzero);
  if (lane == 0) atomicAdd(&count, nonzero);
  __syncthreads();
  const int32_t n_keys = count;
  // The kk-th largest key, or 1 (every key) when there are no more than kk: radix select, 8 bits
  // at a time from the highest bit where the keys differ (the digits above it are the same for all:
  // the vote bits' top bytes, mostly), counting only keys that match the digits chosen so far.
  // Keys share digits, so a lane's count goes through its warp's leader for that digit (one
  // shared atomic per warp and digit: same-address atomics would serialize).
  unsigned long long threshold = 1;
  if (n_keys > s.kk) {
    unsigned long long all_and = ~0ull, all_or = 0;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned long long key = keys[i];
      if (key != 0) {
        all_and &= key;
        all_or |= key;
      }
    }
    const uint32_t and_hi = __reduce_and_sync(kFullMask, static_cast<uint32_t>(all_and >> 32));
    const uint32_t and_lo = __reduce_and_sync(kFullMask, static_cast<uint32_t>(all_and));
    const uint32_t or_hi = __reduce_or_sync(kFullMask, static_cast<uint32_t>(all_or >> 32));
    const uint32_t or_lo = __reduce_or_sync(kFullMask, static_cast<uint32_t>(all_or));
    if (threadIdx.x == 0) {
      block_and = ~0ull;
      block_or = 0;
    }
    __syncthreads();
    if (lane == 0) {
      atomicAnd(&block_and, static_cast<unsigned long long>(and_hi) << 32 | and_lo);
      atomicOr(&block_or, static_cast<unsigned long long>(or_hi) << 32 | or_lo);
    }
    __syncthreads();
    const unsigned long long differ = block_and ^ block_or;  // nonzero: the keys are distinct
    const int top_shift = ((63 - __clzll(static_cast<long long>(differ))) / 8) * 8;
    unsigned long long mask = top_shift == 56 ? 0ull : ~0ull << (top_shift + 8);
    unsigned long long prefix = block_and & mask;
    uint32_t remaining = static_cast<uint32_t>(s.kk);
    for (int shift = top_shift; shift >= 0; shift -= 8) {
      for (int32_t i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      for (int32_t base = warp * kWarpSize; base < n; base += blockDim.x) {  // warp-uniform passes
        const int32_t i = base + lane;
        const unsigned long long key = i < n ? keys[i] : 0ull;
        const uint32_t digit = key != 0 && (key & mask) == prefix ? static_cast<uint32_t>(key >> shift) & 0xffu : 256u;
        const uint32_t peers = __match_any_sync(kFullMask, digit);
        if (digit < 256u && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], static_cast<uint32_t>(__popc(peers)));
      }
      __syncthreads();
      if (warp == 0) {  // lane l holds digits 255 - 8 l down to 248 - 8 l
        uint32_t c[8], sum = 0;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          c[t] = hist[255 - 8 * lane - t];
          sum += c[t];
        }
        uint32_t inclusive = sum;
#pragma unroll
        for (int o = 1; o < kWarpSize; o <<= 1) {
          const uint32_t up = __shfl_up_sync(kFullMask, inclusive, o);
          if (lane >= o) inclusive += up;
        }
        const uint32_t before = inclusive - sum;
        if (before < remaining && remaining <= inclusive) {  // one lane: the digit is among its bins
          uint32_t above = before;
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            if (above + c[t] >= remaining) {
              pick_digit = static_cast<uint32_t>(255 - 8 * lane - t);
              pick_remaining = remaining - above;
              break;
            }
            above += c[t];
          }
        }
      }
      __syncthreads();
      prefix |= static_cast<unsigned long long>(pick_digit) << shift;
      mask |= 0xffull << shift;
      remaining = pick_remaining;
    }
    threshold = prefix;
  }
  // The kept keys (min(n_keys, kk) of them), sorted.
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned long long key = keys[i];
    if (key != 0 && key >= threshold) top[atomicAdd(&taken, 1)] = key;
  }
  __syncthreads();
  for (int32_t i = taken + threadIdx.x; i < s.kk_pow2; i += blockDim.x) top[i] = 0;
  __syncthreads();
  bitonic_sort_descending(top, s.kk_pow2);

  if constexpr (kMode == kReduce) {
    for (int32_t i = threadIdx.x; i < s.kk; i += blockDim.x) s.out[(b * s.n_groups + g) * s.kk + i] = top[i];
  } else if constexpr (kMode == kCircles) {
    const float limit = image_limit(d, b, &scratch);
    const float nan = __int_as_float(0x7fc00000);
    for (int32_t i = threadIdx.x; i < d.k; i += blockDim.x) {
      const unsigned long long key = top[i];
      float x = nan, y = nan, r = nan, v = 0.f;
      if (key != 0 && key_votes(key, d.is_float) > limit) {
        const uint32_t flat = argmax_key_index(key);
        const int64_t index = d.radius_index[b * d.bins + flat];
        y = static_cast<float>(flat / static_cast<uint32_t>(d.width));
        x = static_cast<float>(flat % static_cast<uint32_t>(d.width));
        // out-of-range indices (never at the peaks of the best-radius maps) are clamped
        r = static_cast<float>(d.radii[index < 0 ? 0 : (index >= d.n_radii ? d.n_radii - 1 : index)]);
        v = key_votes(key, d.is_float);
      }
      float* row = d.rows + (b * d.k + i) * 3;
      row[0] = x;
      row[1] = y;
      row[2] = r;
      d.votes[b * d.k + i] = v;
    }
  } else {
    const float limit = image_limit(d, b, &scratch);
    // Per row of the ranked peaks: the line's bin (d', j') and whether it is kept.
    int32_t* line_key = reinterpret_cast<int32_t*>(top + s.kk_pow2);  // [wanted]
    int32_t* kept = line_key + d.wanted;                              // [wanted]: 0/1, then output slots
    for (int32_t i = threadIdx.x; i < d.wanted; i += blockDim.x) {
      const unsigned long long key = top[i];
      int32_t lk = -1 - i;  // unique: never equal to a line
      if (key != 0 && key_votes(key, d.is_float) > limit) {
        // a glued key's index is glued_line_index: the accumulator bin, doubled (plus one in the
        // mirrored copy), so both copies of a line decode to it
        const uint32_t flat = argmax_key_index(key);
        lk = static_cast<int32_t>(d.glue ? flat >> 1 : flat);
      }
      line_key[i] = lk;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < d.wanted; i += blockDim.x) {
      bool keep = line_key[i] >= 0;
      if (keep && d.glue) {  // a repeat of an earlier kept row is the same line
        for (int32_t e = 0; e < i; ++e) {
          if (line_key[e] == line_key[i]) {
            keep = false;
            break;
          }
        }
      }
      kept[i] = keep;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // output slots: the kept rows in order
      int32_t slot = 0;
      for (int32_t i = 0; i < d.wanted; ++i) kept[i] = kept[i] ? slot++ : -1;
      taken = slot;
    }
    __syncthreads();
    const float nan = __int_as_float(0x7fc00000);
    for (int32_t i = threadIdx.x; i < d.wanted; i += blockDim.x) {
      const int32_t slot = kept[i];
      if (slot < 0 || slot >= d.k) continue;
      const int32_t rho = line_key[i] / d.n_theta, j = line_key[i] - rho * d.n_theta;
      float* row = d.rows + (b * d.k + slot) * 2;
      row[0] = static_cast<float>(rho - d.offset);
      row[1] = __double2float_rn(d.theta[j]);
      d.votes[b * d.k + slot] = key_votes(top[i], d.is_float);
    }
    for (int32_t slot = taken + threadIdx.x; slot < d.k; slot += blockDim.x) {
      float* row = d.rows + (b * d.k + slot) * 2;
      row[0] = nan;
      row[1] = nan;
      d.votes[b * d.k + slot] = 0.f;
    }
  }
}

// ---- host side ----

struct FusedPlan {
  PeakMap map{};
  int64_t tile_smem = 0;
};

// The tile plan of a map, or false when its box is too large for the tiles' shared memory.
bool plan_tiles(PeakMap& m, int64_t batch, int64_t wanted) {
  const int64_t kh = kTile + 2 * int64_t{m.ry}, kw = kTile + 2 * int64_t{m.rx};
  const int64_t smem = (kh * kw + kh * kTile + kTile * kTile) * 8;
  if (smem > kMaxTileSmem) return false;
  m.n_tiles_x = static_cast<int32_t>(cuda::ceil_div(m.width, kTile));
  const int64_t n_tiles = m.n_tiles_x * cuda::ceil_div(m.height, kTile);
  const int64_t per_tile = cuda::ceil_div(kTile, m.ry + 1) * cuda::ceil_div(kTile, m.rx + 1);
  m.kt = static_cast<int32_t>(std::min<int64_t>(wanted, per_tile));
  if (batch * n_tiles > std::numeric_limits<int32_t>::max() || n_tiles * m.kt > std::numeric_limits<int32_t>::max()) {
    return false;
  }
  m.n_tiles = static_cast<int32_t>(n_tiles);
  return true;
}

// Runs the tiles and the select passes; the last pass decodes with `d` (rows, votes, tables set).
template <int kMode>
void run_fused(PeakMap m, int64_t batch, int64_t wanted, bool is_float, Decode d, const at::TensorOptions& options) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cudaDeviceProp& prop = *at::cuda::getCurrentDeviceProperties();
  const int64_t kh = kTile + 2 * int64_t{m.ry}, kw = kTile + 2 * int64_t{m.rx};
  const int64_t tile_smem = (kh * kw + kh * kTile + kTile * kTile) * 8;
  at::Tensor pool = at::empty({batch, int64_t{m.n_tiles} * m.kt}, options.dtype(at::kLong));
  at::Tensor tile_max = at::empty({batch, int64_t{m.n_tiles}}, options.dtype(at::kInt));
  auto* pool_ptr = reinterpret_cast<unsigned long long*>(pool.data_ptr<int64_t>());
  auto* max_ptr = reinterpret_cast<uint32_t*>(tile_max.data_ptr<int32_t>());
  const unsigned tile_blocks = static_cast<unsigned>(batch * m.n_tiles);
  if (is_float) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(peak_tiles_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(tile_smem)));
    peak_tiles_kernel<float><<<tile_blocks, kTileThreads, tile_smem, stream>>>(m, pool_ptr, max_ptr);
  } else {
    C10_CUDA_CHECK(cudaFuncSetAttribute(peak_tiles_kernel<int32_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(tile_smem)));
    peak_tiles_kernel<int32_t><<<tile_blocks, kTileThreads, tile_smem, stream>>>(m, pool_ptr, max_ptr);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  d.tile_max = max_ptr;
  d.n_tiles = m.n_tiles;
  d.is_float = is_float;

  const int32_t kk = static_cast<int32_t>(wanted), kk_pow2 = pow2_at_least(kk);
  const int64_t extra = int64_t{kk_pow2} * 8 + (kMode == kLines ? 8 * wanted : 0);
  const int64_t budget = static_cast<int64_t>(prop.sharedMemPerBlockOptin) - 4096;
  const int64_t capacity = std::max<int64_t>((budget - extra) / 8, 2 * int64_t{kk});
  at::Tensor keys = pool;  // keep the pass's input alive until its kernel is queued
  int64_t n_in = keys.size(1);
  while (true) {
    const int64_t n_groups = cuda::ceil_div(std::max<int64_t>(n_in, 1), capacity);
    const int32_t group = static_cast<int32_t>(cuda::ceil_div(std::max<int64_t>(n_in, 1), n_groups));
    SelectLaunch s{};
    s.in = reinterpret_cast<const unsigned long long*>(keys.data_ptr<int64_t>());
    s.n_in = n_in;
    s.group = group;
    s.n_groups = static_cast<int32_t>(n_groups);
    s.kk = kk;
    s.kk_pow2 = kk_pow2;
    const int64_t smem = int64_t{group} * 8 + extra;
    const unsigned blocks = static_cast<unsigned>(batch * n_groups);
    if (n_groups == 1) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(select_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
      select_kernel<kMode><<<blocks, kSelectThreads, smem, stream>>>(s, d);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    at::Tensor out = at::empty({batch, n_groups * kk}, options.dtype(at::kLong));
    s.out = reinterpret_cast<unsigned long long*>(out.data_ptr<int64_t>());
    C10_CUDA_CHECK(cudaFuncSetAttribute(select_kernel<kReduce>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
    select_kernel<kReduce><<<blocks, kSelectThreads, smem, stream>>>(s, d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    keys = out;
    n_in = out.size(1);
  }
}

std::tuple<at::Tensor, at::Tensor> circle_detections_cuda(const at::Tensor& scores, const at::Tensor& radius_index,
                                                          at::IntArrayRef radii, int64_t k, int64_t min_distance,
                                                          std::optional<double> threshold) {
  hough_images::check_circle_detections_args(scores, radius_index, radii, k, min_distance, threshold);
  const int64_t batch = scores.size(0), height = scores.size(1), width = scores.size(2);
  if (batch * k * height * width == 0 || k > kMaxFusedWanted) {
    return hough_images::circle_detections_generic(scores, radius_index, radii, k, min_distance, threshold);
  }
  const c10::cuda::CUDAGuard guard(scores.device());
  PeakMap m{};
  const at::Tensor values = scores.contiguous();
  m.values = values.data_ptr();
  m.image_size = height * width;
  m.height = static_cast<int32_t>(height);
  m.width = m.src_width = static_cast<int32_t>(width);
  m.ry = m.rx = static_cast<int32_t>(std::min<int64_t>(min_distance, std::numeric_limits<int32_t>::max() / 4));
  m.glue = m.periodic_x = false;
  // a threshold below 0 is 0: peaks have votes > 0, and padding (votes 0) never passes
  const double min_votes = threshold.has_value() ? std::max(*threshold, 0.0) : 0.0;
  m.min_votes = min_votes;
  if (!plan_tiles(m, batch, k)) {
    return hough_images::circle_detections_generic(scores, radius_index, radii, k, min_distance, threshold);
  }
  const at::TensorOptions floats = scores.options().dtype(at::kFloat);
  at::Tensor circles = at::empty({batch, k, 3}, floats);
  at::Tensor votes = at::empty({batch, k}, floats);
  const at::Tensor index = radius_index.contiguous();
  const at::Tensor table = device_table(std::vector<int32_t>(radii.begin(), radii.end()), at::kInt, scores.device());
  Decode d{};
  d.has_threshold = threshold.has_value();
  d.threshold = static_cast<float>(min_votes);
  d.k = static_cast<int32_t>(k);
  d.rows = circles.data_ptr<float>();
  d.votes = votes.data_ptr<float>();
  d.radius_index = index.data_ptr<int64_t>();
  d.radii = table.data_ptr<int32_t>();
  d.n_radii = static_cast<int32_t>(radii.size());
  d.width = static_cast<int32_t>(width);
  d.bins = height * width;
  run_fused<kCircles>(m, batch, k, scores.scalar_type() == at::kFloat, d, scores.options());
  return {circles, votes};
}

std::tuple<at::Tensor, at::Tensor> line_detections_cuda(const at::Tensor& acc, at::ArrayRef<double> theta, int64_t k,
                                                        int64_t min_distance, int64_t min_angle,
                                                        std::optional<double> threshold, bool glue) {
  hough_images::check_line_detections_args(acc, theta, k, min_distance, min_angle, threshold);
  const int64_t batch = acc.size(0), n_rho = acc.size(1), n_theta = acc.size(2);
  const int64_t wanted = glue ? 2 * k : k;
  if (batch * k * n_rho * n_theta == 0 || wanted > kMaxFusedWanted) {
    return hough_images::line_detections_generic(acc, theta, k, min_distance, min_angle, threshold, glue);
  }
  const c10::cuda::CUDAGuard guard(acc.device());
  PeakMap m{};
  const at::Tensor values = acc.contiguous();
  m.values = values.data_ptr();
  m.image_size = n_rho * n_theta;
  m.height = static_cast<int32_t>(n_rho);
  m.src_width = static_cast<int32_t>(n_theta);
  m.width = static_cast<int32_t>(glue ? 2 * n_theta : n_theta);
  m.glue = m.periodic_x = glue;
  m.ry = static_cast<int32_t>(std::min<int64_t>(min_distance, std::numeric_limits<int32_t>::max() / 4));
  m.rx = static_cast<int32_t>(std::min(min_angle, n_theta));  // hough_peaks' box; within one turn of 2T
  m.min_votes = threshold.value_or(0.0);
  if (!plan_tiles(m, batch, wanted)) {
    return hough_images::line_detections_generic(acc, theta, k, min_distance, min_angle, threshold, glue);
  }
  const at::TensorOptions floats = acc.options().dtype(at::kFloat);
  at::Tensor lines = at::empty({batch, k, 2}, floats);
  at::Tensor votes = at::empty({batch, k}, floats);
  const at::Tensor table = device_table(std::vector<double>(theta.begin(), theta.end()), at::kDouble, acc.device());
  Decode d{};
  d.has_threshold = threshold.has_value();
  d.threshold = static_cast<float>(threshold.value_or(0.0));
  d.k = static_cast<int32_t>(k);
  d.rows = lines.data_ptr<float>();
  d.votes = votes.data_ptr<float>();
  d.theta = table.data_ptr<double>();
  d.n_theta = static_cast<int32_t>(n_theta);
  d.offset = static_cast<int32_t>((n_rho - 1) / 2);
  d.wanted = static_cast<int32_t>(wanted);
  d.glue = glue;
  run_fused<kLines>(m, batch, wanted, acc.scalar_type() == at::kFloat, d, acc.options());
  return {lines, votes};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("circle_detections", &circle_detections_cuda);
  m.impl("line_detections", &line_detections_cuda);
}

}  // namespace pointops
