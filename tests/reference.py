"""Slow, obviously-correct references for pointops operators (pure Python / NumPy).

Arithmetic that the kernels do with fused multiply-adds is done here exactly (fractions) and
rounded once, so a reference equals the kernels bit for bit, not just to a tolerance.
"""
import math
from fractions import Fraction

import numpy as np
import torch


def _round_to_float32(value: Fraction) -> float:
    """value rounded to the nearest float32 (ties to even)."""
    with np.errstate(over="ignore"):
        guess = np.float32(float(value))  # within one float32 ulp of the answer
    if not np.isfinite(guess):
        return float(guess)  # beyond float32's range
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]

    def rank(c):
        error = abs(Fraction(float(c)) - value) if np.isfinite(c) else Fraction(10**400)
        odd = int(np.array(c, dtype=np.float32).view(np.uint32)) & 1
        return (error, odd)

    return float(min(candidates, key=rank))


def fma(a: float, b: float, c: float, float64: bool) -> float:
    """a * b + c with a single rounding, in float64 or float32 (inputs already in that type)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    return float(exact) if float64 else _round_to_float32(exact)


def _squared_distance(p, q, float64: bool) -> float:
    acc = 0.0
    for a, b in zip(p, q):
        diff = a - b if float64 else float(np.float32(a) - np.float32(b))
        acc = fma(diff, diff, acc, float64)
    return acc


def fps_one_cloud(cloud: np.ndarray, k: int, start: int, float64: bool):
    """Farthest point sampling of one cloud (n, D) by the rules in csrc/sampling/fps.h."""
    n = cloud.shape[0]
    pts = [[float(v) for v in row] for row in cloud]
    present = [all(math.isfinite(v) for v in row) for row in pts]
    min_dist = [math.inf if ok else None for ok in present]  # None: absent; "picked": picked
    picked = [False] * n
    indices, distances = [], []
    pick = start if 0 <= start < n and present[start] else next((i for i in range(n) if present[i]), -1)
    while len(indices) < k and pick >= 0:
        indices.append(pick)
        distances.append(min_dist[pick])
        picked[pick] = True
        best, best_i = -1.0, -1
        for i in range(n):
            if not present[i] or picked[i]:
                continue
            min_dist[i] = min(min_dist[i], _squared_distance(pts[i], pts[pick], float64))
            if min_dist[i] > best:  # strict: the lowest index wins ties
                best, best_i = min_dist[i], i
        pick = best_i
    while len(indices) < k:
        indices.append(-1)
        distances.append(-1.0)
    return indices, distances


def fps(points: torch.Tensor, k: int, lengths=None, start=None):
    """(B, N, D) padded clouds -> (indices (B, k) int64, distances (B, k))."""
    float64 = points.dtype == torch.float64
    compute = points.double() if float64 else points.float()
    batch, n = points.shape[0], points.shape[1]
    all_idx, all_dist = [], []
    for b in range(batch):
        length = n if lengths is None else min(max(int(lengths[b]), 0), n)
        first = 0 if start is None else int(start[b])
        idx, dist = fps_one_cloud(compute[b, :length].numpy(), k, first, float64)
        all_idx.append(idx)
        all_dist.append(dist)
    dist_dtype = torch.float64 if float64 else torch.float32
    return (
        torch.tensor(all_idx, dtype=torch.int64).reshape(batch, k),
        torch.tensor(all_dist, dtype=dist_dtype).reshape(batch, k),
    )


def voxel_grid_dims(voxel_size, pc_range):
    """Grid size per axis (x, y, z): round((max - min) / size) in float32, half to even."""
    dims = []
    for d in range(3):
        extent = np.float32(pc_range[d + 3]) - np.float32(pc_range[d])
        dims.append(int(np.rint(extent / np.float32(voxel_size[d]))))
    return dims


def _voxel_cell(xyz, lo, size, dims):
    """(x, y, z) cell of a point with floor((x - min) / size) in lo's dtype, or None if outside."""
    cell = []
    with np.errstate(all="ignore"):
        for d in range(3):
            f = np.floor((xyz[d] - lo[d]) / size[d])
            if not (f >= 0 and f < dims[d]):  # NaN fails too
                return None
            cell.append(int(f))
    return tuple(cell)


def voxelize(points: torch.Tensor, voxel_size, pc_range, max_points: int, max_voxels: int, lengths=None):
    """Hard voxelization with mmcv's deterministic semantics, one point at a time.

    Voxels take slots in order of their first point; a voxel keeps its first max_points points;
    voxels past max_voxels are dropped with their points. Cells are computed in float64 for
    float64 points and in float32 otherwise. Returns (voxels, coords (z, y, x), num_points,
    num_voxels, point_voxel) as in csrc/bev/voxelize.h.
    """
    batch, n, channels = points.shape
    dtype = np.float64 if points.dtype == torch.float64 else np.float32
    compute = points.to(torch.float64 if dtype == np.float64 else torch.float32).numpy()
    lo = np.array(pc_range[:3], dtype=dtype)
    size = np.array(voxel_size, dtype=dtype)
    dims = voxel_grid_dims(voxel_size, pc_range)
    voxels = torch.zeros(batch, max_voxels, max_points, channels, dtype=points.dtype)
    coords = torch.full((batch, max_voxels, 3), -1, dtype=torch.int32)
    num_points = torch.zeros(batch, max_voxels, dtype=torch.int32)
    num_voxels = torch.zeros(batch, dtype=torch.int32)
    point_voxel = torch.full((batch, n), -1, dtype=torch.int64)
    for b in range(batch):
        length = n if lengths is None else min(max(int(lengths[b]), 0), n)
        slot_of_cell = {}
        kept = 0
        for i in range(length):
            cell = _voxel_cell(compute[b, i, :3], lo, size, dims)
            if cell is None:
                continue
            if cell not in slot_of_cell:
                if kept < max_voxels:
                    slot_of_cell[cell] = kept
                    coords[b, kept] = torch.tensor([cell[2], cell[1], cell[0]], dtype=torch.int32)
                    kept += 1
                else:
                    slot_of_cell[cell] = -1
            slot = slot_of_cell[cell]
            if slot < 0:
                continue
            point_voxel[b, i] = slot
            stored = int(num_points[b, slot])
            if stored < max_points:
                voxels[b, slot, stored] = points[b, i]
                num_points[b, slot] = stored + 1
        num_voxels[b] = kept
    return voxels, coords, num_points, num_voxels, point_voxel
