"""pytorch3d's point-cloud ops on pointops: ``knn_points``, ``knn_gather``, ``chamfer_distance``
and ``sample_farthest_points``, with pytorch3d's signatures, defaults, padding and errors, so a
model switches by changing one import::

    # from pytorch3d.ops import knn_points, knn_gather, sample_farthest_points
    # from pytorch3d.loss import chamfer_distance
    from pointops.compat.pytorch3d import knn_points, knn_gather, sample_farthest_points, chamfer_distance

``knn_points`` runs pointops' exact ``knn`` op for 3-D points with the L2 norm (2-D and 1-D points
are padded with zero coordinates, which changes no distance), and a brute-force torch search for
other dimensions and for ``norm=1``. Its distances are differentiable with respect to both clouds
(the op's registered backward), so ``chamfer_distance`` trains. What differs from pytorch3d, on
purpose:

* neighbours are exact and deterministic, ties to the lowest index, identical on CPU and CUDA;
  ``return_sorted=False`` returns them sorted too (pytorch3d leaves them in an unspecified order),
  and ``version`` is accepted and ignored (pytorch3d picks one of its four kernels with it);
* float16 / bfloat16 points are taken (computed in float32, distances float32; pytorch3d raises);
  float64 points are searched and differentiated in float64 (pytorch3d's backward runs in float32);
* points with a NaN/Inf coordinate are never neighbours (padding, as past ``lengths2``);
* ``chamfer_distance`` takes padded tensors, or any object with pytorch3d's ``Pointclouds``
  methods (``points_padded``, ``num_points_per_cloud``, ``normals_padded``); with all weights 0 and
  ``batch_reduction=None`` it returns zeros of shape (N,) (pytorch3d broadcasts them to (N, N)).
"""

from typing import List, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import check_coords, check_index_tensor, check_indices, check_int, check_tensor, require
from ._peer import check_description, checked_lengths
from ..geometry.dense import knn_dense
from ..geometry.neighbors import knn as _knn
from ..sampling.ops import farthest_point_sampling

__all__ = ["KNN", "knn_points", "knn_gather", "chamfer_distance", "sample_farthest_points"]


class KNN(NamedTuple):
    """pytorch3d's ``_KNN``: squared (L2) or L1 distances (N, P1, K), indices (N, P1, K) int64 into
    p2, and the neighbours' coordinates (N, P1, K, D) when ``return_nn``, else None."""

    dists: Tensor
    idx: Tensor
    knn: Optional[Tensor]


def knn_points(
    p1: Tensor,
    p2: Tensor,
    lengths1: Optional[Tensor] = None,
    lengths2: Optional[Tensor] = None,
    norm: int = 2,
    K: int = 1,
    version: int = -1,
    return_nn: bool = False,
    return_sorted: bool = True,
) -> KNN:
    """pytorch3d's ``knn_points``: the K nearest points of p2 (N, P2, D) for every point of
    p1 (N, P1, D).

    Args:
        p1, p2: (N, P1, D) and (N, P2, D) float32/float64 (float16/bfloat16 computed in float32).
        lengths1, lengths2: (N,) int64 points per cloud, or None (all P1 / P2).
        norm: 2 (squared Euclidean distances) or 1 (L1 distances).
        K: neighbours per point.
        version: ignored (pytorch3d's kernel choice).
        return_nn: also gather the neighbours' coordinates (:func:`knn_gather`).
        return_sorted: ignored: neighbours always come nearest first.

    Returns:
        :class:`KNN` ``(dists (N, P1, K), idx (N, P1, K) int64, knn (N, P1, K, D) or None)``. As in
        pytorch3d, entries past a cloud's ``lengths2`` (K > points) and rows past ``lengths1`` hold
        index 0 and distance 0. dists has the points' dtype (float32 for float16/bfloat16) and is
        differentiable with respect to p1 and p2.
    """
    check_coords(p1, "p1", "(N, P1, D)", 3, -1)
    check_coords(p2, "p2", "(N, P2, D)", 3, -1)
    if p1.shape[0] != p2.shape[0]:
        raise ValueError(
            "pts1 and pts2 must have the same batch dimension: p1 and p2 have shapes "
            + str(list(p1.shape))
            + " and "
            + str(list(p2.shape))
        )
    if p1.shape[2] != p2.shape[2]:
        raise ValueError(
            "pts1 and pts2 must have the same point dimension: p1 and p2 have shapes "
            + str(list(p1.shape))
            + " and "
            + str(list(p2.shape))
        )
    if not (norm == 1 or norm == 2):
        raise ValueError("Support for 1 or 2 norm: norm must be 1 or 2, got " + str(norm))
    K = check_int(K, "K")
    if lengths1 is not None:
        lengths1 = checked_lengths(lengths1, "lengths1", p1.shape[0], p1.shape[1], p1, "p1")
    if lengths2 is not None:
        lengths2 = checked_lengths(lengths2, "lengths2", p2.shape[0], p2.shape[1], p1, "p2")
    if p1.dtype != p2.dtype:  # mixed precision (autocast): the wider type, as torch ops promote
        common = torch.promote_types(p1.dtype, p2.dtype)
        p1, p2 = p1.to(common), p2.to(common)
    dims = p1.shape[2]
    if norm == 2 and dims <= 3:
        if dims < 3:  # zero coordinates add exact zeros to every distance
            p1 = F.pad(p1, (0, 3 - dims))
            p2 = F.pad(p2, (0, 3 - dims))
        idx, dists = _knn(p1, p2, K, lengths1, lengths2)
    else:
        idx, dists = knn_dense(p1, p2, K, lengths1, lengths2, norm)
    none = idx < 0
    idx = torch.where(none, torch.zeros_like(idx), idx)
    dists = torch.where(none, torch.zeros_like(dists), dists)
    dists = _nan_queries(dists, p1, lengths1)
    nn: Optional[Tensor] = None
    if return_nn:
        nn = knn_gather(p2[:, :, :dims], idx, lengths2)
    return KNN(dists, idx, nn)


