// PPF voting on CUDA (contract in vote.h; the CPU twin is vote_cpu.cpp).
//
// A scene is prepared once per call (prepare_scene_kernel): every point's position and unit normal
// as two float4 (w = 1 when the point takes part), so a warp reads its 32 partners in two coalesced
// 16-byte loads instead of six scalar loads and a normalization per (reference, slice, point).
//
// Both backends walk a reference's votes the same way (warp_rounds): a warp takes 32 scene points
// at a time, each lane pairs its point with the reference, computes the feature and looks its
// key(s) up (lookup_rows: two loads, no search); the warp then spreads the union of the 32 row
// ranges over its lanes (a warp scan of the range lengths and a 5-step search for each row's
// owner), so a lane that drew a large bucket does not stall the others. round_rows gives each
// lane kUnroll rows at a time and issues all their loads (pair_ref, pair_alpha) before the first
// vote, so a warp has kUnroll L2 requests in flight instead of one: a step of one row at a time
// would wait on the latency of one owner search + one row load + one shared-memory atomic.
//
// dense (default; no host sync): one block per (scene, model, reference, model-point slice)
//   with a 32-bit (slice points x angle_bins) accumulator in shared memory: a slice is as many
//   model points as fit kDenseSmemBudget (up to 1,280 points at 30 bins: the presets' models of
//   500-1,150 points take one slice; 2,000 points are 2 slices of 120 KB). A key's pair rows are sorted by reference point (the stable
//   sort of ppf_model), so the rows of key k that fall in slice s are one range; with several
//   slices, slice_rows_kernel writes every (model, key, slice) range's bounds into a table first
//   (one binary search per entry, once per call), so the vote loop looks a slice's rows up in one
//   8-byte load instead of two binary searches of up to 11 dependent L2 loads per lookup. Each
//   block keeps its slice's top k by k rounds of a block-wide maximum of 64-bit peak words
//   (votes << 32 | ~cell); a merge kernel takes the top k over the slices and computes the poses.
//   Votes go to shared-memory atomics; with the loads in flight, those and the issue rate of the
//   vote loop (about 30 instructions per 32 votes) bound it.
// sort: per reference, the number of votes (the sum of its range lengths); these counts are read
//   back to the host once (the only host sync of either backend) to cut the references into
//   chunks of about chunk_votes votes; per chunk, every vote is written as a 64-bit key
//   (reference in chunk, model point, alpha bin) and counted by the parallel hash array
//   (common/hash_array.cuh: radix sort + run-length encoding); a block per reference takes the
//   top k of its runs. Memory: about 52 bytes a vote of a chunk (keys, sort and run buffers), so
//   the default 2^24 votes use about 0.9 GB; the sort's passes over those bytes bound it.
#include "ppf/vote.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/hash_array.cuh"
#include "ppf/ppf_args.h"

