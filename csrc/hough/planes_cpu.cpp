// 3D plane Hough accumulators on the CPU: the exact twin of planes_cuda.cu (rules in planes.h).
#include "hough/planes.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"

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
                             const std::optional<at::Tensor>& weights, int64_t n_phi,
                             int64_t n_theta, double rho_step, double rho_max) {
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
  TORCH_CHECK(std::isfinite(rho_step) && rho_step > 0, "rho_step must be finite and > 0, got ",
              rho_step);
  TORCH_CHECK(std::isfinite(rho_max) && rho_max > 0, "rho_max must be finite and > 0, got ",
              rho_max);
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

std::vector<int64_t> planes_output_shape(PlaneLayout layout, int64_t batch, int64_t n_phi,
                                         int64_t n_theta, int64_t n_rho) {
  if (layout == PlaneLayout::kGrid) return {batch, n_phi, n_theta, n_rho};
  return {batch, ball_cells(n_phi, n_theta), n_rho};
}

}  // namespace hough_detail

namespace {

using hough_detail::PlaneLayout;
using hough_detail::RhoBinning;

// Orientations per task: their rows stay in cache while every point of the cloud streams past.
constexpr int64_t kOrientationsPerTask = 16;

template <typename count_t>
void vote_cpu(const float* points, const float* weights, const int64_t* lengths, int64_t batch,
              int64_t n, const float* normals, int64_t m_total, const RhoBinning& binning,
              count_t* out) {
  const int64_t n_rho = binning.n_rho;
  const int64_t blocks = (m_total + kOrientationsPerTask - 1) / kOrientationsPerTask;
  at::parallel_for(0, batch * blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t b = task / blocks;
      const int64_t m0 = (task % blocks) * kOrientationsPerTask;
      const int64_t m1 = std::min(m_total, m0 + kOrientationsPerTask);
      const int64_t length = cloud_length(lengths, b, n);
      const float* cloud = points + b * n * 3;
      count_t* rows = out + (b * m_total + m0) * n_rho;
      // Point order outer, so every bin adds its weights in point order, as on CUDA.
      for (int64_t p = 0; p < length; ++p) {
        const float* point = cloud + 3 * p;
        const float w = weights == nullptr ? 1.f : weights[b * n + p];
        if (!(std::isfinite(point[0]) && std::isfinite(point[1]) && std::isfinite(point[2]) &&
              std::isfinite(w))) {
          continue;
        }
        const float x = hough_detail::to_bins(point[0], binning);
        const float y = hough_detail::to_bins(point[1], binning);
        const float z = hough_detail::to_bins(point[2], binning);
        for (int64_t m = m0; m < m1; ++m) {
          const float* nrm = normals + 3 * m;
          const int32_t r = hough_detail::rho_bin(nrm[0], nrm[1], nrm[2], x, y, z, binning);
          if (r < binning.n_rho) {
            if constexpr (std::is_same_v<count_t, float>) {
              rows[(m - m0) * n_rho + r] += w;
            } else {
              rows[(m - m0) * n_rho + r] += 1;
            }
          }
        }
      }
    }
  });
}

at::Tensor planes_cpu(PlaneLayout layout, const at::Tensor& points,
                      const std::optional<at::Tensor>& lengths,
                      const std::optional<at::Tensor>& weights, int64_t n_phi, int64_t n_theta,
                      double rho_step, double rho_max) {
  const RhoBinning binning =
      hough_detail::check_planes_args(points, lengths, weights, n_phi, n_theta, rho_step, rho_max);
  const at::Tensor normals = hough_detail::plane_normals(layout, n_phi, n_theta);
  const int64_t batch = points.size(0), n = points.size(1), m_total = normals.size(0);
  const at::Tensor pts = points.to(at::kFloat).contiguous();
  const at::Tensor w = weights.has_value() ? weights->to(at::kFloat).contiguous() : at::Tensor();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* lengths_ptr = lengths_c.data;
  const auto shape =
      hough_detail::planes_output_shape(layout, batch, n_phi, n_theta, binning.n_rho);
  at::Tensor out = at::zeros(shape, points.options().dtype(w.defined() ? at::kFloat : at::kInt));
  if (w.defined()) {
    vote_cpu<float>(pts.data_ptr<float>(), w.data_ptr<float>(), lengths_ptr, batch, n,
                    normals.data_ptr<float>(), m_total, binning, out.data_ptr<float>());
  } else {
    vote_cpu<int32_t>(pts.data_ptr<float>(), nullptr, lengths_ptr, batch, n,
                      normals.data_ptr<float>(), m_total, binning, out.data_ptr<int32_t>());
  }
  return out;
}

at::Tensor hough_planes_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                            const std::optional<at::Tensor>& weights, int64_t n_phi,
                            int64_t n_theta, double rho_step, double rho_max) {
  return planes_cpu(PlaneLayout::kGrid, points, lengths, weights, n_phi, n_theta, rho_step,
                    rho_max);
}

at::Tensor hough_planes_ball_cpu(const at::Tensor& points,
                                 const std::optional<at::Tensor>& lengths,
                                 const std::optional<at::Tensor>& weights, int64_t n_phi,
                                 int64_t n_theta, double rho_step, double rho_max) {
  return planes_cpu(PlaneLayout::kBall, points, lengths, weights, n_phi, n_theta, rho_step,
                    rho_max);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("hough_planes", &hough_planes_cpu);
  m.impl("hough_planes_ball", &hough_planes_ball_cpu);
}

}  // namespace pointops
