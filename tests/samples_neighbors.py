"""Registration samples of the neighbourhood ops (knn, ball_query, interpolate) and their wrappers,
merged into tests/op_samples.py: opcheck, compile, script, export, streams, repeat calls."""
from typing import Callable, Dict, List

import torch

import pointops
from tests.op_samples import WrapperCase


def _clouds(device: str, batch: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, n, 3, generator=g).to(device)


def _knn_samples(device: str) -> List[tuple]:
    points = _clouds("cpu", 3, 60, 10)
    points[0, 7, 1] = float("nan")  # never a neighbour
    points = points.to(device)
    queries = _clouds(device, 3, 25, 11)
    lengths = torch.tensor([60, 10, 0], device=device)
    query_lengths = torch.tensor([25, 25, 3], device=device)
    big_points, big_queries = _clouds(device, 2, 400, 12), _clouds(device, 2, 50, 13)  # grid on the CPU
    return [
        (queries, query_lengths, points, lengths, 5),
        (queries, None, points, None, 70),  # k > N: padded rows
        (queries.double(), None, points.double(), lengths, 3),
        (queries.half(), query_lengths, points.half(), None, 4),
        (big_queries, None, big_points, torch.tensor([400, 150], device=device), 16),
        (queries, None, points, None, 0),
        (queries, query_lengths, points, lengths, 5, 0.3),
        (big_queries, None, big_points, None, 16, 0.1),
    ]


def _knn_packed_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(14)
    points = torch.rand(90, 3, generator=g).to(device)
    queries = torch.rand(40, 3, generator=g).to(device)
    offsets = torch.tensor([0, 50, 50, 90], device=device)
    query_offsets = torch.tensor([0, 10, 25, 38], device=device)  # rows 38, 39 are in no cloud
    return [
        (queries, query_offsets, points, offsets, 6),
        (queries.double(), query_offsets, points.double(), offsets, 45),
    ]


def _ball_query_samples(device: str) -> List[tuple]:
    (queries, query_lengths, points, lengths, _), _, _, _, (big_queries, _, big_points, big_lengths, _) = (
        _knn_samples(device)[:5])
    return [
        (queries, query_lengths, points, lengths, 0.3, 6, True),
        (queries, None, points, None, 0.5, 40, False),  # k > 32: the list in the output row
        (queries.double(), None, points.double(), lengths, 0.2, 4, True),
        (big_queries, None, big_points, big_lengths, 0.15, 16, True),
        (queries, None, points, None, 0.0, 3, False),
        (queries, query_lengths, points, lengths, 0.5, 6, True, 0.2),  # min_radius
        (big_queries, None, big_points, big_lengths, 0.4, 48, False, 0.1),  # dense balls, k > 32
    ]


def _ball_query_packed_samples(device: str) -> List[tuple]:
    queries, query_offsets, points, offsets, _ = _knn_packed_samples(device)[0]
    return [
        (queries, query_offsets, points, offsets, 0.3, 6, True),
        (queries.double(), query_offsets, points.double(), offsets, 0.5, 40, False, 0.2),
        (queries.half(), query_offsets, points.half(), offsets, 0.25, 4, True, 0.0),
    ]


def _interpolate_samples(device: str) -> List[tuple]:
    g = torch.Generator().manual_seed(15)
    features = torch.randn(2, 30, 5, generator=g).to(device)
    indices = torch.randint(-1, 31, (2, 12, 3), generator=g).to(device)
    weights = torch.rand(2, 12, 3, generator=g).to(device)
    return [
        (features, indices, weights),
        (features.double().requires_grad_(), indices, weights.double().requires_grad_()),
        (features.half(), indices[:, :, :1], weights[:, :, :1].half()),
    ]


OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {
    "knn": _knn_samples,
    "knn_packed": _knn_packed_samples,
    "ball_query": _ball_query_samples,
    "ball_query_packed": _ball_query_packed_samples,
    "interpolate": _interpolate_samples,
}

WRAPPER_CASES: Dict[str, WrapperCase] = {
    "knn": WrapperCase(
        pointops.knn,
        lambda d: (_clouds(d, 2, 30, 20), _clouds(d, 2, 80, 21), 6, torch.tensor([30, 12], device=d),
                   torch.tensor([80, 40], device=d)),
    ),
    "knn_packed": WrapperCase(
        pointops.knn_packed,
        lambda d: (_clouds(d, 1, 30, 22)[0], torch.tensor([0, 12, 30], device=d), _clouds(d, 1, 70, 23)[0],
                   torch.tensor([0, 40, 70], device=d), 5),
    ),
    "ball_query": WrapperCase(
        pointops.ball_query,
        lambda d: (_clouds(d, 2, 30, 24), _clouds(d, 2, 200, 25), 0.25, 8, torch.tensor([30, 12], device=d),
                   torch.tensor([200, 60], device=d), "minus_one"),
    ),
    "ball_query_packed": WrapperCase(
        pointops.ball_query_packed,
        lambda d: (_clouds(d, 1, 30, 30)[0], torch.tensor([0, 12, 30], device=d), _clouds(d, 1, 90, 31)[0],
                   torch.tensor([0, 50, 90], device=d), 0.3, 8, "first", 0.1),
    ),
    "three_nn": WrapperCase(pointops.three_nn, lambda d: (_clouds(d, 2, 40, 26), _clouds(d, 2, 15, 27))),
    "interpolate": WrapperCase(pointops.interpolate, lambda d: _interpolate_samples(d)[0]),
    "group_points": WrapperCase(
        pointops.group_points,
        lambda d: (_clouds(d, 2, 20, 28), torch.randint(-1, 20, (2, 6, 4), generator=torch.Generator().manual_seed(29)).to(d)),
    ),
}
