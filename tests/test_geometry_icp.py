"""Rigid transforms and ICP: exact transform reference, float64 NumPy ICP, recovery of known poses
from several hypotheses, edges, errors, CPU == CUDA (both of the CUDA kernel's launch plans)."""

import math

import numpy as np
import pytest
import torch

import pointops
from pointops.reference import geometry as reference
from tests import op_samples  # noqa: F401  (loads samples_geometry through the merge first)
from tests.samples_geometry import cgal_mesh, has_knn

NAN = float("nan")
INF = float("inf")


def rotation(axis, angle):
    axis = torch.nn.functional.normalize(torch.tensor(axis, dtype=torch.float64), dim=0)
    k = torch.tensor(
        [[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]], dtype=torch.float64
    )
    return torch.eye(3, dtype=torch.float64) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


def pose(axis, angle, t):
    p = torch.eye(4, dtype=torch.float64)
    p[:3, :3] = rotation(axis, angle)
    p[:3, 3] = torch.tensor(t, dtype=torch.float64)
    return p


def wavy(n, seed=0, dtype=torch.float64):
    """A closed-ish blob: a sphere with bumps (no symmetry that ICP could slide along)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=torch.float64), dim=-1)
    r = 1.0 + 0.2 * torch.sin(3 * d[:, 0]) * torch.cos(2 * d[:, 1]) + 0.1 * d[:, 2] ** 2
    return (d * r.unsqueeze(-1)).to(dtype)


def sphere_normals(points, k=10):
    neighbors = reference.nearest_neighbors(points, points, k)
    centre = (points.amin(1) + points.amax(1)) / 2
    return torch.ops.pointops.estimate_normals(points, None, neighbors, centre, 2)[0]


def icp_op(sources, targets, normals, poses, max_dist, plane, iterations=1, tolerance=0.0, lengths=None, device="cpu"):
    """The icp op with its default options, on `device`; the outputs back on the CPU."""
    to = lambda t: None if t is None else t.to(device)  # noqa: E731  (a one-line mover)
    out = torch.ops.pointops.icp(
        to(sources),
        None,
        to(lengths),
        to(targets),
        to(normals),
        None,
        to(poses),
        iterations,
        max_dist,
        tolerance,
        plane,
    )
    return tuple(o.cpu() for o in out)


def test_transform_points_is_exact(device):
    g = torch.Generator().manual_seed(0)
    points = torch.randn(2, 50, 3, generator=g)
    poses = torch.stack([torch.stack([pose([1, 2, 3], 0.7, [1, -2, 0.5]), pose([0, 0, 1], -2.0, [0, 0, 0])])] * 2)
    lengths = torch.tensor([50, 13])
    for pts, ps in ((points, poses), (points.double(), poses.float()), (points.half(), poses)):
        out = torch.ops.pointops.transform_points(pts.to(device), lengths.to(device), ps.to(device)).cpu()
        expected = reference.transform_points(pts, ps, lengths)
        assert out.dtype == expected.dtype and torch.equal(out, expected)
    assert (out[1, :, 13:] == 0).all()
    assert torch.ops.pointops.transform_points(points.to(device), None, poses[:, :0].to(device)).shape == (2, 0, 50, 3)
    assert torch.isnan(
        torch.ops.pointops.transform_points(torch.full((1, 1, 3), NAN, device=device), None, poses[:1, :1].to(device))
    ).all()


def test_transform_points_gradients():
    points = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    poses = torch.randn(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 4])
    torch.autograd.gradcheck(lambda p, q: torch.ops.pointops.transform_points(p, lengths, q), (points, poses))


@pytest.mark.parametrize("plane", [False, True])
def test_one_step_matches_numpy_reference(device, plane):
    targets = wavy(400, seed=1).unsqueeze(0).repeat(2, 1, 1)
    normals = sphere_normals(targets)
    truth = pose([1, 1, 0], 0.1, [0.05, -0.02, 0.03])
    sources = reference.transform_points(targets, torch.linalg.inv(truth).expand(2, 1, 4, 4))[:, 0]
    poses = torch.stack(
        [
            torch.stack(
                [
                    torch.eye(4, dtype=torch.float64),
                    pose([0, 0, 1], 0.05, [0, 0, 0.02]),
                    pose([0, 1, 0], 3.0, [0.5, 0, 0]),
                ]
            )
        ]
        * 2
    )
    next_poses, rmse, fraction, converged = icp_op(sources, targets, normals, poses, 0.3, plane, device=device)
    expected, expected_rmse, expected_fraction, _ = reference.icp(
        sources, targets, poses, 0.3, 1, normals if plane else None
    )
    np.testing.assert_allclose(next_poses.numpy(), expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(rmse.numpy(), expected_rmse, rtol=1e-9, atol=0)
    np.testing.assert_allclose(fraction.numpy(), expected_fraction, rtol=1e-15, atol=0)
    assert not converged.any()
    assert rmse.dtype == torch.float64 and next_poses.dtype == torch.float64


@pytest.mark.parametrize("plane", [False, True])
def test_icp_recovers_known_poses_from_several_hypotheses(plane):
    targets = wavy(300, seed=2).unsqueeze(0)
    normals = sphere_normals(targets)
    truth = pose([0.3, -1, 0.5], 0.35, [0.2, -0.1, 0.15])
    sources = reference.transform_points(targets, torch.linalg.inv(truth).view(1, 1, 4, 4))[:, 0]
    init = torch.stack(
        [torch.eye(4, dtype=torch.float64), pose([1, 0, 0], 0.2, [0.1, 0, 0]), pose([0, 0, 1], math.pi, [1.5, 1.0, 0])]
    ).unsqueeze(0)  # the last is far off
    poses, rmse, fraction, converged = icp_op(sources, targets, normals, init, 1.0, plane, 30)
    for h in (0, 1):
        assert torch.allclose(poses[0, h], truth, atol=1e-6), (h, poses[0, h] - truth)
        assert rmse[0, h] < 1e-6 and fraction[0, h] == 1.0
    assert not torch.allclose(poses[0, 2], truth, atol=1e-2) and rmse[0, 2] > 1e-3
    # the float64 NumPy ICP lands on the same poses
    expected, expected_rmse, _, _ = reference.icp(sources, targets, init, 1.0, 30, normals if plane else None)
    np.testing.assert_allclose(poses[0, :2].numpy(), expected[0, :2], rtol=0, atol=1e-7)


def test_tolerance_freezes_converged_hypotheses(device):
    targets = wavy(200, seed=3).unsqueeze(0)
    truth = pose([0, 1, 1], 0.1, [0.05, 0.0, 0.0])
    sources = reference.transform_points(targets, torch.linalg.inv(truth).view(1, 1, 4, 4))[:, 0]
    init = torch.stack([torch.eye(4, dtype=torch.float64), pose([1, 0, 0], 0.3, [0, 0, 0])]).unsqueeze(0)
    poses, _, _, converged = icp_op(sources, targets, None, init, INF, False, 30, tolerance=1e-9, device=device)
    assert converged.all()
    # a converged hypothesis takes no further step: more iterations change no bit
    again, _, _, still = icp_op(sources, targets, None, init, INF, False, 40, tolerance=1e-9, device=device)
    assert torch.equal(again, poses) and still.all()
    # without tolerance a hypothesis keeps stepping (tiny steps) and does not report convergence
    _, _, _, converged = icp_op(sources, targets, None, init, INF, False, 3, device=device)
    assert not converged.any()


def test_zero_iterations_measure_only(device):
    targets = wavy(100, seed=4).unsqueeze(0)
    sources = targets + 0.01
    init = pose([1, 0, 0], 0.1, [0, 0, 0]).view(1, 1, 4, 4).clone()
    init[0, 0, 3] = torch.tensor([1.0, 2.0, 3.0, 4.0])  # the last row is not read; it comes back 0 0 0 1
    poses, rmse, fraction, converged = icp_op(sources, targets, None, init, INF, False, 0, device=device)
    assert torch.equal(poses[0, 0, :3], init[0, 0, :3]) and poses[0, 0, 3].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert not converged.any() and fraction[0, 0] == 1.0 and rmse[0, 0] > 0


def test_too_few_inliers_and_empty_clouds(device):
    targets = wavy(50, seed=5).unsqueeze(0)
    sources = targets.clone()
    init = pose([1, 0, 0], 0.01, [0.0, 0.0, 0.0]).view(1, 1, 4, 4)
    # a tiny correspondence distance keeps fewer than 3 (6) pairs: no step, reported as converged
    for plane in (False, True):
        normals = sphere_normals(targets) if plane else None
        poses, rmse, fraction, converged = icp_op(sources, targets, normals, init, 1e-9, plane, device=device)
        assert torch.equal(poses, init) and converged.all() and fraction[0, 0] == 0 and rmse[0, 0] == 0
    # empty sources / targets, B = 0, H = 0
    empty = torch.zeros(1, 0, 3, dtype=torch.float64)
    poses, rmse, fraction, _ = icp_op(empty, targets, None, init, 1.0, False, device=device)
    assert torch.equal(poses, init) and rmse.tolist() == [[0.0]] and fraction.tolist() == [[0.0]]
    poses, rmse, fraction, _ = icp_op(sources, empty, None, init, 1.0, False, device=device)
    assert torch.equal(poses, init) and fraction.tolist() == [[0.0]]
    out = icp_op(sources[:0], targets[:0], None, init[:0], 1.0, False, device=device)
    assert out[0].shape == (0, 1, 4, 4) and out[1].shape == (0, 1)
    out = icp_op(sources, targets, None, init[:, :0], 1.0, False, device=device)
    assert out[0].shape == (1, 0, 4, 4) and out[3].shape == (1, 0)


def test_nan_sources_and_lengths(device):
    targets = wavy(80, seed=6).unsqueeze(0)
    sources = targets + 0.01
    init = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    dirty = sources.clone()
    dirty[0, 3] = NAN
    poses, rmse, fraction, _ = icp_op(dirty, targets, None, init, INF, False, device=device)
    assert torch.isfinite(poses).all() and fraction[0, 0] == 1.0  # the NaN source is not counted at all
    # a source without a target in reach is counted, not an inlier
    far = sources.clone()
    far[0, 5] = 100.0
    _, _, fraction, _ = icp_op(far, targets, None, init, 1.0, False, 0, device=device)
    assert math.isclose(float(fraction[0, 0]), 79 / 80, rel_tol=1e-15)
    # sources past query_lengths are ignored
    _, _, fraction, _ = icp_op(sources, targets, None, init, 0.0, False, lengths=torch.tensor([40]), device=device)
    _, _, fraction_all, _ = icp_op(sources[:, :40], targets, None, init, 0.0, False, device=device)
    assert torch.equal(fraction, fraction_all)


def test_planar_target_leaves_in_plane_motion_free(device):
    g = torch.Generator().manual_seed(7)
    targets = torch.cat(
        [torch.rand(1, 200, 2, generator=g, dtype=torch.float64), torch.zeros(1, 200, 1, dtype=torch.float64)], -1
    )
    normals = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand(1, 200, 3).contiguous()
    sources = targets + torch.tensor([0.0, 0.0, 0.05], dtype=torch.float64)
    init = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    poses, _, _, _ = icp_op(sources, targets, normals, init, INF, True, device=device)
    assert torch.isfinite(poses).all()
    assert abs(float(poses[0, 0, 2, 3]) + 0.05) < 1e-12 and poses[0, 0, :2, 3].abs().max() < 1e-12


def test_float32_poses_and_sources(device):
    targets = wavy(200, seed=8, dtype=torch.float32).unsqueeze(0)
    normals = sphere_normals(targets.double()).float()
    truth = pose([1, 0, 1], 0.1, [0.02, 0.0, 0.0])
    sources = reference.transform_points(targets, torch.linalg.inv(truth).view(1, 1, 4, 4))[:, 0]
    poses, rmse, fraction, _ = icp_op(
        sources,
        targets,
        normals,
        truth.float().view(1, 1, 4, 4) @ pose([0, 1, 0], 0.01, [0, 0, 0]).float(),
        1.0,
        True,
        device=device,
    )
    assert poses.dtype == torch.float32 and rmse.dtype == torch.float32


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sources": torch.rand(1, 5, 2)}, r"sources must have shape \(B, N, 3\)"),
        ({"targets": torch.rand(2, 5, 3)}, r"targets must have shape \(B, M, 3\) with B = 1"),
        ({"poses": torch.eye(4).view(1, 1, 4, 4).int()}, "poses must be float32 or float64"),
        ({"poses": torch.eye(3).view(1, 1, 3, 3)}, r"poses must have shape \(B, H, 4, 4\) with B = 1"),
        ({"plane": True, "normals": None}, "target_normals are required for point-to-plane ICP"),
        (
            {"plane": True, "normals": torch.rand(1, 6, 3, dtype=torch.float64)},
            "target_normals \\(the dtype of targets\\) must be Float",
        ),
        ({"plane": True, "normals": torch.rand(1, 5, 3)}, r"target_normals must have shape \[1, 6, 3\]"),
        ({"distance": -1.0}, "max_correspondence_distance must be >= 0, got -1"),
        ({"distance": NAN}, "max_correspondence_distance must be >= 0, got nan"),
        ({"tolerance": -1.0}, "tolerance must be >= 0"),
        ({"lengths": torch.tensor([1, 2])}, r"query_lengths must have shape \[1\]"),
    ],
)
def test_bad_cloud_arguments_raise_clear_errors(change, message):
    args = {
        "sources": torch.rand(1, 5, 3),
        "lengths": None,
        "targets": torch.rand(1, 6, 3),
        "normals": None,
        "poses": torch.eye(4).view(1, 1, 4, 4),
        "distance": 1.0,
        "tolerance": 0.0,
        "plane": False,
    }
    args.update(change)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pointops.icp(
            args["sources"],
            None,
            args["lengths"],
            args["targets"],
            args["normals"],
            None,
            args["poses"],
            1,
            args["distance"],
            args["tolerance"],
            args["plane"],
        )


def test_bad_transform_arguments_raise_clear_errors():
    with pytest.raises(RuntimeError, match=r"poses must have shape \(B, H, 4, 4\) with B = 2 \(as points\)"):
        torch.ops.pointops.transform_points(torch.rand(2, 3, 3), None, torch.rand(1, 1, 4, 4))
    with pytest.raises(RuntimeError, match=r"poses must have shape \(B, H, 4, 4\) \(4 dimensions\)"):
        torch.ops.pointops.transform_points(torch.rand(2, 3, 3), None, torch.rand(2, 4, 4))


def test_wrapper_checks_its_options():
    with pytest.raises(ValueError, match="method must be 'point_to_plane' or 'point_to_point', got 'p2p'"):
        pointops.icp(torch.rand(1, 5, 3), torch.rand(1, 5, 3), 1.0, method="p2p")
    with pytest.raises(ValueError, match="point_to_plane ICP needs target_normals"):
        pointops.icp(torch.rand(1, 5, 3), torch.rand(1, 5, 3), 1.0)
    with pytest.raises(ValueError, match="iterations must be >= 0, got -1"):
        pointops.icp(torch.rand(1, 5, 3), torch.rand(1, 5, 3), 1.0, method="point_to_point", iterations=-1)


@pytest.mark.parametrize("method", ["point_to_point", "point_to_plane"])
def test_wrapper_matches_the_numpy_reference(device, method):
    targets = wavy(300, seed=9, dtype=torch.float32).unsqueeze(0).repeat(2, 1, 1)
    normals = sphere_normals(targets.double()).float()
    truth = pose([1, 2, 0], 0.2, [0.1, 0.0, -0.1])
    sources = reference.transform_points(targets, torch.linalg.inv(truth).expand(2, 1, 4, 4))[:, 0]
    init = torch.stack([torch.eye(4), pose([0, 0, 1], 0.1, [0, 0, 0]).float()]).unsqueeze(0).repeat(2, 1, 1, 1)
    plane = method == "point_to_plane"
    out = pointops.icp(
        sources.to(device),
        targets.to(device),
        0.5,
        init_poses=init.to(device),
        target_normals=normals.to(device) if plane else None,
        method=method,
        iterations=20,
    )
    assert isinstance(out, pointops.ICPResult) and out.poses.dtype == torch.float32
    op = icp_op(sources, targets, normals if plane else None, init, 0.5, plane, 20, device=device)
    assert all(torch.equal(a.cpu(), b) for a, b in zip(out, op))
    expected, rmse, fraction, _ = reference.icp(sources, targets, init, 0.5, 20, normals if plane else None)
    np.testing.assert_allclose(out.poses.cpu().numpy(), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(out.rmse.cpu().numpy(), rmse, rtol=0, atol=1e-5)
    np.testing.assert_allclose(out.inlier_fraction.cpu().numpy(), fraction, rtol=0, atol=0)
    assert torch.allclose(out.poses.cpu().double(), truth.expand(2, 2, 4, 4), atol=1e-4)


@pytest.mark.skipif(not has_knn(), reason="needs the knn op")
def test_real_scan_registration():
    """CGAL's bunny: a voxel-downsampled copy under a known pose is registered back (skips
    without libcgal-dev's data)."""
    mesh = cgal_mesh("bunny00")
    vertices = torch.tensor(np.asarray(mesh.vertices), dtype=torch.float32).unsqueeze(0)
    extent = float((vertices[0].amax(0) - vertices[0].amin(0)).max())
    targets = pointops.voxel_downsample(vertices, [extent / 60] * 3)
    n = int(targets.lengths[0])
    target_points = targets.points[:, :n].contiguous()
    normals = pointops.estimate_normals(target_points, 12, orientation="outward").normals
    truth = pose([1, 1, 1], 0.15, [0.02 * extent, -0.03 * extent, 0.01 * extent]).float()
    sources = pointops.transform_points(
        pointops.voxel_downsample(vertices, [extent / 45] * 3).points, torch.linalg.inv(truth).view(1, 1, 4, 4)
    )[:, 0]
    lengths = pointops.voxel_downsample(vertices, [extent / 45] * 3).lengths
    out = pointops.icp(
        sources,
        target_points,
        0.1 * extent,
        query_lengths=lengths,
        init_poses=torch.eye(4).view(1, 1, 4, 4),
        target_normals=normals,
        iterations=40,
    )
    error = out.poses[0, 0] @ torch.linalg.inv(truth)
    assert (error[:3, :3] - torch.eye(3)).abs().max() < 0.02
    assert error[:3, 3].abs().max() < 0.02 * extent and out.inlier_fraction[0, 0] > 0.95


