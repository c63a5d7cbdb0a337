// Weighted interpolation on the CPU: the twin of interpolate_cuda.cu (rules in interpolate.h).
#include "geometry/interpolate.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/squared_distance.h"

namespace pointops {
namespace neighbors {

void check_interpolate_args(const at::Tensor& features, const at::Tensor& indices, const at::Tensor& weights) {
  check_dim(features, "features", 3, "(B, N, C)");
  check_floating(features, "features");
  check_dim(indices, "indices", 3, "(B, M, K)");
  check_dtype(indices, "indices", at::kLong);
  check_same_device(indices, "indices", features, "features");
  TORCH_CHECK(indices.size(0) == features.size(0), "indices must have the batch size of features (", features.size(0),
              "), got shape ", indices.sizes());
  check_shape(weights, "weights", indices.sizes());
  TORCH_CHECK(weights.scalar_type() == features.scalar_type(), "weights must have the dtype of features (",
              features.scalar_type(), "), got ", weights.scalar_type());
  check_same_device(weights, "weights", features, "features");
}

at::Tensor interpolate_compute(const at::Tensor& t) {
  if (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) {
    return t.to(at::kFloat).contiguous();
  }
  return t.contiguous();
}

}  // namespace neighbors

at::Tensor interpolate_cpu(const at::Tensor& features, const at::Tensor& indices, const at::Tensor& weights) {
  neighbors::check_interpolate_args(features, indices, weights);
  const at::Tensor f = neighbors::interpolate_compute(features);
  const at::Tensor w = neighbors::interpolate_compute(weights);
  const at::Tensor idx = indices.contiguous();
  const int64_t batch = features.size(0);
  const int64_t n = features.size(1);
  const int64_t channels = features.size(2);
  const int64_t m = indices.size(1);
  const int64_t k = indices.size(2);
  at::Tensor out = at::empty({batch, m, channels}, f.options());
  AT_DISPATCH_FLOATING_TYPES(f.scalar_type(), "interpolate_cpu", [&] {
    const scalar_t* fp = f.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const int64_t* ip = idx.data_ptr<int64_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, batch * m, 64, [&](int64_t first, int64_t last) {
      for (int64_t row = first; row < last; ++row) {
        const int64_t b = row / m;
        scalar_t* o = op + row * channels;
        for (int64_t c = 0; c < channels; ++c) o[c] = scalar_t(0);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t i = ip[row * k + j];
          const scalar_t weight = wp[row * k + j];
          const bool valid = i >= 0 && i < n;
          const scalar_t* src = fp + (b * n + (valid ? i : 0)) * channels;
          for (int64_t c = 0; c < channels; ++c) {
            o[c] = add(o[c], valid ? multiply(weight, src[c]) : scalar_t(0));
          }
        }
      }
    });
  });
  return out.scalar_type() == features.scalar_type() ? out : out.to(features.scalar_type());
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("interpolate", &interpolate_cpu); }

}  // namespace pointops
