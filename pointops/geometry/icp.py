"""Rigid transforms and batched multi-hypothesis ICP (wraps csrc/geometry/icp*).

``icp`` refines H initial poses per cloud pair at once in one call of the ``icp`` op: every
iteration of every hypothesis runs inside it (on CUDA a block per hypothesis), each moved
source finds its nearest target in a grid of the targets built once per call (the ``knn`` op's
search, bounded by the correspondence distance), and the step's float64 sums run in a fixed
order, so CPU and CUDA return the same bits and repeated calls agree. A few hypotheses of many
sources spread each pass's searches over the whole GPU (csrc/geometry/icp_cuda.cu); the bits do
not depend on it. The options add what registering a model to a partial view needs (PPF's
refinement): a normal-agreement test, a test on facing the sensor, a linearisation about the
inliers' centroid and bounds on a step. No host sync: a hypothesis that meets ``tolerance``
simply stops changing.
"""

import math
from typing import List, NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import (
    check_cloud,
    check_dim,
    check_dtype,
    check_floating,
    check_optional_batch_vector,
    check_output_fits,
    check_padded_clouds,
    check_same_device,
    check_shape,
    check_tensor,
    distance_dtype,
    in_common_dtype,
)


class ICPResult(NamedTuple):
    """Output of :func:`icp` for B cloud pairs and H hypotheses."""

    poses: Tensor  # (B, H, 4, 4) refined poses, in the initial poses' dtype (float32 if none given)
    rmse: Tensor  # (B, H) RMS distance of the inlier pairs at the final pose
    inlier_fraction: Tensor  # (B, H) inlier pairs / counted sources at the final pose
    converged: Tensor  # (B, H) bool: the hypothesis stopped within tolerance


