// Voxel-grid downsampling on the CPU: the twin of voxel_downsample_cuda.cu (rules in
// voxel_downsample.h). Clouds run in parallel; each whose direct or packed key fits builds the CPU
// parallel hash array of its keys, whose runs list the voxels in key order and each voxel's
// points in index order: the order in which both backends sum them. Any other cloud sorts its
// points by (z, y, x cell, index) instead, which lists them in the same order.
#include "geometry/voxel_downsample.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/hash_array_cpu.h"

namespace pointops {
namespace voxel_downsample_detail {

DownsampleArgs check_downsample_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                     const std::optional<at::Tensor>& features, at::ArrayRef<double> voxel_size,
                                     std::optional<at::ArrayRef<double>> point_range) {
  check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3);
  check_fits_int32(points.size(1), "points.size(1) (points per cloud)");
  DownsampleArgs args{};
  args.features = 0;
  if (features.has_value()) {
    check_dim(*features, "features", 3, "(B, N, F)");
    check_floating(*features, "features");
    TORCH_CHECK(features->size(0) == points.size(0) && features->size(1) == points.size(1),
                "features must have shape (B, N, F) with B, N = ", points.size(0), ", ", points.size(1),
                " (as points), got shape ", features->sizes());
    check_same_device(*features, "features", points, "points");
    args.features = features->size(2);
  }
  TORCH_CHECK(voxel_size.size() == 3, "voxel_size must have 3 values [dx, dy, dz], got ", voxel_size.size(), ": ",
              voxel_size);
  const bool wide = points.scalar_type() == at::kDouble;
  constexpr const char* kAxis[3] = {"x", "y", "z"};
  for (int d = 0; d < 3; ++d) {
    // Checked in the compute type: a size that is finite in float64 may round to 0 or Inf.
    const double size = wide ? voxel_size[d] : static_cast<double>(static_cast<float>(voxel_size[d]));
    TORCH_CHECK(std::isfinite(size) && size > 0, "voxel_size[", d, "] (", kAxis[d], ") must be finite and > 0",
                wide ? "" : " in float32", ", got ", voxel_size[d]);
    args.size[d] = voxel_size[d];
  }
  args.has_range = point_range.has_value();
  if (args.has_range) {
    TORCH_CHECK(point_range->size() == 6,
                "point_range must have 6 values [x_min, y_min, z_min, x_max, y_max, z_max], got ", point_range->size(),
                ": ", *point_range);
    for (int d = 0; d < 3; ++d) {
      const double lo = (*point_range)[d];
      const double hi = (*point_range)[d + 3];
      const double lo_c = wide ? lo : static_cast<double>(static_cast<float>(lo));
      const double hi_c = wide ? hi : static_cast<double>(static_cast<float>(hi));
      // x_max may be +Inf (no upper bound); x_min must be finite: it is the grid's origin.
      TORCH_CHECK(std::isfinite(lo_c) && !std::isnan(hi_c) && lo_c < hi_c, "point_range must have finite ", kAxis[d],
                  "_min < ", kAxis[d], "_max", wide ? "" : " (in float32)", ", got [", lo, ", ", hi, "]");
      args.origin[d] = lo;
      args.upper[d] = hi;
    }
  } else {
    for (int d = 0; d < 3; ++d) {
      args.origin[d] = 0.0;
      args.upper[d] = 0.0;
    }
  }
  return args;
}

VoxelDownsampleResult empty_downsample_outputs(const at::Tensor& points, const std::optional<at::Tensor>& features) {
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const auto options = points.options();
  at::Tensor mean_features = features.has_value() ? at::zeros({batch, n, features->size(2)}, features->options())
                                                  : at::zeros({batch, n, 0}, options);
  return {at::zeros({batch, n, 3}, options), mean_features, at::zeros({batch}, options.dtype(at::kLong)),
          at::full({batch, n}, -1, options.dtype(at::kLong))};
}

}  // namespace voxel_downsample_detail

