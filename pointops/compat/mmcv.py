"""mmcv.ops' point ops, called exactly as mmcv calls them, on pointops' kernels::

    # from mmcv.ops import ball_query, furthest_point_sample, grouping_operation, knn, Voxelization
    from pointops.compat.mmcv import ball_query, furthest_point_sample, grouping_operation, knn, Voxelization

Every function takes mmcv's arguments in mmcv's order (``ball_query(min_radius, max_radius,
sample_num, xyz, center_xyz, xyz_batch_cnt=None, center_xyz_batch_cnt=None)``, ``knn(k, xyz,
center_xyz=None, transposed=False)``, ...) and returns mmcv's shapes and dtypes (int32 indices,
(B, C, N) features, Euclidean distances from ``three_nn``); the autograd ``Function`` classes are
here under mmcv's names too, with mmcv's gradients. Packed ("stack") inputs with per-cloud counts
run in one call of pointops' packed ops. What differs, on purpose:

* ties go to the lowest index (mmcv's FPS, kNN heap and three_nn break them by thread order or
  heap order), distances use pointops' exact formula (every rounding step on its own, the same
  on CPU and CUDA), and everything runs on the CPU too;
* ``furthest_point_sample`` never picks a point twice (past a cloud's last point it repeats its
  picks in order); points with a NaN/Inf coordinate are never picked or found;
* the stack ``ball_query`` applies ``min_radius`` (mmcv's stack kernel ignores it) and keeps the
  point at the centre itself as the batch kernel does;
* ``grouping_operation`` of stacked clouds gives zeros for any index outside its cloud (mmcv
  checks only the upper end of the whole batch); ``knn`` accepts any k >= 1 (mmcv: k < 100);
* ``Voxelization`` is always deterministic: ``deterministic=False`` gives the deterministic
  result, which is one of the results mmcv's non-deterministic mode may give; dynamic
  voxelization marks a point outside the range with -1 in all three columns (mmcv: the first
  column that fails and those before it);
* ``QueryAndGroup(uniform_sample=True)`` draws its resampling with torch's generator on the
  points' device, in one vectorized step (mmcv loops over every region in Python), and its
  ``unique_cnt`` stays on that device.
"""

from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn
from torch.autograd import Function

from .._checks import check_coords, check_int, check_real, require
from ..bev.ops import voxelize as _voxelize
from ..bev.ops import voxelize_dynamic as _voxelize_dynamic
from ..geometry.neighbors import ball_query as _ball_query
from ..geometry.neighbors import ball_query_packed as _ball_query_packed
from ..geometry.neighbors import knn as _knn
from . import openpcdet as _pointnet2
from . import openpcdet_stack as _stack
from ._peer import NoGradFunction, non_differentiable, row_clouds

__all__ = [
    "furthest_point_sample",
    "furthest_point_sample_with_dist",
    "ball_query",
    "knn",
    "three_nn",
    "three_interpolate",
    "gather_points",
    "grouping_operation",
    "QueryAndGroup",
    "GroupAll",
    "voxelization",
    "Voxelization",
    "FurthestPointSampling",
    "FurthestPointSamplingWithDist",
    "BallQuery",
    "KNN",
    "ThreeNN",
    "ThreeInterpolate",
    "GatherPoints",
    "GroupingOperation",
]


def furthest_point_sample(points_xyz: Tensor, num_points: int) -> Tensor:
    """(B, N, 3) -> (B, num_points) int32 indices of farthest point sampling from point 0."""
    return _pointnet2.fps_checked(points_xyz, num_points, "points_xyz", "num_points")


