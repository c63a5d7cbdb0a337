// The CUDA fps kernels (rules in fps.h; fps_cuda.cu plans and launches them, the CPU twin is
// fps_cpu.cpp).
//
// Why not one block per cloud and one step at a time: the classic layout leaves most SMs idle
// when clouds are few and re-reads every cloud from memory at every step, and any layout that
// spreads a cloud pays, per step, for the exchange that agrees on the farthest point (grid:
// ~1.5 us of L2 atomics and polling; cluster: a round trip between SMs). Here a cloud is split
// over `parts` blocks that keep their points and running min-distances in registers, and each
// exchange settles a round of several picks, not one: the picks that the one-at-a-time algorithm
// would make next, proven so from each unit's best key and a bound on its other points
// (select_picks). Keys are 64-bit argmax keys (distance bits + 1, index: max = farthest, then
// lowest index), reduced in a warp by two redux.sync; the units are warps, and their records meet
//   kBlock   parts == 1: in shared memory;
//   kCluster parts <= 16 on sm_90: every warp pushes its record into every peer block's shared
//            memory (st.async, counted by the peer's mbarrier): no cluster barrier per round;
//   kGrid    a cooperative launch: each block's best two records in global memory as words
//            tagged with the round, which every block polls (no fence, no counter).
// Exact pruning skips the warps whose box of points is too far from a pick to change any of
// their distances (fps_onchip_kernel).
//
// What bounds it: per round, the exchange plus the selection (a chain of warp reductions, one
// link per pick) plus the distance updates of the warps a pick reaches; figures and the per-pick
// cost against the exchange: docs/performance.md.
//
// D other than 2 or 3, and float64, take a simpler one-block-per-cloud streaming kernel with the
// same rules.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>
#include <limits>

#include "common/argmax_key.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/float_bits.h"
#include "common/ptx.cuh"
#include "sampling/fps.h"
#include "sampling/fps_plan.h"

namespace pointops {
namespace fps_detail {

namespace cg = cooperative_groups;
using cuda::kFullMask;
using cuda::kWarpSize;

using fps_plan::kMaxClusterParts;
using fps_plan::kMaxThreads;
using fps_plan::Sync;

constexpr int kMaxWarps = kMaxThreads / kWarpSize;
constexpr int kStreamingThreads = 256;

// A step's best point as seen by one thread, warp, block or cluster. `dist < 0` means none.
// The generic (streaming) kernel reduces these with shuffles; the on-chip kernel packs
// float32 candidates into 64-bit keys instead (see pack_key).
template <typename acc_t>
struct Candidate {
  acc_t dist;
  int32_t index;  // within the cloud
};

template <typename acc_t>
__device__ __forceinline__ Candidate<acc_t> no_candidate() {
  return {fps_detail::picked_marker<acc_t>(), std::numeric_limits<int32_t>::max()};
}

template <typename acc_t>
__device__ __forceinline__ bool beats(const Candidate<acc_t>& a, const Candidate<acc_t>& b) {
  return a.dist > b.dist || (a.dist == b.dist && a.index < b.index);
}

// Butterfly argmax: every lane ends with the same winner (largest distance, lowest index).
template <typename acc_t>
__device__ __forceinline__ Candidate<acc_t> warp_argmax(Candidate<acc_t> c) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    Candidate<acc_t> other;
    other.dist = __shfl_xor_sync(kFullMask, c.dist, offset);
    other.index = __shfl_xor_sync(kFullMask, c.index, offset);
    if (beats(other, c)) c = other;
  }
  return c;
}

