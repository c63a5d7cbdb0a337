"""Registration samples of the Hough ops (planes, peaks, plane fit; circles, lines and their
detections) and their wrappers, merged into tests/op_samples.py."""

from typing import Callable, Dict, List

import torch

import pointops
from pointops.hough.detect_images import circle_peaks, line_peaks
from tests.op_samples import WrapperCase


def _hough_planes_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(2)
    points = (torch.rand(2, 40, 3, generator=g) * 2 - 1).to(device)
    lengths = torch.tensor([40, 11], device=device)
    weights = torch.rand(2, 40, generator=g).to(device)
    return [
        (points, lengths, None, 4, 6, 0.2, 1.5),
        (points, None, weights, 3, 5, 0.3, 1.0),
        (points.double(), lengths, weights.double(), 2, 3, 0.25, 1.0),
    ]


def _hough_peaks_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(3)
    grid = torch.randint(0, 5, (2, 4, 5, 6), generator=g, dtype=torch.int32).to(device)
    return [
        (grid, [1, 1, 1], [False, False, False], 1.0, 8, True),
        (grid.float(), [1, 2, 0], [False, True, False], 2.0, 5, False),
        (grid[:, 0], [1, 1], [True, False], 0.0, 40, False),
    ]


def _plane_fit_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(4)
    points = (torch.rand(2, 50, 3, generator=g) * 2 - 1).to(device)
    points[..., 2] *= 0.05  # most points near the plane z = 0
    # an Inf row matches nothing and comes back as given (a NaN one would too, but opcheck's
    # comparisons take NaN != NaN)
    planes = torch.tensor(
        [[[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, float("inf")]]] * 2, device=device
    )
    lengths = torch.tensor([50, 17], device=device)
    return [
        (points, lengths, planes, 0.1),
        (points.double(), None, planes.double(), 0.02),
        (points, None, planes[:, :0], 0.1),
    ]


def _plane_refit_samples(device: str) -> List[tuple]:
    points, lengths, planes, _ = _plane_fit_samples(device)[0]
    return _plane_fit_samples(device) + [(points, lengths, planes, 0.05, [3.0, 2.0, 1.0, 0.5])]


def _plane_suppress_samples(device: str) -> List[tuple]:
    # no row repeats a kept one here (a suppressed row is NaN, which opcheck's comparisons take
    # NaN != NaN); tests/test_hough_detect_planes.py checks the suppression itself
    planes = torch.tensor(
        [
            [[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.5], [0.0, 0.0, -1.0, 0.4]],
            [[0.6, 0.8, 0.0, 2.0], [0.0, 0.0, 1.0, 2.0], [0.8, 0.6, 0.0, 2.0]],
        ],
        device=device,
    )
    return [
        (planes, 0.1, 0.2),
        (planes.double(), 0.0, 0.0),
        (planes[:, :0], 0.1, 0.2),
    ]


def _plane_detections_samples(device: str) -> List[tuple]:
    # k no more than the peaks there are (padding rows are NaN, and opcheck takes NaN != NaN)
    grid = torch.ops.pointops.hough_planes(_plane_scene(device), None, None, 6, 8, 0.25, 4.0)
    ball = torch.ops.pointops.hough_planes_ball(_plane_scene(device), None, None, 6, 8, 0.25, 4.0)
    return [
        (grid, 6, 8, 0.25, 4.0, 3, 1, 1.0),
        (grid.float(), 6, 8, 0.25, 4.0, 2, 0, 2.0),
        (ball, 6, 8, 0.25, 4.0, 4, 2, 1.0),
        (grid[:0], 6, 8, 0.25, 4.0, 3, 1, 1.0),
    ]


def _detect_planes_samples(device: str) -> List[tuple]:
    # every cloud holds its k planes (NaN rows, as opcheck takes NaN != NaN, are left to the tests)
    points = _plane_scene(device)
    lengths = torch.tensor([400, 250], device=device)
    return [
        (points, lengths, 3, 45, 45, 0.05, 8.0, 0.03, 0.02, 1.0, 2, 1, "grid"),  # 320 rho bins: rho windows on CUDA
        (points.double(), None, 2, 45, 45, 0.05, 8.0, 0.03, 0.02, 1.0, 2, 2, "grid"),
        (points, lengths, 3, 30, 60, 0.05, 8.0, 0.03, 0.02, 1.0, 1, 1, "ball"),
        (points, lengths, 0, 30, 30, 0.05, 8.0, 0.03, 0.02, 1.0, 2, 1, "grid"),
    ]


def _plane_fit_wrapper_args(device: str) -> tuple:
    points, lengths, planes, threshold = _plane_fit_samples(device)[0]
    return points, planes, threshold, lengths


