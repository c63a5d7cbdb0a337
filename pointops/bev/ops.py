"""Bird's-eye-view rasterization, the height image, pillar scatter and voxelization (wraps csrc/bev).

Grid and orientation (OpenPCDet): x forward, y left. ``point_range`` is
``[x_min, y_min, z_min, x_max, y_max, z_max]`` (half-open: ``x_min <= x < x_max``, same for y and
z), ``cell_size`` is ``[dx, dy]``; ``W = floor((x_max - x_min) / dx + 0.5)`` cells along x and ``H``
likewise along y; image ``[b, c, iy, ix]`` holds the cell ``ix = floor((x - x_min) / dx)``,
``iy = floor((y - y_min) / dy)``. ``forward_up=True`` gives the top view as a person reads it
instead: ``(B, C, W, H)`` with ``[b, c, W-1-ix, H-1-iy]``, x forward pointing up and y left
pointing left.

The rules shared by CPU and CUDA (bit-identical results, empty cells 0, what counts as a point) are
in csrc/bev/rasterize.h, voxelize.h and pillar_scatter.h. Grids come from explicit values or a
preset name (:func:`pointops.bev_preset`, configs/bev.yaml); explicit values override the preset's.

Gradients: ``pillar_scatter`` passes the canvas gradient back to the placed pillars' features;
``bev_rasterize`` to z for ``max_z`` / ``min_z`` / ``mean_z`` and to the feature column for
``max_feature`` / ``mean_feature`` / ``top_feature`` (a max or min to the point that holds it, ties
to the lowest index; a mean to every point of the cell); ``voxelize`` from ``voxels`` back to the
points stored there. Counts, density, occupancy, slices, coordinates and indices have none.
"""

import math
from typing import List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from .._checks import check_floating, check_output_fits, check_same_device, check_tensor, distance_dtype, per_axis
from ..presets import bev_preset

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

FEATURE_LIMIT = 2.0**30  # feature channels clamp features to +-2^30 (csrc/bev/rasterize.h)


