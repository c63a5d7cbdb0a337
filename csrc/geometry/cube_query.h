// Cube query: the contract shared by the CPU and CUDA kernels, and the search both run.
//
// cube_query_packed(queries, query_offsets, points, offsets, distance, k, ball=False)
//     -> (indices, counts)
//   queries, query_offsets, points, offsets: packed clouds, laid out as knn_packed (knn.h):
//                  queries (Mq, 3), points (P, 3), offsets (B + 1,) int64 each.
//   distance       finite, >= 0; rounded to the compute type (float32, or float64 for float64
//                  points).
//   k              the most hits kept per query, >= 0.
//   indices        (Mq, k) int64: the first k hits of the query's cloud in index order
//                  (ascending rows of the packed points), then -1.
//   counts         (Mq,) int64: every hit of the query, kept or not; counts > k says the row was
//                  cut, and by how much (a second call with k = counts.max() keeps them all).
//
// Hits. With d = q - p on each axis (one rounded subtraction):
//   * cube (ball = false): -distance <= d <= distance on all three axes. This is the
//     neighbourhood of PV-RCNN++'s vector pool (OpenPCDet's vector_pool_gpu.cu skips a point when
//     fabs(local) > distance on an axis); |q - p| and |p - q| are the same rounded number.
//   * ball (ball = true): (dx*dx + dy*dy) + dz*dz <= distance * distance (common/
//     squared_distance.h; the square rounded in the compute type): the closed ball of the vector
//     pool's neighbor_type 1, where ball_query's ball is open (< radius^2).
// Points with a NaN/Inf coordinate are never hits; queries with one, and query rows outside
// [query_offsets[0], query_offsets[B]), get a row of -1 and count 0. Offsets are clamped to
// [0, rows] and made non-decreasing by a running maximum, as knn_packed's.
//
// The search (cube_grid below) uses ball_query's grid (grid.h): cells at least `distance` wide,
// so a query's cube meets at most 4 cells per axis; every candidate point of those cells is
// tested (the count needs them all), and the first k hits are found by walking the cells
// together in index order, so they reach the list almost in order. Identical results to a
// brute-force scan on either backend.
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <limits>
#include <tuple>

#include "common/squared_distance.h"
#include "geometry/grid.h"

namespace pointops {

std::tuple<at::Tensor, at::Tensor> cube_query_packed_cpu(const at::Tensor& queries, const at::Tensor& query_offsets,
                                                         const at::Tensor& points, const at::Tensor& offsets,
                                                         double distance, int64_t k, bool ball);

namespace neighbors {

// Checks of distance and k shared by both backends (defined in cube_query_cpu.cpp); the caller
// checks the clouds (check_packed_pair).
void check_cube_query_args(const at::Tensor& points, int64_t rows, double distance, int64_t k);

// The hit rule above, and which cells can hold a hit.
template <typename acc_t>
struct CubeTest {
  acc_t distance;
  acc_t distance2;  // distance * distance, rounded (the ball)
  bool ball;