namespace pointops {
namespace ppf {
namespace {

using cuda::kFullMask;
using cuda::kWarpSize;

// One block of 32 warps per SM (a slice's accumulator takes most of the shared memory): the most
// warps a block can have, to hide the pair-row loads' latency, at 64 registers a thread with a
// few bytes spilled.
constexpr int kDenseThreads = 1024;
constexpr int kSortThreads = 256;
constexpr int kPrepareThreads = 256;
constexpr int kUnroll = 4;  // pair rows a lane has in flight per step of round_rows
// Each slice's block pairs its reference with every scene partner again (features, keys,
// lookups), so fewer, larger slices beat more blocks per SM: the budget takes the presets'
// models (up to 1,280 points at 30 bins) in one slice, one block an SM.
constexpr int64_t kDenseSmemBudget = 160 * 1024;

// Device pointers and sizes of one call.
struct VoteArgs {
  const float4* scene;  // (S, N, 2): position (w = 1: the point takes part), unit normal
  const int64_t* scene_lengths;
  const int64_t* key_offsets;  // (M, K + 1)
  const int32_t* slice_rows;   // (M, K, slices + 1): first row of each slice's range; null: one slice
  const int32_t* pair_ref;
  const float* pair_alpha;
  const float* steps;
  const float* diameters;
  int64_t slices;
  VoteShape shape;
};

// The per-warp table of one lookup round: for each lane, the end of its rows in the warp's
// concatenation (inclusive scan), the offset from a concatenated index to a pair row, and the
// lane's scene alpha.
struct WarpScratch {
  int64_t end[kWarpSize];
  int64_t delta[kWarpSize];
  float alpha[kWarpSize];
};

// One pair-list row as the vote reads it.
struct PairRow {
  int32_t point;
  float alpha;
};

// ---- the prepared scene --------------------------------------------------------------------------

// Point j of scene s: its position (w = 1 when it takes part: finite, nonzero finite normal, j
// below the scene's length) and its unit normal, as load_oriented computes them.
__global__ void prepare_scene_kernel(const float* __restrict__ points, const float* __restrict__ normals,
                                     const int64_t* __restrict__ lengths, int64_t scenes, int64_t n,
                                     float4* __restrict__ out) {
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < scenes * n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = e / n;
    Vec3 p = {0.0f, 0.0f, 0.0f}, u = {0.0f, 0.0f, 0.0f};
    const bool ok =
        load_oriented(points + s * n * 3, normals + s * n * 3, cloud_length(lengths, s, n), e - s * n, &p, &u);
    out[2 * e] = make_float4(ok ? p.x : 0.0f, ok ? p.y : 0.0f, ok ? p.z : 0.0f, ok ? 1.0f : 0.0f);
    out[2 * e + 1] = make_float4(ok ? u.x : 0.0f, ok ? u.y : 0.0f, ok ? u.z : 0.0f, 0.0f);
  }
}

// A reference as every thread of its block sees it (the same values in every thread).
struct Reference {
  Frame frame;
  Binning binning;
  float max_square;
  int64_t scene, model, ref, length;
  bool valid;
};

__device__ Reference load_task_reference(const VoteArgs& a, int64_t task) {
  const VoteShape& s = a.shape;
  Reference r;
  r.ref = (task % s.refs) * s.stride;
  r.model = (task / s.refs) % s.models;
  r.scene = task / (s.refs * s.models);
  r.length = cloud_length(a.scene_lengths, r.scene, s.n);
  r.binning = s.binning;
  r.binning.distance_step = a.steps[r.model];
  const float diam = a.diameters[r.model];
  r.max_square = multiply(diam, diam);
  r.frame = Frame{};
  const bool usable = r.binning.distance_step > 0.0f && finite(r.binning.distance_step) && finite(diam) && s.pairs > 0;
  r.valid = false;
  if (usable) {  // ref < N always; w = 0 past the scene's length
    const float4* point = a.scene + (r.scene * s.n + r.ref) * 2;
    const float4 p = point[0];
    if (p.w != 0.0f) {
      const float4 n = point[1];
      r.frame = make_frame({p.x, p.y, p.z}, {n.x, n.y, n.z});
      r.valid = true;
    }
  }
  return r;
}

// The first row in [lo, hi) whose pair_ref is >= value (rows of one key are sorted by it).
__device__ __forceinline__ int64_t lower_row(const int32_t* pair_ref, int64_t lo, int64_t hi, int64_t value) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (pair_ref[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// slice_rows[m, key, s]: the first row of key `key` of model m whose model point is at least
// min(s * slice_points, nm), s = 0 .. slices: slice s's rows of the key are
// [slice_rows[m, key, s], slice_rows[m, key, s + 1]) (rows fit int32: P < 2^31).
__global__ void slice_rows_kernel(const int64_t* __restrict__ key_offsets, const int32_t* __restrict__ pair_ref,
                                  int64_t models, int64_t keys, int64_t pairs, int64_t nm, int64_t slices,
                                  int64_t slice_points, int32_t* __restrict__ out) {
  const int64_t per_model = keys * (slices + 1);
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < models * per_model;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = e / per_model;
    const int64_t key = (e - m * per_model) / (slices + 1);
    const int64_t slice = e - m * per_model - key * (slices + 1);
    int64_t lo, hi;
    key_rows(key_offsets + m * (keys + 1), key, pairs, &lo, &hi);
    const int64_t bound = slice * slice_points < nm ? slice * slice_points : nm;
    out[e] = static_cast<int32_t>(lower_row(pair_ref + m * pairs, lo, hi, bound));
  }
}

// The rows reference r looks up under `key`: all of them (one slice) or slice `slice`'s.
__device__ __forceinline__ void lookup_rows(const VoteArgs& a, const Reference& r, int64_t key, int64_t slice,
                                            int64_t* lo, int64_t* hi) {
  const VoteShape& s = a.shape;
  if (a.slice_rows == nullptr) {
    key_rows(a.key_offsets + r.model * (s.keys + 1), key, s.pairs, lo, hi);
  } else {
    const int32_t* t = a.slice_rows + (r.model * s.keys + key) * (a.slices + 1) + slice;
    *lo = t[0];
    *hi = t[1];
  }
}

// Every lookup round of reference r (slice `slice`): a warp takes 32 scene points at a time,
// pairs each with the reference, looks its key(s) up and fills its scratch with the round's
// ranges; round(total) then runs on every lane, `total` rows in the round (skipped when 0).
// Every lane of every warp of the block must call it.
template <typename Round>
__device__ void warp_rounds(const VoteArgs& a, const Reference& r, int64_t slice, WarpScratch* ws, Round&& round) {
  const VoteShape& s = a.shape;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const float4* scene = a.scene + r.scene * s.n * 2;
  const int lookups = s.spread ? 16 : 1;
  for (int64_t base = int64_t{warp} * kWarpSize; base < r.length; base += int64_t{warps} * kWarpSize) {
    const int64_t j = base + lane;
    ScenePair pair;
    bool ok = false;
    if (j < r.length && j != r.ref) {
      const float4 p = scene[2 * j];
      if (p.w != 0.0f) {
        const float4 n = scene[2 * j + 1];
        ok = oriented_scene_pair(r.frame, {p.x, p.y, p.z}, {n.x, n.y, n.z}, r.max_square, r.binning, &pair);
      }
    }
    for (int mask = 0; mask < lookups; ++mask) {
      int64_t lo = 0;
      int64_t hi = 0;
      if (ok) {
        const int64_t key = lookup_key(pair, mask, s.binning.feature_bins);
        if (key >= 0) lookup_rows(a, r, key, slice, &lo, &hi);
      }
      const int64_t len = hi - lo;
      int64_t end = len;
      for (int d = 1; d < kWarpSize; d <<= 1) {
        const int64_t y = __shfl_up_sync(kFullMask, end, d);
        if (lane >= d) end += y;
      }
      const int64_t total = __shfl_sync(kFullMask, end, kWarpSize - 1);
      if (total == 0) continue;
      ws->end[lane] = end;
      ws->delta[lane] = lo - (end - len);
      ws->alpha[lane] = ok ? pair.alpha : 0.0f;
      __syncwarp();
      round(total);
      __syncwarp();
    }
  }
}

// The rows of one round, spread over the warp's lanes: cast(load(row), scene_alpha) for each,
// kUnroll rows per lane at a time, their loads all issued before the first cast.
template <typename Cast>
__device__ __forceinline__ void round_rows(const VoteArgs& a, const Reference& r, const WarpScratch* ws, int64_t total,
                                           Cast&& cast) {
  const int lane = threadIdx.x % kWarpSize;
  const int32_t* pair_ref = a.pair_ref + r.model * a.shape.pairs;
  const float* pair_alpha = a.pair_alpha + r.model * a.shape.pairs;
  for (int64_t first = lane; first < total; first += int64_t{kWarpSize} * kUnroll) {
    int64_t row[kUnroll];
    float scene_alpha[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t t = first + int64_t{u} * kWarpSize;
      row[u] = -1;
      scene_alpha[u] = 0.0f;
      if (t < total) {
        int owner = 0;
        for (int step = kWarpSize / 2; step > 0; step >>= 1) {
          if (ws->end[owner + step - 1] <= t) owner += step;
        }
        row[u] = t + ws->delta[owner];
        scene_alpha[u] = ws->alpha[owner];
      }
    }
    PairRow loaded[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (row[u] >= 0) loaded[u] = {__ldg(pair_ref + row[u]), __ldg(pair_alpha + row[u])};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (row[u] >= 0) cast(loaded[u], scene_alpha[u]);
    }
  }
}

// Block-wide maximum of a 64-bit word; every thread gets it. `slots` holds one word per warp.
__device__ uint64_t block_max(uint64_t value, uint64_t* slots) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int d = kWarpSize / 2; d > 0; d >>= 1) {
    const uint64_t other = __shfl_down_sync(kFullMask, value, d);
    value = other > value ? other : value;
  }
  __syncthreads();  // slots may still be read from the previous call
  if (lane == 0) slots[warp] = value;
  __syncthreads();
  uint64_t best = 0;
  for (int w = 0; w < warps; ++w) best = slots[w] > best ? slots[w] : best;
  return best;
}

__device__ __forceinline__ int64_t block_sum(int64_t value, int64_t* slots) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int d = kWarpSize / 2; d > 0; d >>= 1) value += __shfl_down_sync(kFullMask, value, d);
  __syncthreads();
  if (lane == 0) slots[warp] = value;
  __syncthreads();
  int64_t total = 0;
  for (int w = 0; w < warps; ++w) total += slots[w];
  return total;
}

