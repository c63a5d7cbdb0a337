"""OpenPCDet's PointNet++ ops and modules for padded clouds, ``pcdet.ops.pointnet2.pointnet2_batch``
(``pointnet2_utils`` and ``pointnet2_modules``), on pointops' exact kernels; ``pointnet2_stack``
(packed clouds with per-cloud counts, PV-RCNN's voxel set abstraction) is
:mod:`pointops.compat.openpcdet_stack`. :mod:`pointops.nn` hands on both under OpenPCDet's layout.

A model switches by changing one import::

    # from pcdet.ops.pointnet2.pointnet2_batch import pointnet2_modules, pointnet2_utils
    from pointops import nn as pointnet2_modules
    from pointops import nn as pointnet2_utils
    # from pcdet.ops.pointnet2.pointnet2_stack import pointnet2_modules, pointnet2_utils
    from pointops.nn import stack as pointnet2_stack_modules
    from pointops.nn import stack as pointnet2_stack_utils

Every function takes OpenPCDet's arguments in OpenPCDet's order and returns its shapes and dtypes:
(B, C, N) feature layout, int32 indices from ``furthest_point_sample``, ``ball_query`` and
``three_nn``, Euclidean (not squared) distances from ``three_nn``. The autograd ``Function``
classes OpenPCDet defines are here under their names too (``FarthestPointSampling``,
``GatherOperation``, ``ThreeNN``, ``ThreeInterpolate``, ``GroupingOperation``, ``BallQuery``),
with OpenPCDet's gradients; the lower-case names (``farthest_point_sample`` =
``furthest_point_sample``, ``gather_operation``, ...) are plain functions that return the same
values, so that the modules built on them also run under TorchScript. The modules build the same
layers (so their ``state_dict`` keys match and OpenPCDet checkpoints load) and compute the same
formulas. What differs, on purpose:

* ties go to the lowest index everywhere (OpenPCDet's FPS and three_nn break them by thread
  order), and distances use pointops' exact formula ``(dx*dx + dy*dy) + dz*dz`` with every step
  rounded on its own, the same on CPU and CUDA (OpenPCDet's nvcc build fuses them into FMAs), so a
  point within a rounding error of a radius can fall on the other side of it;
* ``furthest_point_sample`` never picks a point twice: past a cloud's last point it repeats the
  picks in order; points with a NaN/Inf coordinate are never picked, found or grouped;
* everything runs on the CPU too, on the inputs' device and current CUDA stream, with no host
  sync, and works under ``torch.compile(fullgraph=True)``, ``torch.export`` and TorchScript;
* gradients reach ``features`` through ``gather_operation``, ``grouping_operation`` and
  ``three_interpolate`` (and the weights of ``three_interpolate`` too) as plain torch ops or a
  registered formula, so ``torch.autograd.gradcheck`` applies; ``three_nn``'s distances carry
  none, as in OpenPCDet;
* ``PointnetSAModuleMSG`` does not add 3 to the caller's ``mlps`` lists in place (it copies them).
"""

from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

from .._checks import check_coords, check_index_tensor, check_indices, check_int, check_real, require
from ..geometry.neighbors import ball_query as _ball_query
from ..geometry.neighbors import interpolate as _interpolate
from ..geometry.neighbors import knn as _knn
from ..sampling.ops import farthest_point_sampling
from ._peer import NoGradFunction, check_scales, exact_sqrt, non_differentiable, shared_mlp2d, summing_type

__all__ = [
    "furthest_point_sample",
    "farthest_point_sample",
    "gather_operation",
    "three_nn",
    "three_interpolate",
    "grouping_operation",
    "ball_query",
    "FarthestPointSampling",
    "GatherOperation",
    "ThreeNN",
    "ThreeInterpolate",
    "GroupingOperation",
    "BallQuery",
    "QueryAndGroup",
    "GroupAll",
    "PointnetSAModuleMSG",
    "PointnetSAModule",
    "PointnetFPModule",
]


def furthest_point_sample(xyz: Tensor, npoint: int) -> Tensor:
    """(B, N, 3) -> (B, npoint) int32 indices of farthest point sampling from point 0 (pointops'
    ``fps`` op). Past a cloud's last finite point the row repeats its picks in order; a cloud with
    no finite point gives zeros."""
    return fps_checked(xyz, npoint, "xyz", "npoint")


