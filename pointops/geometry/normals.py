"""Normals and curvature by neighbourhood PCA (wraps csrc/geometry/normals*).

The normal of a point is the eigenvector of the smallest eigenvalue of its k nearest
neighbours' covariance (the point itself included), its curvature the surface variation
``lambda_0 / (lambda_0 + lambda_1 + lambda_2)`` (PCL's and Open3D's). The covariance is summed in
float64 in neighbour order and decomposed by a fixed number of Jacobi sweeps, so CPU and CUDA
return the same bits. Undetermined neighbourhoods (fewer than 3 distinct points, a line) give the
normal (0, 0, 0), never NaN.
"""

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .._checks import (
    check_batch_vector,
    check_cloud,
    check_dim,
    check_dtype,
    check_floating,
    check_int,
    check_optional_tensor,
    check_padded_clouds,
    check_same_device,
    check_shape,
    check_tensor,
    distance_dtype,
)
from ..clouds import bounding_box


class Normals(NamedTuple):
    """Output of :func:`estimate_normals`."""

    normals: Tensor  # (B, N, 3) unit normals (float64 for float64 points, else float32); 0 where undetermined
    curvature: Tensor  # (B, N) surface variation in [0, 1/3]


def _bounding_box_centres(points: Tensor, lengths: Optional[Tensor]) -> Tensor:
    """(B, 3) float64 centre of each cloud's bounding box over its finite points (0 when none)."""
    box = bounding_box(points, lengths)
    return (box.low.double() + box.high.double()) * 0.5


