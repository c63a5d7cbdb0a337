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

from .._checks import distance_dtype
from ..geometry.dense import knn_dense, radius_dense
from ..geometry.neighbors import ball_query as _ball_query
from ..geometry.neighbors import knn_packed as _knn_packed
from ..sampling.ops import farthest_point_sampling_packed

__all__ = ["fps", "knn", "knn_graph", "radius", "radius_graph", "nearest", "grid_cluster", "grid"]

def _rows(x: Tensor) -> Tensor:
    """torch_cluster's layout: a 1-D tensor is N points of one coordinate; integers as float64."""
    x = x.view(-1, 1) if x.dim() == 1 else x
    if not x.is_floating_point():
        x = x.to(torch.float64)
    return x


def _pair(x: Tensor, y: Tensor) -> Tuple[Tensor, Tensor]:
    x, y = _rows(x), _rows(y)
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


def _batch_size(batch_x: Optional[Tensor], batch_y: Optional[Tensor], batch_size: Optional[int]) -> int:
    """torch_cluster's rule: the given batch_size, else 1 + the largest batch index (a host read)."""
    if batch_size is not None:
        return batch_size
    size = 1
    if batch_x is not None and batch_x.numel() > 0:
        size = int(batch_x.max()) + 1
    if batch_y is not None and batch_y.numel() > 0:
        size = max(size, int(batch_y.max()) + 1)
    return size


def _ptr_pair(
    x: Tensor, y: Tensor, batch_x: Optional[Tensor], batch_y: Optional[Tensor], batch_size: Optional[int]
) -> Tuple[Tensor, Tensor]:
    """Offsets of the clouds of x and y, checked as torch_cluster's knn / radius check them: batch
    vectors as long as their rows, at least one cloud, both vectors given for more than one."""
    if batch_x is not None:
        assert x.shape[0] == batch_x.numel()
    if batch_y is not None:
        assert y.shape[0] == batch_y.numel()
    clouds = _batch_size(batch_x, batch_y, batch_size)
    assert clouds > 0
    if clouds > 1:
        assert batch_x is not None
        assert batch_y is not None
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
    src = _rows(src.flatten(1) if src.dim() > 2 else src)
    if ptr is not None:
        if isinstance(ptr, Tensor):
            offsets = ptr.to(device=src.device, dtype=torch.int64)
        else:
            offsets = torch.tensor(ptr, dtype=torch.int64, device=src.device)
    elif batch is not None:
        assert src.shape[0] == batch.numel()
        offsets = _ptr(batch, src.shape[0], _batch_size(batch, None, batch_size), src.device)
    else:
        offsets = torch.tensor([0, src.shape[0]], dtype=torch.int64, device=src.device)
    if ratio is None:
        r = torch.tensor(0.5, dtype=torch.float32, device=src.device)
    elif isinstance(ratio, Tensor):
        r = ratio.to(device=src.device, dtype=distance_dtype(ratio))
    else:
        r = torch.tensor(ratio, dtype=torch.float32, device=src.device)
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
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty((2, 0), dtype=torch.int64, device=x.device)
    x, y = _pair(x, y)
    if cosine:
        x = x / x.norm(2, 1, True)
        y = y / y.norm(2, 1, True)
    ptr_x, ptr_y = _ptr_pair(x, y, batch_x, batch_y, batch_size)
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
    assert flow in ["source_to_target", "target_to_source"]
    edge_index = knn(x, x, k if loop else k + 1, batch, batch, cosine, num_workers, batch_size)
    if flow == "source_to_target":
        row, col = edge_index[1], edge_index[0]
    else:
        row, col = edge_index[0], edge_index[1]
    edge_index = torch.stack([row, col], dim=0)
    if not loop:
        edge_index = edge_index[:, row != col]
    return edge_index


# ---- radius ---------------------------------------------------------------------------------------


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
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty((2, 0), dtype=torch.int64, device=x.device)
    x, y = _pair(x, y)
    ptr_x, ptr_y = _ptr_pair(x, y, batch_x, batch_y, batch_size)
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
    assert flow in ["source_to_target", "target_to_source"]
    edge_index = radius(x, x, r, batch, batch, max_num_neighbors, num_workers, batch_size, not loop)
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
    assert x.shape[1] == y.shape[1]
    if batch_x is not None and bool((batch_x[1:] < batch_x[:-1]).any()):
        raise ValueError("'batch_x' is not sorted")
    if batch_y is not None and bool((batch_y[1:] < batch_y[:-1]).any()):
        raise ValueError("'batch_y' is not sorted")
    if batch_x is None and batch_y is not None:
        batch_x = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
    if batch_y is None and batch_x is not None:
        batch_y = torch.zeros(y.shape[0], dtype=torch.int64, device=y.device)
    if batch_x is None or batch_y is None:
        ptr_x = _ptr(None, x.shape[0], 1, x.device)
        ptr_y = _ptr(None, y.shape[0], 1, x.device)
    else:
        assert x.shape[0] == batch_x.numel() and y.shape[0] == batch_y.numel()
        clouds = _batch_size(batch_x, batch_y, None)
        ptr_x = _ptr(batch_x, x.shape[0], clouds, x.device)
        ptr_y = _ptr(batch_y, y.shape[0], clouds, x.device)
        if not torch.equal(ptr_x[1:] > ptr_x[:-1], ptr_y[1:] > ptr_y[:-1]):
            raise ValueError("Some batch indices occur in 'batch_x' that do not occur in 'batch_y'")
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
    The same torch arithmetic as torch_cluster's, so the same ids for every dtype (no host sync)."""
    pos = pos.view(pos.shape[0], -1)
    assert size.numel() == pos.shape[1]
    if start is None:
        start = torch.min(pos, 0)[0]
    else:
        assert start.numel() == pos.shape[1]
    if end is None:
        end = torch.max(pos, 0)[0]
    pos = pos - start.unsqueeze(0)
    num_voxels = (end - start).true_divide(size).to(torch.int64) + 1
    num_voxels = num_voxels.cumprod(0)
    num_voxels = torch.cat([torch.ones(1, dtype=num_voxels.dtype, device=num_voxels.device), num_voxels], 0)
    num_voxels = num_voxels.narrow(0, 0, size.shape[0])
    out = pos.true_divide(size.view(1, -1)).to(torch.int64)
    out = out * num_voxels.view(1, -1)
    return out.sum(1)


grid = grid_cluster
