// Farthest point sampling on CUDA (rules in fps.h; the CPU twin is fps_cpu.cpp).
//
// Why not one block per cloud: that classic layout leaves most SMs idle when clouds are few,
// and re-reads every cloud from memory at every step. Here a cloud is split over `parts` blocks
// that keep their points and running min-distances on chip (registers, with a shared-memory
// copy of the coordinates for reading out the winner), and each step's argmax is agreed on by
//   kBlock   parts == 1: warp shuffles, then one shared-memory exchange;
//   kCluster parts <= 16 on sm_90: the block winners meet in distributed shared memory after one
//            cluster barrier;
//   kGrid    parts > 16: a cooperative launch; block winners meet in one 64-bit atomicMax of
//            (distance bits << 32 | ~index), followed by a per-cloud arrival counter.
// plan_fast() picks the layout from (B, N, D, device); POINTOPS_FPS_PLAN overrides it for the
// benchmark ("block", "cluster:P", "grid:P"). What bounds each layout: the per-step barrier
// latency (grid: ~4 L2 round trips; cluster: the cluster barrier plus one DSMEM read) once the
// per-SM work (points/SM x ~10 instructions / 128 lanes) is small.
//
// Points that do not fit on chip (more than parts * 8192 per cloud) are streamed from memory
// with their min-distances in a float scratch array (4 bytes per point). D other than 2 or 3,
// and float64, take a simpler one-block-per-cloud streaming kernel with the same rules.
#include "sampling/fps.h"

#include <ATen/Dispatch.h>
#include <cooperative_groups.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

namespace cg = cooperative_groups;
using cuda::kFullMask;
using cuda::kWarpSize;
using fps_detail::CloudLayout;

enum class Sync { kBlock, kCluster, kGrid };

constexpr int kPointsPerThread = 16;
constexpr int kMaxThreads = 512;
constexpr int kMaxWarps = kMaxThreads / kWarpSize;
constexpr int kMaxClusterParts = 16;
constexpr int64_t kBlockCapacity = int64_t{kMaxThreads} * kPointsPerThread;
// Below this many points per block the per-step barrier dominates; more blocks do not help.
constexpr int64_t kMinPointsPerBlock = 1024;
constexpr int kStreamingThreads = 256;

// A step's best point as seen by one thread, warp, block or cluster. `dist < 0` means none.
template <typename acc_t, int DIM>
struct Candidate {
  acc_t dist;
  int32_t index;  // within the cloud
  acc_t coord[DIM > 0 ? DIM : 1];
};

template <typename acc_t, int DIM>
__device__ __forceinline__ Candidate<acc_t, DIM> no_candidate() {
  Candidate<acc_t, DIM> c;
  c.dist = fps_detail::picked_marker<acc_t>();
  c.index = std::numeric_limits<int32_t>::max();
  return c;
}

template <typename acc_t, int DIM>
__device__ __forceinline__ bool beats(const Candidate<acc_t, DIM>& a,
                                      const Candidate<acc_t, DIM>& b) {
  return a.dist > b.dist || (a.dist == b.dist && a.index < b.index);
}

// Butterfly argmax: every lane ends with the same winner (largest distance, lowest index).
template <typename acc_t, int DIM>
__device__ __forceinline__ Candidate<acc_t, DIM> warp_argmax(Candidate<acc_t, DIM> c) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    Candidate<acc_t, DIM> other;
    other.dist = __shfl_xor_sync(kFullMask, c.dist, offset);
    other.index = __shfl_xor_sync(kFullMask, c.index, offset);
#pragma unroll
    for (int d = 0; d < DIM; ++d) other.coord[d] = __shfl_xor_sync(kFullMask, c.coord[d], offset);
    if (beats(other, c)) c = other;
  }
  return c;
}