def furthest_point_sample_with_dist(points_dist: Tensor, num_points: int) -> Tensor:
    """Farthest point sampling by a given (B, N, N) distance matrix (mmcv's F-FPS): from point 0,
    each step keeps every point's smallest distance to the picks (rows of the matrix, from 1e10)
    and picks the largest, the lowest index on ties -> (B, num_points) int32. One small step per
    pick (the matrix is all the input there is; no host sync). A NaN distance is refused."""
    num_points = check_int(num_points, "num_points")
    check_coords(points_dist, "points_dist", "(B, N, N)", 3, -1)
    if points_dist.shape[1] != points_dist.shape[2]:
        raise ValueError("points_dist must have shape (B, N, N), got " + str(list(points_dist.shape)))
    nan = torch.isnan(points_dist)
    require(~nan.any(), "points_dist must hold no NaN", False, "points_dist", points_dist, nan)
    batch, n = points_dist.shape[0], points_dist.shape[1]
    rows = torch.arange(batch, device=points_dist.device)
    temp = torch.full((batch, n), 1e10, dtype=points_dist.dtype, device=points_dist.device)
    old = torch.zeros(batch, dtype=torch.int64, device=points_dist.device)
    picks = [old]
    for _ in range(1, num_points):
        temp = torch.minimum(temp, points_dist[rows, old])
        old = torch.argmax(temp, dim=1)
        picks.append(old)
    if num_points <= 0:
        return torch.zeros((batch, 0), dtype=torch.int32, device=points_dist.device)
    return torch.stack(picks, dim=1).int()


def ball_query(
    min_radius: float,
    max_radius: float,
    sample_num: int,
    xyz: Tensor,
    center_xyz: Tensor,
    xyz_batch_cnt: Optional[Tensor] = None,
    center_xyz_batch_cnt: Optional[Tensor] = None,
) -> Tensor:
    """The first ``sample_num`` points (by index) of ``xyz`` with squared distance d2 to each centre
    below max_radius^2 and at least min_radius^2, or 0 (the centre itself).

    Batch: xyz (B, N, 3), center_xyz (B, npoint, 3) -> (B, npoint, sample_num) int32, a short row
    padded with its first hit, a centre with no hit all zeros. Stack (both counts given): xyz
    (N1 + N2 + ..., 3), center_xyz (M1 + M2 + ..., 3), counts (B,) -> (M, sample_num) int32
    indices within each centre's cloud; a centre with no hit gets -1 then zeros, as mmcv."""
    max_radius = check_real(max_radius, "max_radius", 0.0, True)
    min_radius = check_real(min_radius, "min_radius")
    if not min_radius < max_radius:
        raise ValueError(
            "min_radius must be below max_radius, got min_radius = "
            + str(min_radius)
            + " and max_radius = "
            + str(max_radius)
        )
    sample_num = check_int(sample_num, "sample_num")
    _both_or_neither(xyz_batch_cnt, "xyz_batch_cnt", center_xyz_batch_cnt, "center_xyz_batch_cnt")
    if xyz_batch_cnt is not None and center_xyz_batch_cnt is not None:
        offsets, center_offsets = _stack.stacked_clouds(
            xyz,
            xyz_batch_cnt,
            center_xyz,
            center_xyz_batch_cnt,
            ("xyz", "xyz_batch_cnt", "center_xyz", "center_xyz_batch_cnt"),
        )
        indices, counts = _ball_query_packed(
            center_xyz, center_offsets, xyz, offsets, max_radius, sample_num, pad="first", min_radius=min_radius
        )
        start = offsets[row_clouds(center_offsets, center_xyz.shape[0])]
        local = torch.where(indices >= 0, indices - start[:, None], torch.zeros_like(indices))
        if sample_num > 0:
            first = torch.where(counts == 0, torch.full_like(counts, -1), local[:, 0])
            local = torch.cat([first[:, None], local[:, 1:]], dim=1)
        return local.int()
    _check_pair(xyz, "xyz", "(B, N, 3)", center_xyz, "center_xyz", "(B, npoint, 3)")
    indices, _ = _ball_query(center_xyz, xyz, max_radius, sample_num, pad="first", min_radius=min_radius)
    return indices.clamp(min=0).int()


def _both_or_neither(a: Optional[Tensor], a_name: str, b: Optional[Tensor], b_name: str) -> None:
    """mmcv's stacked layout takes both counts; one alone is a mistake, not the batch layout."""
    if (a is None) != (b is None):
        raise ValueError(
            a_name + " and " + b_name + " must both be given (stacked clouds) or both be None (batch), "
            "got " + ("None" if a is None else "a tensor") + " and " + ("None" if b is None else "a tensor")
        )