// Warp results -> block result, known to every thread: `warp_reduce` (every lane gets the
// warp's result) runs per warp, then over the warps' results. `slots` is double-buffered by the
// caller (step parity) so that one barrier per step suffices.
template <typename T, typename WarpReduce>
__device__ __forceinline__ T block_reduce(T value, T* slots, T identity, WarpReduce warp_reduce) {
  value = warp_reduce(value);
  const int warps = blockDim.x / kWarpSize;
  if (warps == 1) return value;
  const int lane = threadIdx.x % kWarpSize;
  if (lane == 0) slots[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  return warp_reduce(lane < warps ? slots[lane] : identity);
}

__device__ __forceinline__ bool all_finite(const float* p, int dims) {
  bool finite = true;
  for (int d = 0; d < dims; ++d) finite = finite && isfinite(p[d]);
  return finite;
}

__device__ __forceinline__ bool all_finite(const double* p, int dims) {
  bool finite = true;
  for (int d = 0; d < dims; ++d) finite = finite && isfinite(p[d]);
  return finite;
}

// (distance, index) as one argmax key (common/argmax_key.h), whose unsigned max is the step's
// winner: the value key is the distance's bits + 1 (distances >= 0, +inf included, order like
// their bits), so that 0 means "no candidate".
__device__ __forceinline__ uint32_t distance_value(float dist) { return dist >= 0.f ? float_bits(dist) + 1u : 0u; }

__device__ __forceinline__ unsigned long long pack_key(float dist, int32_t index) {
  const uint32_t value = distance_value(dist);
  return value == 0 ? 0ull : argmax_key(value, static_cast<uint32_t>(index));
}

__device__ __forceinline__ float key_distance(unsigned long long key) { return bits_float(argmax_key_value(key) - 1u); }

__device__ __forceinline__ int32_t key_index(unsigned long long key) {
  return static_cast<int32_t>(argmax_key_index(key));
}

// The largest key of distance value `value`: a key beats it exactly when its distance is larger.
// A unit's bound is kept as such a value alone, an upper bound that ignores the index.
__device__ __forceinline__ unsigned long long bound_key(uint32_t value) { return argmax_key(value, 0u); }

// A unit's candidate as the exchange carries it, two 16-byte words: {key high, key low, bound
// value, x} and {y, z (DIM 3), 0, 0}. The bound is the distance value of the unit's second-best
// point (0: none), so no other point of the unit can beat a key above bound_key(bound).
__device__ __forceinline__ unsigned long long record_key(const uint4& head) {
  return (static_cast<unsigned long long>(head.x) << 32) | head.y;
}

template <int DIM>
__device__ __forceinline__ void record_coords(const uint4& head, const uint4& tail, float* c) {
  c[0] = bits_float(head.w);
  c[1] = bits_float(tail.x);
  if constexpr (DIM == 3) c[2] = bits_float(tail.y);
}

// Grid layout: each block publishes its best kGridListLength units (the last one's bound raised
// to the best unit left out) per round; two record sets alternate by round parity.
constexpr int kGridListLength = 2;

// The spatial order of a block's points: cells of a 2^kCellBits grid per axis over the block's
// bounding box, numbered along a Morton curve (4096 cells for D = 2 and 3); absent points go to
// the extra cell kCells.
template <int DIM>
struct SpatialCells {
  static constexpr int kBits = DIM == 3 ? 4 : 6;
  static constexpr int kCells = 1 << (kBits * DIM);
};
constexpr int kCellWords = (1 << 12) + 4;  // kCells + 1 counters, rounded up to 16 bytes

template <int DIM>
__device__ __forceinline__ uint32_t spatial_cell(const float* p, const float* origin, const float* scale) {
  constexpr int kBits = SpatialCells<DIM>::kBits;
  uint32_t c[DIM];
#pragma unroll
  for (int d = 0; d < DIM; ++d) {
    // Out-of-range or huge products saturate in the conversion and are clamped.
    const int v = __float2int_rz((p[d] - origin[d]) * scale[d]);
    c[d] = static_cast<uint32_t>(min(max(v, 0), (1 << kBits) - 1));
  }
  uint32_t cell = 0;
#pragma unroll
  for (int bit = 0; bit < kBits; ++bit) {
#pragma unroll
    for (int d = 0; d < DIM; ++d) cell |= ((c[d] >> bit) & 1u) << (bit * DIM + d);
  }
  return cell;
}

// Exclusive prefix sum of data[0, size) in shared memory by the whole block; `warp_sums` holds
// kWarpSize words. Ends with a barrier.
__device__ inline void block_exclusive_scan(uint32_t* data, int size, uint32_t* warp_sums) {
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int per = (size + blockDim.x - 1) / blockDim.x;
  const int first = min(size, tid * per);
  const int last = min(size, first + per);
  uint32_t sum = 0;
  for (int i = first; i < last; ++i) sum += data[i];
  uint32_t inclusive = sum;
#pragma unroll
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const uint32_t v = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  if (lane == kWarpSize - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const uint32_t total = lane < warps ? warp_sums[lane] : 0u;
    uint32_t scanned = total;
#pragma unroll
    for (int offset = 1; offset < kWarpSize; offset *= 2) {
      const uint32_t v = __shfl_up_sync(kFullMask, scanned, offset);
      if (lane >= offset) scanned += v;
    }
    warp_sums[lane] = scanned - total;
  }
  __syncthreads();
  uint32_t run = warp_sums[warp] + inclusive - sum;
  for (int i = first; i < last; ++i) {
    const uint32_t v = data[i];
    data[i] = run;
    run += v;
  }
  __syncthreads();
}

// Ascending bitonic sort of a register array (N a power of two; every index is a constant).
template <int N>
__device__ __forceinline__ void sort_ascending(int32_t (&v)[N]) {
#pragma unroll
  for (int size = 2; size <= N; size *= 2) {
#pragma unroll
    for (int stride = size / 2; stride > 0; stride /= 2) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int j = i ^ stride;
        if (j > i) {
          const int32_t a = v[i], c = v[j];
          const bool swap = ((i & size) == 0) ? (a > c) : (a < c);
          v[i] = swap ? c : a;
          v[j] = swap ? a : c;
        }
      }
    }
  }
}

