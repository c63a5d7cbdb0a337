"""Voxel downsampling: exact reference equality, Open3D's cells, edges, autograd, errors, CPU == CUDA."""

import importlib.util

import pytest
import torch

import pointops
from pointops.reference import geometry as reference
from tests.conftest import HAS_CUDA, assert_same

NAN = float("nan")
INF = float("inf")


def open3d_or_skip():
    """Open3D, or a skip when it is absent or cannot load (its wheel needs libusb-1.0)."""
    if importlib.util.find_spec("open3d") is None:
        pytest.skip("open3d is not installed")
    try:
        import open3d
    except ImportError as error:
        pytest.skip(f"open3d does not load: {error}")
    return open3d


def downsample(points, size, lengths=None, features=None, point_range=None, device="cpu"):
    lengths = None if lengths is None else lengths.to(device)
    features = None if features is None else features.to(device)
    return torch.ops.pointops.voxel_downsample(points.to(device), lengths, features, size, point_range)


def check(points, size, lengths=None, features=None, point_range=None, device="cpu"):
    actual = downsample(points, size, lengths, features, point_range, device)
    assert_same(actual, reference.voxel_downsample(points, size, lengths, features, point_range))
    return tuple(a.cpu() for a in actual)


def clustered(batch, n, dtype=torch.float32, seed=0, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(-4, 5, (batch, n, 3), generator=g).to(torch.float64) * 0.3
    return (base + torch.rand(batch, n, 3, generator=g, dtype=torch.float64) * spread * 0.1).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_range", [False, True])
def test_matches_reference_on_ragged_clouds(device, dtype, with_range):
    points = clustered(4, 300, dtype)
    features = torch.randn(4, 300, 5, generator=torch.Generator().manual_seed(1), dtype=dtype)
    lengths = torch.tensor([300, 120, 0, 299])
    point_range = [-0.8, -1.0, -0.9, 0.9, 1.2, 1.0] if with_range else None
    centroids, mean_features, new_lengths, point_voxel = check(
        points, [0.25, 0.2, 0.3], lengths, features, point_range, device
    )
    assert new_lengths[2] == 0 and (point_voxel[1, 120:] == -1).all() and (point_voxel[2] == -1).all()
    assert (new_lengths > 10).sum() == 3
    for b in range(4):
        v = int(new_lengths[b])
        assert (centroids[b, v:] == 0).all() and (mean_features[b, v:] == 0).all()
        used = point_voxel[b][point_voxel[b] >= 0]
        assert torch.equal(torch.unique(used), torch.arange(v))


def test_centroids_are_voxel_means_in_key_order(device):
    # Voxels (z, y, x) listed lexicographically: (0,0,1) < (0,1,0) < (1,0,0), whatever the point order.
    pts = torch.tensor([[[0.1, 0.1, 1.2], [1.4, 0.2, 0.3], [0.3, 1.1, 0.1], [1.2, 0.4, 0.1], [0.2, 0.2, 1.4]]])
    colours = torch.arange(15.0).view(1, 5, 3)
    centroids, features, lengths, point_voxel = check(pts, [1.0, 1.0, 1.0], features=colours, device=device)
    assert lengths.tolist() == [3]
    assert point_voxel.tolist() == [[2, 0, 1, 0, 2]]
    expected = torch.tensor([[1.3, 0.3, 0.2], [0.3, 1.1, 0.1], [0.15, 0.15, 1.3]], dtype=torch.float64)
    torch.testing.assert_close(centroids[0, :3], expected.float())
    torch.testing.assert_close(features[0, :3], torch.tensor([[6.0, 7.0, 8.0], [6.0, 7.0, 8.0], [6.0, 7.0, 8.0]]))


def test_result_does_not_depend_on_point_order(device):
    points = clustered(1, 500, seed=3)
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(4))
    a = check(points, [0.15, 0.15, 0.15], device=device)
    b = check(points[:, perm], [0.15, 0.15, 0.15], device=device)
    # float32 coordinates of similar magnitude sum exactly in float64, so the means agree too.
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
    assert torch.equal(a[3][0, perm], b[3][0])


