"""Point-cloud and mesh files to tensors, and back.

``read(path)`` picks the reader from the file's extension; the per-format readers take the
format's own options. Every reader returns a :class:`PointCloud` (``read_mesh``: a :class:`Mesh`)
of CPU tensors:

========================  ===================================================================
``.ply``                  :func:`read_ply` (ascii, binary little / big endian), :func:`write_ply`
``.pcd``                  :func:`read_pcd` (ascii, binary, binary_compressed), :func:`write_pcd`
``.las``, ``.laz``        :func:`read_las`
``.off .obj .stl``        :func:`read_mesh` (``read`` gives the vertices as points, and faces)
``.xyz .pwn .pts``        :func:`read_xyz` (whitespace-separated text)
``.bin``                  :func:`read_kitti_bin` (KITTI velodyne scans), :func:`write_kitti_bin`
========================  ===================================================================

The formats are decoded by the libraries the field maintains for them (plyfile, pypcd4, laspy
with lazrs for LAZ, trimesh); they are optional (:data:`FORMAT_PACKAGES`, the ``io`` extra) and are
imported inside the functions that need them, so ``import pointops`` loads none of them. Only
what no library does is written here: XYZ/PTS text and KITTI ``.bin`` (a numpy call each), the
ascii body of PCD files (see :func:`read_pcd`), and the consistency checks below.

Truncated or malformed input raises :class:`FileFormatError` (a ``ValueError``) whose message
starts with the file's path and says what is wrong: a header whose point count disagrees with the
data that follows, a missing header field, a face that names a vertex the file lacks. A missing
file raises ``FileNotFoundError``. Nothing is repaired or guessed silently.

dtypes: points, normals and intensity are float32 unless ``dtype=torch.float64`` is asked for;
colours are float32 in [0, 1]; faces are int64 triangles (polygons are split into fans around
their first vertex). Other per-point fields keep the file's type, widened where torch's support
for the type is thin: uint16 -> int32, uint32 and uint64 -> int64.
"""
import errno
import os
import warnings
from io import BytesIO
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "FileFormatError",
    "Mesh",
    "PointCloud",
    "read",
    "read_kitti_bin",
    "read_las",
    "read_mesh",
    "read_pcd",
    "read_ply",
    "read_xyz",
    "write_kitti_bin",
    "write_pcd",
    "write_ply",
]

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

    def face_normals(self) -> Tensor:
        """(F, 3) unit normals by the right-hand rule of each face's vertex order."""
        v = self.vertices[self.faces]
        n = torch.linalg.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
        return n / n.norm(dim=1, keepdim=True).clamp(min=1e-300)

    def face_areas(self) -> Tensor:
        v = self.vertices[self.faces]
        return torch.linalg.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]).norm(dim=1) / 2

    def transformed(self, pose: Tensor) -> "Mesh":
        """The mesh moved by a (4, 4) rigid transform."""
        return Mesh(self.vertices @ pose[:3, :3].T + pose[:3, 3], self.faces)


# ---------------------------------------------------------------------------------------------
# shared helpers


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
        package = {"lzf": "python-neo-lzf"}.get(module, module)
        raise _missing_library(package, f"pointops.io.{function}") from e


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
            f"{function}: points must be a floating (N, 3) tensor, got {tuple(points.shape)} {points.dtype}")
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
                f"{function}: faces must be an integer (F, 3) tensor, got {tuple(faces.shape)} {faces.dtype}")
        if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= n):
            raise ValueError(f"{function}: faces must index points in [0, {n}), got values in "
                             f"[{int(faces.min())}, {int(faces.max())}]")
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


# ---------------------------------------------------------------------------------------------
# PLY (plyfile)