// The round's picks from `total` unit records in shared memory, by warp 0 (all lanes). The
// one-at-a-time algorithm would pick the largest key, then the next largest ones in key order
// for as long as each is provably its next pick: (a) its key beats the bound of every unit
// picked before it in the round (every other point of those units is below it; the units not
// picked hold only smaller keys, as keys are taken in order), and (b) no pick of the round is
// nearer to it than its distance, so its running distance stays what its key says. The picks are
// that prefix (at most `limit`), found in parallel rather than one by one:
//   1. the first pick is the largest key;
//   2. candidates are the keys above its bound (with more records than lanes, also above the
//      largest key that fails (b) against it: the prefix cannot reach past either);
//   3. the candidates go to `candidates` (kWarpSize records of shared memory), one a lane; when
//      they are more than a warp, each lane's best stands for its lane, with its bound raised to
//      the lane's second key (exact, if sometimes shorter);
//   4. each candidate's rank among them, and whether (a) and (b) hold against the first pick and
//      every candidate above it; the prefix ends at the lowest rank that fails.
// Writes the picks' records to picks[0, count) in order and returns the count (every lane).
// Every step is a few warp-wide operations or a loop of independent shared-memory reads: the
// selection is on each round's critical path.
template <int DIM>
__device__ int select_picks(const uint4 (*records)[2], int total, int limit, uint4 (*picks)[2],
                            uint4 (*candidates)[2]) {
  const int lane = threadIdx.x % kWarpSize;
  const uint32_t lanes_below = (1u << lane) - 1u;
  unsigned long long lane_top = 0;
  int lane_at = -1;
#pragma unroll 4
  for (int j = lane; j < total; j += kWarpSize) {
    const unsigned long long key = record_key(records[j][0]);
    if (key > lane_top) {
      lane_top = key;
      lane_at = j;
    }
  }
  const unsigned long long top = warp_max_key(lane_top);
  if (top == 0) return 0;
  const int top_lane = __ffs(__ballot_sync(kFullMask, lane_top == top)) - 1;
  const int top_at = __shfl_sync(kFullMask, lane_at, top_lane);
  const uint4 top_head = records[top_at][0];
  const uint4 top_tail = records[top_at][1];
  if (lane == 0) {
    picks[0][0] = top_head;
    picks[0][1] = top_tail;
  }
  if (limit == 1) return 1;
  float first[DIM];
  record_coords<DIM>(top_head, top_tail, first);
  unsigned long long threshold = bound_key(top_head.z);

  int n;  // candidates
  if (total <= kWarpSize) {
    const uint4 head = lane < total ? records[lane][0] : make_uint4(0u, 0u, 0u, 0u);
    const unsigned long long key = record_key(head);
    const bool in = key > threshold && key < top;
    const uint32_t holders = __ballot_sync(kFullMask, in);
    if (in) {
      const int position = __popc(holders & lanes_below);
      candidates[position][0] = head;
      candidates[position][1] = records[lane][1];
    }
    n = __popc(holders);
  } else {
    unsigned long long fails = 0;
#pragma unroll 4
    for (int j = lane; j < total; j += kWarpSize) {
      const uint4 head = records[j][0];
      const unsigned long long key = record_key(head);
      float c[DIM];
      record_coords<DIM>(head, records[j][1], c);
      const bool fail = !(squared_distance<float>(c, first, DIM) >= key_distance(key));
      if (key > threshold && key < top && fail) fails = max(fails, key);
    }
    threshold = max(threshold, warp_max_key(fails));
    int count = 0, best_at = -1;
    unsigned long long best_key = 0, second_key = 0;
#pragma unroll 4
    for (int j = lane; j < total; j += kWarpSize) {
      const unsigned long long key = record_key(records[j][0]);
      if (key > threshold && key < top) {
        ++count;
        second_key = max(second_key, min(best_key, key));
        if (key > best_key) {
          best_key = key;
          best_at = j;
        }
      }
    }
    int inclusive = count;
#pragma unroll
    for (int offset = 1; offset < kWarpSize; offset *= 2) {
      const int v = __shfl_up_sync(kFullMask, inclusive, offset);
      if (lane >= offset) inclusive += v;
    }
    n = __shfl_sync(kFullMask, inclusive, kWarpSize - 1);
    if (n <= kWarpSize) {
      int position = inclusive - count;
      for (int j = lane; j < total && position < inclusive; j += kWarpSize) {
        const uint4 head = records[j][0];
        const unsigned long long key = record_key(head);
        if (key > threshold && key < top) {
          candidates[position][0] = head;
          candidates[position][1] = records[j][1];
          ++position;
        }
      }
    } else {
      const uint32_t holders = __ballot_sync(kFullMask, best_at >= 0);
      if (best_at >= 0) {
        const int position = __popc(holders & lanes_below);
        uint4 head = records[best_at][0];
        head.z = max(head.z, argmax_key_value(second_key));
        candidates[position][0] = head;
        candidates[position][1] = records[best_at][1];
      }
      n = __popc(holders);
    }
  }
  if (n == 0) return 1;
  __syncwarp();

  uint4 head = make_uint4(0u, 0u, 0u, 0u), tail = head;
  if (lane < n) {
    head = candidates[lane][0];
    tail = candidates[lane][1];
  }
  const unsigned long long key = record_key(head);
  const float dist = key_distance(key);
  float c[DIM];
  record_coords<DIM>(head, tail, c);
  bool ok = squared_distance<float>(c, first, DIM) >= dist;
  int rank = 0;
#pragma unroll 4
  for (int y = 0; y < n; ++y) {
    const uint4 other = candidates[y][0];
    float q[DIM];
    record_coords<DIM>(other, candidates[y][1], q);
    const bool above = record_key(other) > key;
    rank += above ? 1 : 0;
    ok = ok && (!above || (key > bound_key(other.z) && squared_distance<float>(c, q, DIM) >= dist));
  }
  const int first_failure =
      static_cast<int>(__reduce_min_sync(kFullMask, static_cast<uint32_t>(lane < n && !ok ? rank : kWarpSize)));
  const int taken = min(min(first_failure, limit - 1), n);
  if (lane < n && rank < taken) {
    picks[rank + 1][0] = head;
    picks[rank + 1][1] = tail;
  }
  return taken + 1;
}

// Grid layout, warp 0: the block's best kGridListLength of its `warps` unit records (key order),
// written by lane 0 to `out`; the last listed record's bound is raised to the best key left out,
// so that the list speaks for the whole block. Missing entries get key 0.
__device__ inline void publish_block_list(const uint4 (*records)[2], int warps, uint4* out) {
  const int lane = threadIdx.x % kWarpSize;
  unsigned long long key = lane < warps ? record_key(records[lane][0]) : 0ull;
  int listed[kGridListLength];
#pragma unroll
  for (int i = 0; i < kGridListLength; ++i) {
    const unsigned long long best = warp_max_key(key);
    listed[i] = best == 0 ? -1 : __ffs(__ballot_sync(kFullMask, key == best)) - 1;
    if (lane == listed[i]) key = 0;
  }
  const uint32_t rest = argmax_key_value(warp_max_key(key));
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kGridListLength; ++i) {
      uint4 head = make_uint4(0u, 0u, 0u, 0u), tail = head;
      if (listed[i] >= 0) {
        head = records[listed[i]][0];
        tail = records[listed[i]][1];
        const bool last = i + 1 == kGridListLength || listed[i + 1] < 0;
        if (last) head.z = max(head.z, rest);
      }
      out[2 * i] = head;
      out[2 * i + 1] = tail;
    }
  }
}

// A thread's slots after the round's last pick `q` reaching its warp (APPLY) or with none: the
// running distances take min(itself, distance to q) in the same pass that finds the thread's best
// two (two interleaved chains, even and odd slots, shorten the dependency; each keeps its lowest
// slot on ties, and the merge prefers the lower slot).
template <int PPT, int DIM, bool APPLY>
__device__ __forceinline__ void apply_and_scan(float (&min_dist)[PPT], const float (&x)[PPT][DIM],
                                               const float (&q)[DIM], float& best, float& second, int& best_slot) {
  constexpr float kPicked = fps_detail::picked_marker<float>();
  float best_even = kPicked, best_odd = kPicked, second_even = kPicked, second_odd = kPicked;
  int slot_even = -1, slot_odd = -1;
#pragma unroll
  for (int p = 0; p < PPT; p += 2) {
    float m0 = min_dist[p], m1 = min_dist[p + 1];
    if constexpr (APPLY) {
      m0 = fminf(m0, squared_distance<float>(x[p], q, DIM));
      m1 = fminf(m1, squared_distance<float>(x[p + 1], q, DIM));
      min_dist[p] = m0;
      min_dist[p + 1] = m1;
    }
    second_even = fmaxf(second_even, fminf(best_even, m0));
    second_odd = fmaxf(second_odd, fminf(best_odd, m1));
    if (m0 > best_even) {
      best_even = m0;
      slot_even = p;
    }
    if (m1 > best_odd) {
      best_odd = m1;
      slot_odd = p + 1;
    }
  }
  const bool odd_wins = best_odd > best_even || (best_odd == best_even && slot_odd < slot_even);
  best = odd_wins ? best_odd : best_even;
  best_slot = odd_wins ? slot_odd : slot_even;
  second = fmaxf(fmaxf(second_even, second_odd), fminf(best_even, best_odd));
}

