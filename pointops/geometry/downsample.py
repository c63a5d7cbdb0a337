"""Voxel-grid downsampling (wraps csrc/geometry/voxel_downsample*).

Every occupied voxel becomes one point, the mean of its points, with the mean of their features
(normals, colours, intensity). Rules shared by CPU and CUDA, bit for bit: the cell of a
coordinate is ``floor((x - x_min) / dx)`` in float32 (float64 for float64 points), with the grid
at the origin when no ``point_range`` is given; voxels are listed by their (z, y, x) cell; each
voxel's points are summed in increasing index order in float64 and divided by their count.
Outputs have the input's capacity N and a count per cloud, so nothing syncs with the host.
"""

import math
import struct
from typing import List, NamedTuple, Optional, Union

import torch
from torch import Tensor

from .._checks import check_dim, check_floating, check_padded_clouds, check_same_device, check_tensor, per_axis, require


class VoxelDownsample(NamedTuple):
    """Output of :func:`voxel_downsample` for B clouds of capacity N."""

    points: Tensor  # (B, N, 3) points' dtype: voxel centroids in rows [0, lengths[b]), 0 after
    features: Tensor  # (B, N, F) features' dtype: mean features of the same voxels, 0 after
    lengths: Tensor  # (B,) int64: occupied voxels per cloud
    point_voxel: Tensor  # (B, N) int64: each input point's row in `points`, -1 when not counted


def voxel_downsample(
    points: Tensor,
    voxel_size: Union[float, List[float]],
    lengths: Optional[Tensor] = None,
    features: Optional[Tensor] = None,
    point_range: Optional[List[float]] = None,
) -> VoxelDownsample:
    """Voxel-grid downsampling of padded clouds: one centroid per occupied voxel.

    Args:
        points: (B, N, 3) float32/float64/float16/bfloat16.
        voxel_size: [dx, dy, dz] > 0, or one number for cubes.
        lengths: (B,) int64, cloud b is rows [0, lengths[b]) (clamped to [0, N]); None = all N.
        features: (B, N, F) float or None: per-point values averaged per voxel (normals,
            colours). Averaged normals are not renormalised.
        point_range: [x_min, y_min, z_min, x_max, y_max, z_max] or None. Given, the grid starts at
            the box's lower corner and only points in the half-open box count (x_max may be
            inf). None, the grid starts at the origin, so every cloud and frame shares it.

    Returns:
        :class:`VoxelDownsample`. Voxels of a cloud are listed by their (z, y, x) cell, so the
        result does not depend on the points' order. Points past ``lengths``, with NaN/Inf
        coordinates or outside ``point_range`` are not counted (``point_voxel`` -1). Any span
        works, and far outliers cost about nothing: the voxels are sorted by a 62-bit key of
        each axis's offsets from the cloud's lowest cell, packed (the empty stretches between
        bit-width bins of offsets closed) where they need more bits. Only a cloud whose points
        are spread too thinly to pack (a voxel far below the data's resolution, or thousands of
        outliers scattered over hundreds of km) takes an exact but slow path (on CUDA one thread
        block per such cloud, a merge sort of its points), with the same voxels, order and
        means. A voxel index is an int64: a counted coordinate more than 2^62 voxels from the
        grid's origin (voxel_size 1e-30 at 1 m, a far outlier at 1e30) is refused with a
        ValueError (on CUDA a device-side assert), never dropped. The centroids and mean
        features are differentiable (each point gets ``1 / count`` of its voxel's gradient).

    Open3D's ``voxel_down_sample`` anchors its grid at ``min_bound - voxel_size / 2`` of each
    cloud; ``point_range=[*(cloud.min(0) - voxel_size / 2), inf, inf, inf]`` reproduces its cells.
    """
    check_tensor(points, "points", "(B, N, 3)")
    sizes = per_axis(voxel_size, 3, "voxel_size")
    centroids, mean_features, new_lengths, point_voxel = torch.ops.pointops.voxel_downsample(
        points, lengths, features, sizes, point_range
    )
    _check_cell_span(points, lengths, sizes, point_range)
    return VoxelDownsample(centroids, mean_features, new_lengths, point_voxel)


def _check_cell_span(
    points: Tensor, lengths: Optional[Tensor], sizes: List[float], point_range: Optional[List[float]]
) -> None:
    """Refuses what the op would drop without a word: a point that counts (finite, in a row
    within lengths, inside point_range) more than 2^62 voxels from the grid's origin, its cell
    computed as the op does (floor((x - origin) / size) in the compute type, monotonic in x, so
    the extremes decide). A finite point_range bounds the cells on the host; otherwise the CPU
    reads the extremes, and CUDA checks them on the device (no sync)."""
    if points.dim() != 3 or points.shape[2] != 3 or points.shape[1] == 0 or len(sizes) != 3:
        return  # the op has refused these, or there is nothing to count
    if point_range is not None and len(point_range) != 6:
        return
    if not torch.jit.is_scripting() and _span_bounded_on_host(points, sizes, point_range):
        return
    limit = 4611686018427387904.0  # 2^62: csrc/geometry/voxel_downsample.h counts no cell beyond +-2^62
    acc = torch.float64 if points.dtype == torch.float64 else torch.float32
    p = points.to(acc)
    # The grid's constants enter as Python scalars, never as tensors copied to the device: a copy
    # from the host waits for the GPU, and CUDA graph capture refuses it.
    origin = point_range[:3] if point_range is not None else [0.0, 0.0, 0.0]
    counted = torch.isfinite(p).all(-1)  # a point counts when all three coordinates do
    if point_range is not None:
        for d in range(3):
            counted = counted & (p[..., d] >= point_range[d]) & (p[..., d] < point_range[3 + d])
    if lengths is not None:
        rows = torch.arange(p.shape[1], device=p.device)
        counted = counted & (rows.unsqueeze(0) < lengths.unsqueeze(1))
    axes = []
    for d in range(3):
        low, high = torch.aminmax(torch.where(counted, p[..., d], origin[d]), dim=1)
        axes.append(torch.floor((torch.stack([low, high], 1) - origin[d]) / sizes[d]))
    cells = torch.stack(axes, 2)  # (B, 2, 3): [cloud, low or high, axis]
    bad = (cells < -limit) | (cells >= limit)
    require(
        ~bad.any(),
        "voxel_size must keep every counted point of points within 2^62 voxels of the grid's origin "
        "(a voxel index is an int64): use a larger voxel_size, or a point_range that leaves the far points out",
        False,
        "voxel index [cloud, low or high, axis]",
        cells,
        bad,
    )


