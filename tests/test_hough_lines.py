"""Line Hough: scikit-image equality, exact references, detection, edge cases, errors, CPU == CUDA
bit for bit."""

import math

import numpy as np
import pytest
import torch

import pointops
from pointops.hough.detect_images import line_peaks, spans_half_turn
from pointops.scenes import synthetic_edges
from pointops.reference import hough as reference
from tests.hough_helpers import assert_equal, random_edges

skimage_transform = pytest.importorskip("skimage.transform")
skimage_draw = pytest.importorskip("skimage.draw")

NAN = float("nan")
INF = float("inf")


def skimage_lines(edges, theta=None):
    return np.stack([skimage_transform.hough_line(e.numpy(), theta)[0] for e in edges]).astype(np.int64)


def test_default_angles_and_distances_are_skimages():
    image = np.zeros((13, 29), dtype=bool)
    _, angles, dists = skimage_transform.hough_line(image)
    assert pointops.line_angles() == angles.tolist()  # bit for bit
    assert pointops.line_angles(7) == np.linspace(-np.pi / 2, np.pi / 2, 7, endpoint=False).tolist()
    assert pointops.line_distances(13, 29).tolist() == dists.tolist()
    assert pointops.rho_offset(13, 29) == (len(dists) - 1) // 2


@pytest.mark.parametrize("shape", [(3, 31, 46), (1, 1, 40), (2, 40, 1), (1, 64, 64)])
def test_counts_match_skimage_on_random_images(device, shape):
    edges = random_edges(*shape, density=0.15)
    acc = pointops.hough_lines(edges.to(device))
    assert acc.dtype == torch.int32
    assert_equal(acc.cpu().long(), torch.from_numpy(skimage_lines(edges)))


def test_counts_match_skimage_with_explicit_angles(device):
    edges = random_edges(2, 27, 35, 0.2, seed=1)
    g = torch.Generator().manual_seed(2)
    # any angles: outside [-pi/2, pi/2), repeated, exact multiples of pi/4 (rho on .5 boundaries)
    theta = (torch.rand(20, generator=g, dtype=torch.float64) * 8 - 4).tolist() + [
        0.0,
        math.pi / 4,
        math.pi / 3,
        -math.pi / 3,
        2.0,
        2.0,
    ]
    acc = pointops.hough_lines(edges.to(device), theta)
    assert acc.shape == (2, 2 * pointops.rho_offset(27, 35) + 1, len(theta))
    assert_equal(acc.cpu().long(), torch.from_numpy(skimage_lines(edges, np.array(theta))))


def test_counts_match_skimage_on_drawn_lines(device):
    scene = synthetic_edges(60, 80, n_circles=1, n_lines=4, noise=0.01, seed=4)
    acc = pointops.hough_lines(scene.edges[None].to(device))
    assert_equal(acc.cpu().long(), torch.from_numpy(skimage_lines(scene.edges[None])))


def ragged_points(seed=0, n=50, height=20, width=33):
    g = torch.Generator().manual_seed(seed)
    points = torch.stack(
        [torch.randint(-4, width + 4, (2, n), generator=g), torch.randint(-4, height + 4, (2, n), generator=g)], -1
    )
    points[0, 1] = points[0, 0]  # repeated: votes twice
    points[1, 0] = torch.tensor([-(2**40), 2])
    return points, torch.tensor([n, n - 17])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_point_lists_match_reference(device, dtype):
    points, lengths = ragged_points()
    if dtype == torch.int32:
        points = points.clamp(-100, 100)
    points = points.to(dtype)
    theta = pointops.line_angles(45)
    expected = reference.hough_lines_points(points, lengths, None, 20, 33, theta)
    assert_equal(pointops.hough_lines_points(points.to(device), [20, 33], theta, lengths.to(device)), expected)


