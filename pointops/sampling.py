"""Farthest point sampling (wraps csrc/sampling).

Rules shared by CPU and CUDA, bit for bit: each step picks the point farthest from those already
picked, ties to the lowest index; no point is picked twice (after all remaining distances reach 0
the lowest-index unpicked point follows); points with NaN/Inf coordinates are never picked; when a
cloud runs out of points the row continues with index -1 (or repeats, ``pad="repeat"``).
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor


def _random_start(lengths: Tensor) -> Tensor:
    # Drawn with torch's generator on the lengths' device (torch.manual_seed governs it), no sync.
    draw = torch.rand(lengths.shape, device=lengths.device, dtype=torch.float64)
    return (draw * lengths.clamp(min=1).to(torch.float64)).to(torch.int64).clamp(min=0)


def _repeat_valid(indices: Tensor, distances: Tensor) -> Tuple[Tensor, Tensor]:
    """Fill the -1 tail of each row by cycling its valid picks (PV-RCNN's keypoint padding)."""
    count = (indices >= 0).sum(dim=1, keepdim=True).clamp(min=1)
    slot = torch.arange(indices.shape[1], device=indices.device).unsqueeze(0) % count
    return torch.gather(indices, 1, slot), torch.gather(distances, 1, slot)


def _apply_pad(result: Tuple[Tensor, Tensor], pad: str) -> Tuple[Tensor, Tensor]:
    if pad == "repeat":
        return _repeat_valid(result[0], result[1])
    if pad != "minus_one":
        raise ValueError('pad must be "minus_one" or "repeat", got "' + pad + '"')
    return result


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
    return_distances: bool = False,
    pad: str = "minus_one",
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Farthest point sampling of padded clouds.

    Args:
        points: (B, N, D) float32/float64/float16/bfloat16, any D >= 1.
        k: picks per cloud.
        lengths: (B,) int64, points of cloud b are rows [0, lengths[b]); None means all N.
        start: (B,) int64 index of each cloud's first pick (default 0); a start outside the cloud
            or at a NaN/Inf point falls back to the cloud's lowest-index finite point.
        random_start: draw the start uniformly in [0, lengths[b]) with torch's generator.
        return_distances: also return the squared selection distances.
        pad: what fills a row past the cloud's last finite point: "minus_one" (index -1,
            distance -1) or "repeat" (the row's valid picks again, in order, as PV-RCNN does).

    Returns:
        indices (B, k) int64 into each cloud; with return_distances, also distances (B, k): the
        squared distance from each pick to the points picked before it (+inf for the first pick,
        -1 past the cloud's end), float64 for float64 points, float32 otherwise.
    """
    start = _resolve_start(start, random_start, lengths, points.shape[0], points.shape[1], points.device)
    indices, distances = _apply_pad(torch.ops.pointops.fps(points, lengths, start, k), pad)
    if return_distances:
        return indices, distances
    return indices


def farthest_point_sampling_packed(
    points: Tensor,
    offsets: Tensor,
    k: int,
    start: Optional[Tensor] = None,
    random_start: bool = False,
    return_distances: bool = False,
    pad: str = "minus_one",
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Farthest point sampling of packed clouds: cloud b is rows [offsets[b], offsets[b+1]) of
    points (P, D). ``start`` indexes within each cloud; the returned indices index rows of P.
    Otherwise as :func:`farthest_point_sampling`."""
    lengths: Optional[Tensor] = None
    if random_start:
        lengths = offsets[1:] - offsets[:-1]
    start = _resolve_start(start, random_start, lengths, offsets.shape[0] - 1, 0, points.device)
    indices, distances = _apply_pad(torch.ops.pointops.fps_packed(points, offsets, start, k), pad)
    if return_distances:
        return indices, distances
    return indices


def sample_farthest_points(
    points: Tensor,
    k: int,
    lengths: Optional[Tensor] = None,
    start: Optional[Tensor] = None,
    random_start: bool = False,
) -> Tuple[Tensor, Tensor]:
    """The sampled points themselves, pytorch3d style: returns (sampled (B, k, D), indices (B, k)).
    Rows past a cloud's last valid pick hold zeros and index -1."""
    start = _resolve_start(start, random_start, lengths, points.shape[0], points.shape[1], points.device)
    indices, _ = torch.ops.pointops.fps(points, lengths, start, k)
    gathered = torch.gather(points, 1, indices.clamp(min=0).unsqueeze(-1).expand(-1, -1, points.shape[2]))
    sampled = torch.where((indices >= 0).unsqueeze(-1), gathered, torch.zeros_like(gathered))
    return sampled, indices
