"""Circle Hough: scikit-image equality, exact references, edge compaction, detection, edge cases,
errors, CPU == CUDA bit for bit."""

import numpy as np
import pytest
import torch

import pointops
from pointops.hough.detect_images import circle_peaks
from pointops.scenes import synthetic_edges
from pointops.reference import hough as reference
from tests.hough_helpers import assert_equal, random_edges

skimage_transform = pytest.importorskip("skimage.transform")
skimage_draw = pytest.importorskip("skimage.draw")

NAN = float("nan")
INF = float("inf")


def skimage_circles(edges, radii, normalize=False):
    return np.stack([skimage_transform.hough_circle(e.numpy(), radii, normalize=normalize) for e in edges])


# ---- edge compaction ----


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float16, torch.float32])
def test_edge_points_are_numpy_nonzero_in_order(device, dtype):
    edges = random_edges(3, 37, 53, 0.2).to(dtype)
    edges[1] = 0
    if dtype.is_floating_point:
        edges[2, 4, 5] = NAN  # nonzero, as in numpy
        edges[2, 4, 6] = -0.0  # zero
    points, lengths = pointops.edge_points(edges.to(device))
    assert points.dtype == torch.int32 and points.shape == (3, 37 * 53, 2)
    for b in range(3):
        rows, cols = np.nonzero(edges[b].float().numpy())
        assert int(lengths[b]) == len(rows)
        expected = torch.from_numpy(np.stack([cols, rows], 1)).to(torch.int32)
        assert_equal(points[b, : len(rows)], expected)
        assert (points[b, len(rows) :] == -1).all()
    assert_equal(points, reference.edge_points(edges)[0])


def test_edge_points_spanning_many_tiles(device):
    # several 4096-pixel tiles per image, a partial last tile, images of different counts
    edges = random_edges(2, 150, 97, 0.3, seed=1)
    edges[1, :75] = False
    points, lengths = pointops.edge_points(edges.to(device))
    expected_points, expected_lengths = reference.edge_points(edges)
    assert_equal(points, expected_points)
    assert_equal(lengths, expected_lengths)


def test_edge_points_capacity(device):
    edges = random_edges(2, 20, 30, 0.3)
    points, lengths = pointops.edge_points(edges.to(device), capacity=25)
    expected_points, expected_lengths = reference.edge_points(edges, 25)
    assert points.shape == (2, 25, 2) and lengths.tolist() == [25, 25]
    assert_equal(points, expected_points)
    empty_points, empty_lengths = pointops.edge_points(edges.to(device), capacity=0)
    assert empty_points.shape == (2, 0, 2) and empty_lengths.tolist() == [0, 0]


@pytest.mark.parametrize("shape", [(0, 5, 5), (2, 0, 5), (2, 5, 0)])
def test_edge_points_empty(device, shape):
    points, lengths = pointops.edge_points(torch.ones(shape, dtype=torch.bool, device=device))
    assert points.shape == (shape[0], shape[1] * shape[2], 2) and lengths.shape == (shape[0],)
    assert (lengths == 0).all()


def test_edge_points_errors():
    with pytest.raises(RuntimeError, match=r"edges must have shape \(B, H, W\)"):
        torch.ops.pointops.edge_points(torch.ones(4, 4), -1)
    with pytest.raises(RuntimeError, match="capacity must be >= 0, or -1 for H \\* W, got -2"):
        torch.ops.pointops.edge_points(torch.ones(1, 4, 4), -2)


# ---- accumulator: scikit-image and the reference ----


def test_counts_match_skimage_on_random_images(device):
    edges = random_edges(3, 31, 46, 0.08)
    radii = [0, 1, 2, 3, 7, 12, 20, 40, 80]  # 40 and 80: larger than the image, circles cross it
    acc = pointops.hough_circles(edges.to(device), radii)
    assert acc.dtype == torch.int32 and acc.shape == (3, len(radii), 31, 46)
    assert_equal(acc.cpu().long(), torch.from_numpy(skimage_circles(edges, radii)).long())


