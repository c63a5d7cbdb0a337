"""What the peers' call sites share: the autograd Function base of outputs that take no gradient,
square roots rounded the same on every device, the float16 gathers that sum their gradients in
float32, the packed layouts' counts, ends and offsets, and the shared MLP of the PointNet++
modules. Private to :mod:`pointops.compat`; every peer module takes these from here, never from
another peer module."""

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import Function

from .._checks import check_index_tensor, check_int, check_real, require


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
#
# Every adapter entry point that takes a batch description checks it here, once, with the
# argument's name: counts non-negative and adding up to the rows, ends and offsets non-decreasing
# and ending at the rows, batch vectors sorted, non-negative and below the batch size, two
# descriptions of one call with the same number of clouds. The values are checked through
# _checks.require: at once on the CPU, on CUDA where the call reads the host anyway (host=True)
# or as a device-side assert (docs/compat.md lists which entry point does which).


def check_description(t: Tensor, name: str, layout: str, ref: Tensor, ref_name: str) -> None:
    """A batch description's metadata: a 1-D integer tensor on the device of ``ref``."""
    check_index_tensor(t, name, layout, 1)
    if t.device != ref.device:
        raise ValueError(
            name + " must be on the device of " + ref_name + " (" + str(ref.device) + "), got " + str(t.device)
        )


def check_same_clouds(a: Tensor, a_name: str, b: Tensor, b_name: str, a_extra: int = 0, b_extra: int = 0) -> None:
    """Two descriptions of one call name the same number of clouds (offsets have one entry more:
    ``*_extra``)."""
    clouds_a, clouds_b = a.shape[0] - a_extra, b.shape[0] - b_extra
    if clouds_a != clouds_b:
        raise ValueError(
            a_name
            + " and "
            + b_name
            + " must describe the same number of clouds, got "
            + str(clouds_a)
            + " and "
            + str(clouds_b)
        )


def checked_counts(counts: Tensor, name: str, rows: int, rows_name: str, ref: Tensor, host: bool = False) -> Tensor:
    """OpenPCDet's / mmcv's per-cloud counts (B,) of ``rows`` packed rows: integers >= 0 adding up
    to rows. Returns the (B + 1,) int64 offsets."""
    check_description(counts, name, "(B,) per-cloud counts", ref, rows_name)
    wide = counts.to(torch.int64)
    message = name + " must be per-cloud counts >= 0 adding up to the " + str(rows) + " rows of " + rows_name
    negative = wide < 0
    require(~negative.any() & (wide.sum() == rows), message, host, name, wide, negative)
    return counts_to_offsets(wide)


def checked_ends(ends: Tensor, name: str, rows: int, rows_name: str, ref: Tensor, host: bool = False) -> Tensor:
    """Pointcept's cumulative ends (B,) of ``rows`` packed rows: integers >= 0, non-decreasing,
    the last one rows. Returns the (B + 1,) int64 offsets."""
    check_description(ends, name, "(B,) cumulative ends", ref, rows_name)
    offsets = ends_to_offsets(ends)
    _check_offsets_values(offsets, name, rows, rows_name, host, 1)
    return offsets


def checked_sample_ends(ends: Tensor, name: str, ref: Tensor, ref_name: str, host: bool = False) -> Tensor:
    """Cumulative ends that describe no tensor's rows (Pointcept's sample counts ``new_offset``):
    integers >= 0, non-decreasing. Returns the (B + 1,) int64 offsets."""
    check_description(ends, name, "(B,) cumulative ends", ref, ref_name)
    offsets = ends_to_offsets(ends)
    bad = offsets[1:] < offsets[:-1]
    require(~bad.any(), name + " must be non-decreasing cumulative ends >= 0", host, name, offsets[1:], bad, True)
    return offsets


def checked_ptr(ptr: Tensor, name: str, rows: int, rows_name: str, ref: Tensor, host: bool = False) -> Tensor:
    """PyG's ptr (B + 1,) of ``rows`` packed rows: 0 first, non-decreasing, rows last. Returns it
    as int64."""
    check_description(ptr, name, "(B + 1,) cloud bounds", ref, rows_name)
    if ptr.shape[0] < 1:
        raise ValueError(name + " must have B + 1 >= 1 entries, got shape " + str(list(ptr.shape)))
    offsets = ptr.to(torch.int64)
    _check_offsets_values(offsets, name, rows, rows_name, host, 0)
    return offsets


