"""Sample inputs for every registered pointops operator and every public wrapper.

Each family keeps its entries in tests/samples_<family>.py (dicts OP_SAMPLES and WRAPPER_CASES of
the same form as below); they are merged here. test_operators.py runs them all through opcheck,
compile, script, export and the stream/device tests, and fails if an operator has no samples.
"""
import glob
import importlib
import os
from typing import Callable, Dict, List, NamedTuple

import torch

import pointops


def _fps_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(0)
    points = torch.rand(3, 50, 3, generator=g).to(device)
    lengths = torch.tensor([50, 20, 0], device=device)
    start = torch.tensor([4, 0, 0], device=device)
    return [
        (points, lengths, start, 16),
        (points, None, None, 60),
        (points.double(), lengths, None, 8),
        (torch.rand(2, 40, 5, generator=g).to(device), None, None, 7),
    ]


def _fps_packed_samples(device: str) -> List[tuple]:
    points = torch.rand(70, 3, generator=torch.Generator().manual_seed(1)).to(device)
    offsets = torch.tensor([0, 30, 30, 70], device=device)
    return [(points, offsets, torch.tensor([2, 0, 5], device=device), 12), (points, offsets, None, 40)]


_BEV_RANGE = [-2.0, -1.5, -1.0, 2.0, 1.5, 1.0]
_BEV_CELL = [0.25, 0.5]


def _bev_cloud(device: str, batch: int = 2, n: int = 60, dims: int = 4, seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, n, dims, generator=g) * 5 - 2.5).to(device)


def _bev_rasterize_samples(device: str) -> List[tuple]:
    points = _bev_cloud(device)
    lengths = torch.tensor([60, 25], device=device)
    every = ["max_z", "min_z", "mean_z", "count", "density", "occupancy", "max_feature", "mean_feature",
             "top_feature", "height_slices"]
    return [
        (points, lengths, _BEV_RANGE, _BEV_CELL, every, 3, 64.0, 4, False),
        (points.double(), None, _BEV_RANGE, _BEV_CELL, ["top_feature", "max_z"], 3, 64.0, 0, True),
        (points.half(), lengths, _BEV_RANGE, [0.3, 0.2], ["density", "mean_z"], 3, 10.0, 0, False),
        (_bev_cloud(device, 0, 5), None, _BEV_RANGE, _BEV_CELL, ["count"], 3, 64.0, 0, False),
    ]


def _pillar_samples(device: str, batch: int = 2, pillars: int = 40, channels: int = 5) -> tuple:
    g = torch.Generator().manual_seed(3)
    features = torch.randn(batch, pillars, channels, generator=g).to(device)
    coords = torch.stack([torch.zeros(batch, pillars, dtype=torch.int32),
                          torch.randint(-1, 7, (batch, pillars), generator=g, dtype=torch.int32),
                          torch.randint(-1, 9, (batch, pillars), generator=g, dtype=torch.int32)], -1).to(device)
    num_voxels = torch.tensor([pillars, pillars // 3][:batch], dtype=torch.int64, device=device)
    return features, coords, num_voxels


def _pillar_scatter_samples(device: str) -> List[tuple]:
    features, coords, num_voxels = _pillar_samples(device)
    return [
        (features, coords, num_voxels, 6, 8),
        (features.double(), coords, num_voxels, 7, 5),
        (features[:, :0], coords[:, :0], num_voxels, 6, 8),
    ]


def _hough_planes_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(2)
    points = (torch.rand(2, 40, 3, generator=g) * 2 - 1).to(device)
    lengths = torch.tensor([40, 11], device=device)
    weights = torch.rand(2, 40, generator=g).to(device)
    return [
        (points, lengths, None, 4, 6, 0.2, 1.5),
        (points, None, weights, 3, 5, 0.3, 1.0),
        (points.double(), lengths, weights.double(), 2, 3, 0.25, 1.0),
    ]


def _hough_peaks_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(3)
    grid = torch.randint(0, 5, (2, 4, 5, 6), generator=g, dtype=torch.int32).to(device)
    return [
        (grid, [1, 1, 1], [False, False, False], 1.0, 8, True),
        (grid.float(), [1, 2, 0], [False, True, False], 2.0, 5, False),
        (grid[:, 0], [1, 1], [True, False], 0.0, 40, False),
    ]


def _plane_fit_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(4)
    points = (torch.rand(2, 50, 3, generator=g) * 2 - 1).to(device)
    points[..., 2] *= 0.05  # most points near the plane z = 0
    # an Inf row matches nothing and comes back as given (a NaN one would too, but opcheck's
    # comparisons take NaN != NaN)
    planes = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, float("inf")]]] * 2, device=device)
    lengths = torch.tensor([50, 17], device=device)
    return [
        (points, lengths, planes, 0.1),
        (points.double(), None, planes.double(), 0.02),
        (points, None, planes[:, :0], 0.1),
    ]


def _plane_fit_wrapper_args(device: str) -> tuple:
    points, lengths, planes, threshold = _plane_fit_samples(device)[0]
    return points, planes, threshold, lengths


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


