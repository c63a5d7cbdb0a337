"""torch_cluster's point ops (the neighbourhoods PyG builds graphs with) on pointops, named and
called exactly like torch_cluster's, so a model switches by changing one import::

    # from torch_cluster import fps, knn, knn_graph, radius, radius_graph, nearest, grid_cluster
    from pointops.compat.pyg import fps, knn, knn_graph, radius, radius_graph, nearest, grid_cluster

Clouds are packed (N, F) with a sorted ``batch`` vector (or ``ptr`` for ``fps``), outputs are
torch_cluster's: ``fps`` the sampled rows, concatenated; ``knn`` / ``radius`` an edge_index
(2, E) int64 whose row 0 indexes ``y`` and row 1 ``x``, grouped by y, nearest first for ``knn`` and
in index order for ``radius`` (torch_cluster's CUDA order); ``knn_graph`` / ``radius_graph`` with
``flow="source_to_target"`` put the neighbour (source) in row 0 and the centre (target) in row 1;
``nearest`` a cluster index per row of x; ``grid_cluster`` a voxel id per point.

Underneath: ``fps`` is ``fps_packed``; ``knn`` / ``knn_graph`` / ``nearest`` are ``knn_packed``;
``radius`` / ``radius_graph`` are ``ball_query`` on the clouds laid out padded (B, max size, 3).
Points of 1 or 2 coordinates are padded with zero coordinates (which change no distance); points
of more than 3 (features: DGCNN's dynamic graphs) take a brute-force torch search with the same
rules. A batch vector becomes offsets with ``torch.bucketize`` (no host sync) once the number of
clouds is known: pass ``batch_size`` and none is read; without it, ``batch.max()`` is (as
torch_cluster does).

Host syncs: torch_cluster's outputs have sizes that depend on the data, so each function reads
that size once: ``fps`` the sample counts (none when ``ptr`` is a list and ``ratio`` a float),
``knn`` the number of found neighbours (fewer than k where a cloud is smaller), ``radius`` the
largest cloud (for the padded layout) and the number of hits. The kernels themselves write fixed
capacities: (M, k) for knn, (M, max_num_neighbors) for radius, so E <= M * max_num_neighbors.

What differs from torch_cluster, on purpose:

* exact and deterministic: distances rounded the same on CPU and CUDA, ties to the lowest index
  (torch_cluster's CPU kd-tree and CUDA kernel break them differently), and ``radius`` keeps the
  first ``max_num_neighbors`` hits in index order on both devices (torch_cluster's CPU returns
  kd-tree order, so which neighbours survive the cap differs between its devices);
* float16 / bfloat16 coordinates are computed in float32 (torch_cluster's CUDA kernels compute in
  half); integer coordinates (torch_cluster's CPU takes them) are converted to float64; mixed
  float dtypes of x and y (autocast) are promoted to the wider one;
* ``fps`` never picks a point twice and never picks a NaN/Inf point (a cloud with fewer finite
  points than its sample count leaves -1 in those slots); ``random_start`` draws with torch's
  generator (``torch.manual_seed`` governs it);
* ``knn(cosine=True)`` works on the CPU too: it searches the rows scaled to unit length, whose
  squared distance 2 - 2 cos orders neighbours as the cosine distance does (up to rounding);
* ``nearest`` is exact on the CPU too (torch_cluster's CPU rescales the clouds and calls scipy's
  ``vq``); ``num_workers`` is accepted and ignored (the CPU kernels use torch's thread pool).
Not covered: ``graclus_cluster``, ``random_walk``, ``neighbor_sampler`` (graph, not point, ops).
"""

from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_int, check_real, check_tensor, distance_dtype, require
from ..geometry.dense import knn_dense, radius_dense
from ..geometry.neighbors import ball_query as _ball_query
from ..geometry.neighbors import knn_packed as _knn_packed
from ..sampling.ops import farthest_point_sampling_packed
from ._peer import batch_condition, checked_ptr

