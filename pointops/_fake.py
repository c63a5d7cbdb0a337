"""Fake (meta) kernels: output shapes and dtypes of every pointops operator, with no data read.

Output sizes come from arguments only, so none of these needs a dynamic size.
"""
import math

import torch

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _distance_dtype(points: torch.Tensor) -> torch.dtype:
    return torch.float64 if points.dtype == torch.float64 else torch.float32


def _check_points(points: torch.Tensor, dims: int, layout: str) -> None:
    torch._check(points.dim() == dims, lambda: f"points must have shape {layout}, got {tuple(points.shape)}")
    torch._check(points.dtype in _FLOATS, lambda: f"points must be a floating tensor, got {points.dtype}")


@torch.library.register_fake("pointops::fps")
def _fps_fake(points, lengths, start, k):
    _check_points(points, 3, "(B, N, D)")
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = points.shape[0]
    return (
        points.new_empty((batch, k), dtype=torch.int64),
        points.new_empty((batch, k), dtype=_distance_dtype(points)),
    )


@torch.library.register_fake("pointops::fps_packed")
def _fps_packed_fake(points, offsets, start, k):
    _check_points(points, 2, "(P, D)")
    torch._check(offsets.dim() == 1, lambda: f"offsets must have shape (B + 1,), got {tuple(offsets.shape)}")
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = offsets.shape[0] - 1
    return (
        points.new_empty((batch, k), dtype=torch.int64),
        points.new_empty((batch, k), dtype=_distance_dtype(points)),
    )


_BEV_CHANNELS = (
    "max_z", "min_z", "mean_z", "count", "density", "occupancy",
    "max_feature", "mean_feature", "top_feature", "height_slices",
)


def _cells_along(lo: float, hi: float, size: float, axis: str) -> int:
    # The kernels' float64 formula, so the shapes agree to the cell.
    cells = math.floor((hi - lo) / size + 0.5)
    torch._check(1 <= cells <= 2**31 - 1, lambda: f"point_range and cell_size give {cells} cells along {axis}")
    return cells


@torch.library.register_fake("pointops::bev_rasterize")
def _bev_rasterize_fake(points, lengths, point_range, cell_size, channels, feature_column=3, density_base=64.0,
                        height_slices=0, seed_layout=False):
    _check_points(points, 3, "(B, N, C)")
    torch._check(points.shape[2] >= 3, lambda: f"points must have at least x, y, z (C >= 3), got {tuple(points.shape)}")
    torch._check(len(point_range) == 6, lambda: f"point_range must have 6 values, got {len(point_range)}")
    torch._check(len(cell_size) == 2, lambda: f"cell_size must have 2 values, got {len(cell_size)}")
    torch._check(all(c > 0 for c in cell_size), lambda: f"cell_size must be > 0, got {cell_size}")
    torch._check(len(channels) > 0, lambda: "channels must name at least one channel")
    out_channels = 0
    for name in channels:
        torch._check(name in _BEV_CHANNELS, lambda: f"channels: unknown channel '{name}'")
        out_channels += height_slices if name == "height_slices" else 1
    nx = _cells_along(point_range[0], point_range[3], cell_size[0], "x (W)")
    ny = _cells_along(point_range[1], point_range[4], cell_size[1], "y (H)")
    shape = (points.shape[0], out_channels, nx, ny) if seed_layout else (points.shape[0], out_channels, ny, nx)
    return points.new_empty(shape, dtype=torch.float32)


@torch.library.register_fake("pointops::pillar_scatter")
def _pillar_scatter_fake(features, coords, num_voxels, height, width):
    torch._check(features.dim() == 3, lambda: f"features must have shape (B, P, F), got {tuple(features.shape)}")
    torch._check(features.dtype in _FLOATS, lambda: f"features must be a floating tensor, got {features.dtype}")
    torch._check(coords.dtype == torch.int32, lambda: f"coords must be int32, got {coords.dtype}")
    torch._check(num_voxels.dtype == torch.int32, lambda: f"num_voxels must be int32, got {num_voxels.dtype}")
    torch._check(height >= 0 and width >= 0, lambda: f"height and width must be >= 0, got {height}, {width}")
    return features.new_empty((features.shape[0], features.shape[2], height, width))


def rho_bins(rho_step: float, rho_max: float) -> int:
    """n_rho = max(1, round(2 rho_max / rho_step)): the rho bins tile [-rho_max, rho_max) in steps
    of 2 rho_max / n_rho (the float64 formula of check_planes_args in csrc/hough/planes_cpu.cpp)."""
    return max(1, math.floor(2.0 * rho_max / rho_step + 0.5))


