// CUDA helpers shared by every kernel file.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "common/portable_math.h"

namespace pointops {
namespace cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

using ::pointops::ceil_div;
using ::pointops::round_up;

}  // namespace cuda
}  // namespace pointops