def transform_points(points: Tensor, poses: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """Every cloud under each of its H rigid poses: (B, N, 3), poses (B, H, 4, 4) -> (B, H, N, 3).

    ``R p + t`` in float64 with every product and sum rounded on its own, then rounded once to
    float32 (float64 for float64 points); rows past ``lengths`` are 0. Poses are float32 or
    float64 (float16 / bfloat16 poses are taken as float32). Differentiable with respect to the
    points and the poses.
    """
    check_tensor(points, "points", "(B, N, 3)")
    check_tensor(poses, "poses", "(B, H, 4, 4)")
    if poses.dtype == torch.float16 or poses.dtype == torch.bfloat16:
        poses = poses.to(torch.float32)  # the poses compose in float64 anyway
    return torch.ops.pointops.transform_points(points, lengths, poses)


def icp(
    sources: Tensor,
    targets: Tensor,
    max_correspondence_distance: float,
    query_lengths: Optional[Tensor] = None,
    lengths: Optional[Tensor] = None,
    init_poses: Optional[Tensor] = None,
    target_normals: Optional[Tensor] = None,
    method: str = "point_to_plane",
    iterations: int = 30,
    tolerance: float = 0.0,
    source_normals: Optional[Tensor] = None,
    max_normal_angle: Optional[float] = None,
    viewpoint: Optional[List[float]] = None,
    centered: bool = False,
    max_step_angle: Optional[float] = None,
    max_step_translation: Optional[float] = None,
) -> ICPResult:
    """Iterative closest point from several initial poses at once, batched over cloud pairs.

    Args:
        sources: (B, N, 3) float, moved onto ``targets`` (cloud b is rows [0, query_lengths[b])).
        targets: (B, M, 3) float (cloud b is rows [0, lengths[b])).
        max_correspondence_distance: pairs farther apart are rejected (``inf`` keeps all); the
            nearest-neighbour search stops at about this distance, so a pose far from the
            targets costs little.
        query_lengths, lengths: (B,) int64 sizes of the sources and the targets, or None.
        init_poses: (B, H, 4, 4) float32/float64 initial poses, H hypotheses per pair; None is
            the identity (H = 1). A pose with a NaN/Inf entry (of its 3 x 4 part) is returned as
            given, with rmse and inlier_fraction 0 and converged False.
        target_normals: (B, M, 3) float (another dtype than the targets' promotes both to the
            wider one); required for ``"point_to_plane"`` and ``max_normal_angle``
            (``pointops.estimate_normals(targets, k).normals``).
        method: ``"point_to_plane"`` (linearised least squares of Chen & Medioni) or
            ``"point_to_point"`` (Horn's closed form).
        iterations: ICP steps; every hypothesis runs them all (no host sync decides to stop).
        tolerance: a hypothesis whose step rotates by at most ``tolerance`` (2 sin(angle / 2))
            and translates by at most ``tolerance`` stops changing; 0 runs every step.
        source_normals: (B, N, 3), the sources' dtype; required for ``max_normal_angle`` and
            ``viewpoint``.
        max_normal_angle: radians; a pair is a correspondence only when the source's normal
            under the pose lies within this angle of the target's (normals of any length; a
            zero or NaN normal never agrees). None: no test.
        viewpoint: [x, y, z] of the sensor; a source takes part only when its normal under the
            pose faces it (n' . (R s + t - viewpoint) < 0): the far side of a model does not
            pull on a partial view. None: every source takes part. Sources that do not take part
            still count in ``inlier_fraction``'s denominator.
        centered: point-to-plane steps linearise the rotation about the inliers' centroid (not
            the origin: a far-off model turns about itself), and a step's translation, for
            ``tolerance`` and ``max_step_translation``, is how far it moves that centroid.
        max_step_angle: radians; a step that would turn a hypothesis by more stops it instead
            (its pose stays), as does one with fewer than 3 (point to point) or 6 (point to
            plane) inliers. None: no bound.
        max_step_translation: likewise for a step's translation. None: no bound.

    Returns:
        :class:`ICPResult`; ``rmse`` and ``inlier_fraction`` (Open3D's ``inlier_rmse`` and
        ``fitness``) are measured at the final poses; ``converged`` says the hypothesis stopped
        (within tolerance, or no step could be taken). Poses compose in float64 and are rounded
        to the initial poses' dtype at the end. ICP carries no gradient (its correspondences are
        discrete choices); the inputs are detached.
    """
    check_tensor(sources, "sources", "(B, N, 3)")
    check_tensor(targets, "targets", "(B, M, 3)")
    check_cloud(sources, "sources", "(B, N, 3)")
    check_cloud(targets, "targets", "(B, M, 3)")
    if method != "point_to_plane" and method != "point_to_point":
        raise ValueError(f"method must be 'point_to_plane' or 'point_to_point', got '{method}'")
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    plane = method == "point_to_plane"
    if plane and target_normals is None:
        raise ValueError("point_to_plane ICP needs target_normals (pointops.estimate_normals(targets, k).normals)")
    sources = sources.detach()
    targets = targets.detach()
    normals: Optional[Tensor] = None
    if target_normals is not None:
        normals, targets = in_common_dtype(target_normals.detach(), targets)
    turned: Optional[Tensor] = None
    if source_normals is not None:
        turned, sources = in_common_dtype(source_normals.detach(), sources)
    if init_poses is None:
        poses = torch.eye(4, dtype=torch.float32, device=sources.device).expand(sources.shape[0], 1, 4, 4).contiguous()
    else:
        poses = init_poses.detach()
    pose_dtype = poses.dtype
    if pose_dtype in (torch.float16, torch.bfloat16):  # the op refines float32 or float64 poses
        poses = poses.to(torch.float32)
    poses, rmse, fraction, converged = torch.ops.pointops.icp(
        sources,
        turned,
        query_lengths,
        targets,
        normals,
        lengths,
        poses,
        iterations,
        max_correspondence_distance,
        tolerance,
        plane,
        max_normal_angle,
        viewpoint,
        centered,
        max_step_angle,
        max_step_translation,
    )
    return ICPResult(poses.to(pose_dtype), rmse, fraction, converged)


def _check_poses(poses: Tensor, points: Tensor, points_name: str) -> None:
    check_dim(poses, "poses", 4, "(B, H, 4, 4)")
    torch._check(
        poses.dtype in (torch.float32, torch.float64), lambda: f"poses must be float32 or float64, got {poses.dtype}"
    )
    torch._check(
        poses.shape[0] == points.shape[0] and poses.shape[2] == 4 and poses.shape[3] == 4,
        lambda: f"poses must have shape (B, H, 4, 4) with B = {points.shape[0]} (as {points_name}), got shape "
        f"{tuple(poses.shape)}",
    )
    check_same_device(poses, "poses", points, points_name)


@torch.library.register_fake("pointops::transform_points")
def _transform_points_fake(points, lengths, poses):
    check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3)
    _check_poses(poses, points, "points")
    dtype = distance_dtype(points)
    shape = (points.shape[0], poses.shape[1], points.shape[1], 3)
    check_output_fits(points.device, f"poses of {poses.shape[1]} hypotheses per cloud", shape, dtype.itemsize)
    return points.new_empty(shape, dtype=dtype)


