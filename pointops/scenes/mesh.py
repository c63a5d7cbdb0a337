"""Triangle meshes for generated scenes: procedural meshes, CGAL's example meshes, and points
sampled on a mesh's surface.

Meshes are :class:`pointops.io.Mesh` (the type ``pointops.io.read_mesh`` returns), float64 here.
CGAL's example meshes come from Debian's ``libcgal-demo`` (``/usr/share/doc/libcgal-dev/data.tar.gz``,
read with ``pointops.io.read_mesh``, which needs trimesh: the ``io`` extra); :func:`blob_mesh` is a
procedural mesh with no symmetry for what must not depend on that package.
"""

import math
import os
import tarfile
import tempfile
from typing import NamedTuple, Optional, Sequence, Union

import torch
from torch import Tensor

from ..io import Mesh, PointCloud, read_mesh

_F64 = torch.float64
CGAL_DATA = "/usr/share/doc/libcgal-dev/data.tar.gz"
# Meshes of CGAL's data/meshes used by tools/eval_ppf.py: animals and figures, none symmetric.
EVAL_MESHES = ("bunny00", "elephant", "camel", "cow", "dino", "homer", "lion", "bull")


class SurfaceSamples(NamedTuple):
    """Points drawn on a mesh's surface by :func:`sample_surface`."""

    points: Tensor  # (n, 3), dtype of the mesh's vertices
    normals: Tensor  # (n, 3) unit normal of the face each point lies on (right-hand rule)
    face_index: Tensor  # (n,) int64 the face each point lies on


def sample_surface(
    mesh: Union[Mesh, PointCloud], n: int, seed: int = 0, generator: Optional[torch.Generator] = None
) -> SurfaceSamples:
    """``n`` points drawn uniformly over a triangle mesh's surface (area-weighted), reproducibly.

    Each sample picks a face with probability proportional to its area, then a uniform point in
    it by barycentric coordinates ``(1 - sqrt(u), sqrt(u) (1 - v), sqrt(u) v)`` of two uniform
    numbers. All randomness comes from ``generator``, or a CPU ``torch.Generator`` seeded with
    ``seed``; the arithmetic is float64, so a seed gives the same points on every machine.
    Degenerate (zero-area) faces are never picked. ``mesh`` is a :class:`Mesh` or a
    :class:`PointCloud` with faces (as ``read`` returns for mesh files).

    Returns SurfaceSamples(points (n, 3) in the vertices' dtype, normals (n, 3) unit face normals
    by the right-hand rule of the face's vertex order, face_index (n,) int64).
    """
    if isinstance(mesh, PointCloud):
        if mesh.faces is None:
            raise ValueError("sample_surface: the PointCloud has no faces")
        mesh = Mesh(mesh.points, mesh.faces)
    vertices, faces = mesh.vertices, mesh.faces
    if vertices.dim() != 2 or vertices.shape[1] != 3 or not vertices.is_floating_point():
        raise ValueError(
            f"sample_surface: vertices must be a floating (V, 3) tensor, got {tuple(vertices.shape)} {vertices.dtype}"
        )
    if faces.dim() != 2 or faces.shape[1] != 3 or faces.is_floating_point():
        raise ValueError(
            f"sample_surface: faces must be an integer (F, 3) tensor, got {tuple(faces.shape)} {faces.dtype}"
        )
    if n < 0:
        raise ValueError(f"sample_surface: n must be >= 0, got {n}")
    faces = faces.long().cpu()
    if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= vertices.shape[0]):
        raise ValueError(
            f"sample_surface: faces must index vertices in [0, {vertices.shape[0]}), got values in "
            f"[{int(faces.min())}, {int(faces.max())}]"
        )
    v = vertices.detach().cpu().double()
    a, b, c = v[faces[:, 0]], v[faces[:, 1]], v[faces[:, 2]]
    cross = torch.linalg.cross(b - a, c - a)
    area = cross.norm(dim=1) * 0.5
    out_dtype = vertices.dtype
    if n == 0:
        empty = torch.zeros(0, 3, dtype=out_dtype, device=vertices.device)
        return SurfaceSamples(empty, empty.clone(), torch.zeros(0, dtype=torch.int64, device=vertices.device))
    if not bool(torch.isfinite(area).all()):
        raise ValueError("sample_surface: the mesh has non-finite vertex coordinates on its faces")
    total = float(area.sum()) if area.numel() else 0.0
    if not total > 0.0:
        raise ValueError(
            f"sample_surface: the mesh has no surface to sample ({faces.shape[0]} faces, total area {total})"
        )
    if generator is None:
        generator = torch.Generator().manual_seed(seed)
    # Inverse-CDF face choice: searchsorted(right=True) skips zero-area faces, whose cumulative
    # area equals their predecessor's; u * total can round up to total, hence the clamp to the
    # last face with area.
    cdf = torch.cumsum(area, 0)
    u = torch.rand(n, dtype=torch.float64, generator=generator) * cdf[-1]
    last = int(torch.nonzero(area > 0)[-1])
    face = torch.searchsorted(cdf, u, right=True).clamp_(max=last)
    r = torch.rand(n, 2, dtype=torch.float64, generator=generator)
    s = r[:, 0].sqrt()
    w0, w1, w2 = 1.0 - s, s * (1.0 - r[:, 1]), s * r[:, 1]
    points = w0[:, None] * a[face] + w1[:, None] * b[face] + w2[:, None] * c[face]
    normals = cross[face] / (2.0 * area[face])[:, None]
    device = vertices.device
    return SurfaceSamples(points.to(device, out_dtype), normals.to(device, out_dtype), face.to(device))


