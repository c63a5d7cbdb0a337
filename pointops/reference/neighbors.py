"""Slow, exact pure-PyTorch definitions of the neighbourhood ops (kNN, ball query, three_nn,
interpolation, grouping) and of the OpenPCDet PointNet++ functions ``pointops.nn`` mirrors.

Every function forms the full (queries x points) squared-distance matrix with one elementwise
torch op per rounding step, ``(dx*dx + dy*dy) + dz*dz``, so it rounds exactly like the kernels.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor


def _compute_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def squared_distances(queries: Tensor, points: Tensor) -> Tensor:
    """(B, M, N) squared distances of (B, M, 3) queries to (B, N, 3) points in the compute type."""
    dtype = _compute_dtype(points)
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
    valid = torch.isfinite(x.to(_compute_dtype(x))).all(-1)
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


def knn_packed(queries: Tensor, query_offsets: Tensor, points: Tensor, offsets: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """Packed kNN as a loop of padded single-cloud calls (offsets clamped, then running maximum)."""
    qoff = torch.cummax(query_offsets.clamp(0, queries.shape[0]), 0).values.tolist()
    poff = torch.cummax(offsets.clamp(0, points.shape[0]), 0).values.tolist()
    indices = torch.full((queries.shape[0], k), -1, dtype=torch.int64, device=queries.device)
    distances = torch.full((queries.shape[0], k), float("inf"), dtype=_compute_dtype(points), device=queries.device)
    for b in range(len(poff) - 1):
        q = queries[qoff[b]:qoff[b + 1]][None]
        p = points[poff[b]:poff[b + 1]][None]
        idx, dist = knn(q, p, k)
        indices[qoff[b]:qoff[b + 1]] = torch.where(idx[0] >= 0, idx[0] + poff[b], idx[0])
        distances[qoff[b]:qoff[b + 1]] = dist[0]
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
    dtype = _compute_dtype(points)
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


def ball_query_packed(queries: Tensor, query_offsets: Tensor, points: Tensor, offsets: Tensor, radius: float, k: int,
                      pad: str = "first", min_radius: float = 0.0) -> Tuple[Tensor, Tensor]:
    """Packed ball query as a loop of padded single-cloud calls (offsets clamped, then running
    maximum); indices into the packed rows, rows outside every cloud -1 with count 0."""
    qoff = torch.cummax(query_offsets.clamp(0, queries.shape[0]), 0).values.tolist()
    poff = torch.cummax(offsets.clamp(0, points.shape[0]), 0).values.tolist()
    indices = torch.full((queries.shape[0], k), -1, dtype=torch.int64, device=queries.device)
    counts = torch.zeros(queries.shape[0], dtype=torch.int64, device=queries.device)
    for b in range(len(poff) - 1):
        q = queries[qoff[b]:qoff[b + 1]][None]
        p = points[poff[b]:poff[b + 1]][None]
        idx, cnt = ball_query(q, p, radius, k, pad=pad, min_radius=min_radius)
        indices[qoff[b]:qoff[b + 1]] = torch.where(idx[0] >= 0, idx[0] + poff[b], idx[0])
        counts[qoff[b]:qoff[b + 1]] = cnt[0]
    return indices, counts


def three_nn(queries: Tensor, points: Tensor, query_lengths=None, lengths=None) -> Tuple[Tensor, Tensor]:
    return knn(queries, points, 3, query_lengths, lengths)


def interpolate(features: Tensor, indices: Tensor, weights: Tensor) -> Tensor:
    """(B, M, C): sum over j of weights[..., j] * features[indices[..., j]] in order of j, one torch
    op per rounding step, indices outside [0, N) adding +0."""
    dtype = _compute_dtype(features)
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
        out = out + weight[:, None, :, j] * grouping_operation(features, idx[:, :, j:j + 1])[..., 0]
    return out


def knn_cdist_topk(queries: Tensor, points: Tensor, k: int, chunk: int = 4096) -> Tuple[Tensor, Tensor]:
    """kNN the way a user writes it in plain PyTorch: ``torch.cdist`` and ``topk`` over chunks of
    queries (the bench's baseline; cdist's matmul form is not bit-exact, and ties are unordered)."""
    indices, distances = [], []
    for start in range(0, queries.shape[1], chunk):
        d = torch.cdist(queries[:, start:start + chunk], points)
        values, idx = torch.topk(d, k, dim=2, largest=False)
        indices.append(idx)
        distances.append(values * values)
    return torch.cat(indices, 1), torch.cat(distances, 1)
