"""Multi-plane detection on the Hough ops: votes, peaks, labels, least-squares refit.

``detect_planes`` is a batched pure-torch pipeline over the plane ops (:mod:`pointops.hough.planes`). It runs on the points'
device and never syncs with the host: every size comes from the arguments.
"""
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import check_tensor

from .planes import (ball_peaks_to_planes, hough_peaks, hough_plane_peaks, hough_planes, hough_planes_ball,
                     peaks_to_planes, plane_labels, rho_bins)
from ..presets import plane_preset


class PlaneDetections(NamedTuple):
    planes: Tensor  # (B, k, 4) float32: unit normal and offset, n . p = offset >= 0; NaN rows: no plane
    votes: Tensor  # (B, k) float32: the accumulator votes of each plane's peak; 0 where none
    labels: Tensor  # (B, N) int64: the strongest plane within the distance threshold, else -1


def _fit(points: Tensor, planes: Tensor, threshold: float) -> Tensor:
    """Refit in shrinking bands (3, 2, 1, then 0.5 x threshold): a coarse estimate reaches the
    plane's far points before the band tightens, and the last, narrow band keeps the points of
    neighbouring surfaces (box edges, the ground at a wall's foot) out of the fit. A point counts
    for the first (strongest) plane within the band: a weak plane that slices a strong one at a
    shallow angle (the ground) gets none of the strong plane's points."""
    for band in (3.0, 2.0, 1.0, 0.5):
        planes = torch.ops.pointops.plane_refit(points, None, planes, band * threshold)[0]
    return planes


def _suppress_duplicates(planes: Tensor, max_angle_deg: float, max_offset: float) -> Tensor:
    """NaN out every plane that repeats a stronger one (normals within the angle, either sign,
    and offsets within max_offset): neighbouring accumulator cells near the poles, or the ball
    layout's cells, can peak for one plane. Planes are in descending vote order."""
    normal, offset = planes[..., :3], planes[..., 3]
    cos = (normal.unsqueeze(2) * normal.unsqueeze(1)).sum(-1)
    same_sign = (cos >= 0).to(planes.dtype) * 2 - 1
    close = (cos.abs() >= math.cos(math.radians(max_angle_deg))) & (
        (offset.unsqueeze(2) - same_sign * offset.unsqueeze(1)).abs() <= max_offset)
    keep = ~torch.isnan(offset)
    for j in range(1, planes.shape[1]):  # greedy in vote order: a kept stronger plane suppresses j
        earlier = keep[:, :j] & close[:, j, :j]
        keep[:, j] = keep[:, j] & ~earlier.any(1)
    return torch.where(keep.unsqueeze(-1), planes, torch.full_like(planes, math.nan))


def _compact(planes: Tensor, votes: Tensor, k: int):
    """The first k non-NaN planes of each row (stable), NaN / 0 padded."""
    valid = ~torch.isnan(planes[..., 3])
    order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :k]
    planes = torch.gather(planes, 1, order.unsqueeze(-1).expand(-1, -1, 4))
    votes = torch.where(torch.gather(valid, 1, order), torch.gather(votes, 1, order), torch.zeros_like(votes[:, :k]))
    if planes.shape[1] < k:
        pad = k - planes.shape[1]
        planes = torch.cat([planes, planes.new_full((planes.shape[0], pad, 4), math.nan)], 1)
        votes = torch.cat([votes, votes.new_zeros((votes.shape[0], pad))], 1)
    return planes, votes


