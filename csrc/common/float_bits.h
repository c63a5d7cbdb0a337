// Float bit patterns on host and device, and the order-preserving 32-bit keys built from them.
//
// Integer max / min / add on these keys is exact and order-free, so CUDA can reduce floats with
// plain integer atomics and get the CPU's result bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/portable_math.h"

namespace pointops {

// v's bits as a To of the same size. memcpy is the portable spelling (it compiles to a plain
// register move on host and device alike).
template <typename To, typename From>
POINTOPS_HOST_DEVICE inline To same_bits(From v) {
  static_assert(sizeof(To) == sizeof(From), "same_bits needs types of one size");
  To out;
  memcpy(&out, &v, sizeof(out));
  return out;
}

POINTOPS_HOST_DEVICE inline uint32_t float_bits(float v) { return same_bits<uint32_t>(v); }

POINTOPS_HOST_DEVICE inline float bits_float(uint32_t bits) { return same_bits<float>(bits); }

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
