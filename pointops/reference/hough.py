"""Slow, exact definitions of the Hough family's ops, and the plain-PyTorch baselines the bench times.

Planes, peaks, plane labels and refits: loops by the rules of csrc/hough/*.h with exact fused
arithmetic. The 2D circle and line accumulators (csrc/hough/{edges,circles,lines}.h): loops over
images and radii / angles with vectorized torch inside (integer votes, fixed-point weights summed
in int64, the lines' float64 rounding written out): ``hough_circles_points`` and
``hough_lines_points``, the oracles of the point-list ops of the same names.
"""

import itertools
import math
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from ._exact import fma


def rho_bins(rho_step: float, rho_max: float) -> int:
    return max(1, math.floor(2.0 * rho_max / rho_step + 0.5))


def plane_normal_table(n_phi: int, n_theta: int, ball: bool = False):
    """Unit normals in accumulator order: float64 trigonometry rounded once to float32."""
    table = []
    for i in range(n_phi):
        phi = (i + 0.5) * math.pi / n_phi
        ring = max(1, math.floor(n_theta * math.sin(phi) + 0.5)) if ball else n_theta
        for j in range(ring):
            theta = (j + 0.5) * math.pi / ring
            table.append(
                tuple(
                    float(np.float32(v))
                    for v in (math.sin(phi) * math.cos(theta), math.sin(phi) * math.sin(theta), math.cos(phi))
                )
            )
    return table


def plane_rho_bin(normal, point, rho_step: float, rho_max: float):
    """The rho bin of a float32 point for a float32 normal, or None (no vote)."""
    n_rho = rho_bins(rho_step, rho_max)
    scale = np.float32(n_rho / (2.0 * rho_max))
    nx, ny, nz = normal
    x, y, z = (float(np.float32(v) * scale) for v in point)  # the point in rho bins, float32
    if not all(math.isfinite(v) for v in (x, y, z)):
        return None
    half = n_rho // 2
    t = fma(nz, z, fma(ny, y, fma(nx, x, (n_rho % 2) / 2.0, False), False), False)
    b = math.floor(t) + half
    return b if 0 <= b < n_rho else None


def _grid_normals(n_phi: int, n_theta: int) -> torch.Tensor:
    """(n_phi, n_theta, 3) float64 bin-centre normals of the plane grid."""
    phi = (torch.arange(n_phi, dtype=torch.float64) + 0.5) * (math.pi / n_phi)
    theta = (torch.arange(n_theta, dtype=torch.float64) + 0.5) * (math.pi / n_theta)
    phi, theta = torch.meshgrid(phi, theta, indexing="ij")
    return torch.stack([phi.sin() * theta.cos(), phi.sin() * theta.sin(), phi.cos()], -1)


def hough_planes(points, n_phi, n_theta, rho_step, rho_max, lengths=None, weights=None, ball=False):
    """Loop reference of hough_planes / hough_planes_ball: (B, M, n_rho) as a NumPy array."""
    table = plane_normal_table(n_phi, n_theta, ball)
    n_rho = rho_bins(rho_step, rho_max)
    pts = points.float().numpy()
    w = None if weights is None else weights.float().numpy()
    batch, n = pts.shape[0], pts.shape[1]
    out = np.zeros((batch, len(table), n_rho), dtype=np.int32 if w is None else np.float32)
    for b in range(batch):
        length = n if lengths is None else min(max(int(lengths[b]), 0), n)
        for p in range(length):
            point = [float(v) for v in pts[b, p]]
            weight = np.float32(1.0) if w is None else w[b, p]
            if not (all(math.isfinite(v) for v in point) and np.isfinite(weight)):
                continue
            for m, normal in enumerate(table):
                r = plane_rho_bin(normal, point, rho_step, rho_max)
                if r is None:
                    continue
                if w is None:
                    out[b, m, r] += 1
                else:
                    out[b, m, r] = np.float32(out[b, m, r] + weight)  # float32, point order
    return out