// Warp winners -> block winner, known to every thread. `slots` is double-buffered by the caller
// (step parity) so that one barrier per step suffices.
template <typename acc_t, int DIM>
__device__ __forceinline__ Candidate<acc_t, DIM> block_argmax(Candidate<acc_t, DIM> c,
                                                              Candidate<acc_t, DIM>* slots) {
  c = warp_argmax(c);
  const int warps = blockDim.x / kWarpSize;
  if (warps == 1) return c;
  const int lane = threadIdx.x % kWarpSize;
  if (lane == 0) slots[threadIdx.x / kWarpSize] = c;
  __syncthreads();
  return warp_argmax(lane < warps ? slots[lane] : no_candidate<acc_t, DIM>());
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

// (distance, index) as one 64-bit key whose unsigned max is the step's winner. Only distances
// >= 0 are packed, whose float bits already order like the values; 0 means "no candidate".
__device__ __forceinline__ unsigned long long pack_key(float dist, int32_t index) {
  const unsigned long long bits = __float_as_uint(dist) | 0x80000000u;
  return (bits << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_release(unsigned long long* p, unsigned long long v) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Per-cloud state of the grid layout: three key slots used round-robin, and the arrival count.
constexpr int kGridKeySlots = 3;
constexpr int kGridStateWords = kGridKeySlots + 1;

template <int DIM, Sync SYNC>
__global__ void __launch_bounds__(kMaxThreads)
    fps_onchip_kernel(const float* __restrict__ points, CloudLayout layout,
                      const int64_t* __restrict__ start, int64_t k, int parts,
                      float* __restrict__ overflow_min_distance,
                      unsigned long long* __restrict__ grid_state, int64_t* __restrict__ out_index,
                      float* __restrict__ out_distance) {
  using Cand = Candidate<float, DIM>;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  extern __shared__ float onchip_coords[];  // [DIM][kPointsPerThread * blockDim.x]
  __shared__ Cand warp_slots[2][kMaxWarps];
  __shared__ Cand cluster_slots[2];
  __shared__ Cand grid_winner[2];

  // Cloud-local indices fit in 32 bits (checked on the host); only row offsets need 64.
  const int tid = threadIdx.x;
  const int threads = blockDim.x;
  const int32_t onchip = kPointsPerThread * threads;
  const int64_t b = blockIdx.x / parts;
  const int part = blockIdx.x % parts;
  const int64_t begin = layout.begin(b);
  const int32_t n = static_cast<int32_t>(layout.length(b));
  const int32_t chunk = static_cast<int32_t>(cuda::ceil_div(n, parts));
  const int32_t lo = static_cast<int32_t>(min(int64_t{n}, int64_t{part} * chunk));
  const int32_t hi = static_cast<int32_t>(min(int64_t{n}, int64_t{lo} + chunk));
  const float* cloud = points + begin * DIM;
  float* overflow = overflow_min_distance == nullptr ? nullptr : overflow_min_distance + begin;

  float x[kPointsPerThread][DIM];
  float min_dist[kPointsPerThread];
#pragma unroll
  for (int p = 0; p < kPointsPerThread; ++p) {
    const int32_t i = lo + p * threads + tid;
    min_dist[p] = -kInf;
    if (i < hi) {
#pragma unroll
      for (int d = 0; d < DIM; ++d) {
        x[p][d] = cloud[i * DIM + d];
        onchip_coords[d * onchip + p * threads + tid] = x[p][d];
      }
      min_dist[p] = all_finite(x[p], DIM) ? kInf : -kInf;
    } else {
#pragma unroll
      for (int d = 0; d < DIM; ++d) x[p][d] = 0.f;
    }
  }
  for (int32_t i = lo + onchip + tid; i < hi; i += threads) {
    overflow[i] = all_finite(cloud + int64_t{i} * DIM, DIM) ? kInf : -kInf;
  }
  __syncthreads();

  const int64_t first = start == nullptr ? 0 : start[b];
  const bool start_present = first >= 0 && first < n && all_finite(cloud + first * DIM, DIM);
  int64_t* index_row = out_index + b * k;
  float* distance_row = out_distance + b * k;
  const int64_t index_base = layout.index_base(b);

  float q[DIM];
  bool have_q = false;
  int round = 0;  // argmax rounds done so far (the start pick skips one)
  int64_t s = 0;
  for (; s < k; ++s) {
    Cand win;
    if (s == 0 && start_present) {
      win.dist = kInf;
      win.index = static_cast<int32_t>(first);
#pragma unroll
      for (int d = 0; d < DIM; ++d) win.coord[d] = cloud[first * DIM + d];
    } else {
      // Update the running min-distances with the last pick and find this thread's best.
      // Ascending order and a strict comparison keep the lowest index among equals.
      float best = fps_detail::picked_marker<float>();
      int best_slot = -1;
#pragma unroll
      for (int p = 0; p < kPointsPerThread; ++p) {
        float m = min_dist[p];
        if (have_q) {
          const float dist = fps_detail::squared_distance<float>(x[p], q, DIM);
          m = dist < m ? dist : m;
          min_dist[p] = m;
        }
        if (m > best) {
          best = m;
          best_slot = p;
        }
      }
      int32_t best_i = best_slot < 0 ? -1 : lo + best_slot * threads + tid;
      for (int32_t i = lo + onchip + tid; i < hi; i += threads) {
        float m = overflow[i];
        if (have_q) {
          const float dist = fps_detail::squared_distance<float>(cloud + int64_t{i} * DIM, q, DIM);
          if (dist < m) {
            m = dist;
            overflow[i] = m;
          }
        }
        if (m > best) {
          best = m;
          best_i = i;
        }
      }
      Cand mine = no_candidate<float, DIM>();
      if (best_i >= 0) {
        mine.dist = best;
        mine.index = best_i;
        const bool in_smem = best_i - lo < onchip;
#pragma unroll
        for (int d = 0; d < DIM; ++d) {
          mine.coord[d] = in_smem ? onchip_coords[d * onchip + (best_i - lo)]
                                  : cloud[int64_t{best_i} * DIM + d];
        }
      }
      const int parity = round & 1;
      win = block_argmax(mine, warp_slots[parity]);

      if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        cg::cluster_group cluster = cg::this_cluster();
        if (tid == 0) cluster_slots[parity] = win;
        cluster.sync();
        const int lane = tid % kWarpSize;
        win = warp_argmax(lane < parts ? *cluster.map_shared_rank(&cluster_slots[parity], lane)
                                       : no_candidate<float, DIM>());
#else
        __trap();  // the host never plans clusters below sm_90
#endif
      } else if constexpr (SYNC == Sync::kGrid) {
        if (tid == 0) {
          unsigned long long* state = grid_state + b * kGridStateWords;
          unsigned long long* key_slot = state + round % kGridKeySlots;
          if (win.dist >= 0) atomicMax(key_slot, pack_key(win.dist, win.index));
          add_release(state + kGridKeySlots, 1);
          const unsigned long long arrived = static_cast<unsigned long long>(round + 1) * parts;
          while (load_acquire(state + kGridKeySlots) < arrived) {
          }
          const unsigned long long key = load_acquire(key_slot);
          // Every block has now read the slot of round-1, so it can be cleared for round+2:
          // nobody touches it before arriving at round+1, which follows this store.
          if (part == 0) atomicExch(state + (round + 2) % kGridKeySlots, 0ull);
          Cand g = no_candidate<float, DIM>();
          if (key != 0) {
            g.dist = __uint_as_float(static_cast<uint32_t>(key >> 32) & 0x7fffffffu);
            g.index = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
#pragma unroll
            for (int d = 0; d < DIM; ++d) g.coord[d] = cloud[int64_t{g.index} * DIM + d];
          }
          grid_winner[parity] = g;
        }
        __syncthreads();
        win = grid_winner[parity];
      }
      ++round;
    }

    if (win.dist < 0) break;  // every block of the cloud sees the same winner and stops together
    if (part == 0 && tid == 0) {
      index_row[s] = win.index + index_base;
      distance_row[s] = win.dist;
    }
    // The owner marks the pick so that it is never picked again.
    const int32_t local = win.index - lo;
    if (local >= 0 && local < hi - lo) {
      if (local < onchip) {
        if (tid == local % threads) {
          const int slot = local / threads;
#pragma unroll
          for (int p = 0; p < kPointsPerThread; ++p) {
            if (p == slot) min_dist[p] = fps_detail::picked_marker<float>();
          }
        }
      } else if (tid == (local - onchip) % threads) {
        overflow[win.index] = fps_detail::picked_marker<float>();
      }
    }
#pragma unroll
    for (int d = 0; d < DIM; ++d) q[d] = win.coord[d];
    have_q = true;
  }

  if (part == 0) {
    for (int64_t j = s + tid; j < k; j += threads) {
      index_row[j] = -1;
      distance_row[j] = -1.f;
    }
  }
  if constexpr (SYNC == Sync::kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().sync();  // peers may still read this block's slots
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
  using Cand = Candidate<acc_t, 0>;
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  extern __shared__ unsigned char streaming_smem[];
  acc_t* q = reinterpret_cast<acc_t*>(streaming_smem);  // [dims]
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
      Cand mine = no_candidate<acc_t, 0>();
      if (best_i >= 0) {
        mine.dist = best;
        mine.index = static_cast<int32_t>(best_i);
      }
      win = block_argmax(mine, warp_slots[s & 1]);
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

struct Plan {
  Sync sync;
  int parts;    // blocks per cloud
  int threads;  // per block
};

// Threads so that a block's share of the cloud sits in registers (kPointsPerThread each).
int threads_for(int64_t points_per_block) {
  const int64_t t = cuda::round_up(cuda::ceil_div(points_per_block, kPointsPerThread), kWarpSize);
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(t, kWarpSize), kMaxThreads));
}

template <int DIM>
size_t onchip_smem_bytes(int threads) {
  return sizeof(float) * DIM * kPointsPerThread * threads;
}

// How many clusters of `parts` blocks can be resident at once (0: this cluster shape can't run).
template <int DIM>
int active_clusters(int parts, int threads) {
  auto kernel = fps_onchip_kernel<DIM, Sync::kCluster>;
  const size_t smem = onchip_smem_bytes<DIM>(threads);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(parts);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = parts;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // an unsupported shape is an answer here, not an error
    return 0;
  }
  return clusters;
}

template <int DIM>
int grid_blocks_per_sm(int threads) {
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, fps_onchip_kernel<DIM, Sync::kGrid>, threads,
      onchip_smem_bytes<DIM>(threads)));
  return blocks;
}

