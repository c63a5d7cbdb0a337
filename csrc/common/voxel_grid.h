// The voxel grid of voxelize (bev) and voxel_downsample (geometry): cells of edges size[d] from
// origin[d], computed the same way on host and device so that both backends agree bit for bit.
//
// The cell of a coordinate is floor((x - origin) / size): one subtraction, one IEEE division and
// a floor in the compute type acc_t (float64 for float64 points, float32 otherwise), with origin
// and size rounded to acc_t first. NaN and Inf coordinates never count. A grid can also bound
//   * the coordinates (has_upper): a point counts only where origin <= x < upper on every axis
//     (voxel_downsample's point_range; upper may be +Inf);
//   * the cells (dims > 0): a cell counts only where 0 <= c < dims (voxelize's grid, numbered x
//     fastest by index()). Without dims a cell must lie in [-2^62, 2^62), where it converts to
//     int64 exactly and differences of cells cannot overflow.
#pragma once

#include <cstdint>

#include "common/portable_math.h"

namespace pointops {

// Cells beyond +-2^62 of an unbounded grid do not count.
constexpr double kVoxelCellLimit = 4611686018427387904.0;  // 2^62

template <typename acc_t>
struct VoxelGrid {
  acc_t origin[3];
  acc_t size[3];
  acc_t upper[3];  // read only with has_upper
  bool has_upper;
  int64_t dims[3];  // cells per axis, or 0 on every axis: unbounded

  // Writes the cell of (x, y, z) and returns whether the point counts.
  POINTOPS_HOST_DEVICE bool cell(acc_t x, acc_t y, acc_t z, int64_t out[3]) const {
    const acc_t xyz[3] = {x, y, z};
    for (int d = 0; d < 3; ++d) {
      // Every test is written so that NaN fails it.
      if (has_upper && !(xyz[d] >= origin[d] && xyz[d] < upper[d])) return false;
      const acc_t f = floor_value((xyz[d] - origin[d]) / size[d]);
      // dims <= 2^24 (voxelize's limit) converts to acc_t exactly.
      const acc_t low = dims[d] > 0 ? acc_t(0) : static_cast<acc_t>(-kVoxelCellLimit);
      const acc_t high = dims[d] > 0 ? static_cast<acc_t>(dims[d]) : static_cast<acc_t>(kVoxelCellLimit);
      if (!(f >= low && f < high)) return false;
      out[d] = static_cast<int64_t>(f);
    }
    return true;
  }

  // A bounded grid's cells, and a cell's index among them, x fastest: (z * ny + y) * nx + x.
  POINTOPS_HOST_DEVICE int64_t cells() const { return dims[0] * dims[1] * dims[2]; }
  POINTOPS_HOST_DEVICE int64_t index(const int64_t c[3]) const { return (c[2] * dims[1] + c[1]) * dims[0] + c[0]; }

  // (z, y, x) of a bounded grid's cell index.
  POINTOPS_HOST_DEVICE void zyx(int64_t index, int32_t* out) const {
    out[2] = static_cast<int32_t>(index % dims[0]);
    out[1] = static_cast<int32_t>((index / dims[0]) % dims[1]);
    out[0] = static_cast<int32_t>(index / (dims[0] * dims[1]));
  }
};

// The grid in acc_t from checked float64 arguments; upper and dims may be null (no bound).
template <typename acc_t>
VoxelGrid<acc_t> make_voxel_grid(const double origin[3], const double size[3], const double* upper,
                                 const int64_t* dims) {
  VoxelGrid<acc_t> grid;
  for (int d = 0; d < 3; ++d) {
    grid.origin[d] = static_cast<acc_t>(origin[d]);
    grid.size[d] = static_cast<acc_t>(size[d]);
    grid.upper[d] = upper != nullptr ? static_cast<acc_t>(upper[d]) : acc_t(0);
    grid.dims[d] = dims != nullptr ? dims[d] : 0;
  }
  grid.has_upper = upper != nullptr;
  return grid;
}

}  // namespace pointops