def _nan_queries(dists: Tensor, p1: Tensor, lengths1: Optional[Tensor]) -> Tensor:
    """A query of p1 (within lengths1) with a NaN coordinate is NaN away from everything, one with
    an infinite coordinate +inf: its distances say so (pytorch3d computes them so), not the 0 of
    padding."""
    nan = torch.isnan(p1).any(-1)
    bad = nan | torch.isinf(p1).any(-1)
    if lengths1 is not None:
        bad = bad & (torch.arange(p1.shape[1], device=p1.device).unsqueeze(0) < lengths1.unsqueeze(1))
    fill = torch.where(
        nan,
        torch.full_like(nan, float("nan"), dtype=dists.dtype),
        torch.full_like(nan, float("inf"), dtype=dists.dtype),
    )
    return torch.where(bad.unsqueeze(-1), fill.unsqueeze(-1), dists)


def knn_gather(x: Tensor, idx: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """pytorch3d's ``knn_gather``: ``x`` (N, M, U) gathered by ``idx`` (N, L, K) into (N, L, K, U),
    with zeros in slots k >= lengths[n] (None: all M). No host sync (pytorch3d reads
    ``lengths.min()``); gradients reach ``x``. An index outside [0, M) is refused."""
    check_tensor(x, "x", "(N, M, U)")
    if x.dim() != 3:
        raise ValueError("x must have shape (N, M, U), got " + str(list(x.shape)))
    check_index_tensor(idx, "idx", "(N, L, K)", 3)
    n, m, u = x.shape
    if idx.shape[0] != n:
        raise ValueError(
            "x and idx must have same batch dimension: x and idx have shapes "
            + str(list(x.shape))
            + " and "
            + str(list(idx.shape))
        )
    check_indices(idx, "idx", m, "x", False)
    if lengths is not None:
        lengths = checked_lengths(lengths, "lengths", n, m, x, "x")
    _, rows, k = idx.shape
    gathered = torch.gather(x, 1, idx.reshape(n, rows * k, 1).expand(-1, -1, u)).reshape(n, rows, k, u)
    if lengths is None:
        return gathered
    outside = torch.arange(k, device=x.device).unsqueeze(0) >= lengths.unsqueeze(1)  # (N, K)
    return torch.where(outside[:, None, :, None], torch.zeros_like(gathered), gathered)


def sample_farthest_points(
    points: Tensor,
    lengths: Optional[Tensor] = None,
    K: Union[int, List[int], Tensor] = 50,
    random_start_point: bool = False,
) -> Tuple[Tensor, Tensor]:
    """pytorch3d's ``sample_farthest_points``, with its signature, defaults, dtypes and errors.

    Args:
        points: (N, P, D) clouds, any float dtype: sampled in float32, as pytorch3d converts them
            (float64 points too).
        lengths: (N,) points per cloud (converted to int64), or None (all P).
        K: samples per cloud: an int, or a list / (N,) tensor of per-cloud counts.
        random_start_point: start each cloud at a random point (drawn with torch's generator,
            where pytorch3d uses Python's ``random``) instead of index 0.

    Returns:
        (selected_points (N, max K, D) float32, selected_indices (N, max K) int64): rows past a
        cloud's K or its last valid pick hold zeros and index -1, as in pytorch3d; gradients reach
        ``points`` through the float32 copy.

    Raises:
        ValueError: as pytorch3d: lengths not of shape (N,), a length above P, K of the wrong
        batch size. Checking lengths reads one value on the host (as pytorch3d does); a list or
        tensor K reads its maximum (one sync, as pytorch3d); an int K and lengths=None sync nothing.
    """
    check_tensor(points, "points", "(B, N, D)")
    if points.dim() != 3:
        raise ValueError("points must have shape (N, P, D), got " + str(list(points.shape)))
    batch, size = points.shape[0], points.shape[1]
    if lengths is not None:
        check_description(lengths, "lengths", "(N,) points per cloud", points, "points")
        if lengths.shape != (batch,):
            raise ValueError(
                "points and lengths must have same batch dimension: lengths must have shape ("
                + str(batch)
                + ",), got "
                + str(list(lengths.shape))
            )
        lengths = lengths.to(torch.int64)
        too_large = lengths > size
        require(
            ~too_large.any(),
            "A value in lengths was too large: lengths must be at most P = " + str(size),
            True,
            "lengths",
            lengths,
            too_large,
        )
        negative = lengths < 0
        require(~negative.any(), "lengths must be >= 0", True, "lengths", lengths, negative)
    per_cloud: Optional[Tensor] = None
    if isinstance(K, (list, tuple, Tensor)):
        if isinstance(K, Tensor):
            check_index_tensor(K, "K", "(N,) samples per cloud")
            per_cloud = K.to(device=points.device, dtype=torch.int64)
        else:
            per_cloud = torch.tensor(
                [check_int(v, "K[" + str(i) + "]") for i, v in enumerate(K)], dtype=torch.int64, device=points.device
            )
        if per_cloud.dim() != 1 or per_cloud.shape[0] != batch:
            raise ValueError(
                "K and points must have the same batch dimension: K must have "
                + str(batch)
                + " values, got shape "
                + str(list(per_cloud.shape))
            )
        negative = per_cloud < 0
        require(~negative.any(), "K must be samples per cloud >= 0", True, "K", per_cloud, negative)
        k = int(per_cloud.max().item()) if batch > 0 else 0
    else:
        k = check_int(K, "K")
    points = points.to(torch.float32)
    indices = farthest_point_sampling(points, k, lengths, random_start=random_start_point).indices
    if per_cloud is not None:
        beyond = torch.arange(k, device=points.device).unsqueeze(0) >= per_cloud.unsqueeze(1)
        indices = torch.where(beyond, torch.full_like(indices, -1), indices)
    gathered = torch.gather(points, 1, indices.clamp(min=0).unsqueeze(-1).expand(-1, -1, points.shape[2]))
    sampled = torch.where((indices >= 0).unsqueeze(-1), gathered, torch.zeros_like(gathered))
    return sampled, indices


# ---- chamfer distance ----------------------------------------------------------------------------


def _validate_reductions(batch_reduction: Optional[str], point_reduction: Optional[str]) -> None:
    if batch_reduction is not None and batch_reduction not in ["mean", "sum"]:
        raise ValueError('batch_reduction must be one of ["mean", "sum"] or None')
    if point_reduction is not None and point_reduction not in ["mean", "sum", "max"]:
        raise ValueError('point_reduction must be one of ["mean", "sum", "max"] or None')
    if point_reduction is None and batch_reduction is not None:
        raise ValueError("Batch reduction must be None if point_reduction is None")


def _cloud_input(points, lengths: Optional[Tensor], normals: Optional[Tensor], names: Tuple[str, str, str]):
    """Padded points, lengths and normals from a tensor or a Pointclouds-like object (names: the
    caller's arguments, for the messages). Lengths above P or below 0 are refused (a host read,
    as pytorch3d's)."""
    if hasattr(points, "points_padded") and hasattr(points, "num_points_per_cloud"):
        points, lengths, normals = points.points_padded(), points.num_points_per_cloud(), points.normals_padded()
    elif not isinstance(points, Tensor):
        raise ValueError(
            "The input pointclouds should be either Pointclouds objects or torch.Tensor of shape "
            "(minibatch, num_points, 3): " + names[0] + " is a " + type(points).__name__
        )
    if points.dim() != 3:
        raise ValueError(
            "Expected points to be of shape (N, P, D): " + names[0] + " has shape " + str(list(points.shape))
        )
    if not points.is_floating_point():
        raise ValueError(names[0] + " must be float32, float64, float16 or bfloat16, got " + str(points.dtype))
    if lengths is not None:
        check_tensor(lengths, names[1], "(N,)")
        if lengths.dim() != 1 or lengths.shape[0] != points.shape[0]:
            raise ValueError(
                "Expected lengths to be of shape (N,): "
                + names[1]
                + " has shape "
                + str(list(lengths.shape))
                + " for N = "
                + str(points.shape[0])
            )
        check_description(lengths, names[1], "(N,) points per cloud", points, names[0])
        too_long = lengths > points.shape[1]
        require(
            ~too_long.any(),
            "A length value was too long: " + names[1] + " must be at most P = " + str(points.shape[1]),
            True,
            names[1],
            lengths,
            too_long,
        )
        negative = lengths < 0
        require(~negative.any(), names[1] + " must be >= 0", True, names[1], lengths, negative)
    else:
        lengths = torch.full((points.shape[0],), points.shape[1], dtype=torch.int64, device=points.device)
    if normals is not None:
        check_tensor(normals, names[2], "(N, P, 3)")
        if normals.dim() != 3:
            raise ValueError(
                "Expected normals to be of shape (N, P, 3): " + names[2] + " has shape " + str(list(normals.shape))
            )
        if normals.shape != points.shape:
            raise ValueError(
                names[2]
                + " must have the shape of "
                + names[0]
                + " "
                + str(list(points.shape))
                + ", got "
                + str(list(normals.shape))
            )
    return points, lengths, normals


def _one_direction(
    x: Tensor,
    y: Tensor,
    x_lengths: Tensor,
    y_lengths: Tensor,
    x_normals: Optional[Tensor],
    y_normals: Optional[Tensor],
    weights: Optional[Tensor],
    point_reduction: Optional[str],
    norm: int,
    abs_cosine: bool,
) -> Tuple[Tensor, Optional[Tensor]]:
    batch, p1, _ = x.shape
    outside = torch.arange(p1, device=x.device).unsqueeze(0) >= x_lengths.unsqueeze(1)  # (N, P1)
    nearest = knn_points(x, y, lengths1=x_lengths, lengths2=y_lengths, norm=norm, K=1)
    cham_x = torch.where(outside, torch.zeros_like(nearest.dists[..., 0]), nearest.dists[..., 0])
    # a NaN point of y is no one's neighbour: NaN in, NaN out for its cloud, as for one of x
    outside_y = torch.arange(y.shape[1], device=y.device).unsqueeze(0) >= y_lengths.unsqueeze(1)
    nan_y = (torch.isnan(y).any(-1) & ~outside_y).any(1, keepdim=True)  # (N, 1)
    cham_x = torch.where(nan_y & ~outside, torch.full_like(cham_x, float("nan")), cham_x)
    if weights is not None:
        cham_x = cham_x * weights.view(batch, 1)
    cham_norm_x: Optional[Tensor] = None
    if x_normals is not None and y_normals is not None:
        near_normals = knn_gather(y_normals, nearest.idx, y_lengths)[..., 0, :]
        cosine = F.cosine_similarity(x_normals, near_normals, dim=2, eps=1e-6)
        cham_norm_x = 1 - (torch.abs(cosine) if abs_cosine else cosine)
        cham_norm_x = torch.where(outside, torch.zeros_like(cham_norm_x), cham_norm_x)
        if weights is not None:
            cham_norm_x = cham_norm_x * weights.view(batch, 1)
    if point_reduction == "max":
        cham_x = cham_x.max(1).values
    elif point_reduction is not None:
        cham_x = cham_x.sum(1)
        if cham_norm_x is not None:
            cham_norm_x = cham_norm_x.sum(1)
        if point_reduction == "mean":
            count = x_lengths.clamp(min=1)
            cham_x = cham_x / count
            if cham_norm_x is not None:
                cham_norm_x = cham_norm_x / count
    return cham_x, cham_norm_x


def chamfer_distance(
    x,
    y,
    x_lengths: Optional[Tensor] = None,
    y_lengths: Optional[Tensor] = None,
    x_normals: Optional[Tensor] = None,
    y_normals: Optional[Tensor] = None,
    weights: Optional[Tensor] = None,
    batch_reduction: Optional[str] = "mean",
    point_reduction: Optional[str] = "mean",
    norm: int = 2,
    single_directional: bool = False,
    abs_cosine: bool = True,
):
    """pytorch3d's ``chamfer_distance`` on :func:`knn_points`: for every point of x the distance
    to its nearest point of y (squared L2, or L1 with ``norm=1``), and back unless
    ``single_directional``, reduced over points (``"mean"``, ``"sum"``, ``"max"`` (Hausdorff) or
    None) and over the batch (``"mean"``, ``"sum"`` or None), optionally weighted per cloud; with
    normals, also 1 - |cos| (``abs_cosine``) or 1 - cos between each point's normal and its nearest
    neighbour's.

    Args:
        x, y: (N, P1, D) / (N, P2, D) padded clouds, or Pointclouds-like objects.
        x_lengths, y_lengths: (N,) int64 points per cloud, or None (all rows).
        x_normals, y_normals: (N, P1, D) / (N, P2, D) or None.
        weights: (N,) non-negative per-cloud weights, or None.

    Returns:
        (loss, loss_normals) as pytorch3d: reduced tensors, or with ``point_reduction=None`` a
        pair of per-point terms ((N, P1), (N, P2)) (one tensor if single_directional);
        loss_normals is None without normals. Differentiable in x and y (and the normals).
    """
    _validate_reductions(batch_reduction, point_reduction)
    if not (norm == 1 or norm == 2):
        raise ValueError("Support for 1 or 2 norm: norm must be 1 or 2, got " + str(norm))
    if point_reduction == "max" and (x_normals is not None or y_normals is not None):
        raise ValueError('Normals must be None if point_reduction is "max"')
    x, x_lengths, x_normals = _cloud_input(x, x_lengths, x_normals, ("x", "x_lengths", "x_normals"))
    y, y_lengths, y_normals = _cloud_input(y, y_lengths, y_normals, ("y", "y_lengths", "y_normals"))
    batch = x.shape[0]
    if y.shape[0] != batch or y.shape[2] != x.shape[2]:
        raise ValueError(
            "y does not have the correct shape: y must have shape (N, P2, D) with N, D = "
            + str(batch)
            + ", "
            + str(x.shape[2])
            + " (as x), got "
            + str(list(y.shape))
        )
    if weights is not None:
        if weights.dim() != 1 or weights.shape[0] != batch:
            raise ValueError("weights must be of shape (N,): (" + str(batch) + ",), got " + str(list(weights.shape)))
        bad = ~(weights >= 0)
        if bool(bad.any()):
            raise ValueError(
                "weights cannot be negative: weights must be >= 0 (not NaN), got weights["
                + str(int(bad.nonzero()[0, 0]))
                + "] = "
                + str(weights[bad][0].item())
            )
        if bool(weights.sum() == 0.0):
            # zeros that still depend on x, so that backward runs (pytorch3d's convention)
            zero = x.sum((1, 2)) * weights * 0.0
            if batch_reduction is not None:
                zero = zero.sum()
            return zero, zero

    cham_x, cham_norm_x = _one_direction(
        x, y, x_lengths, y_lengths, x_normals, y_normals, weights, point_reduction, norm, abs_cosine
    )
    if single_directional:
        loss, loss_normals = cham_x, cham_norm_x
    else:
        cham_y, cham_norm_y = _one_direction(
            y, x, y_lengths, x_lengths, y_normals, x_normals, weights, point_reduction, norm, abs_cosine
        )
        if point_reduction == "max":
            loss, loss_normals = torch.maximum(cham_x, cham_y), None
        elif point_reduction is not None:
            loss = cham_x + cham_y
            loss_normals = None if cham_norm_x is None or cham_norm_y is None else cham_norm_x + cham_norm_y
        else:
            loss = (cham_x, cham_y)
            loss_normals = None if cham_norm_x is None else (cham_norm_x, cham_norm_y)
    if batch_reduction is None:
        return loss, loss_normals
    loss = loss.sum()
    if loss_normals is not None:
        loss_normals = loss_normals.sum()
    if batch_reduction == "mean":
        divisor = weights.sum() if weights is not None else max(batch, 1)
        loss = loss / divisor
        if loss_normals is not None:
            loss_normals = loss_normals / divisor
    return loss, loss_normals