// POINTOPS_FPS_PLAN = "block" | "cluster:P" | "grid:P" forces a layout (benchmarks, tests).
bool plan_override(Plan* plan) {
  const char* env = std::getenv("POINTOPS_FPS_PLAN");
  if (env == nullptr || *env == '\0') return false;
  const std::string text(env);
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const int parts = colon == std::string::npos ? 1 : std::atoi(text.c_str() + colon + 1);
  TORCH_CHECK(parts >= 1, "POINTOPS_FPS_PLAN: parts must be >= 1, got '", text, "'");
  if (kind == "block") {
    *plan = {Sync::kBlock, 1, 0};
  } else if (kind == "cluster") {
    TORCH_CHECK(parts <= kMaxClusterParts, "POINTOPS_FPS_PLAN: at most ", kMaxClusterParts,
                " blocks per cluster, got '", text, "'");
    *plan = {parts == 1 ? Sync::kBlock : Sync::kCluster, parts, 0};
  } else if (kind == "grid") {
    *plan = {Sync::kGrid, parts, 0};
  } else {
    TORCH_CHECK(false, "POINTOPS_FPS_PLAN must be block, cluster:P or grid:P, got '", text, "'");
  }
  return true;
}

// Picks the layout for clouds of about `n` points.
template <int DIM>
Plan plan_fast(int64_t batch, int64_t n) {
  const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();
  const int sms = props->multiProcessorCount;
  const bool clusters = props->major >= 9;
  Plan plan;
  if (!plan_override(&plan)) {
    const int64_t spread = std::max<int64_t>(1, sms / batch);  // one block per SM
    const int64_t wanted = std::max<int64_t>(1, cuda::ceil_div(n, kMinPointsPerBlock));
    int64_t parts = std::min({spread, wanted, int64_t{clusters ? kMaxClusterParts : 1}});
    if (cuda::ceil_div(n, parts) <= kBlockCapacity || spread <= parts) {
      plan = {parts == 1 ? Sync::kBlock : Sync::kCluster, static_cast<int>(parts), 0};
    } else {
      plan = {Sync::kGrid, static_cast<int>(std::min(spread, wanted)), 0};
    }
  }
  plan.threads = threads_for(cuda::ceil_div(n, plan.parts));
  if (plan.sync == Sync::kCluster) {
    TORCH_CHECK(clusters, "fps: thread-block clusters need compute capability 9.0, this device has ",
                props->major, ".", props->minor);
    while (plan.parts > 1 && active_clusters<DIM>(plan.parts, plan.threads) < 1) {
      plan.parts /= 2;
      plan.threads = threads_for(cuda::ceil_div(n, plan.parts));
    }
    if (plan.parts == 1) plan.sync = Sync::kBlock;
  } else if (plan.sync == Sync::kGrid) {
    // A cooperative launch needs every block resident at once.
    const int64_t resident = int64_t{sms} * grid_blocks_per_sm<DIM>(plan.threads);
    plan.parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(plan.parts, resident / batch)));
    TORCH_CHECK(plan.parts * batch <= resident, "fps: ", batch,
                " clouds do not fit the grid layout on this device (", resident, " resident blocks)");
  }
  return plan;
}

