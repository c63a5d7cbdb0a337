"""Neighbourhoods: k nearest neighbours, ball query, interpolation and grouping (wraps
csrc/geometry/knn*, ball_query*, interpolate*).

Rules shared by CPU and CUDA, bit for bit, whichever search strategy runs (brute force or a
uniform grid): squared distances are ``(dx*dx + dy*dy) + dz*dz`` with every step rounded on its
own in float32 (float64 for float64 inputs); a row lists the k smallest (distance, index) pairs in
ascending order, so equal distances go to the lowest index; points with a NaN/Inf coordinate are
never neighbours; rows with fewer than k neighbours are padded with index -1 and distance +inf,
and queries past ``query_lengths`` or with a NaN/Inf coordinate get all -1 / +inf rows. kNN
distances carry a gradient to both clouds (registered below); indices and counts none.
"""

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import (
    check_cloud,
    check_dim,
    check_dtype,
    check_floating,
    check_optional_batch_vector,
    check_output_fits,
    check_real,
    check_same_device,
    check_shape,
    check_tensor,
    distance_dtype,
    in_common_dtype,
)


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
    max_distance: Optional[float] = None,
) -> KNN:
    """The k nearest points of every query, exact.

    Args:
        queries: (B, M, 3) float32/float64/float16/bfloat16.
        points: (B, N, 3) on the same device; another float dtype than queries is promoted with
            it (torch.promote_types), as torch's binary ops do.
        k: neighbours per query (k > N pads with -1 / +inf).
        query_lengths: (B,) int64, the queries of cloud b are rows [0, query_lengths[b]); None = all M.
        lengths: (B,) int64, the points of cloud b are rows [0, lengths[b]); None = all N.
        max_distance: None, or >= 0: only points within it count (squared distance <=
            max_distance^2 rounded to the distance dtype); the search stops there, so queries
            far from every point (ICP's outliers) cost little. Fewer pad with -1 / +inf.

    Returns:
        :class:`KNN` of (B, M, k) int64 indices into ``points[b]`` and squared distances (float64 for
        float64 inputs, float32 otherwise), ascending, ties to the lowest index. The distances are
        differentiable with respect to ``queries`` and ``points``.
    """
    check_tensor(queries, "queries", "(B, M, 3)")
    check_tensor(points, "points", "(B, N, 3)")
    queries, points = in_common_dtype(queries, points)
    indices, distances = torch.ops.pointops.knn(queries, query_lengths, points, lengths, k, max_distance)
    return KNN(indices, distances)


def knn_packed(queries: Tensor, query_offsets: Tensor, points: Tensor, offsets: Tensor, k: int) -> KNN:
    """:func:`knn` for packed clouds: cloud b is rows [offsets[b], offsets[b + 1]) of points (P, 3)
    and rows [query_offsets[b], query_offsets[b + 1]) of queries (Mq, 3). Offsets are (B + 1,) int64,
    clamped to [0, rows] and made non-decreasing by a running maximum. Returns (Mq, k) indices into
    the rows of ``points`` and squared distances; query rows outside every cloud get -1 / +inf."""
    check_tensor(queries, "queries", "(Mq, 3)")
    check_tensor(points, "points", "(P, 3)")
    queries, points = in_common_dtype(queries, points)
    indices, distances = torch.ops.pointops.knn_packed(queries, query_offsets, points, offsets, k)
    return KNN(indices, distances)


class BallQuery(NamedTuple):
    """Output of :func:`ball_query`: (B, M, k) int64 indices of the hits (then padding) and (B, M)
    int64 counts of hits kept."""

    indices: Tensor
    counts: Tensor