def test_weighted_sums_are_exact_fixed_point(device):
    points, lengths = ragged_points(1)
    weights = torch.randn(2, 50, generator=torch.Generator().manual_seed(3)) * 5
    weights[0, 2], weights[0, 3], weights[1, 4] = NAN, -INF, -1e20
    theta = pointops.line_angles(30)
    expected = reference.hough_lines_points(points, lengths, weights, 20, 33, theta)
    acc = pointops.hough_lines_points(points.to(device), [20, 33], theta, lengths.to(device), weights.to(device))
    assert acc.dtype == torch.float32
    assert_equal(acc, expected)
    maps = random_edges(2, 15, 18, 0.3, seed=5).float() * 1.5
    assert_equal(
        pointops.hough_lines(maps.to(device), weighted=True).cpu(),
        torch.from_numpy(skimage_lines(maps > 0)).float() * 1.5,
    )


def test_empty_inputs(device):
    edges = torch.zeros(2, 10, 12, dtype=torch.bool, device=device)
    acc = pointops.hough_lines(edges)
    assert acc.shape == (2, 2 * 16 + 1, 180) and (acc == 0).all()
    assert pointops.hough_lines(edges, []).shape == (2, 33, 0)
    assert pointops.hough_lines(edges[:0]).shape == (0, 33, 180)
    assert pointops.hough_lines(torch.ones(1, 0, 7, dtype=torch.bool, device=device)).shape == (1, 15, 180)
    assert pointops.hough_lines(torch.ones(1, 0, 0, dtype=torch.bool, device=device)).shape == (1, 1, 180)
    weighted = pointops.hough_lines(edges.float(), weighted=True)
    assert weighted.dtype == torch.float32 and (weighted == 0).all()


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: torch.ops.pointops.hough_lines_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, 5, 5, [0.0, NAN]
            ),
            r"theta must be finite angles in radians",
        ),
        (
            lambda: torch.ops.pointops.hough_lines_points(
                torch.zeros(1, 4, 2, dtype=torch.float64), None, None, 5, 5, [0.0]
            ),
            "points must be int32 or int64 pixel coordinates, got Double",
        ),
        (
            lambda: torch.ops.pointops.hough_lines_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, None, -1, 5, [0.0]
            ),
            r"height and width must be in \[0, 32767\], got -1 and 5",
        ),
        (
            lambda: torch.ops.pointops.hough_lines_points(
                torch.zeros(1, 4, 2, dtype=torch.int32), None, torch.ones(1, 4, dtype=torch.int32), 5, 5, [0.0]
            ),
            "weights must be float32, float64, float16 or bfloat16, got Int",
        ),
    ],
)
def test_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ---- detection ----


def line_matched(found, truth, rho_tolerance=1.0, theta_tolerance=1e-6):
    """Every true line has a detection (rho, theta), either as given or as (-rho, theta +- pi)."""
    found = found[~torch.isnan(found[:, 0])]
    for rho, theta in truth.tolist():
        direct = ((found[:, 0] - rho).abs() <= rho_tolerance) & ((found[:, 1] - theta).abs() <= theta_tolerance)
        flipped = ((found[:, 0] + rho).abs() <= rho_tolerance) & (((found[:, 1] - theta).abs() - math.pi).abs() <= 0.02)
        if not (direct | flipped).any():
            return False
    return True


def test_detect_lines_recovers_drawn_lines(device):
    scenes = [synthetic_edges(90, 120, n_circles=0, n_lines=3, seed=s) for s in (0, 1)]
    edges = torch.stack([s.edges for s in scenes])
    det = pointops.detect_lines(edges.to(device), k=6, threshold=30)
    assert det.lines.shape == (2, 6, 2) and det.lines.dtype == torch.float32
    for b, scene in enumerate(scenes):
        assert line_matched(det.lines[b].cpu(), scene.lines)


def test_detect_lines_with_noise(device):
    scene = synthetic_edges(100, 100, n_circles=2, n_lines=2, noise=0.03, seed=6)
    det = pointops.detect_lines(scene.edges[None].to(device), k=2)
    assert line_matched(det.lines[0].cpu(), scene.lines)