def test_grid_at_origin_is_shared_by_every_cloud(device):
    # Without point_range cells are floor(x / size): the same point lands in the same cell anywhere.
    a = torch.tensor([[[0.24, 0.0, 0.0], [0.26, 0.0, 0.0]]])
    shifted = torch.cat([a, torch.tensor([[[-5.0, -5.0, -5.0]]])], 1)
    assert check(a, [0.25] * 3, device=device)[2].tolist() == [2]
    assert check(shifted, [0.25] * 3, device=device)[2].tolist() == [3]
    # negative coordinates floor downward: -0.01 and 0.01 are in different cells
    assert check(torch.tensor([[[-0.01, 0.0, 0.0], [0.01, 0.0, 0.0]]]), [1.0] * 3, device=device)[2].tolist() == [2]


def test_point_range_is_half_open(device):
    pts = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.5, 0.5], [0.999, 0.5, 0.5], [-0.001, 0.5, 0.5], [0.5, 0.5, INF]]])
    _, _, lengths, point_voxel = check(pts, [0.5] * 3, point_range=[0.0, 0.0, 0.0, 1.0, 1.0, 1.0], device=device)
    assert point_voxel.tolist() == [[0, -1, 1, -1, -1]] and lengths.tolist() == [2]
    # an infinite upper bound keeps everything above the lower corner (finite points only)
    _, _, lengths, point_voxel = check(pts, [0.5] * 3, point_range=[0.0, 0.0, 0.0, INF, INF, INF], device=device)
    assert point_voxel[0, [1, 3, 4]].tolist() == [2, -1, -1]


def test_nan_inf_points_do_not_count(device):
    pts = torch.tensor([[[0.1, 0.1, 0.1], [NAN, 0.0, 0.0], [0.2, INF, 0.0], [0.3, 0.1, 0.2], [0.0, 0.0, -INF]]])
    centroids, _, lengths, point_voxel = check(pts, [1.0] * 3, device=device)
    assert lengths.tolist() == [1] and point_voxel.tolist() == [[0, -1, -1, 0, -1]]
    torch.testing.assert_close(centroids[0, 0], torch.tensor([0.2, 0.1, 0.15]))


def test_nan_features_propagate_to_their_voxel_only(device):
    pts = torch.tensor([[[0.1, 0.1, 0.1], [0.2, 0.2, 0.2], [3.0, 3.0, 3.0]]])
    feats = torch.tensor([[[1.0], [NAN], [2.0]]])
    _, features, _, _ = check(pts, [1.0] * 3, features=feats, device=device)
    assert torch.isnan(features[0, 0, 0]) and features[0, 1, 0] == 2.0


def test_duplicates_collapse_to_the_point(device):
    pts = torch.tensor([[0.3, -1.7, 2.9]]).repeat(1, 40, 1)
    centroids, _, lengths, point_voxel = check(pts, [0.05] * 3, device=device)
    assert lengths.tolist() == [1] and (point_voxel == 0).all()
    assert torch.equal(centroids[0, 0], pts[0, 0])


def test_voxel_size_huge_and_tiny(device):
    points = clustered(2, 200, seed=5)
    # huge: one voxel per sign pattern of the coordinates (cells -1 and 0 per axis)
    _, _, lengths, _ = check(points, [1e30] * 3, device=device)
    signs = (points < 0).to(torch.int64)
    expected = [len(torch.unique(signs[b], dim=0)) for b in range(2)]
    assert lengths.tolist() == expected
    # tiny: a 1 m cloud at 1 um spans 10^6 < 2^21 cells per axis, so every point is its own voxel
    unit = torch.rand(2, 200, 3, generator=torch.Generator().manual_seed(16), dtype=torch.float64)
    centroids, _, lengths, point_voxel = check(unit, [1e-6] * 3, device=device)
    assert lengths.tolist() == [200, 200] and (point_voxel >= 0).all()
    assert torch.equal(centroids[0].sort(0).values, unit[0].sort(0).values)
    # at 0.1 um it spans more than 2^21 cells per axis (the slow exact path): still every point
    centroids, _, lengths, point_voxel = check(unit, [1e-7] * 3, device=device)
    assert lengths.tolist() == [200, 200] and (point_voxel >= 0).all()
    assert torch.equal(centroids[0].sort(0).values, unit[0].sort(0).values)
    # a 1e-30 grid overflows the 2^62 cell bound: nothing counts
    assert check(points, [1e-30] * 3, device=device)[2].tolist() == [0, 0]