__all__ = ["fps", "knn", "knn_graph", "radius", "radius_graph", "nearest", "grid_cluster", "grid"]


def _rows(x: Tensor, name: str = "x") -> Tensor:
    """torch_cluster's layout: a 1-D tensor is N points of one coordinate; integers as float64."""
    check_tensor(x, name, "(N, F)")
    if x.dim() != 1 and x.dim() != 2:
        raise ValueError(name + " must have shape (N, F) or (N,), got " + str(list(x.shape)))
    if x.dtype == torch.bool or x.is_complex():
        raise ValueError(name + " must be a float or integer tensor, got " + str(x.dtype))
    x = x.view(-1, 1) if x.dim() == 1 else x
    if not x.is_floating_point():
        x = x.to(torch.float64)
    return x


def _pair(x: Tensor, y: Tensor, names: Tuple[str, str] = ("x", "y")) -> Tuple[Tensor, Tensor]:
    x, y = _rows(x, names[0]), _rows(y, names[1])
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            names[0]
            + " and "
            + names[1]
            + " must have the same number of features F, got "
            + str(list(x.shape))
            + " and "
            + str(list(y.shape))
        )
    if x.device != y.device:
        raise ValueError(
            names[1] + " must be on the device of " + names[0] + " (" + str(x.device) + "), got " + str(y.device)
        )
    if x.dtype != y.dtype:
        common = torch.promote_types(x.dtype, y.dtype)
        x, y = x.to(common), y.to(common)
    return x, y


def _xyz(x: Tensor) -> Tensor:
    """(..., D) with D <= 3 as (..., 3): zero coordinates add exact zeros to every distance."""
    return F.pad(x, (0, 3 - x.shape[-1])) if x.shape[-1] < 3 else x


def _host_pair(a: Tensor, b: Tensor) -> Tuple[int, int]:
    """Two device scalars read on the host in one copy."""
    pair = torch.stack([a, b]).cpu()
    return int(pair[0]), int(pair[1])


def _ptr(batch: Optional[Tensor], rows: int, batch_size: int, device: torch.device) -> Tensor:
    """Offsets (batch_size + 1,) int64 of a sorted batch vector, without a host sync."""
    if batch is None:
        return torch.tensor([0, rows], dtype=torch.int64, device=device)
    return torch.bucketize(torch.arange(batch_size + 1, device=device), batch).to(torch.int64)


def _checked_batches(
    x: Tensor,
    y: Tensor,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    batch_size: Optional[int],
    names: Tuple[str, str, str, str],
) -> int:
    """The batch vectors of x and y (names: x, y, batch_x, batch_y), checked: integer (N,) and
    (M,) vectors on x's device, sorted, >= 0 and below batch_size when it is given; returns the
    number of clouds, torch_cluster's: batch_size (>= 1), else 1 + the largest batch index. The
    verdicts and the largest indices come to the host in one read, the one torch_cluster makes."""
    bound = -1 if batch_size is None else check_int(batch_size, "batch_size", 1)
    vectors: List[Tuple[Tensor, Tensor, str, str]] = []  # (batch, entries that break it, name, message)
    if batch_x is not None:
        bad, message = batch_condition(batch_x, names[2], x.shape[0], names[0], x, bound)
        vectors.append((batch_x, bad, names[2], message))
    if batch_y is not None:
        bad, message = batch_condition(batch_y, names[3], y.shape[0], names[1], x, bound)
        vectors.append((batch_y, bad, names[3], message))
    if len(vectors) == 0:
        return 1 if batch_size is None else bound
    values = [v[1].any().to(torch.int64) for v in vectors]
    if batch_size is None:
        for v in vectors:
            if v[0].numel() > 0:
                values.append(v[0].max().to(torch.int64))
    read = torch.stack(values).cpu()
    for i in range(len(vectors)):
        require(read[i] == 0, vectors[i][3], True, vectors[i][2], vectors[i][0], vectors[i][1], True)
    if batch_size is not None:
        return bound
    return max(1, int(read[len(vectors) :].max()) + 1) if read.shape[0] > len(vectors) else 1