def test_counts_match_skimage_on_drawn_circles(device):
    scene = synthetic_edges(64, 72, n_circles=4, radii=(5, 30), inside=False, noise=0.01, arc=0.8, seed=3)
    radii = list(range(4, 32, 3))
    acc = pointops.hough_circles(scene.edges[None].to(device), radii)
    assert_equal(acc.cpu().long(), torch.from_numpy(skimage_circles(scene.edges[None], radii)).long())


def test_normalize_matches_skimage(device):
    edges = random_edges(2, 25, 30, 0.1, seed=2)
    radii = [1, 4, 9, 15]
    acc = pointops.hough_circles(edges.to(device), radii, normalize=True)
    assert acc.dtype == torch.float32
    # skimage adds 1/n per vote in float64; ours divides the count once in float32
    torch.testing.assert_close(
        acc.cpu().double(), torch.from_numpy(skimage_circles(edges, radii, normalize=True)), rtol=1e-6, atol=1e-6
    )
    for r in radii:
        assert pointops.circle_perimeter_size(r) == len(skimage_draw.circle_perimeter(0, 0, r)[0])


def ragged_points(seed=0, n=40, height=24, width=30):
    """Two point lists with repeats, points outside the image (also huge int64 ones) and a
    length below P."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, width + 3, (2, n), generator=g)
    y = torch.randint(-3, height + 3, (2, n), generator=g)
    points = torch.stack([x, y], -1)
    points[0, 5] = points[0, 4]  # a repeated point votes twice
    points[1, 2] = torch.tensor([2**40, 3])
    points[1, 3] = torch.tensor([5, -(2**35)])
    return points, torch.tensor([n, n - 13])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_point_lists_match_reference(device, dtype):
    points, lengths = ragged_points()
    if dtype == torch.int32:
        points = points.clamp(-100, 100)
    points = points.to(dtype)
    radii = [0, 3, 8, 17]
    expected = reference.hough_circles_points(points, lengths, None, None, 24, 30, radii)
    acc = pointops.hough_circles_points(points.to(device), radii, [24, 30], lengths.to(device))
    assert_equal(acc, expected)
    assert int(acc[1].sum()) > 0


def test_weighted_sums_are_exact_fixed_point(device):
    points, lengths = ragged_points(1)
    g = torch.Generator().manual_seed(5)
    weights = torch.randn(2, 40, generator=g) * 3
    weights[0, 0], weights[0, 1], weights[0, 2] = NAN, INF, 1e30  # no vote, no vote, clamped to 2^24
    weights[1, 0] = 1e-9  # rounds to 0: no vote
    radii = [2, 6, 11]
    expected = reference.hough_circles_points(points, lengths, weights, None, 24, 30, radii)
    acc = pointops.hough_circles_points(points.to(device), radii, [24, 30], lengths.to(device), weights.to(device))
    assert acc.dtype == torch.float32
    assert_equal(acc, expected)
    # float64 weights are rounded to float32 first
    acc64 = pointops.hough_circles_points(
        points.to(device), radii, [24, 30], lengths.to(device), weights.double().to(device)
    )
    assert_equal(acc64, expected)


def test_weighted_map_counts_pixel_values(device):
    edges = random_edges(2, 20, 22, 0.2, seed=4).float() * 0.75
    radii = [3, 5]
    acc = pointops.hough_circles(edges.to(device), radii, weighted=True)
    expected = torch.from_numpy(skimage_circles(edges > 0, radii)).float() * 0.75
    assert_equal(acc.cpu(), expected)


def radial_gradients(edges, centre):
    """The gradient (gx, gy) of a disc: pointing from `centre` to each pixel."""
    height, width = edges.shape[-2:]
    ys, xs = torch.meshgrid(
        torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32), indexing="ij"
    )
    return torch.stack([xs - centre[0], ys - centre[1]])


def test_gradient_mode_matches_reference(device):
    points, lengths = ragged_points(2)
    g = torch.Generator().manual_seed(6)
    gradients = torch.randn(2, 40, 2, generator=g)
    gradients[0, 0] = 0.0  # no direction: no vote
    gradients[0, 1, 0] = NAN
    gradients[1, 4] = torch.tensor([1e30, -3e29])  # huge but finite: still steers
    gradients[1, 5] = torch.tensor([0.0, 2.0])  # vertical: votes straight up and down
    radii = [0, 4, 9, 15]
    for angle in (0.05, 0.4, 1.3):
        expected = reference.hough_circles_points(points, lengths, None, gradients, 24, 30, radii, angle)
        acc = pointops.hough_circles_points(
            points.to(device), radii, [24, 30], lengths.to(device), gradients=gradients.to(device), max_angle=angle
        )
        assert_equal(acc, expected)


def test_gradient_mode_keeps_the_centre_and_cuts_votes(device):
    scene = synthetic_edges(60, 60, n_circles=1, radii=(15, 15), seed=7)
    x, y, r = (int(v) for v in scene.circles[0])
    gradients = radial_gradients(scene.edges, (x, y))[None]
    edges = scene.edges[None].to(device)
    full = pointops.hough_circles(edges, [r]).cpu()
    steered = pointops.hough_circles(edges, [r], gradients=gradients.to(device), max_angle=0.05).cpu()
    assert steered[0, 0, y, x] == full[0, 0, y, x] == pointops.circle_perimeter_size(r)
    assert steered.sum() < full.sum() / 10


# ---- best radius per centre ----


@pytest.mark.parametrize("mode", ["counts", "normalize", "weighted", "weighted_normalize", "gradients"])
def test_circles_max_is_the_accumulator_max(device, mode):
    g = torch.Generator().manual_seed(12)
    edges = random_edges(2, 33, 41, 0.08, seed=13)
    edges[1, :, :20] = False  # large regions where every radius scores 0: ties go to radius 0
    values = (torch.rand(2, 33, 41, generator=g) - 0.3) * edges  # negative weights too
    radii = [9, 0, 4, 4, 15, 60, 2]  # any order, repeats, one larger than the image
    kwargs = {"normalize": mode.endswith("normalize")}
    source = edges
    if mode.startswith("weighted"):
        kwargs["weighted"] = True
        source = values
    if mode == "gradients":
        kwargs.update(gradients=torch.randn(2, 2, 33, 41, generator=g).to(device), max_angle=0.25)
    scores, index = pointops.hough_circles_max(source.to(device), radii, **kwargs)
    best, arg = pointops.hough_circles(source.to(device), radii, **kwargs).max(1)
    assert scores.dtype == (torch.int32 if mode in ("counts", "gradients") else torch.float32)
    assert index.dtype == torch.int64 and index.shape == (2, 33, 41)
    assert_equal(scores, best)
    assert_equal(index, arg)


def test_circles_max_edge_cases(device):
    edges = torch.zeros(2, 6, 7, dtype=torch.bool, device=device)
    scores, index = pointops.hough_circles_max(edges, [3, 1])
    assert_equal(scores, torch.zeros(2, 6, 7, dtype=torch.int32))
    assert_equal(index, torch.zeros(2, 6, 7, dtype=torch.int64))
    assert pointops.hough_circles_max(edges[:0], [3])[0].shape == (0, 6, 7)
    assert pointops.hough_circles_max(edges[:, :0], [3], normalize=True)[0].dtype == torch.float32
    with pytest.raises(RuntimeError, match="radii must hold at least one radius for hough_circles_max"):
        pointops.hough_circles_max(edges, [])


# ---- edge maps: hough_circles_map, hough_circles_max_map ----


def points_path(edges, radii, normalize=None):
    """The same accumulator through edge_points and the point-list op."""
    points, lengths = pointops.edge_points(edges)
    if normalize is None:
        return torch.ops.pointops.hough_circles_points(
            points, lengths, None, None, edges.shape[1], edges.shape[2], radii, 0.0
        )
    return torch.ops.pointops.hough_circles_max_points(
        points, lengths, None, None, edges.shape[1], edges.shape[2], radii, 0.0, normalize
    )


@pytest.mark.parametrize(
    "case",
    [
        ((2, 31, 46), 0.08, [0, 1, 2, 3, 7, 12, 20, 40, 80]),  # radii larger than the image
        ((1, 70, 100), 0.3, list(range(5, 60, 3))),  # several bands and lists of radii
        ((3, 17, 33), 0.9, [0, 1, 2, 40]),  # dense: counts reach the ring sizes (every bit plane)
        ((1, 9, 2100), 0.05, [3, 9, 40]),  # wider than 1,024 pixels: two column tiles
        ((1, 40, 50), 0.5, [500, 2000, 3]),  # CUDA: a band too tall for shared memory (the points path)
        ((1, 60, 30), 0.5, [400, 3]),  # CUDA: one word per row, a ring of 2,272 offsets (12 planes)
        ((1, 24, 30), 0.1, list(range(3, 300))),  # more than 256 radii: at least two lists
    ],
)
def test_map_ops_equal_the_point_path(device, case):
    shape, density, radii = case
    edges = random_edges(*shape, density=density, seed=21).to(device)
    assert_equal(torch.ops.pointops.hough_circles_map(edges, radii), points_path(edges, radii))
    for normalize in (False, True):
        scores, index = torch.ops.pointops.hough_circles_max_map(edges, radii, normalize)
        expected_scores, expected_index = points_path(edges, radii, normalize)
        assert_equal(scores, expected_scores)
        assert_equal(index, expected_index)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float16, torch.float32])
def test_map_ops_take_any_dtype(device, dtype):
    edges = random_edges(2, 20, 37, 0.2, seed=22).to(dtype)
    if dtype.is_floating_point:
        edges[0, 3, 4] = NAN  # nonzero: an edge
        edges[0, 3, 5] = -0.0  # zero
    expected = points_path(edges.to(device), [2, 5, 9])
    assert_equal(torch.ops.pointops.hough_circles_map(edges.to(device), [2, 5, 9]), expected)
    assert_equal(
        torch.ops.pointops.hough_circles_max_map(edges.to(device), [5, 2, 9], False)[1],
        points_path(edges.to(device), [5, 2, 9], False)[1],
    )


def test_map_ops_empty(device):
    edges = torch.zeros(2, 10, 12, dtype=torch.bool, device=device)
    assert_equal(torch.ops.pointops.hough_circles_map(edges, [1, 3]), torch.zeros(2, 2, 10, 12, dtype=torch.int32))
    assert torch.ops.pointops.hough_circles_map(edges, []).shape == (2, 0, 10, 12)
    assert torch.ops.pointops.hough_circles_map(edges[:, :0], [2]).shape == (2, 1, 0, 12)
    scores, index = torch.ops.pointops.hough_circles_max_map(edges[:0], [2], True)
    assert scores.shape == (0, 10, 12) and scores.dtype == torch.float32 and index.dtype == torch.int64
    scores, index = torch.ops.pointops.hough_circles_max_map(edges, [4, 2], False)
    assert_equal(scores, torch.zeros(2, 10, 12, dtype=torch.int32))
    assert_equal(index, torch.zeros(2, 10, 12, dtype=torch.int64))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: torch.ops.pointops.hough_circles_map(torch.ones(4, 4), [1]), r"edges must have shape \(B, H, W\)"),
        (
            lambda: torch.ops.pointops.hough_circles_map(torch.ones(1, 4, 40000, dtype=torch.bool), [1]),
            r"edges must have H and W in \[0, 32767\], got shape \[1, 4, 40000\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_map(torch.ones(1, 4, 4, dtype=torch.complex64), [1]),
            "edges must be a real or bool tensor, got ComplexFloat",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_map(torch.ones(1, 4, 4), [3, -1]),
            r"radii must be in \[0, 32767\], got \[3, -1\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_max_map(torch.ones(1, 4, 4), [], False),
            "radii must hold at least one radius for hough_circles_max_map",
        ),
    ],
)
def test_map_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ---- edge cases and errors ----


def test_empty_inputs(device):
    edges = torch.zeros(2, 10, 12, dtype=torch.bool, device=device)
    assert_equal(pointops.hough_circles(edges, [1, 3]), torch.zeros(2, 2, 10, 12, dtype=torch.int32))
    assert pointops.hough_circles(edges, []).shape == (2, 0, 10, 12)
    assert pointops.hough_circles(edges[:0], [2]).shape == (0, 1, 10, 12)
    assert pointops.hough_circles(torch.ones(2, 0, 7, dtype=torch.bool, device=device), [2]).shape == (2, 1, 0, 7)
    assert pointops.hough_circles(torch.ones(2, 7, 0, dtype=torch.bool, device=device), [2]).shape == (2, 1, 7, 0)
    weighted = pointops.hough_circles(edges.float(), [2], weighted=True)
    assert weighted.dtype == torch.float32 and (weighted == 0).all()
    points = torch.zeros(2, 0, 2, dtype=torch.int64, device=device)
    assert_equal(pointops.hough_circles_points(points, [2], [5, 6]), torch.zeros(2, 1, 5, 6, dtype=torch.int32))


def test_radius_larger_than_the_image_only_reaches_in_from_outside(device):
    edges = torch.zeros(1, 9, 9, dtype=torch.bool)
    edges[0, 4, 4] = True
    acc = pointops.hough_circles(edges.to(device), [5, 30]).cpu()
    assert acc[0, 1].sum() == 0  # every centre of radius 30 is outside a 9 x 9 image
    assert_equal(acc.long(), torch.from_numpy(skimage_circles(edges, [5, 30])).long())


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: torch.ops.pointops.hough_circles_points(torch.zeros(1, 4, 2), None, None, None, 5, 5, [1], 0.0),
            "points must be int32 or int64 pixel coordinates, got Float",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 3, dtype=torch.int32), None, None, None, 5, 5, [1], 0.0
            ),
            r"points must have shape \(B, P, 2\) \(x, y\), got shape \[1, 4, 3\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, None, 5, 5, [1, -2], 0.0
            ),
            r"radii must be in \[0, 32767\], got \[1, -2\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, None, 5, 5, [40000], 0.0
            ),
            r"radii must be in \[0, 32767\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, None, 40000, 5, [1], 0.0
            ),
            r"height and width must be in \[0, 32767\], got 40000 and 5",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, torch.ones(1, 3), None, 5, 5, [1], 0.0
            ),
            r"weights must have shape \[1, 4\], got \[1, 3\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), torch.tensor([2, 2]), None, None, 5, 5, [1], 0.0
            ),
            r"lengths must have shape \[1\], got \[2\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, torch.ones(1, 4, 3), 5, 5, [1], 0.1
            ),
            r"gradients must have shape \[1, 4, 2\], got \[1, 4, 3\]",
        ),
        (
            lambda: torch.ops.pointops.hough_circles_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, torch.ones(1, 4, 2), 5, 5, [1], 1.6
            ),
            r"max_angle must be in \(0, pi / 2\) radians with gradients, got 1.6",
        ),
        (lambda: pointops.hough_circles(torch.ones(4, 4), [1]), r"edges must have shape \(B, H, W\), got 2 dims"),
        (
            lambda: pointops.hough_circles(torch.ones(1, 4, 4), [1], gradients=torch.ones(1, 2, 4, 5)),
            r"gradients must have shape \(B, 2, H, W\) matching edges",
        ),
    ],
)
def test_errors(call, message):
    with pytest.raises((RuntimeError, ValueError), match=message):
        call()


# ---- detection ----


def batch_of_scenes(seeds, **kw):
    scenes = [synthetic_edges(80, 96, **kw, seed=s) for s in seeds]
    return torch.stack([s.edges for s in scenes]), scenes


def matched(found, truth, tolerance):
    """Every true circle has a detection within `tolerance` in x, y and r."""
    found = found[~torch.isnan(found[:, 0])]
    if len(found) == 0:
        return len(truth) == 0
    distance = (found.unsqueeze(0) - truth.unsqueeze(1)).abs().amax(-1)  # (true, found)
    return bool((distance.amin(1) <= tolerance).all())


def test_detect_circles_recovers_clean_circles_exactly(device):
    edges, scenes = batch_of_scenes([0, 1, 2], n_circles=3, radii=(8, 20), min_separation=25)
    det = pointops.detect_circles(edges.to(device), list(range(6, 23)), k=5, min_distance=5, threshold=0.0)
    for b, scene in enumerate(scenes):
        found = det.circles[b].cpu()
        assert found.dtype == torch.float32 and found.shape == (5, 3)
        assert matched(found, scene.circles, 0)
        for x, y, r in scene.circles.tolist():  # a whole circle scores its offset count
            row = (found == torch.tensor([x, y, r])).all(1)
            assert float(det.votes[b].cpu()[row][0]) == pointops.circle_perimeter_size(int(r))


def test_detect_circles_with_noise_and_broken_arcs(device):
    edges, scenes = batch_of_scenes([3, 4], n_circles=3, radii=(10, 22), min_separation=30, noise=0.02, arc=0.6)
    det = pointops.detect_circles(edges.to(device), list(range(8, 25)), k=3, min_distance=8, normalize=True)
    for b, scene in enumerate(scenes):
        assert matched(det.circles[b].cpu(), scene.circles, 1)


def test_detect_circles_overlapping(device):
    edges = torch.zeros(1, 70, 70, dtype=torch.bool)
    truth = torch.tensor([[30.0, 34.0, 18.0], [42.0, 36.0, 15.0]])  # overlapping discs, centres 12 apart
    from pointops.scenes.edges import _draw_circle

    for x, y, r in truth.long().tolist():
        _draw_circle(edges[0], x, y, r, 1.0, 0.0)
    det = pointops.detect_circles(edges.to(device), list(range(10, 22)), k=2, min_distance=4)
    assert matched(det.circles[0].cpu(), truth, 0)


def test_detect_circles_crossing_the_border(device):
    edges = torch.zeros(1, 50, 60, dtype=torch.bool)
    from pointops.scenes.edges import _draw_circle

    _draw_circle(edges[0], 3, 25, 12, 1.0, 0.0)  # the left part is cut off by the border
    det = pointops.detect_circles(edges.to(device), list(range(8, 16)), k=1)
    assert det.circles[0, 0].cpu().tolist() == [3.0, 25.0, 12.0]


def test_detect_circles_agrees_with_skimage_peaks(device):
    edges, scenes = batch_of_scenes([5], n_circles=3, radii=(9, 20), min_separation=30)
    radii = list(range(8, 22))
    acc = skimage_transform.hough_circle(edges[0].numpy(), radii, normalize=False)
    votes, cx, cy, rad = skimage_transform.hough_circle_peaks(
        acc, radii, min_xdistance=5, min_ydistance=5, threshold=20, total_num_peaks=3
    )
    det = pointops.detect_circles(edges.to(device), radii, k=3, min_distance=5, threshold=20)
    expected = sorted(zip(cx.tolist(), cy.tolist(), rad.tolist()))
    assert sorted(tuple(int(v) for v in row) for row in det.circles[0].cpu().tolist()) == expected


def test_detect_circles_padding_and_empty(device):
    edges = torch.zeros(2, 30, 30, dtype=torch.bool)
    from pointops.scenes.edges import _draw_circle

    _draw_circle(edges[0], 15, 15, 8, 1.0, 0.0)
    det = pointops.detect_circles(edges.to(device), [6, 8, 10], k=4, min_distance=3)
    circles, votes = det.circles.cpu(), det.votes.cpu()
    assert circles[0, 0].tolist() == [15.0, 15.0, 8.0] and torch.isnan(circles[0, 1:]).all()
    assert torch.isnan(circles[1]).all() and (votes[1] == 0).all() and (votes[0, 1:] == 0).all()
    assert pointops.detect_circles(edges[:0].to(device), [5], k=2).circles.shape == (0, 2, 3)
    assert torch.isnan(pointops.detect_circles(edges.to(device), [], k=2).circles).all()


def test_detect_circles_negative_scores_give_padding(device):
    # every score below 0: no peak, and the default threshold (half the best score) is negative;
    # the padding rows stay NaN
    edges = torch.zeros(1, 12, 14)
    edges[0, 6, 7] = -1.0
    det = pointops.detect_circles(edges.to(device), [2, 3], k=3, weighted=True)
    assert torch.isnan(det.circles.cpu()).all() and (det.votes.cpu() == 0).all()


def circle_detections_reference(scores, radius_index, radii, k, min_distance, threshold):
    """circle_detections' rules spelled out with hough_peaks (detections.h)."""
    min_votes = 0.0 if threshold is None else max(threshold, 0.0)
    votes, index = pointops.hough_peaks(scores, [min_distance, min_distance], k, min_votes=min_votes)
    limit = (
        torch.tensor(min_votes, dtype=torch.float32)
        if threshold is not None
        else 0.5 * scores.flatten(1).amax(1).to(torch.float32).unsqueeze(1)
    )
    keep = (index[..., 0] >= 0) & (votes.to(torch.float32) > limit)
    flat = (index[..., 0] * scores.shape[2] + index[..., 1]).clamp(min=0)
    r = torch.tensor(radii)[radius_index.flatten(1).gather(1, flat)]
    circles = torch.stack([index[..., 1], index[..., 0], r], -1).to(torch.float32)
    return (
        torch.where(keep.unsqueeze(-1), circles, torch.full_like(circles, NAN)),
        torch.where(keep, votes.to(torch.float32), torch.zeros_like(circles[..., 0])),
    )


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
@pytest.mark.parametrize("threshold", [None, 0.0, 2.5, -1.0])
def test_circle_detections_match_the_rules(device, dtype, threshold):
    g = torch.Generator().manual_seed(23)
    scores = torch.randint(-1, 7, (3, 37, 41), generator=g).to(dtype)
    if dtype == torch.float32:
        scores = scores + torch.rand(3, 37, 41, generator=g).round(decimals=1)  # ties and near-ties
    index = torch.randint(0, 4, (3, 37, 41), generator=g)
    radii = [5, 9, 11, 30]
    for k, min_distance in ((5, 2), (40, 0), (3, 7)):
        expected = circle_detections_reference(scores, index, radii, k, min_distance, threshold)
        actual = torch.ops.pointops.circle_detections(
            scores.to(device), index.to(device), radii, k, min_distance, threshold
        )
        assert_equal(actual[0], expected[0])
        assert_equal(actual[1], expected[1])


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(4, 4), torch.zeros(4, 4, dtype=torch.long), [1], 2, 1, None
            ),
            r"scores must have shape \(B, H, W\)",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4, dtype=torch.double), torch.zeros(1, 4, 4, dtype=torch.long), [1], 2, 1, None
            ),
            "scores must be int32 or float32, got Double",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 5, dtype=torch.long), [1], 2, 1, None
            ),
            r"radius_index must have shape \[1, 4, 4\], got \[1, 4, 5\]",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.int), [1], 2, 1, None
            ),
            "radius_index must be Long, got Int",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.long), [1], -1, 1, None
            ),
            "k must be >= 0, got -1",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.long), [1], 2, -2, None
            ),
            "min_distance must be >= 0, got -2",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.long), [1], 2, 1, NAN
            ),
            "threshold must not be NaN",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.long), [], 2, 1, None
            ),
            "radii must hold at least one radius for circle_detections",
        ),
        (
            lambda: torch.ops.pointops.circle_detections(
                torch.ones(1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.long), [40000], 2, 1, None
            ),
            r"radii must be in \[0, 32767\], got \[40000\]",
        ),
    ],
)
def test_circle_detections_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_circle_peaks_ties_go_to_the_first_radius_and_lowest_index():
    acc = torch.zeros(1, 3, 6, 6, dtype=torch.int32)
    acc[0, 1, 2, 2] = acc[0, 2, 2, 2] = 5  # one centre, two radii tie: the first wins
    acc[0, 0, 2, 4] = 5  # a neighbouring centre with the same score, later in row-major order
    det = circle_peaks(acc, [3, 4, 5], k=2, min_distance=2)
    assert det.circles[0, 0].tolist() == [2.0, 2.0, 4.0] and torch.isnan(det.circles[0, 1]).all()


