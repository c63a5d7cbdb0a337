// Run-time choice of the CPU kernels' vector paths.
//
// The extension is compiled for any x86-64 (no -mavx2 / -mfma: a wheel must load everywhere), so
// without help g++ calls libm for every std::fma and std::floor of the exact arithmetic. Hot loops
// therefore carry a second copy compiled with __attribute__((target("avx2,fma"))), taken when the
// CPU has both. Those copies use only operations that round exactly like their scalar twins
// (_mm256_fmadd_ps == std::fma, _mm256_floor_ps == std::floor, IEEE add/sub/mul/min/compare), so
// results stay bit for bit the same on every path and equal to CUDA's.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POINTOPS_X86_DISPATCH 1
#include <immintrin.h>
#else
#define POINTOPS_X86_DISPATCH 0
#endif

namespace pointops {

// Whether the AVX2 + FMA copies may run: whether this CPU has both.
inline bool cpu_has_avx2_fma() {
#if POINTOPS_X86_DISPATCH
  static const bool on = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return on;
#else
  return false;
#endif
}

}  // namespace pointops
