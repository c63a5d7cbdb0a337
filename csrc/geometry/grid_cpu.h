// The grid of grid.h on the CPU: one per cloud, built on the calling thread with the CPU parallel
// hash array (sort of cell keys + run-length encoding + scan), then a cell table in which
// cell_start[c] is the sorted position of the first point with cell key >= c. The CUDA twin,
// grid_cuda.cuh, builds the same structure for a whole batch at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>

#include "common/hash_array_cpu.h"
#include "geometry/grid.h"

namespace pointops {
namespace neighbors {

template <typename acc_t>
struct CpuGrid {
  GridCloud grid;
  std::vector<int32_t> cell_start;         // cells + 1
  std::vector<SortedPoint<acc_t>> points;  // the cloud's finite points, by cell, then index
};

// cloud: (n, 3) rows of one cloud. min_size: the smallest cell edge (ball query's radius, or 0);
// max_cells: the cell budget. refine_target > 0 (kNN: the points a cell should hold) refines the
// cell size to the density a typical point sees (refined_cell_size in grid.h), within
// kRefineBudget * max_cells cells.
// The trimmed box of grid.h ("The grid's box") of a cloud whose `finite` finite points span
// [lo, hi]: lo and hi are narrowed in place.
template <typename acc_t>
void trim_box_cpu(const acc_t* cloud, int64_t n, int64_t finite, double lo[3], double hi[3]) {
  const int64_t near_trim = finite / kTrimDivisor;
  const int64_t far_trim = finite / kTrimFarDivisor;
  if (far_trim == 0) return;
  std::vector<int32_t> hist(static_cast<size_t>(3 * kBoxBins));
  for (const bool linear : {false, true}) {
    std::fill(hist.begin(), hist.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const acc_t* p = cloud + i * 3;
      if (!is_finite3(p[0], p[1], p[2])) continue;
      for (int d = 0; d < 3; ++d) {
        const double v = static_cast<double>(p[d]);
        ++hist[d * kBoxBins + (linear ? linear_bin(v, lo[d], hi[d]) : magnitude_bin(v))];
      }
    }
    for (int d = 0; d < 3; ++d) {
      int near_first = 0, near_last = 0, far_first = 0, far_last = 0;
      trimmed_bins(hist.data() + d * kBoxBins, near_trim, &near_first, &near_last);
      trimmed_bins(hist.data() + d * kBoxBins, far_trim, &far_first, &far_last);
      narrow_axis_trimmed(linear, near_first, near_last, far_first, far_last, lo + d, hi + d);
    }
  }
}

template <typename acc_t>
CpuGrid<acc_t> build_grid_cpu(const acc_t* cloud, int64_t n, double min_size, int64_t max_cells,
                              double refine_target = 0.0) {
  double lo[3] = {0.0, 0.0, 0.0};
  double hi[3] = {0.0, 0.0, 0.0};
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const acc_t* p = cloud + i * 3;
    if (!is_finite3(p[0], p[1], p[2])) continue;
    for (int d = 0; d < 3; ++d) {
      const double v = static_cast<double>(p[d]);
      if (finite == 0 || v < lo[d]) lo[d] = v;
      if (finite == 0 || v > hi[d]) hi[d] = v;
    }
    ++finite;
  }
  const bool any = finite > 0;
  trim_box_cpu(cloud, n, finite, lo, hi);
  CpuGrid<acc_t> out;
  out.grid = make_grid_cloud(lo, hi, any, min_size, max_cells, 0);
  if (refine_target > 0.0 && any) {
    const GridCloud first = out.grid;
    std::vector<int64_t> counts(static_cast<size_t>(first.cells()), 0);
    for (int64_t i = 0; i < n; ++i) {
      const acc_t* p = cloud + i * 3;
      if (!is_finite3(p[0], p[1], p[2])) continue;
      ++counts[first.point_key(static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]))];
    }
    double sum_squares = 0.0;
    double count = 0.0;
    for (const int64_t c : counts) {
      sum_squares += static_cast<double>(c) * static_cast<double>(c);
      count += static_cast<double>(c);
    }
    const double size = refined_cell_size(first, sum_squares, count, refine_target);
    out.grid = make_grid_cloud(lo, hi, any, size, kRefineBudget * max_cells, 0);
  }
  const GridCloud& g = out.grid;
  const int64_t cells = g.cells();
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const acc_t* p = cloud + i * 3;
    keys[i] = is_finite3(p[0], p[1], p[2])
                  ? g.point_key(static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]))
                  : cells;
  }
  const HashArrayCpu h = build_hash_array_cpu(keys.data(), n, cells);
  const int64_t runs = h.num_unique();
  const int64_t stored = runs > 0 ? h.starts[runs - 1] + h.counts[runs - 1] : 0;
  out.cell_start.resize(static_cast<size_t>(cells + 1));
  int64_t r = 0;
  for (int64_t c = 0; c <= cells; ++c) {
    while (r < runs && h.unique_keys[r] < c) ++r;
    out.cell_start[c] = static_cast<int32_t>(r < runs ? h.starts[r] : stored);
  }
  out.points.resize(static_cast<size_t>(stored));
  for (int64_t j = 0; j < stored; ++j) {
    const int64_t i = h.perm[j];
    const acc_t* p = cloud + i * 3;
    out.points[j] = make_point(p[0], p[1], p[2], i);
  }
  return out;
}

