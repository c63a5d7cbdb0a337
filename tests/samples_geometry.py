"""Registration samples of the geometry ops (knn, knn_packed, ball_query, ball_query_packed,
cube_query_packed, interpolate; voxel_downsample, estimate_normals, transform_points, icp) and their
wrappers, merged into tests/op_samples.py: opcheck, compile, script, export, streams, repeat calls.
Also helpers the geometry tests share: real meshes from CGAL's data and whether the knn op is there."""

import io
from typing import Callable, Dict, List

import pytest
import torch

import pointops
from pointops.reference import geometry as reference
from pointops.scenes.mesh import cgal_off
from tests.op_samples import WrapperCase

_MESHES: Dict[str, object] = {}


def has_knn() -> bool:
    return hasattr(torch.ops.pointops, "knn")


def cgal_mesh(name: str):
    """data/meshes/<name>.off from Debian's libcgal-dev data (pointops.scenes.mesh.cgal_off) as a
    trimesh.Trimesh; skips the calling test when the package, the file or trimesh is absent."""
    trimesh = pytest.importorskip("trimesh")
    if name not in _MESHES:
        try:
            data = cgal_off(name)
        except FileNotFoundError as e:
            pytest.skip(str(e))
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
    far = _cloud("cpu", 2, 300, 4)  # far outliers: the packed key (clouds of >= 256 rows on CUDA)
    far[0, 5], far[0, 9], far[1, 17] = torch.tensor([2e5, -3e5, 1e5]), torch.tensor([1e9, 0.0, -1e9]), 1e4
    return [
        (points, lengths, features, [0.5, 0.5, 0.5], None),
        (far.to(device), torch.tensor([300, 200], device=device), None, [0.01, 0.01, 0.01], None),
        (points, None, None, [0.3, 0.4, 0.5], [-0.5, -0.5, -0.5, 0.5, 0.5, 0.5]),
        (points, lengths, features, [1e-7, 0.5, 0.5], None),  # 2e7 cells on x: the exact slow path
        # rows spread over 1e9 cells an axis: the sorted path, one cloud past a block's 1,024 rows
        (_cloud(device, 2, 1500, 5) * 5e6, torch.tensor([1500, 700], device=device), None, [0.01] * 3, None),
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
    q = torch.nn.functional.normalize(
        torch.randn(batch, hypotheses, 4, generator=g, dtype=torch.float64)
        + torch.tensor([4.0, 0.0, 0.0, 0.0], dtype=torch.float64),
        dim=-1,
    )
    w, x, y, z = q.unbind(-1)
    r = torch.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        -1,
    ).view(batch, hypotheses, 3, 3)
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


def _icp_samples(device: str) -> List[tuple]:
    sources, targets, normals, poses, _ = _icp_problem(device)
    source_normals = torch.nn.functional.normalize(_cloud(device, 2, 50, 20), dim=-1)
    lengths = torch.tensor([50, 30], device=device)
    target_lengths = torch.tensor([40, 50], device=device)
    broken = poses.clone()
    broken[1, 2, 3, 1] = float("inf")  # the last row is not read (NaN poses: test_icp, opcheck has no equal_nan)
    return [
        (
            sources,
            source_normals,
            lengths,
            targets,
            normals,
            target_lengths,
            poses,
            3,
            0.5,
            0.0,
            True,
            1.0,
            [0.0, 0.0, -3.0],
            True,
            0.5,
            0.3,
        ),
        (
            sources,
            None,
            None,
            targets,
            None,
            None,
            poses.float(),
            2,
            float("inf"),
            1e-3,
            False,
            None,
            None,
            False,
            None,
            None,
        ),
        (
            sources.double(),
            source_normals.double(),
            None,
            targets.double(),
            normals.double(),
            target_lengths,
            broken,
            4,
            0.3,
            0.0,
            False,
            1.2,
            None,
            True,
            None,
            0.2,
        ),
        (
            sources.half(),
            None,
            lengths,
            targets.half(),
            normals.half(),
            None,
            poses,
            2,
            0.5,
            0.0,
            True,
            None,
            None,
            False,
            None,
            None,
        ),
        (sources, None, None, targets, None, None, poses[:, :0], 3, 1.0, 0.0, False, None, None, False, None, None),
        (sources, None, None, targets[:, :0], None, None, poses, 3, 1.0, 0.0, False, None, None, False, None, None),
    ]


def _icp_options_args(device: str) -> tuple:
    sources, targets, normals, poses, _ = _icp_problem(device)
    source_normals = torch.nn.functional.normalize(_cloud(device, 2, 50, 21), dim=-1)
    return (
        sources,
        targets,
        0.5,
        torch.tensor([50, 40], device=device),
        None,
        poses,
        normals,
        "point_to_plane",
        3,
        0.0,
        source_normals,
        1.0,
        [0.0, 0.0, -3.0],
        True,
        0.5,
        0.3,
    )