  POINTOPS_HOST_DEVICE bool hit(acc_t dx, acc_t dy, acc_t dz) const {
    if (ball) return squared_norm3(dx, dy, dz) <= distance2;
    return dx <= distance && -distance <= dx && dy <= distance && -distance <= dy && dz <= distance && -distance <= dz;
  }
  POINTOPS_HOST_DEVICE bool hit(acc_t qx, acc_t qy, acc_t qz, const SortedPoint<acc_t>& p) const {
    return hit(subtract(qx, p.x), subtract(qy, p.y), subtract(qz, p.z));
  }
  // Can a point whose exact distance from the query is >= gx, gy, gz on the three axes be a hit?
  // Its rounded differences are at least round_down(g) in magnitude (grid.h's lower bounds).
  POINTOPS_HOST_DEVICE bool may_hit(double gx, double gy, double gz) const {
    if (ball) return distance_bound<acc_t>(gx, gy, gz) <= distance2;
    return round_down<acc_t>(gx) <= distance && round_down<acc_t>(gy) <= distance && round_down<acc_t>(gz) <= distance;
  }
};

// One query's hits in one cloud's grid: pushes them (cloud indices) into `list`, which keeps the
// k smallest, and returns how many there are. The candidate cells are those of the box of
// half-width distance (1 + 2^-16) + 4 slack around the query (ball_box) that may_hit allows.
// Where they are at most kBallCells, they are walked together through windows of consecutive
// indices, each cell from where the last window left it (as ball_grid), so hits reach the list
// nearly in ascending order; once the list is full and every point left has an index above its
// last, the rest is only counted. More cells (coordinates some 2^40 cells from the grid's origin)
// are scanned cell by cell.
template <typename acc_t, typename List>
POINTOPS_HOST_DEVICE inline int64_t cube_grid(const GridCloud& g, const int32_t* cell_start,
                                              const SortedPoint<acc_t>* points, acc_t qx, acc_t qy, acc_t qz,
                                              const CubeTest<acc_t>& test, List& list) {
  const double q[3] = {static_cast<double>(qx), static_cast<double>(qy), static_cast<double>(qz)};
  const double slack = query_slack(g, q);
  const double reach = static_cast<double>(test.distance) * (1.0 + 1.0 / 65536.0) + 4.0 * slack;
  int64_t lo[3], hi[3];
  ball_box(g, q, reach, lo, hi);  // clamped into the grid: its outer cells hold the points beyond it
  const int64_t nx = hi[0] - lo[0] + 1;
  const int64_t ny = hi[1] - lo[1] + 1;
  const int64_t nz = hi[2] - lo[2] + 1;
  int64_t hits = 0;
  if (nx > kBallCells || ny > kBallCells || nz > kBallCells || nx * ny * nz > kBallCells) {
    for (int64_t z = lo[2]; z <= hi[2]; ++z) {
      const double gz = g.axis_gap(2, q[2], z, z, slack);
      for (int64_t y = lo[1]; y <= hi[1]; ++y) {
        const double gy = g.axis_gap(1, q[1], y, y, slack);
        const int64_t row = g.base + (z * g.dims[1] + y) * g.dims[0];
        for (int64_t x = lo[0]; x <= hi[0]; ++x) {
          if (!test.may_hit(g.axis_gap(0, q[0], x, x, slack), gy, gz)) continue;
          for (int64_t j = cell_start[row + x]; j < cell_start[row + x + 1]; ++j) {
            const SortedPoint<acc_t> p = points[j];
            if (test.hit(qx, qy, qz, p)) {
              ++hits;
              list.push(p.index);
            }
          }
        }
      }
    }
    return hits;
  }
  int32_t cursor[kBallCells];
  int32_t stop[kBallCells];
  int cells = 0;
  int64_t candidates = 0;
  int64_t first_index = std::numeric_limits<int64_t>::max();
  int64_t last_index = -1;
  for (int64_t z = lo[2]; z <= hi[2]; ++z) {
    const double gz = g.axis_gap(2, q[2], z, z, slack);
    for (int64_t y = lo[1]; y <= hi[1]; ++y) {
      const double gy = g.axis_gap(1, q[1], y, y, slack);
      const int64_t row = g.base + (z * g.dims[1] + y) * g.dims[0];
      for (int64_t x = lo[0]; x <= hi[0]; ++x) {
        const int32_t begin = cell_start[row + x];
        const int32_t end = cell_start[row + x + 1];
        if (end == begin || !test.may_hit(g.axis_gap(0, q[0], x, x, slack), gy, gz)) continue;
        cursor[cells] = begin;
        stop[cells] = end;
        ++cells;
        candidates += end - begin;
        const int64_t a = points[begin].index;
        const int64_t b = points[end - 1].index;
        if (a < first_index) first_index = a;
        if (b > last_index) last_index = b;
      }
    }
  }
  if (cells == 0) return 0;
  const int64_t span = last_index - first_index + 1;
  int64_t width = candidates <= kBallWindowPoints ? span : (span * kBallWindowPoints + candidates - 1) / candidates;
  if (width < 1) width = 1;
  // Every point with an index below `window` has been visited.
  int64_t window = first_index;
  while (window < list.bound()) {
    const int64_t end_index = window + width;
    int64_t next = std::numeric_limits<int64_t>::max();  // the smallest index not yet visited
    for (int c = 0; c < cells; ++c) {
      int32_t j = cursor[c];
      const int32_t stop_c = stop[c];
      for (; j < stop_c; ++j) {
        const SortedPoint<acc_t> p = points[j];
        const int64_t i = p.index;
        if (i >= end_index) {
          if (i < next) next = i;
          break;
        }
        if (test.hit(qx, qy, qz, p)) {
          ++hits;
          list.push(i);
        }
      }
      cursor[c] = j;
    }
    if (next == std::numeric_limits<int64_t>::max()) return hits;
    window = next;
  }
  // The list is full and no point left can enter it: count the rest.
  for (int c = 0; c < cells; ++c) {
    for (int32_t j = cursor[c]; j < stop[c]; ++j) {
      if (test.hit(qx, qy, qz, points[j])) ++hits;
    }
  }
  return hits;
}

}  // namespace neighbors
}  // namespace pointops
