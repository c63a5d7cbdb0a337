"""plane_labels, plane_refit (in bands) and plane_suppress: loop / NumPy references, keep rules, edge
cases, errors, CPU == CUDA."""

import math

import pytest
import torch

import pointops
from pointops.reference import hough as reference

NAN = float("nan")
INF = float("inf")


def planar_clouds(seed=0, n=400, noise=0.01, shift=0.0, clutter=True):
    """Two clouds of points on three planes (ground, two walls that meet neither each other nor
    the ground) plus clutter, shifted by `shift`, with NaN/Inf points and a length below N; and
    rough plane guesses (B, 5, 4), cloud 1's in reverse order: ground, wall x = 3, wall y = -2.5,
    a NaN row, the ground again."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(2, n, 2, generator=g) * 8 - 4
    which = torch.randint(0, 4 if clutter else 3, (2, n), generator=g)
    height = 0.5 + u[..., 1].abs()
    ground = torch.stack([u[..., 0], u[..., 1], torch.zeros_like(height)], -1)
    wall_x = torch.stack([torch.full_like(height, 3.0), u[..., 0], height], -1)
    wall_y = torch.stack([0.5 * u[..., 0] - 1, torch.full_like(height, -2.5), height], -1)
    points = torch.rand(2, n, 3, generator=g) * 6 - 3
    for index, surface in enumerate((ground, wall_x, wall_y)):
        points = torch.where((which == index).unsqueeze(-1), surface, points)
    points = points + noise * torch.randn(2, n, 3, generator=g) + shift
    points[0, 5, 0] = NAN
    points[1, 9, 2] = -INF
    normals = torch.tensor(
        [[0.02, -0.01, 1.0], [0.99, 0.05, 0.0], [0.0, -1.0, 0.03], [0.0, 1.0, 0.0], [0.02, -0.01, 1.0]]
    )
    normals = normals / normals.norm(dim=-1, keepdim=True)
    anchors = (
        torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 1.0], [0.0, -2.5, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]) + shift
    )
    guesses = torch.cat([normals, (normals * anchors).sum(-1, keepdim=True) + 0.03], -1)
    guesses[3, 3] = NAN
    return points, torch.stack([guesses, guesses.flip(0)]), torch.tensor([n, n - 37])


def test_labels_match_reference(device):
    points, planes, lengths = planar_clouds()
    expected = reference.plane_labels(points, planes, 0.05, lengths)
    labels = pointops.plane_labels(points.to(device), planes.to(device), 0.05, lengths.to(device))
    assert labels.dtype == torch.int64 and labels.shape == (2, 400)
    torch.testing.assert_close(labels.cpu(), expected, rtol=0, atol=0)
    assert labels[0, 5] == -1 and labels[1, 9] == -1 and torch.all(labels[1, 363:] == -1)
    assert not torch.any(labels[0] == 4) and not torch.any(labels[0] == 3)  # duplicate / NaN rows
    assert torch.any(labels[1] == 0)  # cloud 1 lists the duplicate first: it takes the points


def test_labels_threshold_is_inclusive_and_zero_allowed(device):
    points = torch.tensor([[[0.0, 0.0, 0.5], [1.0, 2.0, 0.25], [0.0, 0.0, 0.7]]], device=device)
    planes = torch.tensor([[[0.0, 0.0, 1.0, 0.25], [0.0, 0.0, 1.0, 0.0]]], device=device)
    assert pointops.plane_labels(points, planes, 0.25).tolist() == [[0, 0, -1]]
    assert pointops.plane_labels(points, planes, 0.0).tolist() == [[-1, 0, -1]]


def test_refit_matches_numpy_eigh(device):
    points, planes, lengths = planar_clouds(1)
    expected, counts = reference.plane_refit(points, planes, 0.1, lengths)
    refit, inliers = pointops.plane_refit(points.to(device), planes.to(device), 0.1, lengths.to(device))
    assert refit.dtype == torch.float32 and inliers.dtype == torch.int64
    torch.testing.assert_close(inliers.cpu(), counts, rtol=0, atol=0)
    torch.testing.assert_close(refit.cpu(), expected, rtol=0, atol=2e-6, equal_nan=True)
    assert torch.all(counts[0, :3] > 30) and torch.all(counts[1, [0, 2, 3]] > 30)
    assert counts[0, 3] == 0 and counts[0, 4] == 0 and counts[1, 1] == 0 and counts[1, 4] == 0
    torch.testing.assert_close(refit[0, 4].cpu(), planes[0, 4])  # no inliers: kept as given
    assert torch.isnan(refit[0, 3, 3]) and refit[0, 3, :3].tolist() == [0.0, 1.0, 0.0]


def test_refit_recovers_noise_free_planes_far_from_the_origin(device):
    for shift in (0.0, 1000.0):
        points, planes, lengths = planar_clouds(2, noise=0.0, shift=shift, clutter=False)
        refit, _ = pointops.plane_refit(points.to(device), planes.to(device), 0.2, lengths.to(device))
        truth = torch.tensor([[0.0, 0.0, 1.0, shift], [1.0, 0.0, 0.0, 3.0 + shift], [0.0, -1.0, 0.0, 2.5 - shift]])
        scale = max(1.0, shift)
        # float32 coordinates at 1000 m are 6e-5 apart: the fit is exact to that resolution
        torch.testing.assert_close(refit[0, :3, :3].cpu(), truth[:, :3], rtol=0, atol=1e-6 * scale)
        torch.testing.assert_close(refit[0, :3, 3].cpu(), truth[:, 3], rtol=0, atol=1e-6 * scale)


def test_refit_keeps_the_orientation_of_the_guess(device):
    points, planes, lengths = planar_clouds(3)
    refit, _ = pointops.plane_refit(points.to(device), planes.to(device), 0.1, lengths.to(device))
    flipped, _ = pointops.plane_refit(points.to(device), -planes.to(device), 0.1, lengths.to(device))
    torch.testing.assert_close(flipped[..., :3], -refit[..., :3], equal_nan=True)


def test_refit_keeps_rows_it_cannot_determine(device):
    line = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [3.0, 3.0, 0.0], [9.0, 9.0, 9.0]]])
    planes = torch.tensor([[[0.0, 0.1, 0.995, 0.0], [1.0, 0.0, 0.0, 9.0]]])  # 4 collinear inliers, 1 inlier
    refit, inliers = pointops.plane_refit(line.to(device), planes.to(device), 0.5)
    assert inliers.tolist() == [[4, 1]]
    torch.testing.assert_close(refit.cpu(), planes, rtol=0, atol=0)


def test_empty_inputs(device):
    planes = torch.rand(2, 3, 4, device=device)
    assert pointops.plane_labels(torch.rand(2, 0, 3, device=device), planes, 0.1).shape == (2, 0)
    refit, inliers = pointops.plane_refit(torch.rand(2, 0, 3, device=device), planes, 0.1)
    assert torch.equal(refit, planes) and inliers.sum() == 0
    labels = pointops.plane_labels(torch.rand(2, 5, 3, device=device), planes[:, :0], 0.1)
    assert torch.all(labels == -1)
    refit, inliers = pointops.plane_refit(torch.rand(2, 5, 3, device=device), planes[:, :0], 0.1)
    assert refit.shape == (2, 0, 4) and inliers.shape == (2, 0)
    assert pointops.plane_labels(torch.rand(0, 5, 3, device=device), planes[:0], 0.1).shape == (0, 5)
    zero = torch.zeros(1, 4, 3, device=device)  # every coordinate 0: a zero extent
    refit, inliers = pointops.plane_refit(zero, torch.tensor([[[0.0, 0.0, 1.0, 0.0]]], device=device), 0.1)
    assert inliers.tolist() == [[4]] and refit.tolist() == [[[0.0, 0.0, 1.0, 0.0]]]


def test_other_dtypes_round_to_float32(device):
    points, planes, lengths = planar_clouds(4)
    expected = pointops.plane_refit(points.to(device), planes.to(device), 0.1, lengths.to(device))
    got = pointops.plane_refit(points.double().to(device), planes.double().to(device), 0.1, lengths.to(device))
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def test_bad_arguments(device):
    points = torch.rand(2, 10, 3, device=device)
    planes = torch.rand(2, 3, 4, device=device)
    cases = [
        ((points[..., :2], None, planes, 0.1), "points must have shape"),
        ((points.int(), None, planes, 0.1), "points must be float32"),
        ((points, None, planes[..., :3], 0.1), "planes must have shape"),
        ((points, None, planes[:1], 0.1), "planes must have shape"),
        ((points, None, torch.rand(2, 1025, 4, device=device), 0.1), "at most 1024"),
        ((points, None, planes, -0.1), "threshold must be finite and >= 0"),
        ((points, None, planes, NAN), "threshold must be finite and >= 0"),
        ((points, torch.tensor([10, 2], device=device, dtype=torch.int32), planes, 0.1), "lengths must be"),
    ]
    for op in (torch.ops.pointops.plane_labels, torch.ops.pointops.plane_refit):
        for args, message in cases:
            with pytest.raises(RuntimeError, match=message):
                op(*args)


@pytest.mark.cuda
def test_cpu_equals_cuda_bit_for_bit():
    g = torch.Generator().manual_seed(7)
    points = torch.randn(3, 20000, 3, generator=g) * torch.tensor([20.0, 20.0, 0.3]) + torch.tensor([5.0, -3.0, 1.0])
    points[1, ::7, 2] += 4.0  # a second, parallel layer
    planes = torch.randn(3, 40, 4, generator=g) * 0.05 + torch.tensor([0.0, 0.0, 1.0, 1.0])
    planes[:, 20:, 3] += 4.0
    planes[2, 3] = NAN
    lengths = torch.tensor([20000, 12345, 0])
    for threshold in (0.05, 0.5):
        labels = pointops.plane_labels(points, planes, threshold, lengths)
        assert torch.equal(pointops.plane_labels(points.cuda(), planes.cuda(), threshold, lengths.cuda()).cpu(), labels)
        refit, inliers = pointops.plane_refit(points, planes, threshold, lengths)
        for _ in range(2):  # repeated runs agree too (the moments are integer sums)
            got, got_inliers = pointops.plane_refit(points.cuda(), planes.cuda(), threshold, lengths.cuda())
            torch.testing.assert_close(got.cpu(), refit, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(got_inliers.cpu(), inliers)
        assert int(inliers.sum()) > 1000


@pytest.mark.cuda
def test_many_clouds_and_planes_on_cuda():
    # K = 1024 planes: the largest shared-memory layout
    g = torch.Generator().manual_seed(8)
    points = torch.rand(300, 50, 3, generator=g)
    planes = torch.cat([torch.rand(300, 1024, 3, generator=g) - 0.5, torch.rand(300, 1024, 1, generator=g) * 0.5], -1)
    cpu = pointops.plane_refit(points, planes, 0.02)
    cuda = pointops.plane_refit(points.cuda(), planes.cuda(), 0.02)
    torch.testing.assert_close(cuda[0].cpu(), cpu[0], rtol=0, atol=0)
    assert torch.equal(cuda[1].cpu(), cpu[1]) and int(cpu[1].sum()) > 0


# ---- plane_refit in bands ----


def test_refit_bands_are_refits_in_turn(device):
    points, planes, lengths = planar_clouds(5, noise=0.02)
    points, planes, lengths = points.to(device), planes.to(device), lengths.to(device)
    bands = [3.0, 2.0, 1.0, 0.5]
    got, inliers = pointops.plane_refit(points, planes, 0.05, lengths, bands)
    want = planes
    for band in bands:
        want, want_inliers = pointops.plane_refit(points, want, band * 0.05, lengths)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(inliers, want_inliers, rtol=0, atol=0)
    # one band is plane_refit itself; the bands follow the reference refit in turn
    torch.testing.assert_close(
        pointops.plane_refit(points, planes, 0.1, lengths, [1.0]).planes,
        pointops.plane_refit(points, planes, 0.1, lengths).planes,
        rtol=0,
        atol=0,
        equal_nan=True,
    )
    expected = planes.cpu()
    for band in (2.0, 1.0):
        expected, counts = reference.plane_refit(points.cpu(), expected, band * 0.05, lengths.cpu())
    refit, inliers = pointops.plane_refit(points, planes, 0.05, lengths, [2.0, 1.0])
    torch.testing.assert_close(inliers.cpu(), counts, rtol=0, atol=0)
    torch.testing.assert_close(refit.cpu(), expected, rtol=0, atol=2e-6, equal_nan=True)


def test_refit_bands_bad_arguments(device):
    points, planes = torch.rand(1, 10, 3, device=device), torch.rand(1, 2, 4, device=device)
    with pytest.raises(RuntimeError, match="bands must have at least one entry"):
        torch.ops.pointops.plane_refit(points, None, planes, 0.1, [])
    for bands in ([1.0, -2.0], [float("nan")], [float("inf")]):
        with pytest.raises(RuntimeError, match="bands must make thresholds band \\* threshold finite and >= 0"):
            torch.ops.pointops.plane_refit(points, None, planes, 0.1, bands)


# ---- plane_suppress ----


def suppress_cases(seed=0):
    """Rows (B, K, 4) with repeats of every kind: near-equal planes, flipped copies (-n, -d), a
    repeat of a row that is itself suppressed (kept: only kept rows suppress), NaN rows and a
    NaN normal with a finite offset, an Inf offset, non-unit normals, and random rows."""
    g = torch.Generator().manual_seed(seed)
    base = torch.tensor(
        [
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.01, 0.99995, 1.02],  # repeats row 0: suppressed
            [0.0, -0.02, -0.9998, -1.01],  # row 0 flipped: suppressed
            [0.0, 0.03, 0.99955, 1.15],  # near row 1 (suppressed) but too far from row 0: kept
            [NAN, NAN, NAN, NAN],
            [NAN, 0.0, 1.0, 1.0],  # NaN normal: close to nothing, kept
            [1.0, 0.0, 0.0, INF],
            [1.0, 0.0, 0.0, INF],  # Inf - Inf is NaN: kept
            [2.0, 0.0, 0.0, 3.0],  # non-unit: the plain dot product
            [0.0, 0.0, 1.0, 1.0],  # an exact repeat of row 0
        ]
    )
    random = torch.nn.functional.normalize(torch.randn(2, 40, 3, generator=g), dim=-1)
    random = torch.cat([random, torch.rand(2, 40, 1, generator=g) * 2], -1)
    random[:, 20:] = random[:, :20] + torch.randn(2, 20, 4, generator=g) * 0.01  # near repeats
    return torch.cat([base.expand(2, -1, -1), random], 1)


@pytest.mark.parametrize("max_angle, max_offset", [(0.05, 0.1), (0.2, 0.5), (0.0, 0.0), (3.2, 10.0)])
def test_suppress_matches_reference(device, max_angle, max_offset):
    planes = suppress_cases()
    got = pointops.plane_suppress(planes.to(device), max_angle, max_offset)
    assert got.dtype == torch.float32 and got.shape == planes.shape
    torch.testing.assert_close(
        got.cpu(), reference.plane_suppress(planes, max_angle, max_offset), rtol=0, atol=0, equal_nan=True
    )
    if max_angle == 0.05:
        kept = ~torch.isnan(got[0, :10, 3].cpu())
        assert kept.tolist() == [True, False, False, True, False, True, True, True, True, False]


def test_suppress_matches_the_pipeline_s_pytorch_loop(device):
    """The op's rule is the one detect_planes applied in PyTorch (angles in degrees there)."""
    planes = suppress_cases(1)
    for degrees, offset in ((4.0, 0.48), (1.0, 0.16)):
        torch.testing.assert_close(
            pointops.plane_suppress(planes.to(device), math.radians(degrees), offset).cpu(),
            reference._suppress_duplicates(planes, degrees, offset),
            rtol=0,
            atol=0,
            equal_nan=True,
        )


