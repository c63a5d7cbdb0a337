// Launches that <<<...>>> cannot express, and the occupancy queries that size them:
//   * cooperative launches: every block is resident at once, so blocks may wait for each other
//     (cooperative_groups' grid.sync(), or a hand-made arrival counter);
//   * thread-block clusters (sm_90): the blocks of a cluster are co-scheduled on one GPC and can
//     reach each other's shared memory.
// Both go through cudaLaunchKernelEx on the caller's stream; a launch that does not fit the
// device is an error (C10_CUDA_CHECK), so the host sizes the grid with the queries below first.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <cstddef>
#include <utility>

namespace pointops {
namespace cuda {

// Streaming multiprocessors of the current device.
inline int sm_count() { return at::cuda::getCurrentDeviceProperties()->multiProcessorCount; }

// Lets `kernel` take `bytes` of dynamic shared memory (required above 48 KB).
template <typename Kernel>
void set_dynamic_smem(Kernel kernel, size_t bytes) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Lets `kernel` run in clusters of more than the portable 8 blocks (16 on sm_90).
template <typename Kernel>
void allow_large_clusters(Kernel kernel) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
}

// Blocks of `kernel` that fit on one SM at once with `threads` threads and `smem` bytes of
// dynamic shared memory (0: the block does not fit).
template <typename Kernel>
int blocks_per_sm(Kernel kernel, int threads, size_t smem = 0) {
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  return blocks;
}

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem = 0;           // dynamic shared memory per block, bytes
  bool cooperative = false;  // every block resident at once
  unsigned cluster = 0;      // blocks per cluster along x (grid.x a multiple of it); 0: none
};

// A cudaLaunchConfig_t and the attributes it points to (so it must not be copied).
class ExtendedLaunch {
 public:
  ExtendedLaunch(const LaunchShape& shape, cudaStream_t stream) {
    config_.gridDim = shape.grid;
    config_.blockDim = shape.block;
    config_.dynamicSmemBytes = shape.smem;
    config_.stream = stream;
    config_.attrs = attributes_;
    if (shape.cooperative) {
      cudaLaunchAttribute& a = attributes_[config_.numAttrs++];
      a.id = cudaLaunchAttributeCooperative;
      a.val.cooperative = 1;
    }
    if (shape.cluster > 0) {
      cudaLaunchAttribute& a = attributes_[config_.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = shape.cluster;
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
  }
  ExtendedLaunch(const ExtendedLaunch&) = delete;
  ExtendedLaunch& operator=(const ExtendedLaunch&) = delete;
  const cudaLaunchConfig_t* config() const { return &config_; }

 private:
  cudaLaunchConfig_t config_ = {};
  cudaLaunchAttribute attributes_[2] = {};
};

// Clusters of shape.cluster blocks of `kernel` that can be resident at once; 0 when that shape
// cannot run at all (too many blocks or too much shared memory per cluster), which is an answer
// for a planner, not an error. The kernel's attributes (shared memory, cluster size) must
// already be set.
template <typename Kernel>
int max_active_clusters(Kernel kernel, const LaunchShape& shape) {
  const ExtendedLaunch ex(shape, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, ex.config()) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error this query left behind
    return 0;
  }
  return clusters;
}

// kernel<<<shape>>>(args...) on `stream`, cooperative and / or in clusters as the shape says.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  const ExtendedLaunch ex(shape, stream);
  C10_CUDA_CHECK(cudaLaunchKernelEx(ex.config(), kernel, std::forward<Args>(args)...));
}

}  // namespace cuda
}  // namespace pointops