def test_detect_lines_agrees_with_skimage_peaks(device):
    image = np.zeros((80, 100), dtype=bool)
    image[20, 5:95] = True  # horizontal: theta = -pi/2, at the seam
    image[5:75, 70] = True  # vertical: theta = 0
    for i in range(60):
        image[10 + i, 10 + i] = True  # diagonal
    hspace, angles, dists = skimage_transform.hough_line(image)
    votes, theta, rho = skimage_transform.hough_line_peaks(hspace, angles, dists, num_peaks=5)
    det = pointops.detect_lines(torch.from_numpy(image)[None].to(device), k=5)
    found = det.lines[0].cpu()
    found = found[~torch.isnan(found[:, 0])]
    assert len(found) == len(rho) == 3
    expected = sorted(zip(rho.tolist(), np.float32(theta).tolist()))
    assert sorted(map(tuple, found.tolist())) == expected
    assert sorted(det.votes[0].cpu()[:3].tolist()) == sorted(votes.astype(float).tolist())


def test_the_seam_glues_a_line_once():
    # a horizontal line votes at theta = -pi/2 (rho = -y) and, one bin across the seam, at
    # theta = pi/2 - 1 degree (rho ~ +y): one line, found once
    image = torch.zeros(1, 50, 60, dtype=torch.bool)
    image[0, 25, :] = True
    det = pointops.detect_lines(image, k=3, threshold=10)
    found = det.lines[0][~torch.isnan(det.lines[0, :, 0])]
    assert len(found) == 1 and found[0].tolist() == [-25.0, pytest.approx(-math.pi / 2)]
    # the same angles passed explicitly close the circle too, and so do finer ones
    for theta in (pointops.line_angles(), pointops.line_angles(360)):
        det = pointops.detect_lines(image, k=3, theta=theta, threshold=10)
        assert int((~torch.isnan(det.lines[0, :, 0])).sum()) == 1
    # angles that stop short of a half-turn do not wrap: the echo across the gap is a second peak
    det = pointops.detect_lines(image, k=3, theta=pointops.line_angles(360)[:359], threshold=10)
    assert int((~torch.isnan(det.lines[0, :, 0])).sum()) == 2


def test_which_angle_lists_wrap():
    assert spans_half_turn(pointops.line_angles()) and spans_half_turn(pointops.line_angles(7))
    assert spans_half_turn(np.linspace(0, np.pi, 100).tolist())  # the end point repeats the start
    assert spans_half_turn(np.linspace(np.pi / 3, 4 * np.pi / 3, 100).tolist())
    assert not spans_half_turn(pointops.line_angles()[:-1])  # a degree short
    assert not spans_half_turn(np.linspace(0, 2 * np.pi, 360).tolist())  # a whole turn: each line twice
    assert not spans_half_turn(pointops.line_angles()[::-1])  # descending
    assert not spans_half_turn([0.5]) and not spans_half_turn([])


@pytest.mark.parametrize("explicit", [False, True])
def test_a_plateau_is_one_line_whatever_the_angle_list(device, explicit):
    # two full columns 10 pixels apart: two bins of 100 votes, 10 rho bins apart at theta = 0.
    # Within min_distance = 15 they are one plateau; its first bin (rho 30) is the line, with the
    # default angles (the suppression glued across the seam) as with the same angles passed.
    image = torch.zeros(1, 100, 100, dtype=torch.bool)
    image[0, :, 30] = True
    image[0, :, 40] = True
    theta = pointops.line_angles(180) if explicit else None
    det = pointops.detect_lines(image.to(device), k=4, min_distance=15, theta=theta)
    assert det.lines[0, 0].tolist() == [30.0, 0.0] and det.votes[0].tolist() == [100, 0, 0, 0]
    # a plateau across the seam: the mirrored copy ranks its bins as the accumulator does
    acc = torch.zeros(1, 41, 12, dtype=torch.int32)
    acc[0, 20 + 3, 11] = 7  # rho 3 at the last angle ...
    acc[0, 20 - 5, 0] = 7  # ... and rho -5 at the first: (5, first angle + pi), 2 rho bins away
    for glue_theta in (None, pointops.line_angles(12)):
        det = line_peaks(acc.to(device), 3, theta=glue_theta, min_distance=3, min_angle=1)
        assert det.lines[0, 0, 0].item() == -5.0 and torch.isnan(det.lines[0, 1:]).all()