// Opt-in measurement of where a round's cycles go (compile with -DPOINTOPS_FPS_PHASES, e.g.
// CMake's -DCMAKE_CUDA_FLAGS=-DPOINTOPS_FPS_PHASES or nvcc's NVCC_APPEND_FLAGS; without it none
// of this exists and the kernel is today's). One observer, warp 0 of block 0 (cloud 0's first
// block, the warp that selects), reads clock64() at the boundaries of each round's phases and adds
// each delta to its phase; its lane 0 prints one line when the loop ends (tools/fps_phases.py runs
// it; docs/performance.md, "Where a round's time goes"). The marks only read the clock, so the
// picks and distances stay bit for bit. Each mark costs about a dozen instructions (the read,
// lane 0's branch and atomic), counted in the phase it starts, and ptxas may schedule independent
// instructions across a read, so a boundary is exact only to some tens of cycles.
//
// The marks are consecutive, so a round's phases add up to its cycles. The rounds counted are the
// loop's passes that end at the closing barrier; the last pass (reading the final picks, then
// leaving) and the setup before the loop are outside them (setup is printed on its own).
//   update     from the end of the previous round's closing barrier (the loop's top) to the end
//              of the observer's own update: reading the round's picks, writing them out (block
//              0), the pruning test, the distance updates and scan, and its warp record;
//   exchange   from there to the start of select_picks: the records meeting, with the wait for
//              the slowest warp (block), the slowest warp of any peer (cluster) or the slowest
//              block (grid) inside; its parts per layout:
//                kBlock   the block barrier only;
//                kCluster push: expect_bytes, __syncwarp and the observer's own st.async pushes;
//                         wait: the mbarrier wait for the pushes of every warp of the
//                         cluster (its own block's too);
//                kGrid    block: the block barrier before publishing; publish: warp 0's list and
//                         its relaxed stores; gather: the poll of every block's words and the
//                         block barrier after it;
//   selection  select_picks and the store of the count;
//   barrier    the round's closing __syncthreads (the observer selects, so it usually arrives
//              last and this is the barrier's own latency).
#ifdef POINTOPS_FPS_PHASES
#define POINTOPS_FPS_PHASE(...) __VA_ARGS__
struct PhaseClock {
  enum Slot { kUpdate, kExchange0, kExchange1, kExchange2, kSelection, kBarrier, kSetup, kRounds, kSlots };
  // The sums live in shared memory, added by lane 0 with 32-bit shared atomics whose result is
  // unused (no wait on a load; 64-bit ones are a compare-and-swap loop on sm_90), so a phase may
  // sum to 2^32 cycles, about 2 s: the 16-point kernels sit at the 128-register limit and sums in
  // registers made them spill. Only the last clock read is kept in a register.
  bool on;  // warp-uniform: the observer's lanes all read the clock; only lane 0's atomic branches
  long long mark = 0;

  __device__ static uint32_t* sums() {
    __shared__ uint32_t phase_sums[kSlots];
    return phase_sums;
  }
  __device__ explicit PhaseClock(bool observer) : on(observer) {
    if (on) {
      if (threadIdx.x == 0) {
        for (int i = 0; i < kSlots; ++i) sums()[i] = 0;
      }
      mark = clock64();
    }
  }
  // Ends the phase in slot `slot` (kSetup: the kernel's start to the first round's top) here and
  // starts the next one; the closing barrier's also counts the round.
  __device__ void lap(int slot) {
    if (on) {
      const long long now = clock64();
      if (threadIdx.x == 0) {
        atomicAdd(&sums()[slot], static_cast<uint32_t>(now - mark));
        if (slot == kBarrier) atomicAdd(&sums()[kRounds], 1u);
      }
      mark = now;
    }
  }
  __device__ static double mean(int slot) {
    const uint32_t rounds = sums()[kRounds];
    return rounds > 0 ? double(sums()[slot]) / double(rounds) : 0.0;
  }

  // One line from the observer's lane 0; `picks` is cloud 0's count (the start included).
  template <Sync SYNC>
  __device__ void print(int dim, int ppt, long long batch, long long n, long long k, int parts, int threads,
                        int max_picks, bool spatial, bool overflow, long long picks) const {
    if (!on || threadIdx.x != 0) return;
    const uint32_t rounds = sums()[kRounds];
    const double exchange = mean(kExchange0) + mean(kExchange1) + mean(kExchange2);
    const double round = mean(kUpdate) + exchange + mean(kSelection) + mean(kBarrier);
    const char* layout = SYNC == Sync::kBlock ? "block" : SYNC == Sync::kCluster ? "cluster" : "grid";
    printf(
        "fps_phases layout=%s B=%lld N=%lld k=%lld D=%d ppt=%d parts=%d threads=%d max_picks=%d spatial=%d "
        "overflow=%d rounds=%u picks=%lld picks_per_round=%.2f setup=%u update=%.1f exchange=%.1f "
        "selection=%.1f barrier=%.1f round=%.1f",
        layout, batch, n, k, dim, ppt, parts, threads, max_picks, int(spatial), int(overflow), rounds, picks,
        rounds > 0 ? double(picks) / double(rounds) : 0.0, sums()[kSetup], mean(kUpdate), exchange, mean(kSelection),
        mean(kBarrier), round);
    // A second printf of the same thread follows the first in the output (no other thread prints).
    if constexpr (SYNC == Sync::kCluster) {
      printf(" exchange_push=%.1f exchange_wait=%.1f\n", mean(kExchange0), mean(kExchange1));
    } else if constexpr (SYNC == Sync::kGrid) {
      printf(" exchange_block=%.1f exchange_publish=%.1f exchange_gather=%.1f\n", mean(kExchange0), mean(kExchange1),
             mean(kExchange2));
    } else {
      printf("\n");
    }
  }
};
#else
#define POINTOPS_FPS_PHASE(...)
#endif

