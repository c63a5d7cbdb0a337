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
//   * Span: any. Each cloud's voxels are found by sorting a 62-bit key per point, the offsets of its
//     cell from the cloud's lowest occupied cell, z most significant, each axis in as many bits
//     as its offsets need. Where the offsets need more than 62 bits in all (far outliers, or a
//     voxel far below the data's resolution), the offsets of each axis are packed first: they
//     fall into 64 bins by bit width (offset 0, 1, 2-3, 4-7, ...), and each occupied bin's range
//     [lowest, highest] is moved down next to the ranges of the bins below it, which keeps their
//     order and closes the empty stretches between bins. A single outlier then costs one packed
//     offset, however far it is. A cloud whose packed offsets still need more than 62 bits
//     (points spread thinly over more than about 2^21 cells on every axis) takes an exact but
//     slower path that orders its points by the raw (z, y, x) cells (on CUDA one thread block per
//     such cloud of at most 1,024 rows, the whole grid for larger ones, decided on the device: no
//     host sync; its cost is under "What bounds it" in voxel_downsample_cuda.cu). All three give
//     the voxels, order and means below, so the path taken shows only in the time.
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
#include "common/voxel_grid.h"

namespace pointops {

using VoxelDownsampleResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

namespace voxel_downsample_detail {

// Keys of counted points are below 2^62; this marks a point that does not count.
constexpr int64_t kInvalidKey = std::numeric_limits<int64_t>::max();
constexpr int kKeyBits = 62;
// Offsets of one axis fall into bins by bit width: bin k holds [2^(k-1), 2^k) (bin 0: offset 0).
// Offsets are below 2^63 (cells lie in [-2^62, 2^62)), so 64 bins hold them all.
constexpr int kOffsetBins = 64;

// How a cloud's voxels are found: no counted point; the key of the raw offsets; the key of the
// packed offsets; the sort of its points by raw (z, y, x) cell.
enum class CloudPath : int32_t { kEmpty = 0, kDirect = 1, kPacked = 2, kSorted = 3 };

// A cloud's key: path and the bits of each axis's (raw or packed) offsets.
struct KeyLayout {
  int32_t bits[3];
  int32_t path;  // CloudPath
};

POINTOPS_HOST_DEVICE inline int offset_bin(uint64_t offset) { return bit_width(offset); }

// The bits of the raw offsets of a cloud whose counted cells lie in [low, high] per axis; true when
// they fit the key. Both bounds lie in [-2^62, 2^62), so the differences cannot overflow.
POINTOPS_HOST_DEVICE inline bool direct_layout(const int64_t low[3], const int64_t high[3], int32_t bits[3]) {
  int total = 0;
  for (int d = 0; d < 3; ++d) {
    bits[d] = bit_width(static_cast<uint64_t>(high[d] - low[d]));
    total += bits[d];
  }
  return total <= kKeyBits;
}

// Packs one axis. bin_low[k] / bin_high[k] are the lowest / highest offset in bin k, or
// (2^64 - 1, 0) for an empty bin. Each occupied bin's range is moved to start right after the
// packed ranges of the bins below it: bin_low[k] becomes the shift that does it (added modulo
// 2^64). Returns the highest packed offset (the axis has a counted point).
POINTOPS_HOST_DEVICE inline uint64_t pack_axis(uint64_t* bin_low, const uint64_t* bin_high) {
  uint64_t next = 0;
  for (int k = 0; k < kOffsetBins; ++k) {
    const uint64_t lowest = bin_low[k];
    if (lowest > bin_high[k]) continue;
    bin_low[k] = next - lowest;
    next += bin_high[k] - lowest + 1;
  }
  return next - 1;
}

// The bits of packed offsets whose highest are top[d]; true when they fit the key.
POINTOPS_HOST_DEVICE inline bool packed_layout(const uint64_t top[3], int32_t bits[3]) {
  int total = 0;
  for (int d = 0; d < 3; ++d) {
    bits[d] = bit_width(top[d]);
    total += bits[d];
  }
  return total <= kKeyBits;
}

// The key of a counted cell of a cloud whose lowest cell is low: per axis its offset, through
// the axis's shifts when packed (shifts: 3 x kOffsetBins, axis-major; null for the direct key),
// in bits[d] bits, z most significant, so keys sort like (z, y, x) cells and are below 2^62.
POINTOPS_HOST_DEVICE inline int64_t cell_key(const int64_t cell[3], const int64_t low[3], const uint64_t* shifts,
                                             const int32_t bits[3]) {
  uint64_t key = 0;
  for (int d = 2; d >= 0; --d) {
    uint64_t offset = static_cast<uint64_t>(cell[d] - low[d]);
    if (shifts != nullptr) offset += shifts[d * kOffsetBins + offset_bin(offset)];
    key = (key << bits[d]) | offset;
  }
  return static_cast<int64_t>(key);
}

// The order of a sorted-path cloud's points: (z, y, x) cell lexicographically, then point index
// (so a voxel's points come in increasing index). Keys of distinct points are distinct.
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

DownsampleArgs check_downsample_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                     const std::optional<at::Tensor>& features, at::ArrayRef<double> voxel_size,
                                     std::optional<at::ArrayRef<double>> point_range);

// The grid (common/voxel_grid.h) in the compute type acc_t: unbounded cells, coordinates bounded
// by point_range when given.
template <typename acc_t>
VoxelGrid<acc_t> make_grid(const DownsampleArgs& args) {
  return make_voxel_grid<acc_t>(args.origin, args.size, args.has_range ? args.upper : nullptr, nullptr);
}

// The four outputs, zero / -1 filled. features_out has the features' dtype, or the points'.
VoxelDownsampleResult empty_downsample_outputs(const at::Tensor& points, const std::optional<at::Tensor>& features);

}  // namespace voxel_downsample_detail
}  // namespace pointops
