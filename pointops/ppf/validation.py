"""What :class:`pointops.PPFMatcher` accepts, checked before it builds or matches anything.

A model is described by its valid points only: rows within its length whose coordinates (and
normals, where given) are finite. They are moved to the front of the model in their order, so a
model with NaN / Inf rows (an organised PCD's holes) is described exactly as if those rows were
absent. A model with fewer than :data:`MIN_MODEL_POINTS` distinct valid points, or whose distance
step (``tau_d`` times its diameter) is not a positive float32, has no pair features to vote with
and is refused with a ValueError naming it. Scenes and ``max_instances`` are checked the same way;
a scene batch with no valid point at all is a result (no instance), not an error.
"""

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._checks import FLOATS
from .ops import bounding_diameter

# Fewest distinct valid points of a model: two points make one pair feature and no surface, three
# the least that spans a plane.
MIN_MODEL_POINTS = 3


def _check_cloud(points: Tensor, name: str) -> None:
    if not isinstance(points, Tensor):
        raise TypeError(f"{name} must be a tensor of shape (N, 3) or (B, N, 3), got {type(points).__name__}")
    if points.dim() not in (2, 3) or points.shape[-1] != 3:
        raise ValueError(f"{name} must have shape (N, 3) or (B, N, 3), got {tuple(points.shape)}")
    if points.dtype not in FLOATS:
        raise ValueError(f"{name} must be float32, float64, float16 or bfloat16, got {points.dtype}")


def _check_companion(t: Optional[Tensor], name: str, points: Tensor, points_name: str) -> None:
    if t is None:
        return
    _check_cloud(t, name)
    if t.shape != points.shape:
        raise ValueError(f"{name} must have the shape of {points_name} {tuple(points.shape)}, got {tuple(t.shape)}")
    if t.device != points.device:
        raise ValueError(f"{name} must be on the device of {points_name} ({points.device}), got {t.device}")


def _check_lengths(lengths: Optional[Tensor], name: str, batch: int, points: Tensor, points_name: str) -> None:
    if lengths is None:
        return
    if not isinstance(lengths, Tensor) or lengths.dtype != torch.int64 or tuple(lengths.shape) != (batch,):
        raise ValueError(
            f"{name} must be an int64 tensor of shape ({batch},) (one per cloud of {points_name}), got "
            + (f"{lengths.dtype} {tuple(lengths.shape)}" if isinstance(lengths, Tensor) else type(lengths).__name__)
        )
    if lengths.device != points.device:
        raise ValueError(f"{name} must be on the device of {points_name} ({points.device}), got {lengths.device}")


def valid_model(
    model_points: Tensor, model_normals: Optional[Tensor], model_lengths: Optional[Tensor], tau_d: float
) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """(points (M, N, 3) float32, normals (M, N, 3) float32 or None, lengths (M,) int64): each
    model's valid rows first, in order, zeros after; refuses degenerate models (reads the models
    back once: the matcher's construction is not a hot path)."""
    _check_cloud(model_points, "model_points")
    _check_companion(model_normals, "model_normals", model_points, "model_points")
    points = (model_points[None] if model_points.dim() == 2 else model_points).float()
    normals = None
    if model_normals is not None:
        normals = (model_normals[None] if model_normals.dim() == 2 else model_normals).float()
    models, n = points.shape[0], points.shape[1]
    if models == 0:
        raise ValueError("model_points must hold at least one model, got shape " + str(tuple(model_points.shape)))
    _check_lengths(model_lengths, "model_lengths", models, points, "model_points")
    index = torch.arange(n, device=points.device)
    inside = index[None, :] < (model_lengths.clamp(0, n)[:, None] if model_lengths is not None else n)
    valid = inside & torch.isfinite(points).all(-1)
    if normals is not None:
        valid = valid & torch.isfinite(normals).all(-1)
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    lengths = valid.sum(1)
    keep = (index[None, :] < lengths[:, None])[..., None]
    points = torch.where(keep, torch.gather(points, 1, order[..., None].expand(-1, -1, 3)), torch.zeros_like(points))
    if normals is not None:
        normals = torch.where(
            keep, torch.gather(normals, 1, order[..., None].expand(-1, -1, 3)), torch.zeros_like(normals)
        )
    cpu_points, cpu_lengths = points.cpu(), lengths.cpu()
    diameters = bounding_diameter(cpu_points, cpu_lengths)  # the matcher's own (float32)
    for b in range(models):
        rows = cpu_points[b, : int(cpu_lengths[b])]
        distinct = int(torch.unique(rows, dim=0).shape[0]) if rows.shape[0] else 0
        which = "the model" if models == 1 else f"model {b}"
        if distinct < MIN_MODEL_POINTS:
            raise ValueError(
                f"{which} has {distinct} distinct valid points (finite coordinates"
                + (" and normals" if normals is not None else "")
                + f" within its length), "
                f"at least {MIN_MODEL_POINTS} are needed to describe it by point pair features"
            )
        diameter = float(diameters[b])
        step = float(torch.tensor(diameter * float(tau_d), dtype=torch.float32))
        if not (math.isfinite(step) and step > 0):
            raise ValueError(
                f"{which} has diameter {diameter:g}: its distance step tau_d * diameter = "
                f"{float(tau_d):g} * {diameter:g} is not a positive float32"
            )
    return points, normals, lengths


def check_scene(
    scene_points: Tensor,
    scene_normals: Optional[Tensor],
    scene_lengths: Optional[Tensor],
    max_instances: int,
    device: torch.device,
) -> None:
    """Refuses scene arguments the matcher cannot take, naming the argument."""
    if isinstance(max_instances, bool) or not isinstance(max_instances, int) or max_instances < 1:
        raise ValueError(f"max_instances must be an int >= 1, got {max_instances!r}")
    _check_cloud(scene_points, "scene_points")
    _check_companion(scene_normals, "scene_normals", scene_points, "scene_points")
    batch = 1 if scene_points.dim() == 2 else scene_points.shape[0]
    _check_lengths(scene_lengths, "scene_lengths", batch, scene_points, "scene_points")
    if scene_points.device != device:
        raise ValueError(
            f"scene_points must be on the matcher's device ({device}; PPFMatcher.to moves it), "
            f"got {scene_points.device}"
        )
