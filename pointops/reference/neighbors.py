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
) -> Tuple[Tensor, Tensor]:
    """(indices (B, M, k) int64, distances (B, M, k)): a stable sort of every query's distances,
    absent points sorted last as NaN, then cut or padded to k with -1 / +inf."""
    b, m, _ = queries.shape
    n = points.shape[1]
    d = squared_distances(queries, points)
    valid_p = _valid_rows(points, lengths)
    d = torch.where(valid_p[:, None, :], d, torch.full_like(d, float("nan")))
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