def ball_query(
    queries: Tensor,
    points: Tensor,
    radius: float,
    k: int,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
    pad: str = "first",
    min_radius: float = 0.0,
) -> BallQuery:
    """The first k points (in index order) within ``radius`` of every query.

    A point is a hit when its squared distance d2 is < radius^2 (strict, as OpenPCDet, mmcv and
    pytorch3d compare) and, with ``min_radius`` (mmcv's dilated ball query), d2 >= min_radius^2
    or d2 == 0; both radii are rounded to the compute type (float32, or float64 for float64
    inputs) and squared there; radius 0 finds nothing.

    Args:
        queries: (B, M, 3) float32/float64/float16/bfloat16 (the ball centres).
        points: (B, N, 3) on the same device (a different float dtype is promoted, as in :func:`knn`).
        radius: finite, >= 0.
        k: the most hits kept per query (OpenPCDet's nsample).
        query_lengths, lengths: (B,) int64 per-cloud sizes of queries and points; None = all rows.
        pad: what fills a row past its hits: ``"first"`` repeats the first hit (OpenPCDet's
            PointNet++), ``"minus_one"`` writes -1 (pytorch3d). A row with no hit is all -1 in both
            (``pointops.nn.ball_query`` turns it into OpenPCDet's zeros).
        min_radius: finite, >= 0; points nearer than it (other than the centre itself) are not hits.

    Returns:
        :class:`BallQuery`: indices (B, M, k) int64 into ``points[b]``, hits ascending; counts
        (B, M) int64 = min(hits, k).
    """
    check_tensor(queries, "queries", "(B, M, 3)")
    check_tensor(points, "points", "(B, N, 3)")
    if pad != "first" and pad != "minus_one":
        raise ValueError('pad must be "first" or "minus_one", got "' + pad + '"')
    queries, points = in_common_dtype(queries, points)
    indices, counts = torch.ops.pointops.ball_query(
        queries, query_lengths, points, lengths, radius, k, pad == "first", min_radius
    )
    return BallQuery(indices, counts)


def ball_query_packed(
    queries: Tensor,
    query_offsets: Tensor,
    points: Tensor,
    offsets: Tensor,
    radius: float,
    k: int,
    pad: str = "first",
    min_radius: float = 0.0,
) -> BallQuery:
    """:func:`ball_query` for packed clouds (OpenPCDet's and mmcv's "stack" layout): cloud b is
    rows [offsets[b], offsets[b + 1]) of points (P, 3) and rows [query_offsets[b],
    query_offsets[b + 1]) of queries (Mq, 3); offsets are (B + 1,) int64, clamped to [0, rows]
    and made non-decreasing by a running maximum, as :func:`knn_packed`. Returns indices (Mq, k)
    int64 into the rows of ``points`` (hits ascending, then the padding of ``pad``) and counts
    (Mq,) int64; query rows outside every cloud get rows of -1 and count 0."""
    check_tensor(queries, "queries", "(Mq, 3)")
    check_tensor(points, "points", "(P, 3)")
    if pad != "first" and pad != "minus_one":
        raise ValueError('pad must be "first" or "minus_one", got "' + pad + '"')
    queries, points = in_common_dtype(queries, points)
    indices, counts = torch.ops.pointops.ball_query_packed(
        queries, query_offsets, points, offsets, radius, k, pad == "first", min_radius
    )
    return BallQuery(indices, counts)


def three_nn(
    queries: Tensor,
    points: Tensor,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
) -> KNN:
    """The 3 nearest points of every query (PointNet++ feature propagation): :func:`knn` with
    k = 3. Distances are squared, as everywhere in pointops (OpenPCDet's ``three_nn`` returns
    their square roots; ``pointops.nn.three_nn`` does)."""
    check_tensor(queries, "queries", "(B, M, 3)")
    check_tensor(points, "points", "(B, N, 3)")
    return knn(queries, points, 3, query_lengths, lengths)


def inverse_distance_weights(distances: Tensor, eps: float = 1e-8) -> Tensor:
    """PointNet++ interpolation weights from squared distances (B, M, K): w = 1 / (d + eps) with
    d = sqrt(distances) the Euclidean distance, normalised to sum to 1 over each row (OpenPCDet's
    ``PointnetFPModule`` formula). Padding (+inf distance) gets weight 0; a row with no neighbour
    gets all zeros."""
    check_tensor(distances, "distances", "(B, M, K)")
    eps = check_real(eps, "eps")
    # The root in float64 and the row sum column by column: each step rounds once, the same way
    # on every device (a float32 sqrt on CUDA may be approximate, a reduction's order may vary).
    root = torch.sqrt(distances.double()).to(distances.dtype)
    reciprocal = 1.0 / (root + eps)
    total = reciprocal[..., :1]
    for j in range(1, reciprocal.shape[-1]):
        total = total + reciprocal[..., j : j + 1]
    return torch.where(total > 0, reciprocal / total, torch.zeros_like(reciprocal))


