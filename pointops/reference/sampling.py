"""Farthest point sampling: the oracle (a loop over each cloud, csrc/sampling/fps.h's rules with
the kernels' rounding) and the baseline (the plain-PyTorch loop a user writes, timed by the bench)."""

import math

import numpy as np
import torch

from .._checks import distance_dtype


def _squared_distance(p, q, float64: bool) -> float:
    """csrc/common/squared_distance.h's formula for any D: each difference and each square rounded
    alone in the compute type, the squares summed in dimension order (no fused multiply-add)."""
    kind = float if float64 else np.float32
    acc = kind(0)
    with np.errstate(over="ignore", invalid="ignore"):
        for a, b in zip(p, q):
            diff = kind(a) - kind(b)
            acc = acc + diff * diff
    return float(acc)


def fps_one_cloud(cloud: np.ndarray, k: int, start: int, float64: bool):
    """Farthest point sampling of one cloud (n, D) by the rules in csrc/sampling/fps.h."""
    n = cloud.shape[0]
    pts = [[float(v) for v in row] for row in cloud]
    present = [all(math.isfinite(v) for v in row) for row in pts]
    min_dist = [math.inf if ok else None for ok in present]  # None: absent; "picked": picked
    picked = [False] * n
    indices, distances = [], []
    pick = start if 0 <= start < n and present[start] else next((i for i in range(n) if present[i]), -1)
    while len(indices) < k and pick >= 0:
        indices.append(pick)
        distances.append(min_dist[pick])
        picked[pick] = True
        best, best_i = -1.0, -1
        for i in range(n):
            if not present[i] or picked[i]:
                continue
            min_dist[i] = min(min_dist[i], _squared_distance(pts[i], pts[pick], float64))
            if min_dist[i] > best:  # strict: the lowest index wins ties
                best, best_i = min_dist[i], i
        pick = best_i
    while len(indices) < k:
        indices.append(-1)
        distances.append(-1.0)
    return indices, distances


def fps(points: torch.Tensor, k: int, lengths=None, start=None):
    """(B, N, D) padded clouds -> (indices (B, k) int64, distances (B, k))."""
    float64 = points.dtype == torch.float64
    compute = points.to(distance_dtype(points))
    batch, n = points.shape[0], points.shape[1]
    all_idx, all_dist = [], []
    for b in range(batch):
        length = n if lengths is None else min(max(int(lengths[b]), 0), n)
        first = 0 if start is None else int(start[b])
        idx, dist = fps_one_cloud(compute[b, :length].numpy(), k, first, float64)
        all_idx.append(idx)
        all_dist.append(dist)
    dist_dtype = compute.dtype
    return (
        torch.tensor(all_idx, dtype=torch.int64).reshape(batch, k),
        torch.tensor(all_dist, dtype=dist_dtype).reshape(batch, k),
    )


def fps_torch_loop(points: torch.Tensor, k: int) -> torch.Tensor:
    """The pure PyTorch way a user writes FPS: one vectorized step per pick, start 0, no lengths.
    A baseline for timing: torch's sum may add the squares in another order than the kernels, so
    near-ties may differ."""
    b, n, _ = points.shape
    min_dist = torch.full((b, n), float("inf"), device=points.device)
    idx = torch.zeros(b, k, dtype=torch.int64, device=points.device)
    last = torch.zeros(b, dtype=torch.int64, device=points.device)
    rows = torch.arange(b, device=points.device)
    for s in range(1, k):
        d = ((points - points[rows, last].unsqueeze(1)) ** 2).sum(-1)
        min_dist = torch.minimum(min_dist, d)
        last = min_dist.argmax(1)
        idx[:, s] = last
    return idx
