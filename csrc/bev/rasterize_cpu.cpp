// BEV rasterization on the CPU: the exact twin of rasterize_cuda.cu (rules in rasterize.h).
#include "bev/rasterize.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>

#include "common/checks.h"
#include "common/clouds.h"

namespace pointops {
namespace bev_detail {

namespace {

struct ChannelName {
  const char* name;
  Channel channel;
};

constexpr ChannelName kChannelNames[kNumChannels] = {
    {"max_z", Channel::kMaxZ},
    {"min_z", Channel::kMinZ},
    {"mean_z", Channel::kMeanZ},
    {"count", Channel::kCount},
    {"density", Channel::kDensity},
    {"occupancy", Channel::kOccupancy},
    {"max_feature", Channel::kMaxFeature},
    {"mean_feature", Channel::kMeanFeature},
    {"top_feature", Channel::kTopFeature},
    {"height_slices", Channel::kHeightSlices},
};

std::string channel_list() {
  std::ostringstream names;
  for (int k = 0; k < kNumChannels; ++k) names << (k ? ", " : "") << kChannelNames[k].name;
  return names.str();
}

Channel parse_channel(const std::string& name) {
  for (const ChannelName& entry : kChannelNames) {
    if (name == entry.name) return entry.channel;
  }
  TORCH_CHECK(false, "channels: unknown channel '", name, "'; expected one of ", channel_list());
}

// Cells along one axis: floor(extent / size + 0.5) in float64, as the fake kernel computes it.
int64_t cells_along(double lo, double hi, double size, const char* axis) {
  const double cells = std::floor((hi - lo) / size + 0.5);
  TORCH_CHECK(cells >= 1 && cells <= std::numeric_limits<int32_t>::max(), "point_range and cell_size give ", cells,
              " cells along ", axis, " (extent ", hi - lo, " / cell ", size, "); expected between 1 and ",
              std::numeric_limits<int32_t>::max());
  return static_cast<int64_t>(cells);
}

}  // namespace

RasterArgs parse_raster_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             c10::ArrayRef<double> point_range, c10::ArrayRef<double> cell_size,
                             c10::ArrayRef<std::string> channels, int64_t feature_column, double density_base,
                             int64_t height_slices, bool forward_up) {
  check_padded_clouds(points, lengths, "(B, N, C) with C >= 3 (x, y, z, features)", 3);
  check_fits_int32(points.size(1), "points.size(1) (points per cloud)");
  TORCH_CHECK(point_range.size() == 6,
              "point_range must be [x_min, y_min, z_min, x_max, y_max, z_max] (6 values), got ", point_range.size(),
              " values");
  TORCH_CHECK(cell_size.size() == 2, "cell_size must be [dx, dy] (2 values), got ", cell_size.size(), " values");
  RasterArgs args;
  const char* axes[3] = {"x", "y", "z"};
  for (int a = 0; a < 3; ++a) {
    args.lo[a] = point_range[a];
    args.hi[a] = point_range[a + 3];
    TORCH_CHECK(std::isfinite(args.lo[a]) && std::isfinite(args.hi[a]) && args.lo[a] < args.hi[a],
                "point_range must be finite with min < max on every axis, got ", axes[a], " in [", args.lo[a], ", ",
                args.hi[a], ")");
  }
  for (int a = 0; a < 2; ++a) {
    args.cell[a] = cell_size[a];
    TORCH_CHECK(std::isfinite(args.cell[a]) && args.cell[a] > 0, "cell_size must be finite and > 0, got ", cell_size);
  }
  args.nx = cells_along(args.lo[0], args.hi[0], args.cell[0], "x (W)");
  args.ny = cells_along(args.lo[1], args.hi[1], args.cell[1], "y (H)");

  TORCH_CHECK(!channels.empty(), "channels must name at least one of ", channel_list());
  check_nonnegative(height_slices, "height_slices");
  bool seen[kNumChannels] = {};
  bool wants_feature = false;
  args.out_channels = 0;
  for (const std::string& name : channels) {
    const Channel channel = parse_channel(name);
    TORCH_CHECK(!seen[static_cast<int>(channel)], "channels: '", name, "' is named twice");
    seen[static_cast<int>(channel)] = true;
    args.channels.push_back(channel);
    wants_feature = wants_feature || channel == Channel::kMaxFeature || channel == Channel::kMeanFeature ||
                    channel == Channel::kTopFeature;
    if (channel == Channel::kHeightSlices) {
      TORCH_CHECK(height_slices >= 1 && height_slices <= kMaxHeightSlices, "height_slices must be between 1 and ",
                  kMaxHeightSlices, " when channels has 'height_slices', got ", height_slices);
      args.out_channels += height_slices;
    } else {
      args.out_channels += 1;
    }
    if (channel == Channel::kDensity) {
      TORCH_CHECK(std::isfinite(density_base) && density_base > 1, "density_base must be finite and > 1, got ",
                  density_base);
    }
  }
  if (wants_feature) {
    TORCH_CHECK(feature_column >= 0 && feature_column < points.size(2), "feature_column must be in [0, ",
                points.size(2), ") for points of shape ", points.sizes(), ", got ", feature_column);
  }
  args.height_slices = height_slices;
  args.feature_column = wants_feature ? feature_column : 0;
  args.density_base = density_base;
  args.forward_up = forward_up;
  check_output_fits(points.device(),
                    "point_range and cell_size (" + std::to_string(args.ny) + " x " + std::to_string(args.nx) +
                        " cells) with " + std::to_string(args.out_channels) + " channels",
                    {points.size(0), args.out_channels, args.ny, args.nx}, 4);
  return args;
}

}  // namespace bev_detail

