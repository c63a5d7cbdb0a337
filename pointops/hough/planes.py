"""Hough accumulators and peaks (wraps csrc/hough).

Planes: every point votes, for each orientation (phi, theta) of a grid or of the equal-area ball,
in the rho bin of rho = n . p; the binning, the sphere's seams and the NaN rules are in
csrc/hough/planes.h. Counts (and weighted sums, summed in point order) are identical on CPU and
CUDA. ``hough_peaks`` is the shared non-maximum suppression + top-k for any accumulator.
``plane_labels`` and ``plane_refit`` assign points to planes and refit planes to their inliers
(csrc/hough/plane_fit.h). None of these ops has a gradient: their outputs never require grad.
"""

import math
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .._checks import check_floating, check_output_fits, check_same_device, check_tensor
from .._tables import host_table


def rho_bins(rho_step: float, rho_max: float) -> int:
    """n_rho = max(1, round(2 rho_max / rho_step)): the rho bins tile [-rho_max, rho_max) in steps
    of 2 rho_max / n_rho (the float64 formula of check_planes_args in csrc/hough/planes_cpu.cpp).
    Both must be finite and > 0, and the bins at most 2^24."""
    if not (math.isfinite(rho_step) and rho_step > 0 and math.isfinite(rho_max) and rho_max > 0):
        raise ValueError("rho_step and rho_max must be finite and > 0, got " + str(rho_step) + ", " + str(rho_max))
    bins = 2.0 * rho_max / rho_step + 0.5
    if bins > 16777216.0:
        raise ValueError(
            "rho_max / rho_step = "
            + str(rho_max)
            + " / "
            + str(rho_step)
            + " makes "
            + str(bins)
            + " rho bins, more than 2^24"
        )
    return max(1, int(math.floor(bins)))


def ball_cell_count(n_phi: int, n_theta: int) -> int:
    """Cells of the equal-area ball layout (csrc/hough/planes.h), with the C++ formula."""
    total = 0
    for i in range(n_phi):
        total += max(1, int(math.floor(n_theta * math.sin((i + 0.5) * math.pi / n_phi) + 0.5)))
    return total


def hough_planes(
    points: Tensor,
    rho_step: float,
    rho_max: float,
    lengths: Optional[Tensor] = None,
    n_phi: int = 180,
    n_theta: int = 180,
    weights: Optional[Tensor] = None,
) -> Tensor:
    """Plane Hough accumulator on the (phi, theta, rho) grid.

    Args:
        points: (B, N, 3) floating (computed in float32).
        rho_step, rho_max: rho bins over [-rho_max, rho_max) (see :func:`rho_bins`).
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None means all N.
        n_phi, n_theta: orientation cells; centres phi_i = (i + 0.5) pi / n_phi over [0, pi] and
            theta_j = (j + 0.5) pi / n_theta over the half-turn [0, pi).
        weights: (B, N) per-point weights; None counts votes.

    Returns:
        (B, n_phi, n_theta, n_rho) int32 counts, or float32 weight sums.
    """
    check_tensor(points, "points", "(B, N, 3)")
    return torch.ops.pointops.hough_planes(points, lengths, weights, n_phi, n_theta, rho_step, rho_max)


def hough_planes_ball(
    points: Tensor,
    rho_step: float,
    rho_max: float,
    lengths: Optional[Tensor] = None,
    n_phi: int = 180,
    n_theta: int = 180,
    weights: Optional[Tensor] = None,
) -> Tensor:
    """Plane Hough accumulator on the equal-area ball: ring i (phi_i as in :func:`hough_planes`)
    has max(1, round(n_theta sin phi_i)) theta cells over the half-turn. Returns (B, n_cells,
    n_rho); :func:`ball_cells` gives each cell's (phi, theta) centre."""
    check_tensor(points, "points", "(B, N, 3)")
    return torch.ops.pointops.hough_planes_ball(points, lengths, weights, n_phi, n_theta, rho_step, rho_max)