def _check_pair(a: Tensor, a_name: str, a_layout: str, b: Tensor, b_name: str, b_layout: str) -> None:
    check_coords(a, a_name, a_layout, 3)
    check_coords(b, b_name, b_layout, 3)
    _pointnet2.check_batch_of(b, b_name, a, a_name)


def knn(k: int, xyz: Tensor, center_xyz: Optional[Tensor] = None, transposed: bool = False) -> Tensor:
    """The k nearest points of ``xyz`` (B, N, 3) to each centre (B, npoint, 3) (``xyz`` itself when
    None; (B, 3, N) and (B, 3, npoint) when ``transposed``) -> (B, k, npoint) int32, nearest first;
    with fewer than k points the rest are 0, as mmcv."""
    k = check_int(k, "k", 1)
    if center_xyz is None:
        center_xyz = xyz
    if transposed:
        check_coords(xyz, "xyz", "(B, 3, N) (transposed=True)", 3, -1)
        check_coords(center_xyz, "center_xyz", "(B, 3, npoint) (transposed=True)", 3, -1)
        if xyz.shape[1] != 3 or center_xyz.shape[1] != 3:
            raise ValueError(
                "xyz and center_xyz must have shapes (B, 3, N) and (B, 3, npoint) with transposed=True, "
                "got " + str(list(xyz.shape)) + " and " + str(list(center_xyz.shape))
            )
        xyz = xyz.transpose(2, 1).contiguous()
        center_xyz = center_xyz.transpose(2, 1).contiguous()
    _check_pair(xyz, "xyz", "(B, N, 3)", center_xyz, "center_xyz", "(B, npoint, 3)")
    indices, _ = _knn(center_xyz, xyz, k)
    return indices.clamp(min=0).int().transpose(2, 1).contiguous()


def three_nn(target: Tensor, source: Tensor) -> Tuple[Tensor, Tensor]:
    """The 3 nearest ``source`` (B, M, 3) points of each ``target`` (B, N, 3) point -> (dist (B, N, 3)
    Euclidean, idx (B, N, 3) int32); with fewer than 3 source points, index 0 and distance +inf."""
    return _pointnet2.three_nn_checked(target, source, "target", "source")


def three_interpolate(features: Tensor, indices: Tensor, weight: Tensor) -> Tensor:
    """(B, C, M) features, (B, n, 3) indices and weights -> (B, C, n), differentiable."""
    return _pointnet2.interpolate_checked(features, indices, weight, ("features", "indices", "weight"))


def gather_points(features: Tensor, indices: Tensor) -> Tensor:
    """(B, C, N) features, (B, M) indices in [0, N) -> (B, C, M), differentiable in features."""
    return _pointnet2.gather_checked(features, indices, "features", "indices")


def grouping_operation(
    features: Tensor,
    indices: Tensor,
    features_batch_cnt: Optional[Tensor] = None,
    indices_batch_cnt: Optional[Tensor] = None,
) -> Tensor:
    """Batch: (B, C, N) features, (B, npoint, nsample) indices -> (B, C, npoint, nsample). Stack
    (both counts given): (N1 + N2 + ..., C) features, (M1 + M2 + ..., nsample) indices within each
    row's cloud -> (M, C, nsample), zeros where an index is outside its cloud. Differentiable in
    features."""
    _both_or_neither(features_batch_cnt, "features_batch_cnt", indices_batch_cnt, "indices_batch_cnt")
    if features_batch_cnt is not None and indices_batch_cnt is not None:
        return _stack.grouping_checked(
            features,
            features_batch_cnt,
            indices,
            indices_batch_cnt,
            ("features", "features_batch_cnt", "indices", "indices_batch_cnt"),
        )
    return _pointnet2.grouping_checked(features, indices, "features", "indices")


