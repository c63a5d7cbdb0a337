// Weighted interpolation of features over neighbour indices (PointNet++'s three_interpolate, for
// any number of neighbours): the contract shared by the CPU and CUDA kernels.
//
// interpolate(features, indices, weights) -> out
//   features  (B, N, C) float32/float64/float16/bfloat16: per-point features.
//   indices   (B, M, K) int64: rows of features[b] (e.g. knn / three_nn indices); an index outside
//             [0, N) (-1 padding) contributes nothing.
//   weights   (B, M, K), the dtype of features.
//   out       (B, M, C), the dtype of features:
//               out[b, m, c] = (((0 + t_0) + t_1) + ...) + t_{K-1},
//               t_j = weights[b, m, j] * features[b, indices[b, m, j], c], or 0 for an index
//             outside [0, N), each product and sum rounded on its own, in the compute type
//             (float64 for float64 features, float32 otherwise), so CPU, CUDA and the
//             pure-PyTorch reference agree bit for bit.
// The gradient (registered in pointops/geometry/neighbors.py) reaches features and weights.
#pragma once

#include "common/aten.h"

namespace pointops {

at::Tensor interpolate_cpu(const at::Tensor& features, const at::Tensor& indices, const at::Tensor& weights);

namespace neighbors {

// Checks shared by both backends (defined in interpolate_cpu.cpp).
void check_interpolate_args(const at::Tensor& features, const at::Tensor& indices, const at::Tensor& weights);

// (features, weights) as the kernels read them: contiguous, in the compute type.
at::Tensor interpolate_compute(const at::Tensor& t);

}  // namespace neighbors
}  // namespace pointops
