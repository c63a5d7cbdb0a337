"""Bird's-eye-view rasterization, the height image and pillar scatter (wraps csrc/bev).

Grid and orientation (OpenPCDet): x forward, y left. ``point_range`` is
``[x_min, y_min, z_min, x_max, y_max, z_max]`` (half-open: ``x_min <= x < x_max``, same for y and
z), ``cell_size`` is ``[dx, dy]``; ``W = floor((x_max - x_min) / dx + 0.5)`` cells along x and ``H``
likewise along y; image ``[b, c, iy, ix]`` holds the cell ``ix = floor((x - x_min) / dx)``,
``iy = floor((y - y_min) / dy)``. ``seed_layout=True`` gives seed 004's picture instead:
``(B, C, W, H)`` with ``[b, c, W-1-ix, H-1-iy]``, x forward pointing up and y left pointing left.

The rules shared by CPU and CUDA (bit-identical results, empty cells 0, what counts as a point) are
in csrc/bev/rasterize.h and the README. Grids come from explicit values or a preset name
(:func:`bev_preset`); explicit values override the preset's.
"""
import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

CHANNELS = (
    "max_z",
    "min_z",
    "mean_z",
    "count",
    "density",
    "occupancy",
    "max_feature",
    "mean_feature",
    "top_feature",
    "height_slices",
)

PRESETS = ("kitti", "kitti_bev", "nuscenes", "waymo", "seed_004")


def bev_preset(name: str) -> Tuple[List[float], List[float]]:
    """``(point_range, cell_size)`` of a named grid.

    - ``kitti``: PointPillars on KITTI (OpenPCDet), 0.16 m pillars over
      [0, -39.68, -3, 69.12, 39.68, 1]: H x W = 496 x 432.
    - ``kitti_bev``: a 0.1 m BEV image of the KITTI front view (PIXOR, Complex-YOLO style) over
      [0, -40, -3, 70.4, 40, 1]: 800 x 704. The pillar range would give 69.12 / 0.1 = 691.2 cells
      along x, so this preset widens it to whole cells.
    - ``nuscenes``: [-51.2, -51.2, -5, 51.2, 51.2, 3], 0.2 m pillars (OpenPCDet PointPillars): 512 x 512.
    - ``waymo``: [-75.2, -75.2, -2, 75.2, 75.2, 4], 0.32 m pillars (the Waymo PointPillars size): 470 x 470.
    - ``seed_004``: seed 004's height image, [0, -50, -5, 100, 50, 15] at 0.09765 m: 1024 x 1024.

    Kept as code rather than YAML so that TorchScript can resolve a preset name.
    """
    if name == "kitti":
        return [0.0, -39.68, -3.0, 69.12, 39.68, 1.0], [0.16, 0.16]
    if name == "kitti_bev":
        return [0.0, -40.0, -3.0, 70.4, 40.0, 1.0], [0.1, 0.1]
    if name == "nuscenes":
        return [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0], [0.2, 0.2]
    if name == "waymo":
        return [-75.2, -75.2, -2.0, 75.2, 75.2, 4.0], [0.32, 0.32]
    if name == "seed_004":
        return [0.0, -50.0, -5.0, 100.0, 50.0, 15.0], [0.09765, 0.09765]
    raise ValueError("unknown BEV preset '" + name + "'; expected kitti, kitti_bev, nuscenes, waymo or seed_004")


def _resolve_grid(
    preset: Optional[str], point_range: Optional[List[float]], cell_size: Optional[List[float]]
) -> Tuple[List[float], List[float]]:
    if preset is not None:
        preset_range, preset_cell = bev_preset(preset)
        if point_range is None:
            point_range = preset_range
        if cell_size is None:
            cell_size = preset_cell
    if point_range is None:
        raise ValueError("pass point_range (and cell_size) or a preset name")
    if cell_size is None:
        raise ValueError("pass cell_size (and point_range) or a preset name")
    return point_range, cell_size


def bev_grid_size(
    point_range: Optional[List[float]] = None, cell_size: Optional[List[float]] = None, preset: Optional[str] = None
) -> Tuple[int, int]:
    """``(H, W)`` of a grid: cells along y and along x, as the kernels compute them."""
    point_range, cell_size = _resolve_grid(preset, point_range, cell_size)
    width = int(math.floor((point_range[3] - point_range[0]) / cell_size[0] + 0.5))
    height = int(math.floor((point_range[4] - point_range[1]) / cell_size[1] + 0.5))
    return height, width