// The on-chip kernel. A cloud is split over `parts` blocks; a block keeps its points and their
// running min-distances in registers, PPT a thread (8 or 16), with a shared-memory copy of the
// coordinates and of each slot's index for reading out the winner.
//
// Rounds, not steps: each round applies the previous round's picks (up to `max_picks`) to the
// running distances, then every warp summarizes its points as one unit record (best key, its
// coordinates, and the bound of the warp's second-best point), the records of the cloud meet
// (kBlock: shared memory; kCluster: pushed into every peer's shared memory with st.async and
// counted by the peer's mbarrier; kGrid: each block's best two records as tagged words in global
// memory, polled by every block), and warp 0 of every block selects the same picks from them
// (select_picks). The picks and distances are those of the one-at-a-time algorithm, bit for bit.
//
// Exact pruning: with `spatial`, a block first orders its points along a Morton curve of cells,
// so each warp's points (consecutive in that order) sit in a small box. A pick q cannot lower
// any running distance of a warp when the box's squared distance to q (the same rounded
// formula, on the per-axis gaps, which bound every point's differences) is >= the warp's best
// running distance: the warp then skips q, and its record stays as it was. Within a thread,
// slots are kept in ascending index order, so strict comparisons keep the lowest index on ties.
//
// Points beyond a block's on-chip share (no `spatial` then) are streamed from memory with their
// min-distances in a float scratch array (4 bytes per point), updated every round.
template <int DIM, int PPT, Sync SYNC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    fps_onchip_kernel(const float* __restrict__ points, CloudLayout layout, const int64_t* __restrict__ start,
                      int64_t k, int parts, int max_picks, bool spatial, float* __restrict__ overflow_min_distance,
                      unsigned long long* __restrict__ grid_words, int64_t* __restrict__ out_index,
                      float* __restrict__ out_distance) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kPicked = fps_detail::picked_marker<float>();
  constexpr int kCells = SpatialCells<DIM>::kCells;
  // [DIM][onchip] coordinates, [onchip] slot indices, [kCellWords] cell counters, then (grid)
  // the gathered block lists; slot s = p * threads + tid.
  extern __shared__ __align__(16) float onchip_smem[];
  constexpr int kRecordSets = SYNC == Sync::kCluster ? 2 : 1;
  constexpr int kRecordSlots = SYNC == Sync::kCluster ? kMaxClusterParts * kMaxWarps : kMaxWarps;
  __shared__ uint4 records[kRecordSets][kRecordSlots][2];
  // Each warp's record as of its last change (block, grid: the records the selection reads).
  __shared__ uint4 cluster_own_records[SYNC == Sync::kCluster ? kMaxWarps : 1][2];
  // A round reads the picks of set round % 2 while warp 0 selects the next round's into the
  // other set: in the cluster layout nothing but the peers' pushes orders the two (no block
  // barrier between them), and two sets put the round's closing barrier between every read and
  // the next write of the same set.
  __shared__ uint4 round_picks[2][fps_plan::kMaxPicksPerRound][2];
  __shared__ int round_pick_count[2];
  __shared__ unsigned long long push_barrier[2];
  __shared__ float box_partial[kMaxWarps][2 * DIM];
  __shared__ float warp_box[kMaxWarps][2 * DIM];  // each warp's box of present points: lo, hi
  __shared__ uint32_t scan_sums[kWarpSize];
  __shared__ uint4 select_candidates[kWarpSize][2];
  __shared__ uint4 block_list[SYNC == Sync::kGrid ? kGridListLength : 1][2];

  // Cloud-local indices fit in 32 bits (checked on the host); only row offsets need 64.
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int threads = blockDim.x;
  const int warps = threads / kWarpSize;
  POINTOPS_FPS_PHASE(PhaseClock phases(blockIdx.x == 0 && warp == 0));
  const int32_t onchip = PPT * threads;
  const int64_t b = blockIdx.x / parts;
  const int part = blockIdx.x % parts;
  const int64_t begin = layout.begin(b);
  const int32_t n = static_cast<int32_t>(layout.length(b));
  const int32_t chunk = static_cast<int32_t>(cuda::ceil_div(n, parts));
  const int32_t lo = static_cast<int32_t>(min(int64_t{n}, int64_t{part} * chunk));
  const int32_t hi = static_cast<int32_t>(min(int64_t{n}, int64_t{lo} + chunk));
  const int32_t count = hi - lo;
  const bool has_overflow = count > onchip;
  const float* cloud = points + begin * DIM;
  float* overflow = overflow_min_distance == nullptr ? nullptr : overflow_min_distance + begin;
  float* coord_smem = onchip_smem;
  int32_t* slot_index = reinterpret_cast<int32_t*>(onchip_smem + DIM * onchip);
  uint32_t* cells = reinterpret_cast<uint32_t*>(slot_index + onchip);
  uint4(*gathered)[2] = reinterpret_cast<uint4(*)[2]>(cells + kCellWords);
  uint4(*own_records)[2] = SYNC == Sync::kCluster ? cluster_own_records : records[0];

  const int64_t first = start == nullptr ? 0 : start[b];
  const bool start_present = first >= 0 && first < n && all_finite(cloud + first * DIM, DIM);

  // Slot p of this thread holds block-local point local[p] (-1: none), ascending.
  float x[PPT][DIM];
  float min_dist[PPT];
  int32_t local[PPT];
  if (spatial) {
    // Points in load order i = tid + j * threads: the block's bounding box, then a counting
    // sort by cell (the order within a cell is whatever the atomics give: only speed depends
    // on it), then each thread sorts its PPT consecutive positions by index.
    for (int i = tid; i <= kCells; i += threads) cells[i] = 0;
    float box[2 * DIM];
#pragma unroll
    for (int d = 0; d < DIM; ++d) {
      box[d] = kInf;
      box[DIM + d] = -kInf;
    }
    bool present[PPT];
#pragma unroll
    for (int j = 0; j < PPT; ++j) {
      const int32_t i = tid + j * threads;
      present[j] = false;
      if (i < count) {
#pragma unroll
        for (int d = 0; d < DIM; ++d) x[j][d] = cloud[int64_t{lo + i} * DIM + d];
        present[j] = all_finite(x[j], DIM);
        if (present[j]) {
#pragma unroll
          for (int d = 0; d < DIM; ++d) {
            box[d] = fminf(box[d], x[j][d]);
            box[DIM + d] = fmaxf(box[DIM + d], x[j][d]);
          }
        }
      }
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int d = 0; d < DIM; ++d) {
        box[d] = fminf(box[d], __shfl_xor_sync(kFullMask, box[d], offset));
        box[DIM + d] = fmaxf(box[DIM + d], __shfl_xor_sync(kFullMask, box[DIM + d], offset));
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int d = 0; d < 2 * DIM; ++d) box_partial[warp][d] = box[d];
    }
    __syncthreads();
    for (int w = 0; w < warps; ++w) {
#pragma unroll
      for (int d = 0; d < DIM; ++d) {
        box[d] = fminf(box[d], box_partial[w][d]);
        box[DIM + d] = fmaxf(box[DIM + d], box_partial[w][DIM + d]);
      }
    }
    float scale[DIM];
