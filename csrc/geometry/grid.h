// The neighbourhood search shared by knn, ball_query and three_nn, on host and device: cloud
// layouts, the uniform grid, candidate lists and the searches themselves. The CPU kernels
// (grid_cpu.h builds the grid there) and the CUDA kernels (grid_cuda.cuh) call the same search
// functions, so both backends visit candidates by the same rules; and because every search
// returns exactly what a brute-force scan returns (see below), the result never depends on the
// strategy (brute force or grid), the grid's cell size or the order candidates are visited in.
//
// Exactness. A candidate's squared distance is common/squared_distance.h's formula in the compute
// type acc_t (float32, or float64 for float64 points). kNN keeps the k smallest (distance, index)
// pairs in lexicographic order, which is a property of the set of points, not of the visit
// order. Ball query keeps the k smallest indices among points that pass its hit rule (BallTest:
// distance < radius^2, and >= min_radius^2 unless 0). The grid only decides which points need
// not be looked at, and it only skips a point when a lower bound L on that point's *computed*
// squared distance proves it cannot enter the result: kNN skips when L > the current k-th
// distance, ball query when L >= radius^2.
//
// The lower bounds. A point is in cell c = clamp(floor((p - origin) / size), 0, dims - 1) on each
// axis, computed in float64. Rounding makes this a fuzzy statement about p, so every bound below
// widens the cell edges by `slack`, 2^-40 of the magnitudes involved (float64 rounding errors are
// 2^-53 of them; the margin is thousands of times larger and still far below any cell size).
// For a set of cells that differs from the query's by at least `g` (float64, >= 0) on an axis:
//   * the exact |q - p| on that axis is >= g,
//   * so the computed difference, a rounding of it, is >= rd(g), the compute-type value just
//     at or below g (rounding is monotonic and rd(g) is representable),
//   * and each later step of the formula is a monotonic rounding of non-negative terms, so the
//     computed squared distance is >= the same formula applied to the per-axis rd(g)s.
// That last expression, evaluated with the very same rounded operations, is L.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/clouds.h"
#include "common/float_bits.h"
#include "common/portable_math.h"
#include "common/squared_distance.h"

// Unrolls the fixed-size list loops (so their arrays live in registers on CUDA).
#if defined(__CUDACC__)
#define POINTOPS_UNROLL _Pragma("unroll")
#else
#define POINTOPS_UNROLL _Pragma("GCC unroll 32")
#endif

namespace pointops {
namespace neighbors {

// ---- Cloud layouts --------------------------------------------------------------------------

// Where cloud b's rows are among the rows of a flattened (rows, 3) array, padded or packed.
struct CloudRows {
  // padded: lengths (B,) or nullptr (all rows_per_cloud); packed: offsets (B + 1,), already made
  // non-decreasing and clamped to [0, rows] by the caller (effective_offsets in knn.h).
  const int64_t* counts;
  int64_t batch;
  int64_t rows_per_cloud;  // padded: N; packed: unused
  bool packed;

  POINTOPS_HOST_DEVICE int64_t begin(int64_t b) const { return packed ? counts[b] : b * rows_per_cloud; }
  POINTOPS_HOST_DEVICE int64_t length(int64_t b) const {
    return packed ? counts[b + 1] - counts[b] : cloud_length(counts, b, rows_per_cloud);
  }
  // Padded indices count within the cloud, packed ones count rows of the packed array.
  POINTOPS_HOST_DEVICE int64_t index_base(int64_t b) const { return packed ? counts[b] : 0; }

  // The cloud holding a row and the row's index within it, or -1 when the row is in none
  // (past lengths[b], or outside [offsets[0], offsets[B])).
  POINTOPS_HOST_DEVICE int64_t cloud_of(int64_t row, int64_t* local) const {
    if (!packed) {
      const int64_t b = row / rows_per_cloud;
      *local = row - b * rows_per_cloud;
      return *local < length(b) ? b : -1;
    }
    // The last b in [0, B] with counts[b] <= row; row is in cloud b iff b < B.
    int64_t lo = 0;
    int64_t hi = batch + 1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (counts[mid] <= row) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const int64_t b = lo - 1;
    if (b < 0 || b >= batch) return -1;
    *local = row - counts[b];
    return b;
  }
};

// ---- Points as the searches read them ---------------------------------------------------------

// A point in the compute type with its index within its cloud: 16 bytes for float32 (one
// vector load on CUDA), 32 for float64. Points with a NaN/Inf coordinate are stored, where they
// are stored at all (the brute-force copy), with x = NaN: every distance to them is NaN, and a
// NaN distance never enters a result.
template <typename acc_t>
struct SortedPoint;

template <>
struct alignas(16) SortedPoint<float> {
  float x, y, z;
  int32_t index;
};

template <>
struct alignas(32) SortedPoint<double> {
  double x, y, z;
  int64_t index;
};

template <typename acc_t>
POINTOPS_HOST_DEVICE inline bool is_finite3(acc_t x, acc_t y, acc_t z) {
#if defined(__CUDA_ARCH__)
  return isfinite(x) && isfinite(y) && isfinite(z);
#else
  return std::isfinite(x) && std::isfinite(y) && std::isfinite(z);
#endif
}

template <typename acc_t>
POINTOPS_HOST_DEVICE inline SortedPoint<acc_t> make_point(acc_t x, acc_t y, acc_t z, int64_t index) {
  SortedPoint<acc_t> p;
  p.x = is_finite3(x, y, z) ? x : std::numeric_limits<acc_t>::quiet_NaN();
  p.y = y;
  p.z = z;
  p.index = static_cast<decltype(p.index)>(index);
  return p;
}

// ---- The grid ---------------------------------------------------------------------------------

// Bounds are widened by kSlackScale times the magnitudes involved (see the header comment).
constexpr double kSlackScale = 1.0 / 1099511627776.0;  // 2^-40
// Query cells are clamped to +-2^40 so that far-away queries keep integer cell arithmetic exact.
constexpr double kMaxQueryCell = 1099511627776.0;

// One cloud's grid: cubic cells of edge `size` from `origin` (the bounding box's low corner of
// the cloud's finite points), dims[0] * dims[1] * dims[2] cells numbered x fastest, whose keys
// are base + cell in the grid's cell table.
struct GridCloud {
  double origin[3];
  double size;
  int64_t dims[3];
  int64_t base;
  double slack;  // kSlackScale * (|origin| + extent): the query adds its own magnitude

