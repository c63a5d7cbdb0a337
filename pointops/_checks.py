"""Checks the fake (meta) kernels share: the few a fake needs to compute its output shapes and to
refuse what the real kernels refuse (csrc/common/checks.h holds the real kernels' checks); and the
few the public wrappers make on what C++ never sees (a non-tensor where a tensor goes, one number
for a per-axis size)."""
import numbers
from typing import List, Optional, Union

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def distance_dtype(points: torch.Tensor) -> torch.dtype:
    """Squared distances and other float outputs: float64 for float64 inputs, else float32."""
    return torch.float64 if points.dtype == torch.float64 else torch.float32


def check_floating(t: torch.Tensor, name: str) -> None:
    torch._check(t.dtype in FLOATS, lambda: f"{name} must be float32, float64, float16 or bfloat16, got {t.dtype}")


def check_same_device(t: Optional[torch.Tensor], name: str, ref: torch.Tensor, ref_name: str = "points") -> None:
    if t is not None:
        torch._check(t.device == ref.device,
                     lambda: f"{name} must be on the same device as {ref_name} ({ref.device}), got {t.device}")


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
