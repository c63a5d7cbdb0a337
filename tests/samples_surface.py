"""Registration samples of voxel_downsample, estimate_normals, transform_points, icp_step and icp (merged
into tests/op_samples.py), plus helpers the surface tests share: real meshes from CGAL's data
and whether the knn op is there."""
import io
import os
import tarfile
from typing import Callable, Dict, List

import pytest
import torch

import pointops
from pointops.reference import registration as reference

CGAL_DATA = "/usr/share/doc/libcgal-dev/data.tar.gz"
_MESHES: Dict[str, object] = {}


def has_knn() -> bool:
    return hasattr(torch.ops.pointops, "knn")


def cgal_mesh(name: str):
    """data/meshes/<name>.off from Debian's libcgal-dev data as a trimesh.Trimesh; skips the
    calling test when the package, the file or trimesh is absent."""
    trimesh = pytest.importorskip("trimesh")
    if name not in _MESHES:
        if not os.path.isfile(CGAL_DATA):
            pytest.skip(f"{CGAL_DATA} is absent (Debian package libcgal-dev)")
        with tarfile.open(CGAL_DATA) as archive:
            try:
                member = archive.extractfile(f"data/meshes/{name}.off")
            except KeyError:
                pytest.skip(f"{CGAL_DATA} has no data/meshes/{name}.off")
            data = member.read()
        _MESHES[name] = trimesh.load(io.BytesIO(data), file_type="off", process=False)
    return _MESHES[name]


def _cloud(device: str, batch: int, n: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, n, 3, generator=g) * 2 - 1).to(dtype).to(device)


def _voxel_downsample_samples(device: str) -> List[tuple]:
    points = _cloud(device, 3, 60, 0)
    lengths = torch.tensor([60, 25, 0], device=device)
    features = torch.randn(3, 60, 4, generator=torch.Generator().manual_seed(1)).to(device)
    grad_points = _cloud(device, 2, 30, 2, torch.float64).requires_grad_()
    return [
        (points, lengths, features, [0.5, 0.5, 0.5], None),
        (points, None, None, [0.3, 0.4, 0.5], [-0.5, -0.5, -0.5, 0.5, 0.5, 0.5]),
        (points.double(), lengths, features.double(), [0.25, 0.25, 0.25], None),
        (points.half(), None, features, [0.5, 0.5, 0.5], None),
        (grad_points, None, None, [0.5, 0.5, 0.5], None),
        (_cloud(device, 0, 5, 3), None, None, [0.1, 0.1, 0.1], None),
    ]


def _neighbors(points: torch.Tensor, k: int) -> torch.Tensor:
    d = torch.cdist(points.double(), points.double())
    return torch.topk(d, k, dim=2, largest=False).indices


def _estimate_normals_samples(device: str) -> List[tuple]:
    points = _cloud(device, 2, 40, 4)
    points[..., 2] *= 0.1
    neighbors = _neighbors(points, 8)
    lengths = torch.tensor([40, 30], device=device)
    view = torch.tensor([[0.0, 0.0, 5.0], [1.0, 1.0, 1.0]], device=device)
    grad_points = points.double().clone().requires_grad_()
    return [
        (points, lengths, neighbors, None, 1),
        (points.double(), None, neighbors, view, 2),
        (points, None, neighbors[..., :2], view, 0),
        (grad_points, None, neighbors, None, 1),
    ]


def _poses(device: str, batch: int, hypotheses: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(batch, hypotheses, 4, generator=g, dtype=torch.float64) +
                                      torch.tensor([4.0, 0.0, 0.0, 0.0], dtype=torch.float64), dim=-1)
    w, x, y, z = q.unbind(-1)
    r = torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                     2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                     2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).view(batch, hypotheses, 3, 3)
    pose = torch.eye(4, dtype=torch.float64).repeat(batch, hypotheses, 1, 1)
    pose[..., :3, :3] = r
    pose[..., :3, 3] = torch.randn(batch, hypotheses, 3, generator=g, dtype=torch.float64) * 0.1
    return pose.to(dtype).to(device)


def _transform_points_samples(device: str) -> List[tuple]:
    points = _cloud(device, 2, 20, 5)
    lengths = torch.tensor([20, 7], device=device)
    grad_points = points.double().clone().requires_grad_()
    grad_poses = _poses(device, 2, 3, 7).requires_grad_()
    return [
        (points, lengths, _poses(device, 2, 3, 6)),
        (points.double(), None, _poses(device, 2, 1, 6, torch.float32)),
        (points, None, _poses(device, 2, 0, 6)),
        (grad_points, lengths, grad_poses),
    ]


def _icp_problem(device: str, batch: int = 2, n: int = 50, hypotheses: int = 3, seed: int = 8):
    targets = _cloud(device, batch, n, seed)
    normals = torch.nn.functional.normalize(_cloud(device, batch, n, seed + 1), dim=-1)
    sources = targets + 0.02
    poses = _poses(device, batch, hypotheses, seed + 2)
    moved = reference.transform_points(sources.cpu(), poses.cpu())
    indices = reference.nearest_neighbors(moved.view(batch, -1, 3), targets.cpu(), 1)
    return sources, targets, normals, poses, indices.view(batch, hypotheses, n).to(device)