def cgal_available(path: str = CGAL_DATA) -> bool:
    return os.path.isfile(path)


def normalized(mesh: Mesh, diameter: float = 1.0) -> Mesh:
    """The mesh centred on its bounding box and scaled to the given bounding-box diagonal."""
    lo, hi = mesh.vertices.amin(0), mesh.vertices.amax(0)
    scale = diameter / float((hi - lo).norm())
    return Mesh((mesh.vertices - (lo + hi) / 2) * scale, mesh.faces)


def cgal_off(name: str, path: str = CGAL_DATA) -> bytes:
    """The bytes of CGAL's example mesh ``data/meshes/<name>.off`` in the tarball at ``path``
    (Debian's libcgal-dev data); FileNotFoundError naming what is missing."""
    if not cgal_available(path):
        raise FileNotFoundError(f"{path} not found: install Debian's libcgal-demo for the CGAL example meshes")
    with tarfile.open(path) as tar:
        try:
            member = tar.extractfile(f"data/meshes/{name}.off")
        except KeyError:
            member = None
        if member is None:
            raise FileNotFoundError(f"data/meshes/{name}.off is not in {path}")
        return member.read()


def load_mesh(name: str, diameter: float = 1.0, path: str = CGAL_DATA) -> Mesh:
    """CGAL's example mesh ``data/meshes/<name>.off`` (:func:`cgal_off`), float64, centred on its
    bounding box and scaled to the given bounding-box diagonal."""
    data = cgal_off(name, path)
    with tempfile.TemporaryDirectory() as folder:
        off = os.path.join(folder, name + ".off")
        with open(off, "wb") as f:
            f.write(data)
        mesh = read_mesh(off, dtype=_F64)
    return normalized(mesh, diameter)


def blob_mesh(diameter: float = 1.0, subdivisions: int = 3, seed: int = 0) -> Mesh:
    """A lumpy closed mesh with no symmetry: an icosphere whose radius varies with a few seeded
    harmonics, normalized to the diameter."""
    t = (1 + math.sqrt(5)) / 2
    v = torch.tensor(
        [
            [-1, t, 0],
            [1, t, 0],
            [-1, -t, 0],
            [1, -t, 0],
            [0, -1, t],
            [0, 1, t],
            [0, -1, -t],
            [0, 1, -t],
            [t, 0, -1],
            [t, 0, 1],
            [-t, 0, -1],
            [-t, 0, 1],
        ],
        dtype=_F64,
    )
    f = torch.tensor(
        [
            [0, 11, 5],
            [0, 5, 1],
            [0, 1, 7],
            [0, 7, 10],
            [0, 10, 11],
            [1, 5, 9],
            [5, 11, 4],
            [11, 10, 2],
            [10, 7, 6],
            [7, 1, 8],
            [3, 9, 4],
            [3, 4, 2],
            [3, 2, 6],
            [3, 6, 8],
            [3, 8, 9],
            [4, 9, 5],
            [2, 4, 11],
            [6, 2, 10],
            [8, 6, 7],
            [9, 8, 1],
        ]
    )
    for _ in range(subdivisions):
        edges = torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]).sort(1).values
        unique, inverse = torch.unique(edges, dim=0, return_inverse=True)
        mids = len(v) + inverse.reshape(3, -1).T
        v = torch.cat([v, (v[unique[:, 0]] + v[unique[:, 1]]) / 2])
        a, b, c = f.unbind(1)
        ab, bc, ca = mids.unbind(1)
        f = torch.cat([torch.stack(x, 1) for x in ((a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca))])
    u = v / v.norm(dim=1, keepdim=True)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(6, 3, generator=g, dtype=_F64)
    phase = torch.rand(6, generator=g, dtype=_F64) * 2 * math.pi
    radius = 1 + 0.12 * torch.sin(3 * (u @ w.T) + phase).sum(1) / 2
    stretch = torch.tensor([1.4, 1.0, 0.7], dtype=_F64)
    return normalized(Mesh(u * radius[:, None] * stretch, f), diameter)


def box_mesh(size: Sequence[float]) -> Mesh:
    """An axis-aligned box centred on the origin."""
    hx, hy, hz = (s / 2 for s in size)
    v = torch.tensor([[x, y, z] for x in (-hx, hx) for y in (-hy, hy) for z in (-hz, hz)], dtype=_F64)
    f = torch.tensor(
        [
            [0, 1, 3],
            [0, 3, 2],
            [4, 6, 7],
            [4, 7, 5],
            [0, 4, 5],
            [0, 5, 1],
            [2, 3, 7],
            [2, 7, 6],
            [0, 2, 6],
            [0, 6, 4],
            [1, 5, 7],
            [1, 7, 3],
        ]
    )
    return Mesh(v, f)