def _seam_neighbour(shape, coord, offset):
    """The plane-grid neighbour by single half-turn steps (each one mirrors rho), or None."""
    n_phi, n_theta, n_rho = shape
    i, j, r = (c + o for c, o in zip(coord, offset))
    flips = 0
    while i < 0 or i >= n_phi:  # past a pole: n(phi +- pi, theta) = -n(phi, theta)
        i += n_phi if i < 0 else -n_phi
        flips += 1
    while j < 0 or j >= n_theta:  # past theta = 0 or pi: n(phi, theta +- pi) = -n(pi - phi, theta)
        j += n_theta if j < 0 else -n_theta
        i = n_phi - 1 - i
        flips += 1
    if flips % 2:
        r = n_rho - 1 - r
    return (i, j, r) if 0 <= r < n_rho else None


def hough_peaks(acc: torch.Tensor, radius, periodic, min_votes, k, plane_seam=False):
    """Brute-force NMS + top-k by the rules in csrc/hough/peaks.h."""
    a = acc.numpy()
    batch, shape = a.shape[0], a.shape[1:]
    ndim = len(shape)
    offsets = list(itertools.product(*[range(-r, r + 1) for r in radius]))
    votes = np.zeros((batch, k), dtype=a.dtype)
    indices = -np.ones((batch, k, ndim), dtype=np.int64)
    for b in range(batch):
        peaks = []
        for coord in itertools.product(*[range(s) for s in shape]):
            v = a[b][coord]
            if not (v > 0 and v >= min_votes):
                continue
            flat = int(np.ravel_multi_index(coord, shape))
            beaten = False
            for off in offsets:
                if plane_seam:
                    nb = _seam_neighbour(shape, coord, off)
                else:
                    nb = []
                    for d in range(ndim):
                        c = coord[d] + off[d]
                        if periodic[d]:
                            c %= shape[d]
                        elif not 0 <= c < shape[d]:
                            nb = None
                            break
                        nb.append(c)
                if nb is None:
                    continue
                nb_flat = int(np.ravel_multi_index(tuple(nb), shape))
                u = a[b][tuple(nb)]
                if nb_flat != flat and (u > v or (u == v and nb_flat < flat)):
                    beaten = True
                    break
            if not beaten:
                peaks.append((-float(v), flat, coord, v))
        peaks.sort(key=lambda t: (t[0], t[1]))
        for s, (_, _, coord, v) in enumerate(peaks[:k]):
            votes[b, s] = v
            indices[b, s] = coord
    return torch.from_numpy(votes), torch.from_numpy(indices)


def plane_labels(points: torch.Tensor, planes: torch.Tensor, threshold: float, lengths=None) -> torch.Tensor:
    """Loop reference of plane_labels: the first plane within threshold, by csrc/hough/plane_fit.h's
    float32 rounding (exact fma), else -1."""
    pts = points.float().numpy()
    pl = planes.float().numpy()
    limit = float(np.float32(threshold))
    batch, n = pts.shape[0], pts.shape[1]
    labels = np.full((batch, n), -1, dtype=np.int64)
    for b in range(batch):
        length = n if lengths is None else max(0, min(int(lengths[b]), n))
        for p in range(length):
            x, y, z = (float(v) for v in pts[b, p])
            if not all(math.isfinite(v) for v in (x, y, z)):
                continue
            for j, (nx, ny, nz, d) in enumerate(pl[b]):
                if not all(math.isfinite(float(v)) for v in (nx, ny, nz, d)):
                    continue
                rho = fma(float(nz), z, fma(float(ny), y, float(np.float32(nx) * np.float32(x)), False), False)
                if abs(float(np.float32(rho) - np.float32(d))) <= limit:
                    labels[b, p] = j
                    break
    return torch.from_numpy(labels)