def test_suppress_keeps_the_strongest_of_each_group_and_other_dtypes(device):
    planes = suppress_cases(2).to(device)
    got = pointops.plane_suppress(planes, 0.1, 0.2)
    torch.testing.assert_close(pointops.plane_suppress(planes.double(), 0.1, 0.2), got, rtol=0, atol=0, equal_nan=True)
    for b in range(2):  # what a cloud keeps repeats nothing it keeps
        kept = got[b][~torch.isnan(got[b, :, 3])][None]
        torch.testing.assert_close(pointops.plane_suppress(kept, 0.1, 0.2), kept, rtol=0, atol=0, equal_nan=True)
    assert pointops.plane_suppress(planes[:, :0], 0.1, 0.2).shape == (2, 0, 4)
    assert pointops.plane_suppress(planes[:0], 0.1, 0.2).shape == (0, planes.shape[1], 4)


def test_suppress_bad_arguments(device):
    planes = torch.rand(2, 3, 4, device=device)
    op = torch.ops.pointops.plane_suppress
    cases = [
        ((planes[..., :3], 0.1, 0.1), "planes must have shape \\(B, K, 4\\)"),
        ((planes.int(), 0.1, 0.1), "planes must be float32"),
        ((torch.rand(1, 1025, 4, device=device), 0.1, 0.1), "at most 1024 rows"),
        ((planes, -0.1, 0.1), "max_angle must be finite and >= 0"),
        ((planes, NAN, 0.1), "max_angle must be finite and >= 0"),
        ((planes, 0.1, INF), "max_offset must be finite and >= 0"),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError, match=message):
            op(*args)


