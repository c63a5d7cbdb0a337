"""The cube query (wraps csrc/geometry/cube_query*): the first k points of each query's cloud, in
index order, within a cube (or a closed ball) around it, and how many there are in all. It is
PV-RCNN++'s vector-pool neighbourhood (``pointops.nn.stack``'s vector-pool functions run on it).

The same rules as the other neighbourhood searches (:mod:`pointops.geometry.neighbors`): CPU and
CUDA return identical rows, points with a NaN/Inf coordinate are never hits, and the indices have
no gradient.
"""

import math
from typing import NamedTuple

import torch
from torch import Tensor

from .._checks import check_tensor, in_common_dtype
from .neighbors import _check_neighbour_output, _check_offsets, _check_pair


class CubeQuery(NamedTuple):
    """Output of :func:`cube_query_packed`: (Mq, k) int64 rows of the packed points (hits
    ascending, then -1) and (Mq,) int64 counts of every hit, kept or not."""

    indices: Tensor
    counts: Tensor


def cube_query_packed(
    queries: Tensor,
    query_offsets: Tensor,
    points: Tensor,
    offsets: Tensor,
    distance: float,
    k: int,
    ball: bool = False,
) -> CubeQuery:
    """The first k points (in index order) of each query's cloud inside the cube of half-width
    ``distance`` around it: ``|q - p| <= distance`` on every axis, each difference rounded once in
    the compute type (float32, or float64 for float64 inputs; ``distance`` is rounded to it). With
    ``ball=True``, inside the closed ball instead: squared distance ``(dx*dx + dy*dy) + dz*dz <=
    distance^2`` (squared in the compute type; :func:`ball_query`'s ball is open, ``<``).

    Args:
        queries: (Mq, 3) float32/float64/float16/bfloat16 (the centres).
        query_offsets: (B + 1,) int64, the queries of cloud b are rows [query_offsets[b],
            query_offsets[b + 1]).
        points: (P, 3) on the same device (a different float dtype is promoted, as in :func:`knn`).
        offsets: (B + 1,) int64, the points of cloud b; both offsets are clamped to [0, rows] and
            made non-decreasing by a running maximum, as :func:`knn_packed`'s.
        distance: finite, >= 0: the cube's half-width (the ball's radius).
        k: the most hits kept per query, >= 0 (k = 0 counts only).

    Returns:
        :class:`CubeQuery`: indices (Mq, k) int64 into the rows of ``points``, the first k hits
        ascending, then -1; counts (Mq,) int64, every hit of the query: ``counts > k`` marks a cut
        row, and a second call with ``k = int(counts.max())`` keeps every hit. Queries with a
        NaN/Inf coordinate and query rows outside every cloud get -1 and count 0.
    """
    check_tensor(queries, "queries", "(Mq, 3)")
    check_tensor(points, "points", "(P, 3)")
    queries, points = in_common_dtype(queries, points)
    indices, counts = torch.ops.pointops.cube_query_packed(queries, query_offsets, points, offsets, distance, k, ball)
    return CubeQuery(indices, counts)


@torch.library.register_fake("pointops::cube_query_packed")
def _cube_query_packed_fake(queries, query_offsets, points, offsets, distance, k, ball=False):
    _check_pair(queries, points, 2)
    _check_offsets(offsets, "offsets", points)
    _check_offsets(query_offsets, "query_offsets", points)
    torch._check(
        query_offsets.shape[0] == offsets.shape[0],
        lambda: f"query_offsets must have the B + 1 = {offsets.shape[0]} entries of offsets, got {query_offsets.shape[0]}",
    )
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    torch._check(math.isfinite(distance) and distance >= 0, lambda: f"distance must be finite and >= 0, got {distance}")
    m = queries.shape[0]
    _check_neighbour_output(points, (m, k), k, index_only=True)
    return points.new_empty((m, k), dtype=torch.int64), points.new_empty((m,), dtype=torch.int64)
