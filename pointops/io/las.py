"""LAS / LAZ files (laspy, lazrs): read_las."""

import os
from typing import Sequence, Union

import numpy as np
import torch

from ._common import (
    FileFormatError,
    PathLike,
    PointCloud,
    _column,
    _existing_file,
    _float_dtype,
    _library,
    _missing_library,
    _tensor,
    _unit_colors,
)

# float32 may hold a coordinate this many float32 steps coarser than it would hold the cloud's
# extent before the read is refused (see read_las).
_LAS_SLACK_BITS = 4


def _las_check_size(laspy, path: str) -> None:
    """Refuses an uncompressed LAS file whose header declares more point records than the file
    holds, before laspy allocates them (a bare MemoryError otherwise)."""
    try:
        with laspy.open(path) as reader:
            header = reader.header
    except Exception:  # the read below names what is wrong with a malformed header
        return
    if path.lower().endswith(".laz") or getattr(header, "are_points_compressed", False):
        return
    record = header.point_format.size
    have = os.path.getsize(path) - header.offset_to_point_data
    if header.point_count * record > have:
        raise FileFormatError(
            path,
            f"the LAS header declares {header.point_count} points (point count field: "
            f"{header.point_count * record} bytes of {record}-byte records) but the file holds "
            f"{max(have, 0) // record} records ({have} bytes) after offset_to_point_data "
            f"{header.offset_to_point_data}",
        )


def read_las(
    path: PathLike,
    dtype: torch.dtype = torch.float32,
    origin: Union[None, str, Sequence[float]] = None,
) -> PointCloud:
    """Read a LAS file, or a LAZ file (decompressed by lazrs).

    ``points`` are the scaled coordinates ``X * scale + offset`` computed in float64, minus
    ``origin`` when given (a 3-sequence, or ``"header"`` for the file's own header offsets, which
    writers usually put near the data), then converted to ``dtype``. ``intensity`` is the uint16
    intensity as a float; ``colors`` are ``red green blue`` divided by 65535 (the specification's
    16-bit scale) for point formats that carry colour; every other dimension (classification,
    return numbers, GPS time, extra bytes, ...) goes to ``fields``.

    Geo-referenced clouds lie far from the origin (UTM eastings are ~5e5 m, where float32's step
    is 6 cm). A float32 read is refused, with a ValueError naming the file, when float32 would
    round some axis more coarsely than both the file's own scale and 16 float32 steps of the
    cloud's extent along it: pass ``dtype=torch.float64``, or an ``origin`` near the points.

    Raises FileFormatError when the file holds fewer points than its header declares, or (for
    uncompressed files without extended records) at least one whole record more.
    """
    path = _existing_file(path)
    np_dtype = _float_dtype(dtype)
    laspy = _library("laspy", "read_las")
    _las_check_size(laspy, path)
    try:
        las = laspy.read(path)
    except laspy.errors.LaspyException as e:
        if "LazBackend" in str(e) or "lazrs" in str(e).lower():
            raise _missing_library("lazrs", f"pointops.io.read_las, to decompress {path},") from e
        raise FileFormatError(path, f"malformed LAS file: {e}") from e
    except (ValueError, RuntimeError, EOFError, OSError) as e:  # numpy and lazrs errors on short data
        if isinstance(e, FileNotFoundError):
            raise
        raise FileFormatError(path, f"malformed LAS/LAZ file: {type(e).__name__}: {e}") from e
    header = las.header
    n = len(las.points)
    if n != header.point_count:
        raise FileFormatError(path, f"the LAS header declares {header.point_count} points but the file holds {n}")
    record = header.point_format.size
    compressed = path.lower().endswith(".laz") or getattr(header, "are_points_compressed", False)
    if not compressed and getattr(header, "number_of_evlrs", 0) == 0:
        extra = os.path.getsize(path) - (header.offset_to_point_data + n * record)
        if extra >= record:
            raise FileFormatError(
                path,
                f"the LAS header declares {n} points but {extra} more bytes ({extra // record} records) follow them",
            )

    xyz = np.stack(
        [np.asarray(las.x, dtype=np.float64), np.asarray(las.y, dtype=np.float64), np.asarray(las.z, dtype=np.float64)],
        1,
    )
    if origin is not None:
        if isinstance(origin, str) and origin != "header":
            raise ValueError(f'read_las: origin must be None, "header" or 3 numbers, got "{origin}"')
        shift = np.asarray(header.offsets if isinstance(origin, str) else origin, dtype=np.float64)
        if shift.shape != (3,):
            raise ValueError(f"read_las: origin must hold 3 numbers, got shape {shift.shape}")
        xyz = xyz - shift
    if np_dtype == np.float32 and n:
        finite = xyz[np.isfinite(xyz).all(1)]
        if len(finite):
            reach = np.abs(finite).max(0).astype(np.float32)
            extent = (finite.max(0) - finite.min(0)).astype(np.float32)
            step = np.spacing(reach)
            allowed = np.maximum(
                np.asarray(header.scales, dtype=np.float64), np.spacing(extent).astype(np.float64) * 2**_LAS_SLACK_BITS
            )
            lossy = np.nonzero(step > allowed)[0]
            if len(lossy):
                a = int(lossy[0])
                raise ValueError(
                    f"{path}: float32 would round {'xyz'[a]} (up to {float(reach[a]):.6g} from the origin, over an "
                    f"extent of {float(extent[a]):.6g}) to steps of {float(step[a]):.3g}, coarser than the file's "
                    f'scale {header.scales[a]:.3g}; read with dtype=torch.float64, or with origin="header" or '
                    f"origin=(x, y, z) near the points"
                )
    points = torch.from_numpy(xyz.astype(np_dtype))
    names = list(las.point_format.dimension_names)
    used = {"X", "Y", "Z"}
    intensity = None
    if "intensity" in names:
        intensity = _column(las["intensity"], np_dtype)
        used.add("intensity")
    colors = None
    if all(c in names for c in ("red", "green", "blue")):
        colors = _unit_colors([np.asarray(las[c]).astype(np.uint16) for c in ("red", "green", "blue")])
        used |= {"red", "green", "blue"}
    fields = {name: _tensor(np.asarray(las[name])) for name in names if name not in used}
    return PointCloud(points, None, colors, intensity, None, fields)