def _uniform_resample(idx: Tensor, sample_num: int) -> Tuple[Tensor, Tensor]:
    """mmcv's uniform_sample: each row's distinct indices (ascending), then random picks among
    them to fill the row; and the count of distinct indices per row (float32)."""
    ordered = idx.sort(dim=-1).values
    distinct = torch.ones_like(ordered, dtype=torch.bool)
    distinct[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    unique_cnt = distinct.sum(-1)
    front = torch.gather(ordered, -1, (~distinct).to(torch.int64).argsort(dim=-1, stable=True))
    slot = torch.arange(sample_num, device=idx.device)
    draw = (torch.rand(idx.shape, device=idx.device) * unique_cnt[..., None]).to(torch.int64)
    pick = torch.where(slot < unique_cnt[..., None], slot, torch.minimum(draw, unique_cnt[..., None] - 1))
    return torch.gather(front, -1, pick), unique_cnt.float()


class QueryAndGroup(nn.Module):
    """mmcv's QueryAndGroup: a ball query between ``min_radius`` and ``max_radius`` (kNN when
    max_radius is None) keeping ``sample_num`` points, then their coordinates relative to the
    centre (divided by max_radius with ``normalize_xyz``) and features."""

    def __init__(
        self,
        max_radius: Optional[float],
        sample_num: int,
        min_radius: float = 0.0,
        use_xyz: bool = True,
        return_grouped_xyz: bool = False,
        normalize_xyz: bool = False,
        uniform_sample: bool = False,
        return_unique_cnt: bool = False,
        return_grouped_idx: bool = False,
    ):
        super().__init__()
        self.max_radius = None if max_radius is None else check_real(max_radius, "max_radius", 0.0, True)
        self.min_radius = check_real(min_radius, "min_radius")
        self.sample_num = check_int(sample_num, "sample_num")
        self.use_xyz = use_xyz
        self.return_grouped_xyz = return_grouped_xyz
        self.normalize_xyz = normalize_xyz
        self.uniform_sample = uniform_sample
        self.return_unique_cnt = return_unique_cnt
        self.return_grouped_idx = return_grouped_idx
        if self.return_unique_cnt and not self.uniform_sample:
            raise ValueError(
                "uniform_sample must be True with return_unique_cnt (the count of unique samples), "
                "got uniform_sample = False"
            )
        if self.max_radius is None and self.normalize_xyz:
            raise ValueError(
                "normalize_xyz must be False when max_radius is None (kNN grouping has no radius), "
                "got normalize_xyz = True"
            )

    def forward(
        self, points_xyz: Tensor, center_xyz: Tensor, features: Optional[Tensor] = None
    ) -> Union[Tensor, Tuple[Tensor, ...]]:
        """points_xyz (B, N, 3), center_xyz (B, npoint, 3), features (B, C, N) ->
        (B, 3 + C, npoint, sample_num), then whichever of grouped_xyz, unique_cnt, grouped idx the
        flags ask for."""
        _check_pair(points_xyz, "points_xyz", "(B, N, 3)", center_xyz, "center_xyz", "(B, npoint, 3)")
        if features is not None:
            _pointnet2.check_layer_inputs(points_xyz, features, None, True)
        elif not self.use_xyz:
            raise ValueError("features must be given when use_xyz is False (there is nothing else to group), got None")
        if self.max_radius is None:
            idx = knn(self.sample_num, points_xyz, center_xyz, False).transpose(1, 2).contiguous()
        else:
            idx = ball_query(self.min_radius, self.max_radius, self.sample_num, points_xyz, center_xyz)
        unique_cnt = None
        if self.uniform_sample:
            idx, unique_cnt = _uniform_resample(idx, self.sample_num)
            idx = idx.int()
        xyz_trans = points_xyz.transpose(1, 2).contiguous()
        grouped_xyz = grouping_operation(xyz_trans, idx)  # (B, 3, npoint, sample_num)
        grouped_xyz_diff = grouped_xyz - center_xyz.transpose(1, 2).unsqueeze(-1)
        if self.normalize_xyz:
            grouped_xyz_diff = grouped_xyz_diff / self.max_radius
        if features is not None:
            grouped_features = grouping_operation(features, idx)
            new_features = torch.cat([grouped_xyz_diff, grouped_features], dim=1) if self.use_xyz else grouped_features
        else:
            new_features = grouped_xyz_diff
        ret = [new_features]
        if self.return_grouped_xyz:
            ret.append(grouped_xyz)
        if self.return_unique_cnt:
            ret.append(unique_cnt)
        if self.return_grouped_idx:
            ret.append(idx)
        return ret[0] if len(ret) == 1 else tuple(ret)


class GroupAll(nn.Module):
    """mmcv's GroupAll: every point of the cloud as one group."""

    def __init__(self, use_xyz: bool = True):
        super().__init__()
        self.use_xyz = use_xyz

    def forward(self, xyz: Tensor, new_xyz: Optional[Tensor], features: Optional[Tensor] = None) -> Tensor:
        """xyz (B, N, 3), features (B, C, N) -> (B, 3 + C, 1, N)."""
        grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
        if features is not None:
            grouped_features = features.unsqueeze(2)
            return torch.cat([grouped_xyz, grouped_features], dim=1) if self.use_xyz else grouped_features
        return grouped_xyz


# ---- voxelization ---------------------------------------------------------------------------------


def voxelization(
    points: Tensor,
    voxel_size: Union[Sequence[float], float],
    coors_range: Union[Sequence[float], float],
    max_points: int = 35,
    max_voxels: int = 20000,
    deterministic: bool = True,
) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]:
    """mmcv's voxelization of one cloud ``points`` (N, C) (columns x, y, z, features), on
    :func:`pointops.voxelize` (mmcv's deterministic semantics: voxels in order of their first
    point, a voxel's first ``max_points`` points in point order).

    Hard (max_points and max_voxels > 0): (voxels (M, max_points, C), coors (M, 3) int32 (z, y, x),
    num_points_per_voxel (M,) int32), M the voxels found, at most max_voxels (read back to the
    host, as mmcv does). Dynamic (max_points or max_voxels == -1): coors (N, 3) int32 per point,
    -1 for a point outside the range."""
    check_coords(points, "points", "(N, C) with C >= 3", 2, -1)
    if points.shape[1] < 3:
        raise ValueError(
            "points must have shape (N, C) with C >= 3 (x, y, z, features), got " + str(list(points.shape))
        )
    voxel_size, coors_range = _grid_args(voxel_size, coors_range)
    max_points = check_int(max_points, "max_points", -1)
    max_voxels = check_int(max_voxels, "max_voxels", -1)
    if max_points == -1 or max_voxels == -1:
        point_voxel, coords, _ = _voxelize_dynamic(points[None], voxel_size, coors_range)
        per_point = coords[0][point_voxel[0].clamp(min=0)]
        return torch.where((point_voxel[0] >= 0)[:, None], per_point, torch.full_like(per_point, -1))
    voxels, coords, num_points, num_voxels, _ = _voxelize(points[None], voxel_size, coors_range, max_points, max_voxels)
    count = int(num_voxels[0])
    return voxels[0, :count], coords[0, :count], num_points[0, :count]