def _resolve_grid(
    preset: Optional[str], point_range: Optional[List[float]], cell_size: Optional[Union[float, List[float]]]
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
    return point_range, per_axis(cell_size, 2, "cell_size")


def bev_grid_size(
    point_range: Optional[List[float]] = None,
    cell_size: Optional[Union[float, List[float]]] = None,
    preset: Optional[str] = None,
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
    cell_size: Optional[Union[float, List[float]]] = None,
    preset: Optional[str] = None,
    feature_column: int = 3,
    density_base: float = 64.0,
    height_slices: int = 0,
    forward_up: bool = False,
) -> Tensor:
    """Dense multi-channel BEV image of padded clouds, in one pass over the points.

    Args:
        points: (B, N, C) float32/float64/float16/bfloat16: x, y, z, then features (intensity...).
        channels: output channels, in order, each at most once:
            ``max_z``, ``min_z``, ``mean_z`` (z of the points in the cell), ``count``,
            ``density`` (Complex-YOLO: min(1, ln(count + 1) / ln(density_base))), ``occupancy``
            (1 where a point is), ``max_feature``, ``mean_feature``, ``top_feature`` (the feature of
            the highest point, ties (equal z, -0.0 == +0.0) to the lowest point index), ``height_slices`` (PIXOR: occupancy
            of each of ``height_slices`` equal slices of [z_min, z_max), lowest first; it expands to
            that many channels).
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None means all N.
        point_range, cell_size, preset: the grid (see the module docstring and configs/bev.yaml);
            one number for ``cell_size`` is square cells.
        feature_column: the column the feature channels read (3: the first after x, y, z). NaN
            features read as 0 and features are clamped to +-2^30.
        density_base: the log base of ``density`` (> 1).
        height_slices: number of slices for ``height_slices``.
        forward_up: the top view as a person reads it, (B, C, W, H), x forward pointing up, y left
            pointing left, instead of OpenPCDet's (B, C, H, W).

    Returns:
        (B, n_channels, H, W) float32 (or (B, n_channels, W, H) with ``forward_up``). Empty cells
        hold 0 in every channel. Points outside the range or with NaN/Inf x, y, z are ignored.
    """
    check_tensor(points, "points", "(B, N, C)")
    if isinstance(channels, str):  # a str is a list of its letters to the op: name the mistake instead
        raise ValueError(
            "channels must be a list of channel names, e.g. ['" + channels + "'], got the str '" + channels + "'"
        )
    point_range, cell_size = _resolve_grid(preset, point_range, cell_size)
    return torch.ops.pointops.bev_rasterize(
        points, lengths, point_range, cell_size, channels, feature_column, density_base, height_slices, forward_up
    )


def height_image(
    points: Tensor,
    lengths: Optional[Tensor] = None,
    point_range: Optional[List[float]] = None,
    cell_size: Optional[Union[float, List[float]]] = None,
    preset: Optional[str] = None,
    forward_up: bool = True,
) -> Tensor:
    """Grayscale height image: per cell, the highest point's z scaled to 0..255 over
    [z_min, z_max), as ``floor((max_z - z_min) * (255 / (z_max - z_min)))`` in float32; 0 where
    no point is (so also for a cell whose highest point sits at z_min).

    Returns (B, W, H) uint8 as a person reads a top view (row 0 = farthest x, column 0 = leftmost
    y: x pointing up), or (B, H, W) in the OpenPCDet layout with ``forward_up=False``.
    """
    check_tensor(points, "points", "(B, N, C)")
    point_range, cell_size = _resolve_grid(preset, point_range, cell_size)
    image = torch.ops.pointops.bev_rasterize(
        points, lengths, point_range, cell_size, ["max_z", "occupancy"], 3, 64.0, 0, forward_up
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
        coords: (B, P, 3) int32 (z, y, x) cell of each pillar (OpenPCDet / mmcv's layout); z must be 0.
        num_voxels: (B,) int64 pillars in use per cloud (:func:`voxelize`'s ``num_voxels``).
        height, width: the grid (H along y, W along x), or taken from ``preset``.

    Returns:
        (B, F, H, W) of features' dtype: each placed pillar's features at its cell, 0 elsewhere.
        Pillars past num_voxels[b] or outside the grid are ignored; when several pillars share a
        cell the lowest index wins. Differentiable in ``features``.
    """
    check_tensor(features, "features", "(B, P, F)")
    if height is None or width is None:
        if preset is None:
            raise ValueError("pass height and width, or a preset name")
        grid_h, grid_w = bev_grid_size(None, None, preset)
        if height is None:
            height = grid_h
        if width is None:
            width = grid_w
    return torch.ops.pointops.pillar_scatter(features, coords, num_voxels, height, width)


class Voxels(NamedTuple):
    """Output of :func:`voxelize` (B clouds, V = max_voxels, K = max_points_per_voxel)."""

    voxels: Tensor  # (B, V, K, C) points' dtype; zeros where unused
    coords: Tensor  # (B, V, 3) int32 (z, y, x) cell of each voxel (mmcv's layout); -1 in unused rows
    num_points: Tensor  # (B, V) int32 points stored per voxel (mmcv's layout), min(points in it, K)
    num_voxels: Tensor  # (B,) int64 voxels kept per cloud
    point_voxel: Tensor  # (B, N) int64 voxel slot of each point, -1 when dropped


def voxelize(
    points: Tensor,
    voxel_size: Union[float, List[float]],
    point_range: List[float],
    max_points_per_voxel: int,
    max_voxels: int,
    lengths: Optional[Tensor] = None,
) -> Voxels:
    """Hard voxelization of padded clouds (PointPillars / SECOND input), deterministic, with
    mmcv's ``Voxelization(deterministic=True)`` semantics.

    The cell of a point is ``floor((x - min) / size)`` (float32, or float64 for float64 points)
    and the point is kept when that cell lies in the grid of ``round((max - min) / size)`` cells
    per axis; points with NaN/Inf coordinates are dropped. Within a cloud, voxels take slots in
    order of their first point, a voxel stores its first ``max_points_per_voxel`` points in point
    order, and voxels past ``max_voxels`` are dropped with their points.

    Args:
        points: (B, N, C) float32/float64/float16/bfloat16, C >= 3, columns x, y, z, features.
        voxel_size: [dx, dy, dz] > 0, or one number for cubes.
        point_range: [x_min, y_min, z_min, x_max, y_max, z_max].
        max_points_per_voxel: K, points stored per voxel (the first K in point order).
        max_voxels: V, voxels kept per cloud (the first V by first appearance).
        lengths: (B,) int64, cloud b is rows [0, lengths[b]) (clamped to [0, N]); None = all N.

    Returns:
        :class:`Voxels`. Voxel v of cloud b is valid iff ``v < num_voxels[b]``. ``point_voxel``
        gives every kept point its voxel slot, also points past the first K of their voxel (as
        mmcv's dynamic mode gives every in-range point its cell); it is -1 for points outside the
        grid, with NaN/Inf coordinates, in a voxel dropped by ``max_voxels`` or past ``lengths``.
        mmdet3d's flat layout for cloud b is ``voxels[b, :nv]``, ``coords[b, :nv]``,
        ``num_points[b, :nv]`` with ``nv = int(num_voxels[b])`` (that read is the one host sync).
        ``voxels`` is differentiable in ``points``.
    """
    check_tensor(points, "points", "(B, N, C)")
    voxels, coords, num_points, num_voxels, point_voxel = torch.ops.pointops.voxelize(
        points, lengths, per_axis(voxel_size, 3, "voxel_size"), point_range, max_points_per_voxel, max_voxels
    )
    return Voxels(voxels, coords, num_points, num_voxels, point_voxel)


class DynamicVoxels(NamedTuple):
    """Output of :func:`voxelize_dynamic`."""

    point_voxel: Tensor  # (B, N) int64 voxel of each point, -1 when outside / not finite / past lengths
    coords: Tensor  # (B, N, 3) int32 (z, y, x) cell of each voxel, -1 past num_voxels[b]
    num_voxels: Tensor  # (B,) int64 voxels per cloud


def voxelize_dynamic(
    points: Tensor,
    voxel_size: Union[float, List[float]],
    point_range: List[float],
    lengths: Optional[Tensor] = None,
) -> DynamicVoxels:
    """Dynamic voxelization: every point's voxel, with no cap on voxels or points per voxel.

    Point i of cloud b lies in voxel ``point_voxel[b, i]``, whose (z, y, x) cell is
    ``coords[b, point_voxel[b, i]]``; voxels are numbered by first appearance. Per-voxel
    reductions follow with ``scatter_reduce`` over ``point_voxel``.
    """
    check_tensor(points, "points", "(B, N, C)")
    _, coords, _, num_voxels, point_voxel = torch.ops.pointops.voxelize(
        points, lengths, per_axis(voxel_size, 3, "voxel_size"), point_range, 0, points.shape[1]
    )
    return DynamicVoxels(point_voxel, coords, num_voxels)


# ---- fake kernels: output shapes and dtypes from the arguments alone ----


def _cells_along(lo: float, hi: float, size: float, axis: str) -> int:
    # The kernels' float64 formula, so the shapes agree to the cell.
    cells = math.floor((hi - lo) / size + 0.5)
    torch._check(1 <= cells <= 2**31 - 1, lambda: f"point_range and cell_size give {cells} cells along {axis}")
    return cells


@torch.library.register_fake("pointops::bev_rasterize")
def _bev_rasterize_fake(
    points,
    lengths,
    point_range,
    cell_size,
    channels,
    feature_column=3,
    density_base=64.0,
    height_slices=0,
    forward_up=False,
):
    torch._check(
        points.dim() == 3 and points.shape[2] >= 3,
        lambda: f"points must have shape (B, N, C) with C >= 3, got {tuple(points.shape)}",
    )
    check_floating(points, "points")
    check_same_device(lengths, "lengths", points)
    torch._check(len(point_range) == 6, lambda: f"point_range must have 6 values, got {len(point_range)}")
    torch._check(len(cell_size) == 2, lambda: f"cell_size must have 2 values, got {len(cell_size)}")
    torch._check(all(c > 0 for c in cell_size), lambda: f"cell_size must be > 0, got {cell_size}")
    torch._check(len(channels) > 0, lambda: "channels must name at least one channel")
    out_channels = 0
    for name in channels:
        torch._check(name in CHANNELS, lambda: f"channels: unknown channel '{name}'")
        out_channels += height_slices if name == "height_slices" else 1
    nx = _cells_along(point_range[0], point_range[3], cell_size[0], "x (W)")
    ny = _cells_along(point_range[1], point_range[4], cell_size[1], "y (H)")
    check_output_fits(
        points.device,
        f"point_range and cell_size ({ny} x {nx} cells) with {out_channels} channels",
        (points.shape[0], out_channels, ny, nx),
        4,
    )
    shape = (points.shape[0], out_channels, nx, ny) if forward_up else (points.shape[0], out_channels, ny, nx)
    return points.new_empty(shape, dtype=torch.float32)


@torch.library.register_fake("pointops::pillar_scatter")
def _pillar_scatter_fake(features, coords, num_voxels, height, width):
    torch._check(features.dim() == 3, lambda: f"features must have shape (B, P, F), got {tuple(features.shape)}")
    check_floating(features, "features")
    torch._check(coords.dtype == torch.int32, lambda: f"coords must be int32, got {coords.dtype}")
    torch._check(num_voxels.dtype == torch.int64, lambda: f"num_voxels must be int64, got {num_voxels.dtype}")
    check_same_device(coords, "coords", features, "features")
    check_same_device(num_voxels, "num_voxels", features, "features")
    torch._check(height >= 0 and width >= 0, lambda: f"height and width must be >= 0, got {height}, {width}")
    return features.new_empty((features.shape[0], features.shape[2], height, width))


@torch.library.register_fake("pointops::voxelize")
def _voxelize_fake(points, lengths, voxel_size, point_range, max_points_per_voxel, max_voxels):
    torch._check(
        points.dim() == 3 and points.shape[2] >= 3,
        lambda: f"points must have shape (B, N, C) with C >= 3, got {tuple(points.shape)}",
    )
    check_floating(points, "points")
    check_same_device(lengths, "lengths", points)
    torch._check(len(voxel_size) == 3, lambda: f"voxel_size must have 3 values, got {len(voxel_size)}")
    torch._check(len(point_range) == 6, lambda: f"point_range must have 6 values, got {len(point_range)}")
    torch._check(max_points_per_voxel >= 0, lambda: f"max_points_per_voxel must be >= 0, got {max_points_per_voxel}")
    torch._check(max_voxels >= 0, lambda: f"max_voxels must be >= 0, got {max_voxels}")
    batch, n, channels = points.shape
    check_output_fits(
        points.device,
        f"max_voxels = {max_voxels} and max_points_per_voxel = {max_points_per_voxel}",
        (batch, max_voxels, max_points_per_voxel, channels),
        points.element_size(),
    )
    return (
        points.new_empty((batch, max_voxels, max_points_per_voxel, channels)),
        points.new_empty((batch, max_voxels, 3), dtype=torch.int32),
        points.new_empty((batch, max_voxels), dtype=torch.int32),
        points.new_empty((batch,), dtype=torch.int64),
        points.new_empty((batch, n), dtype=torch.int64),
    )


# ---- gradients ----
# Each backward recomputes which point fed which output value with plain torch ops on the saved
# inputs (the same cell rule as the kernels), so it runs on any device and is deterministic.


def _pillar_scatter_setup(ctx, inputs, output):
    features, coords, num_voxels, height, width = inputs
    ctx.save_for_backward(coords, num_voxels)
    ctx.pillars_shape = features.shape
    ctx.grid = (height, width)


def _pillar_scatter_backward(ctx, grad):
    coords, num_voxels = ctx.saved_tensors
    batch, pillars, channels = ctx.pillars_shape
    height, width = ctx.grid
    c = coords.long()
    index = torch.arange(pillars, device=coords.device)
    placed = (
        (index < num_voxels.unsqueeze(1))
        & (c[..., 0] == 0)
        & (c[..., 1] >= 0)
        & (c[..., 1] < height)
        & (c[..., 2] >= 0)
        & (c[..., 2] < width)
    )
    cells = height * width
    cell = torch.where(placed, c[..., 1] * width + c[..., 2], cells)  # a spare cell for the rest
    # The lowest placed pillar of a cell is the one the canvas shows.
    owner = torch.full((batch, cells + 1), pillars, dtype=torch.int64, device=coords.device)
    owner.scatter_reduce_(1, cell, index.expand(batch, pillars), "amin")
    shown = placed & (torch.gather(owner, 1, cell) == index)
    flat = grad.reshape(batch, channels, cells)
    picked = torch.gather(flat, 2, cell.clamp(max=cells - 1).unsqueeze(1).expand(batch, channels, pillars))
    grad_features = torch.where(shown.unsqueeze(1), picked, torch.zeros_like(picked)).transpose(1, 2)
    return grad_features, None, None, None, None


torch.library.register_autograd(
    "pointops::pillar_scatter", _pillar_scatter_backward, setup_context=_pillar_scatter_setup
)


def _bev_point_cells(
    points: Tensor, lengths: Optional[Tensor], point_range: List[float], cell_size: List[float], forward_up: bool
) -> Tuple[Tensor, int]:
    """Each point's flat cell in the output image (B, N) int64, or the spare index H * W for points
    that do not count; the cell rule of csrc/bev/rasterize.h in the compute type."""
    compute = points.to(distance_dtype(points))
    n = points.shape[1]
    height, width = bev_grid_size(point_range, cell_size)
    x, y, z = compute[..., 0], compute[..., 1], compute[..., 2]
    lo = [torch.tensor(v, dtype=compute.dtype) for v in point_range]
    step = [torch.tensor(v, dtype=compute.dtype) for v in cell_size]
    inside = (x >= lo[0]) & (x < lo[3]) & (y >= lo[1]) & (y < lo[4]) & (z >= lo[2]) & (z < lo[5])
    ix = torch.floor((x - lo[0].to(x.device)) / step[0].to(x.device))
    iy = torch.floor((y - lo[1].to(x.device)) / step[1].to(x.device))
    inside = inside & (ix < width) & (iy < height)
    if lengths is not None:
        inside = inside & (torch.arange(n, device=points.device).unsqueeze(0) < lengths.unsqueeze(1))
    ix = torch.where(inside, ix, torch.zeros_like(ix)).long()
    iy = torch.where(inside, iy, torch.zeros_like(iy)).long()
    flat = (width - 1 - ix) * height + (height - 1 - iy) if forward_up else iy * width + ix
    cells = height * width
    return torch.where(inside, flat, torch.full_like(flat, cells)), cells


def _extreme_point(values: Tensor, cell: Tensor, cells: int, largest: bool) -> Tensor:
    """(B, N) bool: the point holding its cell's max (or min) value, ties to the lowest index."""
    batch, n = values.shape
    best = torch.full((batch, cells + 1), -math.inf if largest else math.inf, dtype=values.dtype, device=values.device)
    best.scatter_reduce_(1, cell, values, "amax" if largest else "amin")
    holds = torch.gather(best, 1, cell) == values
    index = torch.arange(n, device=values.device).expand(batch, n)
    first = torch.full((batch, cells + 1), n, dtype=torch.int64, device=values.device)
    first.scatter_reduce_(1, cell, torch.where(holds, index, torch.full_like(index, n)), "amin")
    return holds & (torch.gather(first, 1, cell) == index)


def _bev_setup(ctx, inputs, output):
    points, lengths, point_range, cell_size, channels, feature_column, _, height_slices, forward_up = inputs
    ctx.save_for_backward(points, lengths)
    ctx.args = (list(point_range), list(cell_size), list(channels), feature_column, height_slices, forward_up)


def _bev_backward(ctx, grad):
    points, lengths = ctx.saved_tensors
    point_range, cell_size, channels, feature_column, height_slices, forward_up = ctx.args
    cell, cells = _bev_point_cells(points, lengths, point_range, cell_size, forward_up)
    batch = points.shape[0]
    counted = cell < cells
    flat_grad = torch.cat(
        [grad.reshape(batch, grad.shape[1], cells), grad.new_zeros(batch, grad.shape[1], 1)], 2
    )  # the spare cell reads 0
    compute = points.to(distance_dtype(points))
    z = compute[..., 2].float()
    feature = compute[..., feature_column]
    feature_ok = ~torch.isnan(feature) & (feature.abs() <= FEATURE_LIMIT)  # NaN and clamped features pass nothing
    feature_read = (
        torch.where(torch.isnan(feature), torch.zeros_like(feature), feature)
        .clamp(-FEATURE_LIMIT, FEATURE_LIMIT)
        .float()
    )
    count = torch.zeros(batch, cells + 1, dtype=grad.dtype, device=grad.device)
    count.scatter_add_(1, cell, counted.to(grad.dtype))
    grad_z = torch.zeros_like(z)
    grad_feature = torch.zeros_like(z)
    c = 0
    for name in channels:
        if name == "height_slices":
            c += height_slices
            continue
        g = torch.gather(flat_grad[:, c], 1, cell)
        c += 1
        if name == "mean_z":
            grad_z = grad_z + torch.where(counted, g / torch.gather(count, 1, cell).clamp(min=1), torch.zeros_like(g))
        elif name == "max_z" or name == "min_z":
            holder = counted & _extreme_point(z, cell, cells, name == "max_z")
            grad_z = grad_z + torch.where(holder, g, torch.zeros_like(g))
        elif name == "mean_feature":
            share = g / torch.gather(count, 1, cell).clamp(min=1)
            grad_feature = grad_feature + torch.where(counted & feature_ok, share, torch.zeros_like(g))
        elif name == "max_feature":
            holder = counted & _extreme_point(feature_read, cell, cells, True)
            grad_feature = grad_feature + torch.where(holder & feature_ok, g, torch.zeros_like(g))
        elif name == "top_feature":
            holder = counted & _extreme_point(z, cell, cells, True)
            grad_feature = grad_feature + torch.where(holder & feature_ok, g, torch.zeros_like(g))
    grad_points = torch.zeros_like(points)
    grad_points[..., 2] = grad_z.to(points.dtype)
    if any(name.endswith("_feature") for name in channels):
        grad_points[..., feature_column] += grad_feature.to(points.dtype)
    return grad_points, None, None, None, None, None, None, None, None


torch.library.register_autograd("pointops::bev_rasterize", _bev_backward, setup_context=_bev_setup)


def _voxelize_setup(ctx, inputs, output):
    points = inputs[0]
    ctx.save_for_backward(output[4])
    ctx.points_meta = (points.shape, points.dtype, inputs[4])


def _voxelize_backward(ctx, grad_voxels, *unused):
    (point_voxel,) = ctx.saved_tensors
    shape, dtype, max_points = ctx.points_meta
    batch, n, channels = shape
    if grad_voxels is None or max_points == 0 or batch * n == 0:
        return torch.zeros(shape, dtype=dtype, device=point_voxel.device), None, None, None, None, None
    max_voxels = grad_voxels.shape[1]
    # A point's place in its voxel is its rank among the voxel's points, in point order.
    key = torch.where(point_voxel >= 0, point_voxel, torch.full_like(point_voxel, max_voxels))
    key = key + torch.arange(batch, device=key.device).unsqueeze(1) * (max_voxels + 1)
    order = torch.sort(key.reshape(-1), stable=True)
    position = torch.arange(batch * n, device=key.device)
    starts = torch.ones_like(position, dtype=torch.bool)
    starts[1:] = order.values[1:] != order.values[:-1]
    run_start = torch.cummax(torch.where(starts, position, torch.zeros_like(position)), 0).values
    rank = torch.empty_like(position)
    rank[order.indices] = position - run_start
    rank = rank.view(batch, n)
    stored = (point_voxel >= 0) & (rank < max_points)
    slot = torch.where(stored, point_voxel * max_points + rank, torch.zeros_like(rank))
    flat = grad_voxels.reshape(batch, max_voxels * max_points, channels)
    picked = torch.gather(flat, 1, slot.unsqueeze(-1).expand(batch, n, channels))
    grad_points = torch.where(stored.unsqueeze(-1), picked, torch.zeros_like(picked))
    return grad_points, None, None, None, None, None


torch.library.register_autograd("pointops::voxelize", _voxelize_backward, setup_context=_voxelize_setup)
