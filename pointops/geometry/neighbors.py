"""Neighbourhoods: k nearest neighbours (wraps csrc/geometry/knn*).

Rules shared by CPU and CUDA, bit for bit, whichever search strategy runs (brute force or a
uniform grid): squared distances are ``(dx*dx + dy*dy) + dz*dz`` with every step rounded on its
own in float32 (float64 for float64 inputs); a row lists the k smallest (distance, index) pairs in
ascending order, so equal distances go to the lowest index; points with a NaN/Inf coordinate are
never neighbours; rows with fewer than k neighbours are padded with index -1 and distance +inf,
and queries past ``query_lengths`` or with a NaN/Inf coordinate get all -1 / +inf rows.
"""
from typing import NamedTuple, Optional

import torch
from torch import Tensor

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class KNN(NamedTuple):
    """Output of :func:`knn`: (B, M, k) indices into each cloud (int64, -1 = none) and squared
    distances (+inf = none), nearest first."""

    indices: Tensor
    distances: Tensor


def knn(
    queries: Tensor,
    points: Tensor,
    k: int,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
) -> KNN:
    """The k nearest points of every query, exact.

    Args:
        queries: (B, M, 3) float32/float64/float16/bfloat16.
        points: (B, N, 3) of the same dtype and device.
        k: neighbours per query (k > N pads with -1 / +inf).
        query_lengths: (B,) int64, the queries of cloud b are rows [0, query_lengths[b]); None = all M.
        lengths: (B,) int64, the points of cloud b are rows [0, lengths[b]); None = all N.

    Returns:
        :class:`KNN` of (B, M, k) int64 indices into ``points[b]`` and squared distances (float64 for
        float64 inputs, float32 otherwise), ascending, ties to the lowest index.
    """
    indices, distances = torch.ops.pointops.knn(queries, query_lengths, points, lengths, k)
    return KNN(indices, distances)


def knn_packed(queries: Tensor, query_offsets: Tensor, points: Tensor, offsets: Tensor, k: int) -> KNN:
    """:func:`knn` for packed clouds: cloud b is rows [offsets[b], offsets[b + 1]) of points (P, 3)
    and rows [query_offsets[b], query_offsets[b + 1]) of queries (Mq, 3). Offsets are (B + 1,) int64,
    clamped to [0, rows] and made non-decreasing by a running maximum. Returns (Mq, k) indices into
    the rows of ``points`` and squared distances; query rows outside every cloud get -1 / +inf."""
    indices, distances = torch.ops.pointops.knn_packed(queries, query_offsets, points, offsets, k)
    return KNN(indices, distances)


# ---- fake kernels (shapes and dtypes only) ----------------------------------------------------


def _distance_dtype(points: Tensor) -> torch.dtype:
    return torch.float64 if points.dtype == torch.float64 else torch.float32


def _check_coords(t: Tensor, name: str, dims: int, layout: str) -> None:
    torch._check(t.dim() == dims and t.shape[-1] == 3, lambda: f"{name} must have shape {layout}, got {tuple(t.shape)}")
    torch._check(t.dtype in _FLOATS, lambda: f"{name} must be float32, float64, float16 or bfloat16, got {t.dtype}")


def _check_pair(queries: Tensor, points: Tensor, dims: int) -> None:
    _check_coords(queries, "queries", dims, "(B, M, 3)" if dims == 3 else "(Mq, 3)")
    _check_coords(points, "points", dims, "(B, N, 3)" if dims == 3 else "(P, 3)")
    torch._check(queries.dtype == points.dtype, lambda: f"queries must have the dtype of points ({points.dtype}), got {queries.dtype}")
    if dims == 3:
        torch._check(queries.shape[0] == points.shape[0], lambda: "queries and points must have the same batch size B")


@torch.library.register_fake("pointops::knn")
def _knn_fake(queries, query_lengths, points, lengths, k):
    _check_pair(queries, points, 3)
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    shape = (queries.shape[0], queries.shape[1], k)
    return points.new_empty(shape, dtype=torch.int64), points.new_empty(shape, dtype=_distance_dtype(points))


@torch.library.register_fake("pointops::knn_packed")
def _knn_packed_fake(queries, query_offsets, points, offsets, k):
    _check_pair(queries, points, 2)
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    shape = (queries.shape[0], k)
    return points.new_empty(shape, dtype=torch.int64), points.new_empty(shape, dtype=_distance_dtype(points))