def _grid_args(voxel_size, coors_range, range_name: str = "coors_range") -> Tuple[List[float], List[float]]:
    """mmcv's voxel_size (3 sizes > 0, a normal float32 each: the grid is computed in float32) and
    coors_range (x_min, y_min, z_min, x_max, y_max, z_max, finite, min < max) as lists of floats."""
    sizes = voxel_size.tolist() if isinstance(voxel_size, Tensor) else voxel_size
    bounds = coors_range.tolist() if isinstance(coors_range, Tensor) else coors_range
    if isinstance(sizes, (int, float)):
        sizes = [sizes] * 3
    if len(sizes) != 3:
        raise ValueError("voxel_size must have 3 values [vx, vy, vz], got " + str(list(sizes)))
    if len(bounds) != 6:
        raise ValueError(
            range_name + " must have 6 values [x_min, y_min, z_min, x_max, y_max, z_max], got " + str(list(bounds))
        )
    tiny = torch.finfo(torch.float32).tiny
    sizes = [check_real(v, "voxel_size[" + str(d) + "]", tiny) for d, v in enumerate(sizes)]
    bounds = [check_real(v, range_name + "[" + str(d) + "]", -float("inf")) for d, v in enumerate(bounds)]
    for d in range(3):
        if not bounds[d] < bounds[d + 3]:
            raise ValueError(
                range_name
                + " must have min < max along each axis, got "
                + range_name
                + "["
                + str(d)
                + "] = "
                + str(bounds[d])
                + " and "
                + range_name
                + "["
                + str(d + 3)
                + "] = "
                + str(bounds[d + 3])
            )
    return sizes, bounds