def ball_cells(n_phi: int, n_theta: int) -> Tuple[Tensor, Tensor]:
    """(phi, theta) centres of the ball layout's cells, float64 (n_cells,) each, in accumulator order."""
    rings: List[int] = []
    for i in range(n_phi):
        rings.append(max(1, int(math.floor(n_theta * math.sin((i + 0.5) * math.pi / n_phi) + 0.5))))
    sizes = torch.tensor(rings, dtype=torch.int64)
    ring = torch.repeat_interleave(torch.arange(n_phi), sizes, output_size=sum(rings))
    within = torch.arange(sum(rings)) - (torch.cumsum(sizes, 0) - sizes)[ring]
    phi = (ring.to(torch.float64) + 0.5) * (math.pi / n_phi)
    theta = (within.to(torch.float64) + 0.5) * math.pi / sizes[ring].to(torch.float64)
    return phi, theta


class Peaks(NamedTuple):
    """Output of :func:`hough_peaks` (B accumulators, k peaks)."""

    votes: Tensor  # (B, k) in the accumulator's dtype, descending; 0 where no peak
    indices: Tensor  # (B, k, ndim) int64 bin of each peak; -1 where no peak


def hough_peaks(
    acc: Tensor,
    radius: List[int],
    k: int,
    min_votes: float = 1.0,
    periodic: Optional[List[bool]] = None,
    plane_seam: bool = False,
) -> Peaks:
    """Non-maximum suppression and top-k of any accumulator (B, *dims), int32 or float32.

    A bin is a peak when its votes are > 0 and >= min_votes and no bin in the box of half-width
    ``radius`` (per dim) beats it: more votes, or equal votes and a lower flat index. ``periodic``
    (default all False) marks dims that wrap around; ``plane_seam`` glues a hough_planes grid
    along the sphere's seams (theta past pi, phi past a pole; rho mirrored).

    Returns:
        votes (B, k) in acc's dtype, descending (ties to the lower flat index), and indices
        (B, k, ndim) int64; missing peaks are votes 0, indices -1.
    """
    check_tensor(acc, "acc", "(B, *dims)")
    if periodic is None:
        periodic = [False] * (acc.dim() - 1)
    votes, indices = torch.ops.pointops.hough_peaks(acc, radius, periodic, min_votes, k, plane_seam)
    return Peaks(votes, indices)


def hough_plane_peaks(acc: Tensor, k: int, radius: Optional[List[int]] = None, min_votes: float = 1.0) -> Peaks:
    """:func:`hough_peaks` of a :func:`hough_planes` grid with the sphere's seams glued
    (default radius one bin in phi, theta and rho)."""
    check_tensor(acc, "acc", "(B, n_phi, n_theta, n_rho)")
    if radius is None:
        radius = [1, 1, 1]
    votes, indices = torch.ops.pointops.hough_peaks(acc, radius, [False, False, False], min_votes, k, True)
    return Peaks(votes, indices)


def _rho_centres(rho_index: Tensor, rho_step: float, rho_max: float) -> Tensor:
    """Bin centres of rho indices (clamped to the n_rho bins), float64. A CPU-made table like the
    normals: computed on a GPU, or fused by a compiler into one multiply-add, the centres would
    round differently."""
    n_rho = rho_bins(rho_step, rho_max)
    table = host_table(_rho_table(n_rho, rho_max), rho_index.device)
    return table[rho_index.clamp(0, n_rho - 1)]


def _constant_result(fn):
    """``torch.compiler.assume_constant_result(fn)`` without importing the compiler when pointops
    is imported (that import alone costs seconds): it sets the one attribute Dynamo reads, as
    torch's decorator does (tests/test_hough_planes.py holds the two equal)."""
    fn._dynamo_marked_constant = True
    return fn


# The tables below are computed eagerly on the CPU even inside torch.compile (assumed constant:
# the compiler takes the result, not the arithmetic). Traced, inductor may move the computation
# onto the GPU or fuse it, and a centre or a normal then differs from eager mode in the last bit.
@_constant_result
def _rho_table(n_rho: int, rho_max: float) -> Tensor:
    return (torch.arange(n_rho, dtype=torch.float64) + 0.5) * (2.0 * rho_max / n_rho) - rho_max