def interpolate(features: Tensor, indices: Tensor, weights: Tensor) -> Tensor:
    """Weighted sum of neighbour features (PointNet++'s ``three_interpolate`` for any K).

    Args:
        features: (B, N, C) float32/float64/float16/bfloat16.
        indices: (B, M, K) int64 rows of ``features[b]`` (from :func:`knn` / :func:`three_nn`);
            an index outside [0, N), such as the -1 padding, contributes nothing.
        weights: (B, M, K) float (e.g. :func:`inverse_distance_weights`); a dtype other than
            the features' (autocast: half features, float32 weights) is promoted with it, as
            torch's binary ops do, and the sum runs in the promoted type.

    Returns:
        (B, M, C) in the promoted dtype: ``sum_j weights[b, m, j] * features[b, indices[b, m, j]]``,
        summed in order of j with every product and sum rounded on its own (float32, float64 for
        float64), identical on CPU and CUDA. Differentiable in ``features`` and ``weights``.
    """
    check_tensor(features, "features", "(B, N, C)")
    check_tensor(indices, "indices", "(B, M, K)")
    check_tensor(weights, "weights", "(B, M, K)")
    features, weights = in_common_dtype(features, weights)
    return torch.ops.pointops.interpolate(features, indices, weights)


def group_points(features: Tensor, indices: Tensor) -> Tensor:
    """Gather per-point features by neighbour index: ``features`` (B, N, C) and ``indices``
    (B, *S) int64 (the same B: a batch dimension is required) give (B, *S, C); an index outside
    [0, N) (-1 padding) gives a row of zeros. Plain torch (a gather), so gradients reach
    ``features``."""
    check_tensor(features, "features", "(B, N, C)")
    check_tensor(indices, "indices", "(B, *S)")
    check_cloud(features, "features", "(B, N, C)", -1)
    if features.dim() != 3:
        raise ValueError("features must have shape (B, N, C), got " + str(list(features.shape)))
    if indices.dim() < 2 or indices.shape[0] != features.shape[0]:
        raise ValueError(
            "indices must have shape (B, *S) with the batch size B = "
            + str(features.shape[0])
            + " of features, got "
            + str(list(indices.shape))
        )
    if indices.dtype != torch.int64 and indices.dtype != torch.int32:
        raise ValueError("indices must be int64 or int32, got " + str(indices.dtype))
    if indices.device != features.device:
        raise ValueError(
            "indices must be on the device of features (" + str(features.device) + "), got " + str(indices.device)
        )
    batch, n, channels = features.shape
    flat = indices.reshape(batch, -1)
    valid = (flat >= 0) & (flat < n)
    if n == 0:
        gathered = features.new_zeros((batch, flat.shape[1], channels))
    else:
        safe = torch.where(valid, flat, torch.zeros_like(flat))
        gathered = torch.gather(features, 1, safe.unsqueeze(-1).expand(-1, -1, channels))
    grouped = torch.where(valid.unsqueeze(-1), gathered, torch.zeros_like(gathered))
    shape = list(indices.shape)
    shape.append(channels)
    return grouped.reshape(shape)


# ---- gradient of interpolate (plain torch ops) ---------------------------------------------------


def _interpolate_setup_context(ctx, inputs, output):
    features, indices, weights = inputs
    ctx.save_for_backward(features, indices, weights)


def _interpolate_backward(ctx, grad):
    features, indices, weights = ctx.saved_tensors
    batch, n, channels = features.shape
    m, k = indices.shape[1], indices.shape[2]
    valid = (indices >= 0) & (indices < n)
    safe = torch.where(valid, indices, torch.zeros_like(indices)).reshape(batch, m * k, 1).expand(-1, -1, channels)
    grad_features = None
    grad_weights = None
    if ctx.needs_input_grad[0]:
        w = torch.where(valid, weights, torch.zeros_like(weights)).to(grad.dtype)
        terms = (grad.unsqueeze(2) * w.unsqueeze(-1)).reshape(batch, m * k, channels)
        grad_features = grad.new_zeros((batch, n, channels))
        if n > 0:
            grad_features = grad_features.scatter_add(1, safe, terms)
        grad_features = grad_features.to(features.dtype)
    if ctx.needs_input_grad[2]:
        if n > 0:
            gathered = torch.gather(features, 1, safe).reshape(batch, m, k, channels).to(grad.dtype)
            dots = (grad.unsqueeze(2) * gathered).sum(-1)
        else:
            dots = grad.new_zeros((batch, m, k))
        grad_weights = torch.where(valid, dots, torch.zeros_like(dots)).to(weights.dtype)
    return grad_features, None, grad_weights


torch.library.register_autograd(
    "pointops::interpolate", _interpolate_backward, setup_context=_interpolate_setup_context
)


# ---- gradient of knn / knn_packed distances (plain torch ops) --------------------------------------