class Voxelization(nn.Module):
    """mmcv's Voxelization module: ``max_voxels`` an int or a (training, testing) pair;
    ``max_num_points`` -1 for dynamic voxelization. ``deterministic`` is accepted; the result is
    always the deterministic one."""

    def __init__(
        self,
        voxel_size: List[float],
        point_cloud_range: List[float],
        max_num_points: int,
        max_voxels: Union[Tuple[int, int], int] = 20000,
        deterministic: bool = True,
    ):
        super().__init__()
        _grid_args(voxel_size, point_cloud_range, "point_cloud_range")
        self.voxel_size = voxel_size
        self.point_cloud_range = point_cloud_range
        self.max_num_points = max_num_points
        self.max_voxels = max_voxels if isinstance(max_voxels, tuple) else (max_voxels, max_voxels)
        self.deterministic = deterministic
        point_cloud_range = torch.tensor(point_cloud_range, dtype=torch.float32)
        voxel_size = torch.tensor(voxel_size, dtype=torch.float32)
        grid_size = torch.round((point_cloud_range[3:] - point_cloud_range[:3]) / voxel_size).long()
        self.grid_size = grid_size
        self.pcd_shape = [*grid_size[:2], 1][::-1]

    def forward(self, input: Tensor):
        max_voxels = self.max_voxels[0] if self.training else self.max_voxels[1]
        return voxelization(
            input, self.voxel_size, self.point_cloud_range, self.max_num_points, max_voxels, self.deterministic
        )

    def __repr__(self):
        return (
            f"{self.__class__.__name__}(voxel_size={self.voxel_size}, point_cloud_range={self.point_cloud_range}, "
            f"max_num_points={self.max_num_points}, max_voxels={self.max_voxels}, "
            f"deterministic={self.deterministic})"
        )


# ---- mmcv's autograd Functions by name ----------------------------------------------------------------


class FurthestPointSampling(NoGradFunction):
    @staticmethod
    def forward(ctx, points_xyz: Tensor, num_points: int) -> Tensor:
        return non_differentiable(ctx, furthest_point_sample(points_xyz, num_points))


class FurthestPointSamplingWithDist(NoGradFunction):
    @staticmethod
    def forward(ctx, points_dist: Tensor, num_points: int) -> Tensor:
        return non_differentiable(ctx, furthest_point_sample_with_dist(points_dist, num_points))


class BallQuery(NoGradFunction):
    @staticmethod
    def forward(
        ctx, min_radius, max_radius, sample_num, xyz, center_xyz, xyz_batch_cnt=None, center_xyz_batch_cnt=None
    ):
        out = ball_query(min_radius, max_radius, sample_num, xyz, center_xyz, xyz_batch_cnt, center_xyz_batch_cnt)
        return non_differentiable(ctx, out)


class KNN(NoGradFunction):
    @staticmethod
    def forward(ctx, k, xyz, center_xyz=None, transposed=False):
        return non_differentiable(ctx, knn(k, xyz, center_xyz, transposed))


ThreeNN = _pointnet2.ThreeNN
ThreeInterpolate = _pointnet2.ThreeInterpolate
GatherPoints = _pointnet2.GatherOperation


class GroupingOperation(Function):
    """mmcv's GroupingOperation: batch or stacked inputs, the gradient of the features."""

    @staticmethod
    def forward(ctx, features, indices, features_batch_cnt=None, indices_batch_cnt=None):
        ctx.save_for_backward(indices, features_batch_cnt, indices_batch_cnt)
        ctx.shape, ctx.dtype = features.shape, features.dtype
        return grouping_operation(features, indices, features_batch_cnt, indices_batch_cnt)

    @staticmethod
    def backward(ctx, grad_out):
        indices, features_batch_cnt, indices_batch_cnt = ctx.saved_tensors
        with torch.enable_grad():
            features = torch.zeros(ctx.shape, dtype=ctx.dtype, device=grad_out.device, requires_grad=True)
            out = grouping_operation(features, indices, features_batch_cnt, indices_batch_cnt)
            (grad,) = torch.autograd.grad(out, features, grad_out)
        return grad, None, None, None
