// Batch bookkeeping shared by the CPU and CUDA kernels.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "common/portable_math.h"

namespace pointops {

// An op's optional lengths as its kernels read them: contiguous (undefined when absent) and the
// data pointer (null when absent: every cloud has all N rows).
struct CloudLengths {
  at::Tensor tensor;
  const int64_t* data;
};

inline CloudLengths contiguous_lengths(const std::optional<at::Tensor>& lengths) {
  if (!lengths.has_value()) return {at::Tensor(), nullptr};
  at::Tensor tensor = lengths->contiguous();
  const int64_t* data = tensor.data_ptr<int64_t>();
  return {std::move(tensor), data};
}

// Points in cloud b: lengths[b] clamped to [0, n]; every one of the n rows when lengths is null.
POINTOPS_HOST_DEVICE inline int64_t cloud_length(const int64_t* lengths, int64_t b, int64_t n) {
  if (lengths == nullptr) return n;
  const int64_t v = lengths[b];
  return v < 0 ? 0 : (v > n ? n : v);
}

}  // namespace pointops
