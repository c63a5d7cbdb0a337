"""Hard and dynamic voxelization (wraps csrc/bev/voxelize*).

Rules shared by CPU and CUDA, bit for bit, and by mmcv's ``Voxelization(deterministic=True)``:
the cell of a point is ``floor((x - min) / size)`` (float32, or float64 for float64 points) and
the point is kept when that cell lies in the grid of ``round((max - min) / size)`` cells per axis;
points with NaN/Inf coordinates are dropped. Within a cloud, voxels take slots in order of their
first point, a voxel stores its first ``max_points_per_voxel`` points in point order, and voxels
past ``max_voxels`` are dropped with their points. Outputs have fixed capacity, so nothing syncs
with the host.
"""
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor


class Voxels(NamedTuple):
    """Output of :func:`voxelize` (B clouds, V = max_voxels, K = max_points_per_voxel)."""

    voxels: Tensor  # (B, V, K, C) points' dtype; zeros where unused
    coords: Tensor  # (B, V, 3) int32 (z, y, x) cell of each voxel; -1 in unused rows
    num_points: Tensor  # (B, V) int32 points stored per voxel, min(points in it, K); 0 where unused
    num_voxels: Tensor  # (B,) int32 voxels kept per cloud
    point_voxel: Tensor  # (B, N) int64 voxel slot of each point, -1 when dropped


def voxelize(
    points: Tensor,
    voxel_size: List[float],
    pc_range: List[float],
    max_points_per_voxel: int,
    max_voxels: int,
    lengths: Optional[Tensor] = None,
) -> Voxels:
    """Hard voxelization of padded clouds (PointPillars / SECOND input), deterministic.

    Args:
        points: (B, N, C) float32/float64/float16/bfloat16, C >= 3, columns x, y, z, features.
        voxel_size: [dx, dy, dz] > 0.
        pc_range: [x_min, y_min, z_min, x_max, y_max, z_max].
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
    """
    voxels, coords, num_points, num_voxels, point_voxel = torch.ops.pointops.voxelize(
        points, lengths, voxel_size, pc_range, max_points_per_voxel, max_voxels
    )
    return Voxels(voxels, coords, num_points, num_voxels, point_voxel)


def voxelize_dynamic(
    points: Tensor,
    voxel_size: List[float],
    pc_range: List[float],
    lengths: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Dynamic voxelization: every point's voxel, with no cap on voxels or points per voxel.

    Returns (point_voxel (B, N) int64, coords (B, N, 3) int32, num_voxels (B,) int32): point i of
    cloud b lies in voxel ``point_voxel[b, i]`` (-1 when outside the grid, not finite or past
    ``lengths``), whose (z, y, x) cell is ``coords[b, point_voxel[b, i]]``; voxels are numbered
    by first appearance and rows of ``coords`` past ``num_voxels[b]`` are -1. Per-voxel
    reductions follow with ``scatter_reduce`` over ``point_voxel``.
    """
    _, coords, _, num_voxels, point_voxel = torch.ops.pointops.voxelize(
        points, lengths, voxel_size, pc_range, 0, points.shape[1]
    )
    return point_voxel, coords, num_voxels