# ---- scikit-image's own hough_line_peaks tests, ported: their images, arguments and expected
# values (scikit-image tests/skimage/transform/test_hough_transform.py at cd0a3d2), run on
# pointops' accumulator and line_peaks. num_peaks=inf becomes k=50.


def skimage_peaks(image, theta=None, min_distance=9, min_angle=10, threshold=None, k=50, device="cpu"):
    edges = torch.from_numpy(np.asarray(image))[None].to(device)
    angles = pointops.line_angles() if theta is None else [float(t) for t in theta]
    acc = pointops.hough_lines(edges, angles)
    det = line_peaks(
        acc,
        k,
        theta=None if theta is None else angles,
        min_distance=min_distance,
        min_angle=min_angle,
        threshold=threshold,
    )
    found = ~torch.isnan(det.lines[0, :, 0])
    lines, votes = det.lines[0][found].cpu(), det.votes[0][found].cpu()
    return votes, lines[:, 1], lines[:, 0]  # scikit-image's (hspace, angles, dists)


def test_skimage_hough_line_peaks(device):
    img = np.zeros((100, 150), dtype=int)
    rr, cc = skimage_draw.line(60, 130, 80, 10)
    img[rr, cc] = 1
    votes, theta, dist = skimage_peaks(img, device=device)
    assert len(dist) == 1
    np.testing.assert_almost_equal(float(theta[0]), 1.41, 1)
    # Deliberately different: the peak is a plateau of two bins with 87 votes, (rho 80, angle bin
    # 171) and (81, 170). scikit-image rounds the plateau's centroid (half to even) and reports
    # dist 81.0, which the upstream test expects; pointops keeps the plateau's first bin, rho 80.
    acc = pointops.hough_lines(torch.from_numpy(img)[None], pointops.line_angles())[0]
    offset = (acc.shape[0] - 1) // 2
    assert acc[offset + 80, 171] == acc[offset + 81, 170] == acc.max() == votes[0] == 87
    assert float(dist[0]) == 80.0 and float(theta[0]) == np.float32(pointops.line_angles()[171])


def test_skimage_hough_line_peaks_ordered(device):
    testim = np.zeros((256, 64), dtype=bool)
    testim[50:100, 20] = True
    testim[20:225, 25] = True
    testim[15:35, 50] = True
    testim[1:-1, 58] = True
    hspace, _, _ = skimage_peaks(testim, device=device)
    assert hspace[0] > hspace[1]


def test_skimage_hough_line_peaks_single_line(device):
    img = np.zeros((100, 100), dtype=bool)
    img[30, :] = 1
    _, angles, dists = skimage_peaks(img, device=device)
    assert len(angles) == 1 and len(dists) == 1
    assert abs(float(angles[0]) - (-np.pi / 2)) < 0.01
    assert abs(float(dists[0]) - (-30)) < 0.01


def test_skimage_hough_line_peaks_dist(device):
    img = np.zeros((100, 100), dtype=bool)
    img[:, 30] = True
    img[:, 40] = True
    assert len(skimage_peaks(img, min_distance=5, device=device)[0]) == 2
    assert len(skimage_peaks(img, min_distance=15, device=device)[0]) == 1