# ---- CPU == CUDA ----


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape,radii",
    [
        ((2, 200, 260), list(range(5, 60, 4))),  # several bands and radius groups
        ((1, 40, 2100), [3, 9, 30]),  # two 2048-column tiles
        ((3, 17, 23), [0, 1, 2, 40]),
    ],
)
def test_cuda_equals_cpu_bitwise(shape, radii):
    edges = random_edges(*shape, density=0.05, seed=8)
    weights = torch.rand(shape, generator=torch.Generator().manual_seed(9)) * edges
    for kwargs in ({}, {"weighted": True}, {"gradients": torch.randn(shape[0], 2, *shape[1:]), "max_angle": 0.2}):
        source = weights if kwargs.get("weighted") else edges
        cpu = pointops.hough_circles(source, radii, **kwargs)
        cuda_kwargs = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        assert_equal(pointops.hough_circles(source.cuda(), radii, **cuda_kwargs), cpu)
        cpu_best = pointops.hough_circles_max(source, radii, normalize=True, **kwargs)
        cuda_best = pointops.hough_circles_max(source.cuda(), radii, normalize=True, **cuda_kwargs)
        assert_equal(cuda_best[0], cpu_best[0])
        assert_equal(cuda_best[1], cpu_best[1])
        assert_equal(
            pointops.hough_circles_max(source.cuda(), radii, **cuda_kwargs)[1],
            pointops.hough_circles_max(source, radii, **kwargs)[1],
        )
    many = list(range(3, 300, 1))  # more than 255 radii: several chunks of the best-radius kernel
    small = random_edges(1, 24, 30, 0.1, seed=14)
    assert_equal(pointops.hough_circles_max(small.cuda(), many)[1], pointops.hough_circles_max(small, many)[1])
    points, lengths = ragged_points(3)
    cpu = pointops.hough_circles_points(points, [1, 7, 13], [24, 30], lengths)
    assert_equal(pointops.hough_circles_points(points.cuda(), [1, 7, 13], [24, 30], lengths.cuda()), cpu)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape,radii",
    [
        ((2, 130, 150), list(range(10, 26))),  # 16 radii: the lists split 8 ways
        ((64, 40, 48), [5, 7, 9]),  # a batch: one list, 8 words' warps per block
        ((1, 300, 1500), [20, 45, 70]),  # two column tiles of 24 words, rows spanning several blocks
        ((1, 7, 5), [0, 1, 2, 3]),  # one word per row
    ],
)
def test_cuda_map_ops_equal_cpu_bitwise(shape, radii):
    edges = random_edges(*shape, density=0.1, seed=24)
    cpu = torch.ops.pointops.hough_circles_map(edges, radii)
    assert_equal(torch.ops.pointops.hough_circles_map(edges.cuda(), radii), cpu)
    for normalize in (False, True):
        cpu_scores, cpu_index = torch.ops.pointops.hough_circles_max_map(edges, radii, normalize)
        scores, index = torch.ops.pointops.hough_circles_max_map(edges.cuda(), radii, normalize)
        assert_equal(scores, cpu_scores)
        assert_equal(index, cpu_index)


