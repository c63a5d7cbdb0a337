// Farthest point sampling on the CPU: the exact twin of fps_cuda.cu (see fps.h for the rules).
#include "sampling/fps.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"

namespace pointops {
namespace fps_detail {

void check_fps_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                    const std::optional<at::Tensor>& start, int64_t k) {
  check_padded_clouds(points, lengths, "(B, N, D) with D >= 1", 1);
  check_fits_int32(points.size(1), "points.size(1) (points per cloud)");
  check_optional_batch_vector(start, "start", points.size(0), points, "points");
  check_nonnegative(k, "k");
}

void check_fps_packed_args(const at::Tensor& points, const at::Tensor& offsets,
                           const std::optional<at::Tensor>& start, int64_t k) {
  check_dim(points, "points", 2, "(P, D)");
  check_floating(points, "points");
  TORCH_CHECK(points.size(1) >= 1, "points must have at least one coordinate (D >= 1), got shape ",
              points.sizes());
  check_fits_int32(points.size(0), "points.size(0) (total points)");
  check_dim(offsets, "offsets", 1, "(B + 1,)");
  check_dtype(offsets, "offsets", at::kLong);
  TORCH_CHECK(offsets.size(0) >= 1, "offsets must have B + 1 >= 1 entries, got shape ",
              offsets.sizes());
  check_same_device(offsets, "offsets", points, "points");
  check_optional_batch_vector(start, "start", offsets.size(0) - 1, points, "points");
  check_nonnegative(k, "k");
}

}  // namespace fps_detail

namespace {

template <typename scalar_t, typename acc_t>
void sample_one_cloud(const scalar_t* cloud, int64_t n, int64_t dims, int64_t start, int64_t k,
                      int64_t index_base, int64_t* out_index, acc_t* out_distance) {
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  std::vector<acc_t> coords(static_cast<size_t>(n * dims));
  std::vector<acc_t> min_distance(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    bool finite = true;
    for (int64_t d = 0; d < dims; ++d) {
      const acc_t v = static_cast<acc_t>(cloud[i * dims + d]);
      coords[i * dims + d] = v;
      finite = finite && std::isfinite(v);
    }
    min_distance[i] = finite ? kInf : -kInf;
  }

  // The first pick: start when it names a present point, else the lowest-index present point,
  // which is what the general argmax below returns while every distance is +inf.
  int64_t pick = (start >= 0 && start < n && min_distance[start] == kInf) ? start : -1;
  if (pick < 0) {
    for (int64_t i = 0; i < n && pick < 0; ++i) pick = min_distance[i] == kInf ? i : -1;
  }

  int64_t s = 0;
  for (; s < k && pick >= 0; ++s) {
    out_index[s] = pick + index_base;
    out_distance[s] = min_distance[pick];
    min_distance[pick] = fps_detail::picked_marker<acc_t>();
    const acc_t* q = &coords[pick * dims];
    // Strict comparison keeps the lowest index among equal candidates; picked (-1) and absent
    // (-inf) points never beat the initial best of -1.
    acc_t best = fps_detail::picked_marker<acc_t>();
    int64_t next = -1;
    for (int64_t i = 0; i < n; ++i) {
      const acc_t dist = fps_detail::squared_distance(&coords[i * dims], q, dims);
      acc_t m = min_distance[i];
      if (dist < m) m = dist;  // a NaN never compares less, so absent points keep -inf
      min_distance[i] = m;
      if (m > best) {
        best = m;
        next = i;
      }
    }
    pick = next;
  }
  for (; s < k; ++s) {
    out_index[s] = -1;
    out_distance[s] = -1;
  }
}

std::tuple<at::Tensor, at::Tensor> fps_cpu_impl(const at::Tensor& points, CloudLayout layout,
                                                int64_t batch, int64_t dims,
                                                const std::optional<at::Tensor>& start,
                                                int64_t k) {
  const auto options = points.options();
  at::Tensor indices = at::empty({batch, k}, options.dtype(at::kLong));
  at::Tensor distances = at::empty({batch, k}, options.dtype(fps_detail::distance_dtype(points)));
  if (batch == 0 || k == 0) return {indices, distances};
  const at::Tensor start_c = start.has_value() ? start->contiguous() : at::Tensor();
  const int64_t* start_ptr = start_c.defined() ? start_c.data_ptr<int64_t>() : nullptr;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, points.scalar_type(), "fps_cpu", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* pts = points.data_ptr<scalar_t>();
    int64_t* idx = indices.data_ptr<int64_t>();
    acc_t* dist = distances.data_ptr<acc_t>();
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        sample_one_cloud<scalar_t, acc_t>(pts + layout.begin(b) * dims, layout.length(b), dims,
                                          start_ptr ? start_ptr[b] : 0, k, layout.index_base(b),
                                          idx + b * k, dist + b * k);
      }
    });
  });
  return {indices, distances};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fps_cpu(const at::Tensor& points,
                                           const std::optional<at::Tensor>& lengths,
                                           const std::optional<at::Tensor>& start, int64_t k) {
  fps_detail::check_fps_args(points, lengths, start, k);
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const CloudLayout layout = padded_layout(lengths_c.data, pts.size(0), pts.size(1));
  return fps_cpu_impl(pts, layout, pts.size(0), pts.size(2), start, k);
}

std::tuple<at::Tensor, at::Tensor> fps_packed_cpu(const at::Tensor& points,
                                                  const at::Tensor& offsets,
                                                  const std::optional<at::Tensor>& start,
                                                  int64_t k) {
  fps_detail::check_fps_packed_args(points, offsets, start, k);
  const at::Tensor pts = points.contiguous();
  const at::Tensor offsets_c = offsets.contiguous();
  // The values are on the host here, so a malformed layout is an error rather than the CUDA
  // kernel's documented clamp (which it applies because looking would need a host sync).
  const int64_t* bounds = offsets_c.data_ptr<int64_t>();
  for (int64_t b = 0; b + 1 < offsets_c.size(0); ++b) {
    TORCH_CHECK(bounds[b] >= 0 && bounds[b] <= bounds[b + 1] && bounds[b + 1] <= pts.size(0),
                "offsets must be non-decreasing values in [0, P = ", pts.size(0), "], got offsets[",
                b, "] = ", bounds[b], " and offsets[", b + 1, "] = ", bounds[b + 1]);
  }
  const CloudLayout layout = packed_layout(bounds, pts.size(0));
  return fps_cpu_impl(pts, layout, offsets.size(0) - 1, pts.size(1), start, k);
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("fps", &fps_cpu);
  m.impl("fps_packed", &fps_packed_cpu);
}

}  // namespace pointops
