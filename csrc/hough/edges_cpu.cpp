// Edge maps to point lists on the CPU (rules in edges.h), and the point-list checks every 2D
// accumulator shares.
#include "hough/edges.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>

#include "common/checks.h"

namespace pointops {
namespace hough_images {

void check_point_lists(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                       const std::optional<at::Tensor>& weights, int64_t height, int64_t width) {
  check_dim(points, "points", 3, "(B, P, 2)");
  TORCH_CHECK(points.size(2) == 2, "points must have shape (B, P, 2) (x, y), got shape ", points.sizes());
  TORCH_CHECK(points.scalar_type() == at::kInt || points.scalar_type() == at::kLong,
              "points must be int32 or int64 pixel coordinates, got ", points.scalar_type());
  check_optional_batch_vector(lengths, "lengths", points.size(0), points, "points");
  if (weights.has_value()) {
    check_floating(*weights, "weights");
    check_shape(*weights, "weights", {points.size(0), points.size(1)});
    check_same_device(*weights, "weights", points, "points");
  }
  TORCH_CHECK(height >= 0 && height <= kMaxImageSide && width >= 0 && width <= kMaxImageSide,
              "height and width must be in [0, ", kMaxImageSide, "], got ", height, " and ", width);
  TORCH_CHECK(points.size(0) * points.size(1) <= std::numeric_limits<int32_t>::max(),
              "points must hold at most 2^31 - 1 rows in all (B * P), got shape ", points.sizes());
}

int64_t edge_capacity(const at::Tensor& edges, int64_t capacity) {
  check_dim(edges, "edges", 3, "(B, H, W)");
  TORCH_CHECK(edges.size(1) * edges.size(2) <= std::numeric_limits<int32_t>::max(),
              "edges must have at most 2^31 - 1 pixels per image, got shape ", edges.sizes());
  TORCH_CHECK(capacity >= -1, "capacity must be >= 0, or -1 for H * W, got ", capacity);
  const int64_t slots = capacity < 0 ? edges.size(1) * edges.size(2) : capacity;
  check_output_fits(edges.device(), "capacity = " + std::to_string(capacity), {edges.size(0), slots, 2}, 4);
  return slots;
}

}  // namespace hough_images

namespace {

std::tuple<at::Tensor, at::Tensor> edge_points_cpu(const at::Tensor& edges, int64_t capacity) {
  const int64_t cap = hough_images::edge_capacity(edges, capacity);
  const at::Tensor e = edges.contiguous();
  const int64_t batch = e.size(0), height = e.size(1), width = e.size(2);
  at::Tensor points = at::full({batch, cap, 2}, -1, e.options().dtype(at::kInt));
  at::Tensor lengths = at::zeros({batch}, e.options().dtype(at::kLong));
  int32_t* out = points.data_ptr<int32_t>();
  int64_t* len = lengths.data_ptr<int64_t>();
  const int64_t pixels = height * width;
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, e.scalar_type(), "edge_points_cpu", [&] {
    const scalar_t* data = e.data_ptr<scalar_t>();
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const scalar_t* image = data + b * pixels;
        int32_t* image_out = out + b * cap * 2;
        int64_t count = 0;
        for (int64_t i = 0; i < pixels && count < cap; ++i) {
          if (image[i] != scalar_t(0)) {
            image_out[2 * count] = static_cast<int32_t>(i % width);
            image_out[2 * count + 1] = static_cast<int32_t>(i / width);
            ++count;
          }
        }
        len[b] = count;
      }
    });
  });
  return {points, lengths};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("edge_points", &edge_points_cpu); }

}  // namespace pointops
