"""Voxel-grid downsampling (wraps csrc/geometry/voxel_downsample*).

Every occupied voxel becomes one point, the mean of its points, with the mean of their features
(normals, colours, intensity). Rules shared by CPU and CUDA, bit for bit: the cell of a
coordinate is ``floor((x - x_min) / dx)`` in float32 (float64 for float64 points), with the grid
at the origin when no ``point_range`` is given; voxels are listed by their (z, y, x) cell; each
voxel's points are summed in increasing index order in float64 and divided by their count.
Outputs have the input's capacity N and a count per cloud, so nothing syncs with the host.
"""
from typing import List, NamedTuple, Optional, Union

import torch
from torch import Tensor

from .._checks import check_dim, check_floating, check_padded_clouds, check_same_device, check_tensor, per_axis


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
        means. The centroids and mean
        features are differentiable (each point gets ``1 / count`` of its voxel's gradient).

    Open3D's ``voxel_down_sample`` anchors its grid at ``min_bound - voxel_size / 2`` of each
    cloud; ``point_range=[*(cloud.min(0) - voxel_size / 2), inf, inf, inf]`` reproduces its cells.
    """
    check_tensor(points, "points", "(B, N, 3)")
    centroids, mean_features, new_lengths, point_voxel = torch.ops.pointops.voxel_downsample(
        points, lengths, features, per_axis(voxel_size, 3, "voxel_size"), point_range
    )
    return VoxelDownsample(centroids, mean_features, new_lengths, point_voxel)


@torch.library.register_fake("pointops::voxel_downsample")
def _voxel_downsample_fake(points, lengths, features, voxel_size, point_range=None):
    check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3)
    torch._check(len(voxel_size) == 3, lambda: f"voxel_size must have 3 values, got {len(voxel_size)}")
    torch._check(point_range is None or len(point_range) == 6,
                 lambda: f"point_range must have 6 values, got {point_range}")
    batch, n = points.shape[0], points.shape[1]
    if features is None:
        mean_features = points.new_empty((batch, n, 0))
    else:
        check_dim(features, "features", 3, "(B, N, F)")
        check_floating(features, "features")
        torch._check(features.shape[0] == batch and features.shape[1] == n,
                     lambda: f"features must have shape (B, N, F) with B, N = {batch}, {n} (as points), got shape "
                             f"{tuple(features.shape)}")
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