  POINTOPS_HOST_DEVICE int64_t cells() const { return dims[0] * dims[1] * dims[2]; }

  // The cell of a stored point on axis d (clamped into the grid).
  POINTOPS_HOST_DEVICE int64_t point_cell(int d, double v) const {
    const double f = floor_value((v - origin[d]) / size);
    if (!(f >= 0.0)) return 0;
    if (f > static_cast<double>(dims[d] - 1)) return dims[d] - 1;
    return static_cast<int64_t>(f);
  }

  POINTOPS_HOST_DEVICE int64_t point_key(double x, double y, double z) const {
    return base + (point_cell(2, z) * dims[1] + point_cell(1, y)) * dims[0] + point_cell(0, x);
  }

  // The first ring (the cells at Chebyshev distance R from the query's cell cq, which may lie
  // outside the grid) that meets the grid: 0 when cq is in it.
  POINTOPS_HOST_DEVICE int64_t first_ring(const int64_t cq[3]) const {
    int64_t ring = 0;
    for (int d = 0; d < 3; ++d) {
      if (-cq[d] > ring) ring = -cq[d];
      if (cq[d] - (dims[d] - 1) > ring) ring = cq[d] - (dims[d] - 1);
    }
    return ring;
  }
  POINTOPS_HOST_DEVICE int64_t widest() const {
    int64_t w = dims[0];
    if (dims[1] > w) w = dims[1];
    if (dims[2] > w) w = dims[2];
    return w;
  }

  // The cell of a query on axis d, which may lie outside the grid.
  POINTOPS_HOST_DEVICE int64_t query_cell(int d, double v) const {
    double f = floor_value((v - origin[d]) / size);
    if (!(f >= -kMaxQueryCell)) f = -kMaxQueryCell;
    if (f > kMaxQueryCell) f = kMaxQueryCell;
    return static_cast<int64_t>(f);
  }

  // A lower bound on |q - p| along axis d for every point stored in cells [lo, hi] of that axis
  // (0 <= lo <= hi < dims[d]). Points of cell c >= 1 have p >= origin + c * size (less slack);
  // points of cell c <= dims - 2 have p < origin + (c + 1) * size (plus slack); the outermost
  // cells also hold the points that rounding clamped into them, so they bound nothing outwards.
  POINTOPS_HOST_DEVICE double axis_gap(int d, double q, int64_t lo, int64_t hi, double slack_q) const {
    double gap = 0.0;
    if (lo > 0) {
      const double edge = origin[d] + static_cast<double>(lo) * size - slack_q;
      if (edge - q > gap) gap = edge - q;
    }
    if (hi < dims[d] - 1) {
      const double edge = origin[d] + static_cast<double>(hi + 1) * size + slack_q;
      if (q - edge > gap) gap = q - edge;
    }
    return gap;
  }

