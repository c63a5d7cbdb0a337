// The CUDA fps planner (see fps_plan.h). The thresholds come from the sampling bench on an H200
// (docs/performance.md): per step, a cluster's exchange and a grid's atomics cost more the more
// blocks take part, while fewer, fuller blocks leave SMs idle and lengthen each thread's chain.
#include "sampling/fps_plan.h"

#include <algorithm>

#include "common/portable_math.h"

namespace pointops {
namespace fps_plan {

namespace {
constexpr int kWarpThreads = 32;
}  // namespace

// Clusters aim at ~2048 points per block: more, smaller blocks shorten each round's slowest warp
// by more than the wider exchange costs (up to 16 blocks). A cloud that a 16-block cluster can
// hold on chip takes a cluster (or one block), a larger one the grid, whose best share is also
// ~2048 points per block. Clouds are spread over the SMs only as far as the batch leaves SMs free.
Plan plan_layout(int64_t batch, int64_t n, int sm_count, int cc_major) {
  const int64_t spread = std::max<int64_t>(1, sm_count / batch);
  const int64_t max_cluster = cc_major >= 9 ? kMaxClusterParts : 1;
  if (n <= kMaxBlockPoints * max_cluster || spread == 1) {
    const int64_t parts = std::min({spread, max_cluster, std::max<int64_t>(1, ceil_div(n, kClusterPointsPerBlock))});
    return {parts == 1 ? Sync::kBlock : Sync::kCluster, static_cast<int>(parts), 0};
  }
  const int64_t parts = std::min(spread, ceil_div(n, kGridPointsPerBlock));
  return {Sync::kGrid, static_cast<int>(parts), 0};
}

// 8 (more warps, shorter per-thread chains) for a single block of up to 4096 points or a
// cluster / grid share of up to 2048; 16 above (at 4096 points per cluster block, 16 beat 8 by 8%).
int points_per_thread(const Plan& plan, int64_t typical_cloud) {
  const int64_t per_block = ceil_div(typical_cloud, plan.parts);
  const int64_t small_limit = plan.sync == Sync::kBlock ? 4096 : 2048;
  return per_block <= small_limit ? kSmallPointsPerThread : kPointsPerThread;
}

int threads_for(int64_t points_per_block, int ppt) {
  const int64_t t = round_up(ceil_div(points_per_block, ppt), kWarpThreads);
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(t, kWarpThreads), kMaxThreads));
}

}  // namespace fps_plan
}  // namespace pointops