template <int DIM, Sync SYNC>
void launch_onchip(const Plan& plan, const at::Tensor& points, const CloudLayout& layout,
                   int64_t batch, const int64_t* start, int64_t k, float* overflow,
                   unsigned long long* grid_state, at::Tensor& indices, at::Tensor& distances) {
  auto kernel = fps_onchip_kernel<DIM, SYNC>;
  const size_t smem = onchip_smem_bytes<DIM>(plan.threads);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(batch * plan.parts));
  config.blockDim = dim3(plan.threads);
  config.dynamicSmemBytes = smem;
  config.stream = at::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attribute;
  config.numAttrs = 0;
  if constexpr (SYNC == Sync::kCluster) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = plan.parts;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  } else if constexpr (SYNC == Sync::kGrid) {
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, points.data_ptr<float>(), layout, start, k,
                                    plan.parts, overflow, grid_state,
                                    indices.data_ptr<int64_t>(), distances.data_ptr<float>()));
}

// `typical_cloud` sizes the plan; clouds up to `max_cloud` points still run, their extra points
// streamed through the overflow scratch.
template <int DIM>
void run_onchip(const at::Tensor& points, const CloudLayout& layout, int64_t batch,
                int64_t typical_cloud, int64_t max_cloud, const int64_t* start, int64_t k,
                at::Tensor& indices, at::Tensor& distances) {
  const Plan plan = plan_fast<DIM>(batch, typical_cloud);
  const auto options = points.options();
  at::Tensor overflow;
  if (cuda::ceil_div(max_cloud, plan.parts) > int64_t{kPointsPerThread} * plan.threads) {
    overflow = at::empty({layout.total_rows}, options);
  }
  float* overflow_ptr = overflow.defined() ? overflow.data_ptr<float>() : nullptr;
  switch (plan.sync) {
    case Sync::kBlock:
      launch_onchip<DIM, Sync::kBlock>(plan, points, layout, batch, start, k, overflow_ptr,
                                       nullptr, indices, distances);
      break;
    case Sync::kCluster:
      launch_onchip<DIM, Sync::kCluster>(plan, points, layout, batch, start, k, overflow_ptr,
                                         nullptr, indices, distances);
      break;
    case Sync::kGrid: {
      at::Tensor state = at::zeros({batch, kGridStateWords}, options.dtype(at::kLong));
      launch_onchip<DIM, Sync::kGrid>(
          plan, points, layout, batch, start, k, overflow_ptr,
          reinterpret_cast<unsigned long long*>(state.data_ptr<int64_t>()), indices, distances);
      break;
    }
  }
}

