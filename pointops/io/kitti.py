"""KITTI velodyne scans (.bin, float32 x y z reflectance records): read_kitti_bin, write_kitti_bin."""

import os
from typing import Union

import numpy as np
import torch
from torch import Tensor

from ._common import FileFormatError, PathLike, PointCloud, _as_cloud, _existing_file, _float_dtype, _numpy


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
    return PointCloud(
        torch.from_numpy(scan[:, :3].astype(np_dtype)),
        None,
        None,
        torch.from_numpy(scan[:, 3].astype(np_dtype)),
        None,
        {},
    )


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