def test_skimage_hough_line_peaks_angle(device):
    img = np.zeros((100, 100), dtype=bool)
    img[:, 0] = True
    img[0, :] = True
    for theta in (None, np.linspace(0, np.pi, 100), np.linspace(np.pi / 3, 4.0 / 3 * np.pi, 100)):
        assert len(skimage_peaks(img, theta, min_angle=45, device=device)[0]) == 2
        assert len(skimage_peaks(img, theta, min_angle=90, device=device)[0]) == 1


def test_skimage_hough_line_peaks_num(device):
    img = np.zeros((100, 100), dtype=bool)
    img[:, 30] = True
    img[:, 40] = True
    assert len(skimage_peaks(img, min_distance=0, min_angle=0, k=1, device=device)[0]) == 1


def test_skimage_hough_line_peaks_zero_input(device):
    img = np.zeros((100, 100), dtype="uint8")
    _, angles, _ = skimage_peaks(img, np.linspace(0, np.pi, 100), device=device)
    assert len(angles) == 0


def test_skimage_hough_line_peaks_single_angle(device):
    # scikit-image's regression test: one angle used to raise an IndexError
    img = torch.rand(100, 100, generator=torch.Generator().manual_seed(3663933399)).numpy()
    skimage_peaks(img, np.array([np.pi / 2]), threshold=2, device=device)


def test_line_peaks_padding_and_empty(device):
    acc = torch.zeros(2, 21, 180, dtype=torch.int32, device=device)
    acc[0, 4, 7] = 9
    det = line_peaks(acc, k=3)
    lines, votes = det.lines.cpu(), det.votes.cpu()
    assert lines[0, 0].tolist() == [-6.0, pytest.approx(pointops.line_angles()[7])] and votes[0].tolist() == [9, 0, 0]
    assert torch.isnan(lines[0, 1:]).all() and torch.isnan(lines[1]).all()
    empty = pointops.detect_lines(torch.zeros(0, 5, 5, dtype=torch.bool, device=device), k=2)
    assert empty.lines.shape == (0, 2, 2)


def glued_peaks(acc, min_distance, min_angle, min_votes, wanted):
    """Non-maximum suppression on the glued whole turn F = [acc, acc flipped along rho], spelled
    out offset by offset: a bin of F is a peak when its votes are > 0 and >= min_votes and no bin
    in its box (rho bins past the ends do not exist, angles wrap around the turn) has more votes,
    or the same votes and a lower rank, the rank being the index of the accumulator bin it reads
    (row-major) doubled, plus one in the mirrored copy. Returns F's peaks as (votes, rho bin, angle
    bin of F), ranked by votes, then rank, `wanted` of them, padded with 0 / -1."""
    batch, n_rho, n_theta = acc.shape
    full = torch.cat([acc, acc.flip(1)], 2).double()
    index = torch.arange(n_rho * n_theta).view(n_rho, n_theta) * 2
    rank = torch.cat([index, (index + 1).flip(0)], 1)
    ry, rx = min_distance, min(min_angle, n_theta)
    beaten = torch.zeros(full.shape, dtype=torch.bool)
    for a in range(-ry, ry + 1):
        for c in range(-rx, rx + 1):
            rows = torch.arange(n_rho) + a
            inside = (rows >= 0) & (rows < n_rho)
            nb = full[:, rows.clamp(0, n_rho - 1)].roll(-c, 2)
            nb_rank = rank[rows.clamp(0, n_rho - 1)].roll(-c, 1)
            beats = (nb > full) | ((nb == full) & (nb_rank < rank))
            beaten |= beats & inside.view(1, n_rho, 1)
    peak = ~beaten & (full > 0) & (full >= min_votes)
    votes = torch.zeros(batch, wanted, dtype=acc.dtype)
    index = -torch.ones(batch, wanted, 2, dtype=torch.int64)
    for b in range(batch):
        found = sorted((-float(full[b, d, j]), int(rank[d, j]), d, j) for d, j in peak[b].nonzero().tolist())
        for slot, (_, _, d, j) in enumerate(found[:wanted]):
            votes[b, slot] = acc.new_tensor(full[b, d, j].item())
            index[b, slot] = torch.tensor([d, j])
    return votes, index


