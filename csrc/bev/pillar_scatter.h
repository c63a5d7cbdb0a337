// Pillar scatter: the contract shared by the CPU and CUDA kernels.
//
// pillar_scatter(features, coords, num_voxels, height, width) -> canvas
//   features    (B, P, F) float32/float64/float16/bfloat16: pillar b, p has features[b, p].
//   coords      (B, P, 3) int32 (z, y, x) cell of each pillar (OpenPCDet / mmcv order).
//   num_voxels  (B,) int64: pillars p >= num_voxels[b] are padding (clamped to [0, P]).
//   height, width  the grid (H along y, W along x), >= 0.
//   canvas      (B, F, height, width), features' dtype: canvas[b, :, y, x] = features[b, p] for the
//               pillar p placed at (y, x); 0 where no pillar is.
//
// Rules (identical on CPU and CUDA; values are copied, never computed):
//   * A pillar is placed iff p < num_voxels[b], z == 0 (a pillar grid has one layer), 0 <= y < height
//     and 0 <= x < width; others are ignored.
//   * When several pillars name one cell, the lowest pillar index wins.
//   * Output sizes come from the arguments: no host sync (OpenPCDet's PointPillarScatter reads the
//     batch size with .item() and loops over clouds in Python).
#pragma once

#include "common/aten.h"

#include <cstdint>

namespace pointops {

at::Tensor pillar_scatter_cpu(const at::Tensor& features, const at::Tensor& coords, const at::Tensor& num_voxels,
                              int64_t height, int64_t width);

namespace pillar_detail {

// Checks shared by both backends (defined in pillar_scatter_cpu.cpp).
void check_pillar_scatter_args(const at::Tensor& features, const at::Tensor& coords, const at::Tensor& num_voxels,
                               int64_t height, int64_t width);

}  // namespace pillar_detail
}  // namespace pointops