def _ptr_pair(
    x: Tensor,
    y: Tensor,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    batch_size: Optional[int],
    names: Tuple[str, str, str, str] = ("x", "y", "batch_x", "batch_y"),
) -> Tuple[Tensor, Tensor]:
    """Offsets of the clouds of x and y, checked as torch_cluster's knn / radius check them and
    more: batch vectors as long as their rows, sorted, below the number of clouds; both vectors
    given for more than one cloud."""
    clouds = _checked_batches(x, y, batch_x, batch_y, batch_size, names)
    if clouds > 1:
        if batch_x is None or batch_y is None:
            raise ValueError(
                names[2]
                + " and "
                + names[3]
                + " must both be given for "
                + str(clouds)
                + " clouds (batch_size), got "
                + ("None" if batch_x is None else "a tensor")
                + " and "
                + ("None" if batch_y is None else "a tensor")
            )
        return _ptr(batch_x, x.shape[0], clouds, x.device), _ptr(batch_y, y.shape[0], clouds, x.device)
    return _ptr(None, x.shape[0], 1, x.device), _ptr(None, y.shape[0], 1, x.device)


def _padded(x: Tensor, ptr: Tensor, size: int) -> Tensor:
    """Rows [ptr[b], ptr[b + 1]) of x (N, D) as (B, size, D), zeros past each cloud."""
    clouds = ptr.shape[0] - 1
    rows = ptr[:-1].unsqueeze(1) + torch.arange(size, device=x.device).unsqueeze(0)
    inside = rows < ptr[1:].unsqueeze(1)
    if x.shape[0] == 0:
        return x.new_zeros((clouds, size, x.shape[1]))
    gathered = x[torch.where(inside, rows, torch.zeros_like(rows)).reshape(-1)].reshape(clouds, size, x.shape[1])
    return torch.where(inside.unsqueeze(-1), gathered, torch.zeros_like(gathered))


def _packed_rows(local: Tensor, ptr_x: Tensor, ptr_y: Tensor, rows_y: int) -> Tensor:
    """(B, most_y, k) cloud-local indices of x (-1 for none) as (rows_y, k) rows of packed x, one
    row per packed row of y."""
    rows = torch.where(local >= 0, local + ptr_x[:-1].view(-1, 1, 1), local)
    slot = torch.arange(rows_y, device=local.device)
    cloud = torch.bucketize(slot, ptr_y[1:], right=True)
    return rows[cloud, slot - ptr_y[cloud]]


def _edges(cols: Tensor) -> Tensor:
    """(2, E) edge_index [query row, col] of the entries of cols (M, k) that are >= 0, in row-major
    order (one host read: E)."""
    found = (cols.reshape(-1) >= 0).nonzero().squeeze(1)
    return torch.stack([torch.div(found, max(cols.shape[1], 1), rounding_mode="floor"), cols.reshape(-1)[found]], 0)


# ---- fps ------------------------------------------------------------------------------------------