@_constant_result
def _grid_normal_table(n_phi: int, n_theta: int) -> Tensor:
    return plane_grid_normals(n_phi, n_theta).reshape(-1, 3)


@_constant_result
def _ball_normal_table(n_phi: int, n_theta: int) -> Tensor:
    phi, theta = ball_cells(n_phi, n_theta)
    return _normals(phi, theta)


def _normals(phi: Tensor, theta: Tensor) -> Tensor:
    return torch.stack([torch.sin(phi) * torch.cos(theta), torch.sin(phi) * torch.sin(theta), torch.cos(phi)], -1)


def plane_grid_normals(n_phi: int, n_theta: int) -> Tensor:
    """Bin-centre unit normals of the grid, (n_phi, n_theta, 3) float64."""
    phi = (torch.arange(n_phi, dtype=torch.float64) + 0.5) * (math.pi / n_phi)
    theta = (torch.arange(n_theta, dtype=torch.float64) + 0.5) * (math.pi / n_theta)
    return _normals(phi.unsqueeze(1).expand(n_phi, n_theta), theta.unsqueeze(0).expand(n_phi, n_theta))


def peaks_to_planes(
    indices: Tensor, n_phi: int, n_theta: int, rho_step: float, rho_max: float
) -> Tuple[Tensor, Tensor]:
    """Bin centres of grid peaks: indices (..., 3) as (phi, theta, rho) bins -> (unit normals
    (..., 3), offsets (...)) float64, the plane n . p = offset; padding (-1) rows give NaN.
    The normals come from one table computed on the CPU, so every device returns the same bits."""
    table = host_table(_grid_normal_table(n_phi, n_theta), indices.device)
    missing = indices[..., 0] < 0
    cell = (indices[..., 0] * n_theta + indices[..., 1]).clamp(min=0)
    normals = torch.where(missing.unsqueeze(-1), torch.full_like(table[:1], math.nan), table[cell])
    offsets = torch.where(
        missing,
        torch.full(missing.shape, math.nan, dtype=torch.float64, device=indices.device),
        _rho_centres(indices[..., 2], rho_step, rho_max),
    )
    return normals, offsets


def ball_peaks_to_planes(
    indices: Tensor, n_phi: int, n_theta: int, rho_step: float, rho_max: float
) -> Tuple[Tensor, Tensor]:
    """As :func:`peaks_to_planes` for ball peaks: indices (..., 2) as (cell, rho) bins."""
    table = host_table(_ball_normal_table(n_phi, n_theta), indices.device)
    missing = indices[..., 0] < 0
    normals = torch.where(
        missing.unsqueeze(-1), torch.full_like(table[:1], math.nan), table[indices[..., 0].clamp(min=0)]
    )
    offsets = torch.where(
        missing,
        torch.full(missing.shape, math.nan, dtype=torch.float64, device=indices.device),
        _rho_centres(indices[..., 1], rho_step, rho_max),
    )
    return normals, offsets


def plane_labels(points: Tensor, planes: Tensor, threshold: float, lengths: Optional[Tensor] = None) -> Tensor:
    """The first plane within ``threshold`` of each point, else -1.

    Args:
        points: (B, N, 3) floating (computed in float32).
        planes: (B, K, 4) rows (nx, ny, nz, d) of the planes n . p = d, K <= 1024; a row with a
            NaN/Inf entry matches no point.
        threshold: the largest |n . p - d| that counts, >= 0.
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None means all N.

    Returns:
        (B, N) int64: the lowest k with |n_k . p - d_k| <= threshold; -1 for points on no plane,
        past lengths[b], or with a NaN/Inf coordinate. Identical on CPU and CUDA.
    """
    check_tensor(points, "points", "(B, N, 3)")
    check_tensor(planes, "planes", "(B, K, 4)")
    return torch.ops.pointops.plane_labels(points, lengths, planes, threshold)


class PlaneFit(NamedTuple):
    """Output of :func:`plane_refit`."""

    planes: Tensor  # (B, K, 4) float32 refit planes (unit normal, offset)
    inliers: Tensor  # (B, K) int64 points within the threshold of each input plane


