"""Registration samples of the compat wrappers whose outputs have fixed sizes (pytorch3d's
knn_points and knn_gather), merged into tests/op_samples.py: compile, script, export, repeat calls.
torch_cluster's functions return data-sized edge lists (a host read each), and chamfer_distance
takes pytorch3d's Pointclouds objects, so neither traces; tests/test_compat_*.py cover them."""

from typing import Callable, Dict, List

import torch

from pointops.compat import pytorch3d
from tests.op_samples import WrapperCase


def _clouds(device: str, n: int, seed: int) -> torch.Tensor:
    return torch.rand(2, n, 3, generator=torch.Generator().manual_seed(seed)).to(device)


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {}

WRAPPER_CASES: Dict[str, WrapperCase] = {
    "compat.pytorch3d.knn_points": WrapperCase(
        pytorch3d.knn_points,
        lambda d: (_clouds(d, 20, 40), _clouds(d, 30, 41), None, torch.tensor([30, 12], device=d), 2, 4, -1, True),
    ),
    "compat.pytorch3d.knn_gather": WrapperCase(
        pytorch3d.knn_gather,
        lambda d: (
            _clouds(d, 30, 42),
            torch.randint(0, 30, (2, 10, 4), generator=torch.Generator().manual_seed(43)).to(d),
            torch.tensor([30, 2], device=d),
        ),
    ),
}