#pragma unroll
    for (int d = 0; d < DIM; ++d) {
      const float extent = box[DIM + d] - box[d];
      scale[d] = extent > 0.f ? static_cast<float>(1 << SpatialCells<DIM>::kBits) / extent : 0.f;
    }
    uint32_t cell[PPT];
#pragma unroll
    for (int j = 0; j < PPT; ++j) {
      cell[j] = present[j] ? spatial_cell<DIM>(x[j], box, scale) : static_cast<uint32_t>(kCells);
      if (tid + j * threads < count) atomicAdd(&cells[cell[j]], 1u);
    }
    __syncthreads();
    block_exclusive_scan(cells, kCells + 1, scan_sums);
#pragma unroll
    for (int j = 0; j < PPT; ++j) {
      const int32_t i = tid + j * threads;
      if (i < count) slot_index[atomicAdd(&cells[cell[j]], 1u)] = i;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
      const int32_t position = tid * PPT + p;
      local[p] = position < count ? slot_index[position] : std::numeric_limits<int32_t>::max();
    }
    sort_ascending(local);
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
      if (local[p] >= count) local[p] = -1;
    }
    __syncthreads();  // every position is read before slot_index is rewritten by slot
  } else {
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
      const int32_t i = tid * PPT + p;
      local[p] = i < count ? i : -1;
    }
  }

  // The slots' coordinates, running distances (+inf present, -inf absent, the start picked)
  // and this warp's box of present points.
  float warp_lo[DIM], warp_hi[DIM];
#pragma unroll
  for (int d = 0; d < DIM; ++d) {
    warp_lo[d] = kInf;
    warp_hi[d] = -kInf;
  }
#pragma unroll
  for (int p = 0; p < PPT; ++p) {
    const int slot = p * threads + tid;
    slot_index[slot] = local[p];
    min_dist[p] = -kInf;
#pragma unroll
    for (int d = 0; d < DIM; ++d) x[p][d] = 0.f;
    if (local[p] >= 0) {
      const int32_t i = lo + local[p];
#pragma unroll
      for (int d = 0; d < DIM; ++d) {
        x[p][d] = cloud[int64_t{i} * DIM + d];
        coord_smem[d * onchip + slot] = x[p][d];
      }
      if (all_finite(x[p], DIM)) {
        min_dist[p] = start_present && i == first ? kPicked : kInf;
#pragma unroll
        for (int d = 0; d < DIM; ++d) {
          warp_lo[d] = fminf(warp_lo[d], x[p][d]);
          warp_hi[d] = fmaxf(warp_hi[d], x[p][d]);
        }
      }
    }
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int d = 0; d < DIM; ++d) {
      warp_lo[d] = fminf(warp_lo[d], __shfl_xor_sync(kFullMask, warp_lo[d], offset));
      warp_hi[d] = fmaxf(warp_hi[d], __shfl_xor_sync(kFullMask, warp_hi[d], offset));
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int d = 0; d < DIM; ++d) {
      warp_box[warp][d] = warp_lo[d];
      warp_box[warp][DIM + d] = warp_hi[d];
    }
  }
  for (int32_t i = lo + onchip + tid; i < hi; i += threads) {
    overflow[i] = !all_finite(cloud + int64_t{i} * DIM, DIM) ? -kInf : start_present && i == first ? kPicked : kInf;
  }
  // The first round's pick: the start when present; else none, and the first selection takes
  // the lowest-index present point (the argmax while every distance is +inf).
  if (tid == 0) {
    round_pick_count[0] = start_present ? 1 : 0;
    if (start_present) {
      const unsigned long long key = pack_key(kInf, static_cast<int32_t>(first));
      const float* q = cloud + first * DIM;
      const float c[3] = {q[0], q[1], DIM == 3 ? q[2] : 0.f};
      round_picks[0][0][0] =
          make_uint4(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key), 0u, float_bits(c[0]));
      round_picks[0][0][1] = make_uint4(float_bits(c[1]), float_bits(c[2]), 0u, 0u);
    }
  }
  // Cluster: lane r < parts pushes the warp's record to block r of the cluster.
  uint32_t peer_records = 0, peer_barrier = 0;
  if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tid == 0) {
      cuda::init_barrier(cuda::shared_address(&push_barrier[0]));
      cuda::init_barrier(cuda::shared_address(&push_barrier[1]));
      cuda::fence_barrier_init();
    }
    if (lane < parts) {
      peer_records = cuda::peer_address(cuda::shared_address(&records[0][0][0]), lane);
      peer_barrier = cuda::peer_address(cuda::shared_address(&push_barrier[0]), lane);
    }
    cg::this_cluster().sync();  // the barriers exist before any peer pushes