def _plane_scene(device: str) -> torch.Tensor:
    """Two clouds of 400 points on three planes (floor, two walls) with a little noise."""
    g = torch.Generator().manual_seed(5)
    uv = torch.rand(2, 400, 2, generator=g) * 4 - 2
    which = torch.arange(400) % 3
    noise = torch.randn(2, 400, generator=g) * 0.005
    floor = torch.stack([uv[..., 0], uv[..., 1], noise], -1)
    wall_x = torch.stack([2.0 + noise, uv[..., 0], uv[..., 1] + 2], -1)
    wall_y = torch.stack([uv[..., 0], 2.0 + noise, uv[..., 1] + 2], -1)
    points = torch.where((which == 0).view(1, -1, 1), floor, torch.where((which == 1).view(1, -1, 1), wall_x, wall_y))
    return points.to(device)


# op name (without namespace) -> sample argument tuples for a device
OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "fps": _fps_samples,
    "fps_packed": _fps_packed_samples,
    "bev_rasterize": _bev_rasterize_samples,
    "pillar_scatter": _pillar_scatter_samples,
    "hough_planes": _hough_planes_samples,
    "hough_planes_ball": _hough_planes_samples,
    "hough_peaks": _hough_peaks_samples,
    "voxelize": _voxelize_samples,
    "plane_labels": _plane_fit_samples,
    "plane_refit": _plane_fit_samples,
}


class WrapperCase(NamedTuple):
    fn: Callable
    make_args: Callable[[str], tuple]  # positional arguments on a device


WRAPPER_CASES: Dict[str, WrapperCase] = {
    "farthest_point_sampling": WrapperCase(
        pointops.farthest_point_sampling,
        lambda d: (torch.rand(2, 64, 3, device=d), 10, torch.tensor([64, 30], device=d)),
    ),
    "farthest_point_sampling_packed": WrapperCase(
        pointops.farthest_point_sampling_packed,
        lambda d: (torch.rand(50, 3, device=d), torch.tensor([0, 20, 50], device=d), 6),
    ),
    "sample_farthest_points": WrapperCase(
        pointops.sample_farthest_points, lambda d: (torch.rand(2, 64, 3, device=d), None, 10)
    ),
    "bev_rasterize": WrapperCase(
        pointops.bev_rasterize,
        lambda d: (_bev_cloud(d), ["max_z", "top_feature", "density", "mean_z"], torch.tensor([60, 30], device=d),
                   _BEV_RANGE, _BEV_CELL),
    ),
    "bev_rasterize_preset": WrapperCase(
        pointops.bev_rasterize, lambda d: (_bev_cloud(d) * 10, ["count", "max_feature"], None, None, None, "kitti")
    ),
    "height_image": WrapperCase(
        pointops.height_image, lambda d: (_bev_cloud(d), torch.tensor([60, 30], device=d), _BEV_RANGE, _BEV_CELL)
    ),
    "pillar_scatter": WrapperCase(pointops.pillar_scatter, lambda d: _pillar_samples(d) + (6, 8)),
    "hough_planes": WrapperCase(
        pointops.hough_planes, lambda d: (torch.rand(2, 30, 3, device=d), 0.25, 2.0, torch.tensor([30, 9], device=d), 4, 5)
    ),
    "hough_planes_ball": WrapperCase(
        pointops.hough_planes_ball,
        lambda d: (torch.rand(2, 30, 3, device=d), 0.25, 2.0, None, 4, 6, torch.rand(2, 30, device=d)),
    ),
    "hough_peaks": WrapperCase(
        pointops.hough_peaks, lambda d: (torch.randint(0, 4, (2, 6, 7), dtype=torch.int32, device=d), [1, 1], 5)
    ),
    "hough_plane_peaks": WrapperCase(
        pointops.hough_plane_peaks, lambda d: (torch.randint(0, 4, (2, 4, 5, 6), dtype=torch.int32, device=d), 5)
    ),
    "peaks_to_planes": WrapperCase(
        pointops.peaks_to_planes,
        lambda d: (torch.tensor([[[0, 1, 2], [-1, -1, -1]]], device=d), 4, 5, 0.25, 2.0),
    ),
    "ball_peaks_to_planes": WrapperCase(
        pointops.ball_peaks_to_planes, lambda d: (torch.tensor([[[3, 1], [-1, -1]]], device=d), 4, 6, 0.25, 2.0)
    ),
    "plane_labels": WrapperCase(pointops.plane_labels, lambda d: _plane_fit_wrapper_args(d)),
    "plane_refit": WrapperCase(pointops.plane_refit, lambda d: _plane_fit_wrapper_args(d)),
    "voxelize": WrapperCase(
        pointops.voxelize,
        lambda d: (torch.rand(2, 64, 4, device=d) * 2, [0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0], 4, 16,
                   torch.tensor([64, 30], device=d)),
    ),
    "detect_planes": WrapperCase(
        pointops.detect_planes, lambda d: (_plane_scene(d), 3, torch.tensor([400, 250], device=d), "indoor")
    ),
    "voxelize_dynamic": WrapperCase(
        pointops.voxelize_dynamic,
        lambda d: (torch.rand(2, 64, 3, device=d) * 2, [0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 1.5, 1.5, 1.5]),
    ),
}


def _merge_family_samples() -> None:
    for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "samples_*.py"))):
        module = importlib.import_module("tests." + os.path.splitext(os.path.basename(path))[0])
        for table, extra in ((OP_SAMPLES, module.OP_SAMPLES), (WRAPPER_CASES, module.WRAPPER_CASES)):
            clash = set(table) & set(extra)
            assert not clash, f"{path} repeats sample names {sorted(clash)}"
            table.update(extra)


_merge_family_samples()