def fps_checked(xyz: Tensor, npoint: int, xyz_name: str, npoint_name: str) -> Tensor:
    """:func:`furthest_point_sample` with its arguments checked under the caller's names."""
    npoint = check_int(npoint, npoint_name)
    check_coords(xyz, xyz_name, "(B, N, 3)", 3)
    return _fps(xyz, npoint)


def _fps(xyz: Tensor, npoint: int) -> Tensor:
    indices = farthest_point_sampling(xyz, npoint, pad="repeat").indices
    return indices.clamp(min=0).int()


farthest_point_sample = furthest_point_sample


def check_batch_of(t: Tensor, name: str, ref: Tensor, ref_name: str) -> None:
    """t (B, ...) has the batch size of ref (a padded layout's first dimension)."""
    if t.shape[0] != ref.shape[0]:
        raise ValueError(
            name
            + " must have the batch size B = "
            + str(ref.shape[0])
            + " of "
            + ref_name
            + ", got shape "
            + str(list(t.shape))
        )


def gather_operation(features: Tensor, idx: Tensor) -> Tensor:
    """(B, C, N) features, (B, npoint) indices in [0, N) -> (B, C, npoint)."""
    return gather_checked(features, idx, "features", "idx")


def gather_checked(features: Tensor, idx: Tensor, features_name: str, idx_name: str) -> Tensor:
    """:func:`gather_operation` with its arguments checked under the caller's names."""
    _check_gather(features, idx, features_name, idx_name, "(B, npoint)")
    return _gather(features, idx)


def _check_gather(features: Tensor, idx: Tensor, features_name: str, idx_name: str, idx_layout: str) -> None:
    """A gather along the points of features (B, C, N): idx of the same batch size, every index one
    of the N columns (torch.gather would stop at another; OpenPCDet's kernel reads past them)."""
    check_coords(features, features_name, "(B, C, N)", 3, -1)
    check_index_tensor(idx, idx_name, idx_layout, idx_layout.count(",") + 1)
    check_batch_of(idx, idx_name, features, features_name)
    check_indices(idx, idx_name, features.shape[2], features_name, False)


def _gather(features: Tensor, idx: Tensor) -> Tensor:
    channels = features.shape[1]
    out = torch.gather(summing_type(features), 2, idx.long().unsqueeze(1).expand(-1, channels, -1))
    return out.to(features.dtype)


def three_nn(unknown: Tensor, known: Tensor) -> Tuple[Tensor, Tensor]:
    """The 3 nearest ``known`` (B, m, 3) points of each ``unknown`` (B, n, 3) point: (dist (B, n, 3),
    the Euclidean distances, idx (B, n, 3) int32). With fewer than 3 known points the missing
    neighbours get index 0 and distance +inf, as in OpenPCDet."""
    return three_nn_checked(unknown, known, "unknown", "known")


def three_nn_checked(unknown: Tensor, known: Tensor, unknown_name: str, known_name: str) -> Tuple[Tensor, Tensor]:
    """:func:`three_nn` with its arguments checked under the caller's names."""
    check_coords(unknown, unknown_name, "(B, n, 3)", 3)
    check_coords(known, known_name, "(B, m, 3)", 3)
    check_batch_of(known, known_name, unknown, unknown_name)
    return _three_nn(unknown, known)


def _three_nn(unknown: Tensor, known: Tensor) -> Tuple[Tensor, Tensor]:
    indices, distances = _knn(unknown, known, 3)
    return exact_sqrt(distances.detach()), indices.clamp(min=0).int()


