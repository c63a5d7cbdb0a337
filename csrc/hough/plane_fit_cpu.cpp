// Plane labels and least-squares refits on the CPU: the exact twin of plane_fit_cuda.cu (rules in
// plane_fit.h).
#include "hough/plane_fit.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"

namespace pointops {
namespace plane_fit_detail {

FitInputs prepare_fit_inputs(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             const at::Tensor& planes, double threshold, at::ArrayRef<double> bands) {
  check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3);
  TORCH_CHECK(points.size(1) < (int64_t{1} << 32), "points must have fewer than 2^32 rows per cloud, got ",
              points.size(1));
  check_dim(planes, "planes", 3, "(B, K, 4)");
  check_floating(planes, "planes");
  TORCH_CHECK(planes.size(0) == points.size(0) && planes.size(2) == 4,
              "planes must have shape (B, K, 4) with B = ", points.size(0), ", got shape ", planes.sizes());
  TORCH_CHECK(planes.size(1) <= kMaxPlanes, "planes must have at most ", kMaxPlanes, " rows per cloud (K), got ",
              planes.size(1));
  check_same_device(planes, "planes", points, "points");
  TORCH_CHECK(std::isfinite(threshold) && threshold >= 0, "threshold must be finite and >= 0, got ", threshold);
  TORCH_CHECK(!bands.empty(), "bands must have at least one entry, got []");
  std::vector<float> thresholds;
  for (const double band : bands) {
    const double t = band * threshold;
    TORCH_CHECK(std::isfinite(t) && t >= 0, "bands must make thresholds band * threshold finite and >= 0, got band ",
                band, " with threshold ", threshold);
    thresholds.push_back(static_cast<float>(t));
  }
  return {points.to(at::kFloat).contiguous(),
          planes.to(at::kFloat).contiguous(),
          contiguous_lengths(lengths),
          points.size(0),
          points.size(1),
          planes.size(1),
          static_cast<float>(threshold),
          std::move(thresholds)};
}

}  // namespace plane_fit_detail

namespace {

using namespace plane_fit_detail;

constexpr int64_t kPointsPerTask = 16384;

// Every row of planes (B, K, 4) float32 through sanitize_plane().
at::Tensor sanitized(const at::Tensor& planes) {
  at::Tensor clean = at::empty_like(planes);
  const float* raw = planes.data_ptr<float>();
  float* out = clean.data_ptr<float>();
  for (int64_t row = 0; row < planes.numel() / 4; ++row) sanitize_plane(raw + 4 * row, out + 4 * row);
  return clean;
}

at::Tensor plane_labels_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                            const at::Tensor& planes, double threshold) {
  const FitInputs in = prepare_fit_inputs(points, lengths, planes, threshold);
  at::Tensor labels = at::empty({in.batch, in.n}, points.options().dtype(at::kLong));
  const float* pts = in.points.data_ptr<float>();
  const at::Tensor clean = sanitized(in.planes);
  const float* pl = clean.data_ptr<float>();
  const int64_t* lengths_ptr = in.lengths.data;
  int64_t* out = labels.data_ptr<int64_t>();
  at::parallel_for(0, in.batch * in.n, kPointsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const int64_t b = i / in.n;
      const float* p = pts + 3 * i;
      out[i] = i - b * in.n < cloud_length(lengths_ptr, b, in.n) && finite_point(p[0], p[1], p[2])
                   ? first_plane_within(pl + 4 * b * in.k, in.k, p[0], p[1], p[2], in.threshold)
                   : -1;
    }
  });
  return labels;
}

std::tuple<at::Tensor, at::Tensor> plane_refit_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                                   const at::Tensor& planes, double threshold,
                                                   at::ArrayRef<double> bands) {
  const FitInputs in = prepare_fit_inputs(points, lengths, planes, threshold, bands);
  const int64_t batch = in.batch, n = in.n, k = in.k;
  const float* pts = in.points.data_ptr<float>();
  const int64_t* lengths_ptr = in.lengths.data;

  std::vector<int> shift(batch);
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      float largest = 0.f;
      const float* cloud = pts + 3 * b * n;
      for (int64_t p = 0; p < cloud_length(lengths_ptr, b, n); ++p) {
        const float* q = cloud + 3 * p;
        if (!finite_point(q[0], q[1], q[2])) continue;
        for (int c = 0; c < 3; ++c) largest = std::max(largest, std::fabs(q[c]));
      }
      shift[b] = quant_shift(float_bits(largest));
    }
  });

  // Each band refits the previous band's planes (the first band the input rows).
  at::Tensor current = in.planes;
  at::Tensor inliers = at::empty({batch, k}, points.options().dtype(at::kLong));
  std::vector<int64_t> moments(batch * k * kMoments);
  std::mutex merge;
  const int64_t tasks_per_cloud = std::max<int64_t>(1, (n + kPointsPerTask - 1) / kPointsPerTask);
  for (const float band_threshold : in.thresholds) {
    const at::Tensor clean = sanitized(current);
    const float* pl = clean.data_ptr<float>();
    // Integer sums: any split of the points into tasks adds up to the same moments.
    std::fill(moments.begin(), moments.end(), 0);
    at::parallel_for(0, batch * tasks_per_cloud, 1, [&](int64_t first, int64_t last) {
      std::vector<int64_t> local(k * kMoments);
      for (int64_t task = first; task < last; ++task) {
        const int64_t b = task / tasks_per_cloud;
        const int64_t begin = (task % tasks_per_cloud) * kPointsPerTask;
        const int64_t end = std::min(cloud_length(lengths_ptr, b, n), begin + kPointsPerTask);
        std::fill(local.begin(), local.end(), 0);
        const float* cloud_planes = pl + 4 * b * k;
        for (int64_t p = begin; p < end; ++p) {
          const float* q = pts + 3 * (b * n + p);
          if (!finite_point(q[0], q[1], q[2])) continue;
          const int64_t label = first_plane_within(cloud_planes, k, q[0], q[1], q[2], band_threshold);
          if (label < 0) continue;
          const int64_t quantized[3] = {quantize(q[0], shift[b]), quantize(q[1], shift[b]), quantize(q[2], shift[b])};
          int64_t terms[kMoments];
          moment_terms(quantized, terms);
          for (int t = 0; t < kMoments; ++t) local[label * kMoments + t] += terms[t];
        }
        const std::lock_guard<std::mutex> lock(merge);
        for (int64_t t = 0; t < k * kMoments; ++t) moments[b * k * kMoments + t] += local[t];
      }
    });

    at::Tensor next = at::empty({batch, k, 4}, points.options().dtype(at::kFloat));
    float* next_ptr = next.data_ptr<float>();
    int64_t* inliers_ptr = inliers.data_ptr<int64_t>();
    const float* original = current.data_ptr<float>();
    for (int64_t row = 0; row < batch * k; ++row) {
      const int64_t* m = moments.data() + row * kMoments;
      solve_plane(m, shift[row / std::max<int64_t>(k, 1)], pl + 4 * row, original + 4 * row, next_ptr + 4 * row);
      inliers_ptr[row] = m[0];
    }
    current = next;
  }
  return {current, inliers};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("plane_labels", &plane_labels_cpu);
  m.impl("plane_refit", &plane_refit_cpu);
}

}  // namespace pointops