def lexicographic_cells(points, size):
    """The distinct cells (z, y, x) of float32 points (N, 3), sorted (cells in float32, as the op)."""
    cells = torch.floor(points / torch.tensor(size, dtype=torch.float32)).long()
    return sorted({(int(c[2]), int(c[1]), int(c[0])) for c in cells})


def test_span_beyond_the_key_counts_every_point(device):
    # 1 nm voxels over a unit cube: 10^9 cells per axis, far past the key's 2^21.
    points = torch.rand(1, 100, 3, generator=torch.Generator().manual_seed(20))
    centroids, _, lengths, point_voxel = check(points, [1e-9] * 3, device=device)
    assert lengths.tolist() == [100] and sorted(point_voxel[0].tolist()) == list(range(100))
    assert torch.equal(centroids[0, point_voxel[0]], points[0])
    # voxels in (z, y, x) order of their cells
    order = torch.argsort(point_voxel[0])
    zyx = [tuple(points[0, i].double().flip(0).tolist()) for i in order.tolist()]
    assert zyx == sorted(zyx)
    out = pointops.voxel_downsample(points.to(device), [1e-9] * 3)
    assert int(out.lengths[0]) == 100


def test_far_outliers_beside_a_normal_cloud(device):
    # Cloud 0: a 2 m cloud at 1 cm with outliers 100 km away (10^7 cells: past the key's span);
    # cloud 1: the same cloud without them (the fast path). The near points' voxels, rows and means
    # must be the fast path's bit for bit; the outliers (highest z) add their own voxels last.
    g = torch.Generator().manual_seed(21)
    near = torch.rand(600, 3, generator=g) * 2
    near[::5] = near[1::5]  # voxels of several points
    features = torch.randn(2, 603, 4, generator=g)
    features[1, :600] = features[0, :600]
    outliers = torch.tensor([[1e5, 0.5, 1e5], [-1e5, 1.0, 1e5 + 1.0], [1e5, 0.5, 1e5]])
    points = torch.stack([torch.cat([near, outliers]), torch.cat([near, torch.zeros(3, 3)])])
    lengths = torch.tensor([603, 600])
    centroids, mean_features, new_lengths, point_voxel = check(points, [0.01] * 3, lengths, features, device=device)
    v = int(new_lengths[1])
    assert v == len(lexicographic_cells(near, [0.01] * 3)) and int(new_lengths[0]) == v + 2
    assert torch.equal(centroids[0, :v], centroids[1, :v]) and torch.equal(mean_features[0, :v], mean_features[1, :v])
    assert torch.equal(point_voxel[0, :600], point_voxel[1, :600])
    assert point_voxel[0, 600:].tolist() == [v, v + 1, v] and (point_voxel[1, 600:] == -1).all()
    torch.testing.assert_close(centroids[0, v], outliers[[0, 2]].double().mean(0).float(), rtol=0, atol=0)
    # the same cloud alone takes the same slow path and gives the same rows
    alone = check(points[:1], [0.01] * 3, None, features[:1], device=device)
    for a, b in zip(alone, (centroids[:1], mean_features[:1], new_lengths[:1], point_voxel[:1])):
        assert torch.equal(a, b)