namespace {

using bev_detail::Raster;

struct PlainOps {
  static void max64(uint64_t* p, uint64_t v) { *p = std::max(*p, v); }
  static void max32(uint32_t* p, uint32_t v) { *p = std::max(*p, v); }
  static uint64_t add64(uint64_t* p, uint64_t v) {
    const uint64_t before = *p;
    *p = before + v;
    return before;
  }
  static void or32(uint32_t* p, uint32_t v) { *p |= v; }
};

// The CPU keeps each cell's record `stride` words apart (r.record.stride, plus 2 words when
// top_slot >= 0): word top_slot holds the float32 bits of the top point's top_feature value,
// stored when the point takes the top key, while its cell is in cache. finalize_cell would read it
// from the cloud through the top point's index, a cache miss per occupied cell.
template <typename scalar_t, typename acc_t>
void rasterize_cloud(const Raster<acc_t>& r, const scalar_t* cloud, int64_t n, uint32_t* count, uint32_t* records,
                     int64_t stride, int64_t top_slot) {
  const int64_t dims = r.dims;
  for (int64_t i = 0; i < n; ++i) {
    const scalar_t* p = cloud + i * dims;
    const int64_t cell =
        bev_detail::point_cell(r, static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), static_cast<acc_t>(p[2]));
    if (cell < 0) continue;
    const bool first = count[cell]++ == 0;
    if (r.record.stride == 0) continue;
    uint32_t* record = records + cell * stride;
    if (first) std::memset(record, 0, sizeof(uint32_t) * r.record.stride);
    const acc_t feature = r.read_feature ? static_cast<acc_t>(p[r.feature_column]) : acc_t(0);
    bev_detail::accumulate_point<PlainOps>(r, record, static_cast<acc_t>(p[2]), feature, static_cast<uint32_t>(i));
    if (top_slot >= 0) {
      // The point holds the top key iff the record's key is its own (keys carry the index).
      const uint64_t key =
          argmax_key(bev_detail::z_key(static_cast<float>(static_cast<acc_t>(p[2]))), static_cast<uint32_t>(i));
      if (*reinterpret_cast<const uint64_t*>(record + r.record.top) == key) {
        const acc_t top = static_cast<acc_t>(p[r.feature_column]);
        record[top_slot] = float_bits(static_cast<float>(bev_detail::sanitize_feature(top)));
      }
    }
  }
}

