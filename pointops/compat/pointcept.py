"""Pointcept's ``libs/pointops`` (Point Transformer v1-v3), called exactly as Pointcept calls it,
on pointops' kernels::

    # import pointops                      (Pointcept's libs/pointops)
    import pointops.compat.pointcept as pointops

Clouds are packed: ``xyz`` (n, 3) with ``offset`` (b,) the int32 cumulative ends [n1, n1 + n2, ...],
queries ``new_xyz`` (m, 3) with ``new_offset``. Every function takes Pointcept's arguments in its
order and returns its shapes and dtypes: int32 indices into the packed rows, -1 where there is no
neighbour, Euclidean distances. Gradients flow where Pointcept's do (``grouping``,
``interpolation`` and their ``2`` variants into the features; the queries have none). Pointcept's
build is float32-only pybind on the default stream; these run on any float dtype, on CPU and
CUDA (the current stream), under torch.compile, with no host sync except where an output size
depends on data (``farthest_point_sampling`` reads ``new_offset``, ``offset2batch`` and
``batch2offset`` their counts, as Pointcept does).

Left out: ``subtraction``, ``aggregation``, ``attention_relation_step`` and
``attention_fusion_step`` (Point Transformer's feature arithmetic over given neighbour indices,
no neighbourhood search or sampling: plain torch indexing expresses each, e.g.
``subtraction(a, b, idx) = a[:, None] - b[idx]``).

What differs, on purpose:

* ties go to the lowest index (Pointcept's kNN and ball query sort with an unstable heap), and
  distances use pointops' exact formula, the same on CPU and CUDA;
* missing neighbours have distance +inf (Pointcept: sqrt(1e10) = 1e5), so inverse-distance
  weights give them exactly 0, and ``interpolation`` ignores index -1 (Pointcept's ``feat[-1]``
  reads the last row);
* ``ball_query`` returns the distances of the points it samples (with more candidates than
  ``nsample`` Pointcept writes their indices into ``dist``); like Pointcept it considers at most
  ``capacity`` (2,048, Pointcept's buffer) points per query, the first by index;
* ``random_ball_query`` draws its order with torch's generator in one step (Pointcept loops over
  the clouds in Python), and with ``min_radius`` > 0 it considers the first ``capacity`` points
  of that order within ``max_radius``;
* ``query_and_group`` and ``grouping2`` group zeros for index -1 (Pointcept reads row -1), and
  every grouping refuses an index below -1 or past the rows (Pointcept reads ``feat[-5]``);
* offsets that contradict the rows (decreasing, negative, not ending at the rows) are refused
  with an error naming them (docs/compat.md, "Checked inputs").
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .._checks import check_coords, check_index_tensor, check_indices, check_int, check_real, check_rows, distance_dtype
from ..geometry.neighbors import ball_query_packed as _ball_query_packed
from ..geometry.neighbors import interpolate as _interpolate
from ..geometry.neighbors import knn_packed as _knn_packed
from ._peer import check_same_clouds, checked_batch, checked_ends, checked_sample_ends, exact_sqrt, row_clouds
from .openpcdet_stack import stack_farthest_point_sample

__all__ = [
    "knn_query",
    "ball_query",
    "random_ball_query",
    "farthest_point_sampling",
    "grouping",
    "grouping2",
    "interpolation",
    "interpolation2",
    "query_and_group",
    "knn_query_and_group",
    "ball_query_and_group",
    "batch2offset",
    "offset2batch",
]

# Pointcept's ball queries count a point within sqrt(1e-5) of the centre whatever min_radius is;
# a ball of at least this radius holds them (0.0032^2 > 1e-5).
_SELF_RADIUS = 0.0032


def _clouds(
    xyz: Tensor, offset: Tensor, new_xyz: Optional[Tensor], new_offset: Optional[Tensor], host: bool = False
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The packed points and queries with their checked (B + 1,) int64 offsets; the queries are
    the points when new_xyz or new_offset is None (as Pointcept)."""
    check_coords(xyz, "xyz", "(n, 3)", 2)
    offsets = checked_ends(offset, "offset", xyz.shape[0], "xyz", xyz, host)
    if new_xyz is None or new_offset is None:
        return xyz, offsets, xyz, offsets
    check_coords(new_xyz, "new_xyz", "(m, 3)", 2)
    new_offsets = checked_ends(new_offset, "new_offset", new_xyz.shape[0], "new_xyz", xyz, host)
    check_same_clouds(offset, "offset", new_offset, "new_offset")
    return xyz, offsets, new_xyz, new_offsets