def detect_planes(
    points: Tensor,
    k: int,
    lengths: Optional[Tensor] = None,
    preset: str = "outdoor",
    n_phi: Optional[int] = None,
    n_theta: Optional[int] = None,
    rho_step: Optional[float] = None,
    rho_max: Optional[float] = None,
    distance_threshold: Optional[float] = None,
    min_votes: float = 1.0,
    peak_radius: int = 2,
    iterations: int = 1,
    layout: str = "grid",
    min_inliers: Optional[float] = None,
) -> PlaneDetections:
    """Detect up to k planes per cloud.

    Every point votes in a (phi, theta, rho) accumulator (``layout="grid"``, or the equal-area
    ``"ball"``); the strongest non-maximum-suppressed peaks (the sphere's seams glued) are refit by
    least squares to the points within a shrinking band (3, 2, then 1 x ``distance_threshold``);
    refit planes that repeat a stronger one (within 1 degree and 2 thresholds) or hold fewer than
    ``min_inliers`` (a fraction of the cloud's points) are dropped; each point is labelled with
    the strongest plane within ``distance_threshold`` of it.

    ``iterations > 1`` splits the search into rounds: after each round the points already on a
    plane stop voting, which brings out small planes next to a dominant one (ground + walls).

    Args:
        points: (B, N, 3) float. lengths: (B,) int64 or None (all N).
        preset: "outdoor" (LiDAR, tens of metres), "outdoor_fast" (coarser rho bins) or "indoor"
            (configs/planes.yaml); explicit arguments override it
            (n_phi, n_theta, rho_step, rho_max: the accumulator; distance_threshold: inlier band;
            min_inliers: the smallest share of the cloud's points a plane must hold).
    Returns:
        PlaneDetections(planes (B, k, 4), votes (B, k), labels (B, N)). A plane is (n, d) with
        n . p = d, |n| = 1 and d >= 0 (the normal points away from the origin, as the ground truth
        of ``pointops.scenes.lidar`` does; a plane through the origin keeps the normal it was found
        with), in descending vote order; rows past the planes found are NaN. Two results are
        equal, NaN rows included, when ``torch.equal(a.planes.nan_to_num(), b.planes.nan_to_num())``
        (``torch.equal`` alone is False wherever a NaN is).
    """
    check_tensor(points, "points", "(B, N, 3)")
    if points.dim() != 3 or points.shape[2] < 3:
        raise ValueError("points must have shape (B, N, 3) (extra columns are ignored), got "
                         + str(list(points.shape)))
    if layout not in ("grid", "ball"):
        raise ValueError('layout must be "grid" or "ball", got ' + layout)
    if k < 0 or iterations < 1:
        raise ValueError("k must be >= 0 and iterations >= 1, got " + str(k) + ", " + str(iterations))
    cfg = plane_preset(preset)
    phis = cfg.n_phi if n_phi is None else n_phi
    thetas = cfg.n_theta if n_theta is None else n_theta
    step = cfg.rho_step if rho_step is None else rho_step
    rmax = cfg.rho_max if rho_max is None else rho_max
    threshold = cfg.distance_threshold if distance_threshold is None else distance_threshold
    support_share = cfg.min_inliers if min_inliers is None else min_inliers
    # named as the caller passed them (the ops below see 3 x distance_threshold as `threshold`)
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError("distance_threshold must be finite and > 0, got " + str(threshold))
    if not (support_share >= 0.0 and support_share <= 1.0):
        raise ValueError("min_inliers must be a share in [0, 1] of the points, got " + str(support_share))
    if phis < 1 or thetas < 1:
        raise ValueError("n_phi and n_theta must be >= 1, got " + str(phis) + ", " + str(thetas))
    rho_bins(step, rmax)  # rho_step and rho_max: finite, > 0, at most 2^24 bins
    batch, n = points.shape[0], points.shape[1]
    pts = points[..., :3].float()
    limit = lengths.unsqueeze(1) if lengths is not None else torch.full((batch, 1), n, device=points.device)
    valid = (torch.arange(n, device=points.device).unsqueeze(0) < limit) & torch.isfinite(pts).all(-1)
    if k == 0:
        return PlaneDetections(pts.new_zeros((batch, 0, 4)), pts.new_zeros((batch, 0)),
                               torch.full((batch, n), -1, dtype=torch.int64, device=points.device))
    # Points past lengths and non-finite points cast no vote (NaN) and the plane ops skip them.
    pts = torch.where(valid.unsqueeze(-1), pts, torch.full_like(pts, math.nan))
    voters = pts
    bin_angle = 180.0 / min(phis, thetas)

    planes = pts.new_zeros((batch, 0, 4))
    votes = pts.new_zeros((batch, 0))
    enough = support_share * valid.sum(1, keepdim=True).to(pts.dtype)  # (B, 1)
    max_fit_planes = 1024  # plane_labels / plane_refit take at most this many planes per cloud
    rounds = min(iterations, max(k, 1))
    for r in range(rounds):
        take = k // rounds + (1 if r < k % rounds else 0)
        # Extra peaks: one plane's echoes in neighbouring cells are merged below. The ball has no
        # neighbourhood across its rings in hough_peaks yet (rho only), so it needs more.
        candidates = (4 if layout == "grid" else 16) * take
        candidates = max(take, min(candidates, max_fit_planes - planes.shape[1]))  # the plane ops' K limit
        if layout == "grid":
            acc = hough_planes(voters, step, rmax, n_phi=phis, n_theta=thetas)
            peak_votes, idx = hough_plane_peaks(acc, candidates, [peak_radius] * 3, min_votes)
            normals, offsets = peaks_to_planes(idx, phis, thetas, step, rmax)
        else:
            acc = hough_planes_ball(voters, step, rmax, n_phi=phis, n_theta=thetas)
            peak_votes, idx = hough_peaks(acc, [0, peak_radius], candidates, min_votes)
            normals, offsets = ball_peaks_to_planes(idx, phis, thetas, step, rmax)
        found = torch.cat([normals, offsets.unsqueeze(-1)], -1).float()
        # One plane peaks in several neighbouring cells (near the poles, on the ball): merge those
        # echoes at bin resolution, refit (bin centres are up to half a bin off), merge what the
        # refit shows to be one plane, and drop planes with too little support; vote order holds.
        every = _suppress_duplicates(torch.cat([planes, found], 1), 2.0 * bin_angle, 2.0 * step + threshold)
        every = _fit(pts, every, threshold)
        every = _suppress_duplicates(every, 1.0, 2.0 * threshold)
        support = torch.ops.pointops.plane_refit(pts, None, every, threshold)[1]  # inlier counts
        weak = (support.to(pts.dtype) < enough) | (support < 3)
        every = torch.where(weak.unsqueeze(-1), torch.full_like(every, math.nan), every)
        known = planes.shape[1]
        found, found_votes = _compact(every[:, known:], peak_votes.float(), take)
        planes, votes = torch.cat([every[:, :known], found], 1), torch.cat([votes, found_votes], 1)
        if r + 1 < rounds:
            on_plane = plane_labels(pts, planes, 2.0 * threshold) >= 0
            voters = torch.where(on_plane.unsqueeze(-1), torch.full_like(pts, math.nan), voters)

    planes = _fit(pts, planes, threshold)
    # One sign for every plane, the one pointops.scenes' ground truth has: offset >= 0, the normal
    # pointing away from the origin (the sensor); the peaks' half-turn of orientations gives either.
    planes = torch.where(planes[..., 3:] < 0, -planes, planes)
    return PlaneDetections(planes, votes, plane_labels(pts, planes, threshold))
