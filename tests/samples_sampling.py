"""Registration samples of the sampling ops (fps, fps_packed) and their wrappers, merged into
tests/op_samples.py: opcheck, compile, script, export, streams, repeat calls."""
from typing import Callable, Dict, List

import torch

import pointops
from tests.op_samples import WrapperCase


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
        # On an sm_90 GPU these take the other CUDA layouts (csrc/sampling/fps_plan.cpp), so the
        # harness (opcheck, streams, repeat calls, tools/sanitize.py) reaches every kernel: a
        # cluster of 5 blocks, and the cooperative grid (more than a 16-block cluster holds).
        (torch.rand(1, 9000, 3, generator=g).to(device), None, None, 24),
        (torch.rand(1, 140000, 2, generator=g).to(device), None, None, 16),
    ]


def _fps_packed_samples(device: str) -> List[tuple]:
    points = torch.rand(70, 3, generator=torch.Generator().manual_seed(1)).to(device)
    offsets = torch.tensor([0, 30, 30, 70], device=device)
    return [(points, offsets, torch.tensor([2, 0, 5], device=device), 12), (points, offsets, None, 40)]


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "fps": _fps_samples,
    "fps_packed": _fps_packed_samples,
}

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
}
