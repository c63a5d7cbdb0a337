"""Checks the fake (meta) kernels share: the few a fake needs to compute its output shapes and to
refuse what the real kernels refuse (csrc/common/checks.h holds the real kernels' checks, with the
same names and messages). A fake that skips a device check lets a mixed call through to whichever
kernel dispatch picks (a meta tensor among CPU ones runs the fake on CPU tensors and returns
uninitialised memory), so every tensor argument goes through one of these. And the few checks the
public wrappers make on what C++ never sees (a non-tensor where a tensor goes, one number for a
per-axis size)."""
import math
import numbers
import os
from typing import List, Optional, Sequence, Tuple, Union

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def distance_dtype(points: torch.Tensor) -> torch.dtype:
    """Squared distances and other float outputs (the kernels' compute type): float64 for float64
    inputs, else float32."""
    return torch.float64 if points.dtype == torch.float64 else torch.float32


def in_common_dtype(a: torch.Tensor, b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two float tensors of different dtypes (autocast's half activations meeting float32 points,
    normals beside their points) as torch's binary ops take them: both in the promoted (wider)
    type. Converting up is exact, so an op's result is its result on the rounded values in that
    type. Other dtypes reach the op's checks as they are."""
    if a.dtype != b.dtype and a.is_floating_point() and b.is_floating_point():
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    return a, b


def check_floating(t: torch.Tensor, name: str) -> None:
    torch._check(t.dtype in FLOATS, lambda: f"{name} must be float32, float64, float16 or bfloat16, got {t.dtype}")


def check_dtype(t: torch.Tensor, name: str, dtype: torch.dtype) -> None:
    torch._check(t.dtype == dtype, lambda: f"{name} must be {dtype}, got {t.dtype}")


def check_dim(t: torch.Tensor, name: str, dim: int, layout: str) -> None:
    torch._check(t.dim() == dim, lambda: f"{name} must have shape {layout} ({dim} dimensions), got shape {tuple(t.shape)}")


def check_shape(t: torch.Tensor, name: str, expected: Sequence[int]) -> None:
    torch._check(tuple(t.shape) == tuple(expected), lambda: f"{name} must have shape {tuple(expected)}, got {tuple(t.shape)}")


def check_same_device(t: Optional[torch.Tensor], name: str, ref: torch.Tensor, ref_name: str = "points") -> None:
    if t is not None:
        torch._check(t.device == ref.device,
                     lambda: f"{name} must be on the same device as {ref_name} ({ref.device}), got {t.device}")


def check_optional_batch_vector(t: Optional[torch.Tensor], name: str, batch: int, ref: torch.Tensor,
                                ref_name: str = "points") -> None:
    """An optional per-cloud int64 vector such as lengths or start: shape (B,), on ref's device."""
    if t is None:
        return
    check_same_device(t, name, ref, ref_name)
    check_dtype(t, name, torch.int64)
    check_shape(t, name, (batch,))


def check_padded_clouds(points: torch.Tensor, lengths: Optional[torch.Tensor], layout: str, min_columns: int,
                        max_columns: Optional[int] = None, name: str = "points", lengths_name: str = "lengths") -> None:
    """Padded clouds: points (B, N, C) floating with min_columns <= C <= max_columns, lengths (B,)
    int64 on the points' device or None."""
    check_dim(points, name, 3, layout)
    check_floating(points, name)
    torch._check(points.shape[2] >= min_columns and (max_columns is None or points.shape[2] <= max_columns),
                 lambda: f"{name} must have shape {layout}, got shape {tuple(points.shape)}")
    check_optional_batch_vector(lengths, lengths_name, points.shape[0], points, name)


_MEMORY = {}


def memory_bytes(device: torch.device) -> Optional[int]:
    """The memory an output on ``device`` can come from: the host's physical memory for the CPU, the
    GPU's total memory for CUDA; None (no bound) for meta and other devices. The C++ twin is
    pointops::memory_bytes in csrc/common/checks.h."""
    key = str(device)
    if key not in _MEMORY:
        value: Optional[int] = None
        if device.type == "cpu":
            try:
                value = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (ValueError, OSError, AttributeError):
                value = None
        elif device.type == "cuda" and torch.cuda.is_available():
            value = torch.cuda.get_device_properties(device.index if device.index is not None else
                                                     torch.cuda.current_device()).total_memory
        _MEMORY[key] = value
    return _MEMORY[key]


def _gib(n: float) -> str:
    return f"{n / 2.0 ** 30:.3g} GiB"


def check_output_fits(device: torch.device, what: str, shape: Sequence[int], element_size: int) -> None:
    """Refuses an output whose size, implied by the argument ``what`` names (e.g. "k = 10^12"),
    exceeds the device's memory: the caller reads which argument is too large, and what it
    implies, instead of the allocator's byte count. Skipped for symbolic sizes."""
    if not all(isinstance(s, int) for s in shape):
        return
    numel = math.prod(shape)
    cap = memory_bytes(device)
    if cap is None:
        return
    size = numel * element_size
    if size > cap:
        raise RuntimeError(f"{what} implies an output of shape {list(shape)} ({numel} elements, {_gib(size)}), "
                           f"more than the {device.type} memory ({_gib(cap)})")


def check_tensor(value: torch.Tensor, name: str, layout: str = "") -> None:
    """Public functions take torch tensors where they take points or images, and convert nothing:
    a NumPy array (or a list) there raises TypeError naming the argument and the conversion, so the
    device and dtype stay the caller's choice. (Scripted, the annotation already says Tensor and
    this compiles to nothing.)"""
    if not isinstance(value, torch.Tensor):
        raise TypeError(_not_a_tensor(value, name, layout))


def check_optional_tensor(value: Optional[torch.Tensor], name: str, layout: str = "") -> None:
    if value is not None and not isinstance(value, torch.Tensor):
        raise TypeError(_not_a_tensor(value, name, layout))


def _not_a_tensor(value, name: str, layout: str) -> str:
    kind = type(value)
    observed = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    conversion = f"torch.from_numpy({name})" if observed.startswith("numpy.") else f"torch.tensor({name})"
    return (f"{name} must be a torch.Tensor{' ' + layout if layout else ''}, got {observed}: pass {conversion} "
            "(then .to(device) for a GPU); pointops converts no arrays itself")


@torch.jit.unused
def _sizes_eager(size, n: int, name: str) -> List[float]:
    if isinstance(size, numbers.Real) and not isinstance(size, bool):
        return [float(size)] * n
    if isinstance(size, torch.Tensor) and size.dim() == 0:
        return [float(size)] * n
    return [float(s) for s in size]


def per_axis(size: Union[float, List[float]], n: int, name: str) -> List[float]:
    """A cell or voxel size as n numbers: one number is the same size along every axis
    (``voxel_size=0.2`` is ``[0.2, 0.2, 0.2]``); a list passes as it is (the op checks its length)."""
    if torch.jit.is_scripting():
        if isinstance(size, float):
            return [size] * n
        return size
    return _sizes_eager(size, n, name)


def check_cloud(points: torch.Tensor, name: str, layout: str = "(B, N, 3)", columns: int = 3) -> None:
    """A wrapper whose op calls another op checks its clouds' shapes itself, so that the message
    names its own argument (estimate_normals' points are the kNN search's queries). columns -1:
    any number of columns."""
    if points.dim() != 3 or (columns >= 0 and points.shape[2] != columns):
        hint = ": a single cloud is " + name + "[None]" if points.dim() == 2 else ""
        raise ValueError(name + " must have shape " + layout + ", got " + str(list(points.shape)) + hint)