def _knn_distance_grads(
    queries: Tensor, points: Tensor, indices: Tensor, grad: Tensor, needs_queries: bool, needs_points: bool
):
    """Gradients of d = |q - p[idx]|^2 for batched (B, M, 3) / (B, N, 3) / (B, M, k) tensors:
    2 (q - p) g to the query and -2 (q - p) g to the point, summed over the rows that name it.
    Padding (index -1) contributes nothing. Where a query coincides with its neighbour the
    gradient is 0, also when g is infinite (a square root's at 0): d has its minimum there, and
    sqrt(d) then trains like torch.linalg.vector_norm, whose gradient at 0 is 0."""
    batch, m, k = indices.shape
    n = points.shape[1]
    dtype = grad.dtype
    valid = indices >= 0
    safe = torch.where(valid, indices, torch.zeros_like(indices))
    if n > 0:
        near = torch.gather(points.to(dtype), 1, safe.reshape(batch, m * k, 1).expand(-1, -1, 3))
    else:
        near = points.new_zeros((batch, m * k, 3), dtype=dtype)
    diff = queries.to(dtype).unsqueeze(2) - near.reshape(batch, m, k, 3)
    g = torch.where(valid, grad, torch.zeros_like(grad)).unsqueeze(-1)
    terms = torch.where(diff == 0, torch.zeros_like(diff), 2.0 * diff * g)  # (B, M, k, 3)
    grad_queries = terms.sum(2).to(queries.dtype) if needs_queries else None
    grad_points = None
    if needs_points:
        grad_points = points.new_zeros((batch, n, 3), dtype=dtype)
        if n > 0:
            grad_points = grad_points.scatter_add(
                1, safe.reshape(batch, m * k, 1).expand(-1, -1, 3), (-terms).reshape(batch, m * k, 3)
            )
        grad_points = grad_points.to(points.dtype)
    return grad_queries, grad_points


def _knn_setup_context(ctx, inputs, output):
    queries, _, points, _, _, _ = inputs
    ctx.save_for_backward(queries, points, output[0])


def _knn_backward(ctx, grad_indices, grad_distances):
    queries, points, indices = ctx.saved_tensors
    if grad_distances is None:
        return None, None, None, None, None, None
    grad_queries, grad_points = _knn_distance_grads(
        queries, points, indices, grad_distances, ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    )
    return grad_queries, None, grad_points, None, None, None


def _knn_packed_setup_context(ctx, inputs, output):
    queries, _, points, _, _ = inputs
    ctx.save_for_backward(queries, points, output[0])


def _knn_packed_backward(ctx, grad_indices, grad_distances):
    queries, points, indices = ctx.saved_tensors
    if grad_distances is None:
        return None, None, None, None, None
    grad_queries, grad_points = _knn_distance_grads(
        queries.unsqueeze(0),
        points.unsqueeze(0),
        indices.unsqueeze(0),
        grad_distances.unsqueeze(0),
        ctx.needs_input_grad[0],
        ctx.needs_input_grad[2],
    )
    return (
        None if grad_queries is None else grad_queries[0],
        None,
        None if grad_points is None else grad_points[0],
        None,
        None,
    )


torch.library.register_autograd("pointops::knn", _knn_backward, setup_context=_knn_setup_context)
torch.library.register_autograd("pointops::knn_packed", _knn_packed_backward, setup_context=_knn_packed_setup_context)


# ---- fake kernels (shapes and dtypes only) ----------------------------------------------------


def _check_coords(t: Tensor, name: str, dims: int, layout: str) -> None:
    check_dim(t, name, dims, layout)
    check_floating(t, name)
    torch._check(t.shape[-1] == 3, lambda: f"{name} must have shape {layout} (x, y, z), got shape {tuple(t.shape)}")


def _check_pair(queries: Tensor, points: Tensor, dims: int) -> None:
    _check_coords(queries, "queries", dims, "(B, M, 3)" if dims == 3 else "(Mq, 3)")
    _check_coords(points, "points", dims, "(B, N, 3)" if dims == 3 else "(P, 3)")
    if dims == 3:
        torch._check(queries.shape[0] == points.shape[0], lambda: "queries and points must have the same batch size B")
    torch._check(
        queries.dtype == points.dtype,
        lambda: f"queries must have the dtype of points ({points.dtype}), got {queries.dtype}",
    )
    check_same_device(queries, "queries", points)


def _check_offsets(offsets: Tensor, name: str, points: Tensor) -> None:
    check_dim(offsets, name, 1, "(B + 1,)")
    check_dtype(offsets, name, torch.int64)
    torch._check(
        offsets.shape[0] >= 1, lambda: f"{name} must have B + 1 >= 1 entries, got shape {tuple(offsets.shape)}"
    )
    check_same_device(offsets, name, points)


