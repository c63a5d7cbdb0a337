// 3D plane Hough accumulators on the CPU: the exact twin of planes_cuda.cu (rules in planes.h).
#include "hough/planes.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cpu_simd.h"

namespace pointops {
namespace hough_detail {

namespace {

constexpr double kPi = 3.14159265358979323846;
// Bins are counted in float32, whose integers are exact up to 2^24.
constexpr int64_t kMaxRhoBins = int64_t{1} << 24;

int64_t ring_cells(int64_t n_phi, int64_t n_theta, int64_t ring) {
  const double phi = (static_cast<double>(ring) + 0.5) * kPi / static_cast<double>(n_phi);
  const double cells = std::floor(static_cast<double>(n_theta) * std::sin(phi) + 0.5);
  return std::max<int64_t>(1, static_cast<int64_t>(cells));
}

int64_t ball_cells(int64_t n_phi, int64_t n_theta) {
  int64_t total = 0;
  for (int64_t i = 0; i < n_phi; ++i) total += ring_cells(n_phi, n_theta, i);
  return total;
}

}  // namespace

RhoBinning check_planes_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta, double rho_step,
                             double rho_max) {
  check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3);
  if (weights.has_value()) {
    check_floating(*weights, "weights");
    check_shape(*weights, "weights", {points.size(0), points.size(1)});
    check_same_device(*weights, "weights", points, "points");
  }
  TORCH_CHECK(n_phi >= 1 && n_phi <= 1 << 20, "n_phi must be in [1, 2^20], got ", n_phi);
  TORCH_CHECK(n_theta >= 1 && n_theta <= 1 << 20, "n_theta must be in [1, 2^20], got ", n_theta);
  TORCH_CHECK(n_phi * n_theta <= std::numeric_limits<int32_t>::max(),
              "n_phi * n_theta must be at most 2^31 - 1 orientations, got ", n_phi * n_theta);
  return rho_binning(rho_step, rho_max);
}

RhoBinning rho_binning(double rho_step, double rho_max) {
  TORCH_CHECK(std::isfinite(rho_step) && rho_step > 0, "rho_step must be finite and > 0, got ", rho_step);
  TORCH_CHECK(std::isfinite(rho_max) && rho_max > 0, "rho_max must be finite and > 0, got ", rho_max);
  const double bins = std::floor(2.0 * rho_max / rho_step + 0.5);
  TORCH_CHECK(bins <= static_cast<double>(kMaxRhoBins),
              "2 * rho_max / rho_step must give at most 2^24 rho bins, got rho_max = ", rho_max,
              ", rho_step = ", rho_step);
  const int32_t n_rho = static_cast<int32_t>(std::max(1.0, bins));
  return RhoBinning{static_cast<float>(n_rho / (2.0 * rho_max)), (n_rho % 2) * 0.5f, n_rho / 2, n_rho};
}

at::Tensor plane_normals(PlaneLayout layout, int64_t n_phi, int64_t n_theta) {
  const int64_t m = layout == PlaneLayout::kGrid ? n_phi * n_theta : ball_cells(n_phi, n_theta);
  at::Tensor table = at::empty({m, 3}, at::TensorOptions().dtype(at::kFloat));
  float* out = table.data_ptr<float>();
  int64_t cell = 0;
  for (int64_t i = 0; i < n_phi; ++i) {
    const double phi = (static_cast<double>(i) + 0.5) * kPi / static_cast<double>(n_phi);
    const double sin_phi = std::sin(phi), cos_phi = std::cos(phi);
    const int64_t ring = layout == PlaneLayout::kGrid ? n_theta : ring_cells(n_phi, n_theta, i);
    for (int64_t j = 0; j < ring; ++j, ++cell) {
      const double theta = (static_cast<double>(j) + 0.5) * kPi / static_cast<double>(ring);
      out[3 * cell + 0] = static_cast<float>(sin_phi * std::cos(theta));
      out[3 * cell + 1] = static_cast<float>(sin_phi * std::sin(theta));
      out[3 * cell + 2] = static_cast<float>(cos_phi);
    }
  }
  return table;
}

int64_t ball_cell_count(int64_t n_phi, int64_t n_theta) { return ball_cells(n_phi, n_theta); }

std::vector<int64_t> planes_output_shape(PlaneLayout layout, int64_t batch, int64_t n_phi, int64_t n_theta,
                                         int64_t n_rho) {
  if (layout == PlaneLayout::kGrid) return {batch, n_phi, n_theta, n_rho};
  return {batch, ball_cells(n_phi, n_theta), n_rho};
}

}  // namespace hough_detail

