"""What the peers' call sites share: the autograd Function base of outputs that take no gradient,
square roots rounded the same on every device, the float16 gathers that sum their gradients in
float32, the packed layouts' counts, ends and offsets, and the shared MLP of the PointNet++
modules. Private to :mod:`pointops.compat`; every peer module takes these from here, never from
another peer module."""
from typing import List

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import Function


def non_differentiable(ctx, out):
    """Marks the output of a forward (a tensor or a tuple of them) non-differentiable and returns it."""
    ctx.mark_non_differentiable(*(out if isinstance(out, tuple) else (out,)))
    return out


class NoGradFunction(Function):
    """Base of the peers' autograd Functions whose outputs take no gradient (samples, neighbour
    indices, masks, search distances): a subclass's forward takes the peer's arguments and returns
    ``non_differentiable(ctx, out)``; no input gets a gradient."""

    @staticmethod
    def backward(ctx, *grad_outputs):
        return (None,) * len(ctx.needs_input_grad)


def exact_sqrt(distances: Tensor) -> Tensor:
    """sqrt rounded once, identically on every device: the float64 square root is correctly
    rounded everywhere, and rounding it to float32 gives the correctly rounded float32 root (a
    float32 sqrt on CUDA may be an approximation)."""
    return torch.sqrt(distances.double()).to(distances.dtype)


def summing_type(features: Tensor) -> Tensor:
    """float16 / bfloat16 features widened to float32 before a gather, so that the gradients of
    the gathered copies add up in float32 and round once (the gather itself is exact)."""
    if features.dtype == torch.float16 or features.dtype == torch.bfloat16:
        return features.float()
    return features


# ---- packed clouds: OpenPCDet's and mmcv's per-cloud counts, Pointcept's cumulative ends ----------


def counts_to_offsets(counts: Tensor) -> Tensor:
    """(B,) per-cloud counts [N1, N2, ...] -> (B + 1,) int64 offsets [0, N1, N1 + N2, ...] on the
    counts' device."""
    return F.pad(counts.to(torch.int64).cumsum(0), (1, 0))


def ends_to_offsets(ends: Tensor) -> Tensor:
    """(B,) cumulative ends [N1, N1 + N2, ...] -> (B + 1,) int64 offsets [0, N1, N1 + N2, ...]."""
    return F.pad(ends.to(torch.int64), (1, 0))


def ends_to_counts(ends: Tensor) -> Tensor:
    """(B,) cumulative ends [N1, N1 + N2, ...] -> (B,) int64 per-cloud counts [N1, N2, ...]."""
    return torch.diff(ends_to_offsets(ends))


def row_clouds(offsets: Tensor, rows: int) -> Tensor:
    """(rows,) int64: the cloud of each packed row under (B + 1,) offsets; rows past the last cloud
    get B - 1 (their results are discarded or empty: the packed ops put them in no cloud)."""
    position = torch.arange(rows, device=offsets.device, dtype=torch.int64)
    cloud = torch.searchsorted(offsets[1:], position, right=True)
    return cloud.clamp(max=max(offsets.shape[0] - 2, 0))


# ---- PointNet++ layers -------------------------------------------------------------------------


def shared_mlp2d(spec: List[int]) -> nn.Sequential:
    """OpenPCDet's shared MLP of 1x1 convolutions: Conv2d (no bias), BatchNorm2d, ReLU for each
    step of ``spec`` [C_in, ..., C_out] (the layer order its checkpoints' state_dict keys name)."""
    layers: List[nn.Module] = []
    for k in range(len(spec) - 1):
        layers.extend([nn.Conv2d(spec[k], spec[k + 1], kernel_size=1, bias=False), nn.BatchNorm2d(spec[k + 1]), nn.ReLU()])
    return nn.Sequential(*layers)