def bev_rasterize(
    points: Tensor,
    channels: List[str],
    lengths: Optional[Tensor] = None,
    point_range: Optional[List[float]] = None,
    cell_size: Optional[List[float]] = None,
    preset: Optional[str] = None,
    feature_column: int = 3,
    density_base: float = 64.0,
    height_slices: int = 0,
    seed_layout: bool = False,
) -> Tensor:
    """Dense multi-channel BEV image of padded clouds, in one pass over the points.

    Args:
        points: (B, N, C) float32/float64/float16/bfloat16: x, y, z, then features (intensity...).
        channels: output channels, in order, each at most once:
            ``max_z``, ``min_z``, ``mean_z`` (z of the points in the cell), ``count``,
            ``density`` (Complex-YOLO: min(1, ln(count + 1) / ln(density_base))), ``occupancy``
            (1 where a point is), ``max_feature``, ``mean_feature``, ``top_feature`` (the feature of
            the highest point, ties to the lowest point index), ``height_slices`` (PIXOR: occupancy
            of each of ``height_slices`` equal slices of [z_min, z_max), lowest first; it expands to
            that many channels).
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None means all N.
        point_range, cell_size, preset: the grid (see the module docstring and :func:`bev_preset`).
        feature_column: the column the feature channels read (3: the first after x, y, z). NaN
            features read as 0 and features are clamped to +-2^30.
        density_base: the log base of ``density`` (> 1).
        height_slices: number of slices for ``height_slices``.
        seed_layout: seed 004's image layout (B, C, W, H), x forward up, y left left.

    Returns:
        (B, n_channels, H, W) float32 (or (B, n_channels, W, H) in seed layout). Empty cells hold 0
        in every channel. Points outside the range or with NaN/Inf x, y, z are ignored.
    """
    point_range, cell_size = _resolve_grid(preset, point_range, cell_size)
    return torch.ops.pointops.bev_rasterize(
        points, lengths, point_range, cell_size, channels, feature_column, density_base, height_slices, seed_layout
    )


def height_image(
    points: Tensor,
    lengths: Optional[Tensor] = None,
    point_range: Optional[List[float]] = None,
    cell_size: Optional[List[float]] = None,
    preset: Optional[str] = None,
    seed_layout: bool = True,
) -> Tensor:
    """Seed 004's grayscale height image: per cell, the highest point's z scaled to 0..255 over
    [z_min, z_max), as ``floor((max_z - z_min) * (255 / (z_max - z_min)))`` in float32; 0 where
    no point is (so also for a cell whose highest point sits at z_min, as in the seed).

    Returns (B, W, H) uint8 in seed 004's layout (row 0 = farthest x, column 0 = leftmost y: a top
    view with x pointing up), or (B, H, W) in the OpenPCDet layout with ``seed_layout=False``.
    """
    point_range, cell_size = _resolve_grid(preset, point_range, cell_size)
    image = torch.ops.pointops.bev_rasterize(
        points, lengths, point_range, cell_size, ["max_z", "occupancy"], 3, 64.0, 0, seed_layout
    )
    scale = 255.0 / (point_range[5] - point_range[2])
    gray = ((image[:, 0] - point_range[2]) * scale).floor().clamp(0.0, 255.0)
    return torch.where(image[:, 1] > 0, gray, torch.zeros_like(gray)).to(torch.uint8)


def pillar_scatter(
    features: Tensor,
    coords: Tensor,
    num_voxels: Tensor,
    height: Optional[int] = None,
    width: Optional[int] = None,
    preset: Optional[str] = None,
) -> Tensor:
    """Dense BEV canvas of pillar features (OpenPCDet's PointPillarScatter, batched, no host sync).

    Args:
        features: (B, P, F) float pillar features.
        coords: (B, P, 3) int32 (z, y, x) cell of each pillar; z must be 0.
        num_voxels: (B,) int32 pillars in use per cloud; the rest are padding.
        height, width: the grid (H along y, W along x), or taken from ``preset``.

    Returns:
        (B, F, H, W) of features' dtype: each placed pillar's features at its cell, 0 elsewhere.
        Pillars past num_voxels[b] or outside the grid are ignored; when several pillars share a
        cell the lowest index wins.
    """
    if height is None or width is None:
        if preset is None:
            raise ValueError("pass height and width, or a preset name")
        grid_h, grid_w = bev_grid_size(None, None, preset)
        if height is None:
            height = grid_h
        if width is None:
            width = grid_w
    return torch.ops.pointops.pillar_scatter(features, coords, num_voxels, height, width)