def plane_refit(points: torch.Tensor, planes: torch.Tensor, threshold: float, lengths=None):
    """NumPy reference of plane_refit: float64 eigh of each plane's inlier covariance."""
    labels = plane_labels(points, planes, threshold, lengths).numpy()
    pts = points.float().double().numpy()
    out = planes.float().numpy().copy()
    counts = np.zeros(planes.shape[:2], dtype=np.int64)
    for b in range(planes.shape[0]):
        for j in range(planes.shape[1]):
            inliers = pts[b][labels[b] == j]
            counts[b, j] = len(inliers)
            if len(inliers) < 3:
                continue
            centroid = inliers.mean(0)
            values, vectors = np.linalg.eigh(np.cov((inliers - centroid).T, bias=True))
            if not values[1] > 1e-12 * values[2]:
                continue  # all on one line: the plane is undetermined
            normal = vectors[:, 0]
            if normal @ out[b, j, :3].astype(np.float64) < 0:
                normal = -normal
            out[b, j, :3] = normal
            out[b, j, 3] = normal @ centroid
    return torch.from_numpy(out), torch.from_numpy(counts)


def plane_suppress(planes: torch.Tensor, max_angle: float, max_offset: float) -> torch.Tensor:
    """Loop reference of plane_suppress (csrc/hough/plane_suppress.h): float32 dot products and
    offset differences, every step rounded alone, rows kept greedily in order."""
    pl = planes.float().numpy()
    min_cos = np.float32(math.cos(max_angle))
    limit = np.float32(max_offset)
    out = np.full(pl.shape, np.nan, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for b in range(pl.shape[0]):
            kept = []
            for j in range(pl.shape[1]):
                row = pl[b, j]
                keep = not np.isnan(row[3])
                for i in kept:
                    if not keep:
                        break
                    other = pl[b, i]
                    c = np.float32(np.float32(row[0] * other[0]) + np.float32(row[1] * other[1])) + np.float32(
                        row[2] * other[2]
                    )
                    d = row[3] - other[3] if c >= 0 else row[3] + other[3]
                    keep = not (abs(c) >= min_cos and abs(d) <= limit)
                if keep:
                    kept.append(j)
                    out[b, j] = row
    return torch.from_numpy(out)


def plane_detections(
    acc: torch.Tensor,
    n_phi: int,
    n_theta: int,
    rho_step: float,
    rho_max: float,
    k: int,
    radius: int = 1,
    min_votes: float = 1.0,
):
    """plane_detections by the loop hough_peaks above and the float64 bin centres of
    pointops.peaks_to_planes / ball_peaks_to_planes, rounded to float32."""
    from pointops.hough.planes import ball_peaks_to_planes, peaks_to_planes

    if acc.dim() == 4:
        votes, indices = hough_peaks(acc, [radius] * 3, [False] * 3, min_votes, k, plane_seam=True)
        normals, offsets = peaks_to_planes(indices, n_phi, n_theta, rho_step, rho_max)
    else:
        votes, indices = hough_peaks(acc, [0, radius], [False] * 2, min_votes, k)
        normals, offsets = ball_peaks_to_planes(indices, n_phi, n_theta, rho_step, rho_max)
    return torch.cat([normals, offsets.unsqueeze(-1)], -1).float(), votes.float()


# detect_planes as it was written in PyTorch on the plane ops before the pipeline became one op:
# the detect_planes op (csrc/hough/detect_planes.cpp) returns the same planes, votes and labels.


def _fit_in_bands(points, planes, threshold):
    for band in (3.0, 2.0, 1.0, 0.5):
        planes = torch.ops.pointops.plane_refit(points, None, planes, band * threshold)[0]
    return planes


def _suppress_duplicates(planes, max_angle_deg, max_offset):
    normal, offset = planes[..., :3], planes[..., 3]
    cos = (normal.unsqueeze(2) * normal.unsqueeze(1)).sum(-1)
    same_sign = (cos >= 0).to(planes.dtype) * 2 - 1
    close = (cos.abs() >= math.cos(math.radians(max_angle_deg))) & (
        (offset.unsqueeze(2) - same_sign * offset.unsqueeze(1)).abs() <= max_offset
    )
    keep = ~torch.isnan(offset)
    for j in range(1, planes.shape[1]):  # greedy in vote order: a kept stronger plane suppresses j
        earlier = keep[:, :j] & close[:, j, :j]
        keep[:, j] = keep[:, j] & ~earlier.any(1)
    return torch.where(keep.unsqueeze(-1), planes, torch.full_like(planes, math.nan))


def _compact(planes, votes, k):
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
    points,
    k,
    lengths,
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
    """The detect_planes pipeline in PyTorch on the plane ops (one op call per refit band, the
    duplicate suppression a Python loop, the bin-centre tables made per call); the op's arguments."""
    from pointops.hough.planes import (
        ball_peaks_to_planes,
        hough_peaks as peaks_op,
        hough_plane_peaks,
        hough_planes,
        hough_planes_ball,
        peaks_to_planes,
        plane_labels,
    )

    batch, n = points.shape[0], points.shape[1]
    pts = points[..., :3].float()
    limit = lengths.unsqueeze(1) if lengths is not None else torch.full((batch, 1), n, device=points.device)
    valid = (torch.arange(n, device=points.device).unsqueeze(0) < limit) & torch.isfinite(pts).all(-1)
    if k == 0:
        return (
            pts.new_zeros((batch, 0, 4)),
            pts.new_zeros((batch, 0)),
            torch.full((batch, n), -1, dtype=torch.int64, device=points.device),
        )
    pts = torch.where(valid.unsqueeze(-1), pts, torch.full_like(pts, math.nan))
    voters = pts
    bin_angle = 180.0 / min(n_phi, n_theta)
    planes = pts.new_zeros((batch, 0, 4))
    votes = pts.new_zeros((batch, 0))
    enough = min_inliers * valid.sum(1, keepdim=True).to(pts.dtype)
    rounds = min(iterations, max(k, 1))
    for r in range(rounds):
        take = k // rounds + (1 if r < k % rounds else 0)
        candidates = (4 if layout == "grid" else 16) * take
        candidates = max(take, min(candidates, 1024 - planes.shape[1]))
        if layout == "grid":
            acc = hough_planes(voters, rho_step, rho_max, n_phi=n_phi, n_theta=n_theta)
            peak_votes, idx = hough_plane_peaks(acc, candidates, [peak_radius] * 3, min_votes)
            normals, offsets = peaks_to_planes(idx, n_phi, n_theta, rho_step, rho_max)
        else:
            acc = hough_planes_ball(voters, rho_step, rho_max, n_phi=n_phi, n_theta=n_theta)
            peak_votes, idx = peaks_op(acc, [0, peak_radius], candidates, min_votes)
            normals, offsets = ball_peaks_to_planes(idx, n_phi, n_theta, rho_step, rho_max)
        found = torch.cat([normals, offsets.unsqueeze(-1)], -1).float()
        every = _suppress_duplicates(
            torch.cat([planes, found], 1), 2.0 * bin_angle, 2.0 * rho_step + distance_threshold
        )
        every = _fit_in_bands(pts, every, distance_threshold)
        every = _suppress_duplicates(every, 1.0, 2.0 * distance_threshold)
        support = torch.ops.pointops.plane_refit(pts, None, every, distance_threshold)[1]
        weak = (support.to(pts.dtype) < enough) | (support < 3)
        every = torch.where(weak.unsqueeze(-1), torch.full_like(every, math.nan), every)
        known = planes.shape[1]
        found, found_votes = _compact(every[:, known:], peak_votes.float(), take)
        planes, votes = torch.cat([every[:, :known], found], 1), torch.cat([votes, found_votes], 1)
        if r + 1 < rounds:
            on_plane = plane_labels(pts, planes, 2.0 * distance_threshold) >= 0
            voters = torch.where(on_plane.unsqueeze(-1), torch.full_like(pts, math.nan), voters)
    planes = _fit_in_bands(pts, planes, distance_threshold)
    planes = torch.where(planes[..., 3:] < 0, -planes, planes)
    return planes, votes, plane_labels(pts, planes, distance_threshold)


# ---- baselines: the plain-PyTorch way a user writes each op (timed by tools/bench.py) ----


def hough_planes_baseline(points, n_phi, n_theta, rho_step, rho_max, chunk=2048):
    """Plane votes in plain PyTorch: rho by matmul per chunk of points, one bincount per chunk
    (rejected votes go to a spare bin, so nothing syncs)."""
    n_rho = rho_bins(rho_step, rho_max)
    normals = _grid_normals(n_phi, n_theta).reshape(-1, 3).to(points)
    m = normals.shape[0]
    base = torch.arange(m, device=points.device) * n_rho
    acc = torch.zeros(m * n_rho + 1, dtype=torch.int64, device=points.device)
    step = 2 * rho_max / n_rho
    for start in range(0, points.shape[0], chunk):
        bins = torch.floor((points[start : start + chunk] @ normals.T + rho_max) / step).long()
        flat = torch.where((bins >= 0) & (bins < n_rho), base + bins, m * n_rho)
        acc += torch.bincount(flat.reshape(-1), minlength=m * n_rho + 1)
    return acc[:-1].reshape(n_phi, n_theta, n_rho)


def hough_peaks_baseline(acc, radius, k):
    """Max-pool NMS and topk, as a user writes it (no seam, ties not resolved)."""
    a = acc.float().unsqueeze(1)
    pooled = torch.nn.functional.max_pool3d(a, 2 * radius + 1, 1, radius)
    return torch.topk((a * (a == pooled)).flatten(1), k)


def plane_labels_baseline(points, planes, threshold):
    """plane_labels in plain PyTorch, as detect_planes did it before the op: (B, N, K) residuals
    and the first plane within the band, K where none is."""
    residual = (torch.einsum("bnd,bkd->bnk", points, planes[..., :3]) - planes[..., 3].unsqueeze(1)).abs()
    within = torch.cat([residual <= threshold, torch.ones_like(residual[..., :1], dtype=torch.bool)], -1)
    return within.to(torch.uint8).argmax(dim=2)


def plane_refit_baseline(points, planes, threshold):
    """plane_refit in plain PyTorch, as detect_planes did it before the op: the labels above,
    one-hot float64 moments and a batched eigh."""
    k = planes.shape[1]
    labels = plane_labels_baseline(points, planes, threshold)
    member = torch.nn.functional.one_hot(labels, k + 1)[..., :k].double()
    pts = points.double()
    count = member.sum(1)
    centroid = torch.einsum("bnk,bnd->bkd", member, pts) / count.clamp(min=1).unsqueeze(-1)
    centred = pts - torch.gather(centroid, 1, labels.clamp(max=k - 1).unsqueeze(-1).expand(-1, -1, 3))
    _, vectors = torch.linalg.eigh(torch.einsum("bnk,bnd,bne->bkde", member, centred, centred))
    normal = vectors[..., 0]
    normal = torch.where((normal * planes[..., :3].double()).sum(-1, keepdim=True) < 0, -normal, normal)
    refit = torch.cat([normal, (normal * centroid).sum(-1, keepdim=True)], -1).float()
    return torch.where((count >= 3).unsqueeze(-1), refit, planes), count.long()


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


def hough_circles_points(
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
        votes = (
            torch.ones(len(index), dtype=torch.int64) if weights is None else weight_to_fixed(weights[b].cpu()[index])
        )
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


def hough_lines_points(
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
        votes = (
            torch.ones(len(index), dtype=torch.int64) if weights is None else weight_to_fixed(weights[b].cpu()[index])
        )
        rho = c.unsqueeze(1) * p[:, 0] + s.unsqueeze(1) * p[:, 1]  # (T, n): products, then the sum
        d = torch.where(rho > 0, rho + 0.5, rho - 0.5).trunc().to(torch.int64) + offset
        for j in range(len(theta)):
            acc[b, j].index_add_(0, d[j], votes)
    acc = acc.transpose(1, 2).contiguous()
    return acc.to(torch.int32) if weights is None else acc.to(torch.float32) * (1.0 / 65536.0)
