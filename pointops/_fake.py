"""Fake (meta) kernels: output shapes and dtypes of every pointops operator, with no data read.

Output sizes come from arguments only, so none of these needs a dynamic size.
"""
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
