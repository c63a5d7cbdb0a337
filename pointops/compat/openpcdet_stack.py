"""Drop-in replacements for OpenPCDet's ``pcdet.ops.pointnet2.pointnet2_stack`` (``pointnet2_utils``
and ``pointnet2_modules``): PointNet++ on packed ("stacked") clouds with per-cloud counts, the
layout of PV-RCNN's voxel set abstraction and point head::

    # from pcdet.ops.pointnet2.pointnet2_stack import pointnet2_modules, pointnet2_utils
    from pointops.nn import stack as pointnet2_stack_modules
    from pointops.nn import stack as pointnet2_stack_utils

(:mod:`pointops.nn` hands this module on as ``pointops.nn.stack``.) Clouds come as OpenPCDet passes them: ``xyz`` (N1 + N2 + ..., 3) with ``xyz_batch_cnt`` (B,) int32
[N1, N2, ...], centres ``new_xyz`` (M1 + M2 + ..., 3) with ``new_xyz_batch_cnt``. Every function
takes OpenPCDet's arguments in its order and returns its shapes and dtypes: ``ball_query`` gives
(M, nsample) int32 indices *within* each centre's cloud and the (M,) mask of empty balls (their rows
zeroed), ``grouping_operation`` (M, C, nsample), ``three_nn`` Euclidean distances and int32 indices
into the stacked rows, ``stack_farthest_point_sample`` int32 indices into the stacked rows. The
clouds run through pointops' packed ops (``ball_query_packed``, ``knn_packed``, ``fps_packed``,
``interpolate``) in one call each: nothing loops over clouds in Python, and nothing reads the
counts back to the host (``stack_farthest_point_sample`` with per-cloud sample counts reads them
once, as OpenPCDet does). The same rules as :mod:`pointops.compat.openpcdet` hold (lowest-index ties, exact
distances, CPU and CUDA alike, points with NaN/Inf never found), and in addition:

* ``grouping_operation`` gives zeros for an index -1 or past its cloud (OpenPCDet reads past the
  cloud, mmcv gives zeros) and refuses one below -1;
* the counts must be >= 0 and add up to the rows, as OpenPCDet asserts, checked without reading
  them back to the host (a device-side assert on CUDA: docs/compat.md, "Checked inputs");
* the vector-pool ops of PV-RCNN++ find each centre's neighbours with
  :func:`pointops.cube_query_packed`: OpenPCDet's cube (or closed ball) in index order, the
  interpolation's first 1,000 of them (OpenPCDet's per-centre buffer), the voxel query's all of
  them (sized from the data: one host read, as OpenPCDet's retry loop reads its total).
"""

from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

from .._checks import check_coords, check_index_tensor, check_int, check_real, check_rows, require
from ..geometry.cube_query import cube_query_packed as _cube_query_packed
from ..geometry.neighbors import ball_query_packed as _ball_query_packed
from ..geometry.neighbors import interpolate as _interpolate
from ..geometry.neighbors import knn_packed as _knn_packed
from ..sampling.ops import farthest_point_sampling_packed
from ._peer import (
    NoGradFunction,
    check_same_clouds,
    check_scales,
    checked_counts,
    counts_to_offsets,
    exact_sqrt,
    non_differentiable,
    row_clouds,
    shared_mlp2d,
    summing_type,
)
from .openpcdet import FarthestPointSampling, farthest_point_sample, furthest_point_sample  # noqa: F401  (pointnet2_stack's too)

__all__ = [
    "BallQuery",
    "ball_query",
    "GroupingOperation",
    "grouping_operation",
    "QueryAndGroup",
    "FarthestPointSampling",
    "farthest_point_sample",
    "furthest_point_sample",
    "StackFarthestPointSampling",
    "stack_farthest_point_sample",
    "ThreeNN",
    "three_nn",
    "ThreeInterpolate",
    "three_interpolate",
    "ThreeNNForVectorPoolByTwoStep",
    "three_nn_for_vector_pool_by_two_step",
    "VectorPoolWithVoxelQuery",
    "vector_pool_with_voxel_query_op",
    "build_local_aggregation_module",
    "StackSAModuleMSG",
    "StackPointnetFPModule",
    "VectorPoolLocalInterpolateModule",
    "VectorPoolAggregationModule",
    "VectorPoolAggregationModuleMSG",
]


# ---- pointnet2_stack/pointnet2_utils.py ----------------------------------------------------------


