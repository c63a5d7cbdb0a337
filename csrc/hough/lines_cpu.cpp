// 2D line Hough accumulator on the CPU (rules in lines.h; the CUDA twin is lines_cuda.cu).
#include "hough/lines.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>

#include "common/checks.h"
#include "common/clouds.h"

namespace pointops {
namespace hough_images {

int64_t check_lines_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& weights, int64_t height, int64_t width,
                         at::ArrayRef<double> theta) {
  check_point_lists(points, lengths, weights, height, width);
  for (const double t : theta) {
    TORCH_CHECK(std::isfinite(t), "theta must be finite angles in radians, got ", theta);
  }
  TORCH_CHECK(static_cast<int64_t>(theta.size()) <= (int64_t{1} << 20), "theta must have at most 2^20 angles, got ",
              theta.size());
  const int64_t offset = line_offset(height, width);
  check_output_fits(points.device(),
                    std::to_string(theta.size()) + " angles (theta) of a " + std::to_string(height) + " x " +
                        std::to_string(width) + " image",
                    {points.size(0), 2 * offset + 1, static_cast<int64_t>(theta.size())}, 4);
  return offset;
}

at::Tensor line_trig(at::ArrayRef<double> theta) {
  at::Tensor trig = at::empty({static_cast<int64_t>(theta.size()), 2}, at::TensorOptions().dtype(at::kDouble));
  double* t = trig.data_ptr<double>();
  for (size_t j = 0; j < theta.size(); ++j) {
    t[2 * j] = std::cos(theta[j]);
    t[2 * j + 1] = std::sin(theta[j]);
  }
  return trig;
}

}  // namespace hough_images

namespace {

template <typename index_t, typename acc_t>
void vote_lines(const index_t* points, const int64_t* lengths, const int64_t* fixed, int64_t batch, int64_t n,
                int32_t height, int32_t width, const double* trig, int64_t n_theta, int32_t offset, int64_t n_rho,
                acc_t* out) {
  // One task per (image, angle): each owns one column of its image's accumulator.
  at::parallel_for(0, batch * n_theta, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      const int64_t b = task / n_theta, j = task % n_theta;
      const double c = trig[2 * j], s = trig[2 * j + 1];
      acc_t* acc = out + b * n_rho * n_theta + j;
      const int64_t length = cloud_length(lengths, b, n);
      for (int64_t p = 0; p < length; ++p) {
        int32_t x, y;
        if (!hough_images::point_in_image(points + (b * n + p) * 2, height, width, x, y)) continue;
        const acc_t vote = fixed == nullptr ? acc_t(1) : static_cast<acc_t>(fixed[b * n + p]);
        acc[int64_t{hough_images::line_bin(c, s, x, y, offset)} * n_theta] += vote;
      }
    }
  });
}

at::Tensor hough_lines_points_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                  const std::optional<at::Tensor>& weights, int64_t height, int64_t width,
                                  at::ArrayRef<double> theta) {
  const int64_t offset = hough_images::check_lines_args(points, lengths, weights, height, width, theta);
  const int64_t batch = points.size(0), n = points.size(1);
  const int64_t n_theta = static_cast<int64_t>(theta.size()), n_rho = 2 * offset + 1;
  const bool weighted = weights.has_value();
  at::Tensor acc = at::zeros({batch, n_rho, n_theta}, points.options().dtype(weighted ? at::kLong : at::kInt));
  if (acc.numel() > 0 && n > 0) {
    const at::Tensor trig = hough_images::line_trig(theta);
    const at::Tensor pts = points.contiguous();
    const CloudLengths lengths_c = contiguous_lengths(lengths);
    at::Tensor fixed;
    if (weighted) {
      const at::Tensor w = weights->to(at::kFloat).contiguous();
      fixed = at::empty({batch, n}, points.options().dtype(at::kLong));
      const float* wp = w.data_ptr<float>();
      int64_t* fp = fixed.data_ptr<int64_t>();
      at::parallel_for(0, batch * n, 4096, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) fp[i] = hough_images::weight_to_fixed(wp[i]);
      });
    }
    const int64_t* fixed_ptr = weighted ? fixed.data_ptr<int64_t>() : nullptr;
    AT_DISPATCH_INDEX_TYPES(pts.scalar_type(), "hough_lines_points_cpu", [&] {
      if (weighted) {
        vote_lines(pts.data_ptr<index_t>(), lengths_c.data, fixed_ptr, batch, n, static_cast<int32_t>(height),
                   static_cast<int32_t>(width), trig.data_ptr<double>(), n_theta, static_cast<int32_t>(offset), n_rho,
                   acc.data_ptr<int64_t>());
      } else {
        vote_lines(pts.data_ptr<index_t>(), lengths_c.data, fixed_ptr, batch, n, static_cast<int32_t>(height),
                   static_cast<int32_t>(width), trig.data_ptr<double>(), n_theta, static_cast<int32_t>(offset), n_rho,
                   acc.data_ptr<int32_t>());
      }
    });
  }
  return weighted ? hough_images::fixed_to_float(acc) : acc;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("hough_lines_points", &hough_lines_points_cpu); }

}  // namespace pointops
