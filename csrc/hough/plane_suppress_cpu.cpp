// plane_suppress on the CPU (rules in plane_suppress.h); the argument checks serve both backends.
#include "hough/plane_suppress.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "common/checks.h"

namespace pointops {
namespace hough_detail {

SuppressArgs check_suppress_args(const at::Tensor& planes, double max_angle, double max_offset) {
  check_dim(planes, "planes", 3, "(B, K, 4)");
  check_floating(planes, "planes");
  TORCH_CHECK(planes.size(2) == 4, "planes must have shape (B, K, 4), got shape ", planes.sizes());
  TORCH_CHECK(planes.size(1) <= kMaxSuppressPlanes, "planes must have at most ", kMaxSuppressPlanes,
              " rows per cloud (K), got ", planes.size(1));
  TORCH_CHECK(std::isfinite(max_angle) && max_angle >= 0, "max_angle must be finite and >= 0 (radians), got ",
              max_angle);
  TORCH_CHECK(std::isfinite(max_offset) && max_offset >= 0, "max_offset must be finite and >= 0, got ", max_offset);
  return {planes.to(at::kFloat).contiguous(), static_cast<float>(std::cos(max_angle)), static_cast<float>(max_offset)};
}

}  // namespace hough_detail

namespace {

using namespace hough_detail;

at::Tensor plane_suppress_cpu(const at::Tensor& planes, double max_angle, double max_offset) {
  const SuppressArgs args = check_suppress_args(planes, max_angle, max_offset);
  const int64_t batch = args.planes.size(0), k = args.planes.size(1);
  at::Tensor out = at::empty({batch, k, 4}, args.planes.options());
  const float* in = args.planes.data_ptr<float>();
  float* out_ptr = out.data_ptr<float>();
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    std::vector<char> kept(k);
    for (int64_t b = first; b < last; ++b) {
      const float* rows = in + 4 * b * k;
      for (int64_t j = 0; j < k; ++j) {
        bool keep = !std::isnan(rows[4 * j + 3]);
        for (int64_t i = 0; keep && i < j; ++i) {
          keep = !(kept[i] && planes_close(rows + 4 * j, rows + 4 * i, args.min_cos, args.max_offset));
        }
        kept[j] = keep;
        for (int c = 0; c < 4; ++c) out_ptr[4 * (b * k + j) + c] = keep ? rows[4 * j + c] : NAN;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("plane_suppress", &plane_suppress_cpu); }

}  // namespace pointops
