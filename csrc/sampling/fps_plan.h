// How the CUDA fps lays a batch out over the GPU (fps_cuda.cu runs the plan). Plain host code
// with no CUDA headers: the device facts it needs come in as arguments.
//
// The on-chip kernel splits a cloud over `parts` blocks that hold their points in registers;
// how those blocks agree on each step's winner is the plan's `sync`:
//   kBlock   parts == 1: the block alone, one shared-memory exchange between its warps;
//   kCluster 2 <= parts <= 16, a thread-block cluster (sm_90): winners pushed into the peers'
//            shared memory;
//   kGrid    any parts, a cooperative launch: each block's best records meet in global memory.
// Each exchange settles a round of up to `max_picks` picks (fps_kernels.cuh). The plan comes from
// the batch and cloud sizes and the device alone (plan_layout).
#pragma once

#include <cstdint>

namespace pointops {
namespace fps_plan {

enum class Sync { kBlock, kCluster, kGrid };

constexpr int kPointsPerThread = 16;
constexpr int kSmallPointsPerThread = 8;
constexpr int kMaxThreads = 512;
constexpr int kMaxClusterParts = 16;
// Points a block holds on chip at most (kPointsPerThread a thread, kMaxThreads threads).
constexpr int64_t kMaxBlockPoints = int64_t{kPointsPerThread} * kMaxThreads;
// Picks one exchange may settle: the kernel's capacity, and what the plan asks for.
constexpr int kMaxPicksPerRound = 32;  // lane i of a warp holds pick i
constexpr int kPicksPerRound = 16;
// Points per block that the automatic plan aims at in each layout (see plan_layout).
constexpr int64_t kClusterPointsPerBlock = 2048;
constexpr int64_t kGridPointsPerBlock = 2048;

struct Plan {
  Sync sync;
  int parts;                       // blocks per cloud
  int threads;                     // per block; 0 until the launch code fits it
  int max_picks = kPicksPerRound;  // per round, <= kMaxPicksPerRound
};

// The layout for `batch` clouds of about `n` points on a device with `sm_count` SMs and compute
// capability `cc_major`.x.
Plan plan_layout(int64_t batch, int64_t n, int sm_count, int cc_major);

// Points per thread (8 or 16) for the plan with clouds of about `typical_cloud` points.
int points_per_thread(const Plan& plan, int64_t typical_cloud);

// Threads per block so that a block's share of the cloud sits in registers, `ppt` points a
// thread: whole warps, at least one, at most kMaxThreads.
int threads_for(int64_t points_per_block, int ppt);

}  // namespace fps_plan
}  // namespace pointops
