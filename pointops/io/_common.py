"""What the format modules of pointops.io share: the cloud and mesh types, the error, the optional
libraries, column conversions and the bounded reader of text headers (PLY, PCD)."""

import errno
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

PathLike = Union[str, "os.PathLike[str]"]


class FileFormatError(ValueError):
    """A file that is truncated, malformed, or whose header disagrees with its data.

    The message starts with the file's path; ``path`` holds it too.
    """

    def __init__(self, path: PathLike, problem: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {problem}")


class PointCloud(NamedTuple):
    """One cloud as read from a file. Every field is always present; None where the file has none.

    ``fields`` holds the per-point attributes that have no slot of their own (labels, return
    numbers, GPS time, ...), by the file's names, first dimension N. Readers always fill it (an
    empty dict when there is nothing else); None is accepted when building a cloud to write.
    """

    points: Tensor  # (N, 3) float32 (float64 on request)
    normals: Optional[Tensor] = None  # (N, 3), dtype of points
    colors: Optional[Tensor] = None  # (N, 3) float32 in [0, 1]
    intensity: Optional[Tensor] = None  # (N,), dtype of points
    faces: Optional[Tensor] = None  # (F, 3) int64 triangles indexing points (PLY faces, meshes)
    fields: Optional[Dict[str, Tensor]] = None  # name -> (N,) or (N, C)


class Mesh(NamedTuple):
    """A triangle mesh: ``faces[f]`` are the rows of ``vertices`` at the corners of triangle f."""

    vertices: Tensor  # (V, 3) float32 (float64 on request)
    faces: Tensor  # (F, 3) int64

    @property
    def diameter(self) -> float:
        """The bounding box's diagonal."""
        return float((self.vertices.amax(0) - self.vertices.amin(0)).norm())

    def transformed(self, pose: Tensor) -> "Mesh":
        """The mesh moved by a (4, 4) rigid transform."""
        return Mesh(self.vertices @ pose[:3, :3].T + pose[:3, 3], self.faces)


# The format libraries and the versions pointops is tested with: setup.py's "io" extra (a test holds
# the two equal). A missing one is named with its pin, for pip, whichever way pointops was installed.
FORMAT_PACKAGES = {
    "plyfile": "plyfile==1.1.5",
    "pypcd4": "pypcd4==1.5.1",
    "laspy": "laspy==2.7.0",
    "lazrs": "lazrs==0.8.2",
    "trimesh": "trimesh==5.2.0",
}


def _missing_library(package: str, needed_for: str) -> ImportError:
    pin = FORMAT_PACKAGES.get(package, package)
    return ImportError(
        f"{needed_for} needs the '{package}' package, which is not installed: pip install '{pin}' "
        f"(all of pointops.io's format libraries: pip install {' '.join(repr(p) for p in FORMAT_PACKAGES.values())})"
    )


def _library(module: str, function: str):
    """Import an optional format library, or say which package to install, with its version."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise _missing_library(module, f"pointops.io.{function}") from e


def _existing_file(path: PathLike) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return path


def _float_dtype(dtype: torch.dtype) -> np.dtype:
    if dtype == torch.float32:
        return np.dtype(np.float32)
    if dtype == torch.float64:
        return np.dtype(np.float64)
    raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")


def _tensor(array: np.ndarray) -> Tensor:
    """A torch copy of ``array`` in native byte order, with thinly supported unsigned types widened."""
    array = np.asarray(array)
    if array.dtype.kind in "SUOV":
        raise TypeError(f"not a numeric array: {array.dtype}")
    native = array.dtype.newbyteorder("=")
    if array.dtype.kind == "u" and array.dtype.itemsize > 1:
        native = np.dtype(np.int32 if array.dtype.itemsize == 2 else np.int64)
    return torch.from_numpy(np.array(array, dtype=native, copy=True, order="C"))


def _column(array: np.ndarray, dtype: np.dtype) -> Tensor:
    """A torch copy of one column (columns of a record array are strided views of the file)."""
    return torch.from_numpy(np.array(array, dtype=dtype, copy=True, order="C"))


def _stack_columns(columns: Sequence[np.ndarray], dtype: np.dtype) -> Tensor:
    return torch.from_numpy(np.stack([np.asarray(c, dtype=dtype) for c in columns], axis=1))


def _unit_colors(columns: Sequence[np.ndarray]) -> Tensor:
    """Colour channels to float32 in [0, 1]: unsigned integers by their full range, floats as stored.

    Signed integer channels are taken as 0-255 values (files that declare ``int red``).
    """
    kind, size = columns[0].dtype.kind, columns[0].dtype.itemsize
    stacked = np.stack([np.asarray(c) for c in columns], axis=1)
    if kind == "f":
        return torch.from_numpy(stacked.astype(np.float32))
    full = float(2 ** (8 * size) - 1) if kind == "u" else 255.0
    return torch.from_numpy(stacked.astype(np.float32) / np.float32(full))


def _colors_to_u8(colors: Tensor) -> np.ndarray:
    """[0, 1] colours to 0-255, rounded to nearest; the readers' k / 255 comes back as k."""
    c = colors.detach().cpu().double().numpy()
    if not np.isfinite(c).all():
        raise ValueError("colors must be finite to be written as 8-bit channels")
    return np.rint(np.clip(c, 0.0, 1.0) * 255.0).astype(np.uint8)


def _fields_dict(fields: Optional[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    return {} if fields is None else dict(fields)


def _as_cloud(cloud: Union[PointCloud, Tensor], function: str) -> PointCloud:
    if isinstance(cloud, Tensor):
        cloud = PointCloud(cloud)
    if not isinstance(cloud, PointCloud):
        raise TypeError(f"{function}: cloud must be a PointCloud or an (N, 3) tensor, got {type(cloud).__name__}")
    points = cloud.points
    if points.dim() != 2 or points.shape[1] != 3 or not points.is_floating_point():
        raise ValueError(
            f"{function}: points must be a floating (N, 3) tensor, got {tuple(points.shape)} {points.dtype}"
        )
    n = points.shape[0]
    for name in ("normals", "colors"):
        value = getattr(cloud, name)
        if value is not None and tuple(value.shape) != (n, 3):
            raise ValueError(f"{function}: {name} must be ({n}, 3) like points, got {tuple(value.shape)}")
    if cloud.intensity is not None and tuple(cloud.intensity.shape) != (n,):
        raise ValueError(f"{function}: intensity must be ({n},), got {tuple(cloud.intensity.shape)}")
    for name, value in _fields_dict(cloud.fields).items():
        if value.dim() not in (1, 2) or value.shape[0] != n:
            raise ValueError(f"{function}: field '{name}' must be ({n},) or ({n}, C), got {tuple(value.shape)}")
    if cloud.faces is not None:
        faces = cloud.faces
        if faces.dim() != 2 or faces.shape[1] != 3 or faces.is_floating_point():
            raise ValueError(
                f"{function}: faces must be an integer (F, 3) tensor, got {tuple(faces.shape)} {faces.dtype}"
            )
        if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= n):
            raise ValueError(
                f"{function}: faces must index points in [0, {n}), got values in "
                f"[{int(faces.min())}, {int(faces.max())}]"
            )
    return cloud


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def _check_faces(path: str, faces: np.ndarray, n_vertices: int) -> None:
    if faces.size == 0:
        return
    low, high = int(faces.min()), int(faces.max())
    if low < 0 or high >= n_vertices:
        bad = low if low < 0 else high
        row = int(np.nonzero((faces == bad).any(axis=1))[0][0])
        raise FileFormatError(path, f"face {row} refers to vertex {bad}, but the file has {n_vertices} vertices")


def _fan_triangles(path: str, polygons: np.ndarray) -> np.ndarray:
    """(F, 3) int64 triangles from an object array of index lists, each polygon split into a fan."""
    if polygons.dtype != object:  # fixed-length lists come back as an (F, k) array
        polygons = np.asarray(polygons)
        k = polygons.shape[1] if polygons.ndim == 2 else 0
        if polygons.ndim != 2 or k < 3:
            raise FileFormatError(path, f"faces must have at least 3 vertices, got {k}")
        if k == 3:
            return polygons.astype(np.int64)
        j = np.arange(1, k - 1)
        fan = np.stack([np.repeat(polygons[:, :1], k - 2, 1), polygons[:, j], polygons[:, j + 1]], 2)
        return fan.reshape(-1, 3).astype(np.int64)
    counts = np.fromiter((len(p) for p in polygons), dtype=np.int64, count=len(polygons))
    if len(counts) == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if counts.min() < 3:
        row = int(np.argmax(counts < 3))
        raise FileFormatError(path, f"face {row} has {counts[row]} vertices; a face needs at least 3")
    flat = np.concatenate([np.asarray(p, dtype=np.int64) for p in polygons])
    starts = np.cumsum(counts) - counts
    tris = counts - 2
    first = np.repeat(starts, tris)
    step = np.arange(int(tris.sum())) - np.repeat(np.cumsum(tris) - tris, tris)
    return np.stack([flat[first], flat[first + step + 1], flat[first + step + 2]], 1)


def text_header(
    path: str, stream, fmt: str, last: str, max_bytes: int, max_lines: Optional[int] = None, strict: bool = True
) -> Tuple[List[str], int]:
    """The text header at the start of ``stream`` (PLY, PCD): its lines, stripped, with blank and
    ``#`` comment lines left out, up to and including the first whose first word is ``last`` (any
    case), and the offset of the byte after that line; offset -1 when the file ends first (the
    caller names what is missing). Read a line at a time and bounded, so a huge line is never read
    whole: FileFormatError when no such line comes within ``max_bytes`` bytes or ``max_lines``
    counted lines. Bytes that are not ASCII are an error when ``strict``, replaced otherwise."""
    lines: List[str] = []
    while max_lines is None or len(lines) < max_lines:
        if stream.tell() >= max_bytes:
            raise FileFormatError(
                path, f"the {fmt} header has no {last} line within its first {max_bytes} bytes (header size limit)"
            )
        raw = stream.readline(max_bytes - stream.tell() + 1)
        if not raw:
            return lines, -1
        try:
            line = raw.decode("ascii", errors="strict" if strict else "replace").strip()
        except UnicodeDecodeError:
            raise FileFormatError(path, f"the {fmt} header holds non-text bytes before its {last} line") from None
        if not line or line.startswith("#"):
            continue
        lines.append(line)
        if line.split()[0].lower() == last.lower():
            return lines, stream.tell()
    raise FileFormatError(
        path,
        f"the {fmt} header has no {last} line within its first {max_lines} keyword lines (comment lines do not count)",
    )