namespace {

using hough_detail::PlaneLayout;
using hough_detail::RhoBinning;

// The voting points of one cloud, in point order, already scaled to rho bins (to_bins), with the
// points that cast no vote (a NaN/Inf coordinate or weight) left out: every orientation block of
// the cloud reads them, so the scaling and the checks run once per point, not once per block.
struct BinnedCloud {
  std::vector<float> x, y, z, w;  // w stays empty for counts
  int64_t size() const { return static_cast<int64_t>(x.size()); }
};

BinnedCloud bin_cloud(const float* cloud, const float* weights, int64_t length, const RhoBinning& binning) {
  BinnedCloud c;
  c.x.reserve(length);
  c.y.reserve(length);
  c.z.reserve(length);
  if (weights != nullptr) c.w.reserve(length);
  for (int64_t p = 0; p < length; ++p) {
    const float* point = cloud + 3 * p;
    const float w = weights == nullptr ? 1.f : weights[p];
    if (!(std::isfinite(point[0]) && std::isfinite(point[1]) && std::isfinite(point[2]) && std::isfinite(w))) {
      continue;
    }
    c.x.push_back(hough_detail::to_bins(point[0], binning));
    c.y.push_back(hough_detail::to_bins(point[1], binning));
    c.z.push_back(hough_detail::to_bins(point[2], binning));
    if (weights != nullptr) c.w.push_back(w);
  }
  return c;
}

// Orientations per task: 16 rows of the accumulator (23 KB for 360 rho bins) stay in L1 while every
// point of the cloud streams past, and they are two 8-lane vectors on AVX2.
constexpr int64_t kOrientationsPerTask = 16;

// One task: orientations [m0, m0 + count) of one cloud, rows = their accumulator rows. Point order
// is the outer loop, so every bin adds its weights in point order, as on CUDA.
template <typename count_t>
void vote_block_scalar(const BinnedCloud& c, const float* normals, int64_t count, const RhoBinning& binning,
                       count_t* rows) {
  const int64_t n_rho = binning.n_rho;
  for (int64_t p = 0; p < c.size(); ++p) {
    for (int64_t m = 0; m < count; ++m) {
      const float* nrm = normals + 3 * m;
      const int32_t r = hough_detail::rho_bin(nrm[0], nrm[1], nrm[2], c.x[p], c.y[p], c.z[p], binning);
      if (r < binning.n_rho) {
        if constexpr (std::is_same_v<count_t, float>) {
          rows[m * n_rho + r] += c.w[p];
        } else {
          rows[m * n_rho + r] += 1;
        }
      }
    }
  }
}

#if POINTOPS_X86_DISPATCH
// The same votes with AVX2: rho_bin for 8 orientations per instruction. _mm256_fmadd_ps rounds once
// like std::fma, _mm256_floor_ps is exact, and the ordered compares reject NaN as rho_bin's do, so
// every bin is the one rho_bin gives; the increments stay scalar, in the same order.
template <typename count_t>
__attribute__((target("avx2,fma"))) void vote_block_avx2(const BinnedCloud& c, const float* normals, int64_t count,
                                                         const RhoBinning& binning, count_t* rows) {
  constexpr int kLanes = 8, kVectors = kOrientationsPerTask / kLanes;
  alignas(32) float nx[kOrientationsPerTask], ny[kOrientationsPerTask], nz[kOrientationsPerTask];
  alignas(32) int32_t row_start[kOrientationsPerTask], lane_on[kOrientationsPerTask];
  for (int m = 0; m < kOrientationsPerTask; ++m) {
    const bool on = m < count;
    nx[m] = on ? normals[3 * m + 0] : 0.f;
    ny[m] = on ? normals[3 * m + 1] : 0.f;
    nz[m] = on ? normals[3 * m + 2] : 0.f;
    row_start[m] = static_cast<int32_t>(m * binning.n_rho + binning.floor_half);
    lane_on[m] = on ? -1 : 0;
  }
  __m256 vx[kVectors], vy[kVectors], vz[kVectors];
  __m256i vstart[kVectors], von[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    vx[v] = _mm256_load_ps(nx + kLanes * v);
    vy[v] = _mm256_load_ps(ny + kLanes * v);
    vz[v] = _mm256_load_ps(nz + kLanes * v);
    vstart[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(row_start + kLanes * v));
    von[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane_on + kLanes * v));
  }
  const __m256 frac = _mm256_set1_ps(binning.frac);
  const __m256 low = _mm256_set1_ps(-static_cast<float>(binning.floor_half));
  const __m256 high = _mm256_set1_ps(static_cast<float>(binning.n_rho - binning.floor_half));
  const __m256i skip = _mm256_set1_epi32(-1);
  alignas(32) int32_t slot[kOrientationsPerTask];
  for (int64_t p = 0; p < c.size(); ++p) {
    const __m256 x = _mm256_set1_ps(c.x[p]), y = _mm256_set1_ps(c.y[p]), z = _mm256_set1_ps(c.z[p]);
    for (int v = 0; v < kVectors; ++v) {
      const __m256 t = _mm256_fmadd_ps(vz[v], z, _mm256_fmadd_ps(vy[v], y, _mm256_fmadd_ps(vx[v], x, frac)));
      const __m256 f = _mm256_floor_ps(t);
      const __m256 in = _mm256_and_ps(_mm256_cmp_ps(f, low, _CMP_GE_OQ), _mm256_cmp_ps(f, high, _CMP_LT_OQ));
      const __m256i on = _mm256_and_si256(_mm256_castps_si256(in), von[v]);
      // Where the bin is valid, f is an integer in [-floor_half, n_rho - floor_half): exact in int32.
      const __m256i at = _mm256_add_epi32(_mm256_cvttps_epi32(f), vstart[v]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(slot + kLanes * v), _mm256_blendv_epi8(skip, at, on));
    }
    for (int m = 0; m < kOrientationsPerTask; ++m) {
      if (slot[m] >= 0) {
        if constexpr (std::is_same_v<count_t, float>) {
          rows[slot[m]] += c.w[p];
        } else {
          rows[slot[m]] += 1;
        }
      }
    }
  }
}

