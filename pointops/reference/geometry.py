"""Slow references of the geometry family's ops.

Neighbourhoods (kNN, ball query, three_nn, interpolation, grouping) and the OpenPCDet PointNet++
functions ``pointops.nn`` mirrors: every function forms the full (queries x points)
squared-distance matrix with one elementwise torch op per rounding step, ``(dx*dx + dy*dy) +
dz*dz``, so it rounds exactly like the kernels.

Downsampling, normals and registration: ``voxel_downsample`` and ``transform_points`` reproduce
the kernels to the bit (same cells, same order of float64 sums, same roundings).
``estimate_normals`` is float64 NumPy PCA (``eigh``) and ``icp`` is a float64 NumPy
registration (SVD for point to point, least squares for point to plane): the kernels agree with
them within float64 round-off of different summation orders, and the tests say how close.
"""

from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .._checks import distance_dtype


def squared_distances(queries: Tensor, points: Tensor) -> Tensor:
    """(B, M, N) squared distances of (B, M, 3) queries to (B, N, 3) points in the compute type."""
    dtype = distance_dtype(points)
    q = queries.to(dtype)
    p = points.to(dtype)
    dx = q[:, :, None, 0] - p[:, None, :, 0]
    dy = q[:, :, None, 1] - p[:, None, :, 1]
    dz = q[:, :, None, 2] - p[:, None, :, 2]
    return (dx * dx + dy * dy) + dz * dz


def _valid_rows(x: Tensor, lengths: Optional[Tensor]) -> Tensor:
    """(B, N) rows that take part: inside lengths (clamped to [0, N]) and finite."""
    n = x.shape[1]
    rows = torch.arange(n, device=x.device)
    valid = torch.isfinite(x.to(distance_dtype(x))).all(-1)
    if lengths is not None:
        valid = valid & (rows[None, :] < lengths.clamp(0, n)[:, None])
    return valid


def knn(
    queries: Tensor,
    points: Tensor,
    k: int,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
    max_distance: Optional[float] = None,
) -> Tuple[Tensor, Tensor]:
    """(indices (B, M, k) int64, distances (B, M, k)): a stable sort of every query's distances,
    absent points (and, with max_distance, those beyond it) sorted last as NaN, then cut or
    padded to k with -1 / +inf."""
    b, m, _ = queries.shape
    n = points.shape[1]
    d = squared_distances(queries, points)
    valid_p = _valid_rows(points, lengths)
    d = torch.where(valid_p[:, None, :], d, torch.full_like(d, float("nan")))
    if max_distance is not None:
        limit = torch.tensor(float(max_distance) * float(max_distance), dtype=torch.float64).to(d.dtype)
        d = torch.where(d <= limit, d, torch.full_like(d, float("nan")))
    values, order = torch.sort(d, dim=2, stable=True)  # NaN sorts after +inf
    values, order = values[..., :k], order[..., :k]
    if n < k:
        pad = k - n
        values = torch.cat([values, values.new_full((b, m, pad), float("nan"))], 2)
        order = torch.cat([order, order.new_full((b, m, pad), -1)], 2)
    found = ~torch.isnan(values) & _valid_rows(queries, query_lengths)[:, :, None]
    indices = torch.where(found, order, torch.full_like(order, -1))
    distances = torch.where(found, values, torch.full_like(values, float("inf")))
    return indices, distances


def knn_packed(
    queries: Tensor, query_offsets: Tensor, points: Tensor, offsets: Tensor, k: int
) -> Tuple[Tensor, Tensor]:
    """Packed kNN as a loop of padded single-cloud calls (offsets clamped, then running maximum)."""
    qoff = torch.cummax(query_offsets.clamp(0, queries.shape[0]), 0).values.tolist()
    poff = torch.cummax(offsets.clamp(0, points.shape[0]), 0).values.tolist()
    indices = torch.full((queries.shape[0], k), -1, dtype=torch.int64, device=queries.device)
    distances = torch.full((queries.shape[0], k), float("inf"), dtype=distance_dtype(points), device=queries.device)
    for b in range(len(poff) - 1):
        q = queries[qoff[b] : qoff[b + 1]][None]
        p = points[poff[b] : poff[b + 1]][None]
        idx, dist = knn(q, p, k)
        indices[qoff[b] : qoff[b + 1]] = torch.where(idx[0] >= 0, idx[0] + poff[b], idx[0])
        distances[qoff[b] : qoff[b + 1]] = dist[0]
    return indices, distances