@torch.jit.unused
def _span_bounded_on_host(points: Tensor, sizes: List[float], point_range: Optional[List[float]]) -> bool:
    """Whether the cells are within +-2^62 without looking at the data on the device: a finite
    point_range bounds them (checked in Python in the compute type: float32 values subtracted and
    divided in float64, then rounded, are rounded as float32 arithmetic would), or, on the CPU,
    the extremes of every coordinate (one pass) are finite and near enough."""
    from .._checks import _symbolic

    limit = 2.0**62
    single = points.dtype != torch.float64
    if point_range is not None and all(math.isfinite(v) for v in point_range[3:]):
        for d in range(3):
            lo, hi = _rounded(point_range[d], single), _rounded(point_range[d + 3], single)
            size = _rounded(sizes[d], single)
            if not (size > 0 and math.floor(_rounded(_rounded(hi - lo, single) / size, single)) < limit):
                return False
        return True
    if points.device.type != "cpu" or _symbolic(points):
        return False
    low, high = torch.aminmax(points.to(torch.float64 if not single else torch.float32), dim=1)
    if not bool(torch.isfinite(low).all() & torch.isfinite(high).all()):
        return False
    origin = [0.0, 0.0, 0.0] if point_range is None else point_range[:3]
    for d in range(3):
        size, o = _rounded(sizes[d], single), _rounded(origin[d], single)
        if not size > 0:
            return False
        for v in (float(low[:, d].min()), float(high[:, d].max())):
            cell = math.floor(_rounded(_rounded(v - o, single) / size, single))
            if not -limit <= cell < limit:
                return False
    return True


def _rounded(value: float, single: bool) -> float:
    """value rounded to float32 when single (the op's compute type for non-float64 points)."""
    return (
        struct.unpack("f", struct.pack("f", value))[0]
        if single and math.isfinite(value) and abs(value) < 3.4e38
        else value
    )


@torch.library.register_fake("pointops::voxel_downsample")
def _voxel_downsample_fake(points, lengths, features, voxel_size, point_range=None):
    check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3)
    torch._check(len(voxel_size) == 3, lambda: f"voxel_size must have 3 values, got {len(voxel_size)}")
    torch._check(
        point_range is None or len(point_range) == 6, lambda: f"point_range must have 6 values, got {point_range}"
    )
    batch, n = points.shape[0], points.shape[1]
    if features is None:
        mean_features = points.new_empty((batch, n, 0))
    else:
        check_dim(features, "features", 3, "(B, N, F)")
        check_floating(features, "features")
        torch._check(
            features.shape[0] == batch and features.shape[1] == n,
            lambda: f"features must have shape (B, N, F) with B, N = {batch}, {n} (as points), got shape "
            f"{tuple(features.shape)}",
        )
        check_same_device(features, "features", points)
        mean_features = features.new_empty((batch, n, features.shape[2]))
    return (
        points.new_empty((batch, n, 3)),
        mean_features,
        points.new_empty((batch,), dtype=torch.int64),
        points.new_empty((batch, n), dtype=torch.int64),
    )


def _setup_context(ctx, inputs, output):
    points, _, features, _, _ = inputs
    ctx.save_for_backward(output[3])
    ctx.points_dtype = points.dtype
    ctx.features_dtype = None if features is None else features.dtype


def _spread(grad: Tensor, point_voxel: Tensor, share: Tensor) -> Tensor:
    """grad (B, V, C) of voxel rows -> (B, N, C) per point: its voxel's row times its share."""
    rows = point_voxel.clamp(min=0).unsqueeze(-1).expand(-1, -1, grad.shape[2])
    return torch.gather(grad, 1, rows) * share.unsqueeze(-1).to(grad.dtype)


def _backward(ctx, grad_points, grad_features, grad_lengths, grad_point_voxel):
    (point_voxel,) = ctx.saved_tensors
    counted = point_voxel >= 0
    rows = point_voxel.clamp(min=0)
    counts = torch.zeros(point_voxel.shape, dtype=torch.float64, device=point_voxel.device)
    counts.scatter_add_(1, rows, counted.to(torch.float64))
    share = torch.where(counted, 1.0 / torch.gather(counts, 1, rows).clamp(min=1.0), torch.zeros_like(counts))
    grad_in_points = None
    if ctx.needs_input_grad[0] and grad_points is not None:
        grad_in_points = _spread(grad_points.double(), point_voxel, share).to(ctx.points_dtype)
    grad_in_features = None
    if ctx.features_dtype is not None and ctx.needs_input_grad[2] and grad_features is not None:
        grad_in_features = _spread(grad_features.double(), point_voxel, share).to(ctx.features_dtype)
    return grad_in_points, None, grad_in_features, None, None


torch.library.register_autograd("pointops::voxel_downsample", _backward, setup_context=_setup_context)