// ---- dense backend -----------------------------------------------------------------------------

// Block (task, slice): shared memory holds the slice's accumulator, then the warps' scratch,
// then the block_max slots.
__global__ void __launch_bounds__(kDenseThreads)
    dense_vote_kernel(VoteArgs a, int32_t slice_points, int64_t scratch_offset, uint64_t* __restrict__ candidates) {
  extern __shared__ __align__(16) unsigned char smem[];
  const VoteShape& s = a.shape;
  uint32_t* acc = reinterpret_cast<uint32_t*>(smem);
  WarpScratch* scratch = reinterpret_cast<WarpScratch*>(smem + scratch_offset);
  uint64_t* slots = reinterpret_cast<uint64_t*>(scratch + kDenseThreads / kWarpSize);
  const int64_t block = blockIdx.x;
  const int64_t slice = block % a.slices;
  const int64_t task = block / a.slices;
  const int32_t i0 = static_cast<int32_t>(slice * slice_points);
  const int32_t i1 = static_cast<int32_t>(std::min<int64_t>(s.nm, int64_t{i0} + slice_points));
  const int64_t cells = int64_t{i1 - i0} * s.binning.angle_bins;
  const Reference r = load_task_reference(a, task);
  if (!r.valid) {  // the whole block: a padded row or a point that takes no part has no peaks
    for (int64_t q = threadIdx.x; q < s.k; q += blockDim.x) candidates[block * s.k + q] = 0;
    return;
  }
  for (int64_t c = threadIdx.x; c < cells; c += blockDim.x) acc[c] = 0;
  __syncthreads();
  {
    const int64_t base_cell = int64_t{i0} * s.binning.angle_bins;
    WarpScratch* ws = scratch + threadIdx.x / kWarpSize;
    warp_rounds(a, r, slice, ws, [&](int64_t total) {
      round_rows(a, r, ws, total, [&](const PairRow& row, float scene_alpha) {
        if (row.point < i0 || row.point >= i1) return;
        const int64_t cell = vote_cell(row.point, row.alpha, scene_alpha, s.nm, r.binning);
        if (cell >= 0) atomicAdd(acc + (cell - base_cell), 1u);
      });
    });
  }
  __syncthreads();
  const int64_t first_cell = int64_t{i0} * s.binning.angle_bins;
  uint64_t previous = ~uint64_t{0};
  for (int64_t q = 0; q < s.k; ++q) {
    uint64_t best = 0;
    for (int64_t c = threadIdx.x; c < cells; c += blockDim.x) {
      const uint32_t v = acc[c];
      if (v == 0) continue;
      const uint64_t word = peak_word(v, static_cast<uint32_t>(first_cell + c));
      if (word < previous && word > best) best = word;
    }
    best = block_max(best, slots);
    if (threadIdx.x == 0) candidates[block * s.k + q] = best;
    previous = best;
    if (best == 0) {
      for (int64_t rest = q + 1 + threadIdx.x; rest < s.k; rest += blockDim.x) {
        candidates[block * s.k + rest] = 0;
      }
      break;
    }
  }
}

