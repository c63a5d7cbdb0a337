"""Edge images with known circles and lines, for the 2D Hough transforms' tests, benchmarks and
docs (torch only, seeded)."""

import math
from typing import List, NamedTuple, Tuple

import torch
from torch import Tensor

from ..hough.images import line_angles


class EdgeScene(NamedTuple):
    edges: Tensor  # (H, W) bool edge image
    circles: Tensor  # (C, 3) float32 (x, y, r) of the drawn circles: integer centres and radii
    lines: Tensor  # (L, 2) float32 (rho, theta) of the drawn lines, theta on line_angles(180)


def _draw_circle(edges: Tensor, x: int, y: int, r: int, arc: float, start: float) -> None:
    from ..reference.hough import circle_offsets

    off = circle_offsets(r)
    if arc < 1.0:
        angle = torch.atan2(off[:, 0].double(), off[:, 1].double())
        keep = torch.remainder(angle - start, 2 * math.pi) < arc * 2 * math.pi
        off = off[keep]
    yy, xx = off[:, 0] + y, off[:, 1] + x
    inside = (yy >= 0) & (yy < edges.shape[0]) & (xx >= 0) & (xx < edges.shape[1])
    edges[yy[inside], xx[inside]] = True


def _draw_line(edges: Tensor, rho: float, theta: float) -> None:
    height, width = edges.shape
    c, s = math.cos(theta), math.sin(theta)
    if abs(s) >= abs(c):  # mostly horizontal: one pixel per column
        xs = torch.arange(width, dtype=torch.float64)
        ys = torch.round((rho - xs * c) / s)
    else:
        ys = torch.arange(height, dtype=torch.float64)
        xs = torch.round((rho - ys * s) / c)
    inside = (xs >= 0) & (xs < width) & (ys >= 0) & (ys < height)
    edges[ys[inside].long(), xs[inside].long()] = True


def synthetic_edges(
    height: int,
    width: int,
    n_circles: int = 3,
    radii: Tuple[int, int] = (10, 30),
    n_lines: int = 0,
    noise: float = 0.0,
    arc: float = 1.0,
    min_separation: float = 0.0,
    inside: bool = True,
    seed: int = 0,
) -> EdgeScene:
    """An edge image with known circles and lines, drawn as the accumulators rasterize them.

    Circles are skimage.draw.circle_perimeter circles with integer centres and radii in
    ``radii`` (inclusive), so a complete circle scores exactly its offset count at its centre.
    ``arc`` < 1 keeps one random arc of that share of each circle (broken circles); ``inside``
    keeps whole circles in the image (else centres anywhere: circles cross the border);
    ``min_separation`` spaces the centres at least that far apart (0: circles may overlap).
    Lines are x cos(theta) + y sin(theta) = rho with theta on the default 180-angle grid and
    integer rho, one pixel per column (or row, for steep lines). ``noise`` is the share of pixels
    turned on at random. Seeded, torch only, on the CPU.
    """
    g = torch.Generator().manual_seed(seed)
    edges = torch.zeros(height, width, dtype=torch.bool)
    circles: List[List[float]] = []
    attempts = 0
    while len(circles) < n_circles and attempts < 1000:
        attempts += 1
        r = int(torch.randint(radii[0], radii[1] + 1, (1,), generator=g))
        lo = r if inside else 0
        if width - lo <= lo or height - lo <= lo:
            continue
        x = int(torch.randint(lo, width - lo, (1,), generator=g))
        y = int(torch.randint(lo, height - lo, (1,), generator=g))
        if any(math.hypot(x - cx, y - cy) < min_separation for cx, cy, _ in circles):
            continue
        start = float(torch.rand(1, generator=g)) * 2 * math.pi
        _draw_circle(edges, x, y, r, arc, start)
        circles.append([float(x), float(y), float(r)])
    angles = line_angles(180)
    lines: List[List[float]] = []
    diagonal = math.hypot(height, width)
    for _ in range(n_lines):
        j = int(torch.randint(0, 180, (1,), generator=g))
        # a rho whose line crosses the image: the projection of a random pixel
        px = float(torch.randint(0, max(width, 1), (1,), generator=g))
        py = float(torch.randint(0, max(height, 1), (1,), generator=g))
        rho = float(round(px * math.cos(angles[j]) + py * math.sin(angles[j])))
        rho = max(-diagonal, min(diagonal, rho))
        _draw_line(edges, rho, angles[j])
        lines.append([rho, angles[j]])
    if noise > 0:
        edges |= torch.rand(height, width, generator=g) < noise
    return EdgeScene(
        edges,
        torch.tensor(circles, dtype=torch.float32).reshape(-1, 3),
        torch.tensor(lines, dtype=torch.float32).reshape(-1, 2),
    )