def stacked_clouds(
    xyz: Tensor,
    xyz_batch_cnt: Tensor,
    new_xyz: Tensor,
    new_xyz_batch_cnt: Tensor,
    names: Tuple[str, str, str, str] = ("xyz", "xyz_batch_cnt", "new_xyz", "new_xyz_batch_cnt"),
    host: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Two stacked clouds of one call, checked under the caller's ``names``: points (N, 3) and
    (M, 3), their counts adding up to N and M, as many clouds in both. Returns their (B + 1,)
    int64 offsets."""
    check_coords(xyz, names[0], "(N1 + N2 + ..., 3)", 2)
    check_coords(new_xyz, names[2], "(M1 + M2 + ..., 3)", 2)
    offsets = checked_counts(xyz_batch_cnt, names[1], xyz.shape[0], names[0], xyz, host)
    new_offsets = checked_counts(new_xyz_batch_cnt, names[3], new_xyz.shape[0], names[2], xyz, host)
    check_same_clouds(xyz_batch_cnt, names[1], new_xyz_batch_cnt, names[3])
    return offsets, new_offsets


def _check_local_indices(idx: Tensor, name: str) -> None:
    """Indices within each row's cloud: an index past its cloud groups zeros (OpenPCDet's
    ball_query gives 0 for a centre of an empty cloud), -1 is none, below -1 is refused."""
    below = idx < -1
    require(~below.any(), name + " must hold indices >= -1 (-1: none)", False, name, idx, below)


def ball_query(
    radius: float, nsample: int, xyz: Tensor, xyz_batch_cnt: Tensor, new_xyz: Tensor, new_xyz_batch_cnt: Tensor
) -> Tuple[Tensor, Tensor]:
    """OpenPCDet's stacked ball query: for each centre of ``new_xyz`` (M, 3), the first ``nsample``
    points of its cloud in index order with squared distance < radius^2, as indices (M, nsample)
    int32 within the cloud, the row padded with its first hit; and ``empty_ball_mask`` (M,) bool,
    the centres with no hit, whose rows are zeros."""
    radius = check_real(radius, "radius")
    nsample = check_int(nsample, "nsample")
    offsets, new_offsets = stacked_clouds(xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt)
    return _ball_query(radius, nsample, xyz, offsets, new_xyz, new_offsets)


def _ball_query(
    radius: float, nsample: int, xyz: Tensor, offsets: Tensor, new_xyz: Tensor, new_offsets: Tensor
) -> Tuple[Tensor, Tensor]:
    indices, counts = _ball_query_packed(new_xyz, new_offsets, xyz, offsets, radius, nsample, pad="first")
    start = offsets[row_clouds(new_offsets, new_xyz.shape[0])]
    local = torch.where(indices >= 0, indices - start[:, None], torch.zeros_like(indices))
    return local.int(), counts == 0


def grouping_operation(features: Tensor, features_batch_cnt: Tensor, idx: Tensor, idx_batch_cnt: Tensor) -> Tensor:
    """(N1 + N2 + ..., C) features, (M1 + M2 + ..., nsample) indices within each row's cloud ->
    (M, C, nsample): features[start of the row's cloud + idx]; zeros where idx is -1 or past its
    cloud (an index below -1 is refused). Differentiable in ``features`` (plain torch)."""
    return grouping_checked(
        features, features_batch_cnt, idx, idx_batch_cnt, ("features", "features_batch_cnt", "idx", "idx_batch_cnt")
    )


def grouping_checked(
    features: Tensor, features_batch_cnt: Tensor, idx: Tensor, idx_batch_cnt: Tensor, names: Tuple[str, str, str, str]
) -> Tensor:
    """:func:`grouping_operation` with its arguments checked under the caller's ``names``."""
    check_coords(features, names[0], "(N1 + N2 + ..., C)", 2, -1)
    check_index_tensor(idx, names[2], "(M1 + M2 + ..., nsample)", 2)
    offsets = checked_counts(features_batch_cnt, names[1], features.shape[0], names[0], features)
    idx_offsets = checked_counts(idx_batch_cnt, names[3], idx.shape[0], names[2], features)
    check_same_clouds(features_batch_cnt, names[1], idx_batch_cnt, names[3])
    _check_local_indices(idx, names[2])
    return _grouping(features, offsets, idx, idx_offsets)


def _grouping(features: Tensor, offsets: Tensor, idx: Tensor, idx_offsets: Tensor) -> Tensor:
    rows, nsample = idx.shape[0], idx.shape[1]
    channels = features.shape[1]
    cloud = row_clouds(idx_offsets, rows)
    start, size = offsets[cloud], (offsets[1:] - offsets[:-1])[cloud]
    local = idx.long()
    valid = (local >= 0) & (local < size[:, None])
    if features.shape[0] == 0:
        return features.new_zeros((rows, channels, nsample))
    flat = torch.where(valid, local + start[:, None], torch.zeros_like(local)).reshape(-1)
    gathered = summing_type(features).index_select(0, flat).reshape(rows, nsample, channels)
    gathered = torch.where(valid[..., None], gathered, torch.zeros_like(gathered))
    return gathered.permute(0, 2, 1).contiguous().to(features.dtype)


def three_nn(
    unknown: Tensor, unknown_batch_cnt: Tensor, known: Tensor, known_batch_cnt: Tensor
) -> Tuple[Tensor, Tensor]:
    """The 3 nearest ``known`` points of each ``unknown`` point within its cloud: (dist (N, 3)
    Euclidean, idx (N, 3) int32 into the stacked rows of ``known``). A cloud with fewer than 3
    known points pads with its first row and distance +inf, as OpenPCDet."""
    offsets, unknown_offsets = stacked_clouds(
        known, known_batch_cnt, unknown, unknown_batch_cnt, ("known", "known_batch_cnt", "unknown", "unknown_batch_cnt")
    )
    return _three_nn(unknown, unknown_offsets, known, offsets)


def _three_nn(unknown: Tensor, unknown_offsets: Tensor, known: Tensor, offsets: Tensor) -> Tuple[Tensor, Tensor]:
    idx, d2 = _knn_packed(unknown, unknown_offsets, known, offsets, 3)
    start = offsets[row_clouds(unknown_offsets, unknown.shape[0])]
    idx = torch.where(idx >= 0, idx, start[:, None].expand_as(idx))
    return exact_sqrt(d2.detach()), idx.int()


def three_interpolate(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    """(M1 + M2 + ..., C) features, (N, 3) indices into its rows, (N, 3) weights -> (N, C):
    ``w0 * f[idx0] + w1 * f[idx1] + w2 * f[idx2]`` (pointops' ``interpolate`` op, differentiable
    in features and weights); an index -1 or past the rows (three_nn's padding of an empty cloud)
    adds nothing, one below -1 is refused."""
    check_coords(features, "features", "(M1 + M2 + ..., C)", 2, -1)
    check_index_tensor(idx, "idx", "(N, 3)", 2)
    check_coords(weight, "weight", "(N, 3)", 2, idx.shape[1])
    check_rows(weight, "weight", idx.shape[0], "idx")
    _check_local_indices(idx, "idx")
    return _three_interpolate(features, idx, weight)


def _three_interpolate(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    out = _interpolate(features[None], idx.long()[None], weight.to(features.dtype)[None])
    return out[0]


def stack_farthest_point_sample(xyz: Tensor, xyz_batch_cnt: Tensor, npoint: Union[int, List[int], Tensor]) -> Tensor:
    """Farthest point sampling of each stacked cloud from its first point: ``npoint`` picks per
    cloud (an int, or a list / tensor of per-cloud counts) -> (sum of the counts,) int32 indices
    into the stacked rows, cloud after cloud. Past a cloud's last point the picks repeat in order;
    an empty cloud gives its start row, as OpenPCDet. A tensor of counts is read back to the host
    once (OpenPCDet reads its sum)."""
    check_coords(xyz, "xyz", "(N1 + N2 + ..., 3)", 2)
    check_index_tensor(xyz_batch_cnt, "xyz_batch_cnt", "(B,) per-cloud counts", 1)
    per_cloud = _per_cloud_samples(npoint, xyz_batch_cnt)
    offsets = checked_counts(xyz_batch_cnt, "xyz_batch_cnt", xyz.shape[0], "xyz", xyz, per_cloud is not None)
    if per_cloud is None:
        k = check_int(npoint, "npoint")
    else:
        k = max(per_cloud) if per_cloud else 0
    # (B, k): past a cloud's points its picks again in order; all -1 for a cloud without a point
    indices = farthest_point_sampling_packed(xyz, offsets, k, pad="repeat").indices
    indices = torch.where(indices >= 0, indices, offsets[:-1, None].expand_as(indices))
    if per_cloud is None:
        return indices.reshape(-1).int()
    counts = torch.tensor(per_cloud, dtype=torch.int64, device=indices.device)
    total = sum(per_cloud)
    position = torch.arange(total, device=indices.device)
    cloud = row_clouds(counts_to_offsets(counts), total)
    j = position - counts_to_offsets(counts)[cloud]
    return indices.reshape(-1)[cloud * k + j].int()


def _per_cloud_samples(npoint: Union[int, List[int], Tensor], xyz_batch_cnt: Tensor) -> Optional[List[int]]:
    """A list or tensor of per-cloud sample counts as a list of ints >= 0, one per cloud (a tensor
    is read back to the host); None for one int."""
    if isinstance(npoint, Tensor):
        if npoint.dim() != 1 or npoint.is_floating_point() or npoint.dtype == torch.bool:
            raise ValueError(
                "npoint must be an int, or a list or (B,) integer tensor of per-cloud counts, got a "
                + str(npoint.dtype)
                + " tensor of shape "
                + str(list(npoint.shape))
            )
        values = npoint.tolist()
    elif isinstance(npoint, (list, tuple)):
        values = list(npoint)
    else:
        return None
    per_cloud = [check_int(v, "npoint[" + str(i) + "]") for i, v in enumerate(values)]
    if len(per_cloud) != xyz_batch_cnt.shape[0]:
        raise ValueError(
            "npoint must have one count per cloud ("
            + str(xyz_batch_cnt.shape[0])
            + ", as xyz_batch_cnt), got "
            + str(len(per_cloud))
        )
    return per_cloud


class BallQuery(NoGradFunction):
    """``BallQuery.apply(radius, nsample, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt)`` ->
    (idx, empty_ball_mask), no gradient."""

    @staticmethod
    def forward(ctx, radius, nsample, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt):
        return non_differentiable(ctx, ball_query(radius, nsample, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt))


class GroupingOperation(Function):
    """``GroupingOperation.apply(features, features_batch_cnt, idx, idx_batch_cnt)`` ->
    (M, C, nsample); the gradient of ``features`` adds the output's back at the grouped rows."""

    @staticmethod
    def forward(ctx, features, features_batch_cnt, idx, idx_batch_cnt):
        ctx.save_for_backward(features_batch_cnt, idx, idx_batch_cnt)
        ctx.shape = features.shape
        with torch.no_grad():
            return grouping_operation(features, features_batch_cnt, idx, idx_batch_cnt)

    @staticmethod
    def backward(ctx, grad_out):
        features_batch_cnt, idx, idx_batch_cnt = ctx.saved_tensors
        with torch.enable_grad():
            features = grad_out.new_zeros(ctx.shape).requires_grad_()
            out = grouping_operation(features, features_batch_cnt, idx, idx_batch_cnt)
            (grad,) = torch.autograd.grad(out, features, grad_out)
        return grad, None, None, None


class StackFarthestPointSampling(NoGradFunction):
    """``StackFarthestPointSampling.apply(xyz, xyz_batch_cnt, npoint)`` -> int32 indices, no gradient."""

    @staticmethod
    def forward(ctx, xyz, xyz_batch_cnt, npoint):
        return non_differentiable(ctx, stack_farthest_point_sample(xyz, xyz_batch_cnt, npoint))


class ThreeNN(NoGradFunction):
    """``ThreeNN.apply(unknown, unknown_batch_cnt, known, known_batch_cnt)`` -> (dist, idx), no gradient."""

    @staticmethod
    def forward(ctx, unknown, unknown_batch_cnt, known, known_batch_cnt):
        return non_differentiable(ctx, three_nn(unknown, unknown_batch_cnt, known, known_batch_cnt))


class ThreeInterpolate(Function):
    """``ThreeInterpolate.apply(features (M, C), idx (N, 3), weight (N, 3))`` -> (N, C); the
    gradient reaches ``features`` only, as in OpenPCDet."""

    @staticmethod
    def forward(ctx, features, idx, weight):
        ctx.save_for_backward(idx, weight)
        ctx.m = features.shape[0]
        return three_interpolate(features, idx, weight)

    @staticmethod
    def backward(ctx, grad_out):
        idx, weight = ctx.saved_tensors
        grad = grad_out.new_zeros((ctx.m, grad_out.shape[1]))
        for j in range(idx.shape[1]):
            index = idx[:, j].long()
            valid = (index >= 0) & (index < ctx.m)
            term = grad_out * torch.where(valid, weight[:, j], torch.zeros_like(weight[:, j]))[:, None].to(
                grad_out.dtype
            )
            # index_put_ with accumulate, not index_add: the same order of sums on every call (_row_sums)
            grad.index_put_((torch.where(valid, index, torch.zeros_like(index)),), term, accumulate=True)
        return grad, None, None


def _row_sums(n: int, index: Tensor, values: Tensor) -> Tensor:
    """(n, ...) sums of values' rows by index, added in the same order on every call: on CUDA
    index_put_ with accumulate sorts the index and adds each row's terms in turn, where index_add
    adds with atomics in whatever order the threads arrive (a different float sum per call)."""
    return values.new_zeros((n,) + tuple(values.shape[1:])).index_put_((index,), values, accumulate=True)


# ---- PV-RCNN++'s vector pool ------------------------------------------------------------------


def _neighbor_slots(
    support_xyz: Tensor,
    xyz_batch_cnt: Tensor,
    new_xyz: Tensor,
    new_xyz_batch_cnt: Tensor,
    distance: float,
    neighbor_type: int,
    k: int,
) -> Tuple[Tensor, Tensor]:
    """OpenPCDet's vector-pool neighbourhood of each centre of ``new_xyz`` (M, 3): the points of its
    cloud within ``distance`` of it, in index order: the cube |dx|, |dy|, |dz| <= distance, or
    (neighbor_type 1) the closed ball dx^2 + dy^2 + dz^2 <= distance^2. Returns (M, k) int64 rows
    of ``support_xyz``, the first k of them ascending, then -1; and (M,) int64 counts of them all
    (:func:`pointops.cube_query_packed`)."""
    offsets, new_offsets = stacked_clouds(
        support_xyz,
        xyz_batch_cnt,
        new_xyz,
        new_xyz_batch_cnt,
        ("support_xyz", "xyz_batch_cnt", "new_xyz", "new_xyz_batch_cnt"),
    )
    return _cube_query_packed(new_xyz, new_offsets, support_xyz, offsets, distance, k, neighbor_type == 1)


def three_nn_for_vector_pool_by_two_step(
    support_xyz: Tensor,
    xyz_batch_cnt: Tensor,
    new_xyz: Tensor,
    new_xyz_grid_centers: Tensor,
    new_xyz_batch_cnt: Tensor,
    max_neighbour_distance: float,
    nsample: int,
    neighbor_type: int,
    avg_length_of_neighbor_idxs: int,
    num_total_grids: int,
    neighbor_distance_multiplier: float,
    max_neighbors: int = 1000,
) -> Tuple[Tensor, Tensor, Tensor]:
    """PV-RCNN++'s local interpolation search. Step 1: each centre of ``new_xyz`` (M, 3) keeps the
    first points of its cloud, in index order, inside the cube of half-width
    ``max_neighbour_distance * neighbor_distance_multiplier`` around it (neighbor_type 1: the
    closed ball of that radius), at most ``max_neighbors`` of them (1,000: OpenPCDet's per-centre
    buffer) and at most ``nsample`` when nsample > 0, however many points the enclosing ball holds
    (:func:`_neighbor_slots`). Step 2: each of its grid centres (M, num_total_grids, 3) takes the 3
    nearest of those points (squared distances ``(dx*dx + dy*dy) + dz*dz``, ties to the lowest
    index; a kNN of the grid centres in one packed cloud per centre, no sort of the slots).

    Returns (dist (M, G, 3) Euclidean, idx (M, G, 3) int32 rows of ``support_xyz``, -1 and +inf
    distance where the centre has no neighbour, a second or third missing neighbour repeating the
    first, as OpenPCDet), and ``avg_length_of_neighbor_idxs`` back as a tensor (OpenPCDet's
    buffer-size hint; pointops needs none)."""
    max_neighbour_distance = check_real(max_neighbour_distance, "max_neighbour_distance")
    neighbor_distance_multiplier = check_real(neighbor_distance_multiplier, "neighbor_distance_multiplier")
    num_total_grids = check_int(num_total_grids, "num_total_grids", 1)
    max_neighbors = check_int(max_neighbors, "max_neighbors", 1)
    if new_xyz_grid_centers.numel() != new_xyz.shape[0] * num_total_grids * 3:
        raise ValueError(
            "new_xyz_grid_centers must hold num_total_grids = "
            + str(num_total_grids)
            + " (x, y, z) grid centres for each of the "
            + str(new_xyz.shape[0])
            + " rows of new_xyz, got shape "
            + str(list(new_xyz_grid_centers.shape))
        )
    limit = max_neighbors if nsample <= 0 else min(nsample, max_neighbors)
    neighbors, _ = _neighbor_slots(
        support_xyz,
        xyz_batch_cnt,
        new_xyz,
        new_xyz_batch_cnt,
        max_neighbour_distance * neighbor_distance_multiplier,
        neighbor_type,
        limit,
    )
    m, g, slots = new_xyz.shape[0], num_total_grids, neighbors.shape[1]
    device = new_xyz.device
    # Each centre's neighbours are one packed cloud of `slots` rows, NaN in the empty slots (never
    # a neighbour); its grid centres are that cloud's queries.
    padded = torch.cat([support_xyz, support_xyz.new_full((1, 3), float("nan"))])
    slot_xyz = padded[torch.where(neighbors >= 0, neighbors, support_xyz.shape[0])]
    starts = torch.arange(m + 1, device=device, dtype=torch.int64)
    idx, d2 = _knn_packed(
        new_xyz_grid_centers.reshape(m * g, 3), starts * g, slot_xyz.reshape(m * slots, 3), starts * slots, 3
    )
    rows = torch.where(idx >= 0, neighbors.reshape(-1)[idx.clamp(min=0)], torch.full_like(idx, -1))
    # a missing second or third neighbour repeats the first
    missing = rows < 0
    d2 = torch.where(missing, d2[:, :1].expand_as(d2), d2)
    rows = torch.where(missing, rows[:, :1].expand_as(rows), rows)
    return (
        exact_sqrt(d2.detach()).reshape(m, g, 3),
        rows.int().reshape(m, g, 3),
        torch.tensor(avg_length_of_neighbor_idxs),
    )


def vector_pool_with_voxel_query_op(
    support_xyz: Tensor,
    xyz_batch_cnt: Tensor,
    support_features: Tensor,
    new_xyz: Tensor,
    new_xyz_batch_cnt: Tensor,
    num_grid_x: int,
    num_grid_y: int,
    num_grid_z: int,
    max_neighbour_distance: float,
    num_c_out_each_grid: int,
    use_xyz: bool,
    num_mean_points_per_grid: int = 100,
    nsample: int = -1,
    neighbor_type: int = 0,
    pooling_type: int = 0,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """PV-RCNN++'s voxel-query vector pool. Each centre's neighbours, the points of its cloud in
    index order inside the cube of half-width ``max_neighbour_distance`` (neighbor_type 1: the
    closed ball), fall into a num_grid_x x num_grid_y x num_grid_z grid around it; the input
    channels fold into num_c_out_each_grid by summing channel i into i % num_c_out_each_grid.

    * pooling_type 0 (average): each grid cell gets the mean of its points' features and local
      offsets; with nsample > 0 only the first nsample neighbours count, as OpenPCDet.
    * pooling_type 1 ("random choice", OpenPCDet's first point): each cell gets its first
      neighbour in index order; with nsample > 0 only the first nsample cells to be filled are,
      in the order their first points come (OpenPCDet stops after nsample filled cells).

    No neighbour is dropped: the neighbour lists are sized from the data, which reads the largest
    count back to the host once (OpenPCDet reads its point total back too), and the grouped pairs
    a second time. Returns (new_features (M, G * num_c_out_each_grid), new_local_xyz (M, 3 G),
    num_mean_points_per_grid (1,) int32, point_cnt_of_grid (M, G) int32), differentiable in
    ``support_features``."""
    num_grid_x = check_int(num_grid_x, "num_grid_x", 1)
    num_grid_y = check_int(num_grid_y, "num_grid_y", 1)
    num_grid_z = check_int(num_grid_z, "num_grid_z", 1)
    max_neighbour_distance = check_real(max_neighbour_distance, "max_neighbour_distance")
    num_c_out_each_grid = check_int(num_c_out_each_grid, "num_c_out_each_grid", 1)
    num_total_grids = num_grid_x * num_grid_y * num_grid_z
    m, c_in = new_xyz.shape[0], support_features.shape[1]
    if c_in % num_c_out_each_grid != 0:  # OpenPCDet asserts it
        raise ValueError(
            "num_c_out_each_grid must divide the channels of support_features ("
            + str(c_in)
            + "), got "
            + str(num_c_out_each_grid)
        )
    device = new_xyz.device
    if pooling_type == 0 and nsample > 0:
        k = nsample
    else:
        _, every = _neighbor_slots(
            support_xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, max_neighbour_distance, neighbor_type, 0
        )
        k = int(every.max()) if m > 0 else 0
    neighbors, _ = _neighbor_slots(
        support_xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, max_neighbour_distance, neighbor_type, k
    )
    found = neighbors >= 0
    local = support_xyz[neighbors.clamp(min=0)] - new_xyz[:, None, :]  # (M, S, 3)
    # OpenPCDet's float arithmetic: cell = floor((local + r) / (r * 2 / n)) in the points' type
    r = torch.tensor(max_neighbour_distance, dtype=local.dtype, device=device)
    size = [r * 2 / n for n in (num_grid_x, num_grid_y, num_grid_z)]
    cell = [torch.floor((local[..., d] + r) / size[d]).long() for d in range(3)]
    grid = (cell[0] * num_grid_y + cell[1]) * num_grid_z + cell[2]
    grid = grid.clamp(0, num_total_grids - 1)
    if pooling_type == 1:  # the first neighbour of each cell (slots are in index order)
        position = torch.arange(neighbors.shape[1], device=device).expand_as(grid)
        first = torch.full((m, num_total_grids), neighbors.shape[1], dtype=torch.int64, device=device)
        first = first.scatter_reduce(
            1,
            torch.where(found, grid, torch.zeros_like(grid)),
            torch.where(found, position, torch.full_like(position, neighbors.shape[1])),
            "amin",
        )
        found = found & (torch.gather(first, 1, grid) == position)
        if nsample > 0:  # the first nsample cells to be filled
            found = found & (found.long().cumsum(1) <= nsample)
    pairs = found.nonzero()  # (F, 2): centre, slot
    centre, slot = pairs[:, 0], pairs[:, 1]
    rows = neighbors[centre, slot]
    bins = centre * num_total_grids + grid[centre, slot]
    folded = support_features.reshape(-1, c_in // num_c_out_each_grid, num_c_out_each_grid).sum(1)
    counts = _row_sums(m * num_total_grids, bins, torch.ones_like(bins))
    sums = _row_sums(m * num_total_grids, bins, folded[rows])
    xyz_sums = _row_sums(m * num_total_grids, bins, local[centre, slot])
    normalizer = counts.to(support_features.dtype).clamp(min=1e-6)[:, None]
    new_features = (sums / normalizer).reshape(m, -1)
    if use_xyz:
        new_local_xyz = (xyz_sums / normalizer.to(xyz_sums.dtype)).reshape(m, -1)
    else:
        new_local_xyz = xyz_sums.new_zeros((m, 3 * num_total_grids))
    point_cnt_of_grid = counts.reshape(m, num_total_grids).int()
    return new_features, new_local_xyz.detach(), torch.tensor([num_mean_points_per_grid]).int(), point_cnt_of_grid


class ThreeNNForVectorPoolByTwoStep(NoGradFunction):
    """``ThreeNNForVectorPoolByTwoStep.apply(...)``: :func:`three_nn_for_vector_pool_by_two_step`, no gradient."""

    @staticmethod
    def forward(
        ctx,
        support_xyz,
        xyz_batch_cnt,
        new_xyz,
        new_xyz_grid_centers,
        new_xyz_batch_cnt,
        max_neighbour_distance,
        nsample,
        neighbor_type,
        avg_length_of_neighbor_idxs,
        num_total_grids,
        neighbor_distance_multiplier,
    ):
        out = three_nn_for_vector_pool_by_two_step(
            support_xyz,
            xyz_batch_cnt,
            new_xyz,
            new_xyz_grid_centers,
            new_xyz_batch_cnt,
            max_neighbour_distance,
            nsample,
            neighbor_type,
            avg_length_of_neighbor_idxs,
            num_total_grids,
            neighbor_distance_multiplier,
        )
        return non_differentiable(ctx, out)


def _voxel_query_with(args: tuple, features: Tensor):
    """vector_pool_with_voxel_query_op of VectorPoolWithVoxelQuery's saved arguments (all but the
    features, in the op's order) and these features."""
    return vector_pool_with_voxel_query_op(*args[:2], features, *args[2:])


class VectorPoolWithVoxelQuery(Function):
    """``VectorPoolWithVoxelQuery.apply(...)``: :func:`vector_pool_with_voxel_query_op`, with the
    gradient of ``support_features``."""

    @staticmethod
    def forward(
        ctx,
        support_xyz,
        xyz_batch_cnt,
        support_features,
        new_xyz,
        new_xyz_batch_cnt,
        num_grid_x,
        num_grid_y,
        num_grid_z,
        max_neighbour_distance,
        num_c_out_each_grid,
        use_xyz,
        num_mean_points_per_grid=100,
        nsample=-1,
        neighbor_type=0,
        pooling_type=0,
    ):
        # every argument but the features, in order: backward calls the op again with them
        ctx.args = (support_xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, num_grid_x, num_grid_y, num_grid_z,
                    max_neighbour_distance, num_c_out_each_grid, use_xyz, num_mean_points_per_grid, nsample,
                    neighbor_type, pooling_type)  # fmt: skip
        ctx.features_shape, ctx.features_dtype = support_features.shape, support_features.dtype
        out = _voxel_query_with(ctx.args, support_features)
        ctx.mark_non_differentiable(out[1], out[2], out[3])
        return out

    @staticmethod
    def backward(ctx, grad_features, grad_local_xyz=None, grad_mean=None, grad_cnt=None):
        with torch.enable_grad():
            features = torch.zeros(
                ctx.features_shape, dtype=ctx.features_dtype, device=grad_features.device, requires_grad=True
            )
            out = _voxel_query_with(ctx.args, features)
            (grad,) = torch.autograd.grad(out[0], features, grad_features)
        return (None, None, grad) + (None,) * 12


# ---- pointnet2_stack/pointnet2_modules.py ------------------------------------------------------


def _shared_mlp1d(c_in: int, spec: List[int]) -> nn.Sequential:
    layers: List[nn.Module] = []
    for c in spec:
        layers.extend([nn.Conv1d(c_in, c, kernel_size=1, bias=False), nn.BatchNorm1d(c), nn.ReLU()])
        c_in = c
    return nn.Sequential(*layers)


class QueryAndGroup(nn.Module):
    def __init__(self, radius: float, nsample: int, use_xyz: bool = True):
        """Stacked ball query of ``radius`` keeping ``nsample`` points, then grouping of their
        coordinates relative to the centre (and features); empty balls group zeros."""
        super().__init__()
        self.radius, self.nsample, self.use_xyz = check_real(radius, "radius"), check_int(nsample, "nsample"), use_xyz

    def forward(
        self,
        xyz: Tensor,
        xyz_batch_cnt: Tensor,
        new_xyz: Tensor,
        new_xyz_batch_cnt: Tensor,
        features: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        """xyz (N, 3), new_xyz (M, 3), features (N, C) -> (new_features (M, 3 + C, nsample) (or C, or
        3 channels), idx (M, nsample) int32)."""
        offsets, new_offsets = _checked_group_inputs(xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features)
        return self.group(xyz, offsets, new_xyz, new_offsets, features)

    def group(
        self, xyz: Tensor, offsets: Tensor, new_xyz: Tensor, new_offsets: Tensor, features: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """:meth:`forward` on checked inputs, the counts as (B + 1,) offsets."""
        idx, empty_ball_mask = _ball_query(self.radius, self.nsample, xyz, offsets, new_xyz, new_offsets)
        grouped_xyz = _grouping(xyz, offsets, idx, new_offsets)  # (M, 3, nsample)
        grouped_xyz = grouped_xyz - new_xyz.unsqueeze(-1)
        keep = (~empty_ball_mask)[:, None, None]
        grouped_xyz = torch.where(keep, grouped_xyz, torch.zeros_like(grouped_xyz))
        if features is not None:
            grouped_features = _grouping(features, offsets, idx, new_offsets)
            grouped_features = torch.where(keep, grouped_features, torch.zeros_like(grouped_features))
            if self.use_xyz:
                return torch.cat([grouped_xyz, grouped_features], dim=1), idx
            return grouped_features, idx
        assert self.use_xyz, "Cannot have not features and not use xyz as a feature!"
        return grouped_xyz, idx


def _checked_group_inputs(
    xyz: Tensor, xyz_batch_cnt: Tensor, new_xyz: Tensor, new_xyz_batch_cnt: Tensor, features: Optional[Tensor]
) -> Tuple[Tensor, Tensor]:
    """The stacked clouds of a grouping layer and their features (N, C) beside xyz, checked once
    for all its scales; returns the offsets of xyz and new_xyz."""
    offsets, new_offsets = stacked_clouds(xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt)
    if features is not None:
        check_coords(features, "features", "(N1 + N2 + ..., C)", 2, -1)
        check_rows(features, "features", xyz.shape[0], "xyz")
    return offsets, new_offsets


def _init_weights(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Conv1d)):
            nn.init.kaiming_normal_(m.weight)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
            nn.init.constant_(m.weight, 1.0)
            nn.init.constant_(m.bias, 0)


class StackSAModuleMSG(nn.Module):
    """Set abstraction of stacked clouds with multi-scale grouping (PV-RCNN's VSA layer)."""

    def __init__(
        self,
        *,
        radii: List[float],
        nsamples: List[int],
        mlps: List[List[int]],
        use_xyz: bool = True,
        pool_method: str = "max_pool",
    ):
        """radii, nsamples: ball query radius and samples per scale; mlps: per scale the channels of
        the shared MLP ([C_in, ..., C_out]; 3 is added to C_in when use_xyz, on a copy: OpenPCDet
        adds it to the caller's list in place); pool_method: "max_pool" or "avg_pool"."""
        super().__init__()
        check_scales(radii, nsamples, mlps, pool_method)
        self.groupers = nn.ModuleList()
        self.mlps = nn.ModuleList()
        for i in range(len(radii)):
            self.groupers.append(QueryAndGroup(radii[i], nsamples[i], use_xyz=use_xyz))
            spec = list(mlps[i])
            if use_xyz:
                spec[0] += 3
            self.mlps.append(shared_mlp2d(spec))
        self.pool_method = pool_method
        self.init_weights()

    def init_weights(self):
        _init_weights(self)

    def forward(
        self,
        xyz: Tensor,
        xyz_batch_cnt: Tensor,
        new_xyz: Tensor,
        new_xyz_batch_cnt: Tensor,
        features: Optional[Tensor] = None,
        empty_voxel_set_zeros: bool = True,
    ) -> Tuple[Tensor, Tensor]:
        """xyz (N, 3), new_xyz (M, 3), features (N, C) -> (new_xyz, new_features (M, sum of mlps[k][-1]))."""
        new_features_list: List[Tensor] = []
        offsets, new_offsets = _checked_group_inputs(xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features)
        for grouper, mlp in zip(self.groupers, self.mlps):
            new_features, _ = grouper.group(xyz, offsets, new_xyz, new_offsets, features)  # (M, C, nsample)
            new_features = mlp(new_features.permute(1, 0, 2).unsqueeze(dim=0))  # (1, C, M, nsample)
            if self.pool_method == "max_pool":
                new_features = F.max_pool2d(new_features, kernel_size=[1, new_features.size(3)]).squeeze(dim=-1)
            elif self.pool_method == "avg_pool":
                new_features = F.avg_pool2d(new_features, kernel_size=[1, new_features.size(3)]).squeeze(dim=-1)
            else:
                raise NotImplementedError(self.pool_method)
            new_features_list.append(new_features.squeeze(dim=0).permute(1, 0))  # (M, C)
        return new_xyz, torch.cat(new_features_list, dim=1)


class StackPointnetFPModule(nn.Module):
    """Feature propagation between stacked clouds: inverse-distance interpolation of the 3
    nearest known points, then a shared MLP."""

    def __init__(self, *, mlp: List[int]):
        super().__init__()
        self.mlp = shared_mlp2d(mlp)

    def forward(
        self,
        unknown: Tensor,
        unknown_batch_cnt: Tensor,
        known: Tensor,
        known_batch_cnt: Tensor,
        unknown_feats: Optional[Tensor] = None,
        known_feats: Optional[Tensor] = None,
    ) -> Tensor:
        """unknown (N, 3), known (M, 3), unknown_feats (N, C1), known_feats (M, C2) -> (N, mlp[-1])."""
        offsets, unknown_offsets = stacked_clouds(
            known,
            known_batch_cnt,
            unknown,
            unknown_batch_cnt,
            ("known", "known_batch_cnt", "unknown", "unknown_batch_cnt"),
        )
        if known_feats is None:
            raise ValueError("known_feats must be a (M, C) tensor, got None")
        check_coords(known_feats, "known_feats", "(M1 + M2 + ..., C)", 2, -1)
        check_rows(known_feats, "known_feats", known.shape[0], "known")
        if unknown_feats is not None:
            check_coords(unknown_feats, "unknown_feats", "(N1 + N2 + ..., C)", 2, -1)
            check_rows(unknown_feats, "unknown_feats", unknown.shape[0], "unknown")
        dist, idx = _three_nn(unknown, unknown_offsets, known, offsets)
        dist_recip = 1.0 / (dist + 1e-8)
        norm = torch.sum(dist_recip, dim=-1, keepdim=True)
        weight = dist_recip / norm
        interpolated_feats = _three_interpolate(known_feats, idx, weight)
        if unknown_feats is not None:
            new_features = torch.cat([interpolated_feats, unknown_feats], dim=1)  # (N, C2 + C1)
        else:
            new_features = interpolated_feats
        new_features = self.mlp(new_features.permute(1, 0)[None, :, :, None])  # (1, C, N, 1)
        return new_features.squeeze(dim=0).squeeze(dim=-1).permute(1, 0)


class VectorPoolLocalInterpolateModule(nn.Module):
    """PV-RCNN++'s local interpolation: features at the centres of a num_voxels grid around each
    centre, interpolated from the 3 nearest of its neighbours (then an optional shared MLP)."""

    def __init__(
        self,
        mlp: Optional[List[int]],
        num_voxels: List[int],
        max_neighbour_distance: float,
        nsample: int,
        neighbor_type: int,
        use_xyz: bool = True,
        neighbour_distance_multiplier: float = 1.0,
        xyz_encoding_type: str = "concat",
    ):
        super().__init__()
        self.num_voxels = num_voxels
        self.num_total_grids = self.num_voxels[0] * self.num_voxels[1] * self.num_voxels[2]
        self.max_neighbour_distance = max_neighbour_distance
        self.neighbor_distance_multiplier = neighbour_distance_multiplier
        self.nsample = nsample
        self.neighbor_type = neighbor_type
        self.use_xyz = use_xyz
        self.xyz_encoding_type = xyz_encoding_type
        if mlp is not None:
            spec = list(mlp)
            if self.use_xyz:
                spec[0] += 9 if self.xyz_encoding_type == "concat" else 0
            self.mlp: Optional[nn.Sequential] = shared_mlp2d(spec)
        else:
            self.mlp = None
        self.num_avg_length_of_neighbor_idxs = 1000

    def forward(
        self,
        support_xyz: Tensor,
        support_features: Tensor,
        xyz_batch_cnt: Tensor,
        new_xyz: Tensor,
        new_xyz_grid_centers: Tensor,
        new_xyz_batch_cnt: Tensor,
    ) -> Tensor:
        """support_xyz (N, 3), support_features (N, C), new_xyz (M, 3), new_xyz_grid_centers
        (M, G, 3) -> (M G, C (+ 9)) (or the MLP's channels)."""
        with torch.no_grad():
            dist, idx, _ = three_nn_for_vector_pool_by_two_step(
                support_xyz,
                xyz_batch_cnt,
                new_xyz,
                new_xyz_grid_centers,
                new_xyz_batch_cnt,
                self.max_neighbour_distance,
                self.nsample,
                self.neighbor_type,
                self.num_avg_length_of_neighbor_idxs,
                self.num_total_grids,
                self.neighbor_distance_multiplier,
            )
        dist_recip = 1.0 / (dist + 1e-8)
        norm = torch.sum(dist_recip, dim=-1, keepdim=True)
        weight = dist_recip / torch.clamp_min(norm, min=1e-8)
        flat_idx = idx.reshape(-1, 3)
        empty_mask = flat_idx[:, 0] == -1
        flat_idx = torch.where(empty_mask[:, None], torch.zeros_like(flat_idx), flat_idx)
        interpolated_feats = three_interpolate(support_features, flat_idx, weight.reshape(-1, 3))
        interpolated_feats = interpolated_feats.reshape(idx.shape[0], idx.shape[1], -1)  # (M, G, C)
        if self.use_xyz:
            near_known_xyz = support_xyz[flat_idx.long()].reshape(-1, 3, 3)
            local_xyz = (new_xyz_grid_centers.reshape(-1, 1, 3) - near_known_xyz).reshape(-1, idx.shape[1], 9)
            if self.xyz_encoding_type == "concat":
                interpolated_feats = torch.cat((interpolated_feats, local_xyz), dim=-1)  # (M, G, 9 + C)
            else:
                raise NotImplementedError(self.xyz_encoding_type)
        new_features = interpolated_feats.reshape(-1, interpolated_feats.shape[-1])  # (M G, C)
        new_features = torch.where(empty_mask[:, None], torch.zeros_like(new_features), new_features)
        if self.mlp is not None:
            new_features = self.mlp(new_features.permute(1, 0)[None, :, :, None])
            new_features = new_features.squeeze(dim=0).squeeze(dim=-1).permute(1, 0)
        return new_features


class VectorPoolAggregationModule(nn.Module):
    """PV-RCNN++'s vector-pool aggregation of one radius (local interpolation or voxel pooling)."""

    def __init__(
        self,
        input_channels: int,
        num_local_voxel=(3, 3, 3),
        local_aggregation_type: str = "local_interpolation",
        num_reduced_channels: Optional[int] = 30,
        num_channels_of_local_aggregation: int = 32,
        post_mlps=(128,),
        max_neighbor_distance: Optional[float] = None,
        neighbor_nsample: int = -1,
        neighbor_type: int = 0,
        neighbor_distance_multiplier: float = 2.0,
    ):
        super().__init__()
        self.num_local_voxel = num_local_voxel
        self.total_voxels = self.num_local_voxel[0] * self.num_local_voxel[1] * self.num_local_voxel[2]
        self.local_aggregation_type = local_aggregation_type
        assert self.local_aggregation_type in ["local_interpolation", "voxel_avg_pool", "voxel_random_choice"]
        self.input_channels = input_channels
        self.num_reduced_channels = input_channels if num_reduced_channels is None else num_reduced_channels
        self.num_channels_of_local_aggregation = num_channels_of_local_aggregation
        self.max_neighbour_distance = max_neighbor_distance
        self.neighbor_nsample = neighbor_nsample
        self.neighbor_type = neighbor_type
        if self.local_aggregation_type == "local_interpolation":
            self.local_interpolate_module: Optional[VectorPoolLocalInterpolateModule] = (
                VectorPoolLocalInterpolateModule(
                    mlp=None,
                    num_voxels=self.num_local_voxel,
                    max_neighbour_distance=self.max_neighbour_distance,
                    nsample=self.neighbor_nsample,
                    neighbor_type=self.neighbor_type,
                    neighbour_distance_multiplier=neighbor_distance_multiplier,
                )
            )
            num_c_in = (self.num_reduced_channels + 9) * self.total_voxels
        else:
            self.local_interpolate_module = None
            num_c_in = (self.num_reduced_channels + 3) * self.total_voxels
        num_c_out = self.total_voxels * self.num_channels_of_local_aggregation
        self.separate_local_aggregation_layer = nn.Sequential(
            nn.Conv1d(num_c_in, num_c_out, kernel_size=1, groups=self.total_voxels, bias=False),
            nn.BatchNorm1d(num_c_out),
            nn.ReLU(),
        )
        self.post_mlps = _shared_mlp1d(num_c_out, list(post_mlps))
        self.num_mean_points_per_grid = 20
        self.init_weights()

    def init_weights(self):
        _init_weights(self)

    def extra_repr(self) -> str:
        return (
            f"radius={self.max_neighbour_distance}, local_voxels=({self.num_local_voxel}, "
            f"local_aggregation_type={self.local_aggregation_type}, "
            f"num_c_reduction={self.input_channels}->{self.num_reduced_channels}, "
            f"num_c_local_aggregation={self.num_channels_of_local_aggregation}"
        )

    def vector_pool_with_voxel_query(self, xyz, xyz_batch_cnt, features, new_xyz, new_xyz_batch_cnt):
        pooling_type = 0 if self.local_aggregation_type == "voxel_avg_pool" else 1
        new_features, new_local_xyz, _, point_cnt_of_grid = vector_pool_with_voxel_query_op(
            xyz,
            xyz_batch_cnt,
            features,
            new_xyz,
            new_xyz_batch_cnt,
            self.num_local_voxel[0],
            self.num_local_voxel[1],
            self.num_local_voxel[2],
            self.max_neighbour_distance,
            self.num_reduced_channels,
            True,
            self.num_mean_points_per_grid,
            self.neighbor_nsample,
            self.neighbor_type,
            pooling_type,
        )
        num_new_pts = new_features.shape[0]
        new_local_xyz = new_local_xyz.reshape(num_new_pts, -1, 3)  # (M, G, 3)
        new_features = new_features.reshape(num_new_pts, -1, self.num_reduced_channels)  # (M, G, C)
        new_features = torch.cat((new_local_xyz, new_features), dim=-1).reshape(num_new_pts, -1)
        return new_features, point_cnt_of_grid

    @staticmethod
    def get_dense_voxels_by_center(point_centers: Tensor, max_neighbour_distance: float, num_voxels) -> Tensor:
        """(N, 3) centres -> (N, total_voxels, 3) centres of the num_voxels grid of half-width
        max_neighbour_distance around each (x slowest, z fastest, as OpenPCDet's meshgrid)."""
        r = max_neighbour_distance
        device = point_centers.device
        axes = [torch.arange(-r + r / n, r - r / n + 1e-5, 2 * r / n, device=device) for n in num_voxels]
        x_offset, y_offset, z_offset = torch.meshgrid(axes[0], axes[1], axes[2], indexing="ij")
        xyz_offset = torch.stack((x_offset.reshape(-1), y_offset.reshape(-1), z_offset.reshape(-1)), dim=-1)
        return point_centers[:, None, :] + xyz_offset[None, :, :].to(point_centers.dtype)

    def vector_pool_with_local_interpolate(self, xyz, xyz_batch_cnt, features, new_xyz, new_xyz_batch_cnt):
        assert self.local_interpolate_module is not None
        voxel_centers = self.get_dense_voxels_by_center(new_xyz, self.max_neighbour_distance, self.num_local_voxel)
        voxel_features = self.local_interpolate_module(
            support_xyz=xyz,
            support_features=features,
            xyz_batch_cnt=xyz_batch_cnt,
            new_xyz=new_xyz,
            new_xyz_grid_centers=voxel_centers,
            new_xyz_batch_cnt=new_xyz_batch_cnt,
        )  # (M G, C)
        return voxel_features.contiguous().reshape(-1, self.total_voxels * voxel_features.shape[-1])

    def forward(self, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features, **kwargs):
        """xyz (N, 3), new_xyz (M, 3), features (N, C) -> (new_xyz, new_features (M, post_mlps[-1]))."""
        n, c = features.shape
        if c % self.num_reduced_channels != 0:  # OpenPCDet asserts it; an assert vanishes under python -O
            raise ValueError(
                f"features must have a multiple of num_reduced_channels = {self.num_reduced_channels} channels, got {c}"
            )
        features = features.reshape(n, -1, self.num_reduced_channels).sum(dim=1)
        if self.local_aggregation_type in ["voxel_avg_pool", "voxel_random_choice"]:
            vector_features, _ = self.vector_pool_with_voxel_query(
                xyz, xyz_batch_cnt, features, new_xyz, new_xyz_batch_cnt
            )
        else:
            vector_features = self.vector_pool_with_local_interpolate(
                xyz, xyz_batch_cnt, features, new_xyz, new_xyz_batch_cnt
            )  # (M, G C)
        vector_features = vector_features.permute(1, 0)[None, :, :]  # (1, G C, M)
        new_features = self.post_mlps(self.separate_local_aggregation_layer(vector_features))
        return new_xyz, new_features.squeeze(dim=0).permute(1, 0)


class VectorPoolAggregationModuleMSG(nn.Module):
    """PV-RCNN++'s multi-scale vector pool (config: NUM_GROUPS, GROUP_CFG_k, LOCAL_AGGREGATION_TYPE,
    NUM_REDUCED_CHANNELS, NUM_CHANNELS_OF_LOCAL_AGGREGATION, MSG_POST_MLPS), as OpenPCDet reads it
    from its EasyDict config (a dict with attribute access)."""

    def __init__(self, input_channels: int, config):
        super().__init__()
        self.model_cfg = config
        self.num_groups = self.model_cfg.NUM_GROUPS
        c_in = 0
        for k in range(self.num_groups):
            cur_config = self.model_cfg[f"GROUP_CFG_{k}"]
            layer = VectorPoolAggregationModule(
                input_channels=input_channels,
                num_local_voxel=cur_config.NUM_LOCAL_VOXEL,
                post_mlps=cur_config.POST_MLPS,
                max_neighbor_distance=cur_config.MAX_NEIGHBOR_DISTANCE,
                neighbor_nsample=cur_config.NEIGHBOR_NSAMPLE,
                local_aggregation_type=self.model_cfg.LOCAL_AGGREGATION_TYPE,
                num_reduced_channels=self.model_cfg.get("NUM_REDUCED_CHANNELS", None),
                num_channels_of_local_aggregation=self.model_cfg.NUM_CHANNELS_OF_LOCAL_AGGREGATION,
                neighbor_distance_multiplier=2.0,
            )
            self.__setattr__(f"layer_{k}", layer)
            c_in += cur_config.POST_MLPS[-1]
        c_in += 3  # use_xyz
        self.msg_post_mlps = _shared_mlp1d(c_in, list(self.model_cfg.MSG_POST_MLPS))

    def forward(self, **kwargs):
        features_list = []
        cur_xyz = None
        for k in range(self.num_groups):
            cur_xyz, cur_features = self.__getattr__(f"layer_{k}")(**kwargs)
            features_list.append(cur_features)
        features = torch.cat(features_list, dim=-1)
        features = torch.cat((cur_xyz, features), dim=-1)
        features = features.permute(1, 0)[None, :, :]  # (1, C, M)
        new_features = self.msg_post_mlps(features)
        return cur_xyz, new_features.squeeze(dim=0).permute(1, 0)  # (M, C)


def build_local_aggregation_module(input_channels: int, config):
    """OpenPCDet's factory: config.NAME "StackSAModuleMSG" (MLPS, POOL_RADIUS, NSAMPLE; the input
    channels are prepended to each MLPS list in place, as OpenPCDet does) or
    "VectorPoolAggregationModuleMSG". Returns (layer, output channels)."""
    name = config.get("NAME", "StackSAModuleMSG")
    if name == "StackSAModuleMSG":
        mlps = config.MLPS
        for k in range(len(mlps)):
            mlps[k] = [input_channels] + mlps[k]
        layer = StackSAModuleMSG(
            radii=config.POOL_RADIUS, nsamples=config.NSAMPLE, mlps=mlps, use_xyz=True, pool_method="max_pool"
        )
        num_c_out = sum([x[-1] for x in mlps])
    elif name == "VectorPoolAggregationModuleMSG":
        layer = VectorPoolAggregationModuleMSG(input_channels=input_channels, config=config)
        num_c_out = config.MSG_POST_MLPS[-1]
    else:
        raise NotImplementedError(name)
    return layer, num_c_out