def line_detections_reference(acc, theta, k, min_distance, min_angle, threshold, glue):
    """line_detections' rules spelled out (detections.h): hough_peaks without glue, the glued
    suppression above with it."""
    n_rho, n_theta = acc.shape[1:]
    wanted = 2 * k if glue else k
    min_votes = 0.0 if threshold is None else threshold
    if glue:
        votes, index = glued_peaks(acc, min_distance, min_angle, min_votes, wanted)
    else:
        votes, index = pointops.hough_peaks(
            acc, [min_distance, min(min_angle, n_theta)], wanted, min_votes=min_votes, periodic=[False, False]
        )
    limit = (
        torch.tensor(threshold, dtype=torch.float32)
        if threshold is not None
        else 0.5 * acc.flatten(1).amax(1).to(torch.float32).unsqueeze(1)
    )
    valid = (index[..., 0] >= 0) & (votes.to(torch.float32) > limit)
    lines = torch.full((acc.shape[0], k, 2), NAN)
    out_votes = torch.zeros(acc.shape[0], k)
    for b in range(acc.shape[0]):
        seen, slot = set(), 0
        for i in range(wanted):
            if not valid[b, i]:
                continue
            d, j = int(index[b, i, 0]), int(index[b, i, 1])
            if j >= n_theta:
                d, j = n_rho - 1 - d, j - n_theta
            if (d, j) in seen:
                continue
            seen.add((d, j))
            if slot < k:
                lines[b, slot] = torch.tensor([d - (n_rho - 1) // 2, theta[j]], dtype=torch.float64).to(torch.float32)
                out_votes[b, slot] = votes[b, i].to(torch.float32)
            slot += 1
    return lines, out_votes


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
@pytest.mark.parametrize("glue", [True, False])
@pytest.mark.parametrize("threshold", [None, 2.0])
def test_line_detections_match_the_rules(device, dtype, glue, threshold):
    g = torch.Generator().manual_seed(12)
    acc = torch.randint(-1, 6, (2, 45, 36), generator=g).to(dtype)
    theta = pointops.line_angles(36)
    for k, min_distance, min_angle in ((4, 3, 2), (30, 0, 0), (3, 9, 40)):
        expected = line_detections_reference(acc, theta, k, min_distance, min_angle, threshold, glue)
        actual = torch.ops.pointops.line_detections(acc.to(device), theta, k, min_distance, min_angle, threshold, glue)
        assert_equal(actual[0], expected[0])
        assert_equal(actual[1], expected[1])


def test_line_detections_empty(device):
    acc = torch.zeros(2, 0, 180, dtype=torch.int32, device=device)
    lines, votes = torch.ops.pointops.line_detections(acc, pointops.line_angles(), 3, 9, 10, None, True)
    assert lines.shape == (2, 3, 2) and torch.isnan(lines).all() and (votes == 0).all()
    lines, votes = torch.ops.pointops.line_detections(torch.zeros(2, 5, 0, device=device), [], 2, 9, 10, None, False)
    assert torch.isnan(lines).all()


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: torch.ops.pointops.line_detections(torch.ones(4, 4), [0.0] * 4, 2, 1, 1, None, False),
            r"acc must have shape \(B, n_rho, T\)",
        ),
        (
            lambda: torch.ops.pointops.line_detections(
                torch.ones(1, 4, 4, dtype=torch.long), [0.0] * 4, 2, 1, 1, None, False
            ),
            "acc must be int32 or float32, got Long",
        ),
        (
            lambda: torch.ops.pointops.line_detections(torch.ones(1, 4, 4), [0.0] * 3, 2, 1, 1, None, False),
            r"theta must have one angle per column of acc \(4\), got 3",
        ),
        (
            lambda: torch.ops.pointops.line_detections(torch.ones(1, 4, 4), [0.0] * 4, -1, 1, 1, None, False),
            "k must be >= 0, got -1",
        ),
        (
            lambda: torch.ops.pointops.line_detections(torch.ones(1, 4, 4), [0.0] * 4, 2, 1, -3, None, False),
            "min_angle must be >= 0, got -3",
        ),
        (
            lambda: torch.ops.pointops.line_detections(torch.ones(1, 4, 4), [0.0] * 4, 2, 1, 1, NAN, False),
            "threshold must not be NaN",
        ),
    ],
)
def test_line_detections_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ---- CPU == CUDA ----