  // A lower bound on |q - p| along axis d for every point stored in a cell outside [lo, hi]
  // (+inf when there is none).
  POINTOPS_HOST_DEVICE double outside_gap(int d, double q, int64_t lo, int64_t hi, double slack_q) const {
    double gap = std::numeric_limits<double>::infinity();
    if (lo > 0) {  // cells <= lo - 1: p < origin + lo * size + slack
      const double edge = origin[d] + static_cast<double>(lo) * size + slack_q;
      const double g = q - edge > 0.0 ? q - edge : 0.0;
      if (g < gap) gap = g;
    }
    if (hi < dims[d] - 1) {  // cells >= hi + 1: p >= origin + (hi + 1) * size - slack
      const double edge = origin[d] + static_cast<double>(hi + 1) * size - slack_q;
      const double g = edge - q > 0.0 ? edge - q : 0.0;
      if (g < gap) gap = g;
    }
    return gap;
  }
};

// ---- The grid's box ----------------------------------------------------------------------------
//
// A grid over the bounding box fails a cloud with a few far points: one stray return 1 km from a
// 1 m cloud puts the whole cloud in one cell, and every search scans it. So the grid spans a
// trimmed box: on each axis, from the histogram bin that holds the (trim + 1)-th lowest of the
// cloud's n finite points to the bin of the (trim + 1)-th highest, within the bounding box. Each
// axis tries two trims, n / kTrimDivisor and n / kTrimFarDivisor, and keeps the wider box unless
// the narrower one is less than half as wide: a few stray points cost nothing either way, while
// a share of noise spread over kilometres (1 % of a scan: rain, dust, multipath) would otherwise
// keep the box kilometres wide and the dense part of the cloud in a few cells. Two histograms of
// kBoxBins bins per axis find it: the first by magnitude (the top 11 order-preserving bits of the
// value's float32 rounding: sign, exponent and 2 mantissa bits, so the bins are scale-free and an
// outlier at 1e30 costs nothing), the second linear over the first one's box. Points outside the
// box are clamped into its outer cells, which bound nothing outwards (GridCloud::axis_gap): the
// searches stay exact, and only their speed depends on the box. A cloud of fewer than
// kTrimFarDivisor points keeps its bounding box. The CUDA grid builds (grid_cuda.cuh's
// warp_trim_axis) take the same two trims: with the near trim alone, 1 % of a 100k cloud spread
// over kilometres made CUDA knn 43-84x slower than the clean cloud (docs/performance.md, "far
// noise"). The box decides only speed.
constexpr int kBoxBins = 2048;
constexpr int64_t kTrimDivisor = 1024;
constexpr int64_t kTrimFarDivisor = 64;

POINTOPS_HOST_DEVICE inline int magnitude_bin(double v) {
  return static_cast<int>(ordered_bits(static_cast<float>(v)) >> 21);
}

// The linear bin of v in [lo, hi] (clamped; bin 0 when hi == lo).
POINTOPS_HOST_DEVICE inline int linear_bin(double v, double lo, double hi) {
  const double t = (v - lo) / (hi - lo) * static_cast<double>(kBoxBins);
  if (!(t >= 1.0)) return 0;
  if (t >= static_cast<double>(kBoxBins - 1)) return kBoxBins - 1;
  return static_cast<int>(t);
}

// The first bin where the count from below exceeds trim, and the last where the count from above
// does (the serial walk; CUDA's warps find the same bins with a scan).
POINTOPS_HOST_DEVICE inline void trimmed_bins(const int32_t* hist, int64_t trim, int* first, int* last) {
  int64_t below = 0;
  int b = 0;
  while (b < kBoxBins - 1 && (below += hist[b]) <= trim) ++b;
  *first = b;
  int64_t above = 0;
  b = kBoxBins - 1;
  while (b > 0 && (above += hist[b]) <= trim) --b;
  *last = b;
}

// The box [lo, hi] of one axis narrowed to the bins [first, last] of a histogram (`linear`: over
// [lo, hi]; otherwise by magnitude), staying within [lo, hi] (bin ends that are NaN patterns, or
// that the rounding to float32 puts outside, leave it as it was).
POINTOPS_HOST_DEVICE inline void narrow_axis(bool linear, int first, int last, double* lo, double* hi) {
  double low, high;
  if (linear) {
    const double width = *hi - *lo;
    low = *lo + width * (static_cast<double>(first) / kBoxBins);
    high = *lo + width * (static_cast<double>(last + 1) / kBoxBins);
  } else {
    low = static_cast<double>(ordered_float(static_cast<uint32_t>(first) << 21));
    high = static_cast<double>(ordered_float((static_cast<uint32_t>(last) << 21) | 0x1FFFFFu));
  }
  // Written so that NaN keeps the old end.
  const double new_lo = low > *lo && low <= *hi ? low : *lo;
  const double new_hi = high < *hi && high >= new_lo ? high : *hi;
  *lo = new_lo;
  *hi = new_hi;
}

// One axis of the box narrowed by the bins of both trims (near: n / kTrimDivisor, far: n /
// kTrimFarDivisor), keeping the near one's unless it is more than twice as wide as the far one's.
POINTOPS_HOST_DEVICE inline void narrow_axis_trimmed(bool linear, int near_first, int near_last, int far_first,
                                                     int far_last, double* lo, double* hi) {
  double near_lo = *lo, near_hi = *hi, far_lo = *lo, far_hi = *hi;
  narrow_axis(linear, near_first, near_last, &near_lo, &near_hi);
  narrow_axis(linear, far_first, far_last, &far_lo, &far_hi);
  const bool far = near_hi - near_lo > 2.0 * (far_hi - far_lo);
  *lo = far ? far_lo : near_lo;
  *hi = far ? far_hi : near_hi;
}

// Cells of edge s over a box of extents e: prod over axes of max(1, ceil(e / s)).
POINTOPS_HOST_DEVICE inline double grid_cells_for(const double extent[3], double s) {
  double cells = 1.0;
  for (int d = 0; d < 3; ++d) {
    const double n = ceil(extent[d] / s);
    cells *= n > 1.0 ? n : 1.0;
  }
  return cells;
}

// The grid of one cloud whose finite points span [lo, hi] (`any` false: no finite point).
// Cells are as small as max_cells allows (the smallest edge, to 2^-30 relative, for which the
// box needs at most max_cells cells: a flat or thin cloud gets more cells along its long axes),
// but no smaller than min_size (ball query asks for cells of at least its radius).
POINTOPS_HOST_DEVICE inline GridCloud make_grid_cloud(const double lo[3], const double hi[3], bool any, double min_size,
                                                      int64_t max_cells, int64_t base) {
  GridCloud g;
  g.base = base;
  g.size = 1.0;
  double extent[3];
  double widest = 0.0;
  for (int d = 0; d < 3; ++d) {
    g.origin[d] = any ? lo[d] : 0.0;
    g.dims[d] = 1;
    extent[d] = any ? hi[d] - lo[d] : 0.0;
    if (extent[d] > widest) widest = extent[d];
  }
  const bool finite_box = widest <= 1.7e308;  // false for Inf and NaN: one cell holds everything
  if (any && finite_box && widest > 0.0) {
    const double budget = static_cast<double>(max_cells < 1 ? 1 : max_cells);
    double small = widest / budget;  // at least `budget` cells along the widest axis
    double large = widest;           // one cell
    if (grid_cells_for(extent, small) <= budget) {
      large = small;
    } else {
      for (int it = 0; it < 64 && large - small > large * 9.3e-10; ++it) {
        const double mid = 0.5 * (small + large);
        if (grid_cells_for(extent, mid) <= budget) {
          large = mid;
        } else {
          small = mid;
        }
      }
    }
    double size = large > min_size ? large : min_size;
    if (!(size > 0.0) || size > 1.7e308) size = widest;
    g.size = size;
    for (int d = 0; d < 3; ++d) {
      const double n = ceil(extent[d] / size);
      g.dims[d] = n > 1.0 ? static_cast<int64_t>(n) : 1;
    }
  } else if (any && finite_box && min_size > 0.0 && min_size <= 1.7e308) {
    g.size = min_size;  // one point, or all points equal: one cell
  }
  double scale = 0.0;
  int64_t widest_dims = 1;
  for (int d = 0; d < 3; ++d) {
    const double o = g.origin[d] < 0 ? -g.origin[d] : g.origin[d];
    if (o > scale) scale = o;
    if (g.dims[d] > widest_dims) widest_dims = g.dims[d];
  }
  g.slack = kSlackScale * (scale + static_cast<double>(widest_dims + 1) * g.size);
  return g;
}

// kNN refines its cells to the density that a typical point sees. The first grid, sized from the
// bounding box alone, is right for clouds of even density; in a LiDAR scan most points crowd a
// small part of the box and share cells with hundreds of others. The occupancy a typical point
// sees is sum(count^2) / sum(count) over the first grid's cells (about target + 1 for an even
// cloud, whose counts are Poisson). When it exceeds twice that, the edge shrinks by
// ((target + 1) / occupancy)^0.4 (between the exponent 1/2 of points on surfaces and 1/3 of
// points filling a volume), within a budget of kRefineBudget times the first one.
constexpr int64_t kRefineBudget = 16;

POINTOPS_HOST_DEVICE inline double refined_cell_size(const GridCloud& first, double sum_squares, double count,
                                                     double target) {
  if (!(count > 0.0)) return first.size;
  const double occupancy = sum_squares / count;
  if (!(occupancy > 2.0 * (target + 1.0))) return first.size;
  return first.size * pow((target + 1.0) / occupancy, 0.4);
}

// The slack for one query: the cloud's plus the query's own magnitude.
POINTOPS_HOST_DEVICE inline double query_slack(const GridCloud& g, const double q[3]) {
  double m = 0.0;
  for (int d = 0; d < 3; ++d) {
    const double a = q[d] < 0 ? -q[d] : q[d];
    if (a > m) m = a;
  }
  return g.slack + kSlackScale * m;
}

// The largest compute-type value <= g (g >= 0): the rd() of the header comment.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t round_down(double g);

template <>
POINTOPS_HOST_DEVICE inline double round_down<double>(double g) {
  return g;
}

template <>
POINTOPS_HOST_DEVICE inline float round_down<float>(double g) {
  float f = static_cast<float>(g);
  if (static_cast<double>(f) > g) {
#if defined(__CUDA_ARCH__)
    f = nextafterf(f, 0.0f);
#else
    f = std::nextafter(f, 0.0f);
#endif
  }
  return f;
}

// L for a box with per-axis gaps (see the header comment).
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t distance_bound(double gx, double gy, double gz) {
  return squared_norm3(round_down<acc_t>(gx), round_down<acc_t>(gy), round_down<acc_t>(gz));
}

// L for a region that differs by g on one (any) axis: the first product of the formula alone
// is a lower bound, whichever axis it is, since the other terms are non-negative.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t distance_bound(double g) {
  const acc_t r = round_down<acc_t>(g);
  return multiply(r, r);
}

// ---- Candidate lists --------------------------------------------------------------------------

// (d, i) comes before (D, I): smaller distance, then lower index. A NaN distance comes before
// nothing, so it never enters a list.
template <typename acc_t, typename index_t>
POINTOPS_HOST_DEVICE inline bool comes_before(acc_t d, index_t i, acc_t dd, index_t ii) {
  return d < dd || (d == dd && i < ii);
}

// The k best (distance, index) pairs, ascending, in K >= k fixed slots (registers on CUDA: every
// index below is a compile-time constant once the loops unroll). The first K - k slots hold
// (-inf, -1), which nothing comes before, so the list behaves as one of size k and its worst
// kept entry is always slot K - 1. Empty slots are (+inf, INT32_MAX).
template <typename acc_t, int K>
struct FixedKnnList {
  acc_t dist[K];
  int32_t index[K];

