"""Slow, obviously-correct references for pointops operators (pure Python / NumPy).

Arithmetic that the kernels do with fused multiply-adds is done here exactly (fractions) and
rounded once, so a reference equals the kernels bit for bit, not just to a tolerance.
"""
import itertools
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


# ---- Hough planes and peaks (csrc/hough/planes.h, peaks.h) ----

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
            table.append(tuple(float(np.float32(v)) for v in (
                math.sin(phi) * math.cos(theta), math.sin(phi) * math.sin(theta), math.cos(phi))))
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


# ---- Voxelization (csrc/bev/voxelize.h) ----

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