def _check_radii(max_radius: float, min_radius: float) -> None:
    """Pointcept asserts min_radius < max_radius."""
    check_real(max_radius, "max_radius", 0.0, True)
    check_real(min_radius, "min_radius")
    if not min_radius < max_radius:
        raise ValueError(
            "min_radius must be below max_radius, got min_radius = "
            + str(min_radius)
            + " and max_radius = "
            + str(max_radius)
        )


def knn_query(
    nsample: int, xyz: Tensor, offset: Tensor, new_xyz: Optional[Tensor] = None, new_offset: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """The ``nsample`` nearest points of each query in its cloud (queries = xyz when new_xyz or
    new_offset is None) -> (idx (m, nsample) int32 into the packed rows, nearest first, -1 past the
    cloud's points; dist (m, nsample) Euclidean, +inf there). No gradient, as Pointcept."""
    nsample = check_int(nsample, "nsample")
    xyz, offsets, new_xyz, new_offsets = _clouds(xyz, offset, new_xyz, new_offset)
    return _knn(nsample, xyz, offsets, new_xyz, new_offsets)


def _knn(nsample: int, xyz: Tensor, offsets: Tensor, new_xyz: Tensor, new_offsets: Tensor) -> Tuple[Tensor, Tensor]:
    idx, d2 = _knn_packed(new_xyz, new_offsets, xyz, offsets, nsample)
    return idx.int(), exact_sqrt(d2.detach())


def _squared(a: Tensor, b: Tensor) -> Tensor:
    """pointops' squared distance (dx*dx + dy*dy) + dz*dz in the compute type."""
    dtype = distance_dtype(a)
    d = a.to(dtype) - b.to(dtype)
    return (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]


def _pointcept_ball(
    xyz: Tensor, offsets: Tensor, new_xyz: Tensor, new_offsets: Tensor, max_radius: float, min_radius: float, slots: int
) -> Tuple[Tensor, Tensor, Tensor]:
    """The first ``slots`` points by row of each query's cloud within max(max_radius, 0.0032),
    then Pointcept's test: d2 <= 1e-5, or min_radius^2 <= d2 < max_radius^2 (radii squared in the
    compute type). Returns (rows (m, slots) int64, -1 where none; d2 (m, slots); kept (m, slots))."""
    rows, _ = _ball_query_packed(
        new_xyz, new_offsets, xyz, offsets, max(max_radius, _SELF_RADIUS), slots, pad="minus_one"
    )
    d2 = _squared(xyz[rows.clamp(min=0)], new_xyz[:, None, :])
    r_max = torch.tensor(max_radius, dtype=d2.dtype, device=d2.device)
    r_min = torch.tensor(min_radius, dtype=d2.dtype, device=d2.device)
    kept = (rows >= 0) & ((d2 <= 1e-5) | ((d2 >= r_min * r_min) & (d2 < r_max * r_max)))
    return rows, d2, kept


def ball_query(
    nsample: int,
    max_radius: float,
    min_radius: float,
    xyz: Tensor,
    offset: Tensor,
    new_xyz: Optional[Tensor] = None,
    new_offset: Optional[Tensor] = None,
    capacity: int = 2048,
) -> Tuple[Tensor, Tensor]:
    """Pointcept's ball query: each query's candidates (points of its cloud with d2 <= 1e-5 or
    min_radius^2 <= d2 < max_radius^2) sorted by distance; with at most ``nsample`` of them, all
    of them then -1 / +inf; with c > nsample, the candidates at ranks int(c / nsample * i) (float32,
    as Pointcept), i < nsample. -> (idx (m, nsample) int32, dist (m, nsample) Euclidean)."""
    nsample = check_int(nsample, "nsample", 1)
    capacity = check_int(capacity, "capacity", 1)
    _check_radii(max_radius, min_radius)
    xyz, offsets, new_xyz, new_offsets = _clouds(xyz, offset, new_xyz, new_offset)
    rows, d2, kept = _pointcept_ball(xyz, offsets, new_xyz, new_offsets, max_radius, min_radius, capacity)
    inf = torch.full_like(d2, float("inf"))
    values, order = torch.sort(torch.where(kept, d2, inf), dim=1, stable=True)
    ranked = torch.gather(rows, 1, order)
    count = kept.sum(1, keepdim=True)
    i = torch.arange(nsample, device=rows.device)
    spread = ((count.to(torch.float32) / nsample) * i.to(torch.float32)).to(torch.int64)
    pick = torch.where(count > nsample, spread, i.expand(count.shape[0], -1)).clamp(max=max(capacity - 1, 0))
    found = (i < count) | (count > nsample)
    idx = torch.where(found, torch.gather(ranked, 1, pick), torch.full_like(pick, -1))
    dist = torch.where(
        found, exact_sqrt(torch.gather(values, 1, pick)), torch.full_like(pick, float("inf"), dtype=values.dtype)
    )
    return idx.int(), dist.detach()


def random_ball_query(
    nsample: int,
    max_radius: float,
    min_radius: float,
    xyz: Tensor,
    offset: Tensor,
    new_xyz: Optional[Tensor] = None,
    new_offset: Optional[Tensor] = None,
    capacity: int = 2048,
) -> Tuple[Tensor, Tensor]:
    """Pointcept's random ball query: each cloud's points in a random order (torch's generator),
    the first ``nsample`` candidates (d2 <= 1e-5 or min_radius^2 <= d2 < max_radius^2) in that
    order -> (idx (m, nsample) int32, -1 past them; dist (m, nsample) Euclidean, +inf there)."""
    nsample = check_int(nsample, "nsample", 1)
    capacity = check_int(capacity, "capacity", 1)
    _check_radii(max_radius, min_radius)
    xyz, offsets, new_xyz, new_offsets = _clouds(xyz, offset, new_xyz, new_offset)
    n = xyz.shape[0]
    cloud = row_clouds(offsets, n).to(torch.float64)
    order = torch.argsort(cloud + torch.rand(n, dtype=torch.float64, device=xyz.device))  # shuffled within each cloud
    shuffled = xyz[order]
    plain = min_radius == 0.0 and max_radius >= _SELF_RADIUS  # every point of the ball is a candidate
    rows, d2, kept = _pointcept_ball(
        shuffled, offsets, new_xyz, new_offsets, max_radius, min_radius, nsample if plain else max(capacity, nsample)
    )
    position = torch.arange(rows.shape[1], device=rows.device).expand_as(rows)
    first = torch.sort(torch.where(kept, position, torch.full_like(position, rows.shape[1])), dim=1).values[:, :nsample]
    found = first < rows.shape[1]
    first = first.clamp(max=rows.shape[1] - 1)
    idx = torch.where(found, order[torch.gather(rows, 1, first).clamp(min=0)], torch.full_like(first, -1))
    dist = torch.where(
        found, exact_sqrt(torch.gather(d2, 1, first)), torch.full_like(first, float("inf"), dtype=d2.dtype)
    )
    return idx.int(), dist.detach()


def farthest_point_sampling(xyz: Tensor, offset: Tensor, new_offset: Tensor) -> Tensor:
    """Farthest point sampling of each packed cloud from its first point, new_offset[i] - new_offset[i - 1]
    picks from cloud i -> (new_offset[-1],) int32 rows, cloud after cloud (new_offset is read back to
    the host once; Pointcept reads it too)."""
    check_coords(xyz, "xyz", "(n, 3)", 2)
    offsets = checked_ends(offset, "offset", xyz.shape[0], "xyz", xyz, True)
    new_offsets = checked_sample_ends(new_offset, "new_offset", xyz, "xyz", True)
    check_same_clouds(offset, "offset", new_offset, "new_offset")
    per_cloud = torch.diff(new_offsets).tolist()
    return stack_farthest_point_sample(xyz, torch.diff(offsets), per_cloud)


def grouping(
    idx: Tensor, feat: Tensor, xyz: Tensor, new_xyz: Optional[Tensor] = None, with_xyz: bool = False
) -> Tensor:
    """Pointcept's grouping: (m, nsample) indices (-1: none) -> features (m, nsample, c), zeros for
    -1; with_xyz, the neighbours' coordinates relative to new_xyz (zeros for -1) in front."""
    if new_xyz is None:
        new_xyz = xyz
    _check_grouping(idx, feat, "feat", xyz, new_xyz, with_xyz)
    m, nsample, c = idx.shape[0], idx.shape[1], feat.shape[1]
    xyz = torch.cat([xyz, xyz.new_zeros((1, 3))], dim=0)
    feat = torch.cat([feat, feat.new_zeros((1, c))], dim=0)
    grouped_feat = feat[idx.view(-1).long(), :].view(m, nsample, c)
    if with_xyz:
        mask = torch.sign(idx + 1)
        grouped_xyz = xyz[idx.view(-1).long(), :].view(m, nsample, 3) - new_xyz.unsqueeze(1)
        grouped_xyz = torch.einsum("n s c, n s -> n s c", grouped_xyz, mask.to(grouped_xyz.dtype))
        return torch.cat((grouped_xyz, grouped_feat), -1)
    return grouped_feat


def _check_grouping(
    idx: Tensor, feat: Tensor, feat_name: str, xyz: Optional[Tensor], new_xyz: Optional[Tensor], with_xyz: bool
) -> None:
    """Grouping's arguments: idx (m, nsample) rows of feat (n, c) or -1 (Pointcept would read
    feat[-5] for -5: refused); with coordinates, xyz (n, 3) beside feat and new_xyz (m, 3)."""
    check_index_tensor(idx, "idx", "(m, nsample)", 2)
    check_coords(feat, feat_name, "(n, c)", 2, -1)
    if with_xyz and xyz is not None and new_xyz is not None:
        check_coords(xyz, "xyz", "(n, 3)", 2)
        check_rows(feat, feat_name, xyz.shape[0], "xyz")
        check_coords(new_xyz, "new_xyz", "(m, 3)", 2)
        check_rows(idx, "idx", new_xyz.shape[0], "new_xyz")
    check_indices(idx, "idx", feat.shape[0], feat_name)


def _gather_rows(values: Tensor, idx: Tensor) -> Tensor:
    """values (n, c), idx (m, s) -> (m, s, c), zeros where idx is outside [0, n)."""
    n = values.shape[0]
    flat = idx.reshape(-1).long()
    valid = (flat >= 0) & (flat < n)
    if n == 0:
        return values.new_zeros((idx.shape[0], idx.shape[1], values.shape[1]))
    out = values.index_select(0, torch.where(valid, flat, torch.zeros_like(flat)))
    out = torch.where(valid[:, None], out, torch.zeros_like(out))
    return out.view(idx.shape[0], idx.shape[1], values.shape[1])


def grouping2(input: Tensor, idx: Tensor) -> Tensor:
    """Pointcept's Grouping.apply: (n, c) features, (m, nsample) indices -> (m, nsample, c),
    differentiable in the features; zeros for -1."""
    _check_grouping(idx, input, "input", None, None, False)
    return _gather_rows(input, idx)


def interpolation(xyz: Tensor, new_xyz: Tensor, feat: Tensor, offset: Tensor, new_offset: Tensor, k: int = 3) -> Tensor:
    """Features of the packed points ``xyz`` (n, 3) carried to ``new_xyz`` (m', 3): inverse-distance
    weights (1 / (d + 1e-8), normalised) of the k nearest, summed in order -> (m', c),
    differentiable in ``feat``."""
    k = check_int(k, "k", 1)
    xyz, offsets, new_xyz, new_offsets = _clouds(xyz, offset, new_xyz, new_offset)
    check_coords(feat, "feat", "(n, c)", 2, -1)
    check_rows(feat, "feat", xyz.shape[0], "xyz")
    idx, dist = _knn(k, xyz, offsets, new_xyz, new_offsets)
    dist_recip = 1.0 / (dist + 1e-8)
    norm = torch.sum(dist_recip, dim=1, keepdim=True)
    weight = dist_recip / norm
    return _interpolate(feat[None], idx.long()[None], weight.to(feat.dtype)[None])[0]


def interpolation2(
    xyz: Tensor, new_xyz: Tensor, input: Tensor, offset: Tensor, new_offset: Tensor, k: int = 3
) -> Tensor:
    """Pointcept's Interpolation.apply: :func:`interpolation`'s values and gradient."""
    return interpolation(xyz, new_xyz, input, offset, new_offset, k)


def query_and_group(
    nsample: int,
    xyz: Tensor,
    new_xyz: Optional[Tensor],
    feat: Tensor,
    idx: Optional[Tensor],
    offset: Tensor,
    new_offset: Tensor,
    dilation: int = 0,
    with_feat: bool = True,
    with_xyz: bool = True,
):
    """Pointcept's query_and_group: the kNN of each query with ``dilation`` (every (dilation + 1)-th
    of the 1 + (nsample - 1)(dilation + 1) nearest; a cloud with fewer points spreads the picks over
    its points, as Pointcept's soft dilation), then grouping -> (new_feat (m, nsample, 3 + c) or
    (m, nsample, c), idx (m, nsample)), or idx alone when with_feat is False."""
    if new_xyz is None:
        new_xyz = xyz
    nsample = check_int(nsample, "nsample", 1)
    dilation = check_int(dilation, "dilation")
    xyz, offsets, new_xyz, new_offsets = _clouds(xyz, offset, new_xyz, new_offset)
    if with_feat:
        check_coords(feat, "feat", "(n, c)", 2, -1)
        check_rows(feat, "feat", xyz.shape[0], "xyz")
    if idx is not None:
        check_index_tensor(idx, "idx", "(m, nsample)", 2)
        check_rows(idx, "idx", new_xyz.shape[0], "new_xyz")
        check_indices(idx, "idx", xyz.shape[0], "xyz")
    else:
        total = 1 + (nsample - 1) * (dilation + 1)
        idx_no_dilation, _ = _knn(total, xyz, offsets, new_xyz, new_offsets)
        sizes = torch.diff(offsets)
        n_row = sizes[row_clouds(new_offsets, new_xyz.shape[0])].to(torch.float64)
        i = torch.arange(nsample, device=xyz.device, dtype=torch.float64)
        if nsample > 1:
            soft = torch.where(n_row < total, (n_row - 1) / (nsample - 1) - 1, torch.full_like(n_row, float(dilation)))
            column = ((soft[:, None] + 1) * i).to(torch.int64)
        else:
            column = torch.zeros((new_xyz.shape[0], 1), dtype=torch.int64, device=xyz.device)
        idx = torch.gather(idx_no_dilation, 1, column.clamp(0, total - 1))
    if not with_feat:
        return idx
    grouped_xyz = _gather_rows(xyz, idx) - new_xyz.unsqueeze(1)
    grouped_xyz = torch.where((idx >= 0)[..., None], grouped_xyz, torch.zeros_like(grouped_xyz))
    grouped_feat = _gather_rows(feat, idx)
    if with_xyz:
        return torch.cat((grouped_xyz, grouped_feat), -1), idx
    return grouped_feat, idx


def knn_query_and_group(
    feat: Tensor,
    xyz: Tensor,
    offset: Optional[Tensor] = None,
    new_xyz: Optional[Tensor] = None,
    new_offset: Optional[Tensor] = None,
    idx: Optional[Tensor] = None,
    nsample: Optional[int] = None,
    with_xyz: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Pointcept's knn_query_and_group: :func:`knn_query` (unless ``idx`` is given), then
    :func:`grouping` -> (grouped (m, nsample, [3 +] c), idx)."""
    if idx is None:
        if nsample is None or offset is None:
            raise ValueError(
                "nsample and offset must be given when idx is None, got nsample = "
                + str(nsample)
                + " and offset "
                + ("None" if offset is None else "given")
            )
        idx, _ = knn_query(nsample, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def ball_query_and_group(
    feat: Tensor,
    xyz: Tensor,
    offset: Optional[Tensor] = None,
    new_xyz: Optional[Tensor] = None,
    new_offset: Optional[Tensor] = None,
    idx: Optional[Tensor] = None,
    max_radio: Optional[float] = None,
    min_radio: float = 0,
    nsample: Optional[int] = None,
    with_xyz: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Pointcept's ball_query_and_group: :func:`ball_query` (unless ``idx`` is given), then
    :func:`grouping`."""
    if idx is None:
        if nsample is None or offset is None or max_radio is None:
            raise ValueError(
                "nsample, offset and max_radio must be given when idx is None, got nsample = "
                + str(nsample)
                + ", offset "
                + ("None" if offset is None else "given")
                + " and max_radio = "
                + str(max_radio)
            )
        idx, _ = ball_query(nsample, max_radio, min_radio, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def offset2batch(offset: Tensor) -> Tensor:
    """(b,) cumulative ends -> (offset[-1],) int64 cloud of each point."""
    check_index_tensor(offset, "offset", "(b,) cumulative ends", 1)
    counts = torch.diff(checked_sample_ends(offset, "offset", offset, "offset", True))
    return torch.repeat_interleave(torch.arange(offset.shape[0], device=offset.device), counts)


def batch2offset(batch: Tensor) -> Tensor:
    """(n,) cloud of each point -> (b,) int32 cumulative ends."""
    check_index_tensor(batch, "batch", "(n,) sorted cloud index of every point", 1)
    checked_batch(batch, "batch", batch.shape[0], "batch", batch, -1, True)
    return torch.cumsum(batch.bincount(), dim=0).int()