  // `limit`: the largest squared distance kept (+inf: any); empty slots start at (limit,
  // INT32_MAX), so the bound prunes the search from the start.
  POINTOPS_HOST_DEVICE void init(int64_t k, acc_t limit = std::numeric_limits<acc_t>::infinity()) {
    POINTOPS_UNROLL
    for (int j = 0; j < K; ++j) {
      const bool pad = j < K - k;
      dist[j] = pad ? -std::numeric_limits<acc_t>::infinity() : limit;
      index[j] = pad ? -1 : std::numeric_limits<int32_t>::max();
    }
  }
  POINTOPS_HOST_DEVICE acc_t bound() const { return dist[K - 1]; }
  POINTOPS_HOST_DEVICE void finish() {}  // always sorted

  POINTOPS_HOST_DEVICE void push(acc_t d, int64_t i64) {
    const int32_t i = static_cast<int32_t>(i64);
    if (!comes_before(d, i, dist[K - 1], index[K - 1])) return;
    POINTOPS_UNROLL
    for (int j = K - 1; j > 0; --j) {
      if (comes_before(d, i, dist[j - 1], index[j - 1])) {
        dist[j] = dist[j - 1];
        index[j] = index[j - 1];
      } else if (comes_before(d, i, dist[j], index[j])) {
        dist[j] = d;
        index[j] = i;
      }
    }
    if (comes_before(d, i, dist[0], index[0])) {
      dist[0] = d;
      index[0] = i;
    }
  }

  // Entry j < k of the result: (index or -1, distance or +inf).
  POINTOPS_HOST_DEVICE int64_t result_index(int64_t k, int64_t j) const {
    const int32_t i = index[K - k + j];
    return i == std::numeric_limits<int32_t>::max() ? -1 : i;
  }
  POINTOPS_HOST_DEVICE acc_t result_distance(int64_t k, int64_t j) const {
    return index[K - k + j] == std::numeric_limits<int32_t>::max() ? std::numeric_limits<acc_t>::infinity()
                                                                   : dist[K - k + j];
  }
};

// The same list for any k, kept in memory the caller owns (the output row itself). While the
// search runs the row is a max-heap on (distance, index): slot 0 holds the worst kept pair, which
// is the bound, and a pair that comes before it replaces it and sinks, log2(k) steps, where a
// sorted row would shift up to k pairs per insertion; finish() sorts the row ascending in place
// (heap sort). Empty slots are (limit, INT64_MAX), which every kept pair comes before.
template <typename acc_t>
struct SpanKnnList {
  acc_t* dist;
  int64_t* index;
  int64_t k;

