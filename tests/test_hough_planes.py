"""Hough planes and peaks: loop/brute-force references, edge cases, errors, CPU == CUDA."""

import math

import numpy as np
import pytest
import torch

import pointops
from pointops.reference import hough as reference

NAN = float("nan")
INF = float("inf")


def ragged_clouds(seed=0, n=30):
    """Two clouds in [-1.2, 1.2]^3 (some rho beyond rho_max = 1.5) with NaN/Inf points and a
    length below N."""
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(2, n, 3, generator=g) * 2.4 - 1.2
    points[0, 3, 1] = NAN
    points[0, 7, 2] = INF
    points[1, 0, 0] = -INF
    lengths = torch.tensor([n, n - 9])
    return points, lengths


def grid_reference(points, n_phi, n_theta, rho_step, rho_max, **kw):
    acc = reference.hough_planes(points, n_phi, n_theta, rho_step, rho_max, **kw)
    return torch.from_numpy(acc).reshape(points.shape[0], n_phi, n_theta, -1)


# 12 rho bins, and 11: an odd count makes the binning's f = 1/2 (csrc/hough/planes.h)
@pytest.mark.parametrize("rho_step,n_rho", [(0.25, 12), (0.27, 11)])
def test_grid_counts_match_reference(device, rho_step, n_rho):
    points, lengths = ragged_clouds()
    expected = grid_reference(points, 5, 7, rho_step, 1.5, lengths=lengths)
    acc = pointops.hough_planes(points.to(device), rho_step, 1.5, n_phi=5, n_theta=7, lengths=lengths.to(device))
    assert acc.dtype == torch.int32 and acc.shape == (2, 5, 7, n_rho)
    torch.testing.assert_close(acc.cpu(), expected, rtol=0, atol=0)
    # each finite point votes at most once per orientation; some rho fall outside [-1.5, 1.5)
    assert int(acc[1].sum()) <= 20 * 35 and int(acc[0].sum()) < 28 * 35


def test_ball_counts_match_reference(device):
    points, lengths = ragged_clouds(1)
    expected = torch.from_numpy(reference.hough_planes(points, 6, 9, 0.3, 1.5, lengths=lengths, ball=True))
    acc = pointops.hough_planes_ball(points.to(device), 0.3, 1.5, n_phi=6, n_theta=9, lengths=lengths.to(device))
    phi, theta = pointops.ball_cells(6, 9)
    assert acc.shape == (2, phi.numel(), 10) and phi.numel() == len(reference.plane_normal_table(6, 9, True))
    torch.testing.assert_close(acc.cpu(), expected, rtol=0, atol=0)


def test_ball_cells_are_rings_of_equal_area():
    phi, theta = pointops.ball_cells(90, 90)
    assert abs(phi.numel() - 90 * 90 * 2 / math.pi) < 90
    ring = phi == phi.unique()[45]
    assert int(ring.sum()) == 90 and torch.all(theta[ring] < math.pi)