def ball_query(
    queries: Tensor,
    points: Tensor,
    radius: float,
    k: int,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
    pad: str = "first",
    min_radius: float = 0.0,
) -> Tuple[Tensor, Tensor]:
    """(indices (B, M, k) int64, counts (B, M) int64): the k lowest point indices with squared
    distance d2 < radius^2 and (d2 >= min_radius^2 or d2 == 0) (radii rounded to the compute
    type, squared there), then the first hit repeated (pad="first") or -1 (pad="minus_one"); rows
    without a hit are all -1."""
    dtype = distance_dtype(points)
    n = points.shape[1]
    r = torch.tensor(radius, dtype=dtype)
    r_min = torch.tensor(min_radius, dtype=dtype)
    d2 = squared_distances(queries, points)
    hit = (d2 < r * r) & ((d2 >= r_min * r_min) | (d2 == 0))
    hit = hit & _valid_rows(points, lengths)[:, None, :] & _valid_rows(queries, query_lengths)[:, :, None]
    rows = torch.arange(n, device=points.device).expand_as(hit)
    keys = torch.sort(torch.where(hit, rows, torch.full_like(rows, n)), dim=2).values[..., :k]
    if n < k:
        keys = torch.cat([keys, keys.new_full(keys.shape[:2] + (k - n,), n)], 2)
    counts = hit.sum(2).clamp(max=k)
    found = keys < n
    first = torch.where(counts > 0, keys[..., 0] if k > 0 else counts, torch.full_like(counts, -1))
    fill = first[..., None].expand_as(keys) if pad == "first" else torch.full_like(keys, -1)
    return torch.where(found, keys, fill), counts


def ball_query_packed(
    queries: Tensor,
    query_offsets: Tensor,
    points: Tensor,
    offsets: Tensor,
    radius: float,
    k: int,
    pad: str = "first",
    min_radius: float = 0.0,
) -> Tuple[Tensor, Tensor]:
    """Packed ball query as a loop of padded single-cloud calls (offsets clamped, then running
    maximum); indices into the packed rows, rows outside every cloud -1 with count 0."""
    qoff = torch.cummax(query_offsets.clamp(0, queries.shape[0]), 0).values.tolist()
    poff = torch.cummax(offsets.clamp(0, points.shape[0]), 0).values.tolist()
    indices = torch.full((queries.shape[0], k), -1, dtype=torch.int64, device=queries.device)
    counts = torch.zeros(queries.shape[0], dtype=torch.int64, device=queries.device)
    for b in range(len(poff) - 1):
        q = queries[qoff[b] : qoff[b + 1]][None]
        p = points[poff[b] : poff[b + 1]][None]
        idx, cnt = ball_query(q, p, radius, k, pad=pad, min_radius=min_radius)
        indices[qoff[b] : qoff[b + 1]] = torch.where(idx[0] >= 0, idx[0] + poff[b], idx[0])
        counts[qoff[b] : qoff[b + 1]] = cnt[0]
    return indices, counts