#endif
  } else {
    __syncthreads();
  }

  int64_t* index_row = out_index + b * k;
  float* distance_row = out_distance + b * k;
  const int64_t index_base = layout.index_base(b);

  // This thread's best and second-best running distance and where the best is (slot, or
  // overflow index), and its key and its warp's as last published.
  float best = kPicked, second = kPicked;
  int best_slot = -1;
  int32_t best_overflow = -1;
  unsigned long long mine = 0, warp_key = 0;

  int64_t s = 0;
  POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kSetup));
  for (int round = 0;; ++round) {
    // Lane i < picks holds pick i of the round.
    const uint4(*this_round)[2] = round_picks[round & 1];
    uint4(*next_round)[2] = round_picks[(round + 1) & 1];
    const int picks = round_pick_count[round & 1];
    unsigned long long pick_key = 0;
    float pick[DIM] = {};
    if (lane < picks) {
      const uint4 head = this_round[lane][0];
      pick_key = record_key(head);
      record_coords<DIM>(head, this_round[lane][1], pick);
    }
    if (part == 0 && warp == 0 && lane < picks) {
      index_row[s + lane] = key_index(pick_key) + index_base;
      distance_row[s + lane] = key_distance(pick_key);
    }
    s += picks;
    if (s >= k || (picks == 0 && round > 0)) break;

    // Apply the picks: the owner of a pick marks its point; the picks whose distance to the
    // warp's box is below the warp's best running distance (all lanes test theirs at once)
    // update every slot.
    const float reach = warp_key != 0 ? key_distance(warp_key) : -1.f;
    bool near = false;
    if (lane < picks) {
      float gap[DIM], zero[DIM];
#pragma unroll
      for (int d = 0; d < DIM; ++d) {
        const float below = subtract(warp_box[warp][d], pick[d]);
        const float above = subtract(pick[d], warp_box[warp][DIM + d]);
        gap[d] = fmaxf(fmaxf(below, above), 0.f);
        zero[d] = 0.f;
      }
      near = round == 0 || squared_distance<float>(gap, zero, DIM) < reach;
    }
    const uint32_t near_picks = __ballot_sync(kFullMask, near);
    const bool owned = __any_sync(kFullMask, lane < picks && warp_key != 0 && pick_key == warp_key);
    if (owned && mine == warp_key) {
      if (best_slot >= 0) {
#pragma unroll
        for (int p = 0; p < PPT; ++p) {
          if (p == best_slot) min_dist[p] = kPicked;
        }
      } else {
        overflow[best_overflow] = kPicked;
      }
    }
    const bool touched = round == 0 || has_overflow || owned || near_picks != 0;

    if (touched) {
      uint32_t rest = near_picks;
      float q[DIM] = {};
      for (; (rest & (rest - 1)) != 0; rest &= rest - 1) {
#pragma unroll
        for (int d = 0; d < DIM; ++d) q[d] = __shfl_sync(kFullMask, pick[d], __ffs(rest) - 1);
#pragma unroll
        for (int p = 0; p < PPT; ++p) {
          min_dist[p] = fminf(min_dist[p], squared_distance<float>(x[p], q, DIM));
        }
      }
      if (rest != 0) {
#pragma unroll
        for (int d = 0; d < DIM; ++d) q[d] = __shfl_sync(kFullMask, pick[d], __ffs(rest) - 1);
        apply_and_scan<PPT, DIM, true>(min_dist, x, q, best, second, best_slot);
      } else {
        apply_and_scan<PPT, DIM, false>(min_dist, x, q, best, second, best_slot);
      }
      best_overflow = -1;
      // Overflow points follow the slots in index order; every pick of the round applies.
      for (int32_t i = lo + onchip + tid; i < hi; i += threads) {
        float m = overflow[i];
        float p[DIM];
#pragma unroll
        for (int d = 0; d < DIM; ++d) p[d] = cloud[int64_t{i} * DIM + d];
        for (int j = 0; j < picks; ++j) {
          float q[DIM];
          record_coords<DIM>(this_round[j][0], this_round[j][1], q);
          m = fminf(m, squared_distance<float>(p, q, DIM));
        }
        overflow[i] = m;
        second = fmaxf(second, fminf(best, m));
        if (m > best) {
          best = m;
          best_slot = -1;
          best_overflow = i;
        }
      }
      const int32_t best_index = best_slot >= 0 ? lo + slot_index[best_slot * threads + tid] : best_overflow;
      mine = pack_key(best, best_index);
      // The warp's unit record: its best key, that point's coordinates, and the bound of every
      // other point of the warp (the winning lane's second best, the other lanes' best).
      warp_key = warp_max_key(mine);
      uint32_t bound = 0;
      float c[3] = {0.f, 0.f, 0.f};
      if (warp_key != 0) {
        const int owner = __ffs(__ballot_sync(kFullMask, mine == warp_key)) - 1;
        bound = __reduce_max_sync(kFullMask, distance_value(lane == owner ? second : best));
        if (lane == owner) {
#pragma unroll
          for (int d = 0; d < DIM; ++d) {
            c[d] = best_slot >= 0 ? coord_smem[d * onchip + best_slot * threads + tid]
                                  : cloud[int64_t{best_overflow} * DIM + d];
          }
        }
#pragma unroll
        for (int d = 0; d < DIM; ++d) c[d] = __shfl_sync(kFullMask, c[d], owner);
      }
      if (lane == 0) {
        own_records[warp][0] =
            make_uint4(static_cast<uint32_t>(warp_key >> 32), static_cast<uint32_t>(warp_key), bound, float_bits(c[0]));
        own_records[warp][1] = make_uint4(float_bits(c[1]), float_bits(c[2]), 0u, 0u);
      }
    }
    POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kUpdate));

    // The records meet; warp 0 selects the next round's picks.
    const int limit = static_cast<int>(min(int64_t{max_picks}, k - s));
    if constexpr (SYNC == Sync::kBlock) {
      __syncthreads();
      if (warp == 0) {
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kExchange0));
        const int chosen = select_picks<DIM>(records[0], warps, limit, next_round, select_candidates);
        if (lane == 0) round_pick_count[(round + 1) & 1] = chosen;
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kSelection));
      }
    } else if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      const int parity = round & 1;
      const uint32_t phase_parity = (round >> 1) & 1;
      const uint32_t barrier = cuda::shared_address(&push_barrier[parity]);
      if (tid == 0) cuda::expect_bytes(barrier, static_cast<uint32_t>(parts * warps) * 32u);
      __syncwarp();
      if (lane < parts) {
        const uint32_t slot = static_cast<uint32_t>((parity * kRecordSlots + part * warps + warp) * 2);
        const uint32_t peer = peer_barrier + 8u * parity;
        cuda::push_to_peer(peer_records + 16u * slot, own_records[warp][0], peer);
        cuda::push_to_peer(peer_records + 16u * (slot + 1), own_records[warp][1], peer);
      }
      if (warp == 0) {
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kExchange0));
        cuda::wait_phase(barrier, phase_parity);
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kExchange1));
        const int chosen = select_picks<DIM>(records[parity], parts * warps, limit, next_round, select_candidates);
        if (lane == 0) round_pick_count[(round + 1) & 1] = chosen;
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kSelection));
      }
