// Voxel-grid downsampling: the contract shared by the CPU and CUDA kernels.
//
// voxel_downsample(points, lengths?, features?, voxel_size, point_range?)
//     -> (centroids, mean_features, new_lengths, point_voxel)
//   points        (B, N, 3) float32/float64/float16/bfloat16; cloud b is rows [0, lengths[b]).
//   lengths       (B,) int64 or None (every cloud has N points); clamped to [0, N].
//   features      (B, N, F) float32/float64/float16/bfloat16 or None (F = 0): per-point values
//                 averaged per voxel (normals, colours, intensity).
//   voxel_size    [dx, dy, dz], finite and > 0 (in the compute type, below).
//   point_range   [x_min, y_min, z_min, x_max, y_max, z_max] or None. Given: the grid starts at
//                 (x_min, y_min, z_min) and only points with x_min <= x < x_max (and likewise y,
//                 z) count. None: the grid starts at the origin (cells floor(x / dx)), the same
//                 for every cloud and frame, and every finite point counts.
//   centroids     (B, N, 3) points' dtype: row v < new_lengths[b] is the mean of the points in
//                 cloud b's v-th occupied voxel; rows past new_lengths[b] are 0.
//   mean_features (B, N, F) features' dtype (points' dtype when F = 0): the mean features of the
//                 same voxels; rows past new_lengths[b] are 0.
//   new_lengths   (B,) int64: occupied voxels of cloud b.
//   point_voxel   (B, N) int64: the row of each point's voxel in centroids, -1 for points that
//                 do not count (past lengths[b], NaN/Inf coordinates, outside point_range).
//
// Rules (identical on CPU and CUDA, bit for bit):
//   * Compute type: float64 for float64 points, float32 otherwise (float16 / bfloat16 are
//     widened). The cell of a coordinate is c = floor((x - x_min) / dx) (floor(x / dx) without
//     point_range): one subtraction, one IEEE division and a floor in the compute type, with
//     x_min and dx rounded to it first. A cell must lie in [-2^62, 2^62) to count.
//   * Span: any. A cloud whose counted points span less than 2^21 = 2,097,152 cells on every
//     axis (at 1 cm voxels, 20 km) takes the fast path: a 63-bit key per point, its cell
//     relative to the cloud's lowest occupied cell, 21 bits per axis. A wider cloud (a voxel far
//     below the data's resolution, or far outliers) takes an exact but slower path that orders
//     its points by the raw (z, y, x) cells (on CUDA one thread block per wide cloud, decided on
//     the device: no host sync; its cost is under "What bounds it" in voxel_downsample_cuda.cu).
//     Both give the voxels, order and means below, so the path taken shows only in the time.
//   * Order: voxels of a cloud are listed by their (z, y, x) cell, lexicographically: the same
//     order whatever the points' order, the batch, or the device.
//   * Means: a voxel's points are summed in increasing point index, in float64, one rounded add
//     at a time (no fma), then divided by their count in float64 and rounded once to the output
//     dtype. Features are averaged the same way over the same points (NaN features propagate to
//     their voxel's mean). The order of the sum is fixed, so no thread order enters the result.
//
// Relation to Open3D's VoxelDownSample: Open3D anchors the grid at min_bound - voxel_size / 2
// of each cloud, and returns the voxels in hash-map order; it averages points (and normals,
// colours) in float64 the same way. Passing point_range = (min_bound - voxel_size / 2,
// +large) gives Open3D's cells; the centroids then agree up to the order of the float64 sums.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "common/portable_math.h"

namespace pointops {

using VoxelDownsampleResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

namespace voxel_downsample_detail {

constexpr int kAxisBits = 21;
constexpr int64_t kAxisSpan = int64_t{1} << kAxisBits;
// Keys of counted points are < 2^63 - 1; this marks a point that does not count.
constexpr int64_t kInvalidKey = std::numeric_limits<int64_t>::max();
// Cells beyond +-2^62 do not convert to int64 safely (and no grid that large is meaningful).
constexpr double kCellLimit = 4611686018427387904.0;  // 2^62

// The grid in the compute type acc_t.
template <typename acc_t>
struct DownsampleGrid {
  acc_t origin[3];
  acc_t size[3];
  acc_t upper[3];  // x_max, ...; only read when has_range
  bool has_range;

