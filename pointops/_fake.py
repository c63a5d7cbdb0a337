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