// Every cloud's grid (clouds in parallel). min_size and budget as above, per cloud.
template <typename acc_t>
std::vector<CpuGrid<acc_t>> build_grids_cpu(const acc_t* points, const CloudRows& rows, double min_size,
                                            const CellBudget& budget, double refine_target = 0.0) {
  std::vector<CpuGrid<acc_t>> grids(static_cast<size_t>(rows.batch));
  at::parallel_for(0, rows.batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t n = rows.length(b);
      grids[b] = build_grid_cpu(points + rows.begin(b) * 3, n, min_size, budget.cells(n), refine_target);
    }
  });
  return grids;
}

// The query rows in the order to search them: each cloud's queries sorted by their cell in the
// cloud's grid (non-finite ones last), so consecutive queries read the same cells from cache.
// Rows in no cloud keep their place (they are not searched).
template <typename acc_t>
std::vector<int64_t> query_order_cpu(const acc_t* queries, const CloudRows& rows, int64_t total_rows,
                                     const std::vector<CpuGrid<acc_t>>& grids) {
  std::vector<int64_t> order(static_cast<size_t>(total_rows));
  for (int64_t i = 0; i < total_rows; ++i) order[i] = i;
  at::parallel_for(0, rows.batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = rows.begin(b);
      const int64_t m = rows.length(b);
      const GridCloud& g = grids[b].grid;
      const int64_t cells = g.cells();
      std::vector<int64_t> keys(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) {
        const acc_t* q = queries + (begin + i) * 3;
        keys[i] = is_finite3(q[0], q[1], q[2])
                      ? g.point_key(static_cast<double>(q[0]), static_cast<double>(q[1]), static_cast<double>(q[2]))
                      : cells;
      }
      const HashArrayCpu h = build_hash_array_cpu(keys.data(), m, cells);
      for (int64_t i = 0; i < m; ++i) order[begin + i] = begin + h.perm[i];
    }
  });
  return order;
}

// The points in row order as the brute-force searches read them (x = NaN where absent).
template <typename acc_t>
std::vector<SortedPoint<acc_t>> row_points_cpu(const acc_t* points, const CloudRows& rows, int64_t total_rows) {
  std::vector<SortedPoint<acc_t>> out(static_cast<size_t>(total_rows));
  at::parallel_for(0, rows.batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = rows.begin(b);
      const int64_t n = rows.length(b);
      for (int64_t i = 0; i < n; ++i) {
        const acc_t* p = points + (begin + i) * 3;
        out[begin + i] = make_point(p[0], p[1], p[2], i);
      }
    }
  });
  return out;
}

}  // namespace neighbors
}  // namespace pointops