_PLY_COLORS = (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue"))
_PLY_INTENSITY = ("intensity", "scalar_intensity")
_PLY_FACE_LISTS = ("vertex_indices", "vertex_index")


# A PLY header is a few dozen short lines; one that runs past this without end_header is not a PLY
# header (plyfile would parse a 200 MB header line for minutes).
_PLY_MAX_HEADER_BYTES = 1 << 20
_PLY_SIZES = {"char": 1, "int8": 1, "uchar": 1, "uint8": 1, "short": 2, "int16": 2, "ushort": 2, "uint16": 2,
              "int": 4, "int32": 4, "uint": 4, "uint32": 4, "float": 4, "float32": 4, "double": 8, "float64": 8}


def _ply_check_header(path: str, stream) -> None:
    """Refuses, before plyfile reads anything, a header longer than _PLY_MAX_HEADER_BYTES and
    element counts whose rows cannot fit in the bytes after the header (a binary row takes at
    least its scalar properties' sizes plus each list's count, an ascii row at least two bytes a
    property)."""
    head = stream.read(_PLY_MAX_HEADER_BYTES + 1)
    stream.seek(0)
    end = _ply_header_end(head)
    if end < 0:
        if len(head) > _PLY_MAX_HEADER_BYTES:
            raise FileFormatError(path, f"the PLY header has no end_header line within its first "
                                        f"{_PLY_MAX_HEADER_BYTES} bytes (header size limit)")
        return  # plyfile names what is missing
    lines = head[:end].decode("ascii", errors="replace").splitlines()
    ascii_format = any(line.split()[:2] == ["format", "ascii"] for line in lines)
    elements = []  # [name, count, least bytes per row]
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[0] == "element":
            try:
                elements.append([words[1], int(words[2]), 0])
            except ValueError:
                return  # plyfile names the bad count
        elif len(words) >= 3 and words[0] == "property" and elements:
            if ascii_format:
                elements[-1][2] += 2
            elif words[1] == "list":
                elements[-1][2] += _PLY_SIZES.get(words[2], 1)
            else:
                elements[-1][2] += _PLY_SIZES.get(words[1], 1)
    have = os.path.getsize(path) - end
    need = sum(count * max(least, 1) for _, count, least in elements if count > 0)
    if need > have + 1:
        listed = ", ".join(f"element {name} {count}" for name, count, _ in elements)
        raise FileFormatError(path, f"the PLY header declares {listed}: at least {need} bytes of data, but the file "
                                    f"holds {have} bytes after its header")


def _ply_header_end(raw: bytes) -> int:
    at = raw.find(b"end_header")
    if at < 0:
        return -1
    end = raw.find(b"\n", at)
    return len(raw) if end < 0 else end + 1


def _trailing_newline(path: str, end: int) -> bool:
    """Whether the bytes after ``end`` are one line end (some writers close binary data with one)."""
    with open(path, "rb") as f:
        f.seek(end)
        return f.read() in (b"\n", b"\r\n")


def read_ply(path: PathLike, dtype: torch.dtype = torch.float32) -> PointCloud:
    """Read a PLY file (ascii, binary_little_endian or binary_big_endian).

    The ``vertex`` element gives the points (``x y z``, required), ``normals`` (``nx ny nz``),
    ``colors`` (``red green blue``, ``r g b`` or ``diffuse_*``; uchar / ushort scaled to [0, 1],
    float stored as is), ``intensity`` (``intensity`` or ``scalar_intensity``) and ``fields``
    (every other vertex property; list properties of one length as (N, C)). A ``face`` element's
    ``vertex_indices`` (or ``vertex_index``) lists give ``faces``, polygons split into triangle
    fans. Other elements (edges, materials) and face properties are not read.

    Raises FileFormatError when the file is truncated, holds more data than its header declares,
    or has no x, y, z vertex properties.
    """
    path = _existing_file(path)
    np_dtype = _float_dtype(dtype)
    plyfile = _library("plyfile", "read_ply")
    raw = None
    with open(path, "rb") as stream:
        _ply_check_header(path, stream)
        head = stream.read(4096)
        stream.seek(0)
        if b"format ascii" in head.split(b"end_header", 1)[0]:
            # plyfile wraps a binary stream in a text reader that it leaves open; an in-memory copy
            # keeps the file's handle ours (and the row count below needs the bytes anyway).
            raw = stream.read()
            stream = BytesIO(raw)
        try:
            # Triangle lists of known length let plyfile map binary faces in one numpy read
            # instead of a Python loop per face; meshes with other polygons fall back below.
            try:
                ply = plyfile.PlyData.read(stream, known_list_len={"face": {n: 3 for n in _PLY_FACE_LISTS}})
            except plyfile.PlyElementParseError as e:
                if "unexpected list length" not in str(e):
                    raise
                stream.seek(0)
                ply = plyfile.PlyData.read(stream, mmap=False)
            end = None if ply.text else stream.tell()
        except (plyfile.PlyParseError, ValueError, UnicodeDecodeError, OverflowError, MemoryError) as e:
            raise FileFormatError(path, f"malformed PLY file: {e}") from e
    size = os.path.getsize(path)
    declared = {el.name: el.count for el in ply.elements}
    if ply.text:
        # plyfile stops after the rows the header declares; rows past them mean the header's
        # counts are wrong, so the file cannot be trusted to hold what it says.
        if raw is None:
            with open(path, "rb") as f:
                raw = f.read()
        rows = sum(1 for line in raw[_ply_header_end(raw):].splitlines() if line.strip())
        if rows != sum(declared.values()):
            raise FileFormatError(
                path, f"the header declares {sum(declared.values())} data rows ({declared}) but the file has {rows}")
    elif end != size and not (size - end <= 2 and _trailing_newline(path, end)):
        raise FileFormatError(
            path, f"{size - end} bytes follow the data that the header declares ({declared}); "
                  f"the element counts in the header are wrong")

    if "vertex" not in ply:
        raise FileFormatError(path, "no 'vertex' element")
    vertex = ply["vertex"].data
    names = list(vertex.dtype.names)
    lower = {n.lower(): n for n in names}
    missing = [c for c in ("x", "y", "z") if c not in names]
    if missing:
        raise FileFormatError(path, f"the vertex element has no {', '.join(missing)} property (has {names})")
    used = {"x", "y", "z"}
    points = _stack_columns([vertex["x"], vertex["y"], vertex["z"]], np_dtype)
    normals = None
    if all(c in names for c in ("nx", "ny", "nz")):
        normals = _stack_columns([vertex["nx"], vertex["ny"], vertex["nz"]], np_dtype)
        used |= {"nx", "ny", "nz"}
    colors = None
    for triple in _PLY_COLORS:
        if all(c in names for c in triple):
            colors = _unit_colors([vertex[c] for c in triple])
            used |= set(triple)
            break
    intensity = None
    for name in _PLY_INTENSITY:
        if name in lower:
            intensity = _column(vertex[lower[name]], np_dtype)
            used.add(lower[name])
            break
    fields = {}
    for name in names:
        if name in used:
            continue
        column = vertex[name]
        if column.dtype == object:  # a list property: keep it when every list has one length
            lengths = {len(v) for v in column}
            if len(lengths) > 1:
                raise FileFormatError(path, f"vertex list property '{name}' has lists of lengths {sorted(lengths)}; "
                                            "only lists of one length can become an (N, C) field")
            column = np.stack(list(column)) if len(column) else np.zeros((0, lengths.pop() if lengths else 0))
        fields[name] = _tensor(column)

    faces = None
    if "face" in ply:
        face = ply["face"].data
        key = next((n for n in _PLY_FACE_LISTS if n in face.dtype.names), None)
        if key is None:
            raise FileFormatError(path, f"the face element has no vertex_indices list (has {list(face.dtype.names)})")
        tri = _fan_triangles(path, face[key])
        _check_faces(path, tri, points.shape[0])
        faces = torch.from_numpy(np.ascontiguousarray(tri, dtype=np.int64))
    return PointCloud(points, normals, colors, intensity, faces, fields)


_PLY_TYPES = {
    np.dtype(np.int8): "i1", np.dtype(np.uint8): "u1", np.dtype(np.int16): "i2", np.dtype(np.uint16): "u2",
    np.dtype(np.int32): "i4", np.dtype(np.uint32): "u4", np.dtype(np.float32): "f4", np.dtype(np.float64): "f8",
}


def _ply_type(path: str, name: str, array: np.ndarray) -> str:
    if array.dtype == np.bool_:
        return "u1"
    if array.dtype == np.int64:  # PLY has no 64-bit integers: store as int32 when the values fit
        if array.size and (array.min() < -(2**31) or array.max() >= 2**31):
            raise ValueError(
                f"write_ply {path}: field '{name}' holds int64 values outside int32, which PLY cannot store")
        return "i4"
    if array.dtype not in _PLY_TYPES:
        raise ValueError(f"write_ply {path}: field '{name}' has dtype {array.dtype}, which PLY cannot store")
    return _PLY_TYPES[array.dtype]


def write_ply(path: PathLike, cloud: Union[PointCloud, Tensor], ascii: bool = False) -> None:
    """Write a cloud as PLY (binary little endian, or ascii), with its faces if it has any.

    Points, normals and intensity keep their float type (float / double); colours are written
    as uchar ``red green blue`` (rounded to the nearest of 256 levels, so colours read from an
    8-bit file come back bit for bit); ``fields`` become vertex properties ((N, C) ones: lists of
    length C); int64 fields are stored as int32 (PLY has no 64-bit integers) when they fit.
    ``read_ply`` of the file returns the same arrays, bit for bit, in ascii too (floats are
    printed with enough digits to round-trip).
    """
    path = os.fspath(path)
    plyfile = _library("plyfile", "write_ply")
    cloud = _as_cloud(cloud, "write_ply")
    columns: List[Tuple[str, np.ndarray]] = []
    points = _numpy(cloud.points)
    columns += [("x", points[:, 0]), ("y", points[:, 1]), ("z", points[:, 2])]
    if cloud.normals is not None:
        normals = _numpy(cloud.normals)
        columns += [("nx", normals[:, 0]), ("ny", normals[:, 1]), ("nz", normals[:, 2])]
    if cloud.colors is not None:
        rgb = _colors_to_u8(cloud.colors)
        columns += [("red", rgb[:, 0]), ("green", rgb[:, 1]), ("blue", rgb[:, 2])]
    if cloud.intensity is not None:
        columns.append(("intensity", _numpy(cloud.intensity)))
    for name, value in _fields_dict(cloud.fields).items():
        columns.append((name, _numpy(value)))
    seen = set()
    descr = []
    for name, column in columns:
        if name in seen:
            raise ValueError(f"write_ply {path}: property '{name}' given twice (a field repeats a named slot)")
        seen.add(name)
        kind = _ply_type(path, name, column)
        descr.append((name, kind) if column.ndim == 1 else (name, kind, (column.shape[1],)))
    vertex = np.empty(points.shape[0], dtype=descr)
    for name, column in columns:
        vertex[name] = column
    elements = [plyfile.PlyElement.describe(vertex, "vertex")]
    if cloud.faces is not None:
        face = np.empty(cloud.faces.shape[0], dtype=[("vertex_indices", "i4", (3,))])
        face["vertex_indices"] = _numpy(cloud.faces)
        elements.append(plyfile.PlyElement.describe(face, "face", len_types={"vertex_indices": "u1"}))
    plyfile.PlyData(elements, text=ascii, byte_order="<").write(path)


# ---------------------------------------------------------------------------------------------
# PCD (pypcd4)

_PCD_REQUIRED = ("FIELDS", "SIZE", "TYPE", "COUNT", "WIDTH", "POINTS", "DATA")
_PCD_TYPES = {("F", 4): "f4", ("F", 8): "f8", ("U", 1): "u1", ("U", 2): "u2", ("U", 4): "u4", ("U", 8): "u8",
              ("I", 1): "i1", ("I", 2): "i2", ("I", 4): "i4", ("I", 8): "i8"}
_PCD_NORMALS = ("normal_x", "normal_y", "normal_z")
# The header's keyword lines (comment lines do not count) and its bytes: a PCD header is about a
# dozen short lines, a longer one is not a PCD header (and is never read whole).
_PCD_MAX_HEADER_LINES = 64
_PCD_MAX_HEADER_BYTES = 1 << 20


def _pcd_header(path: str, stream) -> Tuple[List[str], Dict[str, List[str]], int]:
    """The header lines up to DATA, their values by keyword, and the offset where the data starts."""
    lines, values = [], {}
    while len(lines) < _PCD_MAX_HEADER_LINES:
        if stream.tell() >= _PCD_MAX_HEADER_BYTES:
            raise FileFormatError(path, f"the PCD header has no DATA line within its first {_PCD_MAX_HEADER_BYTES} "
                                        f"bytes (header size limit)")
        raw = stream.readline(_PCD_MAX_HEADER_BYTES - stream.tell() + 1)
        if not raw:
            break
        try:
            line = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise FileFormatError(path, "the PCD header holds non-text bytes before its DATA line") from None
        if not line or line.startswith("#"):
            continue
        lines.append(line)
        key, *rest = line.split()
        values[key.upper()] = rest
        if key.upper() == "DATA":
            return lines, values, stream.tell()
    missing = [k for k in _PCD_REQUIRED if k not in values]
    if len(lines) >= _PCD_MAX_HEADER_LINES:
        raise FileFormatError(path, f"PCD header has no DATA line within its first {_PCD_MAX_HEADER_LINES} keyword "
                                    f"lines (comment lines do not count; missing {', '.join(missing)})")
    raise FileFormatError(path, f"PCD header has no DATA line (missing header field(s) {', '.join(missing)})")


def _pcd_layout(path: str, values: Dict[str, List[str]]) -> Tuple[List[str], List[int], List[str], int, str]:
    """Checked FIELDS, COUNT, numpy type of each field, POINTS and DATA of a PCD header."""
    missing = [k for k in _PCD_REQUIRED if k not in values]
    if missing:
        raise FileFormatError(path, f"PCD header is missing field(s) {', '.join(missing)}")
    fields = values["FIELDS"]
    per_field = {k: values[k] for k in ("SIZE", "TYPE", "COUNT")}
    for key, got in per_field.items():
        if len(got) != len(fields):
            raise FileFormatError(path, f"PCD header lists {len(fields)} FIELDS but {len(got)} {key} values")
    try:
        sizes = [int(v) for v in values["SIZE"]]
        counts = [int(v) for v in values["COUNT"]]
        width, points = int(values["WIDTH"][0]), int(values["POINTS"][0])
        height = int(values["HEIGHT"][0]) if "HEIGHT" in values else 1
    except (ValueError, IndexError):
        raise FileFormatError(
            path, "PCD header has a SIZE, COUNT, WIDTH, HEIGHT or POINTS value that is not an integer") from None
    types = []
    for name, t, s in zip(fields, values["TYPE"], sizes):
        if (t.upper(), s) not in _PCD_TYPES:
            raise FileFormatError(path, f"PCD field '{name}' has TYPE {t} with SIZE {s}, which is no PCD type")
        types.append(_PCD_TYPES[(t.upper(), s)])
    if min(counts, default=1) < 1 or min(width, height, points) < 0:
        raise FileFormatError(path, "PCD header has a COUNT below 1 or a negative WIDTH, HEIGHT or POINTS")
    if width * height != points:
        raise FileFormatError(path, f"PCD header's WIDTH x HEIGHT = {width} x {height} disagrees with POINTS {points}")
    data = values["DATA"][0].lower() if values["DATA"] else ""
    if data not in ("ascii", "binary", "binary_compressed"):
        raise FileFormatError(path, f"PCD DATA is '{data}'; expected ascii, binary or binary_compressed")
    if not all(c in fields for c in "xyz"):
        raise FileFormatError(path, f"PCD FIELDS has no x, y and z (has {fields})")
    if len(set(fields) - {"_"}) != len([f for f in fields if f != "_"]):
        raise FileFormatError(path, f"PCD FIELDS names a field twice: {fields}")
    return fields, counts, types, points, data


# LZF's longest back-reference copies 264 bytes for 3 bytes of input: no block unpacks to more
# than 88 times its size (plus a few literal bytes).
_LZF_MAX_RATIO = 89


def _pcd_check_size(path: str, fields, counts, points: int, record: int, data: str, have: int) -> None:
    """Refuses, before any data is read or a table is laid out, COUNT and POINTS that the bytes
    after the header cannot hold: an ascii value takes at least a byte (more with its separator),
    a binary record its declared size, a binary_compressed block at most 89 times its bytes."""
    values = sum(counts)
    described = f"COUNT {' '.join(str(c) for c in counts)} (FIELDS {' '.join(fields)}) and POINTS {points}"
    if data == "ascii":
        need = values * points
        what = f"at least {need} bytes of ascii values ({values} values a point)"
    elif data == "binary":
        need = record * points
        what = f"{need} bytes of {record}-byte records"
    else:
        need = -(-record * points // _LZF_MAX_RATIO)
        what = f"{record * points} bytes of {record}-byte records, at least {need} compressed"
    if need > have:
        raise FileFormatError(path, f"PCD header's {described} make {what}, but the file holds {have} bytes after "
                                    f"its header")


def _pcd_ascii_columns(path: str, stream, fields, counts, types, points) -> List[np.ndarray]:
    # Hand-written because pypcd4 reads the ascii body with every rgb value as a float, while PCL
    # (the format's reference) writes a float rgb field in ascii as its uint32 bit pattern.
    # Float rgb/rgba columns are parsed as float64 here and decided per value (see _pcd_rgb_bits).
    descr = []
    for i, (name, c, t) in enumerate(zip(fields, counts, types)):
        t = "f8" if name in ("rgb", "rgba") and t == "f4" else t
        descr += [(f"c{i}_{j}", t) for j in range(c)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns on an empty body; the count check below speaks
        try:
            table = np.loadtxt(stream, dtype=np.dtype(descr), comments="#", ndmin=1, encoding="ascii")
        except (ValueError, UnicodeDecodeError) as e:
            raise FileFormatError(path, f"malformed PCD ascii data: {e}") from e
    if table.shape[0] != points:
        raise FileFormatError(path, f"PCD header declares POINTS {points} but the ascii data has {table.shape[0]} rows")
    out = []
    for i, c in enumerate(counts):
        cols = [table[f"c{i}_{j}"] for j in range(c)]
        out.append(cols[0] if c == 1 else np.stack(cols, 1))
    return out


def _pcd_rgb_bits(column: np.ndarray) -> np.ndarray:
    """uint32 0xAARRGGBB words of an rgb/rgba column, whatever its stored type.

    Binary float rgb is the word's bits. An ascii float column arrives as float64 text values:
    an integer in [0, 2^32) is the word itself (PCL's ascii convention), anything else is the
    float whose bits are the word (older writers).
    """
    if column.dtype == np.float32:
        return column.view(np.uint32)
    if column.dtype == np.float64:
        whole = (column == np.floor(column)) & (column >= 0) & (column < 2.0**32)
        bits = column.astype(np.float32).view(np.uint32).copy()
        bits[whole] = column[whole].astype(np.uint32)
        return bits
    return column.astype(np.uint32)


def read_pcd(path: PathLike, dtype: torch.dtype = torch.float32) -> PointCloud:
    """Read a PCD file (DATA ascii, binary or binary_compressed; VERSION 0.7 headers).

    ``x y z`` are required; ``normal_x normal_y normal_z`` give ``normals``, ``rgb`` or ``rgba``
    (packed 0xAARRGGBB words, PCL's layout; alpha is dropped) give ``colors``, ``intensity``
    gives ``intensity``; every other field goes to ``fields`` ((N, COUNT) when COUNT > 1; ``_``
    padding fields are dropped). Organized clouds (HEIGHT > 1) come back row-major as N = WIDTH *
    HEIGHT points, NaN points included, as stored.

    The binary encodings are decoded by pypcd4; the ascii body is parsed here (pypcd4 misreads
    PCL's ascii rgb), as said in the code.

    Raises FileFormatError for a header missing one of FIELDS SIZE TYPE COUNT WIDTH POINTS DATA,
    lists of different lengths, WIDTH x HEIGHT != POINTS, or data that is shorter or longer than
    POINTS records.
    """
    path = _existing_file(path)
    np_dtype = _float_dtype(dtype)
    pypcd4 = _library("pypcd4", "read_pcd")
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        _, values, start = _pcd_header(path, stream)
        fields, counts, types, points, data = _pcd_layout(path, values)
        record = sum(np.dtype(t).itemsize * c for t, c in zip(types, counts))
        _pcd_check_size(path, fields, counts, points, record, data, size - start)
        if data == "ascii":
            columns = _pcd_ascii_columns(path, stream, fields, counts, types, points)
        else:
            if data == "binary":
                have = size - start
                if have != points * record:
                    raise FileFormatError(
                        path, f"PCD header declares POINTS {points} ({points * record} bytes of {record}-byte records) "
                              f"but the file holds {have} bytes of data")
            elif points > 0:
                sizes = stream.read(8)
                if len(sizes) < 8:
                    raise FileFormatError(path, "binary_compressed PCD ends before its compressed-size words")
                packed, unpacked = (int(v) for v in np.frombuffer(sizes, "<u4"))
                if unpacked != points * record:
                    raise FileFormatError(
                        path, f"PCD header declares POINTS {points} ({points * record} bytes) but the compressed "
                              f"block says it unpacks to {unpacked} bytes")
                if size - start - 8 != packed:
                    raise FileFormatError(
                        path, f"binary_compressed PCD block says {packed} compressed bytes but the file holds "
                              f"{size - start - 8}")
            stream.seek(0)
            try:
                cloud = pypcd4.PointCloud.from_fileobj(stream)
            except Exception as e:  # pydantic, lzf and numpy errors: all mean a malformed file
                raise FileFormatError(path, f"malformed PCD file: {type(e).__name__}: {e}") from e
            meta = cloud.metadata  # pypcd4 parses the header with its own rules: they must agree with ours
            if (len(meta.fields) != len(fields) or list(meta.count) != counts or meta.points != points
                    or any(a != b for a, b in zip(meta.fields, fields) if b != "_")):
                raise FileFormatError(path, f"malformed PCD header: pypcd4 reads FIELDS {list(meta.fields)} COUNT "
                                            f"{list(meta.count)} POINTS {meta.points} where the header lines say "
                                            f"{fields} {counts} {points}")
            table = np.atleast_1d(cloud.pc_data)
            if table.shape[0] != points:
                raise FileFormatError(path, f"PCD header declares POINTS {points} but the data holds {table.shape[0]}")
            # pypcd4 names the columns of a COUNT > 1 field name__0000, ...: take them by position.
            names = list(table.dtype.names)
            columns, at = [], 0
            for c in counts:
                cols = [table[names[at + j]] for j in range(c)]
                columns.append(cols[0] if c == 1 else np.stack(cols, 1))
                at += c
    by_name = {name: col for name, col in zip(fields, columns) if name != "_"}
    xyz = _stack_columns([by_name.pop("x"), by_name.pop("y"), by_name.pop("z")], np_dtype)
    normals = None
    if all(n in by_name for n in _PCD_NORMALS):
        normals = _stack_columns([by_name.pop(n) for n in _PCD_NORMALS], np_dtype)
    colors = None
    for key in ("rgb", "rgba"):
        if key in by_name and by_name[key].ndim == 1:
            bits = _pcd_rgb_bits(by_name.pop(key))
            rgb = np.stack([(bits >> 16) & 255, (bits >> 8) & 255, bits & 255], 1).astype(np.uint8)
            colors = torch.from_numpy(rgb.astype(np.float32) / np.float32(255.0))
            break
    intensity = None
    if "intensity" in by_name and by_name["intensity"].ndim == 1:
        intensity = _column(by_name.pop("intensity"), np_dtype)
    fields_out = {name: _tensor(col) for name, col in by_name.items()}
    return PointCloud(xyz, normals, colors, intensity, None, fields_out)


def _pcd_column_type(path: str, name: str, array: np.ndarray) -> np.dtype:
    if array.dtype == np.bool_:
        return np.dtype(np.uint8)
    if array.dtype.kind not in "iuf" or array.dtype == np.float16:
        raise ValueError(f"write_pcd {path}: field '{name}' has dtype {array.dtype}, which PCD cannot store")
    return array.dtype


def write_pcd(path: PathLike, cloud: Union[PointCloud, Tensor], encoding: str = "binary_compressed") -> None:
    """Write a cloud as PCD v0.7: ``encoding`` is ``"ascii"``, ``"binary"`` or ``"binary_compressed"``.

    Fields: ``x y z`` (F4 or F8 as the points), ``normal_x normal_y normal_z``, ``rgb`` (PCL's
    packed float: 0xFFRRGGBB bits, colours rounded to 256 levels), ``intensity``, then ``fields``
    ((N, C) ones with COUNT C). Faces are not written (PCD has none). ``read_pcd`` of the file
    returns the same arrays bit for bit in every encoding.

    The binary encodings are written by pypcd4. The ascii body is written here: pypcd4 prints
    floats with ten decimals (which loses float32 digits of small values and zeroes a packed rgb);
    here floats are printed with enough digits to round-trip and rgb as its uint32 word, as PCL
    does.
    """
    path = os.fspath(path)
    pypcd4 = _library("pypcd4", "write_pcd")
    if encoding not in ("ascii", "binary", "binary_compressed"):
        raise ValueError(f'write_pcd: encoding must be "ascii", "binary" or "binary_compressed", got "{encoding}"')
    cloud = _as_cloud(cloud, "write_pcd")
    if cloud.faces is not None:
        raise ValueError(f"write_pcd {path}: PCD stores no faces; write a mesh with write_ply")
    columns: List[Tuple[str, np.ndarray]] = []
    points = _numpy(cloud.points)
    columns += [("x", points[:, 0]), ("y", points[:, 1]), ("z", points[:, 2])]
    if cloud.normals is not None:
        normals = _numpy(cloud.normals)
        columns += [(n, normals[:, i]) for i, n in enumerate(_PCD_NORMALS)]
    if cloud.colors is not None:
        u8 = _colors_to_u8(cloud.colors).astype(np.uint32)
        word = np.uint32(0xFF000000) | (u8[:, 0] << 16) | (u8[:, 1] << 8) | u8[:, 2]
        columns.append(("rgb", word.view(np.float32)))
    if cloud.intensity is not None:
        columns.append(("intensity", _numpy(cloud.intensity)))
    for name, value in _fields_dict(cloud.fields).items():
        columns.append((name, _numpy(value)))
    names = [n for n, _ in columns]
    if len(set(names)) != len(names) or any(not n or any(ch.isspace() for ch in n) for n in names):
        raise ValueError(f"write_pcd {path}: field names must be unique words without spaces, got {names}")
    arrays, types, counts = [], [], []
    for name, column in columns:
        t = _pcd_column_type(path, name, column)
        c = 1 if column.ndim == 1 else column.shape[1]
        arrays += [column.astype(t)] if c == 1 else [column[:, j].astype(t) for j in range(c)]
        types.append(t)
        counts.append(c)
    expanded = [t for t, c in zip(types, counts) for _ in range(c)]
    # Built from its parts: pypcd4's from_points cannot take COUNT > 1 fields (descriptors).
    codes = {v: k for k, v in _PCD_TYPES.items()}
    metadata = pypcd4.MetaData.model_validate({
        "fields": names, "size": [t.itemsize for t in types], "type": [codes[t.str[1:]][0] for t in types],
        "count": counts, "width": points.shape[0], "points": points.shape[0],
    })
    table = np.empty(points.shape[0], dtype=metadata.build_dtype())
    for name, a in zip(table.dtype.names, arrays):
        table[name] = a
    pcd = pypcd4.PointCloud(metadata, table)
    if encoding != "ascii":
        pcd.save(path, encoding=pypcd4.Encoding(encoding))
        return
    fmts = []
    for name, t in zip([n for n, c in zip(names, counts) for _ in range(c)], expanded):
        if name == "rgb":
            fmts.append("%u")
        elif t.kind == "f":
            fmts.append("%.9g" if t.itemsize == 4 else "%.17g")
        else:
            fmts.append("%d" if t.kind == "i" else "%u")
    body = [a.view(np.uint32).astype(np.uint64) if n == "rgb" else a
            for a, n in zip(arrays, [n for n, c in zip(names, counts) for _ in range(c)])]
    with open(path, "wb") as f:
        f.write(pcd.metadata.compose_header(data=pypcd4.Encoding.ASCII).encode("ascii"))
        if points.shape[0]:
            table = np.empty(points.shape[0], dtype=[(f"c{i}", a.dtype) for i, a in enumerate(body)])
            for i, a in enumerate(body):
                table[f"c{i}"] = a
            np.savetxt(f, table, fmt=fmts, delimiter=" ")


# ---------------------------------------------------------------------------------------------
# LAS / LAZ (laspy, lazrs)

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
        raise FileFormatError(path, f"the LAS header declares {header.point_count} points (point count field: "
                                    f"{header.point_count * record} bytes of {record}-byte records) but the file holds "
                                    f"{max(have, 0) // record} records ({have} bytes) after offset_to_point_data "
                                    f"{header.offset_to_point_data}")


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
                f"the LAS header declares {n} points but {extra} more bytes ({extra // record} records) follow them")

    xyz = np.stack([np.asarray(las.x, dtype=np.float64), np.asarray(las.y, dtype=np.float64),
                    np.asarray(las.z, dtype=np.float64)], 1)
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
            allowed = np.maximum(np.asarray(header.scales, dtype=np.float64),
                                 np.spacing(extent).astype(np.float64) * 2**_LAS_SLACK_BITS)
            lossy = np.nonzero(step > allowed)[0]
            if len(lossy):
                a = int(lossy[0])
                raise ValueError(
                    f"{path}: float32 would round {'xyz'[a]} (up to {float(reach[a]):.6g} from the origin, over an "
                    f"extent of {float(extent[a]):.6g}) to steps of {float(step[a]):.3g}, coarser than the file's "
                    f"scale {header.scales[a]:.3g}; read with dtype=torch.float64, or with origin=\"header\" or "
                    f"origin=(x, y, z) near the points")
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


# ---------------------------------------------------------------------------------------------
# OFF / OBJ / STL meshes (trimesh)

_MESH_EXTENSIONS = (".off", ".obj", ".stl")


def _off_counts_check(path: str, raw: bytes, n_vertices: int) -> None:
    """The OFF header's vertex and face counts must match the data lines that follow them."""
    lines = []
    for line in raw.splitlines():
        line = line.split(b"#", 1)[0].strip()
        if line:
            lines.append(line)
    if not lines or not lines[0].split()[0].endswith(b"OFF"):
        raise FileFormatError(path, "an OFF file starts with an OFF keyword line")
    first = lines[0].split()
    if len(first) > 1:  # "OFF nv nf ne" on one line
        counts, data = first[1:4], lines[1:]
    else:
        counts, data = (lines[1].split()[:3] if len(lines) > 1 else []), lines[2:]
    try:
        nv, nf = int(counts[0]), int(counts[1])
    except (ValueError, IndexError):
        raise FileFormatError(path, "the OFF header has no vertex and face counts") from None
    if len(data) != nv + nf:
        raise FileFormatError(
            path,
            f"the OFF header declares {nv} vertices and {nf} faces ({nv + nf} lines) but {len(data)} data lines follow")
    if n_vertices != nv:
        raise FileFormatError(path, f"the OFF header declares {nv} vertices but {n_vertices} were read")


def _obj_lines(path: str, raw: bytes) -> Tuple[int, int]:
    """Vertex lines and the triangles of the face lines, checking each has 3 coordinates / corners.

    OBJ declares no counts, so a file cut at a line end cannot be told from a whole one; a file
    cut inside a line can, and trimesh passes over such lines without a word.
    """
    vertices = triangles = 0
    for number, line in enumerate(raw.splitlines(), 1):
        tokens = line.split(b"#", 1)[0].split()
        if not tokens:
            continue
        if tokens[0] == b"v":
            if len(tokens) < 4:
                raise FileFormatError(path, f"line {number}: a vertex with {len(tokens) - 1} coordinates")
            vertices += 1
        elif tokens[0] == b"f":
            if len(tokens) < 4:
                raise FileFormatError(path, f"line {number}: a face with {len(tokens) - 1} corners")
            for corner in tokens[1:]:
                if corner.split(b"/", 1)[0] in (b"0", b"-0", b"+0"):
                    raise FileFormatError(path, f"line {number}: face vertex index 0 ('{corner.decode(errors='replace')}'); "
                                                f"OBJ indices start at 1 (negative ones count from the end)")
            triangles += len(tokens) - 3
    return vertices, triangles


def _stl_expected_faces(path: str, raw: bytes) -> int:
    """Triangles an STL file holds: binary when its size matches its count, else ascii facets."""
    if len(raw) >= 84:
        count = int(np.frombuffer(raw[80:84], "<u4")[0])
        if len(raw) == 84 + 50 * count:
            return count
    if raw.lstrip()[:5].lower() == b"solid":
        text = raw.lower()
        ends = text.count(b"endfacet")
        facets = text.count(b"facet") - ends
        if b"endsolid" not in text or facets != ends:
            raise FileFormatError(path, f"ascii STL is truncated ({facets} facets opened, {ends} closed, "
                                        f"{'an' if b'endsolid' in text else 'no'} endsolid line)")
        return facets
    count = int(np.frombuffer(raw[80:84], "<u4")[0]) if len(raw) >= 84 else 0
    raise FileFormatError(
        path, f"neither an ascii STL (no 'solid' line) nor a binary STL: {len(raw)} bytes where a header "
              f"declaring {count} triangles needs {84 + 50 * count}")


def read_mesh(path: PathLike, dtype: torch.dtype = torch.float32) -> Mesh:
    """Read a triangle mesh from OFF, OBJ or STL (by trimesh) or PLY (by :func:`read_ply`).

    Vertices and faces are kept as the file stores them (trimesh's ``process=False``: nothing
    merged or reordered), so an STL mesh has three vertices per triangle; polygons are split into
    triangle fans. An OBJ with several objects comes back as one mesh.

    Raises FileFormatError when an OFF header's counts disagree with its data lines, an STL is
    truncated, a face names a missing vertex, or a non-empty file yields no vertices.
    """
    path = _existing_file(path)
    np_dtype = _float_dtype(dtype)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".ply":
        cloud = read_ply(path, dtype=dtype)
        if cloud.faces is None:
            raise FileFormatError(path, "the PLY file has no face element; read it with read_ply as a point cloud")
        return Mesh(cloud.points, cloud.faces)
    if ext not in _MESH_EXTENSIONS:
        raise ValueError(f"{path}: read_mesh reads .off, .obj, .stl and .ply files, not '{ext}'")
    trimesh = _library("trimesh", "read_mesh")
    with open(path, "rb") as f:
        raw = f.read()
    expected_faces = _stl_expected_faces(path, raw) if ext == ".stl" else None
    obj_counts = _obj_lines(path, raw) if ext == ".obj" else None
    if obj_counts is not None and obj_counts[0] == 0 and raw.strip():
        # Before trimesh: on bytes that are not text it reaches for an optional decoder
        # (charset_normalizer) and fails on its absence instead of on the file.
        raise FileFormatError(path, "no vertex ('v') lines in a non-empty OBJ file")
    try:
        # Not force="mesh" at once: it turns a file of vertices only (trimesh's PointCloud) into
        # an empty mesh. Scenes (OBJ files with several objects) are loaded again as one mesh.
        # maintain_order: without it trimesh drops OBJ vertices that no face uses and renumbers
        # (and splits vertices by texture coordinate), so indices would not be the file's.
        options = {"maintain_order": True} if ext == ".obj" else {}
        with warnings.catch_warnings():
            # trimesh's OBJ loader takes a NaN median while pairing texture coordinates, which it
            # then does not use with maintain_order; the checks below vouch for what it returns.
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"trimesh\.")
            mesh = trimesh.load(path, file_type=ext[1:], process=False, **options)
            if isinstance(mesh, trimesh.Scene):
                mesh = trimesh.load(path, file_type=ext[1:], process=False, force="mesh", **options)
    except Exception as e:  # trimesh's parsers raise whatever numpy raises on bad text
        raise FileFormatError(path, f"malformed {ext[1:].upper()} file: {type(e).__name__}: {e}") from e
    if not hasattr(mesh, "vertices"):
        raise FileFormatError(path, f"trimesh read no vertices from it (got a {type(mesh).__name__})")
    vertices = np.asarray(mesh.vertices, dtype=np.float64)
    faces = np.asarray(getattr(mesh, "faces", np.zeros((0, 3))), dtype=np.int64)
    if vertices.size == 0:
        vertices = vertices.reshape(0, 3)
    if faces.size == 0:
        faces = faces.reshape(0, 3)
    if vertices.ndim != 2 or vertices.shape[1] != 3 or faces.ndim != 2 or faces.shape[1] != 3:
        raise FileFormatError(path, f"trimesh read vertices of shape {vertices.shape} and faces of shape "
                                    f"{faces.shape}; a triangle mesh has (V, 3) and (F, 3)")
    if ext == ".off":
        _off_counts_check(path, raw, len(vertices))
    if obj_counts is not None and obj_counts != (len(vertices), len(faces)):
        raise FileFormatError(path, f"the file has {obj_counts[0]} vertex lines and faces making {obj_counts[1]} "
                                    f"triangles, but trimesh read {len(vertices)} vertices and {len(faces)} triangles")
    if expected_faces is not None and len(faces) != expected_faces:
        raise FileFormatError(path, f"the STL file holds {expected_faces} triangles but {len(faces)} were read")
    _check_faces(path, faces, len(vertices))
    return Mesh(torch.from_numpy(vertices.astype(np_dtype)), torch.from_numpy(np.ascontiguousarray(faces)))


# ---------------------------------------------------------------------------------------------
# XYZ / PTS text and KITTI .bin: hand-written, since each is one numpy call and no maintained
# library reads them with the checks above.

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
        raise FileFormatError(path, f"line {number} is longer than {_XYZ_MAX_LINE_BYTES} bytes (line size limit); a "
                                    f"text cloud holds one point, a few numbers, a line")
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
            raise FileFormatError(path, f"{n_cols} columns per row; pass columns=[...] to name them "
                                        f"(known layouts: {table_of})")
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
            raise FileFormatError(path, f"colour column '{'rgb'[channel]}' holds {rgb[row, channel]:g} in data row "
                                        f"{row + 1}; r g b are 0-255 values ({int(bad.any(1).sum())} rows out of "
                                        f"range)")
        colors = torch.from_numpy(rgb.astype(np.float32) / np.float32(255.0))
    intensity = torch.from_numpy(col.pop("intensity").astype(np_dtype)) if "intensity" in col else None
    fields = {name: torch.from_numpy(values.astype(np_dtype)) for name, values in col.items()}
    return PointCloud(points, normals, colors, intensity, None, fields)


def read_kitti_bin(path: PathLike, dtype: torch.dtype = torch.float32) -> PointCloud:
    """Read a KITTI velodyne scan: little-endian float32 records ``x y z reflectance``.

    ``intensity`` is the reflectance. Raises FileFormatError when the size is not a whole number
    of 16-byte records.
    """
    path = _existing_file(path)
    np_dtype = _float_dtype(dtype)
    size = os.path.getsize(path)
    if size % 16:
        raise FileFormatError(path, f"{size} bytes is not a whole number of 16-byte (4 x float32) KITTI records")
    scan = np.fromfile(path, dtype="<f4").reshape(-1, 4)
    return PointCloud(torch.from_numpy(scan[:, :3].astype(np_dtype)), None, None,
                      torch.from_numpy(scan[:, 3].astype(np_dtype)), None, {})


def write_kitti_bin(path: PathLike, cloud: Union[PointCloud, Tensor]) -> None:
    """Write ``x y z intensity`` as little-endian float32 records (KITTI velodyne layout).

    The format holds float32 only: float64 points are rounded, and a cloud without intensity
    gets 0. Normals, colours, faces and fields are not stored (the format has no place for them).
    """
    path = os.fspath(path)
    cloud = _as_cloud(cloud, "write_kitti_bin")
    n = cloud.points.shape[0]
    scan = np.zeros((n, 4), dtype="<f4")
    scan[:, :3] = _numpy(cloud.points)
    if cloud.intensity is not None:
        scan[:, 3] = _numpy(cloud.intensity)
    scan.tofile(path)


# ---------------------------------------------------------------------------------------------
# one entry point

_READERS = {
    ".ply": "read_ply", ".pcd": "read_pcd", ".las": "read_las", ".laz": "read_las",
    ".off": "read_mesh", ".obj": "read_mesh", ".stl": "read_mesh",
    ".xyz": "read_xyz", ".pwn": "read_xyz", ".pts": "read_xyz", ".bin": "read_kitti_bin",
}


def read(path: PathLike, dtype: torch.dtype = torch.float32) -> PointCloud:
    """Read any supported file into a :class:`PointCloud`, choosing the reader by extension.

    ``.ply`` read_ply, ``.pcd`` read_pcd, ``.las .laz`` read_las, ``.off .obj .stl`` read_mesh
    (the vertices become ``points`` and the triangles ``faces``), ``.xyz .pwn .pts`` read_xyz,
    ``.bin`` read_kitti_bin. Format options (LAS ``origin``, text ``columns``) are the per-format
    functions' arguments. Unknown extensions raise ValueError naming the file.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in _READERS:
        raise ValueError(f"{path}: unknown point-cloud file extension '{ext}'; pointops.io reads "
                         f"{', '.join(sorted(_READERS))}")
    reader = globals()[_READERS[ext]]
    if reader is read_mesh:
        mesh = read_mesh(path, dtype=dtype)
        return PointCloud(mesh.vertices, None, None, None, mesh.faces, {})
    return reader(path, dtype=dtype)