@pytest.mark.cuda
@pytest.mark.parametrize("plane", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_icp_of_many_hypotheses_matches_cpu_bitwise(plane, dtype):
    """Many hypotheses (the fused launch plan), NaN sources, ragged lengths, both pose dtypes."""
    targets = wavy(1500, seed=10).unsqueeze(0).repeat(3, 1, 1)
    normals = sphere_normals(targets[:1], k=8).repeat(3, 1, 1).to(dtype)
    g = torch.Generator().manual_seed(11)
    poses = (
        torch.stack(
            [
                pose(torch.randn(3, generator=g).tolist(), 0.05 * h, (0.05 * torch.randn(3, generator=g)).tolist())
                for h in range(70)
            ]
        )
        .unsqueeze(0)
        .repeat(3, 1, 1, 1)
    )
    sources = (targets + 0.01 * torch.randn(targets.shape, generator=g, dtype=torch.float64)).to(dtype)
    sources[1, ::37] = NAN
    lengths = torch.tensor([1500, 1000, 3])
    targets = targets.to(dtype)
    for pose_dtype in (torch.float32, torch.float64):
        cpu = icp_op(sources, targets, normals if plane else None, poses.to(pose_dtype), 0.8, plane, 4, 1e-4, lengths)
        cuda = icp_op(
            sources,
            targets,
            normals if plane else None,
            poses.to(pose_dtype),
            0.8,
            plane,
            4,
            1e-4,
            lengths,
            device="cuda",
        )
        for a, b in zip(cpu, cuda):
            assert torch.equal(a, b)
    moved_cpu = torch.ops.pointops.transform_points(sources, lengths, poses)
    moved_cuda = torch.ops.pointops.transform_points(sources.cuda(), lengths.cuda(), poses.cuda())
    # NaN sources move to NaN on both devices (torch.equal would call NaN != NaN a mismatch)
    torch.testing.assert_close(moved_cuda.cpu(), moved_cpu, rtol=0, atol=0, equal_nan=True)


@pytest.mark.cuda
@pytest.mark.skipif(not has_knn(), reason="needs the knn op")
def test_cuda_icp_matches_cpu_bitwise():
    targets = wavy(2000, seed=12, dtype=torch.float32).unsqueeze(0).repeat(2, 1, 1)
    normals = sphere_normals(targets.double()).float()
    truth = pose([0, 1, 2], 0.25, [0.1, 0.1, 0.0])
    sources = reference.transform_points(targets, torch.linalg.inv(truth).expand(2, 1, 4, 4))[:, 0]
    init = torch.stack([pose([1, 0, 0], 0.1 * h, [0.05 * h, 0, 0]) for h in range(5)]).unsqueeze(0).repeat(2, 1, 1, 1)
    for method in ("point_to_point", "point_to_plane"):
        cpu = pointops.icp(sources, targets, 0.3, init_poses=init, target_normals=normals, method=method)
        cuda = pointops.icp(
            sources.cuda(), targets.cuda(), 0.3, init_poses=init.cuda(), target_normals=normals.cuda(), method=method
        )
        for a, b in zip(cpu, cuda):
            assert torch.equal(a, b.cpu())


@pytest.mark.skipif(not has_knn(), reason="needs the knn op")
def test_wrapper_edge_cases(device):
    t = torch.rand(2, 30, 3, device=device)
    s = torch.rand(2, 20, 3, device=device)
    out = pointops.icp(s, t, 1.0, init_poses=torch.eye(4, device=device).repeat(2, 0, 1, 1), method="point_to_point")
    assert out.poses.shape == (2, 0, 4, 4) and out.rmse.shape == (2, 0)
    for sources, targets in ((s[:, :0], t), (s, t[:, :0])):  # empty sources / targets: nothing moves
        out = pointops.icp(sources, targets, 1.0, method="point_to_point")
        assert torch.equal(out.poses.cpu(), torch.eye(4).repeat(2, 1, 1, 1)) and (out.inlier_fraction == 0).all()
    assert pointops.icp(s[:0], t[:0], 1.0, method="point_to_point").poses.shape == (0, 1, 4, 4)
    # iterations = 0 measures the initial poses only
    out = pointops.icp(s, t, INF, method="point_to_point", iterations=0)
    assert torch.equal(out.poses.cpu(), torch.eye(4).repeat(2, 1, 1, 1)) and (out.inlier_fraction == 1).all()


def test_half_inputs_compute_as_their_float32_values(device):
    from tests.samples_geometry import _icp_problem

    sources, targets, normals, poses, _ = _icp_problem(device)
    for dtype in (torch.float16, torch.bfloat16):
        low = [x.to(dtype) for x in (sources, targets, normals)]
        a = torch.ops.pointops.icp(
            low[0].float(), None, None, low[1].float(), low[2].float(), None, poses, 3, 0.5, 0.0, True
        )
        b = torch.ops.pointops.icp(low[0], None, None, low[1], low[2], None, poses, 3, 0.5, 0.0, True)
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and b[1].dtype == torch.float32
        moved = torch.ops.pointops.transform_points(low[0], None, poses)
        assert torch.equal(moved, torch.ops.pointops.transform_points(low[0].float(), None, poses))


# ---- the icp op's options: what registering a model to a partial view needs ---------------------


def partial_view(dtype=torch.float64, seed=20):
    """A bumpy closed model (outward normals) placed 3 units in front of a sensor at the origin,
    the side the sensor sees as targets with their normals, a wall behind it; and the truth."""
    model = wavy(600, seed=seed)
    normals = sphere_normals(model[None])[0]
    truth = pose([1, -2, 0.5], 0.6, [0.2, -0.1, 3.0])
    placed = model @ truth[:3, :3].T + truth[:3, 3]
    placed_n = normals @ truth[:3, :3].T
    seen = (placed * placed_n).sum(1) < 0
    g = torch.Generator().manual_seed(seed)
    wall = torch.cat(
        [torch.rand(300, 2, generator=g, dtype=torch.float64) * 4 - 2, torch.full((300, 1), 4.6, dtype=torch.float64)],
        1,
    )
    targets = torch.cat([placed[seen], wall])
    target_normals = torch.cat([placed_n[seen], torch.tensor([[0.0, 0.0, -1.0]], dtype=torch.float64).expand(300, 3)])
    return (
        model[None].to(dtype),
        normals[None].to(dtype),
        targets[None].to(dtype),
        target_normals[None].to(dtype),
        truth,
    )


def nudged(truth, hypotheses=3):
    out = [truth @ pose([0, 1, 1], 0.08 * (h + 1), [0.03 * h, -0.02, 0.04]) for h in range(hypotheses)]
    return torch.stack(out)[None]


PPF_OPTIONS = dict(
    max_normal_angle=math.pi / 3, viewpoint=[0.0, 0.0, 0.0], max_step_angle=0.5, max_step_translation=0.6
)


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("method", ["point_to_plane", "point_to_point"])
def test_icp_options_match_the_numpy_reference(device, centered, method):
    sources, source_normals, targets, target_normals, truth = partial_view()
    init = nudged(truth)
    init[0, 2, :3, 3] += torch.tensor([0.0, 0.0, -1.5], dtype=torch.float64)  # in front of the view: too far
    to = lambda t: t.to(device)  # noqa: E731  (a one-line mover)
    out = pointops.icp(
        to(sources),
        to(targets),
        0.2,
        init_poses=to(init),
        target_normals=to(target_normals),
        method=method,
        iterations=15,
        source_normals=to(source_normals),
        centered=centered,
        **PPF_OPTIONS,
    )
    expected, rmse, fraction, stopped = reference.icp(
        sources,
        targets,
        init,
        0.2,
        15,
        target_normals,
        source_normals,
        centered=centered,
        point_to_plane=method == "point_to_plane",
        **PPF_OPTIONS,
    )
    np.testing.assert_allclose(out.poses.cpu().numpy(), expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(out.rmse.cpu().numpy(), rmse, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out.inlier_fraction.cpu().numpy(), fraction, rtol=1e-12, atol=0)
    assert out.converged.cpu().tolist() == stopped.tolist()
    for h in (0, 1):  # the nudged hypotheses come home, the far one stops where it was
        assert torch.allclose(out.poses[0, h].cpu(), truth, atol=1e-6), (h, out.poses[0, h].cpu() - truth)
    assert torch.equal(out.poses[0, 2].cpu(), init[0, 2]) and bool(out.converged[0, 2])


def two_sheets(dtype=torch.float64):
    """A thin plate seen from the origin: its front sheet faces the sensor, its back sheet (0.02
    behind, normals away) does not. The targets are the front sheet as seen."""
    g = torch.Generator().manual_seed(21)
    xy = torch.rand(200, 2, generator=g, dtype=torch.float64) - 0.5
    front = torch.cat([xy, torch.full((200, 1), 2.0, dtype=torch.float64)], 1)
    back = front + torch.tensor([0.0, 0.0, 0.02], dtype=torch.float64)
    toward = torch.tensor([[0.0, 0.0, -1.0]], dtype=torch.float64).expand(200, 3)
    sources = torch.cat([front, back])[None].to(dtype)
    source_normals = torch.cat([toward, -toward])[None].to(dtype)
    return sources, source_normals, front[None].to(dtype), toward[None].contiguous().to(dtype)


def test_icp_facing_and_normal_tests_leave_out_the_far_side(device):
    sources, source_normals, targets, target_normals = two_sheets()
    eye = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    args = [t.to(device) for t in (sources, targets)]

    def fraction(**options):
        out = pointops.icp(
            *args,
            0.05,
            init_poses=eye.to(device),
            target_normals=target_normals.to(device),
            iterations=0,
            source_normals=source_normals.to(device),
            **options,
        )
        return float(out.inlier_fraction[0, 0])

    assert fraction() == 1.0  # the back sheet pairs with the front one, 0.02 away
    assert fraction(viewpoint=[0.0, 0.0, 0.0]) == 0.5
    assert fraction(viewpoint=[0.0, 0.0, 10.0]) == 0.5  # seen from behind, only the back sheet takes part...
    assert fraction(max_normal_angle=math.pi / 3) == 0.5  # ...and the normal test keeps the front one
    assert fraction(viewpoint=[0.0, 0.0, 10.0], max_normal_angle=math.pi / 3) == 0.0
    assert fraction(max_normal_angle=math.pi) == 1.0  # every nonzero pair of normals agrees
    zero = source_normals.clone()
    zero[0, :200] = 0.0  # a zero normal never agrees and never faces anything
    out = pointops.icp(
        *args,
        0.05,
        init_poses=eye.to(device),
        target_normals=target_normals.to(device),
        iterations=0,
        source_normals=zero.to(device),
        max_normal_angle=math.pi,
    )
    assert float(out.inlier_fraction[0, 0]) == 0.5


def test_icp_step_bounds_stop_a_hypothesis_where_it_is(device):
    sources, source_normals, targets, target_normals, truth = partial_view()
    init = nudged(truth, 1).to(device)
    common = dict(
        init_poses=init,
        target_normals=target_normals.to(device),
        iterations=10,
        source_normals=source_normals.to(device),
        viewpoint=[0.0, 0.0, 0.0],
        centered=True,
    )
    free = pointops.icp(sources.to(device), targets.to(device), 0.2, **common)
    assert not torch.equal(free.poses, init) and not bool(free.converged[0, 0])
    for bound in (dict(max_step_angle=1e-4), dict(max_step_translation=1e-4)):
        out = pointops.icp(sources.to(device), targets.to(device), 0.2, **common, **bound)
        assert torch.equal(out.poses, init) and bool(out.converged[0, 0]), bound
    # a generous bound changes nothing
    out = pointops.icp(
        sources.to(device), targets.to(device), 0.2, **common, max_step_angle=3.0, max_step_translation=10.0
    )
    assert torch.equal(out.poses, free.poses)


def test_icp_leaves_non_finite_poses_as_given(device):
    sources, source_normals, targets, target_normals, truth = partial_view(torch.float32)
    init = nudged(truth, 3).float().to(device)
    init[0, 1, 0, 2] = NAN
    init[0, 2, 3] = torch.tensor([INF, 1.0, 2.0, 3.0])  # the last row is not read: this one moves
    out = pointops.icp(
        sources.to(device),
        targets.to(device),
        0.2,
        init_poses=init,
        target_normals=target_normals.to(device),
        iterations=3,
    )
    torch.testing.assert_close(out.poses[0, 1], init[0, 1], rtol=0, atol=0, equal_nan=True)
    assert out.rmse[0, 1] == 0 and out.inlier_fraction[0, 1] == 0 and not bool(out.converged[0, 1])
    assert torch.isfinite(out.poses[0, 2]).all() and out.poses[0, 2, 3].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_icp_centered_steps_turn_about_the_inliers():
    """Far from the origin, a turn linearised about the origin drags the model sideways; about
    the inliers' centroid it turns in place: centered gets closer in the same few steps."""
    sources, source_normals, targets, target_normals, truth = partial_view()
    init = (truth @ pose([0, 0, 1], 0.25, [0, 0, 0]))[None, None]

    def error(centered):
        out = pointops.icp(
            sources, targets, 0.3, init_poses=init, target_normals=target_normals, iterations=3, centered=centered
        )
        return float((out.poses[0, 0, :3, 3] - truth[:3, 3]).norm())

    assert error(True) < error(False)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"source_normals": None, "max_normal_angle": 1.0}, "source_normals are required for max_normal_angle"),
        ({"source_normals": None, "viewpoint": [0.0, 0.0, 0.0]}, "source_normals are required for viewpoint"),
        (
            {"target_normals": None, "plane": False, "max_normal_angle": 1.0},
            "target_normals are required for max_normal_angle",
        ),
        ({"source_normals": torch.rand(1, 4, 3)}, r"source_normals must have shape \[1, 5, 3\]"),
        ({"viewpoint": [0.0, 1.0]}, r"viewpoint must have 3 values \[x, y, z\], got 2"),
        ({"viewpoint": [0.0, NAN, 1.0]}, "viewpoint must be finite"),
        ({"max_normal_angle": -0.1}, "max_normal_angle must be >= 0"),
        ({"max_step_angle": -1.0}, "max_step_angle must be >= 0"),
        ({"max_step_translation": NAN}, "max_step_translation must be >= 0"),
        ({"iterations": -1}, "iterations must be >= 0, got -1"),
        ({"lengths": torch.tensor([3, 3])}, r"lengths must have shape \[1\]"),
    ],
)
def test_bad_icp_arguments_raise_clear_errors(change, message):
    args = {
        "sources": torch.rand(1, 5, 3),
        "source_normals": torch.rand(1, 5, 3),
        "targets": torch.rand(1, 6, 3),
        "target_normals": torch.rand(1, 6, 3),
        "lengths": None,
        "iterations": 2,
        "plane": True,
        "max_normal_angle": None,
        "viewpoint": None,
        "max_step_angle": None,
        "max_step_translation": None,
    }
    args.update(change)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pointops.icp(
            args["sources"],
            args["source_normals"],
            None,
            args["targets"],
            args["target_normals"],
            args["lengths"],
            torch.eye(4).view(1, 1, 4, 4),
            args["iterations"],
            1.0,
            0.0,
            args["plane"],
            args["max_normal_angle"],
            args["viewpoint"],
            False,
            args["max_step_angle"],
            args["max_step_translation"],
        )


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_icp_options_match_cpu_bitwise(dtype):
    sources, source_normals, targets, target_normals, truth = partial_view(dtype)
    batch = 3
    g = torch.Generator().manual_seed(22)
    init = torch.stack(
        [
            torch.stack(
                [
                    truth
                    @ pose(torch.randn(3, generator=g).tolist(), 0.1 * h, (0.05 * torch.randn(3, generator=g)).tolist())
                    for h in range(9)
                ]
            )
            for _ in range(batch)
        ]
    )
    init[1, 4, 1, 1] = NAN
    args = dict(
        query_lengths=torch.tensor([600, 300, 0]),
        lengths=torch.tensor([targets.shape[1], 200, 50]),
        init_poses=init.to(dtype),
        target_normals=target_normals.expand(batch, -1, -1).contiguous(),
        iterations=12,
        source_normals=source_normals.expand(batch, -1, -1).contiguous(),
        **PPF_OPTIONS,
    )
    for centered in (False, True):
        for method in ("point_to_plane", "point_to_point"):
            cpu = pointops.icp(
                sources.expand(batch, -1, -1),
                targets.expand(batch, -1, -1),
                0.2,
                method=method,
                centered=centered,
                **args,
            )
            cuda = pointops.icp(
                sources.expand(batch, -1, -1).cuda(),
                targets.expand(batch, -1, -1).cuda(),
                0.2,
                method=method,
                centered=centered,
                **{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in args.items()},
            )
            for a, b in zip(cpu, cuda):
                torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, equal_nan=True)


