"""The pinhole camera both depth sensors of the scenes use: :func:`pointops.scenes.lidar.depth_camera_scan`
(rays cast against a street's primitives) and :func:`pointops.scenes.tabletop.render_depth` (meshes
rasterized on a table)."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

_F64 = torch.float64


@dataclass(frozen=True)
class Camera:
    """Pinhole camera: ``rotation`` (3, 3) has the camera axes (x right, y down, z forward) as
    columns in the world frame, ``position`` (3,) is its centre; square pixels."""

    rotation: Tensor
    position: Tensor
    width: int
    height: int
    focal: float

    @property
    def world_to_camera(self) -> Tensor:
        out = torch.eye(4, dtype=_F64)
        out[:3, :3] = self.rotation.T
        out[:3, 3] = -self.rotation.T @ self.position
        return out

    def rays(self) -> Tensor:
        """(H * W, 3) directions through the pixel centres in the camera frame, z = 1."""
        rows, cols = torch.meshgrid(
            torch.arange(self.height, dtype=_F64), torch.arange(self.width, dtype=_F64), indexing="ij"
        )
        x = (cols + 0.5 - self.width / 2) / self.focal
        y = (rows + 0.5 - self.height / 2) / self.focal
        return torch.stack([x, y, torch.ones_like(x)], -1).reshape(-1, 3)


def focal_length(width: int, fov_deg: float) -> float:
    """Focal length in pixels of an image ``width`` pixels wide spanning ``fov_deg`` degrees."""
    return width / 2 / math.tan(math.radians(fov_deg) / 2)