def outlier_clouds(dtype):
    """Three ragged clouds of 2 m at 1 cm: one with far outliers at every scale on every axis and
    side, two of them in one binade of distance (the packed key); one spread over 10^9 cells per
    axis (too thin for the packed key: the sorted path); one plain (the direct key)."""
    g = torch.Generator().manual_seed(31)
    points = torch.rand(3, 300, 3, generator=g, dtype=torch.float64) * 2
    points[:, ::7] = points[:, 1::7]  # voxels of several points
    far = torch.tensor(
        [[1e3, 0.5, 0.5], [0.5, -2e5, 0.5], [0.3, 0.2, 3e7], [-1e9, 1e9, 0.5], [2e5, 2e5, 2e5], [-4e3, -5e3, -6e3]],
        dtype=torch.float64,
    )
    points[0, 100 : 100 + len(far)] = far
    points[0, 200] = far[4]  # a voxel of two outliers
    points[1] *= 5e6
    return points.to(dtype), torch.randn(3, 300, 2, generator=g).to(dtype), torch.tensor([300, 290, 250])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_far_outliers_at_every_scale_match_reference(device, dtype):
    points, features, lengths = outlier_clouds(dtype)
    centroids, _, new_lengths, point_voxel = check(points, [0.01] * 3, lengths, features, device=device)
    cells = torch.floor(points[0] / torch.tensor([0.01] * 3, dtype=points.dtype)).long()
    assert int(new_lengths[0]) == len({tuple(c) for c in cells.tolist()})
    assert int(new_lengths[1]) > 200 and (point_voxel[0, :300] >= 0).all()
    assert point_voxel[0, 100 + 4] == point_voxel[0, 200]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_cuda_far_outliers_match_cpu_bitwise(dtype):
    points, features, lengths = outlier_clouds(dtype)
    for size in ([0.01] * 3, [0.01, 0.02, 0.5]):
        assert_same(
            downsample(points, size, lengths, features, device="cuda"), downsample(points, size, lengths, features)
        )
        # the same clouds one at a time (a batch of one has no second hash level)
        for b in range(3):
            assert_same(
                downsample(points[b : b + 1], size, lengths[b : b + 1], None, device="cuda"),
                downsample(points[b : b + 1], size, lengths[b : b + 1]),
            )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("with_range", [False, True])
def test_mixed_wide_and_narrow_clouds_match_reference(device, dtype, with_range):
    # Ragged clouds, some spanning past the key (a far point, a tiny voxel on x only), with
    # duplicates, NaN rows and points outside the range; the wide ones sum voxels of several points.
    g = torch.Generator().manual_seed(22)
    points = clustered(5, 400, torch.float64, seed=23)
    points[:, ::9] = points[:, 1::9]
    points[0, 7] = torch.tensor([3e4, -2.0, 0.5], dtype=torch.float64)  # 10^7 cells away on x
    points[4, 100] = torch.tensor([0.1, 0.2, -1e6], dtype=torch.float64)  # 4e6 cells on z
    points[4, 50, 1] = NAN
    points[3, ::3, 0] *= 1e5  # x over 10^5 m
    points = points.to(dtype)
    features = torch.randn(5, 400, 3, generator=g, dtype=torch.float64).to(dtype)
    lengths = torch.tensor([400, 399, 0, 257, 130])
    point_range = [-5e4, -1.0, -2e6, 5e4, 1.2, 5e4] if with_range else None
    size = [0.003, 0.2, 0.25]
    centroids, _, new_lengths, point_voxel = check(points, size, lengths, features, point_range, device)
    assert new_lengths[2] == 0 and (point_voxel[2] == -1).all() and (point_voxel[1, 399:] == -1).all()
    assert (new_lengths[[0, 1, 3, 4]] > 5).all()
    for b in range(5):
        used = point_voxel[b][point_voxel[b] >= 0]
        assert torch.equal(torch.unique(used), torch.arange(int(new_lengths[b])))


