"""Registration samples of the BEV ops (bev_rasterize, pillar_scatter, voxelize) and their wrappers,
merged into tests/op_samples.py."""

from typing import Callable, Dict, List

import torch

import pointops
from tests.op_samples import WrapperCase


_BEV_RANGE = [-2.0, -1.5, -1.0, 2.0, 1.5, 1.0]
_BEV_CELL = [0.25, 0.5]


def _bev_cloud(device: str, batch: int = 2, n: int = 60, dims: int = 4, seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, n, dims, generator=g) * 5 - 2.5).to(device)


def _bev_rasterize_samples(device: str) -> List[tuple]:
    points = _bev_cloud(device)
    lengths = torch.tensor([60, 25], device=device)
    every = [
        "max_z",
        "min_z",
        "mean_z",
        "count",
        "density",
        "occupancy",
        "max_feature",
        "mean_feature",
        "top_feature",
        "height_slices",
    ]
    return [
        (points, lengths, _BEV_RANGE, _BEV_CELL, every, 3, 64.0, 4, False),
        (points.double(), None, _BEV_RANGE, _BEV_CELL, ["top_feature", "max_z"], 3, 64.0, 0, True),
        (points.half(), lengths, _BEV_RANGE, [0.3, 0.2], ["density", "mean_z"], 3, 10.0, 0, False),
        (_bev_cloud(device, 0, 5), None, _BEV_RANGE, _BEV_CELL, ["count"], 3, 64.0, 0, False),
    ]


def _pillar_samples(device: str, batch: int = 2, pillars: int = 40, channels: int = 5) -> tuple:
    g = torch.Generator().manual_seed(3)
    features = torch.randn(batch, pillars, channels, generator=g).to(device)
    coords = torch.stack(
        [
            torch.zeros(batch, pillars, dtype=torch.int32),
            torch.randint(-1, 7, (batch, pillars), generator=g, dtype=torch.int32),
            torch.randint(-1, 9, (batch, pillars), generator=g, dtype=torch.int32),
        ],
        -1,
    ).to(device)
    num_voxels = torch.tensor([pillars, pillars // 3][:batch], dtype=torch.int64, device=device)
    return features, coords, num_voxels


def _pillar_scatter_samples(device: str) -> List[tuple]:
    features, coords, num_voxels = _pillar_samples(device)
    return [
        (features, coords, num_voxels, 6, 8),
        (features.double(), coords, num_voxels, 7, 5),
        (features[:, :0], coords[:, :0], num_voxels, 6, 8),
    ]


def _voxelize_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(2)
    points = (torch.rand(3, 60, 4, generator=g) * 4 - 0.5).to(device)  # some outside the range
    lengths = torch.tensor([60, 25, 0], device=device)
    size, point_range = [0.5, 0.5, 1.0], [0.0, 0.0, 0.0, 3.0, 3.0, 2.0]
    return [
        (points, lengths, size, point_range, 4, 30),
        (points, None, size, point_range, 2, 5),  # more voxels than max_voxels
        (points.double(), lengths, size, point_range, 3, 40),
        (torch.rand(2, 30, 3, generator=g).to(device), None, [0.25, 0.25, 0.25], [0, 0, 0, 1, 1, 1], 0, 64),
    ]


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "bev_rasterize": _bev_rasterize_samples,
    "pillar_scatter": _pillar_scatter_samples,
    "voxelize": _voxelize_samples,
}

WRAPPER_CASES: Dict[str, WrapperCase] = {
    "bev_rasterize": WrapperCase(
        pointops.bev_rasterize,
        lambda d: (
            _bev_cloud(d),
            ["max_z", "top_feature", "density", "mean_z"],
            torch.tensor([60, 30], device=d),
            _BEV_RANGE,
            _BEV_CELL,
        ),
    ),
    "bev_rasterize_preset": WrapperCase(
        pointops.bev_rasterize, lambda d: (_bev_cloud(d) * 10, ["count", "max_feature"], None, None, None, "kitti")
    ),
    "height_image": WrapperCase(
        pointops.height_image, lambda d: (_bev_cloud(d), torch.tensor([60, 30], device=d), _BEV_RANGE, _BEV_CELL)
    ),
    "pillar_scatter": WrapperCase(pointops.pillar_scatter, lambda d: _pillar_samples(d) + (6, 8)),
    "voxelize": WrapperCase(
        pointops.voxelize,
        lambda d: (
            torch.rand(2, 64, 4, device=d) * 2,
            [0.5, 0.5, 0.5],
            [0.0, 0.0, 0.0, 2.0, 2.0, 2.0],
            4,
            16,
            torch.tensor([64, 30], device=d),
        ),
    ),
    "voxelize_dynamic": WrapperCase(
        pointops.voxelize_dynamic,
        lambda d: (torch.rand(2, 64, 3, device=d) * 2, [0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 1.5, 1.5, 1.5]),
    ),
}
