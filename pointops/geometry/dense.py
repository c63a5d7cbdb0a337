"""Brute-force neighbour search in plain torch, for what the knn and ball_query kernels do not take:
points of any dimension D (features; the peers pad 2-D points to 3 instead) and pytorch3d's L1
norm, which the peers' call sites (:mod:`pointops.compat.pyg`, :mod:`pointops.compat.pytorch3d`)
need. The same rules as the knn op: squared L2 (or L1) distances summed dimension by dimension,
each step rounded on its own, in float32 (float64 for float64 inputs); a stable sort, so equal
distances go to the lowest index; NaN/Inf rows and rows past the lengths are never neighbours;
padding -1 / +inf. The distances are differentiable through torch's autograd."""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .._checks import check_int, check_real, distance_dtype


def _valid_rows(x: Tensor, lengths: Optional[Tensor]) -> Tensor:
    rows = torch.arange(x.shape[1], device=x.device)
    valid = torch.isfinite(x).all(-1)
    if lengths is not None:
        valid = valid & (rows.unsqueeze(0) < lengths.clamp(0, x.shape[1]).unsqueeze(1))
    return valid


def _sum_in_order(terms: Tensor) -> Tensor:
    """terms (..., D) summed over the last axis one coordinate at a time, in order (each add
    rounded on its own, as the kernels add (dx dx + dy dy) + dz dz); D = 0 gives zeros."""
    if terms.shape[-1] == 0:
        return terms.sum(-1)
    d = terms[..., 0]
    for c in range(1, terms.shape[-1]):
        d = d + terms[..., c]
    return d


def knn_dense(
    queries: Tensor,
    points: Tensor,
    k: int,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
    norm: int = 2,
) -> Tuple[Tensor, Tensor]:
    """(B, M, D) queries into (B, N, D) points -> (indices (B, M, k) int64, distances (B, M, k)):
    the k nearest by squared L2 distance (norm=2) or L1 distance (norm=1), ascending."""
    k = check_int(k, "k")
    dtype = distance_dtype(points)
    q, p = queries.to(dtype), points.to(dtype)
    batch, m, dims = q.shape
    n = p.shape[1]
    valid_p = _valid_rows(p, lengths)
    valid_q = _valid_rows(q, query_lengths)
    chunk = max(1, 16777216 // max(1, batch * n * max(dims, 1)))  # (B, chunk, N, D) blocks of 2^24
    kept = min(k, n)
    index_parts, distance_parts = [], []
    for start in range(0, m, chunk):
        diff = q[:, start : start + chunk, None, :] - p[:, None, :, :]  # (B, c, N, D)
        d = _sum_in_order(diff * diff if norm == 2 else diff.abs())
        d = torch.where(valid_p.unsqueeze(1), d, torch.full_like(d, float("nan")))
        values, order = torch.sort(d, dim=2, stable=True)  # NaN (absent) sorts last
        index_parts.append(order[..., :kept])
        distance_parts.append(values[..., :kept])
    if m == 0 or len(index_parts) == 0:
        order = torch.zeros((batch, m, kept), dtype=torch.int64, device=q.device)
        values = torch.zeros((batch, m, kept), dtype=dtype, device=q.device)
    else:
        order, values = torch.cat(index_parts, 1), torch.cat(distance_parts, 1)
    if kept < k:
        order = torch.cat([order, order.new_full((batch, m, k - kept), -1)], 2)
        values = torch.cat([values, values.new_full((batch, m, k - kept), float("nan"))], 2)
    found = ~torch.isnan(values) & valid_q.unsqueeze(2)
    indices = torch.where(found, order, torch.full_like(order, -1))
    distances = torch.where(found, values, torch.full_like(values, float("inf")))
    return indices, distances


def radius_dense(
    queries: Tensor,
    points: Tensor,
    radius: float,
    k: int,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
) -> Tensor:
    """ball_query's rule for points of any dimension: (B, M, k) int64 indices of the first k points
    (by index) whose squared distance is < radius^2 (radius rounded to the compute type and
    squared there), -1 padded."""
    radius = check_real(radius, "radius")
    k = check_int(k, "k")
    dtype = distance_dtype(points)
    q, p = queries.to(dtype), points.to(dtype)
    batch, m, dims = q.shape
    n = p.shape[1]
    limit = torch.tensor(radius, dtype=dtype, device=p.device)
    limit = limit * limit
    valid_p = _valid_rows(p, lengths)
    valid_q = _valid_rows(q, query_lengths)
    chunk = max(1, 16777216 // max(1, batch * n * max(dims, 1)))  # (B, chunk, N, D) blocks of 2^24
    kept = min(k, n)
    rank = torch.arange(n, device=p.device)
    parts = []
    for start in range(0, m, chunk):
        diff = q[:, start : start + chunk, None, :] - p[:, None, :, :]
        d = _sum_in_order(diff * diff)
        hit = (d < limit) & valid_p.unsqueeze(1) & valid_q[:, start : start + chunk].unsqueeze(2)
        order = torch.where(hit, rank, torch.full_like(rank, n))
        parts.append(torch.sort(order, dim=2).values[..., :kept])
    if m == 0 or len(parts) == 0:
        first = torch.zeros((batch, m, kept), dtype=torch.int64, device=p.device)
    else:
        first = torch.cat(parts, 1)
    if kept < k:
        first = torch.cat([first, first.new_full((batch, m, k - kept), n)], 2)
    return torch.where(first < n, first, torch.full_like(first, -1))
