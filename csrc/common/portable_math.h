// Host/device arithmetic that rounds the same way in the CPU kernels and the CUDA kernels.
// nvcc contracts a * b + c into an fma by default and g++ does not, so code whose CPU and CUDA
// results must agree bit for bit spells out every fused and every unfused product.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define POINTOPS_HOST_DEVICE __host__ __device__
#else
#define POINTOPS_HOST_DEVICE
#endif

namespace pointops {

// ceil(a / b) for a >= 0 and b > 0, and a rounded up to a multiple of `multiple` (sizes, grids).
POINTOPS_HOST_DEVICE inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

POINTOPS_HOST_DEVICE inline int64_t round_up(int64_t a, int64_t multiple) { return ceil_div(a, multiple) * multiple; }

// a * b + c with a single rounding.
POINTOPS_HOST_DEVICE inline float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

POINTOPS_HOST_DEVICE inline double fused_multiply_add(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// a * b rounded on its own: never contracted into a neighbouring add.
POINTOPS_HOST_DEVICE inline float multiply(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The number of bits v needs: 0 for 0, else 1 + the index of its highest set bit.
POINTOPS_HOST_DEVICE inline int bit_width(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(v));
#else
  return v == 0 ? 0 : 64 - __builtin_clzll(v);
#endif
}

// floor() under one name on host and device (exact: no rounding).
POINTOPS_HOST_DEVICE inline float floor_value(float v) {
#if defined(__CUDA_ARCH__)
  return floorf(v);
#else
  return std::floor(v);
#endif
}

POINTOPS_HOST_DEVICE inline double floor_value(double v) {
#if defined(__CUDA_ARCH__)
  return ::floor(v);
#else
  return std::floor(v);
#endif
}

// float64 steps for host/device code that must round identically: each rounds once, and none is
// fused with a neighbour (the CPU build also passes -ffp-contract=off, so g++ never fuses them).
POINTOPS_HOST_DEVICE inline double multiply(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

POINTOPS_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

POINTOPS_HOST_DEVICE inline double subtract(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

POINTOPS_HOST_DEVICE inline double divide(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

POINTOPS_HOST_DEVICE inline double square_root(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// The same single-rounding steps in float32.
POINTOPS_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

POINTOPS_HOST_DEVICE inline float subtract(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

POINTOPS_HOST_DEVICE inline float divide(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

POINTOPS_HOST_DEVICE inline float square_root(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// Natural log of x >= 1 from IEEE +, -, *, / and explicit fma only, so the CPU and CUDA agree to
// the bit (their libm logs may differ in the last place). x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172: the odd series to s^23 leaves an
// error below 1e-17 relative.
POINTOPS_HOST_DEVICE inline double portable_log(double x) {
  int e = 0;
#if defined(__CUDA_ARCH__)
  double m = frexp(x, &e);
#else
  double m = std::frexp(x, &e);
#endif
  if (m < 0.70710678118654752) {
    m = m * 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) series = fused_multiply_add(series, s2, 1.0 / k);
  const double ln_m = 2.0 * s * series;
  return fused_multiply_add(static_cast<double>(e), 0.69314718055994531, ln_m);
}

}  // namespace pointops