def _plane_scene(device: str) -> torch.Tensor:
    """Two clouds of 400 points on three planes (floor, two walls) with a little noise."""
    g = torch.Generator().manual_seed(5)
    uv = torch.rand(2, 400, 2, generator=g) * 4 - 2
    which = torch.arange(400) % 3
    noise = torch.randn(2, 400, generator=g) * 0.005
    floor = torch.stack([uv[..., 0], uv[..., 1], noise], -1)
    wall_x = torch.stack([2.0 + noise, uv[..., 0], uv[..., 1] + 2], -1)
    wall_y = torch.stack([uv[..., 0], 2.0 + noise, uv[..., 1] + 2], -1)
    points = torch.where((which == 0).view(1, -1, 1), floor, torch.where((which == 1).view(1, -1, 1), wall_x, wall_y))
    return points.to(device)


def _edges(device: str, batch: int = 2, height: int = 14, width: int = 17, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, height, width, generator=g) < 0.15).to(device)


def _points(device: str):
    g = torch.Generator().manual_seed(1)
    points = torch.stack([torch.randint(-2, 19, (2, 30), generator=g), torch.randint(-2, 16, (2, 30), generator=g)], -1)
    weights = torch.rand(2, 30, generator=g) * 2 - 0.5
    gradients = torch.randn(2, 30, 2, generator=g)
    return points.to(device), torch.tensor([30, 12], device=device), weights.to(device), gradients.to(device)


def _edge_points_samples(device: str) -> List[tuple]:
    edges = _edges(device)
    return [
        (edges, -1),
        (edges.float() * 0.5, 7),
        (edges[:, :0], -1),
        (edges.to(torch.uint8)[:0], -1),
    ]


def _hough_circles_samples(device: str) -> List[tuple]:
    points, lengths, weights, gradients = _points(device)
    return [
        (points, lengths, None, None, 16, 19, [0, 2, 5, 30], 0.0),
        (points.to(torch.int32), None, weights, None, 16, 19, [3, 4], 0.0),
        (points, lengths, None, gradients, 16, 19, [1, 6], 0.3),
        (points, lengths, weights.double(), gradients, 16, 19, [2], 0.2),
        (points[:, :0], None, None, None, 16, 19, [2], 0.0),
    ]


def _hough_circles_max_samples(device: str) -> List[tuple]:
    points, lengths, weights, gradients = _points(device)
    return [
        (points, lengths, None, None, 16, 19, [0, 2, 5, 30], 0.0, False),
        (points.to(torch.int32), None, weights, None, 16, 19, [4, 3, 4], 0.0, True),
        (points, lengths, None, gradients, 16, 19, [1, 6], 0.3, True),
        (points[:, :0], None, None, None, 16, 19, [2], 0.0, False),
    ]


def _hough_lines_samples(device: str) -> List[tuple]:
    points, lengths, weights, _ = _points(device)
    return [
        (points, lengths, None, 16, 19, pointops.line_angles(12)),
        (points.to(torch.int32), None, weights, 16, 19, [0.0, 0.5, -2.0]),
        (points, lengths, None, 16, 19, []),
        (points[:0], None, None, 16, 19, [0.1]),
    ]


def _hough_circles_map_samples(device: str) -> List[tuple]:
    edges = _edges(device)
    return [
        (edges, [0, 2, 5, 30]),
        (edges.float() * 0.5, [3, 4, 3]),
        (edges[:, :0], [2]),
        (edges, []),
    ]


def _hough_circles_max_map_samples(device: str) -> List[tuple]:
    edges = _edges(device)
    return [
        (edges, [0, 2, 5, 30], False),
        (edges.to(torch.uint8), [4, 3, 4], True),
        (edges[:0], [2], False),
    ]


def _circle_detections_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 6, (2, 9, 11), generator=g, dtype=torch.int32).to(device)
    index = torch.randint(0, 3, (2, 9, 11), generator=g).to(device)
    return [
        (scores, index, [4, 6, 8], 3, 1, None),
        (scores.float() / 7, index, [4, 6, 8], 5, 0, 0.2),
        (scores[:, :0], index[:, :0], [4], 0, 1, None),  # (NaN rows fail opcheck's equality)
        (scores, index, [4, 6, 8], 0, 2, 1.0),
    ]


def _line_detections_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(4)
    acc = torch.randint(0, 6, (2, 21, 12), generator=g, dtype=torch.int32).to(device)
    return [
        (acc, pointops.line_angles(12), 3, 2, 2, None, True),
        (acc.float() / 3, [0.1 * j for j in range(12)], 4, 1, 3, 0.5, False),
        (acc[:0], pointops.line_angles(12), 2, 9, 10, None, True),
        (acc[:, :, :0], [], 0, 9, 10, None, False),  # (NaN rows fail opcheck's equality)
    ]


