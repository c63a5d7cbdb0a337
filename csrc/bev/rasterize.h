// BEV rasterization: the contract shared by the CPU and CUDA kernels.
//
// bev_rasterize(points, lengths?, point_range, cell_size, channels, feature_column, density_base,
//               height_slices, forward_up) -> image
//   points       (B, N, C) float32/float64/float16/bfloat16, C >= 3: x, y, z, then features.
//   lengths      (B,) int64 or None (all N); clamped to [0, N].
//   point_range  [x_min, y_min, z_min, x_max, y_max, z_max], finite, max > min on every axis.
//   cell_size    [dx, dy] > 0.
//   channels     names, in output order (no repeats): max_z, min_z, mean_z, count, density,
//                occupancy, max_feature, mean_feature, top_feature, height_slices.
//   image        float32 (B, n_out, H, W), n_out = len(channels) (+ height_slices - 1 when
//                "height_slices" is named: it expands to that many channels, lowest slice first).
//                W = floor((x_max - x_min) / dx + 0.5) cells along x, H = likewise along y (in
//                float64, so the sizes come from the arguments alone).
//                [b, c, iy, ix] holds the cell ix = floor((x - x_min) / dx), iy = floor((y - y_min) / dy)
//                (OpenPCDet: x forward along W, y left along H). With forward_up the image is
//                (B, n_out, W, H) and [b, c, W-1-ix, H-1-iy] holds that cell: a top view as a person reads it,
//                x forward pointing up, y left pointing left.
//
// Rules (identical on CPU and CUDA, bit for bit):
//   * A point counts iff x_min <= x < x_max, y_min <= y < y_max, z_min <= z < z_max, and its cell
//     lies in the grid (ix < W, iy < H: this drops the sliver a range that is not a whole number of
//     cells leaves at the top, and float rounding just below x_max). NaN/Inf coordinates never
//     pass. Comparisons, cell and slice indices are computed in the compute type (float64 for
//     float64 points, float32 otherwise), the range rounded to it first, as
//     floor((x - x_min) / dx) with an IEEE division on both backends.
//   * Empty cells hold 0 in every channel.
//   * max_z / min_z are exact (z rounded to float32). top_feature is the feature of the highest
//     point, ties (equal float32 z, -0.0 == +0.0) to the lowest point index; a zero z reads back
//     as +0.0 in max_z / min_z. max_feature is exact.
//   * count is the number of points (as float32); occupancy is 1 where count > 0; density is
//     min(1, ln(count + 1) / ln(density_base)) (Complex-YOLO uses base 64), evaluated with
//     portable_log (common/portable_math.h) so both backends round alike.
//   * mean_z sums z - z_min in unsigned 64-bit fixed point with 2^32 steps over the z range
//     (exact integer sums, so order-free); mean_feature sums the feature in signed 128-bit fixed
//     point with 32 fractional bits (per point truncated toward zero). The means are then
//     (sum / count) in float64, rounded to float32: before that rounding they are within one
//     fixed-point step of the exact mean (2^-32 of the z range; 2^-32 for features).
//   * The feature channels read feature_column (any column, 0 <= feature_column < C) through
//     sanitize_feature: NaN reads as 0 and values are clamped to +-2^30, so a bad feature never
//     poisons a cell's z channels or overflows the fixed-point sum.
//   * height_slices splits [z_min, z_max) into that many equal slices (PIXOR); slice s is 1 where
//     a point has floor((z - z_min) / slice_height) == s (clamped to the last slice, which float
//     rounding just below z_max can overshoot).
//
// How both backends accumulate: each occupied cell has an int32 count and a record of 32-bit
// slots holding only what the channels need (RecordLayout): a 64-bit top key (argmax_key of the
// ordered z bits and the point index, max), the inverted ordered bits of z (max = min z), the
// ordered bits of the feature (max), the fixed-point sums and the slice bits (or). All of these
// are integer max / add / or, so order does not matter and CUDA uses plain integer atomics.
// The CPU keeps them per cell of a cloud and zeroes a record when its first point arrives; CUDA
// keeps them only for occupied cells, found through an occupancy bitmap (rasterize_cuda.cu).
// Records of empty cells are never read. finalize_cell turns a cell's count and record into its
// output channels, the same code on both backends.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/argmax_key.h"
#include "common/float_bits.h"
#include "common/portable_math.h"