  POINTOPS_HOST_DEVICE void init(int64_t, acc_t limit = std::numeric_limits<acc_t>::infinity()) {
    for (int64_t j = 0; j < k; ++j) {
      dist[j] = limit;
      index[j] = std::numeric_limits<int64_t>::max();
    }
  }
  POINTOPS_HOST_DEVICE acc_t bound() const { return dist[0]; }

  POINTOPS_HOST_DEVICE void push(acc_t d, int64_t i) {
    if (!comes_before(d, i, dist[0], index[0])) return;
    sink(d, i, 0, k);
  }

  // The heap's pairs in ascending order: the root (the largest) swapped to the end, the rest
  // made a heap again, k - 1 times.
  POINTOPS_HOST_DEVICE void finish() {
    for (int64_t end = k - 1; end > 0; --end) {
      const acc_t d = dist[end];
      const int64_t i = index[end];
      dist[end] = dist[0];
      index[end] = index[0];
      sink(d, i, 0, end);
    }
  }
  POINTOPS_HOST_DEVICE int64_t result_index(int64_t, int64_t j) const {
    return index[j] == std::numeric_limits<int64_t>::max() ? -1 : index[j];
  }
  POINTOPS_HOST_DEVICE acc_t result_distance(int64_t, int64_t j) const {
    return index[j] == std::numeric_limits<int64_t>::max() ? std::numeric_limits<acc_t>::infinity() : dist[j];
  }

 private:
  // Puts (d, i) at slot j of the heap of the first `size` slots, moving larger children up.
  POINTOPS_HOST_DEVICE void sink(acc_t d, int64_t i, int64_t j, int64_t size) {
    while (true) {
      int64_t child = 2 * j + 1;
      if (child >= size) break;
      if (child + 1 < size && comes_before(dist[child], index[child], dist[child + 1], index[child + 1])) ++child;
      if (!comes_before(d, i, dist[child], index[child])) break;
      dist[j] = dist[child];
      index[j] = index[child];
      j = child;
    }
    dist[j] = d;
    index[j] = i;
  }
};

// The k smallest indices, ascending, in K >= k fixed slots: slots before K - k hold -1, empty
// ones INT32_MAX, the largest kept index is slot K - 1.
template <int K>
struct FixedIndexList {
  int32_t index[K];

  POINTOPS_HOST_DEVICE void init(int64_t k) {
    POINTOPS_UNROLL
    for (int j = 0; j < K; ++j) index[j] = j < K - k ? -1 : std::numeric_limits<int32_t>::max();
  }
  POINTOPS_HOST_DEVICE int64_t bound() const { return index[K - 1]; }

  POINTOPS_HOST_DEVICE void push(int64_t i64) {
    const int32_t i = static_cast<int32_t>(i64);
    if (i >= index[K - 1]) return;
    POINTOPS_UNROLL
    for (int j = K - 1; j > 0; --j) {
      if (i < index[j - 1]) {
        index[j] = index[j - 1];
      } else if (i < index[j]) {
        index[j] = i;
      }
    }
    if (i < index[0]) index[0] = i;
  }
  POINTOPS_HOST_DEVICE int64_t result_index(int64_t k, int64_t j) const {
    const int32_t i = index[K - k + j];
    return i == std::numeric_limits<int32_t>::max() ? -1 : i;
  }
};

// The k smallest indices, ascending, for any k, kept in memory the caller owns (the output row
// itself) with the number filled so far: an index above every kept one is appended, so the
// index-ordered searches below insert at the end and move nothing.
template <typename index_t>
struct SpanIndexList {
  index_t* index;
  int64_t k;
  int64_t count = 0;

  POINTOPS_HOST_DEVICE void init(int64_t) { count = 0; }
  POINTOPS_HOST_DEVICE int64_t bound() const {
    return count < k ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(index[k - 1]);
  }

  POINTOPS_HOST_DEVICE void push(int64_t i) {
    if (count == k && i >= static_cast<int64_t>(index[k - 1])) return;
    int64_t j = count < k ? count++ : k - 1;
    while (j > 0 && i < static_cast<int64_t>(index[j - 1])) {
      index[j] = index[j - 1];
      --j;
    }
    index[j] = static_cast<index_t>(i);
  }
  POINTOPS_HOST_DEVICE int64_t result_index(int64_t, int64_t j) const {
    return j < count ? static_cast<int64_t>(index[j]) : -1;
  }
};

// The ball-query hit rule of every search, CPU and CUDA: squared distance d2 < radius^2 and, with
// a minimum radius (mmcv's dilated ball query), d2 >= min_radius^2 or d2 == 0 (a point at the
// centre itself always counts, as in mmcv). Both radii are rounded to acc_t and squared there; a
// NaN distance (a point with a NaN/Inf coordinate) is never a hit. min_radius2 = 0 is the plain
// ball: every d2 >= 0.
template <typename acc_t>
struct BallTest {
  acc_t radius2;
  acc_t min_radius2;

