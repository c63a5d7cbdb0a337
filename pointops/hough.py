"""Hough accumulators and peaks (wraps csrc/hough).

Planes: every point votes, for each orientation (phi, theta) of a grid or of the equal-area ball,
in the rho bin of rho = n . p; the binning, the sphere's seams and the NaN rules are in
csrc/hough/planes.h. Counts (and weighted sums, summed in point order) are identical on CPU and
CUDA. ``hough_peaks`` is the shared non-maximum suppression + top-k for any accumulator.
"""
import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ._fake import rho_bins  # noqa: F401  (n_rho, public: the accumulators' last size)


def hough_planes(
    points: Tensor,
    rho_step: float,
    rho_max: float,
    n_phi: int = 180,
    n_theta: int = 180,
    lengths: Optional[Tensor] = None,
    weights: Optional[Tensor] = None,
) -> Tensor:
    """Plane Hough accumulator on the (phi, theta, rho) grid.

    Args:
        points: (B, N, 3) floating (computed in float32).
        rho_step, rho_max: rho bins over [-rho_max, rho_max) (see :func:`rho_bins`).
        n_phi, n_theta: orientation cells; centres phi_i = (i + 0.5) pi / n_phi over [0, pi] and
            theta_j = (j + 0.5) pi / n_theta over the half-turn [0, pi).
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None means all N.
        weights: (B, N) per-point weights; None counts votes.

    Returns:
        (B, n_phi, n_theta, n_rho) int32 counts, or float32 weight sums.
    """
    return torch.ops.pointops.hough_planes(points, lengths, weights, n_phi, n_theta, rho_step, rho_max)


def hough_planes_ball(
    points: Tensor,
    rho_step: float,
    rho_max: float,
    n_phi: int = 180,
    n_theta: int = 180,
    lengths: Optional[Tensor] = None,
    weights: Optional[Tensor] = None,
) -> Tensor:
    """Plane Hough accumulator on the equal-area ball: ring i (phi_i as in :func:`hough_planes`)
    has max(1, round(n_theta sin phi_i)) theta cells over the half-turn. Returns (B, n_cells,
    n_rho); :func:`ball_cells` gives each cell's (phi, theta) centre."""
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


def hough_peaks(
    acc: Tensor,
    radius: List[int],
    k: int,
    min_votes: float = 1.0,
    periodic: Optional[List[bool]] = None,
    plane_seam: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Non-maximum suppression and top-k of any accumulator (B, *dims), int32 or float32.

    A bin is a peak when its votes are > 0 and >= min_votes and no bin in the box of half-width
    ``radius`` (per dim) beats it: more votes, or equal votes and a lower flat index. ``periodic``
    (default all False) marks dims that wrap around; ``plane_seam`` glues a hough_planes grid
    along the sphere's seams (theta past pi, phi past a pole; rho mirrored).

    Returns:
        votes (B, k) in acc's dtype, descending (ties to the lower flat index), and indices
        (B, k, ndim) int64; missing peaks are votes 0, indices -1.
    """
    if periodic is None:
        periodic = [False] * (acc.dim() - 1)
    return torch.ops.pointops.hough_peaks(acc, radius, periodic, min_votes, k, plane_seam)


def hough_plane_peaks(acc: Tensor, k: int, radius: Optional[List[int]] = None, min_votes: float = 1.0) -> Tuple[Tensor, Tensor]:
    """:func:`hough_peaks` of a :func:`hough_planes` grid with the sphere's seams glued
    (default radius one bin in phi, theta and rho)."""
    if radius is None:
        radius = [1, 1, 1]
    return torch.ops.pointops.hough_peaks(acc, radius, [False, False, False], min_votes, k, True)


def _rho_centres(rho_index: Tensor, rho_step: float, rho_max: float) -> Tensor:
    step = 2.0 * rho_max / rho_bins(rho_step, rho_max)
    return (rho_index.to(torch.float64) + 0.5) * step - rho_max


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
    (..., 3), offsets (...)) float64, the plane n . p = offset; padding (-1) rows give NaN."""
    phi = (indices[..., 0].to(torch.float64) + 0.5) * (math.pi / n_phi)
    theta = (indices[..., 1].to(torch.float64) + 0.5) * (math.pi / n_theta)
    missing = indices[..., 0] < 0
    normals = torch.where(missing.unsqueeze(-1), torch.full_like(phi, math.nan).unsqueeze(-1), _normals(phi, theta))
    offsets = torch.where(missing, torch.full_like(phi, math.nan), _rho_centres(indices[..., 2], rho_step, rho_max))
    return normals, offsets


def ball_peaks_to_planes(
    indices: Tensor, n_phi: int, n_theta: int, rho_step: float, rho_max: float
) -> Tuple[Tensor, Tensor]:
    """As :func:`peaks_to_planes` for ball peaks: indices (..., 2) as (cell, rho) bins."""
    phi_table, theta_table = ball_cells(n_phi, n_theta)
    cell = indices[..., 0].clamp(min=0)
    phi = phi_table.to(indices.device)[cell]
    theta = theta_table.to(indices.device)[cell]
    missing = indices[..., 0] < 0
    normals = torch.where(missing.unsqueeze(-1), torch.full_like(phi, math.nan).unsqueeze(-1), _normals(phi, theta))
    offsets = torch.where(missing, torch.full_like(phi, math.nan), _rho_centres(indices[..., 1], rho_step, rho_max))
    return normals, offsets