def cube_query_packed(
    queries: Tensor, query_offsets: Tensor, points: Tensor, offsets: Tensor, distance: float, k: int, ball: bool = False
) -> Tuple[Tensor, Tensor]:
    """(indices (Mq, k) int64 into the packed rows, counts (Mq,) int64): per cloud (offsets clamped,
    then running maximum), the full (queries x points) differences q - p in the compute type; a hit
    has -distance <= d <= distance on every axis (ball: (dx*dx + dy*dy) + dz*dz <= distance^2, the
    distance rounded to the compute type and squared there), both ends finite; the k lowest hit
    rows, then -1; counts = every hit."""
    dtype = distance_dtype(points)
    d = torch.tensor(distance, dtype=dtype)
    qoff = torch.cummax(query_offsets.clamp(0, queries.shape[0]), 0).values.tolist()
    poff = torch.cummax(offsets.clamp(0, points.shape[0]), 0).values.tolist()
    indices = torch.full((queries.shape[0], k), -1, dtype=torch.int64, device=queries.device)
    counts = torch.zeros(queries.shape[0], dtype=torch.int64, device=queries.device)
    for b in range(len(poff) - 1):
        q = queries[qoff[b] : qoff[b + 1]].to(dtype)
        p = points[poff[b] : poff[b + 1]].to(dtype)
        diff = q[:, None, :] - p[None, :, :]
        if ball:
            hit = (diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1]) + diff[..., 2] * diff[..., 2] <= d * d
        else:
            hit = ((diff <= d) & (diff >= -d)).all(-1)
        hit = hit & torch.isfinite(q).all(-1)[:, None] & torch.isfinite(p).all(-1)[None, :]
        n = p.shape[0]
        rows = torch.arange(n, device=points.device).expand_as(hit)
        keys = torch.sort(torch.where(hit, rows, torch.full_like(rows, n)), dim=1).values[:, :k]
        keys = torch.cat([keys, keys.new_full((keys.shape[0], k - keys.shape[1]), n)], 1)
        indices[qoff[b] : qoff[b + 1]] = torch.where(keys < n, keys + poff[b], torch.full_like(keys, -1))
        counts[qoff[b] : qoff[b + 1]] = hit.sum(1)
    return indices, counts


def three_nn(queries: Tensor, points: Tensor, query_lengths=None, lengths=None) -> Tuple[Tensor, Tensor]:
    return knn(queries, points, 3, query_lengths, lengths)


def interpolate(features: Tensor, indices: Tensor, weights: Tensor) -> Tensor:
    """(B, M, C): sum over j of weights[..., j] * features[indices[..., j]] in order of j, one torch
    op per rounding step, indices outside [0, N) adding +0."""
    dtype = distance_dtype(features)
    f, w = features.to(dtype), weights.to(dtype)
    b, n, c = f.shape
    valid = (indices >= 0) & (indices < n)
    safe = torch.where(valid, indices, torch.zeros_like(indices))
    acc = f.new_zeros((b, indices.shape[1], c))
    for j in range(indices.shape[2]):
        if n > 0:
            g = torch.gather(f, 1, safe[:, :, j, None].expand(-1, -1, c))
            term = torch.where(valid[:, :, j, None], w[:, :, j, None] * g, torch.zeros_like(g))
        else:
            term = torch.zeros_like(acc)
        acc = acc + term
    return acc.to(features.dtype)


def group_points(features: Tensor, indices: Tensor) -> Tensor:
    """(B, *S, C): features[b, indices[b, ...]], zeros where the index is outside [0, N)."""
    b, n, c = features.shape
    out = features.new_zeros(tuple(indices.shape) + (c,))
    for i in range(b):
        idx = indices[i]
        valid = (idx >= 0) & (idx < n)
        out[i][valid] = features[i][idx[valid]]
    return out


# ---- OpenPCDet's pointnet2_batch functions, (B, C, N) feature layout, int32 indices -------------


def gather_operation(features: Tensor, idx: Tensor) -> Tensor:
    """(B, C, N), (B, npoint) int -> (B, C, npoint)."""
    return torch.stack([features[i][:, idx[i].long()] for i in range(features.shape[0])])


def grouping_operation(features: Tensor, idx: Tensor) -> Tensor:
    """(B, C, N), (B, npoint, nsample) int -> (B, C, npoint, nsample)."""
    return torch.stack([features[i][:, idx[i].long()] for i in range(features.shape[0])])


def openpcdet_ball_query(radius: float, nsample: int, xyz: Tensor, new_xyz: Tensor) -> Tensor:
    """(B, npoint, nsample) int32: as OpenPCDet's kernel, a loop over the points in index order per
    centre, the first hit written over the whole row, then each hit in turn; no hit leaves 0."""
    d = squared_distances(new_xyz, xyz)
    r = torch.tensor(radius, dtype=d.dtype)
    hit = d < r * r
    b, m, n = hit.shape
    out = torch.zeros(b, m, nsample, dtype=torch.int32)
    for i in range(b):
        for j in range(m):
            found = torch.nonzero(hit[i, j]).flatten()[:nsample].tolist()
            if found:
                out[i, j] = found[0]
                out[i, j, : len(found)] = torch.tensor(found, dtype=torch.int32)
    return out.to(xyz.device)