  POINTOPS_HOST_DEVICE bool hit(acc_t d2) const { return d2 < radius2 && (d2 >= min_radius2 || d2 == acc_t(0)); }
};

// ---- Searches ---------------------------------------------------------------------------------

// kNN by brute force over one cloud's points in row order (absent ones stored with x = NaN).
template <typename acc_t, typename List>
POINTOPS_HOST_DEVICE inline void knn_brute(const SortedPoint<acc_t>* points, int64_t n, acc_t qx, acc_t qy, acc_t qz,
                                           List& list) {
  for (int64_t j = 0; j < n; ++j) {
    const SortedPoint<acc_t> p = points[j];
    list.push(squared_distance3(qx, qy, qz, p.x, p.y, p.z), j);
  }
}

// Ball query by brute force: points in index order, stopping at the k-th hit.
template <typename acc_t, typename List>
POINTOPS_HOST_DEVICE inline void ball_brute(const SortedPoint<acc_t>* points, int64_t n, acc_t qx, acc_t qy, acc_t qz,
                                            const BallTest<acc_t>& test, int64_t k, List& list) {
  int64_t hits = 0;
  for (int64_t j = 0; j < n && hits < k; ++j) {
    const SortedPoint<acc_t> p = points[j];
    if (test.hit(squared_distance3(qx, qy, qz, p.x, p.y, p.z))) {
      list.push(j);
      ++hits;
    }
  }
}

// How much work knn_grid may spend on one query: cells visited plus points scanned, checked
// after each ring. The CPU searches every query to the end (Unlimited); the CUDA batch grid gives
// up on a query past a limit and hands it to a block that scans the whole cloud (knn_cuda.cu,
// "Far queries").
struct Unlimited {
  POINTOPS_HOST_DEVICE bool allows(int64_t) const { return true; }
};
struct WorkLimit {
  int64_t limit;
  POINTOPS_HOST_DEVICE bool allows(int64_t spent) const { return spent <= limit; }
};

// kNN over a grid, ring by ring: ring R is the cells at Chebyshev distance R from the query's
// cell. Within a ring, a cell whose bound L exceeds the current k-th distance is skipped; after
// a ring, the search stops once every cell left outside the searched box is bounded away in the
// same way, or when the box covers the grid. `cell_start[key]` is the position of the first
// stored point with a cell key >= key (so a cell's points are [cell_start[key],
// cell_start[key + 1]), ordered by index). Returns false when `work` ran out before the search
// ended (the list is then incomplete); true otherwise.
template <typename acc_t, typename List, typename Work = Unlimited>
POINTOPS_HOST_DEVICE inline bool knn_grid(const GridCloud& g, const int32_t* cell_start,
                                          const SortedPoint<acc_t>* points, acc_t qx, acc_t qy, acc_t qz, List& list,
                                          const Work& work = Work()) {
  const double q[3] = {static_cast<double>(qx), static_cast<double>(qy), static_cast<double>(qz)};
  const double slack = query_slack(g, q);
  int64_t cq[3];
  for (int d = 0; d < 3; ++d) cq[d] = g.query_cell(d, q[d]);
  int64_t ring = g.first_ring(cq);
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  if (ring == 0) {
    // The query is in the grid: first the 3 x 3 x 3 cells around it, nearest first, so that the
    // list fills with near points early, which rejects later candidates before any insertion and
    // lets the bound skip more cells. On each axis the cells are ranked 0 (the query's), 1 (the
    // neighbour on the side the query is closer to), 2 (the other one); cells are visited by
    // increasing rank sum. Each axis's gap is computed once.
    int64_t cell[3][3];
    acc_t gap[3][3];
    bool inside[3][3];
    for (int d = 0; d < 3; ++d) {
      const double offset = q[d] - (g.origin[d] + static_cast<double>(cq[d]) * g.size);
      const int64_t near = offset < 0.5 * g.size ? -1 : 1;
      cell[d][0] = cq[d];
      cell[d][1] = cq[d] + near;
      cell[d][2] = cq[d] - near;
      for (int t = 0; t < 3; ++t) {
        inside[d][t] = cell[d][t] >= 0 && cell[d][t] < g.dims[d];
        gap[d][t] = inside[d][t] ? round_down<acc_t>(g.axis_gap(d, q[d], cell[d][t], cell[d][t], slack)) : acc_t(0);
      }
    }
    for (int sum = 0; sum <= 6; ++sum) {
      for (int tz = 0; tz < 3; ++tz) {
        for (int ty = 0; ty < 3; ++ty) {
          const int tx = sum - tz - ty;
          if (tx < 0 || tx > 2 || !inside[2][tz] || !inside[1][ty] || !inside[0][tx]) continue;
          const int64_t key = g.base + (cell[2][tz] * g.dims[1] + cell[1][ty]) * g.dims[0] + cell[0][tx];
          const int64_t begin = cell_start[key];
          const int64_t end = cell_start[key + 1];
          if (end == begin) continue;
          const acc_t worst = list.bound();
          if (worst < kInf && squared_norm3(gap[0][tx], gap[1][ty], gap[2][tz]) > worst) continue;
          for (int64_t j = begin; j < end; ++j) {
            const SortedPoint<acc_t> p = points[j];
            list.push(squared_distance3(qx, qy, qz, p.x, p.y, p.z), p.index);
          }
        }
      }
    }
    ring = 1;
    bool covers = true;
    double outside = std::numeric_limits<double>::infinity();
    for (int d = 0; d < 3; ++d) {
      const int64_t lo = cq[d] - 1 > 0 ? cq[d] - 1 : 0;
      const int64_t hi = cq[d] + 1 < g.dims[d] - 1 ? cq[d] + 1 : g.dims[d] - 1;
      covers = covers && lo == 0 && hi == g.dims[d] - 1;
      const double axis = g.outside_gap(d, q[d], lo, hi, slack);
      if (axis < outside) outside = axis;
    }
    if (covers || distance_bound<acc_t>(outside) > list.bound()) return true;
    ring = 2;
  }
  int64_t spent = 0;
  for (;; ++ring) {
    int64_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      lo[d] = cq[d] - ring > 0 ? cq[d] - ring : 0;
      hi[d] = cq[d] + ring < g.dims[d] - 1 ? cq[d] + ring : g.dims[d] - 1;
    }
    for (int64_t z = lo[2]; z <= hi[2]; ++z) {
      const bool z_face = z == cq[2] - ring || z == cq[2] + ring;
      const double gz = g.axis_gap(2, q[2], z, z, slack);
      for (int64_t y = lo[1]; y <= hi[1]; ++y) {
        const bool y_face = y == cq[1] - ring || y == cq[1] + ring;
        const double gy = g.axis_gap(1, q[1], y, y, slack);
        const int64_t row = g.base + (z * g.dims[1] + y) * g.dims[0];
        // A face row of the ring is whole; any other row meets the ring at its two ends only.
        int64_t runs[2][2];
        int n_runs = 0;
        if (z_face || y_face) {
          runs[n_runs][0] = lo[0];
          runs[n_runs++][1] = hi[0];
        } else {
          if (cq[0] - ring >= 0) {
            runs[n_runs][0] = cq[0] - ring;
            runs[n_runs++][1] = cq[0] - ring;
          }
          if (cq[0] + ring <= g.dims[0] - 1) {
            runs[n_runs][0] = cq[0] + ring;
            runs[n_runs++][1] = cq[0] + ring;
          }
        }
        for (int r = 0; r < n_runs; ++r) {
          int64_t begin = cell_start[row + runs[r][0]];
          for (int64_t x = runs[r][0]; x <= runs[r][1]; ++x) {
            const int64_t end = cell_start[row + x + 1];
            ++spent;
            if (end > begin) {
              const acc_t worst = list.bound();
              const bool skip = worst < kInf && distance_bound<acc_t>(g.axis_gap(0, q[0], x, x, slack), gy, gz) > worst;
              if (!skip) {
                spent += end - begin;
                for (int64_t j = begin; j < end; ++j) {
                  const SortedPoint<acc_t> p = points[j];
                  list.push(squared_distance3(qx, qy, qz, p.x, p.y, p.z), p.index);
                }
              }
            }
            begin = end;
          }
        }
      }
    }
    bool covers = true;
    double gap = std::numeric_limits<double>::infinity();
    for (int d = 0; d < 3; ++d) {
      covers = covers && lo[d] == 0 && hi[d] == g.dims[d] - 1;
      const double axis = g.outside_gap(d, q[d], lo[d], hi[d], slack);
      if (axis < gap) gap = axis;
    }
    if (covers || distance_bound<acc_t>(gap) > list.bound()) return true;
    if (!work.allows(spent)) return false;
  }
}