def _icp_wrapper_args(device: str) -> tuple:
    sources, targets, normals, poses, _ = _icp_problem(device)
    return (sources, targets, 0.5, torch.tensor([50, 40], device=device), None, poses, normals, "point_to_plane", 3)


def _clouds(device: str, batch: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, n, 3, generator=g).to(device)


def _outlier_clouds(device: str, n: int, length: int, seed: int) -> torch.Tensor:
    """One cloud of n rows, the first `length` counted, with a few far points (a trimmed grid box)."""
    points = _clouds("cpu", 1, n, seed)
    points[0, 3], points[0, 11], points[0, 40] = 1e3, torch.tensor([-2e5, 0.5, 3e4]), torch.tensor([0.5, 0.5, 1e30])
    return points.to(device), torch.tensor([length], device=device)


def _grid_knn_samples(device: str) -> List[tuple]:
    """knn samples whose sizes take the grids on CUDA (query rows past query_lengths cost nothing):
    the block grid (a cloud of 4,096 rows) and the batch grid (16,384 rows), both trimmed boxes."""
    small, small_lengths = _outlier_clouds(device, 4096, 1500, 15)
    large, large_lengths = _outlier_clouds(device, 16384, 5000, 16)
    queries = _clouds(device, 1, 32769, 17)
    query_lengths = torch.tensor([60], device=device)
    return [
        (queries, query_lengths, small, small_lengths, 4),
        (queries[:, :8193], query_lengths, large, large_lengths, 8),
    ]


def _knn_samples(device: str) -> List[tuple]:
    points = _clouds("cpu", 3, 60, 10)
    points[0, 7, 1] = float("nan")  # never a neighbour
    points = points.to(device)
    queries = _clouds(device, 3, 25, 11)
    lengths = torch.tensor([60, 10, 0], device=device)
    query_lengths = torch.tensor([25, 25, 3], device=device)
    big_points, big_queries = _clouds(device, 2, 400, 12), _clouds(device, 2, 50, 13)  # grid on the CPU
    return _grid_knn_samples(device) + [
        (queries, query_lengths, points, lengths, 5),
        (queries, None, points, None, 70),  # k > N: padded rows
        (queries.double(), None, points.double(), lengths, 3),
        (queries.half(), query_lengths, points.half(), None, 4),
        (big_queries, None, big_points, torch.tensor([400, 150], device=device), 16),
        (queries, None, points, None, 0),
        (queries, query_lengths, points, lengths, 5, 0.3),
        (big_queries, None, big_points, None, 16, 0.1),
    ]


def _knn_packed_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(14)
    points = torch.rand(90, 3, generator=g).to(device)
    queries = torch.rand(40, 3, generator=g).to(device)
    offsets = torch.tensor([0, 50, 50, 90], device=device)
    query_offsets = torch.tensor([0, 10, 25, 38], device=device)  # rows 38, 39 are in no cloud
    return [
        (queries, query_offsets, points, offsets, 6),
        (queries.double(), query_offsets, points.double(), offsets, 45),
    ]


def _ball_query_samples(device: str) -> List[tuple]:
    (queries, query_lengths, points, lengths, _), _, _, _, (big_queries, _, big_points, big_lengths, _) = _knn_samples(
        device
    )[2:7]
    grid_queries, grid_query_lengths, _, _, _ = _grid_knn_samples(device)[0]
    large, large_lengths = _outlier_clouds(device, 16384, 5000, 16)
    return [
        (grid_queries, grid_query_lengths, large, large_lengths, 0.1, 8, True),  # the batch grid on CUDA
        (queries, query_lengths, points, lengths, 0.3, 6, True),
        (queries, None, points, None, 0.5, 40, False),  # k > 32: the list in the output row
        (queries.double(), None, points.double(), lengths, 0.2, 4, True),
        (big_queries, None, big_points, big_lengths, 0.15, 16, True),
        (queries, None, points, None, 0.0, 3, False),
        (queries, query_lengths, points, lengths, 0.5, 6, True, 0.2),  # min_radius
        (big_queries, None, big_points, big_lengths, 0.4, 48, False, 0.1),  # dense balls, k > 32
    ]


def _ball_query_packed_samples(device: str) -> List[tuple]:
    queries, query_offsets, points, offsets, _ = _knn_packed_samples(device)[0]
    return [
        (queries, query_offsets, points, offsets, 0.3, 6, True),
        (queries.double(), query_offsets, points.double(), offsets, 0.5, 40, False, 0.2),
        (queries.half(), query_offsets, points.half(), offsets, 0.25, 4, True, 0.0),
    ]


def _cube_query_packed_samples(device: str) -> List[tuple]:
    queries, query_offsets, points, offsets, _ = _knn_packed_samples(device)[0]
    return [
        (queries, query_offsets, points, offsets, 0.3, 6, False),
        (queries.double(), query_offsets, points.double(), offsets, 0.5, 40, True),  # k > 32: the list in the row
        (queries.half(), query_offsets, points.half(), offsets, 0.25, 0, False),  # counts only
        (queries, query_offsets, points, offsets, 0.0, 3, True),
    ]


