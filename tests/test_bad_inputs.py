"""Bad arguments get an error naming the caller's argument and what it implies, before anything is
allocated; helpers refuse nonsense sizes (the bad-input cases that are not a file, a
device move or a degenerate PPF scene: those are in tests/test_io_hostile.py,
tests/test_operators.py and tests/test_ppf_degenerate.py)."""

import time

import pytest
import torch

import pointops
from pointops import nn as pnn
from pointops._checks import memory_bytes


def test_circle_perimeter_size_refuses_nonsense_radii():
    for radius in (-5, 32768, 10**9):
        start = time.perf_counter()
        with pytest.raises(ValueError, match="radius must be an int in"):
            pointops.circle_perimeter_size(radius)
        assert time.perf_counter() - start < 1.0
    assert pointops.circle_perimeter_size(0) == 8 and pointops.circle_perimeter_size(32767) > 0


def test_rho_bins_and_line_angles_refuse_nonsense():
    for step, rmax in ((0.0, 1.0), (-1.0, 1.0), (0.1, 0.0), (float("nan"), 1.0), (1e-30, 1.0)):
        with pytest.raises(ValueError, match="rho_step and rho_max|rho bins"):
            pointops.rho_bins(step, rmax)
    assert pointops.rho_bins(0.25, 2.0) == 16
    for n in (0, -3, 1 << 21):
        with pytest.raises(ValueError, match="n_theta must be"):
            pointops.line_angles(n)


def test_detect_planes_names_its_own_arguments():
    points = torch.rand(1, 50, 3)
    with pytest.raises(ValueError, match=r"distance_threshold must be finite and > 0, got -1"):
        pointops.detect_planes(points, 3, distance_threshold=-1.0)
    with pytest.raises(ValueError, match="min_inliers"):
        pointops.detect_planes(points, 3, min_inliers=2.0)
    with pytest.raises(ValueError, match="rho_step and rho_max"):
        pointops.detect_planes(points, 3, rho_step=0.0)


def test_nn_names_npoint_and_nsample():
    xyz = torch.rand(2, 30, 3)
    with pytest.raises(ValueError, match="npoint must be an int >= 0, got -1"):
        pnn.furthest_point_sample(xyz, -1)
    with pytest.raises(ValueError, match="nsample must be an int >= 0, got -2"):
        pnn.ball_query(0.2, -2, xyz, xyz[:, :5])
    with pytest.raises(ValueError, match="radius must be finite"):
        pnn.ball_query(float("nan"), 4, xyz, xyz[:, :5])


def test_a_str_where_channels_are_expected_is_refused():
    with pytest.raises(ValueError, match=r"channels must be a list of channel names, e.g. \['max_z'\]"):
        pointops.bev_rasterize(torch.rand(1, 10, 4), "max_z", point_range=[0, 0, 0, 1, 1, 1], cell_size=[0.5, 0.5])