// The candidate cells the index-ordered ball search keeps track of. Cells are at least the
// radius wide, so the box of half-width radius (1 + 2^-16) + 4 slack spans at most 4 cells on an
// axis unless the slack is comparable to a cell (coordinates some 2^40 cell sizes from the
// origin); such a box is searched cell by cell (ball_grid_cells) instead.
constexpr int kBallCells = 64;
// Candidate points per index window of the ordered ball search (see ball_grid): each window
// costs a pass over the cells, and its hits, which reach the list out of order among themselves,
// cost a shift each over the later hits of the window (in the output row for k > 32); 64
// balances the two at PointNet++'s densities (a ball holds about 15 % of its box's candidates).
constexpr int64_t kBallWindowPoints = 64;

// The ball's box of cells [lo, hi] per axis, clamped into the grid: the outer cells also hold the
// points beyond the grid's box (clamped there: the trimmed box, rounding), so a ball past the grid
// still searches the outer cells it faces.
POINTOPS_HOST_DEVICE inline void ball_box(const GridCloud& g, const double q[3], double reach, int64_t lo[3],
                                          int64_t hi[3]) {
  for (int d = 0; d < 3; ++d) {
    const double first = floor_value((q[d] - reach - g.origin[d]) / g.size);
    const double last = floor_value((q[d] + reach - g.origin[d]) / g.size);
    const double top = static_cast<double>(g.dims[d] - 1);
    lo[d] = first > 0.0 ? (first < top ? static_cast<int64_t>(first) : g.dims[d] - 1) : 0;
    hi[d] = last < top ? (last > 0.0 ? static_cast<int64_t>(last) : 0) : g.dims[d] - 1;
  }
}

// Ball query over a grid, cell by cell in space order: each candidate cell's points in index
// order while their index is below the k-th smallest hit so far. Exact, but a dense ball costs
// most of its candidates (the k-th index found drops slowly when cells come in space order); the
// fallback of ball_grid for boxes of more than kBallCells cells.
template <typename acc_t, typename List>
POINTOPS_HOST_DEVICE inline void ball_grid_cells(const GridCloud& g, const int32_t* cell_start,
                                                 const SortedPoint<acc_t>* points, const double q[3], double slack,
                                                 const int64_t lo[3], const int64_t hi[3], acc_t qx, acc_t qy, acc_t qz,
                                                 const BallTest<acc_t>& test, List& list) {
  for (int64_t z = lo[2]; z <= hi[2]; ++z) {
    const double gz = g.axis_gap(2, q[2], z, z, slack);
    for (int64_t y = lo[1]; y <= hi[1]; ++y) {
      const double gy = g.axis_gap(1, q[1], y, y, slack);
      const int64_t row = g.base + (z * g.dims[1] + y) * g.dims[0];
      int64_t begin = cell_start[row + lo[0]];
      for (int64_t x = lo[0]; x <= hi[0]; ++x) {
        const int64_t end = cell_start[row + x + 1];
        if (end > begin && distance_bound<acc_t>(g.axis_gap(0, q[0], x, x, slack), gy, gz) < test.radius2) {
          for (int64_t j = begin; j < end; ++j) {
            const SortedPoint<acc_t> p = points[j];
            if (static_cast<int64_t>(p.index) >= list.bound()) break;
            if (test.hit(squared_distance3(qx, qy, qz, p.x, p.y, p.z))) list.push(p.index);
          }
        }
        begin = end;
      }
    }
  }
}

