// Hard voxelization on the CPU: the twin of voxelize_cuda.cu (rules in voxelize.h). Clouds run
// in parallel; each builds the CPU parallel hash array of its cell keys, as the CUDA kernel does
// for the whole batch, so both take voxels and points in the same order by construction.
#include "bev/voxelize.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/hash_array_cpu.h"

namespace pointops {
namespace voxelize_detail {

VoxelizeArgs check_voxelize_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                 at::ArrayRef<double> voxel_size, at::ArrayRef<double> point_range,
                                 int64_t max_points_per_voxel, int64_t max_voxels) {
  check_padded_clouds(points, lengths, "(B, N, C) with C >= 3 (x, y, z, features)", 3);
  check_fits_int32(points.size(1), "points.size(1) (points per cloud)");
  TORCH_CHECK(voxel_size.size() == 3, "voxel_size must have 3 values [dx, dy, dz], got ", voxel_size.size(), ": ",
              voxel_size);
  TORCH_CHECK(point_range.size() == 6,
              "point_range must have 6 values [x_min, y_min, z_min, x_max, y_max, z_max], got ", point_range.size(),
              ": ", point_range);
  check_nonnegative(max_points_per_voxel, "max_points_per_voxel");
  check_fits_int32(max_points_per_voxel, "max_points_per_voxel");
  check_nonnegative(max_voxels, "max_voxels");
  check_fits_int32(max_voxels, "max_voxels");

  VoxelizeArgs args;
  constexpr const char* kAxis[3] = {"x", "y", "z"};
  constexpr float kMaxDim = 1 << 24;
  for (int d = 0; d < 3; ++d) {
    // Checked as float32, the type the grid size (and float32 points) are computed in.
    const float size = static_cast<float>(voxel_size[d]);
    const float lo = static_cast<float>(point_range[d]);
    const float hi = static_cast<float>(point_range[d + 3]);
    TORCH_CHECK(std::isfinite(size) && size > 0, "voxel_size[", d, "] (", kAxis[d],
                ") must be finite and > 0 in float32, got ", voxel_size[d]);
    TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "point_range must have finite ", kAxis[d], "_min < ",
                kAxis[d], "_max (in float32), got [", point_range[d], ", ", point_range[d + 3], "]");
    const float dim = std::nearbyint((hi - lo) / size);
    TORCH_CHECK(dim >= 1 && dim <= kMaxDim, "point_range and voxel_size must give the grid 1 to 2^24 voxels along ",
                kAxis[d], ", got round((", point_range[d + 3], " - ", point_range[d], ") / ", voxel_size[d],
                ") = ", dim);
    args.origin[d] = point_range[d];
    args.size[d] = voxel_size[d];
    args.dims[d] = static_cast<int64_t>(dim);
  }
  // Keys are b * cells + cell, with B * cells marking dropped points: all must fit int64.
  constexpr int64_t kMaxKey = std::numeric_limits<int64_t>::max();
  const int64_t plane = args.dims[0] * args.dims[1];
  TORCH_CHECK(args.dims[2] <= kMaxKey / plane && points.size(0) <= kMaxKey / (plane * args.dims[2]),
              "voxelize: batch * grid cells must fit int64, got ", points.size(0), " * ", args.dims[0], " * ",
              args.dims[1], " * ", args.dims[2]);
  check_output_fits(points.device(),
                    "max_voxels = " + std::to_string(max_voxels) +
                        " and max_points_per_voxel = " + std::to_string(max_points_per_voxel),
                    {points.size(0), max_voxels, max_points_per_voxel, points.size(2)}, points.element_size());
  return args;
}

VoxelizeResult empty_outputs(const at::Tensor& points, int64_t max_points_per_voxel, int64_t max_voxels) {
  const int64_t batch = points.size(0);
  const auto options = points.options();
  return {at::zeros({batch, max_voxels, max_points_per_voxel, points.size(2)}, options),
          at::full({batch, max_voxels, 3}, -1, options.dtype(at::kInt)),
          at::zeros({batch, max_voxels}, options.dtype(at::kInt)), at::zeros({batch}, options.dtype(at::kLong)),
          at::full({batch, points.size(1)}, -1, options.dtype(at::kLong))};
}

}  // namespace voxelize_detail