def _interpolate_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(15)
    features = torch.randn(2, 30, 5, generator=g).to(device)
    indices = torch.randint(-1, 31, (2, 12, 3), generator=g).to(device)
    weights = torch.rand(2, 12, 3, generator=g).to(device)
    return [
        (features, indices, weights),
        (features.double().requires_grad_(), indices, weights.double().requires_grad_()),
        (features.half(), indices[:, :, :1], weights[:, :, :1].half()),
    ]


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "knn": _knn_samples,
    "knn_packed": _knn_packed_samples,
    "ball_query": _ball_query_samples,
    "ball_query_packed": _ball_query_packed_samples,
    "cube_query_packed": _cube_query_packed_samples,
    "interpolate": _interpolate_samples,
    "voxel_downsample": _voxel_downsample_samples,
    "estimate_normals": _estimate_normals_samples,
    "transform_points": _transform_points_samples,
    "icp": _icp_samples,
}

WRAPPER_CASES: Dict[str, WrapperCase] = {
    "knn": WrapperCase(
        pointops.knn,
        lambda d: (
            _clouds(d, 2, 30, 20),
            _clouds(d, 2, 80, 21),
            6,
            torch.tensor([30, 12], device=d),
            torch.tensor([80, 40], device=d),
        ),
    ),
    "knn_packed": WrapperCase(
        pointops.knn_packed,
        lambda d: (
            _clouds(d, 1, 30, 22)[0],
            torch.tensor([0, 12, 30], device=d),
            _clouds(d, 1, 70, 23)[0],
            torch.tensor([0, 40, 70], device=d),
            5,
        ),
    ),
    "ball_query": WrapperCase(
        pointops.ball_query,
        lambda d: (
            _clouds(d, 2, 30, 24),
            _clouds(d, 2, 200, 25),
            0.25,
            8,
            torch.tensor([30, 12], device=d),
            torch.tensor([200, 60], device=d),
            "minus_one",
        ),
    ),
    "ball_query_packed": WrapperCase(
        pointops.ball_query_packed,
        lambda d: (
            _clouds(d, 1, 30, 30)[0],
            torch.tensor([0, 12, 30], device=d),
            _clouds(d, 1, 90, 31)[0],
            torch.tensor([0, 50, 90], device=d),
            0.3,
            8,
            "first",
            0.1,
        ),
    ),
    "cube_query_packed": WrapperCase(
        pointops.cube_query_packed,
        lambda d: (
            _clouds(d, 1, 30, 32)[0],
            torch.tensor([0, 12, 30], device=d),
            _clouds(d, 1, 90, 33)[0],
            torch.tensor([0, 50, 90], device=d),
            0.3,
            8,
            True,
        ),
    ),
    "three_nn": WrapperCase(pointops.three_nn, lambda d: (_clouds(d, 2, 40, 26), _clouds(d, 2, 15, 27))),
    "interpolate": WrapperCase(pointops.interpolate, lambda d: _interpolate_samples(d)[0]),
    "group_points": WrapperCase(
        pointops.group_points,
        lambda d: (
            _clouds(d, 2, 20, 28),
            torch.randint(-1, 20, (2, 6, 4), generator=torch.Generator().manual_seed(29)).to(d),
        ),
    ),
}


def _wrapper_cases() -> None:
    WRAPPER_CASES["voxel_downsample"] = WrapperCase(
        pointops.voxel_downsample,
        lambda d: (
            _cloud(d, 2, 64, 10),
            [0.4, 0.4, 0.4],
            torch.tensor([64, 30], device=d),
            torch.rand(2, 64, 2, device=d),
            [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0],
        ),
    )
    WRAPPER_CASES["transform_points"] = WrapperCase(
        pointops.transform_points,
        lambda d: (_cloud(d, 2, 16, 11), _poses(d, 2, 2, 12), torch.tensor([16, 5], device=d)),
    )
    WRAPPER_CASES["estimate_normals_given_neighbors"] = WrapperCase(
        pointops.estimate_normals,
        lambda d: (
            _cloud(d, 2, 30, 13),
            6,
            torch.tensor([30, 20], device=d),
            "outward",
            None,
            _neighbors(_cloud(d, 2, 30, 13), 6),
        ),
    )
    if has_knn():
        WRAPPER_CASES["estimate_normals"] = WrapperCase(
            pointops.estimate_normals,
            lambda d: (
                _cloud(d, 2, 40, 14),
                8,
                torch.tensor([40, 25], device=d),
                "viewpoint",
                torch.tensor([0.0, 0.0, 3.0], device=d),
            ),
        )
        WRAPPER_CASES["icp"] = WrapperCase(pointops.icp, _icp_wrapper_args)
        WRAPPER_CASES["icp_partial_view"] = WrapperCase(pointops.icp, _icp_options_args)


_wrapper_cases()