// Ball query over a grid, in index order. The candidates are the points of every cell that can
// hold a hit: the cells of the box of half-width radius (1 + 2^-16) + 4 slack (beyond it,
// L > radius^2 by the margin), less those bounded away by L >= radius^2. A cell lists its points
// by index, so the search walks all candidate cells together through windows of consecutive
// indices [lo, lo + width), each cell from where the last window left it: hits reach the list
// nearly in ascending order (a push then moves nothing), and once k are kept, every point not
// yet visited has a larger index than the k-th and the search stops. A dense ball thus costs
// about k / (hit fraction of the candidates) point tests, where a scan cell by cell costs every
// candidate below the k-th hit found so far (in spatial order, most of them). `width` aims at
// kBallWindowPoints candidates a window (candidates / index span of the cells); a window with
// none skips to the next candidate index, so the walk costs at most about candidates / 64
// passes over the cells on top of its point tests.
template <typename acc_t, typename List>
POINTOPS_HOST_DEVICE inline void ball_grid(const GridCloud& g, const int32_t* cell_start,
                                           const SortedPoint<acc_t>* points, acc_t qx, acc_t qy, acc_t qz, acc_t radius,
                                           const BallTest<acc_t>& test, List& list) {
  const double q[3] = {static_cast<double>(qx), static_cast<double>(qy), static_cast<double>(qz)};
  const double slack = query_slack(g, q);
  const double reach = static_cast<double>(radius) * (1.0 + 1.0 / 65536.0) + 4.0 * slack;
  int64_t lo[3], hi[3];
  ball_box(g, q, reach, lo, hi);
  const int64_t nx = hi[0] - lo[0] + 1;
  const int64_t ny = hi[1] - lo[1] + 1;
  const int64_t nz = hi[2] - lo[2] + 1;
  if (nx > kBallCells || ny > kBallCells || nz > kBallCells || nx * ny * nz > kBallCells) {
    ball_grid_cells(g, cell_start, points, q, slack, lo, hi, qx, qy, qz, test, list);
    return;
  }
  // The candidate cells: [cursor, stop) of each is its part not yet visited.
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
      int32_t begin = cell_start[row + lo[0]];
      for (int64_t x = lo[0]; x <= hi[0]; ++x) {
        const int32_t end = cell_start[row + x + 1];
        if (end > begin && distance_bound<acc_t>(g.axis_gap(0, q[0], x, x, slack), gy, gz) < test.radius2) {
          cursor[cells] = begin;
          stop[cells] = end;
          ++cells;
          candidates += end - begin;
          const int64_t a = points[begin].index;
          const int64_t b = points[end - 1].index;
          if (a < first_index) first_index = a;
          if (b > last_index) last_index = b;
        }
        begin = end;
      }
    }
  }
  if (cells == 0) return;
  const int64_t span = last_index - first_index + 1;
  int64_t width = candidates <= kBallWindowPoints ? span : (span * kBallWindowPoints + candidates - 1) / candidates;
  if (width < 1) width = 1;
  int64_t window = first_index;
  for (;;) {
    const int64_t end_index = window + width;
    int64_t next = std::numeric_limits<int64_t>::max();  // the smallest index not yet visited
    for (int c = 0; c < cells; ++c) {
      int32_t j = cursor[c];
      const int32_t stop_c = stop[c];
      for (; j < stop_c; ++j) {
        const SortedPoint<acc_t> p = points[j];
        const int64_t i = p.index;
        if (i >= end_index || i >= list.bound()) {
          if (i < next) next = i;
          break;
        }
        if (test.hit(squared_distance3(qx, qy, qz, p.x, p.y, p.z))) list.push(i);
      }
      cursor[c] = j;
    }
    // Every point left has an index >= next, and next >= end_index unless the list is full with
    // a k-th index <= next: either way nothing left can enter once next >= the bound.
    if (next >= list.bound()) return;
    window = next;
  }
}

// ---- Output rows ------------------------------------------------------------------------------

// A kNN row: indices (cloud indices + base, or -1) and distances (+inf where none), ascending
// (the list's finish() first). The list may live in the output row itself (SpanKnnList): entry j
// is read before it is written.
template <typename acc_t, typename List>
POINTOPS_HOST_DEVICE inline void write_knn_row(List& list, int64_t k, int64_t base, int64_t* out_index,
                                               acc_t* out_distance) {
  list.finish();
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = list.result_index(k, j);
    out_distance[j] = list.result_distance(k, j);
    out_index[j] = i < 0 ? -1 : i + base;
  }
}

// A ball-query row: the hits (ascending), then the first hit again (repeat_first) or -1; -1
// throughout when there is no hit. Returns the number of hits.
template <typename List>
POINTOPS_HOST_DEVICE inline int64_t write_ball_row(const List& list, int64_t k, int64_t base, bool repeat_first,
                                                   int64_t* out_index) {
  int64_t count = 0;
  while (count < k && list.result_index(k, count) >= 0) ++count;
  const int64_t pad = repeat_first && count > 0 ? list.result_index(k, 0) + base : -1;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = list.result_index(k, j);
    out_index[j] = i < 0 ? pad : i + base;
  }
  return count;
}

// ---- Strategy ---------------------------------------------------------------------------------

enum class Strategy { kBrute, kGrid };

// Host-side choices (defined in knn_cpu.cpp), from the sizes alone; results are identical either
// way.
Strategy pick_strategy(bool cuda, int64_t batch, int64_t queries, int64_t points);
// Points per grid cell that kNN aims for: max(2, (k + 1) / 3).
int64_t knn_cell_points(int64_t k);

// The cell budget of one cloud of n points: ceil(n * num / den) + 1 cells. The sum over clouds
// is at most total_cells_bound(rows, batch), which sizes the cell table without reading any
// length back to the host.
struct CellBudget {
  int64_t num;
  int64_t den;

  POINTOPS_HOST_DEVICE int64_t cells(int64_t n) const { return (n * num + den - 1) / den + 1; }
  int64_t total_cells_bound(int64_t rows, int64_t batch) const {
    return (rows * num + batch * (den - 1)) / den + batch;
  }
};

}  // namespace neighbors
}  // namespace pointops