def test_weighted_sums_match_reference_exactly(device):
    points, lengths = ragged_clouds(2)
    weights = torch.rand(2, 30, generator=torch.Generator().manual_seed(3)) * 3 - 0.5
    weights[1, 4] = NAN  # a point with a non-finite weight casts no vote
    expected = grid_reference(points, 4, 6, 0.2, 1.5, lengths=lengths, weights=weights)
    for w in (weights, weights.double()):
        acc = pointops.hough_planes(
            points.to(device), 0.2, 1.5, n_phi=4, n_theta=6, lengths=lengths.to(device), weights=w.to(device)
        )
        assert acc.dtype == torch.float32
        # same float32 sums in the same (point) order as the reference: no tolerance needed
        torch.testing.assert_close(acc.cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_dtypes_vote_in_float32(device, dtype):
    points = ragged_clouds(4)[0].to(dtype)
    expected = grid_reference(points.float(), 3, 4, 0.25, 1.5)
    acc = pointops.hough_planes(points.to(device), 0.25, 1.5, n_phi=3, n_theta=4)
    torch.testing.assert_close(acc.cpu(), expected, rtol=0, atol=0)


def test_empty_inputs(device):
    empty_batch = pointops.hough_planes(torch.zeros(0, 5, 3, device=device), 0.1, 1.0, n_phi=4, n_theta=4)
    assert empty_batch.shape == (0, 4, 4, 20)
    no_points = pointops.hough_planes(torch.zeros(2, 0, 3, device=device), 0.1, 1.0, n_phi=4, n_theta=4)
    assert no_points.shape == (2, 4, 4, 20) and int(no_points.abs().sum()) == 0
    zero_length = pointops.hough_planes(
        torch.rand(2, 5, 3, device=device), 0.1, 1.0, n_phi=4, n_theta=4, lengths=torch.tensor([0, -3], device=device)
    )
    assert int(zero_length.abs().sum()) == 0
    long_length = pointops.hough_planes(
        torch.rand(1, 5, 3, device=device) * 0.5,
        0.1,
        1.0,
        n_phi=4,
        n_theta=4,
        lengths=torch.tensor([99], device=device),
    )
    assert int(long_length.sum()) == 5 * 16  # clamped to N; |p| < 0.87, so every rho is in range


def test_rho_bins_are_symmetric():
    assert pointops.rho_bins(0.3, 1.0) == 7  # round(6.67): effective step 2/7
    n_rho = pointops.rho_bins(0.1, 1.0)
    for rho in (0.05, 0.37, 0.999):
        normal = (0.0, 0.0, 1.0)
        up = reference.plane_rho_bin(normal, (0.0, 0.0, rho), 0.1, 1.0)
        down = reference.plane_rho_bin(normal, (0.0, 0.0, -rho), 0.1, 1.0)
        assert up == n_rho - 1 - down
    assert reference.plane_rho_bin((0.0, 0.0, 1.0), (0.0, 0.0, 1.0), 0.1, 1.0) is None  # rho_max: out


def plane_points(normal, offset, n, noise, seed):
    g = torch.Generator().manual_seed(seed)
    normal = torch.tensor(normal, dtype=torch.float64)
    helper = torch.tensor([1.0, 0, 0], dtype=torch.float64)
    if abs(float(normal[0])) > 0.9:
        helper = torch.tensor([0, 1.0, 0], dtype=torch.float64)
    u = torch.linalg.cross(normal, helper)
    u = u / u.norm()
    v = torch.linalg.cross(normal, u)
    ab = torch.rand(n, 2, generator=g, dtype=torch.float64) * 4 - 2
    pts = offset * normal + ab[:, :1] * u + ab[:, 1:] * v
    pts = pts + noise * torch.randn(n, 3, generator=g, dtype=torch.float64)
    return pts.float()


def test_synthetic_planes_are_found(device):
    n_phi, n_theta, rho_step, rho_max = 30, 36, 0.1, 4.0
    normals = pointops.plane_grid_normals(n_phi, n_theta)
    tilted = normals[11, 23].tolist()
    cloud = (
        torch.cat(
            [
                plane_points((0.0, 0.0, 1.0), 0.5, 2000, 0.005, 0),  # z = 0.5: the pole row, phi bin 0
                plane_points(tilted, -1.23, 1500, 0.005, 1),
                torch.rand(500, 3, generator=torch.Generator().manual_seed(2)) * 4 - 2,
            ]
        )
        .unsqueeze(0)
        .to(device)
    )
    acc = pointops.hough_planes(cloud, rho_step, rho_max, n_phi=n_phi, n_theta=n_theta)
    votes, idx = pointops.hough_plane_peaks(acc, k=2, radius=[2, 2, 2])
    found = {tuple(r) for r in idx[0].tolist()}
    n_rho = pointops.rho_bins(rho_step, rho_max)
    z_bin = int((0.5 * math.cos(math.pi / (2 * n_phi)) + rho_max) / (2 * rho_max / n_rho))
    tilted_bin = int((-1.23 + rho_max) / (2 * rho_max / n_rho))
    assert (11, 23, tilted_bin) in found
    pole = [r for r in found if r != (11, 23, tilted_bin)]
    # near the pole, sin(phi_0) * (x, y) spreads the votes by ~1.5 bins
    assert len(pole) == 1 and pole[0][0] == 0 and abs(pole[0][2] - z_bin) <= 1
    planes_n, planes_d = pointops.peaks_to_planes(idx, n_phi, n_theta, rho_step, rho_max)
    for s in range(2):
        if tuple(idx[0, s].tolist()) == (11, 23, tilted_bin):
            assert torch.allclose(planes_n[0, s].cpu(), torch.tensor(tilted, dtype=torch.float64))
            assert abs(float(planes_d[0, s]) + 1.23) <= 0.05 + 1e-9


def random_acc(shape, high, seed, dtype=torch.int32):
    g = torch.Generator().manual_seed(seed)
    acc = torch.randint(0, high, shape, generator=g, dtype=torch.int32)
    return acc if dtype == torch.int32 else acc.to(dtype) * 0.5


CASES = [
    # shape, radius, periodic, min_votes, k, plane_seam
    ((2, 9, 11), [1, 1], [False, False], 1.0, 6, False),
    ((2, 9, 11), [2, 1], [True, False], 2.0, 10, False),
    ((3, 7), [2], [True], 0.0, 40, False),  # k beyond the peak count: padded
    ((2, 4, 5, 6), [1, 1, 1], [False, True, False], 1.0, 8, False),
    ((2, 5, 6, 4), [1, 1, 1], [False, False, False], 1.0, 12, True),
    ((1, 6, 8, 5), [2, 3, 1], [False, False, False], 1.0, 12, True),
    ((2, 3, 4), [5, 0], [True, True], 1.0, 5, False),  # radius past the size, wrapping twice
    ((1, 3, 4, 5), [4, 9, 2], [False, False, False], 1.0, 10, True),  # past both seams, twice
    ((2, 4, 3, 6), [0, 2, 0], [False, False, False], 0.0, 30, True),  # across the theta seam only
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_peaks_match_brute_force(device, case, dtype):
    shape, radius, periodic, min_votes, k, seam = case
    for seed, high in ((0, 4), (1, 50)):  # few values: many ties and plateaus
        acc = random_acc(shape, high, seed, dtype)
        expected = reference.hough_peaks(acc, radius, periodic, min_votes, k, seam)
        votes, idx = torch.ops.pointops.hough_peaks(acc.to(device), radius, periodic, min_votes, k, seam)
        assert votes.dtype == dtype and idx.dtype == torch.int64
        torch.testing.assert_close(votes.cpu(), expected[0], rtol=0, atol=0)
        torch.testing.assert_close(idx.cpu(), expected[1], rtol=0, atol=0)


def test_peaks_plateau_keeps_its_first_bin(device):
    acc = torch.zeros(1, 6, 6, dtype=torch.int32)
    acc[0, 2:4, 2:5] = 7
    acc[0, 0, 0] = 3
    votes, idx = pointops.hough_peaks(acc.to(device), [1, 1], k=4)
    assert votes.cpu().tolist() == [[7, 3, 0, 0]]
    assert idx.cpu().tolist() == [[[2, 2], [0, 0], [-1, -1], [-1, -1]]]


def test_peaks_periodic_wrap_suppresses_across_the_edge(device):
    acc = torch.zeros(1, 10, dtype=torch.int32)
    acc[0, 0], acc[0, 9] = 5, 6
    open_votes, _ = pointops.hough_peaks(acc.to(device), [1], k=3)
    wrapped_votes, wrapped_idx = pointops.hough_peaks(acc.to(device), [1], k=3, periodic=[True])
    assert open_votes.cpu().tolist() == [[6, 5, 0]]
    assert wrapped_votes.cpu().tolist() == [[6, 0, 0]] and wrapped_idx.cpu()[0, 0].tolist() == [9]


def test_plane_seam_neighbours_are_the_same_planes():
    """Every glued neighbour's bin-centre normal equals +-n of the unglued (extended) cell, and
    the rho bin is mirrored exactly when the sign flips."""
    n_phi, n_theta, n_rho = 6, 8, 10

    def normal(i, j):
        phi, theta = (i + 0.5) * math.pi / n_phi, (j + 0.5) * math.pi / n_theta
        return np.array([math.sin(phi) * math.cos(theta), math.sin(phi) * math.sin(theta), math.cos(phi)])

    for i in (-2, -1, 0, 5, 6, 7):
        for j in (-3, -1, 0, 7, 8, 10):
            mapped = reference._seam_neighbour((n_phi, n_theta, n_rho), (i, j, 2), (0, 0, 0))
            ext, home = normal(i, j), normal(mapped[0], mapped[1])
            if mapped[2] == 2:
                assert np.allclose(ext, home)
            else:
                assert mapped[2] == n_rho - 1 - 2 and np.allclose(ext, -home)


def test_plane_seam_finds_one_peak_for_a_plane_on_the_seam(device):
    # A plane whose normal lies on theta = 0 == pi (seam): its votes straddle j = 0 and j = n-1
    # with phi mirrored and rho mirrored; glued, the two halves are one peak.
    n_phi, n_theta, rho_step, rho_max = 12, 12, 0.4, 2.0
    phi = 3.5 * math.pi / n_phi
    cloud = plane_points((math.sin(phi), 0.0, math.cos(phi)), 0.8, 3000, 0.0, 5).unsqueeze(0).to(device)
    acc = pointops.hough_planes(cloud, rho_step, rho_max, n_phi=n_phi, n_theta=n_theta)
    glued, _ = pointops.hough_plane_peaks(acc, k=3, radius=[1, 1, 1], min_votes=1000)
    unglued, idx = pointops.hough_peaks(acc, [1, 1, 1], k=3, min_votes=1000)
    assert int((glued > 0).sum()) == 1 and int((unglued > 0).sum()) == 2
    (i, j, r), (i2, j2, r2) = idx[0, 0].tolist(), idx[0, 1].tolist()
    assert (i2, j2, r2) == (n_phi - 1 - i, n_theta - 1 - j, acc.shape[3] - 1 - r)


def test_peaks_empty_and_degenerate(device):
    votes, idx = pointops.hough_peaks(torch.zeros(0, 4, 4, dtype=torch.int32, device=device), [1, 1], k=3)
    assert votes.shape == (0, 3) and idx.shape == (0, 3, 2)
    votes, idx = pointops.hough_peaks(torch.zeros(2, 0, 4, device=device), [1, 1], k=2)
    assert votes.cpu().tolist() == [[0, 0], [0, 0]] and idx.cpu().eq(-1).all()
    votes, idx = pointops.hough_peaks(torch.ones(2, 3, dtype=torch.int32, device=device), [0], k=0)
    assert votes.shape == (2, 0) and idx.shape == (2, 0, 1)
    acc = torch.tensor([[1.0, NAN, 2.0, -3.0, 0.0, 2.0]], device=device)
    votes, idx = pointops.hough_peaks(acc, [1], k=4, min_votes=1.5)
    assert votes.cpu().tolist() == [[2.0, 2.0, 0.0, 0.0]] and idx.cpu()[0, :, 0].tolist() == [2, 5, -1, -1]


def test_bad_arguments_raise(device):
    pts = torch.rand(2, 5, 3, device=device)
    with pytest.raises(RuntimeError, match="points must have shape"):
        torch.ops.pointops.hough_planes(torch.rand(2, 5, 2, device=device), None, None, 4, 4, 0.1, 1.0)
    with pytest.raises(RuntimeError, match="rho_step must be finite and > 0, got -0.1"):
        torch.ops.pointops.hough_planes(pts, None, None, 4, 4, -0.1, 1.0)
    with pytest.raises(RuntimeError, match="n_phi must be in"):
        torch.ops.pointops.hough_planes(pts, None, None, 0, 4, 0.1, 1.0)
    with pytest.raises(RuntimeError, match="weights must have shape"):
        torch.ops.pointops.hough_planes(pts, None, torch.rand(2, 4, device=device), 4, 4, 0.1, 1.0)
    with pytest.raises(RuntimeError, match="lengths must be Long"):
        torch.ops.pointops.hough_planes(
            pts, torch.tensor([1, 2], dtype=torch.int32, device=device), None, 4, 4, 0.1, 1.0
        )
    acc = torch.zeros(1, 4, 5, 6, dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="radius must have one entry per dim"):
        torch.ops.pointops.hough_peaks(acc, [1, 1], [False] * 3, 1.0, 4, False)
    with pytest.raises(RuntimeError, match="periodic must be all False"):
        torch.ops.pointops.hough_peaks(acc, [1, 1, 1], [False, True, False], 1.0, 4, True)
    with pytest.raises(RuntimeError, match="plane_seam=True needs a plane grid"):
        torch.ops.pointops.hough_peaks(acc[:, 0], [1, 1], [False, False], 1.0, 4, True)
    with pytest.raises(RuntimeError, match="acc must be int32 or float32, got Long"):
        torch.ops.pointops.hough_peaks(acc.long(), [1, 1, 1], [False] * 3, 1.0, 4, False)
    with pytest.raises(RuntimeError, match="radius must be >= 0"):
        torch.ops.pointops.hough_peaks(acc, [1, -1, 1], [False] * 3, 1.0, 4, False)


# ---- CUDA == CPU at sizes that take every kernel path ----


def _cuda_equal(points, lengths=None, weights=None, n_phi=20, n_theta=24, rho_step=0.05, rho_max=2.0, ball=False):
    fn = pointops.hough_planes_ball if ball else pointops.hough_planes
    cpu = fn(points, rho_step, rho_max, lengths, n_phi, n_theta, weights)
    gpu = fn(
        points.cuda(),
        rho_step,
        rho_max,
        None if lengths is None else lengths.cuda(),
        n_phi,
        n_theta,
        None if weights is None else weights.cuda(),
    )
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=0, atol=0, equal_nan=True)
    return cpu


@pytest.mark.cuda
def test_cuda_counts_equal_cpu_with_flushes_and_chunks():
    g = torch.Generator().manual_seed(0)
    points = torch.rand(2, 150_000, 3, generator=g) * 3 - 1.5
    points[0, 1000:1010] = NAN
    acc = _cuda_equal(points, torch.tensor([150_000, 70_001]), n_phi=9, n_theta=13)
    assert int(acc.max()) > 0


@pytest.mark.cuda
def test_cuda_counts_past_16_bits_in_every_block():
    # One orientation tile, so each SM's block votes ~70,000 points; nearly all are one point, so
    # their bins pass 65,535 votes within each block: its 16-bit counters must be flushed in time.
    n = 70_000 * torch.cuda.get_device_properties(0).multi_processor_count
    points = torch.tensor([0.3, -0.2, 0.7]).expand(1, n, 3).clone()
    points[0, ::1000] = torch.randn(points[0, ::1000].shape, generator=torch.Generator().manual_seed(5))
    acc = _cuda_equal(points, n_phi=1, n_theta=2)
    assert int(acc.max()) > n * 0.99 > 65535


@pytest.mark.cuda
@pytest.mark.parametrize("n_rho_step", [0.5, 0.01, 0.001])  # 8, 400 and 4000 bins (rho windows)
def test_cuda_counts_equal_cpu_any_rho_bins(n_rho_step):
    points = torch.randn(3, 3000, 3, generator=torch.Generator().manual_seed(1))
    _cuda_equal(points, torch.tensor([3000, 17, 0]), rho_step=n_rho_step)
    _cuda_equal(points, rho_step=n_rho_step, ball=True)


@pytest.mark.cuda
def test_cuda_counts_equal_cpu_past_the_windowed_bins():
    # 2^22 + 1 rho bins: the global-memory kernel
    points = torch.randn(1, 3000, 3, generator=torch.Generator().manual_seed(4))
    acc = _cuda_equal(points, n_phi=1, n_theta=2, rho_step=4.0 / (2**22 + 1))
    assert acc.shape == (1, 1, 2, 2**22 + 1) and int(acc.sum()) > 2000


@pytest.mark.cuda
@pytest.mark.parametrize("n_rho_step", [0.05, 0.001])
def test_cuda_weighted_equal_cpu(n_rho_step):
    g = torch.Generator().manual_seed(2)
    points = torch.randn(2, 5000, 3, generator=g)
    weights = torch.rand(2, 5000, generator=g)
    _cuda_equal(points, torch.tensor([5000, 1234]), weights, rho_step=n_rho_step)


@pytest.mark.cuda
def test_cuda_peaks_equal_cpu_on_a_real_accumulator():
    points = torch.randn(2, 20000, 3, generator=torch.Generator().manual_seed(3))
    acc = pointops.hough_planes(points, 0.05, 3.0, n_phi=30, n_theta=40)
    for seam in (False, True):
        expected = pointops.hough_peaks(acc, [2, 2, 2], k=50, plane_seam=seam)
        actual = pointops.hough_peaks(acc.cuda(), [2, 2, 2], k=50, plane_seam=seam)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)
    weighted = acc.float() * 0.25
    for a, e in zip(
        pointops.hough_peaks(weighted.cuda(), [1, 0, 3], k=20, periodic=[False, True, False]),
        pointops.hough_peaks(weighted, [1, 0, 3], k=20, periodic=[False, True, False]),
    ):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)