namespace {

using namespace voxel_downsample_detail;

constexpr int64_t kPointsPerTask = 16384;
constexpr int64_t kVoxelsPerTask = 4096;

// Voxel r of a cloud: the mean of its points members[0, count) (increasing point index), and
// each member's row in point_voxel.
template <typename scalar_t, typename feature_t>
void write_voxel(const int64_t* members, int64_t count, int64_t r, const scalar_t* cloud, const feature_t* feats,
                 int64_t f, scalar_t* centroids, feature_t* mean_features, int64_t* point_voxel) {
  const double divisor = static_cast<double>(count);
  double sum[3] = {0.0, 0.0, 0.0};
  for (int64_t t = 0; t < count; ++t) {
    const int64_t p = members[t];
    point_voxel[p] = r;
    for (int d = 0; d < 3; ++d) sum[d] = add(sum[d], static_cast<double>(cloud[3 * p + d]));
  }
  for (int d = 0; d < 3; ++d) centroids[3 * r + d] = static_cast<scalar_t>(divide(sum[d], divisor));
  for (int64_t c = 0; c < f; ++c) {
    double s = 0.0;
    for (int64_t t = 0; t < count; ++t) s = add(s, static_cast<double>(feats[f * members[t] + c]));
    mean_features[f * r + c] = static_cast<feature_t>(divide(s, divisor));
  }
}

// One cloud of n points; the output pointers are at the cloud's rows. Its passes over points and
// voxels are parallel when it runs outside a parallel region (few clouds) and inline inside one
// (at::parallel_for nests inline); the sort is serial. Every pass writes disjoint rows, so the
// split changes no value.
template <typename scalar_t, typename feature_t, typename acc_t>
void downsample_one_cloud(const scalar_t* cloud, const feature_t* feats, int64_t n, int64_t f,
                          const VoxelGrid<acc_t>& grid, scalar_t* centroids, feature_t* mean_features,
                          int64_t* new_length, int64_t* point_voxel) {
  std::vector<int64_t> cells(static_cast<size_t>(3 * n));
  std::vector<char> counted(static_cast<size_t>(n));
  at::parallel_for(0, n, kPointsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const scalar_t* p = cloud + 3 * i;
      counted[i] =
          grid.cell(static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), static_cast<acc_t>(p[2]), cells.data() + 3 * i);
    }
  });
  int64_t low[3] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max(),
                    std::numeric_limits<int64_t>::max()};
  int64_t high[3] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::min()};
  int64_t num_counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!counted[i]) continue;
    ++num_counted;
    for (int d = 0; d < 3; ++d) {
      low[d] = std::min(low[d], cells[3 * i + d]);
      high[d] = std::max(high[d], cells[3 * i + d]);
    }
  }
  if (num_counted == 0) return;  // new_length stays 0, point_voxel -1

  // The key: the raw offsets when they fit, else the packed ones when those fit (layout rules
  // in voxel_downsample.h).
  int32_t bits[3];
  std::vector<uint64_t> shifts;
  bool fits = direct_layout(low, high, bits);
  if (!fits) {
    shifts.assign(3 * kOffsetBins, ~uint64_t{0});
    std::vector<uint64_t> bin_high(3 * kOffsetBins, 0);
    for (int64_t i = 0; i < n; ++i) {
      if (!counted[i]) continue;
      for (int d = 0; d < 3; ++d) {
        const uint64_t offset = static_cast<uint64_t>(cells[3 * i + d] - low[d]);
        const int64_t bin = d * kOffsetBins + offset_bin(offset);
        shifts[bin] = std::min(shifts[bin], offset);
        bin_high[bin] = std::max(bin_high[bin], offset);
      }
    }
    uint64_t top[3];
    for (int d = 0; d < 3; ++d) top[d] = pack_axis(shifts.data() + d * kOffsetBins, bin_high.data() + d * kOffsetBins);
    fits = packed_layout(top, bits);
  }
  if (fits) {
    const uint64_t* shift = shifts.empty() ? nullptr : shifts.data();
    std::vector<int64_t> keys(static_cast<size_t>(n));
    at::parallel_for(0, n, kPointsPerTask, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        keys[i] = counted[i] ? cell_key(cells.data() + 3 * i, low, shift, bits) : kInvalidKey;
      }
    });
    const HashArrayCpu h = build_hash_array_cpu(keys.data(), n, kInvalidKey);
    *new_length = h.num_unique();
    at::parallel_for(0, h.num_unique(), kVoxelsPerTask, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        write_voxel(h.perm.data() + h.starts[r], h.counts[r], r, cloud, feats, f, centroids, mean_features,
                    point_voxel);
      }
    });
    return;
  }

  // Neither key fits: the counted points sorted by (z, y, x, index), the order the CUDA kernel's
  // merge sort gives; runs of equal cells are its voxels.
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(num_counted));
  for (int64_t i = 0; i < n; ++i) {
    if (counted[i]) order.push_back(i);
  }
  const int64_t* c = cells.data();
  std::sort(order.begin(), order.end(),
            [c](int64_t a, int64_t b) { return cell_index_less(c + 3 * a, a, c + 3 * b, b); });
  std::vector<int64_t> starts;
  for (int64_t j = 0; j < num_counted; ++j) {
    if (j == 0 || !same_cell(c + 3 * order[j], c + 3 * order[j - 1])) starts.push_back(j);
  }
  const int64_t voxels = static_cast<int64_t>(starts.size());
  starts.push_back(num_counted);
  *new_length = voxels;
  at::parallel_for(0, voxels, kVoxelsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      write_voxel(order.data() + starts[r], starts[r + 1] - starts[r], r, cloud, feats, f, centroids, mean_features,
                  point_voxel);
    }
  });
}