def fps(
    src: Tensor,
    batch: Optional[Tensor] = None,
    ratio: Optional[Union[Tensor, float]] = None,
    random_start: bool = True,
    batch_size: Optional[int] = None,
    ptr: Optional[Union[Tensor, List[int]]] = None,
) -> Tensor:
    """torch_cluster's ``fps``: farthest point sampling of ceil(ratio * size) points per cloud.

    Args:
        src: (N, F) points, any F.
        batch: (N,) sorted cloud index of every row, or None (one cloud).
        ratio: float or tensor (scalar, or one per cloud) in (0, 1]; None: 0.5.
        random_start: start each cloud at a random point (torch's generator), else at its first.
        batch_size: the number of clouds (read from batch when None).
        ptr: cloud bounds instead of batch, a (B + 1,) tensor or a list.

    Returns:
        (sum of the sample counts,) int64 rows of src, cloud after cloud, each cloud's in pick order.
    """
    check_tensor(src, "src", "(N, F)")
    src = _rows(src.flatten(1) if src.dim() > 2 else src, "src")
    if ptr is not None:
        if isinstance(ptr, Tensor):
            offsets = checked_ptr(ptr.to(src.device), "ptr", src.shape[0], "src", src, True)
        else:
            offsets = checked_ptr(
                torch.tensor(ptr, dtype=torch.int64, device=src.device), "ptr", src.shape[0], "src", src, True
            )
    elif batch is not None:
        clouds = _checked_batches(src, src, batch, None, batch_size, ("src", "src", "batch", "batch"))
        offsets = _ptr(batch, src.shape[0], clouds, src.device)
    else:
        offsets = torch.tensor([0, src.shape[0]], dtype=torch.int64, device=src.device)
    if ratio is None:
        r = torch.tensor(0.5, dtype=torch.float32, device=src.device)
    elif isinstance(ratio, Tensor):
        if ratio.dim() > 1 or (ratio.dim() == 1 and ratio.shape[0] != 1 and ratio.shape[0] != offsets.shape[0] - 1):
            raise ValueError(
                "ratio must be a number, or a tensor of one value or one per cloud ("
                + str(offsets.shape[0] - 1)
                + "), got shape "
                + str(list(ratio.shape))
            )
        r = ratio.to(device=src.device, dtype=distance_dtype(ratio))
        require(((r > 0) & (r <= 1)).all(), "ratio must be in (0, 1]", True, "ratio", r, ~((r > 0) & (r <= 1)))
    else:
        r = torch.tensor(check_real(ratio, "ratio", 0.0, True, 1.0), dtype=torch.float32, device=src.device)
    sizes = offsets[1:] - offsets[:-1]
    counts = torch.ceil(sizes.to(r.dtype) * r).to(torch.int64)  # (B,), torch_cluster's CPU rounding
    if counts.numel() == 0:
        return torch.zeros((0,), dtype=torch.int64, device=src.device)
    most, total = _host_pair(counts.max(), counts.sum())  # the output size: one host read
    picks = farthest_point_sampling_packed(src, offsets, most, random_start=random_start).indices  # (B, most)
    ends = torch.cumsum(counts, 0)
    slot = torch.arange(total, device=src.device)
    cloud = torch.bucketize(slot, ends, right=True)
    within = slot - (ends - counts)[cloud]
    return picks[cloud, within]


# ---- knn ------------------------------------------------------------------------------------------


def _knn_rows(x: Tensor, y: Tensor, k: int, ptr_x: Tensor, ptr_y: Tensor) -> Tensor:
    """(M, k) rows of x nearest each row of y within its cloud, -1 padded."""
    if x.shape[1] <= 3:
        return _knn_packed(_xyz(y), ptr_y, _xyz(x), ptr_x, k).indices
    sizes_x, sizes_y = ptr_x[1:] - ptr_x[:-1], ptr_y[1:] - ptr_y[:-1]
    most_x, most_y = _host_pair(sizes_x.max(), sizes_y.max())  # the padded layout's size
    local, _ = knn_dense(_padded(y, ptr_y, most_y), _padded(x, ptr_x, most_x), k, sizes_y, sizes_x)
    return _packed_rows(local, ptr_x, ptr_y, y.shape[0])


