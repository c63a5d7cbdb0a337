"""PCA normals: NumPy eigh reference, orientation, degenerate neighbourhoods, autograd, errors, CPU == CUDA."""

import math

import numpy as np
import pytest
import torch

import pointops
from pointops.reference import geometry as reference
from tests import op_samples  # noqa: F401  (loads samples_geometry through the merge first)
from tests.samples_geometry import cgal_mesh, has_knn

NAN = float("nan")


def normals_op(points, neighbors, lengths=None, viewpoints=None, orientation=1, device="cpu"):
    lengths = None if lengths is None else lengths.to(device)
    viewpoints = None if viewpoints is None else viewpoints.to(device)
    out = torch.ops.pointops.estimate_normals(points.to(device), lengths, neighbors.to(device), viewpoints, orientation)
    return tuple(o.cpu() for o in out)


def surface(batch, n, dtype=torch.float64, seed=0, noise=0.002):
    """Points on a wavy height field z = 0.3 sin(2x) cos(3y) over [-1, 1]^2 plus noise, lifted to z + 2."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(batch, n, 2, generator=g, dtype=torch.float64) * 2 - 1
    z = 0.3 * torch.sin(2 * xy[..., 0]) * torch.cos(3 * xy[..., 1]) + 2.0
    pts = torch.cat([xy, z.unsqueeze(-1)], -1) + noise * torch.randn(batch, n, 3, generator=g, dtype=torch.float64)
    return pts.to(dtype)


def compare_with_numpy(points, neighbors, lengths=None, viewpoints=None, orientation=1, device="cpu", atol=1e-9):
    normals, curvature = normals_op(points, neighbors, lengths, viewpoints, orientation, device)
    expected, expected_curvature, determined = reference.estimate_normals(
        points, neighbors, lengths, viewpoints, orientation
    )
    # Eigenvectors are only as well defined as the gap below the smallest eigenvalue allows: the
    # comparison skips neighbourhoods whose two smallest eigenvalues nearly tie (none here).
    assert np.array_equal((normals != 0).any(-1).numpy(), determined)
    np.testing.assert_allclose(normals.double().numpy(), expected, rtol=0, atol=atol)
    np.testing.assert_allclose(curvature.double().numpy(), expected_curvature, rtol=0, atol=atol)
    return normals, curvature


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-9), (torch.float32, 3e-7)])
def test_matches_numpy_eigh(device, dtype, atol):
    points = surface(3, 400, dtype)
    lengths = torch.tensor([400, 150, 0])
    neighbors = reference.nearest_neighbors(points, points, 12, lengths, lengths)
    normals, curvature = compare_with_numpy(points, neighbors, lengths, device=device, atol=atol)
    assert normals.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    valid = torch.arange(400) < lengths.unsqueeze(1)
    torch.testing.assert_close(normals[valid].norm(dim=-1), torch.ones(int(valid.sum()), dtype=normals.dtype))
    assert (normals[~valid] == 0).all() and (curvature[~valid] == 0).all()
    # the height field faces up; the default viewpoint (origin) is below it, so normals point down
    assert (normals[valid][:, 2] < -0.5).all()
    assert (curvature[valid] >= 0).all() and (curvature[valid] <= 1 / 3).all()


def test_orientations(device):
    g = torch.Generator().manual_seed(1)
    sphere = torch.nn.functional.normalize(torch.randn(2, 500, 3, generator=g, dtype=torch.float64), dim=-1)
    sphere[1] += torch.tensor([5.0, 0.0, 0.0], dtype=torch.float64)
    neighbors = reference.nearest_neighbors(sphere, sphere, 10)
    centres = torch.tensor([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0]], dtype=torch.float64)
    radial = torch.nn.functional.normalize(sphere - centres.unsqueeze(1), dim=-1)
    toward, _ = compare_with_numpy(sphere, neighbors, viewpoints=centres, orientation=1, device=device)
    away, _ = compare_with_numpy(sphere, neighbors, viewpoints=centres, orientation=2, device=device)
    assert ((toward * radial).sum(-1) < -0.9).all() and ((away * radial).sum(-1) > 0.9).all()
    none, _ = compare_with_numpy(sphere, neighbors, orientation=0, device=device)
    big = none.abs().argmax(-1, keepdim=True)
    assert (torch.gather(none, -1, big) > 0).all()
    # the wrapper's "outward" turns away from each cloud's bounding-box centre
    if has_knn():
        out = pointops.estimate_normals(sphere.to(device), 10, orientation="outward").normals.cpu()
        assert ((out * radial).sum(-1) > 0.9).all()


def test_viewpoint_on_the_surface_falls_back_to_the_sign_rule(device):
    pts = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]], dtype=torch.float64)
    neighbors = torch.arange(4).expand(1, 4, 4)
    normals, _ = normals_op(pts, neighbors, viewpoints=torch.tensor([[0.5, 0.5, 0.0]]), device=device)
    # every view ray lies in the plane: dot = 0, so +z (largest component positive)
    assert normals[0].tolist() == [[0.0, 0.0, 1.0]] * 4


def test_degenerate_neighbourhoods_are_zero_not_nan(device):
    line = torch.stack([torch.linspace(0, 1, 8, dtype=torch.float64)] * 3, -1).unsqueeze(0)  # collinear
    same = torch.full((1, 8, 3), 0.7, dtype=torch.float64)  # duplicates
    plane = torch.cat(
        [
            torch.rand(1, 8, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64),
            torch.full((1, 8, 1), 3.0, dtype=torch.float64),
        ],
        -1,
    )  # exactly flat
    all8 = torch.arange(8).expand(1, 8, 8)
    for pts in (line, same):
        normals, curvature = normals_op(pts, all8, device=device)
        assert (normals == 0).all() and (curvature == 0).all()
    normals, curvature = normals_op(plane, all8, device=device)
    assert normals[0, :, :2].abs().max() < 1e-15 and (normals[0, :, 2] == -1).all() and (curvature == 0).all()
    # two neighbours (k < 3) and only -1 padding: undetermined
    normals, curvature = normals_op(plane, all8[..., :2], device=device)
    assert (normals == 0).all() and (curvature == 0).all()
    normals, _ = normals_op(plane, torch.full((1, 8, 5), -1), device=device)
    assert (normals == 0).all()


def test_nan_points_and_padding_are_skipped(device):
    points = surface(1, 60, seed=3)
    neighbors = reference.nearest_neighbors(points, points, 8)
    clean = normals_op(points, neighbors, device=device)
    dirty = points.clone()
    dirty[0, 7] = NAN
    # point 7 is listed by its neighbours, which now skip it; its own row is zero
    normals, curvature = normals_op(dirty, neighbors, device=device)
    assert (normals[0, 7] == 0).all() and curvature[0, 7] == 0 and torch.isfinite(normals).all()
    listing = (neighbors[0] == 7).any(-1)
    unaffected = ~listing
    listing[7] = False
    assert torch.equal(normals[0, unaffected], clean[0][0, unaffected])
    pruned = torch.where(neighbors == 7, torch.full_like(neighbors, -1), neighbors)
    np.testing.assert_array_equal(
        normals[0, listing].numpy(), normals_op(points, pruned, device=device)[0][0, listing].numpy()
    )
    # indices past lengths and out of range are skipped like -1
    lengths = torch.tensor([40])
    a = normals_op(points, neighbors, lengths, device=device)
    b = normals_op(
        points, torch.where(neighbors >= 40, torch.full_like(neighbors, -1), neighbors), lengths, device=device
    )
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    big = torch.where(neighbors == 3, torch.full_like(neighbors, 10**9), neighbors)
    c = normals_op(points, big, device=device)
    d = normals_op(points, torch.where(neighbors == 3, torch.full_like(neighbors, -1), neighbors), device=device)
    assert torch.equal(c[0], d[0])


def test_half_precision_and_empty(device):
    points = surface(2, 100, torch.float16, seed=4)
    neighbors = reference.nearest_neighbors(points.float(), points.float(), 10)
    compare_with_numpy(points, neighbors, device=device, atol=3e-7)
    for shape in [(0, 4, 3), (2, 0, 3)]:
        normals, curvature = normals_op(
            torch.rand(shape), torch.zeros(shape[:2] + (3,), dtype=torch.int64), device=device
        )
        assert normals.shape == shape and curvature.shape == shape[:2]
    normals, _ = normals_op(torch.rand(2, 4, 3), torch.zeros(2, 4, 0, dtype=torch.int64), device=device)
    assert (normals == 0).all()


def test_gradients_match_finite_differences():
    points = surface(1, 30, seed=5).requires_grad_()
    neighbors = reference.nearest_neighbors(points.detach(), points.detach(), 8)

    def fn(p):
        return torch.ops.pointops.estimate_normals(p, None, neighbors, None, 1)

    torch.autograd.gradcheck(fn, (points,), atol=1e-6, rtol=1e-4)
    padded = torch.cat([points.detach(), torch.zeros(1, 5, 3, dtype=torch.float64)], 1).requires_grad_()
    padded_neighbors = torch.cat([neighbors, torch.full((1, 5, 8), -1)], 1)
    out = torch.ops.pointops.estimate_normals(padded, torch.tensor([30]), padded_neighbors, None, 1)
    out[0].sum().backward()
    assert (padded.grad[0, 30:] == 0).all() and torch.isfinite(padded.grad).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"neighbors": torch.zeros(2, 5, 3, dtype=torch.int32)}, "neighbors must be Long"),
        (
            {"neighbors": torch.zeros(2, 4, 3, dtype=torch.int64)},
            r"neighbors must have shape \(B, N, K\) with B, N = 2, 5",
        ),
        (
            {"neighbors": torch.zeros(2, 5, dtype=torch.int64)},
            r"neighbors must have shape \(B, N, K\) \(3 dimensions\)",
        ),
        (
            {"orientation": 3},
            "orientation must be 0 \\(none\\), 1 \\(toward the viewpoint\\) or 2 \\(away from it\\), got 3",
        ),
        ({"viewpoints": torch.zeros(2, 2)}, r"viewpoints must have shape \[2, 3\]"),
        ({"viewpoints": torch.zeros(2, 3, dtype=torch.int64)}, "viewpoints must be float32"),
        ({"points": torch.rand(2, 5, 2)}, r"points must have shape \(B, N, 3\)"),
        ({"lengths": torch.tensor([1.0, 2.0])}, "lengths must be Long"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    args = {
        "points": torch.rand(2, 5, 3),
        "lengths": None,
        "neighbors": torch.zeros(2, 5, 3, dtype=torch.int64),
        "viewpoints": None,
        "orientation": 1,
    }
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pointops.estimate_normals(
            args["points"], args["lengths"], args["neighbors"], args["viewpoints"], args["orientation"]
        )


def test_wrapper_checks_its_options():
    with pytest.raises(ValueError, match="orientation must be 'viewpoint', 'outward' or 'none', got 'up'"):
        pointops.estimate_normals(torch.rand(1, 5, 3), 3, orientation="up")


@pytest.mark.skipif(not has_knn(), reason="needs the knn op")
def test_wrapper_uses_knn(device):
    points = surface(2, 200, torch.float32, seed=6).to(device)
    lengths = torch.tensor([200, 120], device=device)
    out = pointops.estimate_normals(points, 10, lengths, viewpoint=torch.tensor([0.0, 0.0, 10.0], device=device))
    neighbors = reference.nearest_neighbors(points.cpu(), points.cpu(), 10, lengths.cpu(), lengths.cpu())
    expected = normals_op(points.cpu(), neighbors, lengths.cpu(), torch.tensor([[0.0, 0.0, 10.0]] * 2), 1)
    assert torch.equal(out.normals.cpu(), expected[0]) and torch.equal(out.curvature.cpu(), expected[1])
    assert (out.normals[0, :, 2] > 0.5).all()


def test_real_scan_against_mesh_normals():
    """CGAL's elephant mesh: PCA normals of its vertices (k = 12, outward) against the mesh's
    vertex normals (skips without libcgal-dev's data)."""
    trimesh = pytest.importorskip("trimesh")
    mesh = cgal_mesh("elephant")
    vertices = torch.tensor(np.asarray(mesh.vertices), dtype=torch.float64).unsqueeze(0)
    spatial = pytest.importorskip("scipy.spatial")
    neighbors = torch.from_numpy(spatial.cKDTree(vertices[0].numpy()).query(vertices[0].numpy(), 12)[1]).unsqueeze(0)
    centre = (vertices[0].amin(0) + vertices[0].amax(0)) / 2
    normals, curvature = normals_op(vertices, neighbors, viewpoints=centre.unsqueeze(0), orientation=2)
    truth = torch.tensor(np.asarray(mesh.vertex_normals))
    cos = (normals[0] * truth).sum(-1)
    assert isinstance(mesh, trimesh.Trimesh)
    # measured: 89 % of the lines within 25 degrees on this coarse mesh (2,775 vertices); 75 % face
    # outward by the bounding-box rule, which the legs and trunk defeat
    assert (cos.abs() > math.cos(math.radians(25))).double().mean() > 0.85
    assert (cos > 0).double().mean() > 0.7
    assert torch.isfinite(curvature).all()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cuda_matches_cpu_bitwise(dtype):
    points = surface(3, 3000, seed=7).to(dtype)
    points[0, ::50] = points[0, 1::50]  # duplicates
    points[1, 5] = NAN
    g = torch.Generator().manual_seed(8)
    neighbors = torch.randint(-1, 3000, (3, 3000, 16), generator=g)
    neighbors[:, :, :8] = reference.nearest_neighbors(points.float(), points.float(), 8)
    lengths = torch.tensor([3000, 2500, 17])
    viewpoints = torch.randn(3, 3, generator=g)
    for orientation in (0, 1, 2):
        cpu = normals_op(points, neighbors, lengths, viewpoints, orientation)
        cuda = normals_op(points, neighbors, lengths, viewpoints, orientation, device="cuda")
        assert torch.equal(cpu[0], cuda[0]) and torch.equal(cpu[1], cuda[1])


@pytest.mark.cuda
def test_cuda_gradients_match_cpu():
    points = surface(1, 40, seed=9)
    neighbors = reference.nearest_neighbors(points, points, 8)
    grads = []
    for device in ("cpu", "cuda"):
        p = points.detach().clone().to(device).requires_grad_()
        n, c = torch.ops.pointops.estimate_normals(p, None, neighbors.to(device), None, 1)
        (n.sum() + c.sum()).backward()
        grads.append(p.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not has_knn(), reason="needs the knn op")
def test_wrapper_k_larger_than_the_cloud(device):
    # 5 points on the plane z = 1 with k = 16: knn pads with -1 and every point uses all 5
    g = torch.Generator().manual_seed(10)
    plane = torch.cat([torch.rand(2, 5, 2, generator=g), torch.ones(2, 5, 1)], -1).to(device)
    out = pointops.estimate_normals(plane, 16, torch.tensor([5, 2], device=device))
    assert torch.allclose(out.normals[0].cpu(), torch.tensor([0.0, 0.0, -1.0]).expand(5, 3), atol=1e-6)
    assert (out.normals[1] == 0).all() and (out.curvature[1] == 0).all()  # 2 points: a line at most
    assert torch.equal(out.normals[0].cpu(), pointops.estimate_normals(plane[:1, :5], 5).normals[0].cpu())