namespace pointops {

at::Tensor bev_rasterize_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             c10::ArrayRef<double> point_range, c10::ArrayRef<double> cell_size,
                             c10::ArrayRef<std::string> channels, int64_t feature_column, double density_base,
                             int64_t height_slices, bool forward_up);

namespace bev_detail {

enum class Channel : int32_t {
  kMaxZ,
  kMinZ,
  kMeanZ,
  kCount,
  kDensity,
  kOccupancy,
  kMaxFeature,
  kMeanFeature,
  kTopFeature,
  kHeightSlices,
};
constexpr int kNumChannels = 10;
constexpr int64_t kMaxHeightSlices = 1024;
constexpr double kFeatureLimit = 1073741824.0;  // 2^30: sanitize_feature's clamp
constexpr double kFixedOne = 4294967296.0;      // 2^32: one unit in the fixed-point sums

// Offsets (in 32-bit slots) of a cell's accumulators inside its record; -1 when not needed.
// 64-bit fields sit at even offsets and `stride` is even, so they stay 8-byte aligned.
struct RecordLayout {
  int32_t top = -1;     // uint64 top key: max_z, top_feature
  int32_t sum_z = -1;   // uint64 fixed-point sum of z - z_min: mean_z
  int32_t sum_f = -1;   // uint64 low word, then int64 high word: mean_feature
  int32_t min_z = -1;   // uint32 ~ordered(z), kept by max: min_z
  int32_t max_f = -1;   // uint32 ordered(feature): max_feature
  int32_t slices = -1;  // ceil(height_slices / 32) uint32 bit words: height_slices
  int32_t stride = 0;
};

// Everything the kernels need to know, passed by value.
template <typename acc_t>
struct Raster {
  acc_t lo[3];     // x_min, y_min, z_min rounded to the compute type
  acc_t hi[3];     // x_max, y_max, z_max
  acc_t cell[2];   // dx, dy
  acc_t slice;     // (z_max - z_min) / height_slices, rounded to the compute type
  int64_t nx, ny;  // W, H
  int32_t height_slices;
  bool forward_up;
  double z_offset;  // lo[2] in float64: the origin of the z sums
  double z_scale;   // 2^32 / (hi[2] - lo[2]) in float64: fixed-point steps per metre
  double log_base;  // portable_log(density_base)
  int64_t feature_column;
  int64_t dims;  // C
  bool read_feature;
  RecordLayout record;
  int32_t num_channels;
  Channel channels[kNumChannels];
  int64_t out_channels;
};

// What the host learns from the arguments (checked) before the compute type is known.
struct RasterArgs {
  double lo[3], hi[3], cell[2];
  int64_t nx, ny;
  std::vector<Channel> channels;
  int64_t out_channels;
  int64_t height_slices;
  int64_t feature_column;
  double density_base;
  bool forward_up;
};

// Checks every argument (defined in rasterize_cpu.cpp) and returns what they describe.
RasterArgs parse_raster_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                             c10::ArrayRef<double> point_range, c10::ArrayRef<double> cell_size,
                             c10::ArrayRef<std::string> channels, int64_t feature_column, double density_base,
                             int64_t height_slices, bool forward_up);

// The output's (rows, cols): (H, W), or (W, H) with forward_up.
inline std::vector<int64_t> image_shape(const RasterArgs& args, int64_t batch) {
  return args.forward_up ? std::vector<int64_t>{batch, args.out_channels, args.nx, args.ny}
                         : std::vector<int64_t>{batch, args.out_channels, args.ny, args.nx};
}

template <typename acc_t>
POINTOPS_HOST_DEVICE inline acc_t sanitize_feature(acc_t f) {
  const acc_t limit = static_cast<acc_t>(kFeatureLimit);
  if (f != f) return acc_t(0);
  return f < -limit ? -limit : (f > limit ? limit : f);
}

// Linear index of a point's cell within its cloud's image, or -1 when the point does not count.
template <typename acc_t>
POINTOPS_HOST_DEVICE inline int64_t point_cell(const Raster<acc_t>& r, acc_t x, acc_t y, acc_t z) {
  // Written so that NaN fails every comparison.
  if (!(x >= r.lo[0] && x < r.hi[0] && y >= r.lo[1] && y < r.hi[1] && z >= r.lo[2] && z < r.hi[2])) {
    return -1;
  }
  const int64_t ix = static_cast<int64_t>(floor_value((x - r.lo[0]) / r.cell[0]));
  const int64_t iy = static_cast<int64_t>(floor_value((y - r.lo[1]) / r.cell[1]));
  if (ix >= r.nx || iy >= r.ny) return -1;
  return r.forward_up ? (r.nx - 1 - ix) * r.ny + (r.ny - 1 - iy) : iy * r.nx + ix;
}