def knn(
    x: Tensor,
    y: Tensor,
    k: int,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> Tensor:
    """torch_cluster's ``knn``: for every row of y the k nearest rows of x in the same cloud.

    Args:
        x: (N, F) points; y: (M, F) queries.
        k: neighbours per query.
        batch_x, batch_y: sorted cloud indices of the rows, or None (one cloud).
        cosine: rank by cosine distance instead of Euclidean.
        num_workers: ignored.
        batch_size: the number of clouds (read from the batch vectors when None).

    Returns:
        (2, E) int64 edge_index: row 0 indexes y, row 1 x; grouped by y, nearest first, fewer
        than k where a cloud of x is smaller.
    """
    return _knn(x, y, k, batch_x, batch_y, cosine, batch_size, ("x", "y", "batch_x", "batch_y"))


def _knn(
    x: Tensor,
    y: Tensor,
    k: int,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    cosine: bool,
    batch_size: Optional[int],
    names: Tuple[str, str, str, str],
) -> Tensor:
    k = check_int(k, "k")
    x, y = _pair(x, y, (names[0], names[1]))
    ptr_x, ptr_y = _ptr_pair(x, y, batch_x, batch_y, batch_size, names)
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty((2, 0), dtype=torch.int64, device=x.device)
    if cosine:
        x = x / x.norm(2, 1, True)
        y = y / y.norm(2, 1, True)
    return _edges(_knn_rows(x, y, k, ptr_x, ptr_y))


def knn_graph(
    x: Tensor,
    k: int,
    batch: Optional[Tensor] = None,
    loop: bool = False,
    flow: str = "source_to_target",
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> Tensor:
    """torch_cluster's ``knn_graph``: edges from every point's k nearest points of its cloud
    (itself excluded unless ``loop``). ``flow="source_to_target"``: row 0 the neighbour, row 1 the
    point; ``"target_to_source"`` the other way round."""
    _check_flow(flow)
    k = check_int(k, "k")
    edge_index = _knn(x, x, k if loop else k + 1, batch, batch, cosine, batch_size, ("x", "x", "batch", "batch"))
    if flow == "source_to_target":
        row, col = edge_index[1], edge_index[0]
    else:
        row, col = edge_index[0], edge_index[1]
    edge_index = torch.stack([row, col], dim=0)
    if not loop:
        edge_index = edge_index[:, row != col]
    return edge_index


# ---- radius ---------------------------------------------------------------------------------------


def _check_flow(flow: str) -> None:
    if flow != "source_to_target" and flow != "target_to_source":
        raise ValueError('flow must be "source_to_target" or "target_to_source", got "' + flow + '"')


def _radius_rows(x: Tensor, y: Tensor, r: float, k: int, ptr_x: Tensor, ptr_y: Tensor) -> Tensor:
    """(M, k) rows of x within r (squared distance < r^2) of each row of y, its cloud's first k by
    index, -1 padded."""
    sizes_x, sizes_y = ptr_x[1:] - ptr_x[:-1], ptr_y[1:] - ptr_y[:-1]
    most_x, most_y = _host_pair(sizes_x.max(), sizes_y.max())  # the padded layout's size
    points, queries = _padded(x, ptr_x, most_x), _padded(y, ptr_y, most_y)
    if x.shape[1] <= 3:
        local = _ball_query(_xyz(queries), _xyz(points), r, k, sizes_y, sizes_x, pad="minus_one").indices
    else:
        local = radius_dense(queries, points, r, k, sizes_y, sizes_x)
    return _packed_rows(local, ptr_x, ptr_y, y.shape[0])


def radius(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    max_num_neighbors: int = 32,
    num_workers: int = 1,
    batch_size: Optional[int] = None,
    ignore_same_index: bool = False,
) -> Tensor:
    """torch_cluster's ``radius``: for every row of y the rows of x in the same cloud within
    distance r (squared distance < r^2, strictly, as torch_cluster compares).

    Args:
        x: (N, F) points; y: (M, F) queries; r: the radius.
        batch_x, batch_y: sorted cloud indices of the rows, or None (one cloud).
        max_num_neighbors: the most neighbours kept per query: its cloud's first ones by index.
        num_workers: ignored.
        batch_size: the number of clouds (read from the batch vectors when None).
        ignore_same_index: leave out the row of x with the same index as the query.

    Returns:
        (2, E) int64 edge_index: row 0 indexes y, row 1 x; grouped by y, x ascending.
    """
    return _radius(
        x, y, r, batch_x, batch_y, max_num_neighbors, batch_size, ignore_same_index, ("x", "y", "batch_x", "batch_y")
    )


def _radius(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    max_num_neighbors: int,
    batch_size: Optional[int],
    ignore_same_index: bool,
    names: Tuple[str, str, str, str],
) -> Tensor:
    r = check_real(r, "r")
    max_num_neighbors = check_int(max_num_neighbors, "max_num_neighbors")
    x, y = _pair(x, y, (names[0], names[1]))
    ptr_x, ptr_y = _ptr_pair(x, y, batch_x, batch_y, batch_size, names)
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty((2, 0), dtype=torch.int64, device=x.device)
    # one hit more when the query's own row may take a place
    cols = _radius_rows(x, y, r, max_num_neighbors + int(ignore_same_index), ptr_x, ptr_y)
    if ignore_same_index:
        rows = torch.arange(y.shape[0], device=x.device).view(-1, 1)
        keep = (cols >= 0) & (cols != rows)
        keep = keep & (torch.cumsum(keep.to(torch.int64), 1) <= max_num_neighbors)
        cols = torch.where(keep, cols, torch.full_like(cols, -1))
    return _edges(cols)


def radius_graph(
    x: Tensor,
    r: float,
    batch: Optional[Tensor] = None,
    loop: bool = False,
    max_num_neighbors: int = 32,
    flow: str = "source_to_target",
    num_workers: int = 1,
    batch_size: Optional[int] = None,
) -> Tensor:
    """torch_cluster's ``radius_graph``: edges between the points of a cloud within distance r,
    at most ``max_num_neighbors`` per point (its cloud's first by index), self-loops only with
    ``loop``. ``flow="source_to_target"``: row 0 the neighbour, row 1 the point."""
    _check_flow(flow)
    edge_index = _radius(x, x, r, batch, batch, max_num_neighbors, batch_size, not loop, ("x", "x", "batch", "batch"))
    if flow == "source_to_target":
        row, col = edge_index[1], edge_index[0]
    else:
        row, col = edge_index[0], edge_index[1]
    return torch.stack([row, col], dim=0)


# ---- nearest, grid --------------------------------------------------------------------------------


def nearest(
    x: Tensor,
    y: Tensor,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
) -> Tensor:
    """torch_cluster's ``nearest``: for every row of x the index of its nearest row of y in the
    same cloud, (N,) int64.

    Raises:
        ValueError: as torch_cluster, when a batch vector is not sorted or a cloud present in
        x is empty in y (one host read for the checks).
    """
    x, y = _pair(x, y)
    if batch_x is None and batch_y is not None:
        batch_x = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
    if batch_y is None and batch_x is not None:
        batch_y = torch.zeros(y.shape[0], dtype=torch.int64, device=y.device)
    if batch_x is None or batch_y is None:
        ptr_x = _ptr(None, x.shape[0], 1, x.device)
        ptr_y = _ptr(None, y.shape[0], 1, x.device)
    else:
        clouds = _checked_batches(x, y, batch_x, batch_y, None, ("x", "y", "batch_x", "batch_y"))
        ptr_x = _ptr(batch_x, x.shape[0], clouds, x.device)
        ptr_y = _ptr(batch_y, y.shape[0], clouds, x.device)
    # as torch_cluster: every cloud with a row of x has one of y to be its nearest
    if not bool(((ptr_x[1:] > ptr_x[:-1]) <= (ptr_y[1:] > ptr_y[:-1])).all()):
        raise ValueError(
            "Some batch indices occur in 'batch_x' that do not occur in 'batch_y': every cloud of x needs a row of y"
        )
    return _knn_rows(y, x, 1, ptr_y, ptr_x)[:, 0]


def grid_cluster(
    pos: Tensor,
    size: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
) -> Tensor:
    """torch_cluster's ``grid_cluster``: the id of each point's voxel in a grid of cell ``size``
    from ``start`` (default: the points' minimum) to ``end`` (default: their maximum), x fastest:
    ``sum_d floor((pos_d - start_d) / size_d) * prod_{e < d} (floor((end_e - start_e) / size_e) + 1)``.
    The same torch arithmetic as torch_cluster's, so the same ids for every dtype (no host sync).
    ``size`` must be finite and > 0, ``start`` and ``end`` finite
    with start <= end, the points finite and in [start, end], and the grid small enough that its
    ids fit int64: checked on the device (a device-side assert on CUDA)."""
    check_tensor(pos, "pos", "(N, D)")
    if pos.dtype == torch.bool or pos.is_complex() or pos.dim() == 0:
        raise ValueError(
            "pos must be a float or integer tensor (N, D), got " + str(pos.dtype) + " of shape " + str(list(pos.shape))
        )
    pos = pos.view(pos.shape[0], -1)
    _check_grid_vector(size, "size", pos)
    if start is None:
        start = torch.min(pos, 0)[0]
    else:
        _check_grid_vector(start, "start", pos)
    if end is None:
        end = torch.max(pos, 0)[0]
    else:
        _check_grid_vector(end, "end", pos)
    _check_grid(pos, size, start, end)
    pos = pos - start.unsqueeze(0)
    num_voxels = (end - start).true_divide(size).to(torch.int64) + 1
    num_voxels = num_voxels.cumprod(0)
    num_voxels = torch.cat([torch.ones(1, dtype=num_voxels.dtype, device=num_voxels.device), num_voxels], 0)
    num_voxels = num_voxels.narrow(0, 0, size.shape[0])
    out = pos.true_divide(size.view(1, -1)).to(torch.int64)
    out = out * num_voxels.view(1, -1)
    return out.sum(1)


def _check_grid_vector(v: Tensor, name: str, pos: Tensor) -> None:
    check_tensor(v, name, "(D,)")
    if v.dtype == torch.bool or v.is_complex():
        raise ValueError(name + " must be a float or integer tensor (D,), got " + str(v.dtype))
    if v.dim() != 1 or v.numel() != pos.shape[1]:
        raise ValueError(
            name
            + " must have one value per coordinate of pos ("
            + str(pos.shape[1])
            + "), got shape "
            + str(list(v.shape))
        )
    if v.device != pos.device:
        raise ValueError(name + " must be on the device of pos (" + str(pos.device) + "), got " + str(v.device))


def _check_grid(pos: Tensor, size: Tensor, start: Tensor, end: Tensor) -> None:
    """grid_cluster's grid: positive sizes, finite bounds in order, every point finite and
    inside them, and the cells' ids below 2^62 (torch_cluster returns garbage ids past int64)."""
    if pos.shape[0] == 0:
        return
    dtype = torch.promote_types(torch.promote_types(pos.dtype, size.dtype), torch.float32)
    s, lo, hi = size.reshape(-1).to(dtype), start.reshape(-1).to(dtype), end.reshape(-1).to(dtype)
    bad_size = ~(torch.isfinite(s) & (s > 0))
    require(~bad_size.any(), "size must be finite and > 0", False, "size", size.reshape(-1), bad_size)
    p = pos.to(dtype)
    not_finite = ~torch.isfinite(p)
    require(~not_finite.any(), "pos must be finite", False, "pos", pos, not_finite)
    bad_bounds = ~(torch.isfinite(lo) & torch.isfinite(hi) & (lo <= hi))
    require(
        ~bad_bounds.any(), "start and end must be finite with start <= end", False, "end", end.reshape(-1), bad_bounds
    )
    outside = (p < lo) | (p > hi)
    require(~outside.any(), "pos must lie within [start, end]", False, "pos", pos, outside)
    cells = torch.floor((hi - lo) / s).to(torch.float64) + 1
    require(
        torch.prod(cells) < 2.0**62,
        "size must give a grid of fewer than 2^62 cells from start to end",
        False,
        "size",
        size.reshape(-1),
    )


grid = grid_cluster