_DETECTION_MAPS = {}


def detection_maps():
    """Random 400 x 600 best-radius maps (int32 and float32) and their CPU detections, built once.
    min_distance 0 makes every positive centre a peak: 240k candidates, a pool (k=1000) too large
    for one select pass. k=1100 (more than 1,024 peaks) and min_distance 40 (a box too large for a
    tile's shared memory) take the generic detections on CUDA, the others the fused kernels."""
    if not _DETECTION_MAPS:
        g = torch.Generator().manual_seed(25)
        for dtype in (torch.int32, torch.float32):
            scores = (torch.rand(2, 400, 600, generator=g) * 50).to(dtype)
            index = torch.randint(0, 3, (2, 400, 600), generator=g)
            for k, min_distance in ((16, 5), (64, 0), (1000, 0), (1000, 1), (1100, 0), (16, 40)):
                for threshold in (None, 10.0):
                    expected = torch.ops.pointops.circle_detections(
                        scores, index, [4, 8, 12], k, min_distance, threshold
                    )
                    _DETECTION_MAPS[(dtype, k, min_distance, threshold)] = (scores, index, expected)
    return _DETECTION_MAPS


@pytest.mark.cuda
def test_cuda_circle_detections_equal_cpu_bitwise():
    for (_, k, min_distance, threshold), (scores, index, expected) in detection_maps().items():
        cuda = torch.ops.pointops.circle_detections(scores.cuda(), index.cuda(), [4, 8, 12], k, min_distance, threshold)
        assert_equal(cuda[0], expected[0])
        assert_equal(cuda[1], expected[1])
