// The CUDA fps kernels (rules in fps.h; fps_cuda.cu plans and launches them, the CPU twin is
// fps_cpu.cpp).
//
// Why not one block per cloud: that classic layout leaves most SMs idle when clouds are few,
// and re-reads every cloud from memory at every step. Here a cloud is split over `parts` blocks
// that keep their points and running min-distances in registers (8 or 16 per thread, with a
// shared-memory copy of the coordinates for reading out the winner). Each step's argmax is a
// 64-bit argmax key (distance bits + 1, index: max = farthest, then lowest index), reduced
// in a warp by two redux.sync and agreed on across the cloud's blocks by
//   kBlock   parts == 1: one shared-memory exchange between warps;
//   kCluster parts <= 16 on sm_90: every warp pushes its winner into every peer block's shared
//            memory (st.async, counted by the peer's mbarrier), and each warp reduces the pushed
//            winners once its block's barrier completes: no block or cluster barrier per step;
//   kGrid    a cooperative launch: block winners meet in one 64-bit atomicMax in global memory,
//            then a per-cloud arrival counter (release/acquire) closes the step.
//
// What bounds it: per step, the exchange (grid: ~1.5 us of L2 atomics and polling; cluster: one
// st.async round trip between SMs, ~0.83 us per step in all at B = 16, N = 16384 with 4 blocks
// per cloud, where a cluster barrier per step took 1.19 us) plus the per-SM work of ~10
// instructions per point at the low issue rate of a few warps with long dependency chains. The
// arithmetic itself is far from any limit (figures: docs/performance.md).
//
// Points beyond a block's on-chip share are streamed from memory with their min-distances in a
// float scratch array (4 bytes per point). D other than 2 or 3, and float64, take a simpler
// one-block-per-cloud streaming kernel with the same rules.
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
__device__ __forceinline__ unsigned long long pack_key(float dist, int32_t index) {
  if (!(dist >= 0.f)) return 0ull;
  return argmax_key(float_bits(dist) + 1u, static_cast<uint32_t>(index));
}

__device__ __forceinline__ float key_distance(unsigned long long key) {
  return bits_float(argmax_key_value(key) - 1u);
}

__device__ __forceinline__ int32_t key_index(unsigned long long key) {
  return static_cast<int32_t>(argmax_key_index(key));
}

// Per-cloud state of the grid layout: three key slots used round-robin, and the arrival count.
constexpr int kGridKeySlots = 3;
constexpr int kGridStateWords = kGridKeySlots + 1;

// The cluster exchange: every warp pushes its winner into a slot of every peer's shared memory
// with st.async, whose bytes count down the peer's transaction barrier (mbarrier); a block then
// waits on its own barrier alone, with no cluster-wide barrier per step. Two slot sets and two
// barriers alternate by step parity: a peer can run at most one step ahead, since it cannot
// finish a step before this block has pushed it.
constexpr int kMaxPushSlots = kMaxClusterParts * kMaxWarps;

// A block's winner and its coordinates, as the grid layout broadcasts them to the block.
template <int DIM>
struct WinnerSlot {
  unsigned long long key;
  float coord[DIM];
};

// One block per SM as the minimum: without it ptxas squeezed PPT = 8 into 64 registers and spilled.
template <int DIM, int PPT, Sync SYNC>
__global__ void __launch_bounds__(kMaxThreads, 1)
    fps_onchip_kernel(const float* __restrict__ points, CloudLayout layout,
                      const int64_t* __restrict__ start, int64_t k, int parts,
                      float* __restrict__ overflow_min_distance,
                      unsigned long long* __restrict__ grid_state, int64_t* __restrict__ out_index,
                      float* __restrict__ out_distance) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  extern __shared__ float onchip_coords[];  // [DIM][PPT * blockDim.x]
  __shared__ unsigned long long warp_keys[2][kMaxWarps];
  __shared__ WinnerSlot<DIM> winner_slots[2];  // grid: the block's broadcast
  // Cluster: the warps' pushed winners, [step parity][part * warps + warp], as {key high, key
  // low, x, y} plus z (DIM 3); the arrays shrink to one entry in the other layouts.
  constexpr int kPushSlots = SYNC == Sync::kCluster ? kMaxPushSlots : 1;
  __shared__ uint4 push_head[2][kPushSlots];
  __shared__ float push_tail[2][DIM == 3 ? kPushSlots : 1];
  __shared__ unsigned long long push_barrier[2];

  // Cloud-local indices fit in 32 bits (checked on the host); only row offsets need 64.
  const int tid = threadIdx.x;
  const int threads = blockDim.x;
  const int32_t onchip = PPT * threads;
  const int64_t b = blockIdx.x / parts;
  const int part = blockIdx.x % parts;
  const int64_t begin = layout.begin(b);
  const int32_t n = static_cast<int32_t>(layout.length(b));
  const int32_t chunk = static_cast<int32_t>(cuda::ceil_div(n, parts));
  const int32_t lo = static_cast<int32_t>(min(int64_t{n}, int64_t{part} * chunk));
  const int32_t hi = static_cast<int32_t>(min(int64_t{n}, int64_t{lo} + chunk));
  const float* cloud = points + begin * DIM;
  float* overflow = overflow_min_distance == nullptr ? nullptr : overflow_min_distance + begin;

  // Point p of this thread is lo + p * threads + tid, so ascending p is ascending index.
  float x[PPT][DIM];
  float min_dist[PPT];
