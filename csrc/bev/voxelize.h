// Hard voxelization (PointPillars / SECOND): the contract shared by the CPU and CUDA kernels.
//
// voxelize(points, lengths?, voxel_size, point_range, max_points_per_voxel, max_voxels)
//     -> (voxels, coords, num_points, num_voxels, point_voxel)
//   points       (B, N, C) float32/float64/float16/bfloat16, C >= 3; columns 0..2 are x, y, z, the
//                rest are features carried along. Cloud b is rows [0, lengths[b]).
//   lengths      (B,) int64 or None (every cloud has N points); values are clamped to [0, N].
//   voxel_size   [dx, dy, dz], finite and > 0.
//   point_range  [x_min, y_min, z_min, x_max, y_max, z_max], finite, max > min.
//   max_points_per_voxel (K >= 0), max_voxels (V >= 0): the output capacity.
//   voxels       (B, V, K, C) points' dtype: voxel v of cloud b holds its first K points (in point
//                order) in rows [0, num_points[b, v]); every other entry is 0.
//   coords       (B, V, 3) int32: (z, y, x) cell of each voxel; unused rows are -1.
//   num_points   (B, V) int32: points stored per voxel, min(points in the voxel, K); unused 0.
//   num_voxels   (B,) int64: voxels kept per cloud, min(distinct cells in the cloud, V).
//   point_voxel  (B, N) int64: the voxel slot v of each point (dynamic voxelization), also for
//                points past the first K of their voxel (they are only left out of `voxels`);
//                -1 for points outside the grid, with a NaN/Inf coordinate, in a voxel dropped by
//                max_voxels, or past lengths[b].
//
// Rules (identical on CPU and CUDA, and to mmcv's hard voxelization with deterministic=True):
//   * Grid size per axis: n = round((max - min) / size) in float32 (half to even, like torch.round
//     on mmcv's float32 tensors); each must be in [1, 2^24].
//   * Cell of a coordinate: c = floor((x - min) / size), one subtraction and one IEEE division
//     in the compute type (float64 for float64 points, float32 otherwise, with min and size
//     rounded to it), so both backends agree bit for bit. A point is kept iff 0 <= c < n on all
//     three axes: a cell, not a coordinate, test. When the range is a whole number of voxels
//     this is the half-open box [min, max) (x = min is in cell 0, x = max is out), up to the
//     rounding of (x - min) / size; when it is not, cell n - 1 reaches past max to
//     min + n * size. NaN and Inf coordinates never pass.
//   * Voxels of a cloud take slots 0, 1, ... in order of their first point (lowest index); the
//     voxels after the first V are dropped with all their points.
//   * A voxel stores its first K points in point order; later points are counted in point_voxel
//     only.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "common/hash_array.h"
#include "common/portable_math.h"
#include "common/voxel_grid.h"

namespace pointops {

using VoxelizeResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

VoxelizeResult voxelize_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                            at::ArrayRef<double> voxel_size, at::ArrayRef<double> point_range,
                            int64_t max_points_per_voxel, int64_t max_voxels);

namespace voxelize_detail {

// The argument checks and the grid shared by both backends (defined in voxelize_cpu.cpp).
struct VoxelizeArgs {
  double origin[3];  // x_min, y_min, z_min
  double size[3];
  int64_t dims[3];
};
VoxelizeArgs check_voxelize_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                 at::ArrayRef<double> voxel_size, at::ArrayRef<double> point_range,
                                 int64_t max_points_per_voxel, int64_t max_voxels);

// The bounded grid (common/voxel_grid.h) in the compute type acc_t.
template <typename acc_t>
VoxelGrid<acc_t> make_grid(const VoxelizeArgs& args) {
  return make_voxel_grid<acc_t>(args.origin, args.size, nullptr, args.dims);
}

// The five outputs, filled with their "unused" values.
VoxelizeResult empty_outputs(const at::Tensor& points, int64_t max_points_per_voxel, int64_t max_voxels);

}  // namespace voxelize_detail
}  // namespace pointops