def _scene(device: str) -> torch.Tensor:
    return pointops.synthetic_edges(40, 48, n_circles=2, radii=(6, 12), n_lines=2, seed=2).edges[None].to(device)


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "hough_planes": _hough_planes_samples,
    "hough_planes_ball": _hough_planes_samples,
    "hough_peaks": _hough_peaks_samples,
    "plane_labels": _plane_fit_samples,
    "plane_refit": _plane_refit_samples,
    "plane_suppress": _plane_suppress_samples,
    "plane_detections": _plane_detections_samples,
    "detect_planes": _detect_planes_samples,
    "edge_points": _edge_points_samples,
    "hough_circles_points": _hough_circles_samples,
    "hough_circles_max_points": _hough_circles_max_samples,
    "hough_lines_points": _hough_lines_samples,
    "hough_circles_map": _hough_circles_map_samples,
    "hough_circles_max_map": _hough_circles_max_map_samples,
    "circle_detections": _circle_detections_samples,
    "line_detections": _line_detections_samples,
}

WRAPPER_CASES: Dict[str, WrapperCase] = {
    "hough_planes": WrapperCase(
        pointops.hough_planes,
        lambda d: (torch.rand(2, 30, 3, device=d), 0.25, 2.0, torch.tensor([30, 9], device=d), 4, 5),
    ),
    "hough_planes_ball": WrapperCase(
        pointops.hough_planes_ball,
        lambda d: (torch.rand(2, 30, 3, device=d), 0.25, 2.0, None, 4, 6, torch.rand(2, 30, device=d)),
    ),
    "hough_peaks": WrapperCase(
        pointops.hough_peaks, lambda d: (torch.randint(0, 4, (2, 6, 7), dtype=torch.int32, device=d), [1, 1], 5)
    ),
    "hough_plane_peaks": WrapperCase(
        pointops.hough_plane_peaks, lambda d: (torch.randint(0, 4, (2, 4, 5, 6), dtype=torch.int32, device=d), 5)
    ),
    "peaks_to_planes": WrapperCase(
        pointops.peaks_to_planes,
        lambda d: (torch.tensor([[[0, 1, 2], [-1, -1, -1]]], device=d), 4, 5, 0.25, 2.0),
    ),
    "ball_peaks_to_planes": WrapperCase(
        pointops.ball_peaks_to_planes, lambda d: (torch.tensor([[[3, 1], [-1, -1]]], device=d), 4, 6, 0.25, 2.0)
    ),
    "plane_labels": WrapperCase(pointops.plane_labels, lambda d: _plane_fit_wrapper_args(d)),
    "plane_refit": WrapperCase(pointops.plane_refit, lambda d: _plane_fit_wrapper_args(d)),
    "plane_refit_bands": WrapperCase(pointops.plane_refit, lambda d: _plane_fit_wrapper_args(d) + ([3.0, 1.0],)),
    "plane_suppress": WrapperCase(pointops.plane_suppress, lambda d: (_plane_suppress_samples(d)[0][0], 0.1, 0.2)),
    "plane_detections": WrapperCase(pointops.plane_detections, lambda d: _plane_detections_samples(d)[0][:6]),
    "detect_planes": WrapperCase(
        pointops.detect_planes, lambda d: (_plane_scene(d), 3, torch.tensor([400, 250], device=d), "indoor")
    ),
    "edge_points": WrapperCase(pointops.edge_points, lambda d: (_edges(d),)),
    "hough_circles": WrapperCase(pointops.hough_circles, lambda d: (_edges(d), [1, 3, 6])),
    "hough_circles_normalized": WrapperCase(pointops.hough_circles, lambda d: (_edges(d).float(), [2, 4], True, True)),
    "hough_circles_gradients": WrapperCase(
        pointops.hough_circles, lambda d: (_edges(d), [2, 5], False, False, torch.randn(2, 2, 14, 17, device=d), 0.3)
    ),
    "hough_circles_max": WrapperCase(pointops.hough_circles_max, lambda d: (_edges(d), [1, 3, 6])),
    "hough_circles_max_weighted": WrapperCase(
        pointops.hough_circles_max, lambda d: (_edges(d).float() * 0.5, [2, 4], True, True)
    ),
    "hough_circles_points": WrapperCase(
        pointops.hough_circles_points, lambda d: (_points(d)[0], [2, 7], [16, 19], _points(d)[1], _points(d)[2])
    ),
    "hough_lines": WrapperCase(pointops.hough_lines, lambda d: (_edges(d),)),
    "hough_lines_points": WrapperCase(
        pointops.hough_lines_points, lambda d: (_points(d)[0], [16, 19], [0.0, 1.0, 2.0], _points(d)[1])
    ),
    "detect_circles": WrapperCase(pointops.detect_circles, lambda d: (_scene(d), [5, 6, 7, 8, 10, 12], 3, 3)),
    "detect_lines": WrapperCase(pointops.detect_lines, lambda d: (_scene(d), 3)),
    "circle_peaks": WrapperCase(
        circle_peaks, lambda d: (torch.randint(0, 5, (2, 3, 9, 10), dtype=torch.int32, device=d), [2, 3, 4], 4, 1, 2.0)
    ),
    "line_peaks": WrapperCase(
        line_peaks, lambda d: (torch.randint(0, 5, (2, 21, 18), dtype=torch.int32, device=d), 4, None, 2, 2)
    ),
}