def test_plane_tables_are_marked_as_torch_marks_a_constant_result():
    from pointops.hough import planes

    def marked():
        return 0

    torch.compiler.assume_constant_result(marked)
    expected = {k: v for k, v in vars(marked).items()}
    assert expected, "torch.compiler.assume_constant_result no longer marks the function it is given"
    for table in (planes._rho_table, planes._grid_normal_table, planes._ball_normal_table):
        assert {k: vars(table)[k] for k in expected if k in vars(table)} == expected, table.__name__


# ---- plane_detections: peaks as planes ----


@pytest.mark.parametrize("ball", [False, True])
@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_plane_detections_match_reference(device, ball, dtype):
    points = torch.randn(2, 400, 3, generator=torch.Generator().manual_seed(11))
    lengths = torch.tensor([400, 150])
    fn = pointops.hough_planes_ball if ball else pointops.hough_planes
    acc = fn(points, 0.25, 3.0, lengths, 6, 8)
    acc = acc.to(dtype) * (0.5 if dtype == torch.float32 else 1)
    for k, radius, min_votes in ((5, 1, 1.0), (40, 0, 3.0), (0, 1, 1.0), (10_000, 2, 1.0)):
        planes, votes = pointops.plane_detections(acc.to(device), 6, 8, 0.25, 3.0, k, radius, min_votes)
        want_planes, want_votes = reference.plane_detections(acc, 6, 8, 0.25, 3.0, k, radius, min_votes)
        assert planes.shape == (2, k, 4) and planes.dtype == votes.dtype == torch.float32
        torch.testing.assert_close(planes.cpu(), want_planes, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(votes.cpu(), want_votes, rtol=0, atol=0)
    assert torch.isnan(planes[:, -1]).all() and (votes[:, -1] == 0).all()  # k past the peaks: padding


def test_plane_detections_are_the_peaks_bin_centres(device):
    """The grid's detections are hough_plane_peaks' bins through peaks_to_planes, rounded to float32."""
    points = torch.randn(1, 3000, 3, generator=torch.Generator().manual_seed(12)).to(device)
    acc = pointops.hough_planes(points, 0.1, 4.0, n_phi=30, n_theta=40)
    votes, idx = pointops.hough_plane_peaks(acc, 25, [2, 2, 2])
    normals, offsets = pointops.peaks_to_planes(idx, 30, 40, 0.1, 4.0)
    planes, got_votes = pointops.plane_detections(acc, 30, 40, 0.1, 4.0, 25, 2)
    torch.testing.assert_close(
        planes, torch.cat([normals, offsets.unsqueeze(-1)], -1).float(), rtol=0, atol=0, equal_nan=True
    )
    torch.testing.assert_close(got_votes, votes.float(), rtol=0, atol=0)


def test_plane_detections_check_the_accumulator(device):
    acc = torch.zeros(1, 6, 8, 24, dtype=torch.int32, device=device)
    op = torch.ops.pointops.plane_detections
    for args, message in [
        ((acc, 6, 9, 0.25, 3.0, 3), "acc must have shape \\[1, 6, 9, 24\\]"),
        ((acc, 6, 8, 0.25, 4.0, 3), "acc must have shape \\[1, 6, 8, 32\\]"),
        ((acc[0], 6, 8, 0.25, 3.0, 3), "acc must have shape"),
        ((acc[..., 0], 6, 8, 0.25, 3.0, 3), "acc must have shape"),
        ((acc.double(), 6, 8, 0.25, 3.0, 3), "acc must be int32 or float32"),
        ((acc, 6, 8, 0.0, 3.0, 3), "rho_step must be finite and > 0"),
        ((acc, 6, 8, 0.25, 3.0, -1), "k must be >= 0"),
        ((acc, 6, 8, 0.25, 3.0, 3, -2), "radius must be >= 0"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            op(*args)
    planes, votes = op(acc, 6, 8, 0.25, 3.0, 3)  # no votes: all padding
    assert torch.isnan(planes).all() and (votes == 0).all()


@pytest.mark.cuda
def test_cuda_plane_detections_equal_cpu_on_a_scan():
    from pointops.scenes import lidar

    points = lidar.lidar_scan(lidar.make_scene(1), n_beams=32, n_azimuth=1024, seed=1).points[None]
    for fn in (pointops.hough_planes, pointops.hough_planes_ball):
        acc = fn(points, 0.1, 50.0, n_phi=90, n_theta=90)
        want = pointops.plane_detections(acc, 90, 90, 0.1, 50.0, 64, 2)
        for got, expected in zip(pointops.plane_detections(acc.cuda(), 90, 90, 0.1, 50.0, 64, 2), want):
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.cuda
def test_cuda_counts_equal_cpu_on_a_scan_in_rho_windows():
    """A LiDAR scan with the outdoor preset's 90 x 90 x 1,000 grid (four rho windows, where each
    warp skips the points its orientations cannot bring into the window), points far out and on
    the window edges included: the CPU's counts."""
    from pointops.scenes import lidar

    points = lidar.lidar_scan(lidar.make_scene(2), n_beams=32, n_azimuth=1024, seed=2).points
    extra = torch.tensor([[2e4, 0.0, 0.0], [0.0, -49.95, 0.0], [0.0, 0.0, 25.0], [0.0, 0.0, -25.05], [1e30, 1.0, 1.0]])
    points = torch.cat([points, extra])[None]
    for ball in (False, True):
        acc = _cuda_equal(points, n_phi=90, n_theta=90, rho_step=0.1, rho_max=50.0, ball=ball)
        assert int(acc.sum()) > 0.9 * points.shape[1] * acc[0, ..., 0].numel()
