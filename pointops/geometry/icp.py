"""Rigid transforms and batched multi-hypothesis ICP (wraps csrc/geometry/icp*).

``icp`` refines H initial poses per cloud pair at once: each iteration moves the sources under
every pose (``transform_points``), finds each moved source's nearest target (``knn``, k = 1) and
runs one ``icp_step``, whose float64 sums run in a fixed order, so CPU and CUDA return the same
bits and repeated calls agree. The loop is Python over ops with a fixed iteration count and no
host sync: a hypothesis that meets ``tolerance`` simply stops changing.
"""
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import check_cloud, check_tensor

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class ICPResult(NamedTuple):
    """Output of :func:`icp` for B cloud pairs and H hypotheses."""

    poses: Tensor  # (B, H, 4, 4) refined poses, in the initial poses' dtype (float32 if none given)
    rmse: Tensor  # (B, H) RMS distance of the inlier pairs at the final pose
    inlier_fraction: Tensor  # (B, H) inlier pairs / counted sources at the final pose
    converged: Tensor  # (B, H) bool: the hypothesis stopped within tolerance


def transform_points(points: Tensor, poses: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """Every cloud under each of its H rigid poses: (B, N, 3), poses (B, H, 4, 4) -> (B, H, N, 3).

    ``R p + t`` in float64 with every product and sum rounded on its own, then rounded once to
    float32 (float64 for float64 points); rows past ``lengths`` are 0. Differentiable with
    respect to the points and the poses.
    """
    check_tensor(points, "points", "(B, N, 3)")
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
) -> ICPResult:
    """Iterative closest point from several initial poses at once, batched over cloud pairs.

    Args:
        sources: (B, N, 3) float, moved onto ``targets`` (cloud b is rows [0, query_lengths[b])).
        targets: (B, M, 3) float (cloud b is rows [0, lengths[b])).
        max_correspondence_distance: pairs farther apart are rejected (``inf`` keeps all).
        query_lengths, lengths: (B,) int64 sizes of the sources and the targets, or None.
        init_poses: (B, H, 4, 4) float32/float64 initial poses, H hypotheses per pair; None is
            the identity (H = 1).
        target_normals: (B, M, 3), the targets' dtype; required for ``"point_to_plane"``
            (``pointops.estimate_normals(targets, k).normals``).
        method: ``"point_to_plane"`` (linearised least squares of Chen & Medioni) or
            ``"point_to_point"`` (Horn's closed form).
        iterations: ICP steps; every hypothesis runs them all (no host sync decides to stop).
        tolerance: a hypothesis whose step rotates by at most ``tolerance`` (2 sin(angle / 2))
            and translates by at most ``tolerance`` stops changing; 0 runs every step.

    Returns:
        :class:`ICPResult`; ``rmse`` and ``inlier_fraction`` (Open3D's ``inlier_rmse`` and
        ``fitness``) are measured at the final poses. Poses compose in float64 and are rounded to
        the initial poses' dtype at the end. ICP carries no gradient (its correspondences are
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
        normals = target_normals.detach()
    batch, n = sources.shape[0], sources.shape[1]
    if init_poses is None:
        out_dtype = torch.float32
        poses = torch.eye(4, dtype=torch.float64, device=sources.device).expand(batch, 1, 4, 4).contiguous()
    else:
        out_dtype = init_poses.dtype
        poses = init_poses.detach().to(torch.float64)
    hypotheses = poses.shape[1]
    converged = torch.zeros((batch, hypotheses), dtype=torch.bool, device=sources.device)
    rmse = torch.zeros((batch, hypotheses), dtype=torch.float64 if sources.dtype == torch.float64 else torch.float32,
                       device=sources.device)
    fraction = rmse
    # One more pass than steps: the last only measures the final poses.
    for step in range(iterations + 1):
        moved = torch.ops.pointops.transform_points(sources, query_lengths, poses)
        queries = moved.view(batch, hypotheses * n, 3)
        if queries.dtype != targets.dtype:
            queries = queries.to(targets.dtype)
        nearest = torch.ops.pointops.knn(queries, None, targets, lengths, 1)[0]
        poses, rmse, fraction, converged = torch.ops.pointops.icp_step(
            sources, query_lengths, targets, normals, poses, nearest.view(batch, hypotheses, n), converged,
            max_correspondence_distance, tolerance, plane, step < iterations,
        )
    return ICPResult(poses.to(out_dtype), rmse, fraction, converged)


@torch.library.register_fake("pointops::transform_points")
def _transform_points_fake(points, lengths, poses):
    torch._check(points.dim() == 3 and points.shape[2] == 3,
                 lambda: f"points must have shape (B, N, 3), got {tuple(points.shape)}")
    torch._check(points.dtype in _FLOATS, lambda: f"points must be a floating tensor, got {points.dtype}")
    torch._check(poses.dim() == 4 and poses.shape[2] == 4 and poses.shape[3] == 4,
                 lambda: f"poses must have shape (B, H, 4, 4), got {tuple(poses.shape)}")
    dtype = torch.float64 if points.dtype == torch.float64 else torch.float32
    return points.new_empty((points.shape[0], poses.shape[1], points.shape[1], 3), dtype=dtype)


@torch.library.register_fake("pointops::icp_step")
def _icp_step_fake(sources, query_lengths, targets, target_normals, poses, indices, converged,
                   max_correspondence_distance, tolerance=0.0, point_to_plane=False, update=True):
    torch._check(sources.dim() == 3 and sources.shape[2] == 3,
                 lambda: f"sources must have shape (B, N, 3), got {tuple(sources.shape)}")
    torch._check(poses.dim() == 4 and poses.shape[2] == 4 and poses.shape[3] == 4,
                 lambda: f"poses must have shape (B, H, 4, 4), got {tuple(poses.shape)}")
    torch._check(not point_to_plane or target_normals is not None,
                 lambda: "target_normals are required for point-to-plane ICP")
    dtype = torch.float64 if sources.dtype == torch.float64 else torch.float32
    shape = (poses.shape[0], poses.shape[1])
    return (
        torch.empty_like(poses, memory_format=torch.contiguous_format),
        sources.new_empty(shape, dtype=dtype),
        sources.new_empty(shape, dtype=dtype),
        converged.new_empty(shape),
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


torch.library.register_autograd("pointops::transform_points", _transform_backward,
                                setup_context=_transform_setup_context)