@pytest.mark.cuda
@pytest.mark.parametrize("shape,n_theta", [((2, 120, 170), 180), ((1, 30, 3000), 64), ((6, 10, 12), 7)])
def test_cuda_equals_cpu_bitwise(shape, n_theta):
    edges = random_edges(*shape, density=0.1, seed=9)
    values = torch.rand(shape, generator=torch.Generator().manual_seed(10)) * edges
    theta = pointops.line_angles(n_theta)
    assert_equal(pointops.hough_lines(edges.cuda(), theta), pointops.hough_lines(edges, theta))
    assert_equal(
        pointops.hough_lines(values.cuda(), theta, weighted=True), pointops.hough_lines(values, theta, weighted=True)
    )
    points, lengths = ragged_points(2)
    cpu = pointops.hough_lines_points(points, [20, 33], None, lengths)
    assert_equal(pointops.hough_lines_points(points.cuda(), [20, 33], None, lengths.cuda()), cpu)
    # a 12000 x 12000 image: a rho column too long for shared memory (the global-atomic path)
    far = torch.randint(0, 12000, (1, 300, 2), generator=torch.Generator().manual_seed(11))
    assert_equal(
        pointops.hough_lines_points(far.cuda(), [12000, 12000], theta),
        pointops.hough_lines_points(far, [12000, 12000], theta),
    )


_LINE_MAPS = {}


def line_maps():
    """Random (1, 1601, 180) accumulators (a 640 x 480 image's) and their CPU detections, built
    once; random votes: many peaks, so the select pool is large. On CUDA the fused detections
    return at most 1,024 peaks per image (2k with glue): k=600 glued and k=1100 take the generic
    ones."""
    if not _LINE_MAPS:
        g = torch.Generator().manual_seed(13)
        theta = pointops.line_angles(180)
        for dtype in (torch.int32, torch.float32):
            acc = (torch.rand(1, 1601, 180, generator=g) * 30).to(dtype)
            for k in (4, 16, 500, 600, 1100):
                for glue, threshold in ((True, None), (False, None), (True, 12.0)):
                    expected = torch.ops.pointops.line_detections(acc, theta, k, 9, 10, threshold, glue)
                    _LINE_MAPS[(dtype, k, glue, threshold)] = (acc, expected)
    return _LINE_MAPS


@pytest.mark.cuda
def test_cuda_line_detections_equal_cpu_bitwise():
    theta = pointops.line_angles(180)
    for (_, k, glue, threshold), (acc, expected) in line_maps().items():
        cuda = torch.ops.pointops.line_detections(acc.cuda(), theta, k, 9, 10, threshold, glue)
        assert_equal(cuda[0], expected[0])
        assert_equal(cuda[1], expected[1])


@pytest.mark.cuda
def test_cuda_detect_lines_equals_cpu_bitwise():
    edges = random_edges(1, 1080, 1920, density=0.05, seed=14)
    cpu = pointops.detect_lines(edges, 16)
    cuda = pointops.detect_lines(edges.cuda(), 16)
    assert_equal(cuda.lines, cpu.lines)
    assert_equal(cuda.votes, cpu.votes)