// The output channel of top_feature (height_slices before it count as theirs), or -1.
template <typename acc_t>
int64_t top_feature_channel(const Raster<acc_t>& r) {
  int64_t c = 0;
  for (int32_t k = 0; k < r.num_channels; ++k) {
    if (r.channels[k] == bev_detail::Channel::kTopFeature) return c;
    c += r.channels[k] == bev_detail::Channel::kHeightSlices ? r.height_slices : 1;
  }
  return -1;
}

}  // namespace

at::Tensor bev_rasterize_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             c10::ArrayRef<double> point_range, c10::ArrayRef<double> cell_size,
                             c10::ArrayRef<std::string> channels, int64_t feature_column, double density_base,
                             int64_t height_slices, bool forward_up) {
  const bev_detail::RasterArgs args = bev_detail::parse_raster_args(
      points, lengths, point_range, cell_size, channels, feature_column, density_base, height_slices, forward_up);
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t dims = points.size(2);
  // Empty cells are 0 in every channel, which is what finalize_cell would write for them: zeroing
  // the image in one sweep leaves the finalize pass only the occupied cells (a few percent of a
  // LiDAR BEV grid).
  at::Tensor image = at::zeros(bev_detail::image_shape(args, batch), points.options().dtype(at::kFloat));
  if (batch == 0) return image;
  const int64_t cells = args.nx * args.ny;
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* lengths_ptr = lengths_c.data;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "bev_rasterize_cpu", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const Raster<acc_t> r = bev_detail::make_raster<acc_t>(args, dims);
    // top_feature comes from the record's extra word (see rasterize_cloud); finalize_cell writes
    // occupancy in its place, which is then overwritten, so it never reads the cloud.
    const int64_t top_channel = top_feature_channel(r);
    const int64_t top_slot = top_channel >= 0 ? r.record.stride : -1;
    const int64_t stride = r.record.stride + (top_slot >= 0 ? 2 : 0);
    Raster<acc_t> r_final = r;
    for (int32_t k = 0; k < r_final.num_channels; ++k) {
      if (r_final.channels[k] == bev_detail::Channel::kTopFeature) {
        r_final.channels[k] = bev_detail::Channel::kOccupancy;
      }
    }
    const at::Tensor count = at::zeros({batch, cells}, points.options().dtype(at::kInt));
    // Records of empty cells are never read, so they need no zeroing.
    const at::Tensor records = at::empty({batch, cells * stride}, points.options().dtype(at::kInt));
    uint32_t* count_ptr = reinterpret_cast<uint32_t*>(count.data_ptr<int32_t>());
    uint32_t* records_ptr = reinterpret_cast<uint32_t*>(records.data_ptr<int32_t>());
    const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();
    float* out = image.data_ptr<float>();
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const int64_t length = cloud_length(lengths_ptr, b, n);
        rasterize_cloud<scalar_t, acc_t>(r, pts_ptr + b * n * dims, length, count_ptr + b * cells,
                                         records_ptr + b * cells * stride, stride, top_slot);
      }
    });
    at::parallel_for(0, batch * cells, 4096, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        if (count_ptr[k] == 0) continue;
        const int64_t b = k / cells;
        const int64_t cell = k - b * cells;
        const uint32_t* record = records_ptr + k * stride;
        float* pixel = out + b * args.out_channels * cells + cell;
        bev_detail::finalize_cell<scalar_t, acc_t>(r_final, /*occupied=*/true, count_ptr[k], record,
                                                   pts_ptr + b * n * dims, pixel, cells);
        if (top_channel >= 0) {
          pixel[top_channel * cells] = bits_float(record[top_slot]);
        }
      }
    });
  });
  return image;
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("bev_rasterize", &bev_rasterize_cpu); }

}  // namespace pointops