template <typename scalar_t, typename feature_t>
void downsample_cpu_typed(const at::Tensor& pts, const at::Tensor& feats, const int64_t* length_ptr,
                          const DownsampleArgs& args, VoxelDownsampleResult& outputs) {
  using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
  const auto grid = make_grid<acc_t>(args);
  const int64_t batch = pts.size(0);
  const int64_t n = pts.size(1);
  const int64_t f = args.features;
  const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();
  const feature_t* feats_ptr = f > 0 ? feats.data_ptr<feature_t>() : nullptr;
  scalar_t* centroids = std::get<0>(outputs).data_ptr<scalar_t>();
  feature_t* mean_features = f > 0 ? std::get<1>(outputs).data_ptr<feature_t>() : nullptr;
  int64_t* new_lengths = std::get<2>(outputs).data_ptr<int64_t>();
  int64_t* point_voxel = std::get<3>(outputs).data_ptr<int64_t>();
  auto one = [&](int64_t b) {
    downsample_one_cloud<scalar_t, feature_t, acc_t>(
        pts_ptr + b * n * 3, f > 0 ? feats_ptr + b * n * f : nullptr, cloud_length(length_ptr, b, n), f, grid,
        centroids + b * n * 3, f > 0 ? mean_features + b * n * f : nullptr, new_lengths + b, point_voxel + b * n);
  };
  if (batch >= at::get_num_threads()) {
    // Clouds run on several threads; the error raised is the lowest failing cloud's, whichever
    // thread fails first.
    std::vector<std::exception_ptr> errors(static_cast<size_t>(batch));
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        try {
          one(b);
        } catch (...) {
          errors[b] = std::current_exception();
        }
      }
    });
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);
    }
  } else {
    for (int64_t b = 0; b < batch; ++b) one(b);  // few clouds: each one's passes run in parallel
  }
}

VoxelDownsampleResult voxel_downsample_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                           const std::optional<at::Tensor>& features, at::ArrayRef<double> voxel_size,
                                           std::optional<at::ArrayRef<double>> point_range) {
  const DownsampleArgs args = check_downsample_args(points, lengths, features, voxel_size, point_range);
  VoxelDownsampleResult outputs = empty_downsample_outputs(points, features);
  if (points.size(0) == 0 || points.size(1) == 0) return outputs;
  const at::Tensor pts = points.contiguous();
  // Without features the feature type is a placeholder: no feature is read or written.
  const at::Tensor feats = args.features > 0 ? features->contiguous() : pts;
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "voxel_downsample_cpu", [&] {
    using point_t = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, feats.scalar_type(), "voxel_downsample_cpu", [&] {
      downsample_cpu_typed<point_t, scalar_t>(pts, feats, lengths_c.data, args, outputs);
    });
  });
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("voxel_downsample", &voxel_downsample_cpu); }

}  // namespace pointops
