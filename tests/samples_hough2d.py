"""Registration samples of the 2D Hough ops and wrappers (merged into tests/op_samples.py)."""
from typing import Callable, Dict, List

import torch

import pointops
from pointops.hough.detect_images import circle_peaks, line_peaks
from tests.op_samples import WrapperCase


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


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "edge_points": _edge_points_samples,
    "hough_circles": _hough_circles_samples,
    "hough_circles_max": _hough_circles_max_samples,
    "hough_lines": _hough_lines_samples,
    "hough_circles_map": _hough_circles_map_samples,
    "hough_circles_max_map": _hough_circles_max_map_samples,
    "circle_detections": _circle_detections_samples,
    "line_detections": _line_detections_samples,
}


def _scene(device: str) -> torch.Tensor:
    return pointops.synthetic_edges(40, 48, n_circles=2, radii=(6, 12), n_lines=2, seed=2).edges[None].to(device)


WRAPPER_CASES: Dict[str, WrapperCase] = {
    "edge_points": WrapperCase(pointops.edge_points, lambda d: (_edges(d),)),
    "hough_circles": WrapperCase(pointops.hough_circles, lambda d: (_edges(d), [1, 3, 6])),
    "hough_circles_normalized": WrapperCase(pointops.hough_circles, lambda d: (_edges(d).float(), [2, 4], True, True)),
    "hough_circles_gradients": WrapperCase(
        pointops.hough_circles, lambda d: (_edges(d), [2, 5], False, False, torch.randn(2, 2, 14, 17, device=d), 0.3)),
    "hough_circles_max": WrapperCase(pointops.hough_circles_max, lambda d: (_edges(d), [1, 3, 6])),
    "hough_circles_max_weighted": WrapperCase(
        pointops.hough_circles_max, lambda d: (_edges(d).float() * 0.5, [2, 4], True, True)),
    "hough_circles_points": WrapperCase(
        pointops.hough_circles_points, lambda d: (_points(d)[0], [2, 7], [16, 19], _points(d)[1], _points(d)[2])),
    "hough_lines": WrapperCase(pointops.hough_lines, lambda d: (_edges(d),)),
    "hough_lines_points": WrapperCase(
        pointops.hough_lines_points, lambda d: (_points(d)[0], [16, 19], [0.0, 1.0, 2.0], _points(d)[1])),
    "detect_circles": WrapperCase(pointops.detect_circles, lambda d: (_scene(d), [5, 6, 7, 8, 10, 12], 3, 3)),
    "detect_lines": WrapperCase(pointops.detect_lines, lambda d: (_scene(d), 3)),
    "circle_peaks": WrapperCase(
        circle_peaks, lambda d: (torch.randint(0, 5, (2, 3, 9, 10), dtype=torch.int32, device=d), [2, 3, 4], 4, 1, 2.0)),
    "line_peaks": WrapperCase(
        line_peaks, lambda d: (torch.randint(0, 5, (2, 21, 18), dtype=torch.int32, device=d), 4, None, 2, 2)),
}