def ball_cell_count(n_phi: int, n_theta: int) -> int:
    """Cells of the equal-area ball layout (csrc/hough/planes.h), with the C++ formula."""
    total = 0
    for i in range(n_phi):
        total += max(1, math.floor(n_theta * math.sin((i + 0.5) * math.pi / n_phi) + 0.5))
    return total


def _check_planes(points, rho_step, rho_max) -> None:
    _check_points(points, 3, "(B, N, 3)")
    torch._check(points.shape[2] == 3, lambda: f"points must have shape (B, N, 3), got {tuple(points.shape)}")
    torch._check(rho_step > 0 and rho_max > 0, lambda: f"rho_step and rho_max must be > 0, got {rho_step}, {rho_max}")


@torch.library.register_fake("pointops::hough_planes")
def _hough_planes_fake(points, lengths, weights, n_phi, n_theta, rho_step, rho_max):
    _check_planes(points, rho_step, rho_max)
    dtype = torch.int32 if weights is None else torch.float32
    return points.new_empty((points.shape[0], n_phi, n_theta, rho_bins(rho_step, rho_max)), dtype=dtype)


@torch.library.register_fake("pointops::hough_planes_ball")
def _hough_planes_ball_fake(points, lengths, weights, n_phi, n_theta, rho_step, rho_max):
    _check_planes(points, rho_step, rho_max)
    dtype = torch.int32 if weights is None else torch.float32
    shape = (points.shape[0], ball_cell_count(n_phi, n_theta), rho_bins(rho_step, rho_max))
    return points.new_empty(shape, dtype=dtype)


@torch.library.register_fake("pointops::hough_peaks")
def _hough_peaks_fake(acc, radius, periodic, min_votes, k, plane_seam=False):
    torch._check(acc.dim() >= 2, lambda: f"acc must have shape (B, *dims), got {tuple(acc.shape)}")
    torch._check(acc.dtype in (torch.int32, torch.float32), lambda: f"acc must be int32 or float32, got {acc.dtype}")
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = acc.shape[0]
    return acc.new_empty((batch, k)), acc.new_empty((batch, k, acc.dim() - 1), dtype=torch.int64)


def _check_plane_fit(points, planes, threshold):
    _check_points(points, 3, "(B, N, 3)")
    torch._check(points.shape[2] == 3, lambda: f"points must have shape (B, N, 3), got {tuple(points.shape)}")
    torch._check(planes.dim() == 3 and planes.shape[0] == points.shape[0] and planes.shape[2] == 4,
                 lambda: f"planes must have shape (B, K, 4) with B = {points.shape[0]}, got {tuple(planes.shape)}")
    torch._check(planes.dtype in _FLOATS, lambda: f"planes must be a floating tensor, got {planes.dtype}")
    torch._check(planes.shape[1] <= 1024, lambda: f"planes must have at most 1024 rows per cloud (K), got {planes.shape[1]}")
    torch._check(math.isfinite(threshold) and threshold >= 0, lambda: f"threshold must be finite and >= 0, got {threshold}")


@torch.library.register_fake("pointops::plane_labels")
def _plane_labels_fake(points, lengths, planes, threshold):
    _check_plane_fit(points, planes, threshold)
    return points.new_empty(points.shape[:2], dtype=torch.int64)


@torch.library.register_fake("pointops::plane_refit")
def _plane_refit_fake(points, lengths, planes, threshold):
    _check_plane_fit(points, planes, threshold)
    return planes.new_empty(planes.shape, dtype=torch.float32), planes.new_empty(planes.shape[:2], dtype=torch.int64)


@torch.library.register_fake("pointops::voxelize")
def _voxelize_fake(points, lengths, voxel_size, pc_range, max_points_per_voxel, max_voxels):
    _check_points(points, 3, "(B, N, C)")
    torch._check(points.shape[2] >= 3, lambda: f"points must have x, y, z columns (C >= 3), got {tuple(points.shape)}")
    torch._check(len(voxel_size) == 3, lambda: f"voxel_size must have 3 values, got {len(voxel_size)}")
    torch._check(len(pc_range) == 6, lambda: f"pc_range must have 6 values, got {len(pc_range)}")
    torch._check(max_points_per_voxel >= 0, lambda: f"max_points_per_voxel must be >= 0, got {max_points_per_voxel}")
    torch._check(max_voxels >= 0, lambda: f"max_voxels must be >= 0, got {max_voxels}")
    batch, n, channels = points.shape
    return (
        points.new_empty((batch, max_voxels, max_points_per_voxel, channels)),
        points.new_empty((batch, max_voxels, 3), dtype=torch.int32),
        points.new_empty((batch, max_voxels), dtype=torch.int32),
        points.new_empty((batch,), dtype=torch.int32),
        points.new_empty((batch, n), dtype=torch.int64),
    )
