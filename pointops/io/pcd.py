"""PCD files (pypcd4; the ascii body read here): read_pcd, write_pcd."""

import os
import warnings
from typing import Dict, List, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ._common import (
    FileFormatError,
    PathLike,
    PointCloud,
    _as_cloud,
    _colors_to_u8,
    _column,
    _existing_file,
    _fields_dict,
    _float_dtype,
    _library,
    _numpy,
    _stack_columns,
    _tensor,
    text_header,
)

_PCD_REQUIRED = ("FIELDS", "SIZE", "TYPE", "COUNT", "WIDTH", "POINTS", "DATA")
_PCD_TYPES = {
    ("F", 4): "f4",
    ("F", 8): "f8",
    ("U", 1): "u1",
    ("U", 2): "u2",
    ("U", 4): "u4",
    ("U", 8): "u8",
    ("I", 1): "i1",
    ("I", 2): "i2",
    ("I", 4): "i4",
    ("I", 8): "i8",
}
_PCD_NORMALS = ("normal_x", "normal_y", "normal_z")
# The header's keyword lines (comment lines do not count) and its bytes: a PCD header is about a
# dozen short lines, a longer one is not a PCD header (and is never read whole).
_PCD_MAX_HEADER_LINES = 64
_PCD_MAX_HEADER_BYTES = 1 << 20


def _pcd_header(path: str, stream) -> Tuple[List[str], Dict[str, List[str]], int]:
    """The header lines up to DATA, their values by keyword, and the offset where the data starts."""
    lines, start = text_header(path, stream, "PCD", "DATA", _PCD_MAX_HEADER_BYTES, _PCD_MAX_HEADER_LINES)
    values = {}
    for line in lines:
        key, *rest = line.split()
        values[key.upper()] = rest
    if start < 0:
        missing = [k for k in _PCD_REQUIRED if k not in values]
        raise FileFormatError(path, f"PCD header has no DATA line (missing header field(s) {', '.join(missing)})")
    return lines, values, start


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
            path, "PCD header has a SIZE, COUNT, WIDTH, HEIGHT or POINTS value that is not an integer"
        ) from None
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
        raise FileFormatError(
            path, f"PCD header's {described} make {what}, but the file holds {have} bytes after its header"
        )


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
                        path,
                        f"PCD header declares POINTS {points} ({points * record} bytes of {record}-byte records) "
                        f"but the file holds {have} bytes of data",
                    )
            elif points > 0:
                sizes = stream.read(8)
                if len(sizes) < 8:
                    raise FileFormatError(path, "binary_compressed PCD ends before its compressed-size words")
                packed, unpacked = (int(v) for v in np.frombuffer(sizes, "<u4"))
                if unpacked != points * record:
                    raise FileFormatError(
                        path,
                        f"PCD header declares POINTS {points} ({points * record} bytes) but the compressed "
                        f"block says it unpacks to {unpacked} bytes",
                    )
                if size - start - 8 != packed:
                    raise FileFormatError(
                        path,
                        f"binary_compressed PCD block says {packed} compressed bytes but the file holds "
                        f"{size - start - 8}",
                    )
            stream.seek(0)
            try:
                cloud = pypcd4.PointCloud.from_fileobj(stream)
            except Exception as e:  # pydantic, lzf and numpy errors: all mean a malformed file
                raise FileFormatError(path, f"malformed PCD file: {type(e).__name__}: {e}") from e
            meta = cloud.metadata  # pypcd4 parses the header with its own rules: they must agree with ours
            if (
                len(meta.fields) != len(fields)
                or list(meta.count) != counts
                or meta.points != points
                or any(a != b for a, b in zip(meta.fields, fields) if b != "_")
            ):
                raise FileFormatError(
                    path,
                    f"malformed PCD header: pypcd4 reads FIELDS {list(meta.fields)} COUNT "
                    f"{list(meta.count)} POINTS {meta.points} where the header lines say "
                    f"{fields} {counts} {points}",
                )
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
    metadata = pypcd4.MetaData.model_validate(
        {
            "fields": names,
            "size": [t.itemsize for t in types],
            "type": [codes[t.str[1:]][0] for t in types],
            "count": counts,
            "width": points.shape[0],
            "points": points.shape[0],
        }
    )
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
    body = [
        a.view(np.uint32).astype(np.uint64) if n == "rgb" else a
        for a, n in zip(arrays, [n for n, c in zip(names, counts) for _ in range(c)])
    ]
    with open(path, "wb") as f:
        f.write(pcd.metadata.compose_header(data=pypcd4.Encoding.ASCII).encode("ascii"))
        if points.shape[0]:
            table = np.empty(points.shape[0], dtype=[(f"c{i}", a.dtype) for i, a in enumerate(body)])
            for i, a in enumerate(body):
                table[f"c{i}"] = a
            np.savetxt(f, table, fmt=fmts, delimiter=" ")