#pragma unroll
  for (int p = 0; p < PPT; ++p) {
    const int32_t i = lo + p * threads + tid;
    min_dist[p] = -kInf;
#pragma unroll
    for (int d = 0; d < DIM; ++d) x[p][d] = 0.f;
    if (i < hi) {
#pragma unroll
      for (int d = 0; d < DIM; ++d) {
        x[p][d] = cloud[int64_t{i} * DIM + d];
        onchip_coords[d * onchip + p * threads + tid] = x[p][d];
      }
      min_dist[p] = all_finite(x[p], DIM) ? kInf : -kInf;
    }
  }
  for (int32_t i = lo + onchip + tid; i < hi; i += threads) {
    overflow[i] = all_finite(cloud + int64_t{i} * DIM, DIM) ? kInf : -kInf;
  }
  const int lane = tid % kWarpSize;
  const int warps = threads / kWarpSize;
  // Cluster: lane r < parts pushes the warp's winner to block r of the cluster.
  uint32_t peer_head = 0, peer_tail = 0, peer_barrier = 0;
  uint32_t push_bytes = 0;
  if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tid == 0) {
      cuda::init_barrier(cuda::shared_address(&push_barrier[0]));
      cuda::init_barrier(cuda::shared_address(&push_barrier[1]));
      cuda::fence_barrier_init();
    }
    if (lane < parts) {
      peer_head = cuda::peer_address(cuda::shared_address(&push_head[0][0]), lane);
      peer_tail = cuda::peer_address(cuda::shared_address(&push_tail[0][0]), lane);
      peer_barrier = cuda::peer_address(cuda::shared_address(&push_barrier[0]), lane);
    }
    push_bytes = static_cast<uint32_t>(parts * warps) * (DIM == 3 ? 20u : 16u);
    cg::this_cluster().sync();  // the barriers exist before any peer pushes