def test_half_precision_computes_cells_in_float32(device):
    points = clustered(2, 150, torch.float16, seed=6)
    feats = torch.randn(2, 150, 2, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    centroids, features, _, _ = check(points, [0.2, 0.2, 0.2], features=feats, device=device)
    assert centroids.dtype == torch.float16 and features.dtype == torch.bfloat16


@pytest.mark.parametrize("shape", [(0, 5, 3), (2, 0, 3)])
def test_empty_inputs(device, shape):
    points = torch.rand(shape)
    centroids, features, lengths, point_voxel = check(points, [0.1] * 3, device=device)
    assert centroids.shape == shape and features.shape == shape[:2] + (0,)
    assert lengths.shape == (shape[0],) and point_voxel.shape == shape[:2]


def test_lengths_are_clamped_and_non_contiguous_input(device):
    base = clustered(2, 100, seed=8)
    points = base.transpose(0, 1).contiguous().transpose(0, 1)  # non-contiguous view
    assert not points.is_contiguous()
    check(points, [0.2] * 3, torch.tensor([150, -3]), device=device)
    check(base[:, ::2], [0.2] * 3, device=device)


def test_wrapper(device):
    points = clustered(2, 80, seed=9).to(device)
    out = pointops.voxel_downsample(points, [0.3, 0.3, 0.3], torch.tensor([80, 40], device=device), features=points * 2)
    assert isinstance(out, pointops.VoxelDownsample)
    torch.testing.assert_close(out.features, out.points * 2)


def test_gradients():
    points = clustered(2, 40, torch.float64, seed=10).requires_grad_()
    features = torch.randn(2, 40, 2, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([40, 25])

    def fn(p, f):
        out = torch.ops.pointops.voxel_downsample(p, lengths, f, [0.3, 0.3, 0.3], None)
        return out[0], out[1]

    torch.autograd.gradcheck(fn, (points, features))
    out = torch.ops.pointops.voxel_downsample(points, lengths, features, [0.3, 0.3, 0.3], None)
    assert not out[2].requires_grad and not out[3].requires_grad
    out[0].sum().backward()
    # each counted point receives 1 / count of its voxel per coordinate: the total is the voxel count
    assert torch.isclose(points.grad.sum(), 3.0 * out[2].sum().double())
    assert (points.grad[1, 25:] == 0).all()


def test_matches_open3d_cells():
    o3d = open3d_or_skip()
    import numpy as np

    g = torch.Generator().manual_seed(11)
    points = torch.rand(3000, 3, generator=g, dtype=torch.float64) * torch.tensor([4.0, 3.0, 1.0])
    normals = torch.nn.functional.normalize(torch.randn(3000, 3, generator=g, dtype=torch.float64), dim=1)
    size = 0.2
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points.numpy()))
    cloud.normals = o3d.utility.Vector3dVector(normals.numpy())
    theirs = cloud.voxel_down_sample(size)
    lower = (points.min(0).values - size / 2).tolist()
    out = pointops.voxel_downsample(
        points[None], [size] * 3, features=normals[None], point_range=lower + [INF, INF, INF]
    )
    v = int(out.lengths[0])
    assert v == len(theirs.points)
    ours = torch.cat([out.points[0, :v], out.features[0, :v]], 1).numpy()
    their = np.concatenate([np.asarray(theirs.points), np.asarray(theirs.normals)], 1)
    # Open3D lists voxels in hash order: compare as sorted rows
    ours = ours[np.lexsort(ours[:, :3].T)]
    their = their[np.lexsort(their[:, :3].T)]
    np.testing.assert_allclose(ours, their, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": [0.1, 0.1]}, "voxel_size must have 3 values"),
        ({"size": [0.1, 0.0, 0.1]}, r"voxel_size\[1\] \(y\) must be finite and > 0"),
        ({"size": [0.1, 0.1, INF]}, r"voxel_size\[2\] \(z\) must be finite and > 0"),
        ({"size": [1e-50, 0.1, 0.1]}, r"voxel_size\[0\] \(x\) must be finite and > 0 in float32"),
        ({"point_range": [0.0, 0.0, 0.0, 1.0, 1.0]}, "point_range must have 6 values"),
        ({"point_range": [0.0, 2.0, 0.0, 1.0, 1.0, 1.0]}, "point_range must have finite y_min < y_max"),
        ({"point_range": [-INF, 0.0, 0.0, 1.0, 1.0, 1.0]}, "point_range must have finite x_min < x_max"),
        ({"points": torch.rand(2, 5, 4)}, r"points must have shape \(B, N, 3\)"),
        ({"points": torch.rand(5, 3)}, r"points must have shape \(B, N, 3\) \(3 dimensions\)"),
        ({"points": torch.ones(2, 5, 3, dtype=torch.int32)}, "points must be float32, float64, float16 or bfloat16"),
        ({"features": torch.rand(2, 4, 2)}, r"features must have shape \(B, N, F\) with B, N = 2, 5"),
        ({"features": torch.ones(2, 5, 2, dtype=torch.int64)}, "features must be float32"),
        ({"lengths": torch.tensor([1, 2], dtype=torch.int32)}, "lengths must be Long"),
        ({"lengths": torch.tensor([1, 2, 3])}, r"lengths must have shape \[2\]"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    args = {"points": torch.rand(2, 5, 3), "size": [0.1] * 3, "lengths": None, "features": None, "point_range": None}
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pointops.voxel_downsample(
            args["points"], args["lengths"], args["features"], args["size"], args["point_range"]
        )


@pytest.mark.cuda
def test_features_on_another_device_is_an_error():
    with pytest.raises(RuntimeError, match="features must be on the same device as points"):
        torch.ops.pointops.voxel_downsample(
            torch.rand(1, 4, 3, device="cuda"), None, torch.rand(1, 4, 2), [0.1] * 3, None
        )


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("batch, n, size", [(1, 200_000, 0.05), (5, 40_000, 0.2), (3, 5000, 1e-5)])
def test_cuda_matches_cpu_bitwise(dtype, batch, n, size):
    g = torch.Generator().manual_seed(12)
    points = (torch.rand(batch, n, 3, generator=g) * 10 - 5).to(dtype)
    points[:, ::97] = points[:, 1::97]  # duplicates
    points[:, ::211, 1] = NAN
    features = torch.randn(batch, n, 4, generator=g)
    lengths = torch.randint(0, n + 1, (batch,), generator=g)
    cpu = downsample(points, [size, size * 1.5, size], lengths, features)
    cuda = downsample(points, [size, size * 1.5, size], lengths, features, device="cuda")
    assert_same(cuda, cpu)
    assert_same(
        downsample(points, [size] * 3, None, None, [-2.0, -3.0, -1.0, 2.0, 4.0, 3.0], "cuda"),
        downsample(points, [size] * 3, None, None, [-2.0, -3.0, -1.0, 2.0, 4.0, 3.0]),
    )


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("batch, n", [(1, 60_000), (6, 9000), (300, 40)])
def test_cuda_wide_clouds_match_cpu_bitwise(dtype, batch, n):
    # At 1 cm every other cloud spans past the key (one point 4e4 m away: 4e6 cells), so the batch
    # mixes both paths, with many merge passes and scan tiles per wide cloud and voxels of several
    # points; at 0.3 m every cloud fits the key.
    g = torch.Generator().manual_seed(24)
    points = (torch.rand(batch, n, 3, generator=g) * 10 - 5).to(torch.float64)
    copies = points[:, 1::13]  # duplicates: voxels of several points
    points[:, : copies.shape[1] * 13 : 13] = copies
    points[::2, n // 2] = torch.tensor([4e4, -3e4, 2e4], dtype=torch.float64)
    points[:, ::211, 1] = NAN
    points = points.to(dtype)
    features = torch.randn(batch, n, 2, generator=g)
    lengths = torch.randint(0, n + 1, (batch,), generator=g)
    lengths[0] = n
    for size in ([0.01, 0.015, 0.01], [0.3] * 3):
        cpu = downsample(points, size, lengths, features)
        assert_same(downsample(points, size, lengths, features, device="cuda"), cpu)
        box = [-5e4, -5e4, -3.0, 5e4, 5e4, 5e4]
        assert_same(downsample(points, size, None, None, box, "cuda"), downsample(points, size, None, None, box))


@pytest.mark.cuda
def test_cuda_wide_clouds_match_reference():
    points = clustered(3, 200, seed=25)
    points[1, 3] = torch.tensor([5e4, 0.0, 0.0])
    check(points, [0.01] * 3, torch.tensor([200, 150, 200]), torch.randn(3, 200, 3), device="cuda")
    check(torch.rand(2, 100, 3), [1e-9] * 3, device="cuda")


@pytest.mark.cuda
def test_cuda_matches_reference_on_small_clouds():
    points = clustered(3, 200, seed=13)
    check(points, [0.2, 0.3, 0.25], torch.tensor([200, 7, 150]), torch.randn(3, 200, 3), device="cuda")


@pytest.mark.cuda
def test_cuda_many_clouds_share_cells_without_mixing():
    # the same cells in every cloud: the second hash level must keep the clouds apart
    points = clustered(1, 300, seed=14).repeat(64, 1, 1)
    points[1::2] += 0.05
    assert_same(downsample(points, [0.1] * 3, device="cuda"), downsample(points, [0.1] * 3))


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_gradients_match_cpu():
    points = clustered(2, 60, torch.float64, seed=15)
    grads = []
    for device in ("cpu", "cuda"):
        p = points.detach().clone().to(device).requires_grad_()
        torch.ops.pointops.voxel_downsample(p, None, None, [0.3] * 3, None)[0].pow(2).sum().backward()
        grads.append(p.grad.cpu())
    assert torch.equal(grads[0], grads[1])


def cloud_path(points, size, point_range=None):
    """The path voxel_downsample takes for one cloud's rows (M, 3) (voxel_downsample.h's rules, as
    the CPU applies them): "empty", "direct" (the raw offsets fit the 62-bit key), "packed" (the
    offsets packed by bit-width bins fit it) or "sorted" (neither)."""
    acc = torch.float64 if points.dtype == torch.float64 else torch.float32
    q = points.to(acc)
    origin = torch.tensor(point_range[:3] if point_range else [0.0] * 3, dtype=torch.float64).to(acc)
    cells = torch.floor((q - origin) / torch.tensor(size, dtype=torch.float64).to(acc))
    ok = torch.isfinite(q).all(-1) & ((cells >= -(2.0**62)) & (cells < 2.0**62)).all(-1)
    if point_range:
        ok &= ((q >= origin) & (q < torch.tensor(point_range[3:], dtype=torch.float64).to(acc))).all(-1)
    cells = cells[ok].to(torch.int64)
    if len(cells) == 0:
        return "empty"
    offsets = [torch.unique(cells[:, d] - cells[:, d].min()).tolist() for d in range(3)]
    if sum(o[-1].bit_length() for o in offsets) <= 62:
        return "direct"
    top = []
    for axis in offsets:
        bins = {}
        for v in axis:  # increasing: a bin's first offset is its lowest
            bins.setdefault(v.bit_length(), [v, v])[1] = v
        top.append(sum(high - low + 1 for low, high in bins.values()) - 1)
    return "packed" if sum(t.bit_length() for t in top) <= 62 else "sorted"


def spread_clouds(batch, n, far, dtype, seed):
    """(batch, n) clouds of points in a 50 m box (every 7th a copy of its neighbour: voxels of
    several points) with `far` points of each spread within 200 km at random rows: at 5 cm more
    than 2^21 cells an axis even packed, so the sorted path. Features of 2 channels."""
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(batch, n, 3, generator=g, dtype=torch.float64) * 50
    copies = points[:, 1::7]
    points[:, : copies.shape[1] * 7 : 7] = copies
    for b in range(batch):
        rows = torch.randperm(n, generator=g)[:far]
        points[b, rows] = torch.rand(far, 3, generator=g, dtype=torch.float64) * 2e5 - 1e5
    return points.to(dtype), torch.randn(batch, n, 2, generator=g, dtype=torch.float64).to(dtype)


SPREAD = [0.05] * 3


def test_spread_clouds_take_the_sorted_path():
    # The premise of the CUDA tests below: these clouds are not direct or packed.
    points, _ = spread_clouds(1, 20_000, 1000, torch.float32, seed=40)
    assert cloud_path(points[0], SPREAD) == "sorted"
    assert cloud_path(points[0, :1000], SPREAD) == "sorted"
    assert cloud_path(points[0], SPREAD, [-1e5, -1e5, -1e5, 1e5, 1e5, 30.0]) == "sorted"
    clean, _ = spread_clouds(1, 20_000, 0, torch.float32, seed=40)
    assert cloud_path(clean[0], SPREAD) == "direct"
    clean[0, 5] = torch.tensor([1.2e5, -1.2e5, 1.2e5])
    assert cloud_path(clean[0], SPREAD) == "packed"


def assert_cuda_matches_cpu_twice(points, size, lengths=None, features=None, point_range=None):
    cpu = downsample(points, size, lengths, features, point_range)
    first = downsample(points, size, lengths, features, point_range, "cuda")
    assert_same(first, cpu)
    assert_same(downsample(points, size, lengths, features, point_range, "cuda"), first)  # a second call alike
    return cpu


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_large_sorted_cloud_matches_cpu_bitwise(dtype):
    # 200k points and 1,000 far ones: many chunks and merge passes of the grid-wide sort.
    points, features = spread_clouds(1, 201_000, 1000, dtype, seed=41)
    assert cloud_path(points[0], SPREAD) == "sorted"
    cpu = assert_cuda_matches_cpu_twice(points, SPREAD, None, features)
    assert int(cpu[2][0]) > 150_000


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_sorted_packed_and_direct_clouds_match_cpu_bitwise(dtype):
    # One batch: a large sorted-path cloud (ragged), a packed one (one point 200 km away on every
    # axis) and a direct one.
    n = 60_000
    points, features = spread_clouds(3, n, 0, torch.float64, seed=42)
    far, _ = spread_clouds(1, n, 1000, torch.float64, seed=43)
    points[0] = far[0]
    points[1, 10] = torch.tensor([1.2e5, -1.2e5, 1.2e5], dtype=torch.float64)
    points, features = points.to(dtype), features.to(dtype)
    lengths = torch.tensor([n - 4321, n, n // 2])
    paths = [cloud_path(points[b, : lengths[b]], SPREAD) for b in range(3)]
    assert paths == ["sorted", "packed", "direct"]
    assert_cuda_matches_cpu_twice(points, SPREAD, lengths, features)
    # the same clouds one at a time
    for b in range(3):
        assert_cuda_matches_cpu_twice(points[b : b + 1], SPREAD, lengths[b : b + 1], features[b : b + 1])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_range", [False, True])
def test_cuda_sorted_clouds_with_uncounted_rows_match_cpu_bitwise(dtype, with_range):
    # Sorted-path clouds around a block's 1,024 rows and far past it, merged by the grid together,
    # with NaN / Inf rows and (with the range) rows outside it, which sort last and do not count.
    n = 9000
    points, features = spread_clouds(6, n, 1000, torch.float64, seed=44)
    points[:, ::13, 1] = NAN
    points[:, 5::17, 2] = INF
    points[:, 3::29, 0] = -INF
    features[:, ::11, 1] = NAN
    points, features = points.to(dtype), features.to(dtype)
    lengths = torch.tensor([1024, 1025, 2049, n, 700, 8193])
    point_range = [-1e5, -1e5, -1e5, 1e5, 1e5, 30.0] if with_range else None
    for b in range(6):
        assert cloud_path(points[b, : lengths[b]], SPREAD, point_range) == "sorted"
    cpu = assert_cuda_matches_cpu_twice(points, SPREAD, lengths, features, point_range)
    assert (cpu[3][:, ::13] == -1).all()
