"""Multi-plane detection: votes, peaks, refits and labels in one op (``pointops::detect_planes``).

The pipeline is written once in C++ (csrc/hough/detect_planes.cpp) on the plane ops
(:mod:`pointops.hough.planes`) and runs on the points' device; it never syncs with the host, builds
no tensor on the host per call, and can be captured in a CUDA graph. :func:`detect_planes` resolves
a preset into the op's explicit arguments.
"""

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import check_tensor

from .planes import rho_bins
from ..presets import plane_preset


class PlaneDetections(NamedTuple):
    planes: Tensor  # (B, k, 4) float32: unit normal and offset, n . p = offset >= 0; NaN rows: no plane
    votes: Tensor  # (B, k) float32: the accumulator votes of each plane's peak; 0 where none
    labels: Tensor  # (B, N) int64: the strongest plane within the distance threshold, else -1


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
    least squares to the points within a shrinking band (3, 2, 1, then 0.5 x
    ``distance_threshold``); refit planes that repeat a stronger one (within 1 degree and 2
    thresholds) or hold fewer than ``min_inliers`` (a fraction of the cloud's points) are dropped;
    each point is labelled with the strongest plane within ``distance_threshold`` of it. The whole
    pipeline is one op, ``torch.ops.pointops.detect_planes`` (explicit arguments, no presets;
    csrc/hough/detect_planes.cpp lists its steps); this function resolves the preset.

    ``iterations > 1`` splits the search into rounds: after each round the points already on a
    plane stop voting, which brings out small planes next to a dominant one (ground + walls).

    Args:
        points: (B, N, 3) float (extra columns are ignored). lengths: (B,) int64 or None (all N).
        k: planes per cloud, at most 1024.
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
        raise ValueError("points must have shape (B, N, 3) (extra columns are ignored), got " + str(list(points.shape)))
    if layout not in ("grid", "ball"):
        raise ValueError('layout must be "grid" or "ball", got ' + layout)
    if k < 0 or k > 1024 or iterations < 1:
        raise ValueError("k must be in [0, 1024] and iterations >= 1, got " + str(k) + ", " + str(iterations))
    cfg = plane_preset(preset)
    phis = cfg.n_phi if n_phi is None else n_phi
    thetas = cfg.n_theta if n_theta is None else n_theta
    step = cfg.rho_step if rho_step is None else rho_step
    rmax = cfg.rho_max if rho_max is None else rho_max
    threshold = cfg.distance_threshold if distance_threshold is None else distance_threshold
    support_share = cfg.min_inliers if min_inliers is None else min_inliers
    # named as the caller passed them
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError("distance_threshold must be finite and > 0, got " + str(threshold))
    if not (support_share >= 0.0 and support_share <= 1.0):
        raise ValueError("min_inliers must be a share in [0, 1] of the points, got " + str(support_share))
    if phis < 1 or thetas < 1:
        raise ValueError("n_phi and n_theta must be >= 1, got " + str(phis) + ", " + str(thetas))
    rho_bins(step, rmax)  # rho_step and rho_max: finite, > 0, at most 2^24 bins
    planes, votes, labels = torch.ops.pointops.detect_planes(
        points,
        lengths,
        k,
        phis,
        thetas,
        step,
        rmax,
        threshold,
        support_share,
        min_votes,
        peak_radius,
        iterations,
        layout,
    )
    return PlaneDetections(planes, votes, labels)
