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


# ----------------------------------------------------------------------------------------------
# BEV rasterization and pillar scatter (rules in csrc/bev/rasterize.h, csrc/bev/pillar_scatter.h)

FEATURE_LIMIT = 2.0**30


def _sanitize(f: float) -> float:
    if math.isnan(f):
        return 0.0
    return min(max(f, -FEATURE_LIMIT), FEATURE_LIMIT)


def bev_grid(point_range, cell_size):
    """(W, H): cells along x and y."""
    nx = math.floor((point_range[3] - point_range[0]) / cell_size[0] + 0.5)
    ny = math.floor((point_range[4] - point_range[1]) / cell_size[1] + 0.5)
    return nx, ny


def bev_cells(points: torch.Tensor, point_range, cell_size, length=None):
    """Per-cell lists of (point index, z, raw feature row) of one cloud (N, C), keyed by (iy, ix);
    cell indices computed in the compute type exactly like the kernels (float32 unless float64)."""
    ctype = np.float64 if points.dtype == torch.float64 else np.float32
    pts = points.double().numpy() if points.dtype == torch.float64 else points.float().numpy()
    n = pts.shape[0] if length is None else min(max(int(length), 0), pts.shape[0])
    lo = [ctype(v) for v in point_range[:3]]
    hi = [ctype(v) for v in point_range[3:]]
    cell = [ctype(v) for v in cell_size]
    nx, ny = bev_grid(point_range, cell_size)
    cells = {}
    for i in range(n):
        x, y, z = (ctype(v) for v in pts[i, :3])
        if not all(lo[a] <= v < hi[a] for a, v in enumerate((x, y, z))):  # NaN fails too
            continue
        ix = int(np.floor(ctype(x - lo[0]) / cell[0]))
        iy = int(np.floor(ctype(y - lo[1]) / cell[1]))
        if ix >= nx or iy >= ny:
            continue
        cells.setdefault((iy, ix), []).append((i, z, pts[i]))
    return cells


def bev_rasterize(points: torch.Tensor, point_range, cell_size, channels, lengths=None, feature_column=3,
                  density_base=64.0, height_slices=0, seed_layout=False):
    """(B, N, C) -> (B, n_out, H, W) float32 (means in float64, rounded once), one Python loop."""
    ctype = np.float64 if points.dtype == torch.float64 else np.float32
    nx, ny = bev_grid(point_range, cell_size)
    z_lo = ctype(point_range[2])
    slice_height = ctype((point_range[5] - point_range[2]) / max(height_slices, 1))
    n_out = sum(height_slices if c == "height_slices" else 1 for c in channels)
    out = np.zeros((points.shape[0], n_out, ny, nx), dtype=np.float32)
    for b in range(points.shape[0]):
        length = None if lengths is None else lengths[b]
        for (iy, ix), members in bev_cells(points[b], point_range, cell_size, length).items():
            zs = [np.float32(z) for _, z, _ in members]
            feats = [_sanitize(float(ctype(row[feature_column]))) for _, _, row in members] \
                if any(c.endswith("_feature") for c in channels) else []
            top = max(range(len(members)), key=lambda k: (zs[k], -members[k][0]))
            c = 0
            for name in channels:
                if name == "height_slices":
                    for _, z, _ in members:
                        s = min(int(np.floor(ctype(z - z_lo) / slice_height)), height_slices - 1)
                        out[b, c + s, iy, ix] = 1.0
                    c += height_slices
                    continue
                count = len(members)
                value = {
                    "max_z": lambda: max(zs),
                    "min_z": lambda: min(zs),
                    "mean_z": lambda: sum(float(z) for _, z, _ in members) / count,
                    "count": lambda: count,
                    "density": lambda: min(1.0, math.log(count + 1) / math.log(density_base)),
                    "occupancy": lambda: 1.0,
                    "max_feature": lambda: max(np.float32(f) for f in feats),
                    "mean_feature": lambda: sum(feats) / count,
                    "top_feature": lambda: feats[top],
                }[name]()
                out[b, c, iy, ix] = np.float32(value)
                c += 1
    image = torch.from_numpy(out)
    return image.transpose(-1, -2).flip(-1, -2).contiguous() if seed_layout else image


def seed_height_image(cloud: np.ndarray, cloud_range, voxel_size):
    """Seed 004's C++ bev() loop, with its row/column off-by-one fixed (row = grid_x - 1 - x) and
    the grey value as floor((z - z_min) * (255 / (z_max - z_min))) in float32."""
    f32 = np.float32
    grid = [math.floor((cloud_range[3 + a] - cloud_range[a]) / voxel_size[a] + 0.5) for a in range(2)]
    out = np.zeros((grid[0], grid[1]), dtype=np.uint8)
    scale = f32(255.0 / (cloud_range[5] - cloud_range[2]))
    for p in cloud:
        x, y, z = (f32(v) for v in p[:3])
        if not (f32(cloud_range[0]) <= x < f32(cloud_range[3]) and f32(cloud_range[1]) <= y < f32(cloud_range[4])
                and f32(cloud_range[2]) <= z < f32(cloud_range[5])):
            continue
        ix = int(np.floor(f32(x - f32(cloud_range[0])) / f32(voxel_size[0])))
        iy = int(np.floor(f32(y - f32(cloud_range[1])) / f32(voxel_size[1])))
        if ix >= grid[0] or iy >= grid[1]:
            continue
        gray = min(int(np.floor(f32(z - f32(cloud_range[2])) * scale)), 255)
        row, col = grid[0] - 1 - ix, grid[1] - 1 - iy
        out[row, col] = max(out[row, col], gray)
    return out


def pillar_scatter(features: torch.Tensor, coords: torch.Tensor, num_voxels: torch.Tensor, height: int, width: int):
    """(B, P, F) pillars at (z, y, x) -> (B, F, height, width); the lowest pillar index wins a cell."""
    batch, pillars, channels = features.shape
    canvas = torch.zeros(batch, channels, height, width, dtype=features.dtype)
    for b in range(batch):
        taken = set()
        for p in range(min(max(int(num_voxels[b]), 0), pillars)):
            z, y, x = (int(v) for v in coords[b, p])
            if z != 0 or not (0 <= y < height and 0 <= x < width) or (y, x) in taken:
                continue
            taken.add((y, x))
            canvas[b, :, y, x] = features[b, p]
    return canvas
