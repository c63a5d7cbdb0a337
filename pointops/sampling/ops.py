"""Farthest point sampling (wraps csrc/sampling).

Rules shared by CPU and CUDA, bit for bit: each step picks the point farthest from those already
picked, ties to the lowest index; no point is picked twice (after all remaining distances reach 0
the lowest-index unpicked point follows); points with NaN/Inf coordinates are never picked; when a
cloud runs out of points the row continues with index -1 (or repeats, ``pad="repeat"``).
"""

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .._checks import check_floating, check_output_fits, check_same_device, check_tensor, distance_dtype


class SampledIndices(NamedTuple):
    """Output of :func:`farthest_point_sampling` (B clouds, k picks)."""

    indices: Tensor  # (B, k) int64 into each cloud's rows (packed: into the packed rows); -1 past the cloud's end
    distances: Tensor  # (B, k) squared selection distances: +inf first, -1 past the end (float64 for float64 points)


def _random_start(lengths: Tensor) -> Tensor:
    # Drawn with torch's generator on the lengths' device (torch.manual_seed governs it), no sync.
    draw = torch.rand(lengths.shape, device=lengths.device, dtype=torch.float64)
    return (draw * lengths.clamp(min=1).to(torch.float64)).to(torch.int64).clamp(min=0)


def _repeat_valid(indices: Tensor, distances: Tensor) -> Tuple[Tensor, Tensor]:
    """Fill the -1 tail of each row by cycling its valid picks (PV-RCNN's keypoint padding)."""
    count = (indices >= 0).sum(dim=1, keepdim=True).clamp(min=1)
    slot = torch.arange(indices.shape[1], device=indices.device).unsqueeze(0) % count
    return torch.gather(indices, 1, slot), torch.gather(distances, 1, slot)


def _apply_pad(indices: Tensor, distances: Tensor, pad: str) -> SampledIndices:
    if pad == "repeat":
        indices, distances = _repeat_valid(indices, distances)
    elif pad != "minus_one":
        raise ValueError('pad must be "minus_one" or "repeat", got "' + pad + '"')
    return SampledIndices(indices, distances)


def _resolve_start(
    start: Optional[Tensor], random_start: bool, lengths: Optional[Tensor], batch: int, n: int, device: torch.device
) -> Optional[Tensor]:
    if start is not None:
        if random_start:
            raise ValueError("pass either start or random_start=True, not both")
        return start
    if not random_start:
        return None
    if lengths is None:
        lengths = torch.full((batch,), n, dtype=torch.int64, device=device)
    return _random_start(lengths)


def farthest_point_sampling(
    points: Tensor,
    k: int,
    lengths: Optional[Tensor] = None,
    start: Optional[Tensor] = None,
    random_start: bool = False,
    pad: str = "minus_one",
) -> SampledIndices:
    """Farthest point sampling of padded clouds.

    Args:
        points: (B, N, D) float32/float64/float16/bfloat16, any D >= 1.
        k: picks per cloud.
        lengths: (B,) int64, points of cloud b are rows [0, lengths[b]); None means all N.
        start: (B,) int64 index of each cloud's first pick (default 0); a start outside the cloud
            or at a NaN/Inf point falls back to the cloud's lowest-index finite point.
        random_start: draw the start uniformly in [0, lengths[b]) with torch's generator.
        pad: what fills a row past the cloud's last finite point: "minus_one" (index -1,
            distance -1) or "repeat" (the row's valid picks again, in order, as PV-RCNN does).

    Returns:
        :class:`SampledIndices` ``(indices (B, k) int64, distances (B, k))``: the squared distance
        from each pick to the points picked before it (+inf for the first pick, -1 past the
        cloud's end), float64 for float64 points, float32 otherwise.
    """
    check_tensor(points, "points", "(B, N, D)")
    start = _resolve_start(start, random_start, lengths, points.shape[0], points.shape[1], points.device)
    indices, distances = torch.ops.pointops.fps(points, lengths, start, k)
    return _apply_pad(indices, distances, pad)


def farthest_point_sampling_packed(
    points: Tensor,
    offsets: Tensor,
    k: int,
    start: Optional[Tensor] = None,
    random_start: bool = False,
    pad: str = "minus_one",
) -> SampledIndices:
    """Farthest point sampling of packed clouds: cloud b is rows [offsets[b], offsets[b+1]) of
    points (P, D). ``start`` indexes within each cloud; the returned indices index rows of P.
    ``offsets`` must be non-decreasing: the CPU kernel raises an error otherwise; the CUDA kernel,
    which cannot look without a host sync, treats a decreasing pair as an empty cloud.
    Otherwise as :func:`farthest_point_sampling`."""
    check_tensor(points, "points", "(P, D)")
    check_tensor(offsets, "offsets", "(B + 1,)")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError("offsets must have shape (B + 1,) with B + 1 >= 1, got " + str(list(offsets.shape)))
    lengths: Optional[Tensor] = None
    if random_start:
        lengths = offsets[1:] - offsets[:-1]
    start = _resolve_start(start, random_start, lengths, offsets.shape[0] - 1, 0, points.device)
    indices, distances = torch.ops.pointops.fps_packed(points, offsets, start, k)
    return _apply_pad(indices, distances, pad)


# ---- fake kernels: output shapes and dtypes from the arguments alone ----


@torch.library.register_fake("pointops::fps")
def _fps_fake(points, lengths, start, k):
    torch._check(points.dim() == 3, lambda: f"points must have shape (B, N, D), got {tuple(points.shape)}")
    check_floating(points, "points")
    check_same_device(lengths, "lengths", points)
    check_same_device(start, "start", points)
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = points.shape[0]
    check_output_fits(points.device, f"k = {k}", (batch, k), 16)
    return (points.new_empty((batch, k), dtype=torch.int64), points.new_empty((batch, k), dtype=distance_dtype(points)))


@torch.library.register_fake("pointops::fps_packed")
def _fps_packed_fake(points, offsets, start, k):
    torch._check(points.dim() == 2, lambda: f"points must have shape (P, D), got {tuple(points.shape)}")
    check_floating(points, "points")
    torch._check(offsets.dim() == 1, lambda: f"offsets must have shape (B + 1,), got {tuple(offsets.shape)}")
    check_same_device(offsets, "offsets", points)
    check_same_device(start, "start", points)
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    batch = offsets.shape[0] - 1
    check_output_fits(points.device, f"k = {k}", (batch, k), 16)
    return (points.new_empty((batch, k), dtype=torch.int64), points.new_empty((batch, k), dtype=distance_dtype(points)))