@pytest.mark.cuda
@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("method", ["point_to_plane", "point_to_point"])
def test_cuda_icp_of_few_wide_hypotheses_matches_cpu_bitwise(centered, method):
    """A few hypotheses of many sources (the wide launch plan: a pass's searches over the whole
    GPU) with every option, ragged lengths, a non-finite pose and hypotheses that stop early."""
    model = wavy(6000, seed=23)
    normals = sphere_normals(model[None])[0]
    truth = pose([1, -2, 0.5], 0.6, [0.2, -0.1, 3.0])
    placed = model @ truth[:3, :3].T + truth[:3, 3]
    placed_n = normals @ truth[:3, :3].T
    seen = (placed * placed_n).sum(1) < 0
    sources = model.float()[None].repeat(2, 1, 1).contiguous()
    source_normals = normals.float()[None].repeat(2, 1, 1).contiguous()
    targets = placed[seen].float()[None].repeat(2, 1, 1).contiguous()
    target_normals = placed_n[seen].float()[None].repeat(2, 1, 1).contiguous()
    init = nudged(truth, 3).repeat(2, 1, 1, 1)
    init[1, 1, 2, 2] = INF
    init[0, 2, :3, 3] += torch.tensor([0.0, 0.0, -1.5], dtype=torch.float64)  # too far: stops at once
    args = dict(
        query_lengths=torch.tensor([6000, 4100]),
        lengths=torch.tensor([targets.shape[1], 900]),
        init_poses=init,
        target_normals=target_normals,
        iterations=10,
        source_normals=source_normals,
        tolerance=1e-6,
        method=method,
        centered=centered,
        **PPF_OPTIONS,
    )
    cpu = pointops.icp(sources, targets, 0.2, **args)
    cuda = pointops.icp(
        sources.cuda(),
        targets.cuda(),
        0.2,
        **{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in args.items()},
    )
    for a, b in zip(cpu, cuda):
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, equal_nan=True)
    assert bool(cpu.converged[0, 2]) and torch.equal(cpu.poses[0, 2], init[0, 2])
