"""Sample inputs for every registered pointops operator and every public wrapper.

Each family adds its entries here; test_registration.py runs them all through opcheck, compile,
script, export and the stream/device tests, and fails if an operator has no samples.
"""
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


def _voxelize_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(2)
    points = (torch.rand(3, 60, 4, generator=g) * 4 - 0.5).to(device)  # some outside the range
    lengths = torch.tensor([60, 25, 0], device=device)
    size, pc_range = [0.5, 0.5, 1.0], [0.0, 0.0, 0.0, 3.0, 3.0, 2.0]
    return [
        (points, lengths, size, pc_range, 4, 30),
        (points, None, size, pc_range, 2, 5),  # more voxels than max_voxels
        (points.double(), lengths, size, pc_range, 3, 40),
        (torch.rand(2, 30, 3, generator=g).to(device), None, [0.25, 0.25, 0.25], [0, 0, 0, 1, 1, 1], 0, 64),
    ]


# op name (without namespace) -> sample argument tuples for a device
OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "fps": _fps_samples,
    "fps_packed": _fps_packed_samples,
    "voxelize": _voxelize_samples,
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
        pointops.sample_farthest_points, lambda d: (torch.rand(2, 64, 3, device=d), 10)
    ),
    "voxelize": WrapperCase(
        pointops.voxelize,
        lambda d: (torch.rand(2, 64, 4, device=d) * 2, [0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0], 4, 16,
                   torch.tensor([64, 30], device=d)),
    ),
    "voxelize_dynamic": WrapperCase(
        pointops.voxelize_dynamic,
        lambda d: (torch.rand(2, 64, 3, device=d) * 2, [0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 1.5, 1.5, 1.5]),
    ),
}
