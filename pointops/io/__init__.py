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

import os

import torch

from ._common import FORMAT_PACKAGES, FileFormatError, Mesh, PathLike, PointCloud
from .kitti import read_kitti_bin, write_kitti_bin
from .las import read_las
from .mesh import read_mesh
from .pcd import read_pcd, write_pcd
from .ply import read_ply, write_ply
from .xyz import read_xyz

__all__ = [
    "FORMAT_PACKAGES",
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


_READERS = {
    ".ply": "read_ply",
    ".pcd": "read_pcd",
    ".las": "read_las",
    ".laz": "read_las",
    ".off": "read_mesh",
    ".obj": "read_mesh",
    ".stl": "read_mesh",
    ".xyz": "read_xyz",
    ".pwn": "read_xyz",
    ".pts": "read_xyz",
    ".bin": "read_kitti_bin",
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
        raise ValueError(
            f"{path}: unknown point-cloud file extension '{ext}'; pointops.io reads {', '.join(sorted(_READERS))}"
        )
    reader = globals()[_READERS[ext]]
    if reader is read_mesh:
        mesh = read_mesh(path, dtype=dtype)
        return PointCloud(mesh.vertices, None, None, None, mesh.faces, {})
    return reader(path, dtype=dtype)
