"""Circle and line detection on the 2D Hough ops.

``detect_circles`` / ``detect_lines`` are batched pipelines of two ops each: an accumulator
(:mod:`pointops.hough.images`) and ``circle_detections`` / ``line_detections`` (non-maximum suppression,
top-k, threshold and decoding in one op, csrc/hough/detections.h): on the edges' device, no host
sync, fixed output sizes (k rows, NaN padded). They follow scikit-image's ``hough_circle_peaks`` and
``hough_line_peaks`` where those are well defined; docs/hough.md lists where they differ.
"""

import math
from typing import List, NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import check_tensor

from .images import hough_circles_max, hough_lines, line_angles


class CircleDetections(NamedTuple):
    circles: Tensor  # (B, k, 3) float32 (x, y, r): centre pixel and radius; NaN rows where fewer circles
    votes: Tensor  # (B, k) float32: the accumulator value of each circle; 0 where none


class LineDetections(NamedTuple):
    lines: Tensor  # (B, k, 2) float32 (rho, theta): x cos(theta) + y sin(theta) = rho; NaN rows where fewer
    votes: Tensor  # (B, k) float32: the accumulator value of each line; 0 where none


def circle_peaks(
    acc: Tensor, radii: List[int], k: int, min_distance: int = 1, threshold: Optional[float] = None
) -> CircleDetections:
    """The k strongest circles of a :func:`pointops.hough_circles` accumulator (B, R, H, W).

    Each centre pixel keeps its best radius (``acc.max(1)``, ties to the first radius); a centre
    is a circle when no centre within ``min_distance`` pixels in x and in y (a box) scores more
    (or the same with a lower row-major index), and its score is above ``threshold`` (default: half
    the image's best score). Circles come in descending score order.
    """
    check_tensor(acc, "acc", "(B, R, H, W)")
    batch, n_radii, height, width = acc.shape
    if n_radii == 0:
        return CircleDetections(
            torch.full((batch, k, 3), math.nan, device=acc.device), torch.zeros(batch, k, device=acc.device)
        )
    best, arg = acc.max(1)
    circles, votes = torch.ops.pointops.circle_detections(best, arg, radii, k, min_distance, threshold)
    return CircleDetections(circles, votes)


def detect_circles(
    edges: Tensor,
    radii: List[int],
    k: int,
    min_distance: int = 1,
    threshold: Optional[float] = None,
    normalize: bool = False,
    weighted: bool = False,
    gradients: Optional[Tensor] = None,
    max_angle: float = 0.1,
) -> CircleDetections:
    """Detect up to k circles per edge image.

    Args:
        edges: (B, H, W); nonzero pixels are edges.
        radii: the radii to try, e.g. ``list(range(40, 101))``.
        k: circles per image (rows past the ones found are NaN, votes 0).
        min_distance: centres closer than this in both x and y (pixels) are one circle, whatever
            their radii (scikit-image's min_xdistance = min_ydistance).
        threshold: the least score a circle must exceed; None: half the image's best score.
        normalize, weighted, gradients, max_angle: as :func:`pointops.hough_circles`
            (``normalize`` compares radii fairly: scores become the share of the circle found).

    Returns:
        CircleDetections(circles (B, k, 3) float32 (x, y, r), votes (B, k) float32).
    """
    check_tensor(edges, "edges", "(B, H, W)")
    if len(radii) == 0:
        return CircleDetections(
            torch.full((edges.shape[0], k, 3), math.nan, device=edges.device),
            torch.zeros(edges.shape[0], k, device=edges.device),
        )
    # the best radius per centre straight from the votes: no (B, R, H, W) accumulator; then
    # suppression, top-k, threshold and decoding in one op
    best, arg = hough_circles_max(
        edges, radii, weighted=weighted, normalize=normalize, gradients=gradients, max_angle=max_angle
    )
    circles, votes = torch.ops.pointops.circle_detections(best, arg, radii, k, min_distance, threshold)
    return CircleDetections(circles, votes)


def spans_half_turn(theta: List[float]) -> bool:
    """Whether an angle list closes into a circle, so that its angle axis wraps around: ascending
    angles spanning at most a half-turn, whose span plus one mean step is a half-turn (to 1e-6),
    as :func:`pointops.line_angles` (T steps over [-pi/2, pi/2)) and ``numpy.linspace(a, a + pi,
    T)`` (scikit-image's "continuous" angles, the end point included) are."""
    n = len(theta)
    if n < 2:
        return False
    for i in range(n - 1):
        if not theta[i + 1] > theta[i]:
            return False
    span = theta[n - 1] - theta[0]
    return span <= math.pi * (1.0 + 1e-6) and span * n / (n - 1) >= math.pi * (1.0 - 1e-6)


def line_peaks(
    acc: Tensor,
    k: int,
    theta: Optional[List[float]] = None,
    min_distance: int = 9,
    min_angle: int = 10,
    threshold: Optional[float] = None,
) -> LineDetections:
    """The k strongest lines of a :func:`pointops.hough_lines` accumulator (B, n_rho, T).

    A bin is a line when no bin within ``min_distance`` rho bins and ``min_angle`` angle bins
    scores more (or the same and comes first in the accumulator's row-major order: lower rho
    bin, then lower angle bin) and its score is above ``threshold`` (default: half the image's
    best), so a plateau of equal votes gives one line, its first bin. When the angles span a
    half-turn (:func:`spans_half_turn`: the default T angles over [-pi/2, pi/2), or an explicit
    list such as ``numpy.linspace(0, pi, T)``) the angle axis wraps around as lines do: the line
    (rho, theta) is (-rho, theta + pi), so angle bin T - 1 neighbours bin 0 with rho mirrored;
    ties keep the same order across the seam. Other angle lists do not wrap.
    """
    check_tensor(acc, "acc", "(B, n_rho, T)")
    angles = line_angles(acc.shape[2]) if theta is None else theta
    lines, votes = torch.ops.pointops.line_detections(
        acc, angles, k, min_distance, min_angle, threshold, spans_half_turn(angles)
    )
    return LineDetections(lines, votes)


def detect_lines(
    edges: Tensor,
    k: int,
    theta: Optional[List[float]] = None,
    min_distance: int = 9,
    min_angle: int = 10,
    threshold: Optional[float] = None,
    weighted: bool = False,
) -> LineDetections:
    """Detect up to k lines per edge image.

    Args:
        edges: (B, H, W); nonzero pixels are edges.
        k: lines per image (rows past the ones found are NaN, votes 0).
        theta: angles to try (radians); default 180 over [-pi/2, pi/2). The angle axis wraps
            around when the angles span a half-turn (see :func:`line_peaks`).
        min_distance, min_angle: lines closer than this in rho bins (pixels) and angle bins are one
            line (scikit-image's defaults, 9 and 10); of a plateau of equal votes the first bin in
            row-major order (lower rho, then lower angle bin) is the line.
        threshold: the least score a line must exceed; None: half the image's best score.
        weighted: edges vote their values (see :func:`pointops.hough_lines`).

    Returns:
        LineDetections(lines (B, k, 2) float32 (rho, theta), votes (B, k) float32): the line is
        x cos(theta) + y sin(theta) = rho with (x, y) = (column, row).
    """
    check_tensor(edges, "edges", "(B, H, W)")
    angles = line_angles(180) if theta is None else theta  # computed once for both ops
    acc = hough_lines(edges, angles, weighted=weighted)
    lines, votes = torch.ops.pointops.line_detections(
        acc, angles, k, min_distance, min_angle, threshold, spans_half_turn(angles)
    )
    return LineDetections(lines, votes)