def plane_refit(
    points: Tensor,
    planes: Tensor,
    threshold: float,
    lengths: Optional[Tensor] = None,
    bands: Optional[List[float]] = None,
) -> PlaneFit:
    """Least-squares refit of each plane to its inliers (the points :func:`plane_labels` gives it).

    The normal is the covariance's smallest-eigenvalue direction, turned to within 90 degrees of
    the row's normal, and the plane passes through the inliers' centroid. Rows with fewer than 3
    inliers, or with inliers all on one line, keep their values.

    ``bands`` (default ``[1.0]``): one refit per entry, in order, each of the previous one's planes
    with the threshold ``band * threshold``; shrinking bands (``[3, 2, 1, 0.5]``) let a coarse
    plane reach its far points before the band tightens. The inlier counts are the last band's.

    Returns:
        :class:`PlaneFit` (planes (B, K, 4) float32, inliers (B, K) int64); identical on CPU and
        CUDA (the moments are exact integer sums; see csrc/hough/plane_fit.h).
    """
    check_tensor(points, "points", "(B, N, 3)")
    check_tensor(planes, "planes", "(B, K, 4)")
    if bands is None:
        bands = [1.0]
    fitted, inliers = torch.ops.pointops.plane_refit(points, lengths, planes, threshold, bands)
    return PlaneFit(fitted, inliers)


def plane_suppress(planes: Tensor, max_angle: float, max_offset: float) -> Tensor:
    """Greedy removal of repeated planes: rows (B, K, 4), strongest first, K <= 1024.

    Row j is dropped (comes back NaN) when its offset is NaN or a kept row i < j repeats it: their
    normals within ``max_angle`` radians of each other or of each other's flip (``|n_i . n_j| >=
    cos(max_angle)``) and their offsets within ``max_offset`` (``|d_j - s d_i|``, s the sign of
    ``n_i . n_j``). The arithmetic is float32 (csrc/hough/plane_suppress.h), the same bits on CPU
    and CUDA.

    Returns:
        (B, K, 4) float32: the kept rows as given, NaN rows for the others.
    """
    check_tensor(planes, "planes", "(B, K, 4)")
    return torch.ops.pointops.plane_suppress(planes, max_angle, max_offset)


class PlaneCandidates(NamedTuple):
    """Output of :func:`plane_detections`."""

    planes: Tensor  # (B, k, 4) float32 bin-centre planes (unit normal, offset); NaN rows: no peak
    votes: Tensor  # (B, k) float32 votes of each peak, descending; 0 where none


def plane_detections(
    acc: Tensor,
    n_phi: int,
    n_theta: int,
    rho_step: float,
    rho_max: float,
    k: int,
    radius: int = 1,
    min_votes: float = 1.0,
) -> PlaneCandidates:
    """The k strongest peaks of a plane accumulator as planes, in one op.

    ``acc`` is a :func:`hough_planes` grid (B, n_phi, n_theta, n_rho) or a
    :func:`hough_planes_ball` accumulator (B, n_cells, n_rho) made with these arguments. Peaks are
    :func:`hough_peaks`': on the grid a box of ``radius`` bins in every dim with the sphere's seams
    glued, on the ball ``radius`` rho bins within a cell. Each peak comes back as its bin centre,
    the plane :func:`peaks_to_planes` / :func:`ball_peaks_to_planes` give, rounded to float32; the
    tables are made once per grid and device, so a call copies nothing from the host.

    Returns:
        :class:`PlaneCandidates` (planes (B, k, 4) float32, votes (B, k) float32), descending;
        NaN / 0 past the peaks found.
    """
    check_tensor(acc, "acc", "(B, n_phi, n_theta, n_rho)")
    planes, votes = torch.ops.pointops.plane_detections(acc, n_phi, n_theta, rho_step, rho_max, k, radius, min_votes)
    return PlaneCandidates(planes, votes)


# ---- fake kernels: output shapes and dtypes from the arguments alone ----


