// The 64-bit argmax key: (value key << 32) | ~index. Its unsigned max is the largest value, ties
// to the lowest index, and keys of distinct indices differ, so one integer max (a 64-bit
// atomicMax, a warp reduction, std::max, at::topk) finds an argmax exactly and in any order, on
// host and device alike: the CPU and CUDA kernels return the same argmax.
//
// The value key is any 32-bit word whose unsigned order is the values' order: ordered_bits(v)
// for any float (common/float_bits.h), float_bits(v) for floats >= 0, a positive int32 as is.
// Reserve 0 for "nothing" where a caller needs it (e.g. value key + 1 for values >= 0).
#pragma once

#include <cstdint>

#include "common/portable_math.h"

namespace pointops {

POINTOPS_HOST_DEVICE inline uint64_t argmax_key(uint32_t value, uint32_t index) {
  return (static_cast<uint64_t>(value) << 32) | (0xffffffffu - index);
}

POINTOPS_HOST_DEVICE inline uint32_t argmax_key_value(uint64_t key) { return static_cast<uint32_t>(key >> 32); }

POINTOPS_HOST_DEVICE inline uint32_t argmax_key_index(uint64_t key) { return 0xffffffffu - static_cast<uint32_t>(key); }

#if defined(__CUDACC__)
// Max of a 64-bit key over the full warp in two redux.sync steps (sm_80+), known to every lane:
// the high words' max, then the low words' max among the lanes that hold it.
__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long key) {
  const uint32_t high = static_cast<uint32_t>(key >> 32);
  const uint32_t top = __reduce_max_sync(0xffffffffu, high);
  const uint32_t low = __reduce_max_sync(0xffffffffu, high == top ? static_cast<uint32_t>(key) : 0u);
  return (static_cast<unsigned long long>(top) << 32) | low;
}
#endif

}  // namespace pointops
