"""OFF / OBJ / STL meshes (trimesh): read_mesh."""

import os
import warnings
from typing import Tuple

import numpy as np
import torch

from ._common import FileFormatError, Mesh, PathLike, _check_faces, _existing_file, _float_dtype, _library
from .ply import read_ply

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
            f"the OFF header declares {nv} vertices and {nf} faces ({nv + nf} lines) but {len(data)} data lines follow",
        )
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
                    raise FileFormatError(
                        path,
                        f"line {number}: face vertex index 0 ('{corner.decode(errors='replace')}'); "
                        f"OBJ indices start at 1 (negative ones count from the end)",
                    )
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
            raise FileFormatError(
                path,
                f"ascii STL is truncated ({facets} facets opened, {ends} closed, "
                f"{'an' if b'endsolid' in text else 'no'} endsolid line)",
            )
        return facets
    count = int(np.frombuffer(raw[80:84], "<u4")[0]) if len(raw) >= 84 else 0
    raise FileFormatError(
        path,
        f"neither an ascii STL (no 'solid' line) nor a binary STL: {len(raw)} bytes where a header "
        f"declaring {count} triangles needs {84 + 50 * count}",
    )


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
        raise FileFormatError(
            path,
            f"trimesh read vertices of shape {vertices.shape} and faces of shape "
            f"{faces.shape}; a triangle mesh has (V, 3) and (F, 3)",
        )
    if ext == ".off":
        _off_counts_check(path, raw, len(vertices))
    if obj_counts is not None and obj_counts != (len(vertices), len(faces)):
        raise FileFormatError(
            path,
            f"the file has {obj_counts[0]} vertex lines and faces making {obj_counts[1]} "
            f"triangles, but trimesh read {len(vertices)} vertices and {len(faces)} triangles",
        )
    if expected_faces is not None and len(faces) != expected_faces:
        raise FileFormatError(path, f"the STL file holds {expected_faces} triangles but {len(faces)} were read")
    _check_faces(path, faces, len(vertices))
    return Mesh(torch.from_numpy(vertices.astype(np_dtype)), torch.from_numpy(np.ascontiguousarray(faces)))