#endif

template <typename count_t>
void vote_cpu(const float* points, const float* weights, const int64_t* lengths, int64_t batch, int64_t n,
              const float* normals, int64_t m_total, const RhoBinning& binning, count_t* out) {
  const int64_t n_rho = binning.n_rho;
  std::vector<BinnedCloud> clouds(batch);
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      clouds[b] = bin_cloud(points + b * n * 3, weights == nullptr ? nullptr : weights + b * n,
                            cloud_length(lengths, b, n), binning);
    }
  });
  const int64_t blocks = (m_total + kOrientationsPerTask - 1) / kOrientationsPerTask;
  // The vector kernel's slots are int32 offsets into a task's rows.
  bool vector_path = kOrientationsPerTask * n_rho <= std::numeric_limits<int32_t>::max();
#if POINTOPS_X86_DISPATCH
  vector_path = vector_path && cpu_has_avx2_fma();
#else
  vector_path = false;
#endif
  at::parallel_for(0, batch * blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t b = task / blocks;
      const int64_t m0 = (task % blocks) * kOrientationsPerTask;
      const int64_t count = std::min(m_total, m0 + kOrientationsPerTask) - m0;
      count_t* rows = out + (b * m_total + m0) * n_rho;
#if POINTOPS_X86_DISPATCH
      if (vector_path) {
        vote_block_avx2<count_t>(clouds[b], normals + 3 * m0, count, binning, rows);
        continue;
      }
#endif
      vote_block_scalar<count_t>(clouds[b], normals + 3 * m0, count, binning, rows);
    }
  });
}

at::Tensor planes_cpu(PlaneLayout layout, const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                      const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta, double rho_step,
                      double rho_max) {
  const RhoBinning binning =
      hough_detail::check_planes_args(points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
  const at::Tensor normals = hough_detail::plane_normals(layout, n_phi, n_theta);
  const int64_t batch = points.size(0), n = points.size(1), m_total = normals.size(0);
  const at::Tensor pts = points.to(at::kFloat).contiguous();
  const at::Tensor w = weights.has_value() ? weights->to(at::kFloat).contiguous() : at::Tensor();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* lengths_ptr = lengths_c.data;
  const auto shape = hough_detail::planes_output_shape(layout, batch, n_phi, n_theta, binning.n_rho);
  at::Tensor out = at::zeros(shape, points.options().dtype(w.defined() ? at::kFloat : at::kInt));
  if (w.defined()) {
    vote_cpu<float>(pts.data_ptr<float>(), w.data_ptr<float>(), lengths_ptr, batch, n, normals.data_ptr<float>(),
                    m_total, binning, out.data_ptr<float>());
  } else {
    vote_cpu<int32_t>(pts.data_ptr<float>(), nullptr, lengths_ptr, batch, n, normals.data_ptr<float>(), m_total,
                      binning, out.data_ptr<int32_t>());
  }
  return out;
}

at::Tensor hough_planes_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                            const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta, double rho_step,
                            double rho_max) {
  return planes_cpu(PlaneLayout::kGrid, points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
}

at::Tensor hough_planes_ball_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                 const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta,
                                 double rho_step, double rho_max) {
  return planes_cpu(PlaneLayout::kBall, points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("hough_planes", &hough_planes_cpu);
  m.impl("hough_planes_ball", &hough_planes_ball_cpu);
}

}  // namespace pointops