// ---- sort backend ------------------------------------------------------------------------------

__global__ void __launch_bounds__(kSortThreads) count_votes_kernel(VoteArgs a, int64_t* __restrict__ counts) {
  __shared__ WarpScratch scratch[kSortThreads / kWarpSize];
  __shared__ int64_t slots[kSortThreads / kWarpSize];
  const int64_t task = blockIdx.x;
  const Reference r = load_task_reference(a, task);
  int64_t count = 0;
  if (r.valid) {
    const int lane = threadIdx.x % kWarpSize;
    warp_rounds(a, r, 0, scratch + threadIdx.x / kWarpSize, [&](int64_t total) {
      if (lane == 0) count += total;
    });
  }
  count = block_sum(count, slots);
  if (threadIdx.x == 0) counts[task] = count;
}

// Tasks [first_task, first_task + gridDim.x): the votes of task t go to rows
// [offsets[t] - offsets[first_task], ...) of `keys`, as (t - first_task) * cells + cell, or
// key_bound for a malformed row.
__global__ void __launch_bounds__(kSortThreads)
    emit_votes_kernel(VoteArgs a, int64_t first_task, const int64_t* __restrict__ offsets, int64_t key_bound,
                      int64_t* __restrict__ keys) {
  __shared__ WarpScratch scratch[kSortThreads / kWarpSize];
  __shared__ unsigned long long filled;
  const VoteShape& s = a.shape;
  const int64_t local = blockIdx.x;
  const int64_t task = first_task + local;
  if (threadIdx.x == 0) filled = 0;
  const Reference r = load_task_reference(a, task);
  __syncthreads();
  if (!r.valid) return;
  int64_t* out = keys + (offsets[task] - offsets[first_task]);
  // Rows are claimed one at a time: the order within a reference does not matter, the keys are
  // sorted next.
  WarpScratch* ws = scratch + threadIdx.x / kWarpSize;
  warp_rounds(a, r, 0, ws, [&](int64_t total) {
    round_rows(a, r, ws, total, [&](const PairRow& row, float scene_alpha) {
      const int64_t cell = vote_cell(row.point, row.alpha, scene_alpha, s.nm, r.binning);
      const unsigned long long slot = atomicAdd(&filled, 1ull);
      out[slot] = cell >= 0 ? local * s.cells + cell : key_bound;
    });
  });
}