  // Writes the cell of (x, y, z) and returns true when the point counts.
  POINTOPS_HOST_DEVICE bool cell(acc_t x, acc_t y, acc_t z, int64_t* out) const {
    const acc_t xyz[3] = {x, y, z};
    for (int d = 0; d < 3; ++d) {
      // Written so that NaN fails every test.
      if (has_range && !(xyz[d] >= origin[d] && xyz[d] < upper[d])) return false;
      const acc_t f = floor_value((xyz[d] - origin[d]) / size[d]);
      if (!(f >= static_cast<acc_t>(-kCellLimit) && f < static_cast<acc_t>(kCellLimit))) return false;
      out[d] = static_cast<int64_t>(f);
    }
    return true;
  }
};

// Whether a cloud whose counted cells lie in [low, high] per axis fits the 63-bit key: a span
// below 2^21 on every axis. Both bounds lie in [-2^62, 2^62), so the differences cannot overflow.
POINTOPS_HOST_DEVICE inline bool fits_key(const int64_t low[3], const int64_t high[3]) {
  for (int d = 0; d < 3; ++d) {
    if (high[d] - low[d] >= kAxisSpan) return false;
  }
  return true;
}

// The 63-bit key of a cell relative to its cloud's lowest cell (the cloud fits the key), or
// kInvalidKey beyond the span. z is the most significant part, so keys sort like (z, y, x).
POINTOPS_HOST_DEVICE inline int64_t relative_key(const int64_t cell[3], const int64_t low[3]) {
  int64_t key = 0;
  for (int d = 2; d >= 0; --d) {
    const int64_t offset = cell[d] - low[d];  // >= 0 and < 2^63: both lie in [-2^62, 2^62)
    if (offset >= kAxisSpan) return kInvalidKey;
    key = (key << kAxisBits) | offset;
  }
  return key;
}

// The order of a wide cloud's points: (z, y, x) cell lexicographically, then point index (so a
// voxel's points come in increasing index). Keys of distinct points are distinct.
POINTOPS_HOST_DEVICE inline bool cell_index_less(const int64_t a[3], int64_t ia, const int64_t b[3], int64_t ib) {
  for (int d = 2; d >= 0; --d) {
    if (a[d] != b[d]) return a[d] < b[d];
  }
  return ia < ib;
}

POINTOPS_HOST_DEVICE inline bool same_cell(const int64_t a[3], const int64_t b[3]) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
}

// The checked arguments (defined in voxel_downsample_cpu.cpp, used by both backends).
struct DownsampleArgs {
  double origin[3];
  double size[3];
  double upper[3];
  bool has_range;
  int64_t features;  // F
};

DownsampleArgs check_downsample_args(const at::Tensor& points,
                                     const std::optional<at::Tensor>& lengths,
                                     const std::optional<at::Tensor>& features,
                                     at::ArrayRef<double> voxel_size,
                                     std::optional<at::ArrayRef<double>> point_range);

template <typename acc_t>
DownsampleGrid<acc_t> make_grid(const DownsampleArgs& args) {
  DownsampleGrid<acc_t> grid;
  for (int d = 0; d < 3; ++d) {
    grid.origin[d] = static_cast<acc_t>(args.origin[d]);
    grid.size[d] = static_cast<acc_t>(args.size[d]);
    grid.upper[d] = static_cast<acc_t>(args.upper[d]);
  }
  grid.has_range = args.has_range;
  return grid;
}

// The four outputs, zero / -1 filled. features_out has the features' dtype, or the points'.
VoxelDownsampleResult empty_downsample_outputs(const at::Tensor& points,
                                               const std::optional<at::Tensor>& features);

}  // namespace voxel_downsample_detail
}  // namespace pointops