def _check_offsets_values(offsets: Tensor, name: str, rows: int, rows_name: str, host: bool, skip: int) -> None:
    """(B + 1,) offsets: offsets[0] == 0, non-decreasing, offsets[-1] == rows. ``skip`` entries in
    front are not the caller's (Pointcept's ends have no leading 0)."""
    bad = torch.zeros_like(offsets, dtype=torch.bool)
    bad[1:] = offsets[1:] < offsets[:-1]
    bad[0] = offsets[0] != 0
    bad[-1] = bad[-1] | (offsets[-1] != rows)
    message = (
        name + " must be non-decreasing, from 0 to the " + str(rows) + " rows of " + rows_name
        if skip == 0
        else name
        + " must be non-decreasing cumulative ends >= 0, the last one the "
        + str(rows)
        + " rows of "
        + rows_name
    )
    require(~bad.any(), message, host, name, offsets[skip:], bad[skip:], True)


def checked_batch(
    batch: Tensor, name: str, rows: int, rows_name: str, ref: Tensor, clouds: int = -1, host: bool = False
) -> None:
    """PyG's batch vector: (rows,) integers >= 0, sorted (non-decreasing), and below ``clouds``
    (the batch size) when it is given (>= 0)."""
    bad, message = batch_condition(batch, name, rows, rows_name, ref, clouds)
    require(~bad.any(), message, host, name, batch, bad, True)


def batch_condition(
    batch: Tensor, name: str, rows: int, rows_name: str, ref: Tensor, clouds: int = -1
) -> Tuple[Tensor, str]:
    """:func:`checked_batch`'s metadata checks, then its condition for a caller that reads it with
    other values in one host read: (the entries that break it, the message)."""
    check_description(batch, name, "(N,) sorted cloud index of every row", ref, rows_name)
    if batch.shape[0] != rows:
        raise ValueError(
            name + " must have one entry per row of " + rows_name + " (" + str(rows) + "), got " + str(batch.shape[0])
        )
    bad = batch < 0
    expectation = "sorted cloud indices >= 0"
    if clouds >= 0:
        bad = bad | (batch >= clouds)
        expectation = "sorted cloud indices in [0, batch_size = " + str(clouds) + ")"
    bad[1:] = bad[1:] | (batch[1:] < batch[:-1])
    return bad, name + " must be " + expectation


def checked_lengths(
    lengths: Tensor, name: str, batch: int, size: int, ref: Tensor, ref_name: str, host: bool = False
) -> Tensor:
    """pytorch3d's per-cloud lengths (B,) of padded clouds of ``size`` rows: integers in [0, size].
    Returns them as int64."""
    check_description(lengths, name, "(B,) points per cloud", ref, ref_name)
    if lengths.shape[0] != batch:
        raise ValueError(
            name
            + " must have shape ("
            + str(batch)
            + ",) (the batch of "
            + ref_name
            + "), got "
            + str(list(lengths.shape))
        )
    wide = lengths.to(torch.int64)
    bad = (wide < 0) | (wide > size)
    require(
        ~bad.any(),
        name + " must be lengths in [0, " + str(size) + "] (the rows of " + ref_name + ")",
        host,
        name,
        wide,
        bad,
    )
    return wide


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


def check_scales(radii: List[float], nsamples: List[int], mlps: List[List[int]], pool_method: str) -> None:
    """A multi-scale set abstraction layer's configuration (OpenPCDet asserts the lengths agree):
    one radius (finite, >= 0), sample count (an int >= 0) and MLP spec ([C_in, ..., C_out], ints
    >= 1) per scale, and a pool method of "max_pool" or "avg_pool"."""
    if not len(radii) == len(nsamples) == len(mlps):
        raise ValueError(
            "radii, nsamples and mlps must have one entry per scale each, got "
            + str(len(radii))
            + ", "
            + str(len(nsamples))
            + " and "
            + str(len(mlps))
        )
    for i in range(len(radii)):
        check_real(radii[i], "radii[" + str(i) + "]")
        check_int(nsamples[i], "nsamples[" + str(i) + "]")
        if len(mlps[i]) < 1:
            raise ValueError("mlps[" + str(i) + "] must list the channels [C_in, ..., C_out], got " + str(mlps[i]))
        for j in range(len(mlps[i])):
            check_int(mlps[i][j], "mlps[" + str(i) + "][" + str(j) + "]", 1 if j > 0 else 0)
    if pool_method != "max_pool" and pool_method != "avg_pool":
        raise ValueError('pool_method must be "max_pool" or "avg_pool", got ' + repr(pool_method))


def shared_mlp2d(spec: List[int]) -> nn.Sequential:
    """OpenPCDet's shared MLP of 1x1 convolutions: Conv2d (no bias), BatchNorm2d, ReLU for each
    step of ``spec`` [C_in, ..., C_out] (the layer order its checkpoints' state_dict keys name)."""
    layers: List[nn.Module] = []
    for k in range(len(spec) - 1):
        layers.extend(
            [nn.Conv2d(spec[k], spec[k + 1], kernel_size=1, bias=False), nn.BatchNorm2d(spec[k + 1]), nn.ReLU()]
        )
    return nn.Sequential(*layers)