def _check_cloud3(points: Tensor, lengths: Optional[Tensor]) -> None:
    torch._check(
        points.dim() == 3 and points.shape[2] == 3,
        lambda: f"points must have shape (B, N, 3), got {tuple(points.shape)}",
    )
    check_floating(points, "points")
    check_same_device(lengths, "lengths", points)


def _check_planes_grid(points, lengths, weights, n_phi, n_theta, rho_step, rho_max) -> None:
    _check_cloud3(points, lengths)
    check_same_device(weights, "weights", points)
    torch._check(n_phi >= 1 and n_theta >= 1, lambda: f"n_phi and n_theta must be >= 1, got {n_phi}, {n_theta}")
    torch._check(rho_step > 0 and rho_max > 0, lambda: f"rho_step and rho_max must be > 0, got {rho_step}, {rho_max}")


@torch.library.register_fake("pointops::hough_planes")
def _hough_planes_fake(points, lengths, weights, n_phi, n_theta, rho_step, rho_max):
    _check_planes_grid(points, lengths, weights, n_phi, n_theta, rho_step, rho_max)
    dtype = torch.int32 if weights is None else torch.float32
    return points.new_empty((points.shape[0], n_phi, n_theta, rho_bins(rho_step, rho_max)), dtype=dtype)


@torch.library.register_fake("pointops::hough_planes_ball")
def _hough_planes_ball_fake(points, lengths, weights, n_phi, n_theta, rho_step, rho_max):
    _check_planes_grid(points, lengths, weights, n_phi, n_theta, rho_step, rho_max)
    dtype = torch.int32 if weights is None else torch.float32
    shape = (points.shape[0], ball_cell_count(n_phi, n_theta), rho_bins(rho_step, rho_max))
    return points.new_empty(shape, dtype=dtype)


@torch.library.register_fake("pointops::hough_peaks")
def _hough_peaks_fake(acc, radius, periodic, min_votes, k, plane_seam=False):
    torch._check(acc.dim() >= 2, lambda: f"acc must have shape (B, *dims), got {tuple(acc.shape)}")
    torch._check(acc.dtype in (torch.int32, torch.float32), lambda: f"acc must be int32 or float32, got {acc.dtype}")
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = acc.shape[0]
    check_output_fits(acc.device, f"k = {k}", (batch, k, acc.dim()), 8)
    return acc.new_empty((batch, k)), acc.new_empty((batch, k, acc.dim() - 1), dtype=torch.int64)


def _check_plane_fit(points, lengths, planes, threshold):
    _check_cloud3(points, lengths)
    torch._check(
        planes.dim() == 3 and planes.shape[0] == points.shape[0] and planes.shape[2] == 4,
        lambda: f"planes must have shape (B, K, 4) with B = {points.shape[0]}, got {tuple(planes.shape)}",
    )
    check_floating(planes, "planes")
    check_same_device(planes, "planes", points)
    torch._check(
        planes.shape[1] <= 1024, lambda: f"planes must have at most 1024 rows per cloud (K), got {planes.shape[1]}"
    )
    torch._check(
        math.isfinite(threshold) and threshold >= 0, lambda: f"threshold must be finite and >= 0, got {threshold}"
    )


@torch.library.register_fake("pointops::plane_labels")
def _plane_labels_fake(points, lengths, planes, threshold):
    _check_plane_fit(points, lengths, planes, threshold)
    return points.new_empty(points.shape[:2], dtype=torch.int64)


@torch.library.register_fake("pointops::plane_refit")
def _plane_refit_fake(points, lengths, planes, threshold, bands=(1.0,)):
    _check_plane_fit(points, lengths, planes, threshold)
    torch._check(len(bands) >= 1, lambda: "bands must have at least one entry, got []")
    for band in bands:
        torch._check(
            math.isfinite(band * threshold) and band * threshold >= 0,
            lambda: f"bands must make thresholds band * threshold finite and >= 0, got band {band} "
            f"with threshold {threshold}",
        )
    return planes.new_empty(planes.shape, dtype=torch.float32), planes.new_empty(planes.shape[:2], dtype=torch.int64)


