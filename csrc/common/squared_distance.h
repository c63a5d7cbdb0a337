// The one squared-distance formula of the neighbourhood ops (kNN, ball query, three_nn) and of
// every op built on them (normals, ICP, PPF), on host and device:
//
//   dx = q.x - p.x, dy = q.y - p.y, dz = q.z - p.z        (each rounded)
//   d2 = (dx * dx + dy * dy) + dz * dz                      (every product and sum rounded alone)
//
// No step is fused with a neighbour, so the CPU build (-ffp-contract=off), nvcc (which would
// otherwise contract a * b + c into an fma) and a pure-PyTorch reference (one elementwise op per
// step) all round identically. float32 inputs compute in float32, float64 in float64.
#pragma once

#include "common/portable_math.h"

namespace pointops {

// (dx*dx + dy*dy) + dz*dz of already rounded differences.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t squared_norm3(acc_t dx, acc_t dy, acc_t dz) {
  return add(add(multiply(dx, dx), multiply(dy, dy)), multiply(dz, dz));
}

// |q - p|^2 with the rounding above; acc_t is float or double.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t squared_distance3(acc_t qx, acc_t qy, acc_t qz, acc_t px, acc_t py, acc_t pz) {
  return squared_norm3(subtract(qx, px), subtract(qy, py), subtract(qz, pz));
}

}  // namespace pointops