def _icp_step_samples(device: str) -> List[tuple]:
    sources, targets, normals, poses, indices = _icp_problem(device)
    lengths = torch.tensor([50, 30], device=device)
    converged = torch.tensor([[False, True, False], [False, False, False]], device=device)
    return [
        (sources, lengths, targets, normals, poses, indices, converged, 0.5, 0.0, True, True),
        (sources, None, targets, None, poses.float(), indices, converged, float("inf"), 1e-3, False, True),
        (sources.double(), None, targets.double(), normals.double(), poses, indices, converged, 0.1, 0.0, True, False),
        (sources, None, targets, None, poses[:, :0], indices[:, :0], converged[:, :0], 1.0, 0.0, False, True),
    ]


def _icp_samples(device: str) -> List[tuple]:
    sources, targets, normals, poses, _ = _icp_problem(device)
    source_normals = torch.nn.functional.normalize(_cloud(device, 2, 50, 20), dim=-1)
    lengths = torch.tensor([50, 30], device=device)
    target_lengths = torch.tensor([40, 50], device=device)
    broken = poses.clone()
    broken[1, 2, 3, 1] = float("inf")  # the last row is not read (NaN poses: test_icp, opcheck has no equal_nan)
    return [
        (sources, source_normals, lengths, targets, normals, target_lengths, poses, 3, 0.5, 0.0, True, 1.0,
         [0.0, 0.0, -3.0], True, 0.5, 0.3),
        (sources, None, None, targets, None, None, poses.float(), 2, float("inf"), 1e-3, False, None, None, False,
         None, None),
        (sources.double(), source_normals.double(), None, targets.double(), normals.double(), target_lengths, broken,
         4, 0.3, 0.0, False, 1.2, None, True, None, 0.2),
        (sources.half(), None, lengths, targets.half(), normals.half(), None, poses, 2, 0.5, 0.0, True, None, None,
         False, None, None),
        (sources, None, None, targets, None, None, poses[:, :0], 3, 1.0, 0.0, False, None, None, False, None, None),
        (sources, None, None, targets[:, :0], None, None, poses, 3, 1.0, 0.0, False, None, None, False, None, None),
    ]


def _icp_options_args(device: str) -> tuple:
    sources, targets, normals, poses, _ = _icp_problem(device)
    source_normals = torch.nn.functional.normalize(_cloud(device, 2, 50, 21), dim=-1)
    return (sources, targets, 0.5, torch.tensor([50, 40], device=device), None, poses, normals, "point_to_plane", 3,
            0.0, source_normals, 1.0, [0.0, 0.0, -3.0], True, 0.5, 0.3)


def _icp_wrapper_args(device: str) -> tuple:
    sources, targets, normals, poses, _ = _icp_problem(device)
    return (sources, targets, 0.5, torch.tensor([50, 40], device=device), None, poses, normals, "point_to_plane", 3)


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "voxel_downsample": _voxel_downsample_samples,
    "estimate_normals": _estimate_normals_samples,
    "transform_points": _transform_points_samples,
    "icp_step": _icp_step_samples,
    "icp": _icp_samples,
}

WRAPPER_CASES: Dict[str, object] = {}


def _wrapper_cases() -> None:
    from tests.op_samples import WrapperCase  # noqa: PLC0415  (op_samples imports this module)

    WRAPPER_CASES["voxel_downsample"] = WrapperCase(
        pointops.voxel_downsample,
        lambda d: (_cloud(d, 2, 64, 10), [0.4, 0.4, 0.4], torch.tensor([64, 30], device=d),
                   torch.rand(2, 64, 2, device=d), [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]),
    )
    WRAPPER_CASES["transform_points"] = WrapperCase(
        pointops.transform_points, lambda d: (_cloud(d, 2, 16, 11), _poses(d, 2, 2, 12), torch.tensor([16, 5], device=d))
    )
    WRAPPER_CASES["estimate_normals_given_neighbors"] = WrapperCase(
        pointops.estimate_normals,
        lambda d: (_cloud(d, 2, 30, 13), 6, torch.tensor([30, 20], device=d), "outward", None,
                   _neighbors(_cloud(d, 2, 30, 13), 6)),
    )
    if has_knn():
        WRAPPER_CASES["estimate_normals"] = WrapperCase(
            pointops.estimate_normals,
            lambda d: (_cloud(d, 2, 40, 14), 8, torch.tensor([40, 25], device=d), "viewpoint",
                       torch.tensor([0.0, 0.0, 3.0], device=d)),
        )
        WRAPPER_CASES["icp"] = WrapperCase(pointops.icp, _icp_wrapper_args)
        WRAPPER_CASES["icp_partial_view"] = WrapperCase(pointops.icp, _icp_options_args)


_wrapper_cases()