def three_interpolate(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    """(B, C, m) features, (B, n, 3) indices and (B, n, 3) weights -> (B, C, n):
    ``w0 * f[idx0] + w1 * f[idx1] + w2 * f[idx2]`` (pointops' ``interpolate`` op); an index -1 or
    past the m points (three_nn's padding of an empty cloud) adds nothing, one below -1 is refused."""
    return interpolate_checked(features, idx, weight, ("features", "idx", "weight"))


def interpolate_checked(features: Tensor, idx: Tensor, weight: Tensor, names: Tuple[str, str, str]) -> Tensor:
    """:func:`three_interpolate` with its arguments checked under the caller's names."""
    check_coords(features, names[0], "(B, C, m)", 3, -1)
    check_index_tensor(idx, names[1], "(B, n, 3)", 3)
    check_batch_of(idx, names[1], features, names[0])
    check_coords(weight, names[2], "(B, n, 3)", 3, -1)
    if weight.shape != idx.shape:
        raise ValueError(
            names[2]
            + " must have the shape of "
            + names[1]
            + " "
            + str(list(idx.shape))
            + ", got "
            + str(list(weight.shape))
        )
    below = idx < -1
    require(~below.any(), names[1] + " must hold indices >= -1 (-1: none)", False, names[1], idx, below)
    return _three_interpolate(features, idx, weight)


def _three_interpolate(features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
    out = _interpolate(features.transpose(1, 2), idx.long(), weight.to(features.dtype))
    return out.transpose(1, 2).contiguous()


def grouping_operation(features: Tensor, idx: Tensor) -> Tensor:
    """(B, C, N) features, (B, npoint, nsample) indices in [0, N) -> (B, C, npoint, nsample)."""
    return grouping_checked(features, idx, "features", "idx")


def grouping_checked(features: Tensor, idx: Tensor, features_name: str, idx_name: str) -> Tensor:
    """:func:`grouping_operation` with its arguments checked under the caller's names."""
    _check_gather(features, idx, features_name, idx_name, "(B, npoint, nsample)")
    return _grouping(features, idx)


def _grouping(features: Tensor, idx: Tensor) -> Tensor:
    batch, channels = features.shape[0], features.shape[1]
    flat = idx.long().reshape(batch, 1, -1).expand(-1, channels, -1)
    out = torch.gather(summing_type(features), 2, flat).reshape(batch, channels, idx.shape[1], idx.shape[2])
    return out.to(features.dtype)


def ball_query(radius: float, nsample: int, xyz: Tensor, new_xyz: Tensor) -> Tensor:
    """(B, npoint, nsample) int32: for each centre of ``new_xyz`` (B, npoint, 3), the first
    ``nsample`` points of ``xyz`` (B, N, 3) in index order with squared distance < radius^2, the
    row padded with its first hit; a centre with no hit gets zeros (OpenPCDet's semantics)."""
    radius = check_real(radius, "radius")
    nsample = check_int(nsample, "nsample")
    check_coords(xyz, "xyz", "(B, N, 3)", 3)
    check_coords(new_xyz, "new_xyz", "(B, npoint, 3)", 3)
    check_batch_of(new_xyz, "new_xyz", xyz, "xyz")
    return _ball(radius, nsample, xyz, new_xyz)


def _ball(radius: float, nsample: int, xyz: Tensor, new_xyz: Tensor) -> Tensor:
    indices, _ = _ball_query(new_xyz, xyz, radius, nsample, pad="first")
    return indices.clamp(min=0).int()


# ---- OpenPCDet's autograd Functions, by name: the values of the functions above, its gradients ----


class FarthestPointSampling(NoGradFunction):
    """``FarthestPointSampling.apply(xyz (B, N, 3), npoint)`` -> (B, npoint) int32, no gradient."""

    @staticmethod
    def forward(ctx, xyz: Tensor, npoint: int) -> Tensor:
        return non_differentiable(ctx, furthest_point_sample(xyz, npoint))


class GatherOperation(Function):
    """``GatherOperation.apply(features (B, C, N), idx (B, npoint))`` -> (B, C, npoint); the
    gradient of features is the output's gradient added back at the gathered columns."""

    @staticmethod
    def forward(ctx, features: Tensor, idx: Tensor) -> Tensor:
        ctx.save_for_backward(idx)
        ctx.n = features.shape[2]
        return gather_operation(features, idx)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        (idx,) = ctx.saved_tensors
        batch, channels, _ = grad_out.shape
        index = idx.long().unsqueeze(1).expand(-1, channels, -1)
        grad = grad_out.new_zeros((batch, channels, ctx.n)).scatter_add_(2, index, grad_out.contiguous())
        return grad, None


class ThreeNN(NoGradFunction):
    """``ThreeNN.apply(unknown (B, n, 3), known (B, m, 3))`` -> (dist (B, n, 3), idx (B, n, 3)
    int32), no gradient (as OpenPCDet)."""

    @staticmethod
    def forward(ctx, unknown: Tensor, known: Tensor) -> Tuple[Tensor, Tensor]:
        return non_differentiable(ctx, three_nn(unknown, known))


def _scatter_columns(grad_out: Tensor, idx: Tensor, weight: Optional[Tensor], n: int) -> Tensor:
    """(B, C, n): sum over the rows j of grad_out[..., j] (times weight[..., j]) at column idx[..., j]
    of each (B, M, J) index row: the gradient of a gather along the last dimension."""
    batch, channels = grad_out.shape[0], grad_out.shape[1]
    grad = grad_out.new_zeros((batch, channels, n))
    for j in range(idx.shape[-1]):
        term = grad_out if weight is None else grad_out * weight[:, None, :, j].to(grad_out.dtype)
        grad = grad.scatter_add(2, idx[:, None, :, j].long().expand(-1, channels, -1), term)
    return grad


class ThreeInterpolate(Function):
    """``ThreeInterpolate.apply(features (B, C, m), idx (B, n, 3), weight (B, n, 3))`` -> (B, C, n);
    the gradient reaches ``features`` only, as in OpenPCDet (the plain ``three_interpolate`` also
    differentiates the weights)."""

    @staticmethod
    def forward(ctx, features: Tensor, idx: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(idx, weight)
        ctx.m = features.shape[2]
        return three_interpolate(features, idx, weight)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        idx, weight = ctx.saved_tensors
        return _scatter_columns(grad_out.contiguous(), idx, weight, ctx.m), None, None


class GroupingOperation(Function):
    """``GroupingOperation.apply(features (B, C, N), idx (B, npoint, nsample))`` ->
    (B, C, npoint, nsample), differentiable in ``features``."""

    @staticmethod
    def forward(ctx, features: Tensor, idx: Tensor) -> Tensor:
        ctx.save_for_backward(idx)
        ctx.n = features.shape[2]
        return grouping_operation(features, idx)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        (idx,) = ctx.saved_tensors
        batch, channels = grad_out.shape[0], grad_out.shape[1]
        flat = grad_out.reshape(batch, channels, -1)
        index = idx.reshape(batch, -1, 1)
        return _scatter_columns(flat, index, None, ctx.n), None


class BallQuery(NoGradFunction):
    """``BallQuery.apply(radius, nsample, xyz (B, N, 3), new_xyz (B, npoint, 3))`` ->
    (B, npoint, nsample) int32, no gradient."""

    @staticmethod
    def forward(ctx, radius: float, nsample: int, xyz: Tensor, new_xyz: Tensor) -> Tensor:
        return non_differentiable(ctx, ball_query(radius, nsample, xyz, new_xyz))


class QueryAndGroup(nn.Module):
    def __init__(self, radius: float, nsample: int, use_xyz: bool = True):
        """Ball query of ``radius`` keeping ``nsample`` points, then grouping of their relative
        coordinates (and features)."""
        super().__init__()
        self.radius, self.nsample, self.use_xyz = check_real(radius, "radius"), check_int(nsample, "nsample"), use_xyz

    def forward(self, xyz: Tensor, new_xyz: Optional[Tensor], features: Optional[Tensor] = None) -> Tensor:
        """xyz (B, N, 3), new_xyz (B, npoint, 3), features (B, C, N) -> (B, 3 + C, npoint, nsample)
        (or C, or 3 channels)."""
        if new_xyz is None:
            raise ValueError("new_xyz must be the (B, npoint, 3) centres of QueryAndGroup, got None")
        check_layer_inputs(xyz, features, new_xyz, self.use_xyz)
        return self.group(xyz, new_xyz, features)

    def group(self, xyz: Tensor, new_xyz: Tensor, features: Optional[Tensor] = None) -> Tensor:
        """:meth:`forward` on checked inputs."""
        idx = _ball(self.radius, self.nsample, xyz, new_xyz)
        grouped_xyz = _grouping(xyz.transpose(1, 2).contiguous(), idx)  # (B, 3, npoint, nsample)
        grouped_xyz = grouped_xyz - new_xyz.transpose(1, 2).unsqueeze(-1)
        if features is not None:
            grouped_features = _grouping(features, idx)
            if self.use_xyz:
                return torch.cat([grouped_xyz, grouped_features], dim=1)
            return grouped_features
        return grouped_xyz


def check_layer_inputs(xyz: Tensor, features: Optional[Tensor], new_xyz: Optional[Tensor], use_xyz: bool) -> None:
    """A PointNet++ layer's inputs: xyz (B, N, 3), features (B, C, N) of the same clouds, centres
    (B, npoint, 3), and something to group (features, or the coordinates with use_xyz)."""
    check_coords(xyz, "xyz", "(B, N, 3)", 3)
    if features is not None:
        check_coords(features, "features", "(B, C, N)", 3, -1)
        if features.shape[0] != xyz.shape[0] or features.shape[2] != xyz.shape[1]:
            raise ValueError(
                "features must have shape (B, C, N) with B, N = "
                + str(xyz.shape[0])
                + ", "
                + str(xyz.shape[1])
                + " (as xyz), got "
                + str(list(features.shape))
            )
    elif not use_xyz:
        raise ValueError("features must be given when use_xyz is False (there is nothing else to group), got None")
    if new_xyz is not None:
        check_coords(new_xyz, "new_xyz", "(B, npoint, 3)", 3)
        check_batch_of(new_xyz, "new_xyz", xyz, "xyz")


class GroupAll(nn.Module):
    def __init__(self, use_xyz: bool = True):
        super().__init__()
        self.use_xyz = use_xyz

    def forward(self, xyz: Tensor, new_xyz: Optional[Tensor] = None, features: Optional[Tensor] = None) -> Tensor:
        """xyz (B, N, 3), new_xyz ignored, features (B, C, N) -> (B, 3 + C, 1, N) (or C, or 3)."""
        check_layer_inputs(xyz, features, None, True)
        return self.group(xyz, new_xyz, features)

    def group(self, xyz: Tensor, new_xyz: Optional[Tensor] = None, features: Optional[Tensor] = None) -> Tensor:
        grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
        if features is not None:
            grouped_features = features.unsqueeze(2)
            if self.use_xyz:
                return torch.cat([grouped_xyz, grouped_features], dim=1)
            return grouped_features
        return grouped_xyz


class _PointnetSAModuleBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.npoint: Optional[int] = None
        self.groupers = nn.ModuleList()
        self.mlps = nn.ModuleList()
        self.pool_method = "max_pool"
        self.use_xyz = True

    def forward(
        self, xyz: Tensor, features: Optional[Tensor] = None, new_xyz: Optional[Tensor] = None
    ) -> Tuple[Optional[Tensor], Tensor]:
        """xyz (B, N, 3), features (B, C, N), new_xyz (B, npoint, 3) or None (farthest point
        sampling of xyz) -> (new_xyz (B, npoint, 3), new_features (B, sum of mlps[k][-1], npoint))."""
        npoint = self.npoint
        check_layer_inputs(xyz, features, new_xyz, self.use_xyz)
        if new_xyz is None and npoint is not None:
            xyz_flipped = xyz.transpose(1, 2).contiguous()
            new_xyz = _gather(xyz_flipped, _fps(xyz, npoint)).transpose(1, 2).contiguous()
        if new_xyz is None:
            new_xyz = xyz  # GroupAll's layers ignore it
        new_features_list: List[Tensor] = []
        for grouper, mlp in zip(self.groupers, self.mlps):
            new_features = mlp(grouper.group(xyz, new_xyz, features))  # (B, mlp[-1], npoint, nsample)
            if self.pool_method == "max_pool":
                new_features = F.max_pool2d(new_features, kernel_size=[1, new_features.size(3)])
            elif self.pool_method == "avg_pool":
                new_features = F.avg_pool2d(new_features, kernel_size=[1, new_features.size(3)])
            else:
                raise NotImplementedError(self.pool_method)
            new_features_list.append(new_features.squeeze(-1))  # (B, mlp[-1], npoint)
        return new_xyz, torch.cat(new_features_list, dim=1)


class PointnetSAModuleMSG(_PointnetSAModuleBase):
    """PointNet set abstraction layer with multi-scale grouping."""

    def __init__(
        self,
        *,
        npoint: Optional[int],
        radii: List[float],
        nsamples: List[int],
        mlps: List[List[int]],
        bn: bool = True,
        use_xyz: bool = True,
        pool_method: str = "max_pool",
    ):
        """
        npoint: centres sampled by farthest point sampling (None: group all points);
        radii, nsamples: ball query radius and samples per scale;
        mlps: per scale, the channels of the shared MLP before pooling ([C_in, ..., C_out]; 3 is
            added to C_in when use_xyz); bn: accepted and ignored (BatchNorm is always used, as
            OpenPCDet does); pool_method: "max_pool" or "avg_pool".
        """
        super().__init__()
        check_scales(radii, nsamples, mlps, pool_method)
        self.npoint = None if npoint is None else check_int(npoint, "npoint")
        self.use_xyz = use_xyz
        for i in range(len(radii)):
            self.groupers.append(
                QueryAndGroup(radii[i], nsamples[i], use_xyz=use_xyz) if npoint is not None else GroupAll(use_xyz)
            )
            mlp_spec = list(mlps[i])
            if use_xyz:
                mlp_spec[0] += 3
            self.mlps.append(shared_mlp2d(mlp_spec))
        self.pool_method = pool_method


class PointnetSAModule(PointnetSAModuleMSG):
    """PointNet set abstraction layer (one scale)."""

    def __init__(
        self,
        *,
        mlp: List[int],
        npoint: Optional[int] = None,
        radius: Optional[float] = None,
        nsample: Optional[int] = None,
        bn: bool = True,
        use_xyz: bool = True,
        pool_method: str = "max_pool",
    ):
        super().__init__(
            mlps=[mlp],
            npoint=npoint,
            radii=[radius if radius is not None else 0.0],
            nsamples=[nsample if nsample is not None else 0],
            bn=bn,
            use_xyz=use_xyz,
            pool_method=pool_method,
        )


class PointnetFPModule(nn.Module):
    """Propagates the features of one set of points to another (inverse-distance interpolation
    of the 3 nearest, then a shared MLP)."""

    def __init__(self, *, mlp: List[int], bn: bool = True):
        super().__init__()
        self.mlp = shared_mlp2d(mlp)

    def forward(
        self, unknown: Tensor, known: Optional[Tensor], unknow_feats: Optional[Tensor], known_feats: Tensor
    ) -> Tensor:
        """unknown (B, n, 3), known (B, m, 3) or None, unknow_feats (B, C1, n) or None,
        known_feats (B, C2, m) -> (B, mlp[-1], n)."""
        check_coords(unknown, "unknown", "(B, n, 3)", 3)
        check_coords(known_feats, "known_feats", "(B, C2, m)", 3, -1)
        check_batch_of(known_feats, "known_feats", unknown, "unknown")
        if unknow_feats is not None:
            check_coords(unknow_feats, "unknow_feats", "(B, C1, n)", 3, -1)
            if unknow_feats.shape[0] != unknown.shape[0] or unknow_feats.shape[2] != unknown.shape[1]:
                raise ValueError(
                    "unknow_feats must have shape (B, C1, n) with B, n = "
                    + str(unknown.shape[0])
                    + ", "
                    + str(unknown.shape[1])
                    + " (as unknown), got "
                    + str(list(unknow_feats.shape))
                )
        if known is not None:
            dist, idx = three_nn_checked(unknown, known, "unknown", "known")
            if known_feats.shape[2] != known.shape[1]:
                raise ValueError(
                    "known_feats must have shape (B, C2, m) with m = "
                    + str(known.shape[1])
                    + " (as known), got "
                    + str(list(known_feats.shape))
                )
            dist_recip = 1.0 / (dist + 1e-8)
            norm = torch.sum(dist_recip, dim=2, keepdim=True)
            weight = dist_recip / norm
            interpolated_feats = _three_interpolate(known_feats, idx, weight)
        else:
            interpolated_feats = known_feats.expand(known_feats.size(0), known_feats.size(1), unknown.size(1))
        if unknow_feats is not None:
            new_features = torch.cat([interpolated_feats, unknow_feats], dim=1)  # (B, C2 + C1, n)
        else:
            new_features = interpolated_feats
        return self.mlp(new_features.unsqueeze(-1)).squeeze(-1)