#else
      __trap();  // the host never plans clusters below sm_90
#endif
    } else {
      // Every block's list as words of (payload << 32 | round + 1), written and polled with
      // relaxed 64-bit accesses: a word read with this round's number holds this round's
      // payload, so no fence or counter is needed. Two word sets alternate by parity: a block
      // writes a set again only after reading every block's next list, which each block writes
      // after reading this one.
      constexpr int kWords = kGridListLength * 6;  // key high, key low, bound, x, y, z
      const int listed = parts * kGridListLength;
      unsigned long long* set = grid_words + (b * 2 + (round & 1)) * int64_t{parts} * kWords;
      const uint32_t flag = static_cast<uint32_t>(round + 1);
      __syncthreads();
      POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kExchange0));
      if (warp == 0) {
        publish_block_list(records[0], warps, &block_list[0][0]);
        __syncwarp();
        if (lane < kWords) {
          const uint32_t* list = reinterpret_cast<const uint32_t*>(block_list);
          const uint32_t payload = list[(lane / 6) * 8 + lane % 6];
          cuda::store_relaxed(set + int64_t{part} * kWords + lane,
                              (static_cast<unsigned long long>(payload) << 32) | flag);
        }
      }
      POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kExchange1));
      // The whole block polls, a few words a thread, their loads in flight together.
      constexpr int kBatch = 4;
      uint32_t* out = reinterpret_cast<uint32_t*>(gathered);
      for (int first_word = tid; first_word < parts * kWords; first_word += threads * kBatch) {
        unsigned long long word[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          const int w = first_word + i * threads;
          word[i] = w < parts * kWords ? cuda::load_relaxed(set + w) : flag;
        }
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          const int w = first_word + i * threads;
          while (static_cast<uint32_t>(word[i]) != flag) word[i] = cuda::load_relaxed(set + w);
          if (w < parts * kWords) out[(w / 6) * 8 + w % 6] = static_cast<uint32_t>(word[i] >> 32);
        }
      }
      __syncthreads();
      if (warp == 0) {
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kExchange2));
        const int chosen = select_picks<DIM>(gathered, listed, limit, next_round, select_candidates);
        if (lane == 0) round_pick_count[(round + 1) & 1] = chosen;
        POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kSelection));
      }
    }
    __syncthreads();
    POINTOPS_FPS_PHASE(phases.lap(PhaseClock::kBarrier));
  }
  POINTOPS_FPS_PHASE(
      phases.print<SYNC>(DIM, PPT, gridDim.x / parts, n, k, parts, threads, max_picks, spatial, has_overflow, s));

  if (part == 0) {
    for (int64_t j = s + tid; j < k; j += threads) {
      index_row[j] = -1;
      distance_row[j] = -1.f;
    }
  }
  if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().sync();  // no block leaves while pushes between peers may be in flight
#endif
  }
}

// Any D, float32 or float64: one block per cloud, everything streamed from memory.
template <typename acc_t>
__global__ void __launch_bounds__(kStreamingThreads)
    fps_streaming_kernel(const acc_t* __restrict__ points, int dims, CloudLayout layout,
                         const int64_t* __restrict__ start, int64_t k, acc_t* __restrict__ min_distance,
                         int64_t* __restrict__ out_index, acc_t* __restrict__ out_distance) {
  using Cand = Candidate<acc_t>;
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  extern __shared__ __align__(16) unsigned char streaming_smem[];
  acc_t* q = reinterpret_cast<acc_t*>(streaming_smem);  // [dims], padded to 16-byte words
  __shared__ Cand warp_slots[2][kStreamingThreads / kWarpSize];

  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x;
  const int64_t begin = layout.begin(b);
  const int64_t n = layout.length(b);
  const acc_t* cloud = points + begin * dims;
  acc_t* mind = min_distance + begin;
  for (int64_t i = tid; i < n; i += blockDim.x) {
    mind[i] = all_finite(cloud + i * dims, dims) ? kInf : -kInf;
  }
  const int64_t first = start == nullptr ? 0 : start[b];
  const bool start_present = first >= 0 && first < n && all_finite(cloud + first * dims, dims);
  int64_t* index_row = out_index + b * k;
  acc_t* distance_row = out_distance + b * k;
  const int64_t index_base = layout.index_base(b);
  __syncthreads();

  bool have_q = false;
  int64_t s = 0;
  for (; s < k; ++s) {
    Cand win;
    if (s == 0 && start_present) {
      win.dist = kInf;
      win.index = static_cast<int32_t>(first);
    } else {
      acc_t best = fps_detail::picked_marker<acc_t>();
      int64_t best_i = -1;
      for (int64_t i = tid; i < n; i += blockDim.x) {
        acc_t m = mind[i];
        if (have_q) {
          const acc_t dist = fps_detail::squared_distance<acc_t>(cloud + i * dims, q, dims);
          if (dist < m) {
            m = dist;
            mind[i] = m;
          }
        }
        if (m > best) {
          best = m;
          best_i = i;
        }
      }
      Cand mine = no_candidate<acc_t>();
      if (best_i >= 0) {
        mine.dist = best;
        mine.index = static_cast<int32_t>(best_i);
      }
      win = block_reduce(mine, warp_slots[s & 1], no_candidate<acc_t>(), [](Cand c) { return warp_argmax(c); });
    }
    if (win.dist < 0) break;
    if (tid == 0) {
      index_row[s] = win.index + index_base;
      distance_row[s] = win.dist;
      mind[win.index] = fps_detail::picked_marker<acc_t>();
    }
    __syncthreads();  // everyone is done reading q and the min-distances of this step
    for (int d = tid; d < dims; d += blockDim.x) q[d] = cloud[int64_t{win.index} * dims + d];
    have_q = true;
    __syncthreads();
  }
  for (int64_t j = s + tid; j < k; j += blockDim.x) {
    index_row[j] = -1;
    distance_row[j] = -1;
  }
}

}  // namespace fps_detail
}  // namespace pointops