namespace {

// One cloud of n points; outputs point at the cloud's slices.
template <typename scalar_t, typename acc_t>
void voxelize_one_cloud(const scalar_t* cloud, int64_t n, int64_t channels, const VoxelGrid<acc_t>& grid,
                        int64_t max_points, int64_t max_voxels, scalar_t* voxels, int32_t* coords, int32_t* num_points,
                        int64_t* num_voxels, int64_t* point_voxel) {
  const int64_t invalid = grid.cells();
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const scalar_t* p = cloud + i * channels;
    int64_t cell[3];
    keys[i] = grid.cell(static_cast<acc_t>(p[0]), static_cast<acc_t>(p[1]), static_cast<acc_t>(p[2]), cell)
                  ? grid.index(cell)
                  : invalid;
  }
  const HashArrayCpu h = build_hash_array_cpu(keys.data(), n, invalid);

  // Slots go by first appearance. A run's first element is its voxel's first point (the sort
  // is stable), so walking the points in order and counting first points ranks the voxels; the
  // CUDA kernel gets the same ranks from a scan over first-point flags.
  std::vector<int64_t> run_starting_at(static_cast<size_t>(n), -1);
  for (int64_t r = 0; r < h.num_unique(); ++r) run_starting_at[h.perm[h.starts[r]]] = r;
  std::vector<int64_t> slot_of_run(static_cast<size_t>(h.num_unique()), -1);
  int64_t kept = 0;
  for (int64_t i = 0; i < n && kept < max_voxels; ++i) {
    const int64_t r = run_starting_at[i];
    if (r < 0) continue;
    slot_of_run[r] = kept;
    grid.zyx(h.unique_keys[r], coords + kept * 3);
    num_points[kept] = static_cast<int32_t>(std::min(h.counts[r], max_points));
    ++kept;
  }
  *num_voxels = kept;

  // A run lists its points in point order, so the first max_points of it are the ones stored.
  for (int64_t r = 0; r < h.num_unique(); ++r) {
    const int64_t slot = slot_of_run[r];
    if (slot < 0) continue;
    for (int64_t t = 0; t < h.counts[r]; ++t) {
      const int64_t p = h.perm[h.starts[r] + t];
      point_voxel[p] = slot;
      if (t < max_points) {
        std::copy_n(cloud + p * channels, channels, voxels + (slot * max_points + t) * channels);
      }
    }
  }
}

}  // namespace

VoxelizeResult voxelize_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                            at::ArrayRef<double> voxel_size, at::ArrayRef<double> point_range,
                            int64_t max_points_per_voxel, int64_t max_voxels) {
  const auto args =
      voxelize_detail::check_voxelize_args(points, lengths, voxel_size, point_range, max_points_per_voxel, max_voxels);
  VoxelizeResult outputs = voxelize_detail::empty_outputs(points, max_points_per_voxel, max_voxels);
  at::Tensor voxels, coords, num_points, num_voxels, point_voxel;
  std::tie(voxels, coords, num_points, num_voxels, point_voxel) = outputs;
  const int64_t batch = points.size(0);
  const int64_t n = points.size(1);
  const int64_t channels = points.size(2);
  if (batch == 0 || n == 0) return outputs;
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const int64_t* length_ptr = lengths_c.data;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, pts.scalar_type(), "voxelize_cpu", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const auto grid = voxelize_detail::make_grid<acc_t>(args);
    const scalar_t* pts_ptr = pts.data_ptr<scalar_t>();
    scalar_t* voxels_ptr = voxels.data_ptr<scalar_t>();
    int32_t* coords_ptr = coords.data_ptr<int32_t>();
    int32_t* num_points_ptr = num_points.data_ptr<int32_t>();
    int64_t* num_voxels_ptr = num_voxels.data_ptr<int64_t>();
    int64_t* point_voxel_ptr = point_voxel.data_ptr<int64_t>();
    const int64_t voxel_stride = max_voxels * max_points_per_voxel * channels;
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        const int64_t length = length_ptr ? std::clamp<int64_t>(length_ptr[b], 0, n) : n;
        voxelize_one_cloud<scalar_t, acc_t>(pts_ptr + b * n * channels, length, channels, grid, max_points_per_voxel,
                                            max_voxels, voxels_ptr + b * voxel_stride, coords_ptr + b * max_voxels * 3,
                                            num_points_ptr + b * max_voxels, num_voxels_ptr + b,
                                            point_voxel_ptr + b * n);
      }
    });
  });
  return outputs;
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("voxelize", &voxelize_cpu); }

}  // namespace pointops
