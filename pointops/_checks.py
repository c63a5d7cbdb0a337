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
    torch._check(
        t.dim() == dim, lambda: f"{name} must have shape {layout} ({dim} dimensions), got shape {tuple(t.shape)}"
    )


def check_shape(t: torch.Tensor, name: str, expected: Sequence[int]) -> None:
    torch._check(
        tuple(t.shape) == tuple(expected), lambda: f"{name} must have shape {tuple(expected)}, got {tuple(t.shape)}"
    )


def check_same_device(t: Optional[torch.Tensor], name: str, ref: torch.Tensor, ref_name: str = "points") -> None:
    if t is not None:
        torch._check(
            t.device == ref.device,
            lambda: f"{name} must be on the same device as {ref_name} ({ref.device}), got {t.device}",
        )


def check_optional_batch_vector(
    t: Optional[torch.Tensor], name: str, batch: int, ref: torch.Tensor, ref_name: str = "points"
) -> None:
    """An optional per-cloud int64 vector such as lengths or start: shape (B,), on ref's device."""
    if t is None:
        return
    check_same_device(t, name, ref, ref_name)
    check_dtype(t, name, torch.int64)
    check_shape(t, name, (batch,))


def check_padded_clouds(
    points: torch.Tensor,
    lengths: Optional[torch.Tensor],
    layout: str,
    min_columns: int,
    max_columns: Optional[int] = None,
    name: str = "points",
    lengths_name: str = "lengths",
) -> None:
    """Padded clouds: points (B, N, C) floating with min_columns <= C <= max_columns, lengths (B,)
    int64 on the points' device or None."""
    check_dim(points, name, 3, layout)
    check_floating(points, name)
    torch._check(
        points.shape[2] >= min_columns and (max_columns is None or points.shape[2] <= max_columns),
        lambda: f"{name} must have shape {layout}, got shape {tuple(points.shape)}",
    )
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
            value = torch.cuda.get_device_properties(
                device.index if device.index is not None else torch.cuda.current_device()
            ).total_memory
        _MEMORY[key] = value
    return _MEMORY[key]


def _gib(n: float) -> str:
    return f"{n / 2.0**30:.3g} GiB"


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
        raise RuntimeError(
            f"{what} implies an output of shape {list(shape)} ({numel} elements, {_gib(size)}), "
            f"more than the {device.type} memory ({_gib(cap)})"
        )


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
    return (
        f"{name} must be a torch.Tensor{' ' + layout if layout else ''}, got {observed}: pass {conversion} "
        "(then .to(device) for a GPU); pointops converts no arrays itself"
    )


@torch.jit.unused
def _sizes_eager(size, n: int, name: str) -> List[float]:
    if isinstance(size, numbers.Real) and not isinstance(size, bool):
        return [float(size)] * n
    if isinstance(size, torch.Tensor) and size.dim() == 0:
        return [float(size)] * n
    values = size.tolist() if isinstance(size, torch.Tensor) else size
    if isinstance(values, (list, tuple)) and all(
        isinstance(s, numbers.Real) and not isinstance(s, bool) for s in values
    ):
        return [float(s) for s in values]
    raise ValueError(f"{name} must be a number or a list of {n} numbers, got {size!r}")


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


# ---- scalars and tensor data: the checks every public function shares ----------------------------
#
# A scalar argument is checked on the host. A condition on tensor data (a batch description's
# values, indices) is a 0-d bool tensor handed to `require`, which decides where it is read:
# tensors on the CPU are read at once (no sync to avoid); on CUDA a call that reads the host anyway
# (host=True: its output size comes from the data) reads the condition there, and any other call
# raises it as a device-side assert (torch._assert_async), which fails at the next host read
# instead of stalling the stream now. Compiled and exported graphs keep the assert; TorchScript,
# which drops asynchronous asserts, reads the condition on the CPU (and on CUDA with host=True).