#endif
  } else {
    __syncthreads();
  }

  int64_t* index_row = out_index + b * k;
  float* distance_row = out_distance + b * k;
  const int64_t index_base = layout.index_base(b);

  // This thread's best point of the current step (slot -1: none on chip) and its packed key:
  // the thread whose key wins owns the pick.
  float best = fps_detail::picked_marker<float>();
  int best_slot = -1;
  int32_t best_overflow = -1;
  unsigned long long mine = 0;
  int round = 0;

  // Agrees on the step's winner across the cloud's blocks; returns its key, sets q.
  // The winner's coordinates: from shared memory when this block holds it on chip.
  auto coords_of = [&](int32_t index, float* out) {
    const int32_t local = index - lo;
    const bool in_smem = local >= 0 && local < min(onchip, hi - lo);
#pragma unroll
    for (int d = 0; d < DIM; ++d) {
      out[d] = in_smem ? onchip_coords[d * onchip + local] : cloud[int64_t{index} * DIM + d];
    }
  };
  auto agree = [&](float q[DIM]) -> unsigned long long {
    mine = pack_key(best, best_slot >= 0 ? lo + best_slot * threads + tid : best_overflow);
    const int parity = round & 1;
    const uint32_t phase_parity = (round >> 1) & 1;
    ++round;
    if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      const uint32_t barrier = cuda::shared_address(&push_barrier[parity]);
      if (tid == 0) cuda::expect_bytes(barrier, push_bytes);
      const unsigned long long warp_key = warp_max_key(mine);
      float c[DIM] = {};
      if (warp_key != 0) coords_of(key_index(warp_key), c);
      if (lane < parts) {
        const uint32_t slot = static_cast<uint32_t>(parity * kPushSlots + part * warps + tid / kWarpSize);
        const uint32_t peer = peer_barrier + 8u * parity;
        cuda::push_to_peer(peer_head + 16u * slot,
                           make_uint4(static_cast<uint32_t>(warp_key >> 32),
                                      static_cast<uint32_t>(warp_key), float_bits(c[0]),
                                      float_bits(c[1])),
                           peer);
        if constexpr (DIM == 3) cuda::push_to_peer(peer_tail + 4u * slot, float_bits(c[2]), peer);
      }
      cuda::wait_phase(barrier, phase_parity);
      unsigned long long lane_key = 0;
      float lane_coords[DIM] = {};
      for (int j = lane; j < parts * warps; j += kWarpSize) {
        const uint4 head = push_head[parity][j];
        const unsigned long long key = (static_cast<unsigned long long>(head.x) << 32) | head.y;
        if (key > lane_key) {
          lane_key = key;
          lane_coords[0] = bits_float(head.z);
          lane_coords[1] = bits_float(head.w);
          if constexpr (DIM == 3) lane_coords[2] = push_tail[parity][j];
        }
      }
      const unsigned long long key = warp_max_key(lane_key);
      const int from = __ffs(__ballot_sync(kFullMask, lane_key == key)) - 1;
#pragma unroll
      for (int d = 0; d < DIM; ++d) q[d] = __shfl_sync(kFullMask, lane_coords[d], from);
      return key;
#else
      __trap();  // the host never plans clusters below sm_90
      return 0ull;
#endif
    }
    unsigned long long key = block_reduce(mine, warp_keys[parity], 0ull,
                                          [](unsigned long long v) { return warp_max_key(v); });
    if constexpr (SYNC == Sync::kBlock) {
      if (key != 0) coords_of(key_index(key), q);
    } else if constexpr (SYNC == Sync::kGrid) {
      if (tid == 0) {
        unsigned long long* state = grid_state + b * kGridStateWords;
        unsigned long long* key_slot = state + (round - 1) % kGridKeySlots;
        if (key != 0) atomicMax(key_slot, key);
        cuda::add_release(state + kGridKeySlots, 1);
        const unsigned long long arrived = static_cast<unsigned long long>(round) * parts;
        while (cuda::load_acquire(state + kGridKeySlots) < arrived) {
        }
        key = cuda::load_acquire(key_slot);
        // Every block has now read the slot of the previous round, so it can be cleared for
        // the round after next: nobody touches it before arriving at the next round, which
        // follows this store.
        if (part == 0) atomicExch(state + (round + 1) % kGridKeySlots, 0ull);
        winner_slots[parity].key = key;
        if (key != 0) coords_of(key_index(key), winner_slots[parity].coord);
      }
      __syncthreads();
      key = winner_slots[parity].key;
#pragma unroll
      for (int d = 0; d < DIM; ++d) q[d] = winner_slots[parity].coord[d];
    }
    return key;
  };

  // The first pick: the start point when present, else the lowest-index present point (the
  // argmax while every present distance is +inf).
  float q[DIM];
  unsigned long long win;
  const int64_t first = start == nullptr ? 0 : start[b];
  if (first >= 0 && first < n && all_finite(cloud + first * DIM, DIM)) {
    win = pack_key(kInf, static_cast<int32_t>(first));
#pragma unroll
    for (int d = 0; d < DIM; ++d) q[d] = cloud[first * DIM + d];
    // No reduction chose the start, so its owner is found from the index.
    const int32_t local = static_cast<int32_t>(first) - lo;
    if (local >= 0 && local < hi - lo) {
      if (local >= onchip) {
        best_overflow = static_cast<int32_t>(first);
        mine = win;
      } else if (local % threads == tid) {
        best_slot = local / threads;
        mine = win;
      }
    }
  } else {
#pragma unroll
    for (int p = 0; p < PPT; ++p) {
      if (min_dist[p] > best) {
        best = min_dist[p];
        best_slot = p;
      }
    }
    for (int32_t i = lo + onchip + tid; i < hi && best_slot < 0; i += threads) {
      if (overflow[i] > best) {
        best = overflow[i];
        best_overflow = i;
      }
    }
    win = agree(q);
  }

  int64_t s = 0;
  for (; s < k && win != 0; ++s) {
    if (part == 0 && tid == 0) {
      index_row[s] = key_index(win) + index_base;
      distance_row[s] = key_distance(win);
    }
    // The owner marks the pick so that it is never picked again.
    if (win == mine) {
      if (best_slot >= 0) {
#pragma unroll
        for (int p = 0; p < PPT; ++p) {
          if (p == best_slot) min_dist[p] = fps_detail::picked_marker<float>();
        }
      } else {
        overflow[best_overflow] = fps_detail::picked_marker<float>();
      }
    }
    if (s + 1 == k) {
      ++s;
      break;
    }

    // Update the running min-distances with the last pick and find this thread's best.
    // Two interleaved chains (even / odd slots) shorten the dependency; each keeps its lowest
    // slot on ties, and the merge prefers the lower slot.
    float best_even = fps_detail::picked_marker<float>(), best_odd = best_even;
    int slot_even = -1, slot_odd = -1;
#pragma unroll
    for (int p = 0; p < PPT; p += 2) {
      const float m0 = fminf(min_dist[p], fps_detail::squared_distance<float>(x[p], q, DIM));
      const float m1 = fminf(min_dist[p + 1], fps_detail::squared_distance<float>(x[p + 1], q, DIM));
      min_dist[p] = m0;
      min_dist[p + 1] = m1;
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
    best_overflow = -1;
    for (int32_t i = lo + onchip + tid; i < hi; i += threads) {
      const float m = fminf(overflow[i], fps_detail::squared_distance<float>(cloud + int64_t{i} * DIM, q, DIM));
      overflow[i] = m;
      if (m > best) {
        best = m;
        best_slot = -1;
        best_overflow = i;
      }
    }
    win = agree(q);
  }

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
                         const int64_t* __restrict__ start, int64_t k,
                         acc_t* __restrict__ min_distance, int64_t* __restrict__ out_index,
                         acc_t* __restrict__ out_distance) {
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
      win = block_reduce(mine, warp_slots[s & 1], no_candidate<acc_t>(),
                         [](Cand c) { return warp_argmax(c); });
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