def _check_neighbour_output(points: Tensor, shape, k: int, index_only: bool = False) -> None:
    element = 8 if index_only else 8 + torch.empty((), dtype=distance_dtype(points)).element_size()
    check_output_fits(points.device, f"k = {k}", shape, element)


@torch.library.register_fake("pointops::knn")
def _knn_fake(queries, query_lengths, points, lengths, k, max_distance=None):
    _check_pair(queries, points, 3)
    check_optional_batch_vector(lengths, "lengths", points.shape[0], points)
    check_optional_batch_vector(query_lengths, "query_lengths", points.shape[0], points)
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    torch._check(
        max_distance is None or max_distance >= 0, lambda: f"max_distance must be >= 0 (or None), got {max_distance}"
    )
    shape = (queries.shape[0], queries.shape[1], k)
    _check_neighbour_output(points, shape, k)
    return points.new_empty(shape, dtype=torch.int64), points.new_empty(shape, dtype=distance_dtype(points))


@torch.library.register_fake("pointops::knn_packed")
def _knn_packed_fake(queries, query_offsets, points, offsets, k):
    _check_pair(queries, points, 2)
    _check_offsets(offsets, "offsets", points)
    _check_offsets(query_offsets, "query_offsets", points)
    torch._check(
        query_offsets.shape[0] == offsets.shape[0],
        lambda: f"query_offsets must have the B + 1 = {offsets.shape[0]} entries of offsets, got {query_offsets.shape[0]}",
    )
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    shape = (queries.shape[0], k)
    _check_neighbour_output(points, shape, k)
    return points.new_empty(shape, dtype=torch.int64), points.new_empty(shape, dtype=distance_dtype(points))


def _check_ball_args(radius: float, k: int, min_radius: float) -> None:
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    torch._check(math.isfinite(radius) and radius >= 0, lambda: f"radius must be finite and >= 0, got {radius}")
    torch._check(
        math.isfinite(min_radius) and min_radius >= 0, lambda: f"min_radius must be finite and >= 0, got {min_radius}"
    )


@torch.library.register_fake("pointops::ball_query")
def _ball_query_fake(queries, query_lengths, points, lengths, radius, k, repeat_first=True, min_radius=0.0):
    _check_pair(queries, points, 3)
    check_optional_batch_vector(lengths, "lengths", points.shape[0], points)
    check_optional_batch_vector(query_lengths, "query_lengths", points.shape[0], points)
    _check_ball_args(radius, k, min_radius)
    batch, m = queries.shape[0], queries.shape[1]
    _check_neighbour_output(points, (batch, m, k), k, index_only=True)
    return points.new_empty((batch, m, k), dtype=torch.int64), points.new_empty((batch, m), dtype=torch.int64)


@torch.library.register_fake("pointops::ball_query_packed")
def _ball_query_packed_fake(queries, query_offsets, points, offsets, radius, k, repeat_first=True, min_radius=0.0):
    _check_pair(queries, points, 2)
    _check_offsets(offsets, "offsets", points)
    _check_offsets(query_offsets, "query_offsets", points)
    torch._check(
        query_offsets.shape[0] == offsets.shape[0],
        lambda: f"query_offsets must have the B + 1 = {offsets.shape[0]} entries of offsets, got {query_offsets.shape[0]}",
    )
    _check_ball_args(radius, k, min_radius)
    m = queries.shape[0]
    _check_neighbour_output(points, (m, k), k, index_only=True)
    return points.new_empty((m, k), dtype=torch.int64), points.new_empty((m,), dtype=torch.int64)


@torch.library.register_fake("pointops::interpolate")
def _interpolate_fake(features, indices, weights):
    check_dim(features, "features", 3, "(B, N, C)")
    check_floating(features, "features")
    check_dim(indices, "indices", 3, "(B, M, K)")
    check_dtype(indices, "indices", torch.int64)
    check_same_device(indices, "indices", features, "features")
    torch._check(
        indices.shape[0] == features.shape[0],
        lambda: f"indices must have the batch size of features ({features.shape[0]}), got shape {tuple(indices.shape)}",
    )
    check_shape(weights, "weights", indices.shape)
    torch._check(
        weights.dtype == features.dtype,
        lambda: f"weights must have the dtype of features ({features.dtype}), got {weights.dtype}",
    )
    check_same_device(weights, "weights", features, "features")
    return features.new_empty((features.shape[0], indices.shape[1], features.shape[2]))