@torch.library.register_fake("pointops::plane_suppress")
def _plane_suppress_fake(planes, max_angle, max_offset):
    torch._check(
        planes.dim() == 3 and planes.shape[2] == 4,
        lambda: f"planes must have shape (B, K, 4), got {tuple(planes.shape)}",
    )
    check_floating(planes, "planes")
    torch._check(
        planes.shape[1] <= 1024, lambda: f"planes must have at most 1024 rows per cloud (K), got {planes.shape[1]}"
    )
    torch._check(
        math.isfinite(max_angle) and max_angle >= 0,
        lambda: f"max_angle must be finite and >= 0 (radians), got {max_angle}",
    )
    torch._check(
        math.isfinite(max_offset) and max_offset >= 0, lambda: f"max_offset must be finite and >= 0, got {max_offset}"
    )
    return planes.new_empty(planes.shape, dtype=torch.float32)


@torch.library.register_fake("pointops::plane_detections")
def _plane_detections_fake(acc, n_phi, n_theta, rho_step, rho_max, k, radius=1, min_votes=1.0):
    torch._check(
        acc.dim() in (3, 4),
        lambda: "acc must be a hough_planes grid (B, n_phi, n_theta, n_rho) or a "
        f"hough_planes_ball accumulator (B, n_cells, n_rho), got shape {tuple(acc.shape)}",
    )
    torch._check(acc.dtype in (torch.int32, torch.float32), lambda: f"acc must be int32 or float32, got {acc.dtype}")
    torch._check(n_phi >= 1 and n_theta >= 1, lambda: f"n_phi and n_theta must be >= 1, got {n_phi}, {n_theta}")
    torch._check(rho_step > 0 and rho_max > 0, lambda: f"rho_step and rho_max must be > 0, got {rho_step}, {rho_max}")
    cells = [n_phi, n_theta] if acc.dim() == 4 else [ball_cell_count(n_phi, n_theta)]
    expected = [acc.shape[0]] + cells + [rho_bins(rho_step, rho_max)]
    torch._check(list(acc.shape) == expected, lambda: f"acc must have shape {expected}, got {list(acc.shape)}")
    torch._check(k >= 0 and radius >= 0, lambda: f"k and radius must be >= 0, got {k}, {radius}")
    check_output_fits(acc.device, f"k = {k}", (acc.shape[0], k, acc.dim()), 8)
    return acc.new_empty((acc.shape[0], k, 4), dtype=torch.float32), acc.new_empty(
        (acc.shape[0], k), dtype=torch.float32
    )


@torch.library.register_fake("pointops::detect_planes")
def _detect_planes_fake(
    points,
    lengths,
    k,
    n_phi,
    n_theta,
    rho_step,
    rho_max,
    distance_threshold,
    min_inliers,
    min_votes=1.0,
    peak_radius=2,
    iterations=1,
    layout="grid",
):
    torch._check(
        points.dim() == 3 and points.shape[2] >= 3,
        lambda: f"points must have shape (B, N, C) with C >= 3, got {tuple(points.shape)}",
    )
    check_floating(points, "points")
    check_same_device(lengths, "lengths", points)
    torch._check(layout in ("grid", "ball"), lambda: f'layout must be "grid" or "ball", got "{layout}"')
    torch._check(0 <= k <= 1024, lambda: f"k must be in [0, 1024], got {k}")
    torch._check(iterations >= 1, lambda: f"iterations must be >= 1, got {iterations}")
    torch._check(
        math.isfinite(distance_threshold) and distance_threshold > 0,
        lambda: f"distance_threshold must be finite and > 0, got {distance_threshold}",
    )
    torch._check(
        0.0 <= min_inliers <= 1.0, lambda: f"min_inliers must be a share in [0, 1] of the points, got {min_inliers}"
    )
    batch, n = points.shape[0], points.shape[1]
    return (
        points.new_empty((batch, k, 4), dtype=torch.float32),
        points.new_empty((batch, k), dtype=torch.float32),
        points.new_empty((batch, n), dtype=torch.int64),
    )