@pytest.mark.cuda
def test_suppress_cpu_equals_cuda_on_many_clouds():
    g = torch.Generator().manual_seed(9)
    planes = torch.randn(70, 1024, 4, generator=g)
    planes[:, 512:] = planes[:, :512] * -1 + torch.randn(70, 512, 4, generator=g) * 0.02
    planes[::3, ::7, 3] = NAN
    for args in ((0.3, 0.5), (0.05, 0.05)):
        torch.testing.assert_close(
            pointops.plane_suppress(planes.cuda(), *args).cpu(),
            pointops.plane_suppress(planes, *args),
            rtol=0,
            atol=0,
            equal_nan=True,
        )


@pytest.mark.cuda
def test_refit_bands_cpu_equals_cuda():
    g = torch.Generator().manual_seed(10)
    points = torch.randn(3, 20000, 3, generator=g) * torch.tensor([20.0, 20.0, 0.3])
    planes = torch.randn(3, 40, 4, generator=g) * 0.05 + torch.tensor([0.0, 0.0, 1.0, 0.0])
    lengths = torch.tensor([20000, 777, 0])
    want = pointops.plane_refit(points, planes, 0.3, lengths, [3.0, 2.0, 1.0, 0.5])
    got = pointops.plane_refit(points.cuda(), planes.cuda(), 0.3, lengths.cuda(), [3.0, 2.0, 1.0, 0.5])
    for a, b in zip(got, want):
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)
