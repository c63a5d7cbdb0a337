"""detect_planes: finds the ground-truth planes of generated scenes, on CPU and CUDA."""
import math

import pytest
import torch

import pointops
from pointops.scenes import lidar

SMALL = dict(n_phi=45, n_theta=45, rho_step=0.2, rho_max=50.0)  # coarse grid: fast on a CPU


def small_scan(seed, **options):
    return lidar.lidar_scan(lidar.make_scene(seed), n_beams=24, n_azimuth=512, range_noise=0.02,
                               clutter=0.1, seed=seed, **options)


def test_finds_the_ground_and_large_walls(device):
    scan = small_scan(0)
    det = pointops.detect_planes(scan.points[None].to(device), 6, iterations=2, **SMALL)
    assert det.planes.shape == (1, 6, 4) and det.votes.shape == (1, 6) and det.labels.shape == (1, len(scan.points))
    planes = det.planes[0].cpu()
    found = planes[~torch.isnan(planes[:, 3])]
    score = lidar.evaluate_planes(found, scan.planes, scan.labels)
    assert score.recall == 1.0 and score.precision >= 0.75
    # the ground's points get the ground's detection
    ground = (scan.labels == 0)
    detected_ground = det.labels[0].cpu()[ground]
    assert (detected_ground == detected_ground.mode().values).float().mean() > 0.95


def test_batch_with_lengths_and_padding(device):
    a, b = small_scan(1), small_scan(2)
    n = max(len(a.points), len(b.points)) + 10
    points = torch.full((2, n, 3), float("nan"))
    points[0, : len(a.points)] = a.points
    points[1, : len(b.points)] = b.points
    points[1, len(b.points):] = 1000.0  # past lengths: must be ignored
    lengths = torch.tensor([len(a.points), len(b.points)])
    det = pointops.detect_planes(points.to(device), 4, lengths.to(device), **SMALL)
    assert (det.labels[1, len(b.points):] == -1).all()
    for row, scan in ((0, a), (1, b)):
        planes = det.planes[row].cpu()
        found = planes[~torch.isnan(planes[:, 3])]
        assert lidar.evaluate_planes(found, scan.planes, scan.labels).recall == 1.0
    # a single cloud gives the same planes as its row in the batch
    single = pointops.detect_planes(a.points[None].to(device), 4, **SMALL)
    torch.testing.assert_close(single.planes[0], det.planes[0], equal_nan=True)


def test_refit_beats_the_bin_centre(device):
    # one tilted plane: the bins are 4 degrees wide, the refit lands within a fraction of one
    g = torch.Generator().manual_seed(0)
    uv = torch.rand(4000, 2, generator=g) * 10 - 5
    normal = torch.tensor([0.1, 0.2, 1.0]) / math.sqrt(1.05)
    u = torch.nn.functional.normalize(torch.cross(normal, torch.tensor([1.0, 0, 0]), dim=0), dim=0)
    v = torch.cross(normal, u, dim=0)
    points = 2.5 * normal + uv[:, :1] * u + uv[:, 1:] * v
    det = pointops.detect_planes(points[None].to(device), 1, **SMALL)
    plane = det.planes[0, 0].cpu()
    assert math.degrees(math.acos(min(1.0, abs(float(plane[:3] @ normal))))) < 0.05
    assert abs(abs(float(plane[3])) - 2.5) < 1e-3
    assert (det.labels == 0).all()


def test_no_planes_and_empty_inputs(device):
    det = pointops.detect_planes(torch.rand(2, 50, 3, device=device), 0, **SMALL)
    assert det.planes.shape == (2, 0, 4) and (det.labels == -1).all()
    det = pointops.detect_planes(torch.full((1, 30, 3), float("nan"), device=device), 3, **SMALL)
    assert torch.isnan(det.planes).all() and (det.votes == 0).all() and (det.labels == -1).all()
    det = pointops.detect_planes(torch.rand(0, 10, 3, device=device), 2, **SMALL)
    assert det.planes.shape == (0, 2, 4)


def test_ball_layout_finds_the_ground(device):
    scan = small_scan(3)
    det = pointops.detect_planes(scan.points[None].to(device), 4, layout="ball", **SMALL)
    found = det.planes[0].cpu()
    found = found[~torch.isnan(found[:, 3])]
    assert lidar.evaluate_planes(found, scan.planes, scan.labels).found[0]  # plane 0 is the ground


def test_bad_arguments():
    points = torch.rand(1, 10, 3)
    with pytest.raises(ValueError, match="preset"):
        pointops.detect_planes(points, 2, preset="moon")
    with pytest.raises(ValueError, match="layout"):
        pointops.detect_planes(points, 2, layout="cube")
    with pytest.raises(ValueError, match="iterations"):
        pointops.detect_planes(points, 2, iterations=0)


@pytest.mark.cuda
def test_cuda_detection_repeats_and_equals_the_cpu_on_lidar_scans():
    """detect_planes on CUDA: two identical calls give identical planes, votes and labels, and the
    same bits as the CPU (the peaks' planes come from one CPU-made normal table; refits and labels
    are exact ops)."""
    batch = lidar.batch_scenes(range(3), n_beams=32, n_azimuth=1024, range_noise=0.02, clutter=0.1)
    cpu = pointops.detect_planes(batch.points, 6, batch.lengths, preset="outdoor", iterations=2)
    first = pointops.detect_planes(batch.points.cuda(), 6, batch.lengths.cuda(), preset="outdoor", iterations=2)
    second = pointops.detect_planes(batch.points.cuda(), 6, batch.lengths.cuda(), preset="outdoor", iterations=2)
    for a, b, c in zip(first, second, cpu):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(a.cpu(), c, rtol=0, atol=0, equal_nan=True)


@pytest.mark.cuda
@pytest.mark.slow
def test_cuda_detection_repeats_on_a_million_points():
    scan = lidar.lidar_scan(lidar.make_scene(0), range_noise=0.02, clutter=0.1, seed=0).points
    points = scan.repeat((1_000_000 + len(scan) - 1) // len(scan), 1)[:1_000_000].unsqueeze(0).cuda()
    first = pointops.detect_planes(points, 16)
    for _ in range(3):
        again = pointops.detect_planes(points, 16)
        for a, b in zip(first, again):
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