def _search_frame(points: Tensor, lengths: Optional[Tensor]) -> Tensor:
    """The points the neighbour search ranks: each cloud scaled by a power of two (exact) when its
    largest finite coordinate is beyond 2^40 or below 2^-40, so that squared distances neither
    overflow float32 (a cloud at 1e30: every candidate at +inf, all tied) nor underflow (at
    1e-30: all 0); clouds in between are searched as they are, bit for bit. The normals and
    curvature are scale-invariant, and the covariance is summed in float64 from the points
    themselves."""
    if points.dtype == torch.float16 or points.shape[1] == 0:
        return points  # float16's whole range is within the band
    counted = torch.isfinite(points)
    if lengths is not None:
        rows = torch.arange(points.shape[1], device=points.device)
        counted = counted & (rows.unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
    largest = torch.where(counted, points.abs(), torch.zeros_like(points)).amax(dim=(1, 2)).to(torch.float64)
    _, exponent = torch.frexp(largest)
    outside = (largest > 0) & ((exponent > 40) | (exponent < -40))
    scale = torch.where(outside, torch.ldexp(torch.ones_like(largest), -exponent), torch.ones_like(largest))
    return points * scale.to(points.dtype)[:, None, None]


def estimate_normals(
    points: Tensor,
    k: int,
    lengths: Optional[Tensor] = None,
    orientation: str = "viewpoint",
    viewpoint: Optional[Tensor] = None,
    neighbors: Optional[Tensor] = None,
) -> Normals:
    """Unit normals and curvature of padded clouds from their k-nearest-neighbour PCA.

    Args:
        points: (B, N, 3) float32/float64/float16/bfloat16.
        k: neighbours per point, the point itself included (Open3D's ``KDTreeSearchParamKNN(k)``);
            clouds with fewer points use all of them.
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None = all N.
        orientation: ``"viewpoint"`` turns each normal toward ``viewpoint`` (default the origin,
            where a scanner sits); ``"outward"`` turns it away from the centre of its cloud's
            bounding box (right for closed, roughly star-shaped objects); ``"none"`` makes its
            largest component positive. A normal perpendicular to the view ray follows
            ``"none"``.
        viewpoint: (B, 3) or (3,) float, the viewpoint of each cloud (``"viewpoint"`` only).
        neighbors: (B, N, K) int64 neighbour indices to use instead of the kNN search (from a
            ball query, say); -1 entries are skipped.

    Returns:
        :class:`Normals`. Rows past ``lengths`` and points with NaN/Inf coordinates get normal 0
        and curvature 0. Any scale works: a cloud far from 1 (1e30, 1e-30) is searched scaled by a
        power of two, so that its squared distances stay finite and nonzero in float32. The
        normals and curvature are differentiable with respect to the points
        (through the covariance's eigen-decomposition; undetermined normals pass no gradient).
    """
    check_tensor(points, "points", "(B, N, 3)")
    check_optional_tensor(lengths, "lengths", "(B,)")
    check_optional_tensor(viewpoint, "viewpoint", "(B, 3) or (3,)")
    check_optional_tensor(neighbors, "neighbors", "(B, N, K)")
    check_cloud(points, "points")
    if not points.is_floating_point():
        raise ValueError("points must be float32, float64, float16 or bfloat16, got " + str(points.dtype))
    check_batch_vector(lengths, "lengths", points.shape[0], points, "points")
    if orientation == "none":
        mode = 0
    elif orientation == "viewpoint":
        mode = 1
    elif orientation == "outward":
        mode = 2
    else:
        raise ValueError(f"orientation must be 'viewpoint', 'outward' or 'none', got '{orientation}'")
    if neighbors is None:
        k = check_int(k, "k", 1)
        frame = _search_frame(points, lengths)
        neighbors = torch.ops.pointops.knn(frame, lengths, frame, lengths, k)[0]
    views: Optional[Tensor] = None
    if mode == 2:
        views = _bounding_box_centres(points, lengths)
    elif viewpoint is not None:
        views = viewpoint.expand(points.shape[0], 3) if viewpoint.dim() == 1 else viewpoint
    normals, curvature = torch.ops.pointops.estimate_normals(points, lengths, neighbors, views, mode)
    return Normals(normals, curvature)


@torch.library.register_fake("pointops::estimate_normals")
def _estimate_normals_fake(points, lengths, neighbors, viewpoints, orientation=1):
    check_padded_clouds(points, lengths, "(B, N, 3)", 3, 3)
    check_dim(neighbors, "neighbors", 3, "(B, N, K)")
    check_dtype(neighbors, "neighbors", torch.int64)
    torch._check(
        neighbors.shape[0] == points.shape[0] and neighbors.shape[1] == points.shape[1],
        lambda: f"neighbors must have shape (B, N, K) with B, N = {points.shape[0]}, {points.shape[1]} "
        f"(as points), got shape {tuple(neighbors.shape)}",
    )
    check_same_device(neighbors, "neighbors", points)
    if viewpoints is not None:
        check_floating(viewpoints, "viewpoints")
        check_shape(viewpoints, "viewpoints", (points.shape[0], 3))
        check_same_device(viewpoints, "viewpoints", points)
    torch._check(0 <= orientation <= 2, lambda: f"orientation must be 0, 1 or 2, got {orientation}")
    dtype = distance_dtype(points)
    batch, n = points.shape[0], points.shape[1]
    return points.new_empty((batch, n, 3), dtype=dtype), points.new_empty((batch, n), dtype=dtype)


def _setup_context(ctx, inputs, output):
    points, lengths, neighbors, _, _ = inputs
    ctx.save_for_backward(points, lengths, neighbors, output[0])
    ctx.has_lengths = lengths is not None


def _backward(ctx, grad_normals, grad_curvature):
    """Vector-Jacobian product of normal = s v_0 and curvature = l_0 / trace(C) through the
    covariance C = (1/m) sum (p - mu)(p - mu)^T of each neighbourhood, in plain float64 torch:
    dv_0 = sum_{j>0} v_j v_j^T dC v_0 / (l_0 - l_j), dl_0 = v_0^T dC v_0, and dC / dp_q =
    (2/m) (p_q - mu) (the mean's own term cancels). The eigenpairs come from torch.linalg.eigh of
    the recomputed covariance; the sign s matches the forward normal."""
    points, lengths, neighbors, normals = ctx.saved_tensors
    batch, n, k = neighbors.shape
    pts = points.detach().double()
    length = lengths.clamp(0, n) if ctx.has_lengths else torch.full((batch,), n, dtype=torch.int64, device=pts.device)
    finite = torch.isfinite(pts).all(-1) & (torch.arange(n, device=pts.device) < length.unsqueeze(1))
    index = neighbors.clamp(0, max(n - 1, 0))
    valid = (neighbors >= 0) & (neighbors < length.view(batch, 1, 1))
    valid = valid & torch.gather(finite, 1, index.view(batch, -1)).view(batch, n, k)
    safe = torch.where(finite.unsqueeze(-1), pts, torch.zeros_like(pts))
    nb = torch.gather(safe, 1, index.view(batch, -1, 1).expand(-1, -1, 3)).view(batch, n, k, 3)
    w = valid.double().unsqueeze(-1)
    m = w.sum(2).clamp(min=1.0)
    mu = (nb * w).sum(2) / m
    centred = (nb - mu.unsqueeze(2)) * w
    cov = torch.einsum("bnki,bnkj->bnij", centred, centred) / m.unsqueeze(-1)
    lam, vec = torch.linalg.eigh(cov)
    v0 = vec[..., 0]
    sign = torch.where((v0 * normals.double()).sum(-1) < 0, -1.0, 1.0)
    determined = (normals != 0).any(-1) & finite
    g = torch.zeros_like(cov)
    if grad_normals is not None:
        gn = grad_normals.double() * sign.unsqueeze(-1)
        for j in (1, 2):
            vj = vec[..., j]
            gap = lam[..., 0] - lam[..., j]
            # a repeated eigenvalue leaves the normal's derivative undefined: no gradient there
            coef = torch.where(
                gap == 0, torch.zeros_like(gap), (vj * gn).sum(-1) / torch.where(gap == 0, torch.ones_like(gap), gap)
            )
            g = g + coef.unsqueeze(-1).unsqueeze(-1) * vj.unsqueeze(-1) * v0.unsqueeze(-2)
        g = torch.where(determined.unsqueeze(-1).unsqueeze(-1), g, torch.zeros_like(g))
    if grad_curvature is not None:
        trace = lam.clamp(min=0).sum(-1)
        l0 = lam[..., 0].clamp(min=0)
        eye = torch.eye(3, dtype=torch.float64, device=pts.device)
        dc = (
            v0.unsqueeze(-1) * v0.unsqueeze(-2) * trace.unsqueeze(-1).unsqueeze(-1)
            - l0.unsqueeze(-1).unsqueeze(-1) * eye
        )
        dc = dc / torch.where(trace > 0, trace * trace, torch.ones_like(trace)).unsqueeze(-1).unsqueeze(-1)
        dc = torch.where(((trace > 0) & finite).unsqueeze(-1).unsqueeze(-1), dc, torch.zeros_like(dc))
        g = g + grad_curvature.double().unsqueeze(-1).unsqueeze(-1) * dc
    sym = (g + g.transpose(-1, -2)) * 0.5
    per_neighbour = 2.0 * torch.einsum("bnij,bnkj->bnki", sym, centred) / m.unsqueeze(-1)
    grad = torch.zeros_like(pts)
    grad.scatter_add_(1, index.view(batch, -1, 1).expand(-1, -1, 3), (per_neighbour * w).view(batch, -1, 3))
    return grad.to(points.dtype), None, None, None, None


torch.library.register_autograd("pointops::estimate_normals", _backward, setup_context=_setup_context)