__global__ void __launch_bounds__(kSortThreads)
    sort_peaks_kernel(cuda::HashArrayView h, int64_t first_task, int64_t cells, int64_t k,
                      uint64_t* __restrict__ candidates) {
  __shared__ uint64_t slots[kSortThreads / kWarpSize];
  const int64_t local = blockIdx.x;
  const int64_t runs = *h.num_unique;
  const int64_t begin = hash_array::lower_bound(h.unique_keys, runs, local * cells);
  const int64_t end = hash_array::lower_bound(h.unique_keys, runs, (local + 1) * cells);
  uint64_t previous = ~uint64_t{0};
  uint64_t* out = candidates + (first_task + local) * k;
  for (int64_t q = 0; q < k; ++q) {
    uint64_t best = 0;
    for (int64_t run = begin + threadIdx.x; run < end; run += blockDim.x) {
      const uint64_t word =
          peak_word(static_cast<uint32_t>(h.counts[run]), static_cast<uint32_t>(h.unique_keys[run] - local * cells));
      if (word < previous && word > best) best = word;
    }
    best = block_max(best, slots);
    if (threadIdx.x == 0) out[q] = best;
    previous = best;
  }
}

// ---- peaks to outputs --------------------------------------------------------------------------

// One thread per task: the top k of its slices' candidates, decoded into outputs.
__global__ void merge_peaks_kernel(VoteArgs a, const uint64_t* __restrict__ candidates,
                                   const float* __restrict__ model_points, const float* __restrict__ model_normals,
                                   AlphaTable table, int64_t tasks, int64_t* __restrict__ votes,
                                   int64_t* __restrict__ model_index, int64_t* __restrict__ alpha,
                                   float* __restrict__ quaternions, float* __restrict__ translations) {
  const VoteShape& s = a.shape;
  const int64_t task = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (task >= tasks) return;
  TopWords top;
  top.reset(static_cast<int>(s.k));
  for (int64_t c = 0; c < a.slices * s.k; ++c) top.push(candidates[task * a.slices * s.k + c]);
  const Reference r = load_task_reference(a, task);
  const float* mp = model_points + r.model * s.nm * 3;
  const float* mn = model_normals + r.model * s.nm * 3;
  for (int64_t q = 0; q < s.k; ++q) {
    const int64_t row = task * s.k + q;
    write_peak(r.valid ? top.word[q] : 0, r.frame, mp, mn, s.binning.angle_bins, table, votes + row, model_index + row,
               alpha + row, quaternions + row * 4, translations + row * 3);
  }
}

