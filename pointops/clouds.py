"""Cloud layouts, the Python side of csrc/common/clouds.h: padded clouds ``(B, N, D)`` with
``lengths (B,) int64``, and packed clouds ``(P, D)`` with ``offsets (B + 1,) int64`` (cloud b is
rows ``offsets[b]:offsets[b + 1]``). The ops take either; these helpers build them from
per-cloud tensors."""

from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor


def pad_clouds(clouds: Sequence) -> Tuple[Tensor, Tensor]:
    """Pad clouds of different sizes into the ``(B, N_max, D)`` + ``lengths (B,) int64`` layout.

    ``clouds`` are (N_b, D) tensors (or objects with a ``points`` tensor, such as
    :class:`pointops.io.PointCloud`) of one dtype, D and device; rows past ``lengths[b]`` are zero.
    No clouds give a (0, 0, 3) float32 tensor.
    """
    tensors = [getattr(c, "points", c) for c in clouds]
    if not tensors:
        return torch.zeros(0, 0, 3), torch.zeros(0, dtype=torch.int64)
    first = tensors[0]
    for i, t in enumerate(tensors):
        if (
            not isinstance(t, Tensor)
            or t.dim() != 2
            or t.shape[1] != first.shape[1]
            or t.dtype != first.dtype
            or t.device != first.device
        ):
            got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(
                f"pad_clouds: every cloud must be (N, {first.shape[1]}) {first.dtype} on {first.device} "
                f"like cloud 0, cloud {i} is {got}"
            )
    lengths = torch.tensor([t.shape[0] for t in tensors], dtype=torch.int64)
    out = first.new_zeros(len(tensors), int(lengths.max()), first.shape[1])
    for i, t in enumerate(tensors):
        out[i, : t.shape[0]] = t
    return out, lengths


class BoundingBox(NamedTuple):
    low: Tensor  # (B, 3) smallest coordinates of each cloud's finite points, points' dtype; 0 where none
    high: Tensor  # (B, 3) largest coordinates; 0 where none
    empty: Tensor  # (B,) bool: the cloud has no finite point


def bounding_box(points: Tensor, lengths: Optional[Tensor] = None) -> BoundingBox:
    """Axis-aligned bounding box of each padded cloud ``points (B, N, 3)`` over its first
    ``lengths[b]`` rows, rows with a NaN or infinite coordinate left out. Minima and maxima are
    exact, so the box is the same on every device and in every dtype the points round to."""
    batch, n = points.shape[:2]
    valid = torch.isfinite(points).all(-1)
    if lengths is not None:
        valid = valid & (torch.arange(n, device=points.device)[None, :] < lengths[:, None])
    empty = ~valid.any(1)
    if n == 0:
        zeros = points.new_zeros(batch, points.shape[2])
        return BoundingBox(zeros, zeros.clone(), empty)
    big = torch.tensor(float("inf"), dtype=points.dtype, device=points.device)
    low = torch.where(valid[..., None], points, big).amin(1)
    high = torch.where(valid[..., None], points, -big).amax(1)
    return BoundingBox(
        torch.where(empty[:, None], torch.zeros_like(low), low),
        torch.where(empty[:, None], torch.zeros_like(high), high),
        empty,
    )