def _integer_like(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@torch.jit.unused
def _int_eager(value, name: str, minimum: int) -> int:
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 0
        and not value.is_floating_point()
        and value.dtype != torch.bool
    ):
        value = int(value)
    if not _integer_like(value):
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def check_int(value: int, name: str, minimum: int = 0) -> int:
    """An integer argument (a count, k, an iteration count): an int (a NumPy integer or a 0-d
    integer tensor too; not a bool or a float) >= minimum, returned as an int; otherwise
    ValueError naming the argument, what it must be and what it got."""
    if torch.jit.is_scripting():
        if value < minimum:
            raise ValueError(name + " must be an int >= " + str(minimum) + ", got " + str(value))
        return value
    return _int_eager(value, name, minimum)


@torch.jit.unused
def _real_eager(value, name: str, minimum: float, strict: bool, maximum: Optional[float]) -> float:
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        value = value.item()
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    return _real_check(float(value), name, minimum, strict, maximum)


def _real_check(value: float, name: str, minimum: float, strict: bool, maximum: Optional[float]) -> float:
    low = (value > minimum) if strict else (value >= minimum)
    high = True if maximum is None else value <= maximum
    if not (math.isfinite(value) and low and high):
        bound = "" if minimum == -math.inf else (" > " if strict else " >= ") + str(minimum)
        if maximum is not None:
            bound = " in " + ("(" if strict else "[") + str(minimum) + ", " + str(maximum) + "]"
        raise ValueError(name + " must be finite" + (" and" + bound if bound else "") + ", got " + str(value))
    return value


def check_real(
    value: float, name: str, minimum: float = 0.0, strict: bool = False, maximum: Optional[float] = None
) -> float:
    """A real argument (a radius, a ratio, a size): finite, >= minimum (> with strict), <= maximum
    when given; returned as a float; otherwise ValueError naming it."""
    if torch.jit.is_scripting():
        return _real_check(value, name, minimum, strict, maximum)
    return _real_eager(value, name, minimum, strict, maximum)


def _symbolic(t: torch.Tensor) -> bool:
    """Whether t has no values to read: under torch.compile / torch.export, a fake or meta tensor."""
    if torch.compiler.is_compiling() or torch.compiler.is_exporting() or t.device.type == "meta":
        return True
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)


def _entry(values: torch.Tensor, name: str, flat: int) -> str:
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), values.shape)]
    where = ", ".join(str(i) for i in index)
    return f"{name}[{where}] = {values.reshape(-1)[flat].item()}"


@torch.jit.unused
def _observed(name: str, values: Optional[torch.Tensor], bad: Optional[torch.Tensor], sorted_: bool) -> str:
    """What the data holds, for the message: the first offending entry (and the one before it,
    for an order), or the values themselves (at most 8)."""
    if values is None:
        return ""
    values = values.detach().cpu()
    if bad is not None and bool(bad.any()):
        flat = int(bad.reshape(-1).nonzero()[0])
        if sorted_ and flat > 0 and bool(values.reshape(-1)[flat] < values.reshape(-1)[flat - 1]):
            return f", got {_entry(values, name, flat)} after {_entry(values, name, flat - 1)}"
        return f", got {_entry(values, name, flat)}"
    shown = values.reshape(-1)[:8].tolist()
    more = ", ..." if values.numel() > 8 else ""
    return (
        f", got {name} = {str(shown)[:-1]}{more}] (shape {list(values.shape)})"
        if values.dim()
        else f", got {name} = {values.item()}"
    )


@torch.jit.unused
def _require_eager(
    ok: torch.Tensor,
    message: str,
    host: bool,
    name: str,
    values: Optional[torch.Tensor],
    bad: Optional[torch.Tensor],
    sorted_: bool,
) -> None:
    if _symbolic(ok):
        torch._assert_async(ok, message[:250])
    elif ok.device.type == "cpu" or host:
        if not bool(ok):
            raise ValueError(message + _observed(name, values, bad, sorted_))
    else:
        torch._assert_async(ok, message[:250])


