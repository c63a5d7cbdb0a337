// Pillar scatter on the CPU: the exact twin of pillar_scatter_cuda.cu (rules in pillar_scatter.h).
#include "bev/pillar_scatter.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"

namespace pointops {
namespace pillar_detail {

void check_pillar_scatter_args(const at::Tensor& features, const at::Tensor& coords, const at::Tensor& num_voxels,
                               int64_t height, int64_t width) {
  check_dim(features, "features", 3, "(B, P, F)");
  check_floating(features, "features");
  check_fits_int32(features.size(1), "features.size(1) (pillars per cloud)");
  check_dtype(coords, "coords", at::kInt);
  check_shape(coords, "coords", {features.size(0), features.size(1), 3});
  check_same_device(coords, "coords", features, "features");
  check_dtype(num_voxels, "num_voxels", at::kLong);
  check_shape(num_voxels, "num_voxels", {features.size(0)});
  check_same_device(num_voxels, "num_voxels", features, "features");
  check_nonnegative(height, "height");
  check_nonnegative(width, "width");
  check_fits_int32(height, "height");
  check_fits_int32(width, "width");
}

}  // namespace pillar_detail

at::Tensor pillar_scatter_cpu(const at::Tensor& features, const at::Tensor& coords, const at::Tensor& num_voxels,
                              int64_t height, int64_t width) {
  pillar_detail::check_pillar_scatter_args(features, coords, num_voxels, height, width);
  const int64_t batch = features.size(0);
  const int64_t pillars = features.size(1);
  const int64_t channels = features.size(2);
  const int64_t cells = height * width;
  at::Tensor canvas = at::zeros({batch, channels, height, width}, features.options());
  if (canvas.numel() == 0) return canvas;
  const at::Tensor feats = features.contiguous();
  const at::Tensor coords_c = coords.contiguous();
  const at::Tensor counts = num_voxels.contiguous();
  const int32_t* coord = coords_c.data_ptr<int32_t>();
  const int64_t* count = counts.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, feats.scalar_type(), "pillar_scatter_cpu", [&] {
    const scalar_t* src = feats.data_ptr<scalar_t>();
    scalar_t* dst = canvas.data_ptr<scalar_t>();
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const int64_t placed = std::clamp<int64_t>(count[b], 0, pillars);
        // Highest index first, so the lowest index writes last and wins a shared cell.
        for (int64_t p = placed - 1; p >= 0; --p) {
          const int32_t* zyx = coord + (b * pillars + p) * 3;
          if (zyx[0] != 0 || zyx[1] < 0 || zyx[1] >= height || zyx[2] < 0 || zyx[2] >= width) continue;
          const int64_t cell = int64_t{zyx[1]} * width + zyx[2];
          const scalar_t* row = src + (b * pillars + p) * channels;
          scalar_t* out = dst + b * channels * cells + cell;
          for (int64_t f = 0; f < channels; ++f) out[f * cells] = row[f];
        }
      }
    });
  });
  return canvas;
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("pillar_scatter", &pillar_scatter_cpu); }

}  // namespace pointops