std::tuple<at::Tensor, at::Tensor> fps_cuda_impl(const at::Tensor& points_in,
                                                 const at::Tensor& counts, bool packed,
                                                 int64_t batch, int64_t rows_per_cloud,
                                                 int64_t dims, const std::optional<at::Tensor>& start,
                                                 int64_t k) {
  const c10::cuda::CUDAGuard device_guard(points_in.device());
  const auto options = points_in.options();
  at::Tensor indices = at::empty({batch, k}, options.dtype(at::kLong));
  at::Tensor distances = at::empty({batch, k}, options.dtype(fps_detail::distance_dtype(points_in)));
  if (batch == 0 || k == 0) return {indices, distances};

  // float16/bfloat16 are computed in float32, so they take the float32 kernels.
  const at::Tensor points = points_in.scalar_type() == at::kDouble
                                ? points_in.contiguous()
                                : points_in.to(at::kFloat).contiguous();
  const at::Tensor start_c = start.has_value() ? start->contiguous() : at::Tensor();
  const int64_t* start_ptr = start_c.defined() ? start_c.data_ptr<int64_t>() : nullptr;
  const int64_t total_rows = packed ? points.size(0) : batch * rows_per_cloud;
  const CloudLayout layout{counts.defined() ? counts.data_ptr<int64_t>() : nullptr,
                           rows_per_cloud, total_rows, packed};
  // Sizes known without reading lengths/offsets back to the host.
  const int64_t max_cloud = packed ? total_rows : rows_per_cloud;
  const int64_t typical_cloud = packed ? cuda::ceil_div(total_rows, batch) : rows_per_cloud;
  TORCH_CHECK(batch <= std::numeric_limits<int32_t>::max() / kMaxClusterParts,
              "fps: at most ", std::numeric_limits<int32_t>::max() / kMaxClusterParts,
              " clouds per call, got ", batch);

  if (points.scalar_type() == at::kFloat && (dims == 2 || dims == 3)) {
    auto run = dims == 2 ? run_onchip<2> : run_onchip<3>;
    run(points, layout, batch, typical_cloud, max_cloud, start_ptr, k, indices, distances);
    return {indices, distances};
  }
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "fps_cuda", [&] {
    at::Tensor min_distance = at::empty({total_rows}, points.options());
    fps_streaming_kernel<scalar_t>
        <<<static_cast<unsigned>(batch), kStreamingThreads, sizeof(scalar_t) * dims,
           at::cuda::getCurrentCUDAStream()>>>(
            points.data_ptr<scalar_t>(), static_cast<int>(dims), layout, start_ptr, k,
            min_distance.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(),
            distances.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {indices, distances};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fps_cuda(const at::Tensor& points,
                                            const std::optional<at::Tensor>& lengths,
                                            const std::optional<at::Tensor>& start, int64_t k) {
  fps_detail::check_fps_args(points, lengths, start, k);
  check_device_type(points, "points", at::kCUDA);
  const at::Tensor counts = lengths.has_value() ? lengths->contiguous() : at::Tensor();
  return fps_cuda_impl(points, counts, /*packed=*/false, points.size(0), points.size(1),
                       points.size(2), start, k);
}

std::tuple<at::Tensor, at::Tensor> fps_packed_cuda(const at::Tensor& points,
                                                   const at::Tensor& offsets,
                                                   const std::optional<at::Tensor>& start,
                                                   int64_t k) {
  fps_detail::check_fps_packed_args(points, offsets, start, k);
  check_device_type(points, "points", at::kCUDA);
  return fps_cuda_impl(points, offsets.contiguous(), /*packed=*/true, offsets.size(0) - 1, 0,
                       points.size(1), start, k);
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("fps", &fps_cuda);
  m.impl("fps_packed", &fps_packed_cuda);
}

}  // namespace pointops
