"""XYZ / PWN / PTS text, hand-written (one numpy call, with the checks no maintained library makes): read_xyz."""

import os
import warnings
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

from ._common import FileFormatError, PathLike, PointCloud, _existing_file, _float_dtype, _stack_columns

_XYZ_DEFAULT_COLUMNS = {3: "x y z", 4: "x y z intensity", 6: "x y z nx ny nz"}
# A point's line holds a few numbers; a longer line is refused before numpy tokenizes it (a 200 MB
# line of numbers took 4.8 GB).
_XYZ_MAX_LINE_BYTES = 1 << 16


def _longest_line(path: str) -> Tuple[int, int]:
    """(length in bytes, 1-based number) of the file's longest line, read in 1 MiB chunks."""
    longest, number, line_start, lines_before, offset = 0, 1, 0, 0, 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10) + offset
            starts = np.concatenate([[line_start], ends[:-1] + 1]) if len(ends) else np.array([line_start])
            if len(ends):
                lengths = ends - starts
                k = int(lengths.argmax())
                if lengths[k] > longest:
                    longest, number = int(lengths[k]), lines_before + k + 1
                lines_before += len(ends)
                line_start = int(ends[-1]) + 1
            offset += len(chunk)
            if offset - line_start > longest:  # the open line so far
                longest, number = offset - line_start, lines_before + 1
            if longest > _XYZ_MAX_LINE_BYTES:
                break
    return longest, number


_PTS_DEFAULT_COLUMNS = {3: "x y z", 4: "x y z intensity", 6: "x y z r g b", 7: "x y z intensity r g b"}


def read_xyz(path: PathLike, columns: Optional[Sequence[str]] = None, dtype: torch.dtype = torch.float32) -> PointCloud:
    """Read a whitespace-separated text cloud: ``.xyz``, ``.pwn`` or Leica ``.pts``, one point a line.

    ``columns`` names the columns; without it the count decides: ``.xyz`` / ``.pwn``: 3 ``x y z``,
    4 ``x y z intensity``, 6 ``x y z nx ny nz``; ``.pts``: 3, 4, 6 ``x y z r g b`` and 7 ``x y z
    intensity r g b``. Names ``x y z`` are the points, ``nx ny nz`` the normals, ``r g b`` 0-255
    colours (a value outside [0, 255], NaN included, is refused), ``intensity`` the intensity,
    ``_`` a column to skip; any other name becomes a field. Lines are at most 64 KiB.
    Lines starting with ``#`` are comments. A ``.pts`` file may start with a line holding only the
    point count, which must then match the rows.

    Raises FileFormatError on rows with differing column counts, non-numeric values, or a count
    line that disagrees with the rows.
    """
    path = _existing_file(path)
    np_dtype = _float_dtype(dtype)
    ext = os.path.splitext(path)[1].lower()
    longest, number = _longest_line(path)
    if longest > _XYZ_MAX_LINE_BYTES:
        raise FileFormatError(
            path,
            f"line {number} is longer than {_XYZ_MAX_LINE_BYTES} bytes (line size limit); a "
            f"text cloud holds one point, a few numbers, a line",
        )
    declared = None
    skip = 0
    with open(path, "rb") as f:
        for line in f:
            text = line.strip()
            if not text or text.startswith(b"#"):
                skip += 1
                continue
            tokens = text.split()
            if ext == ".pts" and len(tokens) == 1 and tokens[0].isdigit():
                declared, skip = int(tokens[0]), skip + 1
            break
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns on an empty file; the checks below speak
        try:
            table = np.loadtxt(path, dtype=np.float64, comments="#", skiprows=skip, ndmin=2, encoding="utf-8")
        except (ValueError, UnicodeDecodeError) as e:
            raise FileFormatError(path, f"malformed text cloud: {e}") from e
    if declared is not None and table.shape[0] != declared:
        raise FileFormatError(path, f"the count line declares {declared} points but {table.shape[0]} rows follow")
    n_cols = table.shape[1] if table.shape[0] else (len(columns) if columns is not None else 3)
    if columns is None:
        table_of = _PTS_DEFAULT_COLUMNS if ext == ".pts" else _XYZ_DEFAULT_COLUMNS
        if n_cols not in table_of:
            raise FileFormatError(
                path, f"{n_cols} columns per row; pass columns=[...] to name them (known layouts: {table_of})"
            )
        columns = table_of[n_cols].split()
    columns = list(columns)
    if len(columns) != n_cols:
        raise FileFormatError(path, f"columns names {len(columns)} columns but the rows have {n_cols}")
    named = [c for c in columns if c != "_"]
    if not all(c in columns for c in "xyz") or len(set(named)) != len(named):
        raise ValueError(f"read_xyz: columns must name x, y and z once each, got {columns}")
    table = table.reshape(-1, n_cols)
    col = {name: table[:, i] for i, name in enumerate(columns) if name != "_"}
    points = _stack_columns([col.pop(c) for c in "xyz"], np_dtype)
    normals = None
    if all(c in col for c in ("nx", "ny", "nz")):
        normals = _stack_columns([col.pop(c) for c in ("nx", "ny", "nz")], np_dtype)
    colors = None
    if all(c in col for c in "rgb"):
        rgb = np.stack([col.pop(c) for c in "rgb"], 1)
        bad = ~((rgb >= 0) & (rgb <= 255))
        if bad.any():
            row, channel = (int(v) for v in np.argwhere(bad)[0])
            raise FileFormatError(
                path,
                f"colour column '{'rgb'[channel]}' holds {rgb[row, channel]:g} in data row "
                f"{row + 1}; r g b are 0-255 values ({int(bad.any(1).sum())} rows out of "
                f"range)",
            )
        colors = torch.from_numpy(rgb.astype(np.float32) / np.float32(255.0))
    intensity = torch.from_numpy(col.pop("intensity").astype(np_dtype)) if "intensity" in col else None
    fields = {name: torch.from_numpy(values.astype(np_dtype)) for name, values in col.items()}
    return PointCloud(points, normals, colors, intensity, None, fields)
