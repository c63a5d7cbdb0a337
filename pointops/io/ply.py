"""PLY files (plyfile): read_ply, write_ply."""

import os
from io import BytesIO
from typing import List, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ._common import (
    FileFormatError,
    PathLike,
    PointCloud,
    _as_cloud,
    _check_faces,
    _colors_to_u8,
    _column,
    _existing_file,
    _fan_triangles,
    _fields_dict,
    _float_dtype,
    _library,
    _numpy,
    _stack_columns,
    _tensor,
    _unit_colors,
    text_header,
)

_PLY_COLORS = (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue"))
_PLY_INTENSITY = ("intensity", "scalar_intensity")
_PLY_FACE_LISTS = ("vertex_indices", "vertex_index")


# A PLY header is a few dozen short lines; one that runs past this without end_header is not a PLY
# header (plyfile would parse a 200 MB header line for minutes).
_PLY_MAX_HEADER_BYTES = 1 << 20
_PLY_SIZES = {
    "char": 1,
    "int8": 1,
    "uchar": 1,
    "uint8": 1,
    "short": 2,
    "int16": 2,
    "ushort": 2,
    "uint16": 2,
    "int": 4,
    "int32": 4,
    "uint": 4,
    "uint32": 4,
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
}


def _ply_check_header(path: str, stream) -> int:
    """Refuses, before plyfile reads anything, a header longer than _PLY_MAX_HEADER_BYTES and
    element counts whose rows cannot fit in the bytes after the header (a binary row takes at
    least its scalar properties' sizes plus each list's count, an ascii row at least two bytes a
    property). Returns the offset after the end_header line (-1 without one: plyfile names what
    is missing) and leaves the stream at its start."""
    lines, end = text_header(path, stream, "PLY", "end_header", _PLY_MAX_HEADER_BYTES, strict=False)
    stream.seek(0)
    if end < 0:
        return end
    ascii_format = any(line.split()[:2] == ["format", "ascii"] for line in lines)
    elements = []  # [name, count, least bytes per row]
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[0] == "element":
            try:
                elements.append([words[1], int(words[2]), 0])
            except ValueError:
                return end  # plyfile names the bad count
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
        raise FileFormatError(
            path,
            f"the PLY header declares {listed}: at least {need} bytes of data, but the file "
            f"holds {have} bytes after its header",
        )
    return end


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
        header_end = _ply_check_header(path, stream)
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
        rows = sum(1 for line in raw[header_end:].splitlines() if line.strip())
        if rows != sum(declared.values()):
            raise FileFormatError(
                path, f"the header declares {sum(declared.values())} data rows ({declared}) but the file has {rows}"
            )
    elif end != size and not (size - end <= 2 and _trailing_newline(path, end)):
        raise FileFormatError(
            path,
            f"{size - end} bytes follow the data that the header declares ({declared}); "
            f"the element counts in the header are wrong",
        )

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
                raise FileFormatError(
                    path,
                    f"vertex list property '{name}' has lists of lengths {sorted(lengths)}; "
                    "only lists of one length can become an (N, C) field",
                )
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
    np.dtype(np.int8): "i1",
    np.dtype(np.uint8): "u1",
    np.dtype(np.int16): "i2",
    np.dtype(np.uint16): "u2",
    np.dtype(np.int32): "i4",
    np.dtype(np.uint32): "u4",
    np.dtype(np.float32): "f4",
    np.dtype(np.float64): "f8",
}


def _ply_type(path: str, name: str, array: np.ndarray) -> str:
    if array.dtype == np.bool_:
        return "u1"
    if array.dtype == np.int64:  # PLY has no 64-bit integers: store as int32 when the values fit
        if array.size and (array.min() < -(2**31) or array.max() >= 2**31):
            raise ValueError(
                f"write_ply {path}: field '{name}' holds int64 values outside int32, which PLY cannot store"
            )
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
