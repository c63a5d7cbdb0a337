"""Exact pure-PyTorch definitions of the 2D Hough ops (csrc/hough/{edges,circles,lines}.h).

Each function loops over images and radii / angles with vectorized torch inside: slow, plain and
exact (integer votes, fixed-point weights summed in int64, the lines' float64 rounding written
out). ``hough_circles`` / ``hough_lines`` here are also the bench's plain-PyTorch baselines.
"""
import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor


def circle_offsets(radius: int) -> Tensor:
    """(n, 2) int64 (dy, dx): skimage.draw.circle_perimeter(0, 0, radius), repeats included."""
    rows: List[int] = []
    cols: List[int] = []
    c, r, d = 0, radius, 3 - 2 * radius
    while r >= c:
        rows += [r, -r, r, -r, c, -c, c, -c]
        cols += [c, c, -c, -c, r, r, -r, -r]
        if d < 0:
            d += 4 * c + 6
        else:
            d += 4 * (c - r) + 10
            r -= 1
        c += 1
    return torch.tensor([rows, cols], dtype=torch.int64).reshape(2, -1).T


def edge_points(edges: Tensor, capacity: int = -1) -> Tuple[Tensor, Tensor]:
    batch, height, width = edges.shape
    cap = height * width if capacity < 0 else capacity
    points = torch.full((batch, cap, 2), -1, dtype=torch.int32)
    lengths = torch.zeros(batch, dtype=torch.int64)
    for b in range(batch):
        yx = torch.nonzero(edges[b].cpu() != 0)[:cap]  # row-major, as numpy.nonzero
        points[b, : len(yx)] = yx.flip(1).to(torch.int32)
        lengths[b] = len(yx)
    return points, lengths


def weight_to_fixed(weights: Tensor) -> Tensor:
    """round_half_even(clamp(w, -2^24, 2^24) * 2^16) as int64, 0 for NaN/Inf (edges.h)."""
    w = weights.to(torch.float32)
    q = torch.round(w.clamp(-(2.0**24), 2.0**24) * 65536.0)
    return torch.where(torch.isfinite(w), q, torch.zeros_like(q)).to(torch.int64)


def _valid_points(points: Tensor, lengths: Optional[Tensor], b: int, height: int, width: int) -> Tensor:
    n = points.shape[1]
    length = n if lengths is None else int(min(max(int(lengths[b]), 0), n))
    p = points[b, :length].to(torch.int64).cpu()
    inside = (p[:, 0] >= 0) & (p[:, 0] < width) & (p[:, 1] >= 0) & (p[:, 1] < height)
    index = torch.arange(length)[inside]
    return index


def hough_circles(
    points: Tensor,
    lengths: Optional[Tensor],
    weights: Optional[Tensor],
    gradients: Optional[Tensor],
    height: int,
    width: int,
    radii: List[int],
    max_angle: float = 0.0,
) -> Tensor:
    batch = points.shape[0]
    acc = torch.zeros(batch, len(radii), height * width, dtype=torch.int64)
    tan_angle = torch.tensor(math.tan(max_angle), dtype=torch.float32)
    for b in range(batch):
        index = _valid_points(points, lengths, b, height, width)
        p = points[b].to(torch.int64).cpu()[index]
        votes = torch.ones(len(index), dtype=torch.int64) if weights is None else weight_to_fixed(weights[b].cpu()[index])
        if gradients is not None:
            g = gradients[b].cpu().to(torch.float32)[index]
            usable = torch.isfinite(g).all(1) & (g != 0).any(1)
        for i, r in enumerate(radii):
            off = circle_offsets(r)  # (n, 2) dy, dx
            yc = p[:, 1:2] + off[:, 0]
            xc = p[:, 0:1] + off[:, 1]
            keep = (yc >= 0) & (yc < height) & (xc >= 0) & (xc < width)
            if gradients is not None:
                fx, fy = off[:, 1].to(torch.float32), off[:, 0].to(torch.float32)
                gx, gy = g[:, 0:1], g[:, 1:2]
                cross = fx * gy - fy * gx  # every product and difference rounded in float32
                dot = fx * gx + fy * gy
                keep &= (cross.abs() <= tan_angle * dot.abs()) & usable.unsqueeze(1)
            flat = (yc * width + xc)[keep]
            acc[b, i].index_add_(0, flat, votes.unsqueeze(1).expand_as(keep)[keep])
    acc = acc.reshape(batch, len(radii), height, width)
    return acc.to(torch.int32) if weights is None else acc.to(torch.float32) * (1.0 / 65536.0)


def hough_lines(
    points: Tensor,
    lengths: Optional[Tensor],
    weights: Optional[Tensor],
    height: int,
    width: int,
    theta: List[float],
) -> Tensor:
    batch = points.shape[0]
    offset = int(math.ceil(math.sqrt(float(height * height + width * width))))
    n_rho = 2 * offset + 1
    # cos / sin from the C library (Python's math), as the kernels' host tables
    c = torch.tensor([math.cos(t) for t in theta], dtype=torch.float64)
    s = torch.tensor([math.sin(t) for t in theta], dtype=torch.float64)
    acc = torch.zeros(batch, len(theta), n_rho, dtype=torch.int64)
    for b in range(batch):
        index = _valid_points(points, lengths, b, height, width)
        p = points[b].to(torch.int64).cpu()[index].to(torch.float64)
        votes = torch.ones(len(index), dtype=torch.int64) if weights is None else weight_to_fixed(weights[b].cpu()[index])
        rho = c.unsqueeze(1) * p[:, 0] + s.unsqueeze(1) * p[:, 1]  # (T, n): products, then the sum
        d = torch.where(rho > 0, rho + 0.5, rho - 0.5).trunc().to(torch.int64) + offset
        for j in range(len(theta)):
            acc[b, j].index_add_(0, d[j], votes)
    acc = acc.transpose(1, 2).contiguous()
    return acc.to(torch.int32) if weights is None else acc.to(torch.float32) * (1.0 / 65536.0)