// The ordered key of a point's z (rounded to float32) in max_z, min_z and top_feature: -0.0 and
// +0.0 are one value there (ordered_bits alone ranks -0.0 below +0.0, so a point at -0.0 would
// lose a tie it should win by its lower index), and both read back as +0.0.
POINTOPS_HOST_DEVICE inline uint32_t z_key(float z) { return ordered_bits(z == 0.f ? 0.f : z); }

// The per-cell accumulators are updated through Ops: plain operations on the CPU, where one
// thread owns a cloud, and integer atomics on CUDA. add64 returns the previous value.
template <typename Ops, typename acc_t>
POINTOPS_HOST_DEVICE inline void accumulate_point(const Raster<acc_t>& r, uint32_t* record, acc_t z, acc_t raw_feature,
                                                  uint32_t index) {
  const RecordLayout& layout = r.record;
  const acc_t feature = sanitize_feature(raw_feature);
  const float zf = static_cast<float>(z);
  if (layout.top >= 0) {
    Ops::max64(reinterpret_cast<uint64_t*>(record + layout.top), argmax_key(z_key(zf), index));
  }
  if (layout.min_z >= 0) Ops::max32(record + layout.min_z, ~z_key(zf));
  if (layout.sum_z >= 0) {
    // z >= lo[2] and z_offset == lo[2], so the difference is >= 0; < 2^32 steps per point keeps
    // the sum of up to 2^31 points below 2^64.
    const double steps = (static_cast<double>(z) - r.z_offset) * r.z_scale;
    Ops::add64(reinterpret_cast<uint64_t*>(record + layout.sum_z), static_cast<uint64_t>(steps));
  }
  if (layout.max_f >= 0) Ops::max32(record + layout.max_f, ordered_bits(static_cast<float>(feature)));
  if (layout.sum_f >= 0) {
    // Truncated to |q| <= 2^62; the 128-bit sum is a low word plus a signed high word that takes
    // the sign extension and the low word's carry.
    const int64_t q = static_cast<int64_t>(static_cast<double>(feature) * kFixedOne);
    uint64_t* low = reinterpret_cast<uint64_t*>(record + layout.sum_f);
    const uint64_t add = static_cast<uint64_t>(q);
    const uint64_t before = Ops::add64(low, add);
    const uint64_t high = (q < 0 ? ~uint64_t{0} : uint64_t{0}) + (before + add < before ? 1u : 0u);
    if (high != 0) Ops::add64(low + 1, high);
  }
  if (layout.slices >= 0) {
    int64_t s = static_cast<int64_t>(floor_value((z - r.lo[2]) / r.slice));
    if (s >= r.height_slices) s = r.height_slices - 1;
    Ops::or32(record + layout.slices + s / 32, 1u << (s % 32));
  }
}

