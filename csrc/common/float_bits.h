// Float bit patterns on host and device, and the order-preserving 32-bit keys built from them.
//
// Integer max / min / add on these keys is exact and order-free, so CUDA can reduce floats with
// plain integer atomics and get the CPU's result bit for bit (rule 4 in the design).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/portable_math.h"

namespace pointops {

POINTOPS_HOST_DEVICE inline uint32_t float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
#endif
}

POINTOPS_HOST_DEVICE inline float bits_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
#endif
}

// Unsigned order of the key == numeric order of the (non-NaN) float, negatives included; 0 is
// below every float, so a zero-filled slot is an identity for max. (For floats known to be >= 0,
// float_bits alone already orders like the value.)
POINTOPS_HOST_DEVICE inline uint32_t ordered_bits(float v) {
  const uint32_t bits = float_bits(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The inverse of ordered_bits.
POINTOPS_HOST_DEVICE inline float ordered_float(uint32_t key) {
  return bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

}  // namespace pointops