def openpcdet_three_nn(unknown: Tensor, known: Tensor) -> Tuple[Tensor, Tensor]:
    """(dist (B, n, 3) Euclidean, idx (B, n, 3) int32), ties to the lowest index."""
    idx, d2 = knn(unknown, known, 3)
    return torch.sqrt(d2.double()).to(d2.dtype), idx.int()  # rounded once: float32 sqrt may not be


def three_interpolate(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    """(B, C, M), (B, n, 3) int, (B, n, 3) -> (B, C, n): w0 f0 + w1 f1 + w2 f2 in plain torch."""
    out = 0
    for j in range(idx.shape[2]):
        out = out + weight[:, None, :, j] * grouping_operation(features, idx[:, :, j : j + 1])[..., 0]
    return out


def knn_cdist_topk(queries: Tensor, points: Tensor, k: int, chunk: int = 4096) -> Tuple[Tensor, Tensor]:
    """kNN the way a user writes it in plain PyTorch: ``torch.cdist`` and ``topk`` over chunks of
    queries (the bench's baseline; cdist's matmul form is not bit-exact, and ties are unordered)."""
    indices, distances = [], []
    for start in range(0, queries.shape[1], chunk):
        d = torch.cdist(queries[:, start : start + chunk], points)
        values, idx = torch.topk(d, k, dim=2, largest=False)
        indices.append(idx)
        distances.append(values * values)
    return torch.cat(indices, 1), torch.cat(distances, 1)


_CELL_LIMIT = 2.0**62


def _length(lengths: Optional[Tensor], b: int, n: int) -> int:
    return n if lengths is None else int(min(max(int(lengths[b]), 0), n))


def voxel_downsample(
    points: Tensor,
    voxel_size: List[float],
    lengths: Optional[Tensor] = None,
    features: Optional[Tensor] = None,
    point_range: Optional[List[float]] = None,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(centroids, mean_features, new_lengths, point_voxel) exactly as the voxel_downsample op."""
    points = points.cpu()
    features = None if features is None else features.cpu()
    batch, n, _ = points.shape
    acc = distance_dtype(points)
    pts = points.to(acc)
    origin = torch.tensor(point_range[:3] if point_range is not None else [0.0, 0.0, 0.0], dtype=torch.float64).to(acc)
    upper = torch.tensor(point_range[3:] if point_range is not None else [0.0, 0.0, 0.0], dtype=torch.float64).to(acc)
    size = torch.tensor(voxel_size, dtype=torch.float64).to(acc)
    f = 0 if features is None else features.shape[2]
    centroids = torch.zeros(batch, n, 3, dtype=points.dtype)
    mean_features = torch.zeros(batch, n, f, dtype=points.dtype if features is None else features.dtype)
    new_lengths = torch.zeros(batch, dtype=torch.int64)
    point_voxel = torch.full((batch, n), -1, dtype=torch.int64)
    for b in range(batch):
        m = _length(lengths, b, n)
        q = pts[b, :m]
        ok = torch.isfinite(q).all(-1)
        if point_range is not None:
            ok &= ((q >= origin) & (q < upper)).all(-1)
        cell = torch.floor((q - origin) / size)
        ok &= ((cell >= -_CELL_LIMIT) & (cell < _CELL_LIMIT)).all(-1)
        cells = torch.where(ok.unsqueeze(-1), cell, torch.zeros_like(cell)).to(torch.int64)
        if not bool(ok.any()):
            continue
        members = torch.nonzero(ok).flatten()  # increasing point index
        # Voxels in (z, y, x) order of the int64 cells, whatever their span: rows sort lexicographically.
        _, voxel = torch.unique(cells[members].flip(-1), dim=0, sorted=True, return_inverse=True)
        voxels = int(voxel.max()) + 1
        new_lengths[b] = voxels
        point_voxel[b, members] = voxel
        # Sum each voxel's points in increasing index: the t-th point of every voxel at step t.
        order = torch.argsort(voxel, stable=True)
        sorted_voxel = voxel[order]
        counts = torch.bincount(voxel, minlength=voxels)
        starts = torch.cumsum(counts, 0) - counts
        position = torch.arange(members.numel()) - starts[sorted_voxel]
        sums = torch.zeros(voxels, 3, dtype=torch.float64)
        feature_sums = torch.zeros(voxels, f, dtype=torch.float64)
        for t in range(int(counts.max())):
            at = position == t
            rows = members[order[at]]
            sums[sorted_voxel[at]] += points[b, rows].double()
            if features is not None:
                feature_sums[sorted_voxel[at]] += features[b, rows].double()
        centroids[b, :voxels] = (sums / counts.double().unsqueeze(-1)).to(points.dtype)
        if features is not None:
            mean_features[b, :voxels] = (feature_sums / counts.double().unsqueeze(-1)).to(features.dtype)
    return centroids, mean_features, new_lengths, point_voxel


def estimate_normals(
    points: Tensor,
    neighbors: Tensor,
    lengths: Optional[Tensor] = None,
    viewpoints: Optional[Tensor] = None,
    orientation: int = 1,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 NumPy PCA normals: (normals (B, N, 3), curvature (B, N), determined (B, N) bool).

    The same neighbourhood, degenerate and orientation rules as the op; ``determined`` is False
    where the op's normal is 0 (fewer than 3 distinct points, a line)."""
    pts = points.detach().cpu().double().numpy()
    nbr = neighbors.cpu().numpy()
    batch, n, _ = pts.shape
    views = np.zeros((batch, 3)) if viewpoints is None else viewpoints.detach().cpu().double().numpy()
    normals = np.zeros((batch, n, 3))
    curvature = np.zeros((batch, n))
    determined = np.zeros((batch, n), dtype=bool)
    for b in range(batch):
        m = _length(lengths, b, n)
        for i in range(m):
            if not np.isfinite(pts[b, i]).all():
                continue
            idx = [j for j in nbr[b, i] if 0 <= j < m and np.isfinite(pts[b, j]).all()]
            if not idx:
                continue
            q = pts[b, idx]
            c = q - q.mean(0)
            cov = c.T @ c / len(idx)
            values, vectors = np.linalg.eigh(cov)
            values = np.clip(values, 0.0, None)
            total = values.sum()
            curvature[b, i] = values[0] / total if total > 0 else 0.0
            if not (values[2] > 0 and values[1] > 1e-12 * values[2]):
                continue
            normal = vectors[:, 0] / np.linalg.norm(vectors[:, 0])
            big = int(np.argmax(np.abs(normal)))
            flip = normal[big] < 0
            if orientation != 0:
                facing = normal @ (views[b] - pts[b, i])
                if facing != 0:
                    flip = facing < 0 if orientation == 1 else facing > 0
            normals[b, i] = -normal if flip else normal
            determined[b, i] = True
    return normals, curvature, determined


def transform_points(points: Tensor, poses: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """R p + t per pose, bit for bit as the op: float64 products and sums rounded one at a time,
    ((r0 x + r1 y) + r2 z) + t, then one rounding to float32 (float64 for float64 points)."""
    out_dtype = distance_dtype(points)
    p = points.double().unsqueeze(1)  # (B, 1, N, 3)
    pose = poses.double()
    rows = []
    for i in range(3):
        r = pose[:, :, i, :3].unsqueeze(2)  # (B, H, 1, 3)
        value = r[..., 0] * p[..., 0] + r[..., 1] * p[..., 1]
        value = value + r[..., 2] * p[..., 2]
        rows.append(value + pose[:, :, i, 3].unsqueeze(2))
    moved = torch.stack(rows, -1)
    n = points.shape[1]
    if lengths is not None:
        inside = torch.arange(n, device=points.device) < lengths.clamp(0, n).unsqueeze(1)
        moved = torch.where(inside.view(points.shape[0], 1, n, 1), moved, torch.zeros_like(moved))
    return moved.to(out_dtype)


def nearest_neighbors(
    queries: Tensor, points: Tensor, k: int, query_lengths: Optional[Tensor] = None, lengths: Optional[Tensor] = None
) -> Tensor:
    """Brute-force kNN indices (B, M, k) int64: squared distances (dx*dx + dy*dy) + dz*dz in the
    points' precision, ascending, ties to the lowest index, -1 padding; NaN distances never match."""
    batch, m, _ = queries.shape
    n = points.shape[1]
    out = torch.full((batch, m, k), -1, dtype=torch.int64)
    for b in range(batch):
        mq = _length(query_lengths, b, m)
        mp = _length(lengths, b, n)
        if mq == 0 or mp == 0:
            continue
        q = queries[b, :mq].cpu()
        p = points[b, :mp].cpu()
        d2 = None
        for axis in range(3):  # (dx*dx + dy*dy) + dz*dz, each step rounded on its own
            d = q[:, axis : axis + 1] - p[:, axis].unsqueeze(0)
            d2 = d * d if d2 is None else d2 + d * d
        d2 = torch.nan_to_num(d2, nan=float("inf"))
        if k == 1:  # argmin returns the first of equal minima: the lowest index
            order = torch.argmin(d2, dim=1, keepdim=True)
        else:
            order = torch.argsort(d2, dim=1, stable=True)[:, :k]
        keep = torch.gather(d2, 1, order) < float("inf")
        out[b, :mq, : order.shape[1]] = torch.where(keep, order, torch.full_like(order, -1))
    return out


def _point_increment(pairs_m: np.ndarray, pairs_q: np.ndarray) -> np.ndarray:
    """The 4x4 point-to-point increment from 3 or more inlier pairs (float64, SVD)."""
    step = np.eye(4)
    mm, qm = pairs_m.mean(0), pairs_q.mean(0)
    h = (pairs_m - mm).T @ (pairs_q - qm)
    u, _, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(vt.T @ u.T))
    r = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    step[:3, :3] = r
    step[:3, 3] = qm - r @ mm
    return step


def _quaternion_step(w: np.ndarray) -> np.ndarray:
    """The op's rotation of a linearised solution w: the unit quaternion (1, w / 2) / |.|."""
    q = np.concatenate([[1.0], 0.5 * w])
    q /= np.linalg.norm(q)
    qw, a, b, c = q
    return np.array(
        [
            [1 - 2 * (b * b + c * c), 2 * (a * b - qw * c), 2 * (a * c + qw * b)],
            [2 * (a * b + qw * c), 1 - 2 * (a * a + c * c), 2 * (b * c - qw * a)],
            [2 * (a * c - qw * b), 2 * (b * c + qw * a), 1 - 2 * (a * a + b * b)],
        ]
    )


def _chord(rotation: np.ndarray) -> float:
    """2 sin(angle / 2) of a rotation matrix (the op's measure of a step's turn)."""
    cos = np.clip((np.trace(rotation) - 1) / 2, -1.0, 1.0)
    return float(2 * np.sin(np.arccos(cos) / 2))


def icp(
    sources: Tensor,
    targets: Tensor,
    init_poses: Tensor,
    max_correspondence_distance: float,
    iterations: int,
    target_normals: Optional[Tensor] = None,
    source_normals: Optional[Tensor] = None,
    max_normal_angle: Optional[float] = None,
    viewpoint: Optional[List[float]] = None,
    centered: bool = False,
    max_step_angle: Optional[float] = None,
    max_step_translation: Optional[float] = None,
    point_to_plane: Optional[bool] = None,
):
    """Float64 NumPy ICP (brute-force nearest neighbours in float64), the icp op's rules:
    final poses (B, H, 4, 4), rmse and inlier fraction at the final poses, and whether each
    hypothesis stopped. A source takes part when it faces ``viewpoint`` under the pose, pairs
    with its nearest target, and is an inlier within the distance and, with
    ``max_normal_angle``, the normals' angle. Point to plane solves its least squares about the
    origin, or with ``centered`` about the inliers' centroid (the step's translation then being
    the centroid's motion); a step with too few inliers or beyond the step bounds stops the
    hypothesis where it is. Non-finite poses come back as given. ``point_to_plane`` defaults to
    whether ``target_normals`` are given."""
    plane = target_normals is not None if point_to_plane is None else point_to_plane
    poses = init_poses.detach().cpu().double().numpy().copy()
    src = sources.detach().cpu().double().numpy()
    tgt = targets.detach().cpu().double().numpy()
    tn = None if target_normals is None else target_normals.detach().cpu().double().numpy()
    sn = None if source_normals is None else source_normals.detach().cpu().double().numpy()
    batch, hyps = poses.shape[:2]
    rmse = np.zeros((batch, hyps))
    fraction = np.zeros((batch, hyps))
    stopped = np.zeros((batch, hyps), dtype=bool)
    max_d2 = max_correspondence_distance**2
    cosine = None if max_normal_angle is None else np.cos(max_normal_angle)
    for b in range(batch):
        s = src[b]
        finite = np.isfinite(s).all(1)
        for h in range(hyps):
            pose = poses[b, h]
            if not np.isfinite(pose[:3]).all():
                continue
            pose[3] = [0.0, 0.0, 0.0, 1.0]
            for step in range(iterations + 1):
                update = step < iterations
                if update and stopped[b, h]:
                    continue
                moved = s @ pose[:3, :3].T + pose[:3, 3]
                ok = finite.copy()
                if sn is not None:
                    turned = sn[b] @ pose[:3, :3].T
                if viewpoint is not None:
                    ok &= ((moved - np.asarray(viewpoint)) * turned).sum(1) < 0
                if tgt.shape[1]:
                    d2 = ((moved[:, None, :] - tgt[b][None]) ** 2).sum(-1)
                    d2 = np.where(np.isfinite(d2), d2, np.inf)
                    j = d2.argmin(1)
                    best = d2[np.arange(len(j)), j]
                else:
                    j, best = np.zeros(len(s), dtype=np.int64), np.full(len(s), np.inf)
                ok &= best <= max_d2
                if cosine is not None:
                    a, c = turned, tn[b][j]
                    scale = np.sqrt((a * a).sum(1) * (c * c).sum(1))
                    ok &= (scale > 0) & ((a * c).sum(1) >= cosine * scale)
                inliers = int(ok.sum())
                if not update:
                    rmse[b, h] = np.sqrt(best[ok].sum() / inliers) if inliers else 0.0
                    fraction[b, h] = inliers / finite.sum() if finite.sum() else 0.0
                    continue
                m, q = moved[ok], tgt[b][j[ok]] if inliers else np.zeros((0, 3))
                increment = np.eye(4)
                if not plane:  # Horn: about the centroids already
                    if inliers < 3:
                        stopped[b, h] = True
                        continue
                    increment = _point_increment(m, q)
                    shift = np.linalg.norm(q.mean(0) - m.mean(0)) if centered else np.linalg.norm(increment[:3, 3])
                    angle = _chord(increment[:3, :3])
                else:
                    if inliers < 6:
                        stopped[b, h] = True
                        continue
                    n = tn[b][j[ok]]
                    n = np.where(np.isfinite(n), n, 0.0)
                    centre = m.mean(0) if centered else np.zeros(3)
                    jac = np.concatenate([np.cross(m - centre, n), n], 1)
                    res = ((m - q) * n).sum(1)
                    x = np.linalg.lstsq(jac, -res, rcond=1e-10)[0]
                    rot = _quaternion_step(x[:3])
                    increment[:3, :3] = rot
                    increment[:3, 3] = centre + x[3:] - rot @ centre
                    shift = np.linalg.norm(x[3:])
                    angle = _chord(rot)
                if max_step_angle is not None and angle > 2 * np.sin(min(max_step_angle, np.pi) / 2):
                    stopped[b, h] = True
                    continue
                if max_step_translation is not None and shift > max_step_translation:
                    stopped[b, h] = True
                    continue
                pose[:] = increment @ pose
    return poses, rmse, fraction, stopped
