"""detect_planes: finds the ground-truth planes of generated scenes, on CPU and CUDA; the op
returns what the pipeline written in PyTorch on the plane ops returned (pointops.reference.hough),
bit for bit; it replays from a CUDA graph."""

import math

import pytest
import torch

import pointops
from pointops.reference import hough as reference
from pointops.scenes import lidar

SMALL = dict(n_phi=45, n_theta=45, rho_step=0.2, rho_max=50.0)  # coarse grid: fast on a CPU


def small_scan(seed, **options):
    return lidar.lidar_scan(
        lidar.make_scene(seed), n_beams=24, n_azimuth=512, range_noise=0.02, clutter=0.1, seed=seed, **options
    )


def test_finds_the_ground_and_large_walls(device):
    scan = small_scan(0)
    det = pointops.detect_planes(scan.points[None].to(device), 6, iterations=2, **SMALL)
    assert det.planes.shape == (1, 6, 4) and det.votes.shape == (1, 6) and det.labels.shape == (1, len(scan.points))
    planes = det.planes[0].cpu()
    found = planes[~torch.isnan(planes[:, 3])]
    score = lidar.evaluate_planes(found, scan.planes, scan.labels)
    assert score.recall == 1.0 and score.precision >= 0.75
    # the ground's points get the ground's detection
    ground = scan.labels == 0
    detected_ground = det.labels[0].cpu()[ground]
    assert (detected_ground == detected_ground.mode().values).float().mean() > 0.95


def test_batch_with_lengths_and_padding(device):
    a, b = small_scan(1), small_scan(2)
    n = max(len(a.points), len(b.points)) + 10
    points = torch.full((2, n, 3), float("nan"))
    points[0, : len(a.points)] = a.points
    points[1, : len(b.points)] = b.points
    points[1, len(b.points) :] = 1000.0  # past lengths: must be ignored
    lengths = torch.tensor([len(a.points), len(b.points)])
    det = pointops.detect_planes(points.to(device), 4, lengths.to(device), **SMALL)
    assert (det.labels[1, len(b.points) :] == -1).all()
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


def _padded_batch(scans, extra_columns=0):
    """The scans' points as one padded batch (B, N, 3 + extra_columns) with lengths: NaN padding,
    and a far point past one cloud's length (ignored)."""
    n = max(len(s.points) for s in scans) + 7
    points = torch.full((len(scans), n, 3 + extra_columns), float("nan"))
    for row, scan in enumerate(scans):
        points[row, : len(scan.points), :3] = scan.points
    points[..., 3:] = 1.0
    points[-1, len(scans[-1].points) :, :3] = 1000.0
    return points, torch.tensor([len(s.points) for s in scans])


def _assert_same(got, want):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0, equal_nan=True)


# (k, n_phi, n_theta, rho_step, rho_max, distance_threshold, min_inliers, min_votes, peak_radius, iterations, layout)
PIPELINE_CASES = [
    (8, 45, 45, 0.2, 50.0, 0.08, 0.02, 1.0, 2, 1, "grid"),
    (8, 45, 45, 0.2, 50.0, 0.08, 0.02, 1.0, 2, 3, "grid"),
    (6, 30, 60, 0.25, 50.0, 0.1, 0.05, 20.0, 1, 1, "ball"),
    (6, 45, 45, 0.2, 50.0, 0.08, 0.0, 1.0, 2, 2, "ball"),
]


@pytest.mark.parametrize("args", PIPELINE_CASES)
def test_op_returns_the_pipeline_written_in_pytorch(device, args):
    """Planes, votes and labels equal reference.detect_planes (the pipeline as it was written in
    PyTorch on the plane ops: a refit op call per band, the duplicate suppression a Python loop,
    the bin-centre tables made per call), bit for bit: on a batch with lengths, NaN padding and an
    extra column, in both layouts, one round or several."""
    points, lengths = _padded_batch([small_scan(4), small_scan(5)], extra_columns=1)
    points, lengths = points.to(device), lengths.to(device)
    got = torch.ops.pointops.detect_planes(points, lengths, *args)
    want = reference.detect_planes(points, args[0], lengths, *args[1:])
    _assert_same(got, want)
    assert (~torch.isnan(got[0][..., 3])).sum() >= 3  # the scenes' planes are there to compare


def test_op_returns_the_pipeline_with_the_outdoor_preset(device):
    scan = small_scan(6)
    preset = pointops.plane_preset("outdoor")
    args = (
        8,
        preset.n_phi,
        preset.n_theta,
        preset.rho_step,
        preset.rho_max,
        preset.distance_threshold,
        preset.min_inliers,
    )
    points = scan.points[None].double().to(device)  # rounded to float32 by both
    _assert_same(
        torch.ops.pointops.detect_planes(points, None, *args), reference.detect_planes(points, args[0], None, *args[1:])
    )
    _assert_same(pointops.detect_planes(points, 8), torch.ops.pointops.detect_planes(points, None, *args))