def _check_icp_clouds(sources: Tensor, query_lengths: Optional[Tensor], targets: Tensor) -> None:
    """The clouds icp takes: sources (B, N, 3) with their lengths, targets (B, M, 3)."""
    check_padded_clouds(sources, query_lengths, "(B, N, 3)", 3, 3, name="sources", lengths_name="query_lengths")
    check_dim(targets, "targets", 3, "(B, M, 3)")
    check_floating(targets, "targets")
    torch._check(
        targets.shape[0] == sources.shape[0] and targets.shape[2] == 3,
        lambda: f"targets must have shape (B, M, 3) with B = {sources.shape[0]} (as sources), got shape "
        f"{tuple(targets.shape)}",
    )
    check_same_device(targets, "targets", sources, "sources")


@torch.library.register_fake("pointops::icp")
def _icp_fake(
    sources,
    source_normals,
    query_lengths,
    targets,
    target_normals,
    lengths,
    poses,
    iterations,
    max_correspondence_distance,
    tolerance=0.0,
    point_to_plane=False,
    max_normal_angle=None,
    viewpoint=None,
    centered=False,
    max_step_angle=None,
    max_step_translation=None,
):
    _check_icp_clouds(sources, query_lengths, targets)
    check_optional_batch_vector(lengths, "lengths", sources.shape[0], sources, "sources")
    _check_poses(poses, sources, "sources")
    torch._check(iterations >= 0, lambda: f"iterations must be >= 0, got {iterations}")
    torch._check(
        max_correspondence_distance >= 0,
        lambda: f"max_correspondence_distance must be >= 0, got {max_correspondence_distance}",
    )
    torch._check(tolerance >= 0, lambda: f"tolerance must be >= 0, got {tolerance}")
    torch._check(
        max_normal_angle is None or max_normal_angle >= 0,
        lambda: f"max_normal_angle must be >= 0 (radians) or None, got {max_normal_angle}",
    )
    torch._check(
        viewpoint is None or (len(viewpoint) == 3 and all(math.isfinite(v) for v in viewpoint)),
        lambda: f"viewpoint must have 3 finite values [x, y, z], got {viewpoint}",
    )
    torch._check(
        max_step_angle is None or max_step_angle >= 0,
        lambda: f"max_step_angle must be >= 0 (radians) or None, got {max_step_angle}",
    )
    torch._check(
        max_step_translation is None or max_step_translation >= 0,
        lambda: f"max_step_translation must be >= 0 or None, got {max_step_translation}",
    )
    torch._check(
        not (point_to_plane or max_normal_angle is not None) or target_normals is not None,
        lambda: "target_normals are required for " + ("point-to-plane ICP" if point_to_plane else "max_normal_angle"),
    )
    if target_normals is not None:
        check_dtype(target_normals, "target_normals (the dtype of targets)", targets.dtype)
        check_shape(target_normals, "target_normals", targets.shape)
        check_same_device(target_normals, "target_normals", sources, "sources")
    torch._check(
        not (max_normal_angle is not None or viewpoint is not None) or source_normals is not None,
        lambda: "source_normals are required for "
        + ("max_normal_angle" if max_normal_angle is not None else "viewpoint"),
    )
    if source_normals is not None:
        check_dtype(source_normals, "source_normals (the dtype of sources)", sources.dtype)
        check_shape(source_normals, "source_normals", sources.shape)
        check_same_device(source_normals, "source_normals", sources, "sources")
    dtype = distance_dtype(sources)
    shape = (poses.shape[0], poses.shape[1])
    return (
        torch.empty_like(poses, memory_format=torch.contiguous_format),
        sources.new_empty(shape, dtype=dtype),
        sources.new_empty(shape, dtype=dtype),
        sources.new_empty(shape, dtype=torch.bool),
    )


def _transform_setup_context(ctx, inputs, output):
    points, lengths, poses = inputs
    ctx.save_for_backward(points, lengths, poses)
    ctx.has_lengths = lengths is not None


def _transform_backward(ctx, grad):
    """moved = R p + t per pose: dp = sum_h R_h^T g, dR_h = sum_i g_i p_i^T, dt_h = sum_i g_i,
    with rows past lengths (constant 0) passing nothing."""
    points, lengths, poses = ctx.saved_tensors
    g = grad.double()
    n = points.shape[1]
    if ctx.has_lengths:
        inside = torch.arange(n, device=points.device) < lengths.clamp(0, n).unsqueeze(1)
        g = g * inside.view(points.shape[0], 1, n, 1)
    rotation = poses[..., :3, :3].double()
    grad_points = torch.einsum("bhji,bhnj->bni", rotation, g).to(points.dtype)
    grad_poses = torch.zeros_like(poses, dtype=torch.float64)
    grad_poses[..., :3, :3] = torch.einsum("bhni,bnj->bhij", g, points.double())
    grad_poses[..., :3, 3] = g.sum(2)
    return grad_points, None, grad_poses.to(poses.dtype)


torch.library.register_autograd(
    "pointops::transform_points", _transform_backward, setup_context=_transform_setup_context
)