// Writes cell's output channels (out[c * plane], c = 0..out_channels-1) from its count and record.
// `cloud` is the cloud's (N, C) points, for the top point's feature. occupied == (count > 0), passed
// apart so that CUDA, which knows it from its bitmap, issues the record's loads without waiting
// for the count's. The record of an empty cell is never read.
template <typename scalar_t, typename acc_t>
POINTOPS_HOST_DEVICE inline void finalize_cell(const Raster<acc_t>& r, bool occupied, uint32_t count,
                                               const uint32_t* record, const scalar_t* cloud, float* out,
                                               int64_t plane) {
  const RecordLayout& layout = r.record;
  int64_t c = 0;
  for (int32_t k = 0; k < r.num_channels; ++k) {
    float value = 0.f;
    switch (r.channels[k]) {
      case Channel::kMaxZ:
        if (occupied) {
          const uint64_t top = *reinterpret_cast<const uint64_t*>(record + layout.top);
          value = ordered_float(argmax_key_value(top));
        }
        break;
      case Channel::kMinZ:
        if (occupied) value = ordered_float(~record[layout.min_z]);
        break;
      case Channel::kMeanZ:
        if (occupied) {
          const double sum = static_cast<double>(*reinterpret_cast<const uint64_t*>(record + layout.sum_z));
          value = static_cast<float>(r.z_offset + sum / count / r.z_scale);
        }
        break;
      case Channel::kCount:
        value = static_cast<float>(count);
        break;
      case Channel::kDensity:
        if (occupied) {
          const double d = portable_log(static_cast<double>(count) + 1.0) / r.log_base;
          value = static_cast<float>(d < 1.0 ? d : 1.0);
        }
        break;
      case Channel::kOccupancy:
        value = occupied ? 1.f : 0.f;
        break;
      case Channel::kMaxFeature:
        if (occupied) value = ordered_float(record[layout.max_f]);
        break;
      case Channel::kMeanFeature:
        if (occupied) {
          const uint64_t* sum = reinterpret_cast<const uint64_t*>(record + layout.sum_f);
          // high * 2^64 is exact, so a fused multiply-add rounds like the separate operations.
          const double total =
              static_cast<double>(static_cast<int64_t>(sum[1])) * 18446744073709551616.0 + static_cast<double>(sum[0]);
          value = static_cast<float>(total / count / kFixedOne);
        }
        break;
      case Channel::kTopFeature:
        if (occupied) {
          const uint32_t i = argmax_key_index(*reinterpret_cast<const uint64_t*>(record + layout.top));
          const acc_t f = static_cast<acc_t>(cloud[static_cast<int64_t>(i) * r.dims + r.feature_column]);
          value = static_cast<float>(sanitize_feature(f));
        }
        break;
      case Channel::kHeightSlices:
        for (int32_t s = 0; s < r.height_slices; ++s) {
          const bool set = occupied && ((record[layout.slices + s / 32] >> (s % 32)) & 1u);
          out[(c + s) * plane] = set ? 1.f : 0.f;
        }
        c += r.height_slices;
        continue;
    }
    out[c * plane] = value;
    ++c;
  }
}

// The kernels' view of the arguments in the compute type acc_t.
template <typename acc_t>
Raster<acc_t> make_raster(const RasterArgs& args, int64_t dims) {
  Raster<acc_t> r{};
  for (int a = 0; a < 3; ++a) {
    r.lo[a] = static_cast<acc_t>(args.lo[a]);
    r.hi[a] = static_cast<acc_t>(args.hi[a]);
  }
  r.cell[0] = static_cast<acc_t>(args.cell[0]);
  r.cell[1] = static_cast<acc_t>(args.cell[1]);
  r.nx = args.nx;
  r.ny = args.ny;
  r.forward_up = args.forward_up;
  r.z_offset = static_cast<double>(r.lo[2]);
  r.z_scale = kFixedOne / (static_cast<double>(r.hi[2]) - static_cast<double>(r.lo[2]));
  r.log_base = portable_log(args.density_base > 1.0 ? args.density_base : 2.0);
  r.feature_column = args.feature_column;
  r.dims = dims;
  r.num_channels = static_cast<int32_t>(args.channels.size());
  r.out_channels = args.out_channels;
  r.height_slices = 0;
  r.slice = acc_t(1);
  bool wants[kNumChannels] = {};
  for (int32_t k = 0; k < r.num_channels; ++k) {
    r.channels[k] = args.channels[k];
    wants[static_cast<int>(args.channels[k])] = true;
  }
  auto wanted = [&](Channel c) { return wants[static_cast<int>(c)]; };
  r.read_feature = wanted(Channel::kMaxFeature) || wanted(Channel::kMeanFeature);
  if (wanted(Channel::kHeightSlices)) {
    r.height_slices = static_cast<int32_t>(args.height_slices);
    r.slice = static_cast<acc_t>((args.hi[2] - args.lo[2]) / args.height_slices);
  }
  // 64-bit fields first, so they are aligned without padding.
  RecordLayout& layout = r.record;
  int32_t slots = 0;
  auto take = [&](bool needed, int32_t size) {
    if (!needed) return -1;
    slots += size;
    return slots - size;
  };
  layout.top = take(wanted(Channel::kMaxZ) || wanted(Channel::kTopFeature), 2);
  layout.sum_z = take(wanted(Channel::kMeanZ), 2);
  layout.sum_f = take(wanted(Channel::kMeanFeature), 4);
  layout.min_z = take(wanted(Channel::kMinZ), 1);
  layout.max_f = take(wanted(Channel::kMaxFeature), 1);
  layout.slices = take(wanted(Channel::kHeightSlices), (r.height_slices + 31) / 32);
  layout.stride = slots + (slots % 2);
  return r;
}

}  // namespace bev_detail
}  // namespace pointops