def test_group_points_checks_the_batch():
    features = torch.rand(2, 10, 4)
    with pytest.raises(ValueError, match="batch size B = 2"):
        pointops.group_points(features, torch.zeros(1, 5, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="batch size B = 2"):
        pointops.group_points(features, torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="int64 or int32"):
        pointops.group_points(features, torch.zeros(2, 5, dtype=torch.float32))
    assert pointops.group_points(features, torch.zeros(2, 5, 3, dtype=torch.int64)).shape == (2, 5, 3, 4)


def _too_big(call, *words):
    start = time.perf_counter()
    with pytest.raises(RuntimeError) as e:
        call()
    message = str(e.value)
    assert "implies an output of shape" in message and "memory" in message, message
    assert "you tried to allocate" not in message
    for word in words:
        assert word in message, (word, message)
    assert time.perf_counter() - start < 5.0


@pytest.mark.skipif(memory_bytes(torch.device("cpu")) is None, reason="the host's memory size is unknown")
def test_outputs_that_cannot_fit_name_the_argument():
    q = torch.rand(2, 25, 3)
    _too_big(lambda: pointops.knn(q, q, 10**12), "k = 1000000000000")
    _too_big(lambda: pointops.knn_packed(q[0], torch.tensor([0, 25]), q[0], torch.tensor([0, 25]), 10**12), "k = ")
    _too_big(lambda: pointops.ball_query(q, q, 0.1, 10**12), "k = ")
    _too_big(lambda: pointops.farthest_point_sampling(q, 10**12), "k = ")
    _too_big(
        lambda: pointops.bev_rasterize(
            torch.rand(1, 10, 4), ["max_z"], point_range=[0, 0, 0, 2e6, 2e6, 1], cell_size=[1.0, 1.0]
        ),
        "point_range and cell_size",
    )
    _too_big(
        lambda: pointops.voxelize(torch.rand(1, 10, 4), [0.1, 0.1, 0.1], [0, 0, 0, 1, 1, 1], 100000, 2**31 - 1),
        "max_voxels",
    )
    edges = torch.zeros(1, 20000, 20000, dtype=torch.bool)
    _too_big(
        lambda: pointops.hough_lines_points(torch.zeros(1, 1, 2, dtype=torch.int32), [30000, 30000], [0.0] * (1 << 20)),
        "angles (theta)",
    )
    _too_big(
        lambda: pointops.hough_circles_points(
            torch.zeros(1, 1, 2, dtype=torch.int32), list(range(1000)), [30000, 30000]
        ),
        "1000 radii",
    )
    _too_big(lambda: pointops.edge_points(edges[:, :1, :1].expand(10**6, 1, 1), 10**9), "capacity")
    _too_big(lambda: pointops.hough_peaks(torch.zeros(1, 4, 4, dtype=torch.int32), [1, 1], 10**12), "k = ")
    # the fakes say the same under tracing (meta tensors have no memory bound: a CPU fake tensor)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fq = torch.rand(2, 25, 3)
        _too_big(lambda: torch.ops.pointops.knn(fq, None, fq, None, 10**12, None), "k = 1000000000000")


def test_bev_signed_zero_z_ties_to_the_lowest_index():
    """-0.0 and +0.0 are one z: top_feature takes the lower index, max_z / min_z read +0.0."""
    first_plus = torch.tensor([[[0.5, 0.5, 0.0, 7.0], [0.5, 0.5, -0.0, 9.0]]])
    first_minus = torch.tensor([[[0.5, 0.5, -0.0, 9.0], [0.5, 0.5, 0.0, 7.0]]])
    for points, top in ((first_plus, 7.0), (first_minus, 9.0)):
        for dtype in (torch.float32, torch.float64, torch.float16):
            image = pointops.bev_rasterize(
                points.to(dtype),
                ["top_feature", "max_z", "min_z"],
                point_range=[0, 0, -1, 1, 1, 1],
                cell_size=[1.0, 1.0],
            )[0, :, 0, 0]
            assert image[0] == top
            assert torch.signbit(image[1:]).logical_not().all()


def test_voxel_downsample_beyond_the_key_span_drops_no_point():
    # 10^9 cells per axis, far past the 63-bit key's 2^21: the exact slow path counts every point
    points = torch.rand(1, 100, 3)
    out = pointops.voxel_downsample(points, [1e-9] * 3)
    assert out.lengths.tolist() == [100] and (out.point_voxel >= 0).all()
    out = pointops.voxel_downsample(torch.stack([points[0] * 1e-6, points[0]]), [1e-9] * 3)
    assert out.lengths[1] == 100 and (out.point_voxel[1] >= 0).all()
    out = pointops.voxel_downsample(points, [1e-9] * 3, point_range=[0, 0, 0, 1e-3, 1e-3, 1e-3])
    assert int(out.lengths[0]) == int(((points[0] < 1e-3).all(-1)).sum())


def test_voxel_downsample_refuses_what_it_would_drop():
    """A counted point more than 2^62 voxels from the grid's origin cannot have an int64 voxel
    index: a ValueError names voxel_size (1e-30, a subnormal size, an outlier at 1e30), never a
    silently smaller cloud; a point that does not count anyway (NaN, past lengths, outside the
    range) is no reason to refuse."""
    points = torch.rand(1, 50, 3, generator=torch.Generator().manual_seed(3))
    for size in (1e-30, 1e-45):
        with pytest.raises(ValueError, match="^voxel_size must keep every counted point of points within 2\\^62"):
            pointops.voxel_downsample(points, size)
    far = points.clone()
    far[0, 7] = 1e30
    with pytest.raises(ValueError, match="voxel_size must keep every counted point"):
        pointops.voxel_downsample(far, 0.01)
    far[0, 7, 1] = float("nan")  # not counted: the rest is downsampled
    assert int(pointops.voxel_downsample(far, 0.01).lengths[0]) == 49
    assert int(pointops.voxel_downsample(far, 0.01, lengths=torch.tensor([7])).lengths[0]) == 7
    assert int(pointops.voxel_downsample(points, 1e-30, point_range=[0, 0, 0, 1e-20, 1e-20, 1e-20]).lengths[0]) == 0


def test_estimate_normals_at_any_scale():
    """Squared distances of a cloud at 1e30 overflow float32 (every candidate ties at +inf) and
    at 1e-30 underflow to 0: the search runs scaled by a power of two, so the normals are the
    unscaled cloud's."""
    points = torch.rand(2, 200, 3, generator=torch.Generator().manual_seed(4))
    points[..., 2] *= 0.01
    want = pointops.estimate_normals(points, 8, orientation="none")
    for scale in (1e30, 1e-30, 1e36):
        got = pointops.estimate_normals((points.double() * scale).float(), 8, orientation="none")
        torch.testing.assert_close(got.normals, want.normals, rtol=0, atol=1e-5)
        torch.testing.assert_close(got.curvature, want.curvature, rtol=0, atol=1e-6)


def test_ppf_lengths_and_radii_are_checked():
    points = torch.rand(1, 30, 3, generator=torch.Generator().manual_seed(5))
    normals = torch.nn.functional.normalize(torch.randn(1, 30, 3, generator=torch.Generator().manual_seed(6)), dim=-1)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="^diameter must be finite and > 0, got diameter\\[0\\] = "):
            pointops.ppf_model(points, normals, diameter=torch.tensor([bad]))
        with pytest.raises(ValueError, match="^distance_step must be finite and > 0"):
            pointops.ppf_features(points, normals, torch.zeros(1, 4, 2, dtype=torch.int64), torch.tensor([bad]))
    with pytest.raises(ValueError, match="^tau_d must be a number in \\(0, 1\\], got 'x'"):
        pointops.ppf_model(points, normals, tau_d="x")
    q = torch.nn.functional.normalize(torch.randn(1, 6, 4), dim=-1)
    with pytest.raises(ValueError, match="^suppression_distance must be finite and >= 0"):
        pointops.pose_cluster(
            q,
            torch.rand(1, 6, 3),
            torch.ones(1, 6, dtype=torch.int64),
            torch.tensor([0.1]),
            suppression_distance=torch.tensor([-1.0]),
        )


def test_sizes_and_eps_are_named():
    with pytest.raises(ValueError, match="^voxel_size must be a number or a list of 3 numbers, got 'x'"):
        pointops.voxel_downsample(torch.rand(1, 5, 3), "x")
    with pytest.raises(ValueError, match="^cell_size must be a number or a list of 2 numbers, got True"):
        pointops.bev_rasterize(torch.rand(1, 5, 4), ["max_z"], None, [0, 0, 0, 1, 1, 1], True)
    with pytest.raises(ValueError, match="^eps must be finite and >= 0.0, got -1"):
        pointops.inverse_distance_weights(torch.rand(1, 4, 3), -1.0)
    with pytest.raises(RuntimeError, match="^point_range and voxel_size must give the grid 1 to 2\\^24 voxels along x"):
        pointops.voxelize_dynamic(torch.rand(1, 5, 4), 1e-45, [0, 0, 0, 1, 1, 1])