VoteResult ppf_vote_cuda(const at::Tensor& scene_points, const at::Tensor& scene_normals,
                         const std::optional<at::Tensor>& scene_lengths, const at::Tensor& model_points,
                         const at::Tensor& model_normals, const at::Tensor& key_offsets, const at::Tensor& pair_ref,
                         const at::Tensor& pair_alpha, const at::Tensor& distance_step, const at::Tensor& diameter,
                         int64_t angle_bins, int64_t distance_bins, int64_t stride, int64_t k, bool spread,
                         c10::string_view backend_view, int64_t chunk_votes) {
  const std::string backend(backend_view);
  const VoteShape s = check_vote_args(scene_points, scene_normals, scene_lengths, model_points, model_normals,
                                      key_offsets, pair_ref, pair_alpha, distance_step, diameter, angle_bins,
                                      distance_bins, stride, k, spread, backend, chunk_votes);
  check_device_type(scene_points, "scene_points", at::kCUDA);
  const c10::cuda::CUDAGuard guard(scene_points.device());
  VoteResult out = empty_vote_outputs(scene_points, s);
  const int64_t tasks = s.scenes * s.models * s.refs;
  if (tasks == 0 || s.k == 0) return out;
  TORCH_CHECK(tasks <= INT_MAX, "ppf_vote: scenes * models * references must be at most ", INT_MAX, ", got ", tasks);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const VoteInputs in = vote_inputs(scene_points, scene_normals, scene_lengths, model_points, model_normals,
                                    key_offsets, pair_ref, pair_alpha, distance_step, diameter);
  const auto options = in.scene_points.options();
  // The scene's positions and unit normals, once for every reference, model and slice.
  const at::Tensor prepared = at::empty({s.scenes, s.n, 8}, options);
  auto* scene = reinterpret_cast<float4*>(prepared.data_ptr<float>());
  prepare_scene_kernel<<<static_cast<unsigned>(
                             std::min<int64_t>(cuda::ceil_div(s.scenes * s.n, kPrepareThreads), 1 << 16)),
                         kPrepareThreads, 0, stream>>>(in.scene_points.data_ptr<float>(),
                                                       in.scene_normals.data_ptr<float>(), in.scene_lengths.data,
                                                       s.scenes, s.n, scene);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  VoteArgs a{scene,
             in.scene_lengths.data,
             in.key_offsets.data_ptr<int64_t>(),
             nullptr,
             in.pair_ref.data_ptr<int32_t>(),
             in.pair_alpha.data_ptr<float>(),
             in.distance_step.data_ptr<float>(),
             in.diameter.data_ptr<float>(),
             1,
             s};

  at::Tensor candidates;
  at::Tensor slice_rows;
  if (backend == "dense") {
    const int64_t scratch_bytes = int64_t{kDenseThreads / kWarpSize} * (sizeof(WarpScratch) + sizeof(uint64_t));
    const int device_limit = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
    const int64_t budget = std::min<int64_t>(kDenseSmemBudget, device_limit) - scratch_bytes;
    const int64_t cell_bytes = int64_t{4} * angle_bins;
    int64_t slices = 1;
    int64_t slice_points = std::max<int64_t>(1, budget / cell_bytes);
    if (s.nm > slice_points) {
      slices = cuda::ceil_div(s.nm, slice_points);
      slice_points = cuda::ceil_div(s.nm, slices);
    } else {
      slice_points = std::max<int64_t>(s.nm, 1);
    }
    const int64_t blocks = tasks * slices;
    TORCH_CHECK(blocks <= INT_MAX, "ppf_vote: too many (reference, model slice) blocks: ", blocks);
    a.slices = slices;
    if (slices > 1) {  // each slice's rows of each key, found once here rather than per lookup
      slice_rows = at::empty({s.models, s.keys, slices + 1}, options.dtype(at::kInt));
      const int64_t entries = slice_rows.numel();
      slice_rows_kernel<<<static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(entries, kPrepareThreads), 1 << 16)),
                          kPrepareThreads, 0, stream>>>(in.key_offsets.data_ptr<int64_t>(),
                                                        in.pair_ref.data_ptr<int32_t>(), s.models, s.keys, s.pairs,
                                                        s.nm, slices, slice_points, slice_rows.data_ptr<int32_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      a.slice_rows = slice_rows.data_ptr<int32_t>();
    }
    const int64_t acc_bytes = cuda::round_up(slice_points * cell_bytes, 16);
    const int64_t smem = acc_bytes + scratch_bytes;
    candidates = at::empty({blocks * s.k}, options.dtype(at::kLong));
    C10_CUDA_CHECK(
        cudaFuncSetAttribute(dense_vote_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    dense_vote_kernel<<<static_cast<unsigned>(blocks), kDenseThreads, smem, stream>>>(
        a, static_cast<int32_t>(slice_points), acc_bytes, reinterpret_cast<uint64_t*>(candidates.data_ptr<int64_t>()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    candidates = at::zeros({tasks * s.k}, options.dtype(at::kLong));
    at::Tensor counts = at::empty({tasks}, options.dtype(at::kLong));
    count_votes_kernel<<<static_cast<unsigned>(tasks), kSortThreads, 0, stream>>>(a, counts.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // The one host sync: chunk boundaries need the counts.
    const at::Tensor host_counts = counts.cpu();
    const int64_t* c = host_counts.data_ptr<int64_t>();
    at::Tensor host_offsets = at::empty({tasks + 1}, host_counts.options());
    int64_t* o = host_offsets.data_ptr<int64_t>();
    o[0] = 0;
    for (int64_t t = 0; t < tasks; ++t) o[t + 1] = o[t] + c[t];
    const at::Tensor device_offsets = host_offsets.to(in.scene_points.device());
    int64_t first = 0;
    while (first < tasks) {
      int64_t last = first + 1;
      while (last < tasks && o[last + 1] - o[first] <= chunk_votes) ++last;
      const int64_t chunk = o[last] - o[first];
      TORCH_CHECK(chunk <= INT_MAX, "ppf_vote: one reference casts ", chunk, " votes, more than one sort can take (",
                  INT_MAX, ")");
      if (chunk > 0) {
        const int64_t key_bound = (last - first) * s.cells;
        at::Tensor keys = at::empty({chunk}, options.dtype(at::kLong));
        emit_votes_kernel<<<static_cast<unsigned>(last - first), kSortThreads, 0, stream>>>(
            a, first, device_offsets.data_ptr<int64_t>(), key_bound, keys.data_ptr<int64_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        const cuda::HashArray hash = cuda::build_hash_array(keys, key_bound);
        sort_peaks_kernel<<<static_cast<unsigned>(last - first), kSortThreads, 0, stream>>>(
            hash.view(), first, s.cells, s.k, reinterpret_cast<uint64_t*>(candidates.data_ptr<int64_t>()));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      first = last;
    }
  }

  const AlphaTable table = make_alpha_table(angle_bins);
  merge_peaks_kernel<<<static_cast<unsigned>(cuda::ceil_div(tasks, 128)), 128, 0, stream>>>(
      a, reinterpret_cast<const uint64_t*>(candidates.data_ptr<int64_t>()), in.model_points.data_ptr<float>(),
      in.model_normals.data_ptr<float>(), table, tasks, std::get<0>(out).data_ptr<int64_t>(),
      std::get<1>(out).data_ptr<int64_t>(), std::get<2>(out).data_ptr<int64_t>(), std::get<3>(out).data_ptr<float>(),
      std::get<4>(out).data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace ppf

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("ppf_vote", &ppf::ppf_vote_cuda); }

}  // namespace pointops