def require(
    ok: torch.Tensor,
    message: str,
    host: bool = False,
    name: str = "",
    values: Optional[torch.Tensor] = None,
    bad: Optional[torch.Tensor] = None,
    sorted_: bool = False,
) -> None:
    """Refuses tensor data that breaks a condition: ``ok`` a 0-d bool tensor computed from the
    data, ``message`` "<argument> must be <expectation>". Read at once on the CPU, raising
    ValueError(message + what ``values`` holds: the first entry ``bad`` marks, or the values); on
    CUDA read where the call reads the host anyway (``host``), else a device-side assert with the
    message, which fails at the next host read (see above)."""
    if torch.jit.is_scripting():
        if ok.device.type == "cpu" or host:
            if not bool(ok):
                raise ValueError(message)
    else:
        _require_eager(ok, message, host, name, values, bad, sorted_)


def check_index_tensor(t: torch.Tensor, name: str, layout: str, dims: int = -1) -> None:
    """An index tensor: a torch integer tensor (not bool) of ``dims`` dimensions (any: -1)."""
    check_tensor(t, name, layout)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(name + " must be an integer tensor " + layout + ", got " + str(t.dtype))
    if dims >= 0 and t.dim() != dims:
        raise ValueError(name + " must have shape " + layout + ", got " + str(list(t.shape)))


def check_indices(
    idx: torch.Tensor, name: str, size: int, size_name: str, minus_one: bool = True, host: bool = False
) -> None:
    """Indices into ``size`` rows: in [0, size), or -1 for none where ``minus_one``; an index below
    (-5 would be Python's negative indexing) or past the rows is refused."""
    low = -1 if minus_one else 0
    bad = (idx < low) | (idx >= size)
    expectation = ("-1 (none) or " if minus_one else "") + "in [0, " + str(size) + ") (the rows of " + size_name + ")"
    require(~bad.any(), name + " must hold indices " + expectation, host, name, idx, bad)


def check_coords(t: torch.Tensor, name: str, layout: str, dims: int, columns: int = 3) -> None:
    """Points or features under the caller's name: a floating tensor of ``dims`` dimensions
    whose last has ``columns`` entries (any: -1)."""
    check_tensor(t, name, layout)
    if t.dim() != dims or (columns >= 0 and t.shape[-1] != columns):
        raise ValueError(name + " must have shape " + layout + ", got " + str(list(t.shape)))
    if not t.is_floating_point():
        raise ValueError(name + " must be float32, float64, float16 or bfloat16, got " + str(t.dtype))


def check_batch_vector(t: Optional[torch.Tensor], name: str, batch: int, ref: torch.Tensor, ref_name: str) -> None:
    """An optional per-cloud int64 vector (lengths, start) checked in a wrapper before its data is
    used there: shape (B,), int64, on ref's device; plain exceptions, so that compiled code keeps
    them (the fakes' torch._check messages are closures)."""
    if t is None:
        return
    check_tensor(t, name, "(B,)")
    if t.dim() != 1 or t.shape[0] != batch:
        raise ValueError(
            name
            + " must have shape ("
            + str(batch)
            + ",) (one per cloud of "
            + ref_name
            + "), got "
            + str(list(t.shape))
        )
    if t.dtype != torch.int64:
        raise ValueError(name + " must be torch.int64, got " + str(t.dtype))
    if t.device != ref.device:
        raise ValueError(
            name + " must be on the device of " + ref_name + " (" + str(ref.device) + "), got " + str(t.device)
        )


def check_rows(t: torch.Tensor, name: str, rows: int, rows_name: str, dim: int = 0) -> None:
    """``t.shape[dim]`` is the ``rows`` of ``rows_name`` (features of the points, indices of the
    queries)."""
    if t.shape[dim] != rows:
        raise ValueError(
            name
            + " must have "
            + str(rows)
            + " rows along dimension "
            + str(dim)
            + " (as "
            + rows_name
            + "), got shape "
            + str(list(t.shape))
        )