def test_op_names_its_arguments():
    points = torch.rand(1, 20, 3)
    args = [points, None, 2, 9, 9, 0.2, 5.0, 0.05, 0.02, 1.0, 2, 1, "grid"]
    for index, value, message in [
        (2, 1025, "k must be in \\[0, 1024\\], got 1025"),
        (11, 0, "iterations must be >= 1"),
        (7, 0.0, "distance_threshold must be finite and > 0"),
        (8, 1.5, "min_inliers must be a share in \\[0, 1\\]"),
        (12, "cube", "layout must be"),
        (5, float("inf"), "rho_step must be finite"),
        (3, 0, "n_phi must be in"),
        (10, -1, "peak_radius must be >= 0"),
    ]:
        bad = list(args)
        bad[index] = value
        with pytest.raises(RuntimeError, match=message):
            torch.ops.pointops.detect_planes(*bad)
    with pytest.raises(RuntimeError, match="points must have shape"):
        torch.ops.pointops.detect_planes(points[..., :2], *args[1:])
    with pytest.raises(RuntimeError, match="lengths must be"):
        torch.ops.pointops.detect_planes(points, torch.tensor([20], dtype=torch.int32), *args[2:])


def _replay_equals_eager(run, refill):
    """Captures run() in a CUDA graph after a warm-up call on a side stream (torch.cuda.graphs'
    recipe; the first call makes the plane tables), replays it, then refills the static inputs
    and replays again: each replay equals an eager call on the same inputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = run()
    for step in range(2):
        if step:
            refill()
        graph.replay()
        torch.cuda.synchronize()
        _assert_same(static_out, run())
        assert (~torch.isnan(static_out[0][..., 3])).sum() >= 4
    return static_out


@pytest.mark.cuda
@pytest.mark.parametrize("layout, iterations", [("grid", 1), ("grid", 2), ("ball", 2)])
def test_cuda_graph_replays_detect_planes(layout, iterations):
    first, lengths = _padded_batch([small_scan(7), small_scan(8)])
    second, second_lengths = _padded_batch([small_scan(9), small_scan(10)])
    n = max(first.shape[1], second.shape[1])
    static = torch.full((2, n, 3), float("nan"), device="cuda")
    static[:, : first.shape[1]] = first.cuda()
    static_lengths = lengths.cuda()

    def refill():
        static.fill_(float("nan"))
        static[:, : second.shape[1]] = second.cuda()
        static_lengths.copy_(second_lengths)

    out = _replay_equals_eager(
        lambda: pointops.detect_planes(
            static, 6, static_lengths, preset="outdoor", iterations=iterations, layout=layout
        ),
        refill,
    )
    assert torch.equal(out.labels[:, second.shape[1] :].cpu(), torch.full((2, n - second.shape[1]), -1))


@pytest.mark.cuda
def test_a_first_call_inside_a_capture_asks_for_a_warm_up():
    points = torch.rand(1, 200, 3, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="call the op once before capturing"):
        with torch.cuda.graph(graph):  # a grid no other test uses: its tables do not exist yet
            torch.ops.pointops.detect_planes(points, None, 2, 13, 17, 0.0123, 1.5, 0.05, 0.02)
    out = torch.ops.pointops.detect_planes(points, None, 2, 13, 17, 0.0123, 1.5, 0.05, 0.02)  # eager: fine
    assert out[0].shape == (1, 2, 4)


@pytest.mark.cuda
def test_cuda_op_returns_the_pipeline_on_full_scans():
    """The default preset on three 32-beam scans, CUDA: the op equals the PyTorch pipeline on
    CUDA and the op on the CPU."""
    batch = lidar.batch_scenes(range(3), n_beams=32, n_azimuth=1024, range_noise=0.02, clutter=0.1)
    preset = pointops.plane_preset("outdoor")
    args = (
        8,
        preset.n_phi,
        preset.n_theta,
        preset.rho_step,
        preset.rho_max,
        preset.distance_threshold,
        preset.min_inliers,
    )
    got = torch.ops.pointops.detect_planes(batch.points.cuda(), batch.lengths.cuda(), *args)
    _assert_same(got, reference.detect_planes(batch.points.cuda(), args[0], batch.lengths.cuda(), *args[1:]))
    _assert_same(got, torch.ops.pointops.detect_planes(batch.points, batch.lengths, *args))
