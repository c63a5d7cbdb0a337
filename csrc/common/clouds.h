// Batch bookkeeping shared by the CPU and CUDA kernels.
#pragma once

#include <cstdint>

#include "common/portable_math.h"

namespace pointops {

// Points in cloud b: lengths[b] clamped to [0, n]; every one of the n rows when lengths is null.
POINTOPS_HOST_DEVICE inline int64_t cloud_length(const int64_t* lengths, int64_t b, int64_t n) {
  if (lengths == nullptr) return n;
  const int64_t v = lengths[b];
  return v < 0 ? 0 : (v > n ? n : v);
}

}  // namespace pointops
