"""Registration samples of the PPF ops (csrc/ppf/) and their wrappers, merged by tests/op_samples.py
into the opcheck / compile / script / export / stream / repeat-call tests.

opcheck compares outputs with NaN != NaN, so the op samples are chosen to fill every output slot
(no NaN "none" rows: valid points, full lengths, k no larger than the peaks and clusters that
exist); tests/test_ppf.py covers the NaN rows, padding and invalid inputs. The wrapper cases,
compared with NaN == NaN, keep them."""

import math
from typing import List

import torch

from pointops.ppf import ops as ppf
from tests.op_samples import WrapperCase


def _cloud(n: int, seed: int, batch: int = 2, holes: bool = False):
    g = torch.Generator().manual_seed(seed)
    points = torch.randn(batch, n, 3, generator=g)
    normals = torch.randn(batch, n, 3, generator=g)
    if holes:
        normals[0, 1] = float("nan")  # takes no part
    return points, normals


def _model_inputs(device: str, n: int = 12, seed: int = 0, holes: bool = False):
    points, normals = _cloud(n, seed, holes=holes)
    lengths = torch.tensor([n, n - 4] if holes else [n, n])
    step = ppf.bounding_diameter(points, lengths) * 0.2
    return points.to(device), normals.to(device), lengths.to(device), step.to(device)


def _features_samples(device: str) -> List[tuple]:
    points, normals, lengths, step = _model_inputs(device)
    g = torch.Generator().manual_seed(1)
    first = torch.randint(0, 12, (2, 30), generator=g)
    second = (first + torch.randint(1, 12, (2, 30), generator=g)) % 12  # never the first
    pairs = torch.stack([first, second], -1).to(device)
    return [
        (points, normals, pairs, lengths, step, 30, 6),
        (points.double(), normals.double(), pairs, None, step.double(), 17, 3),
        (points[:, :0], normals[:, :0], pairs[:, :0], None, step, 30, 6),
    ]


def _model_samples(device: str) -> List[tuple]:
    points, normals, lengths, step = _model_inputs(device)
    return [
        (points, normals, lengths, None, 0.2, 30, 6),
        (points.double(), normals.double(), None, step.double() * 5, 0.2, 12, 6),
        (points, normals, lengths, None, 0.2, 30, 6, 2),  # at most 2 pairs per key
        (points[:, :1], normals[:, :1], None, None, 0.2, 30, 6),
        (points[:0], normals[:0], None, None, 0.2, 30, 6),
    ]


def _model(device: str, n: int = 14, seed: int = 3, holes: bool = False) -> ppf.PPFModel:
    points, normals = _cloud(n, seed, holes=holes)
    lengths = torch.tensor([n, n - 3] if holes else [n, n], device=device)
    # coarse bins (6 alpha bins, 3 per feature angle): the few pairs fill most keys, so every
    # reference point of the samples' scenes finds votes
    return ppf.ppf_model(points.to(device), normals.to(device), lengths, tau_d=0.2, angle_bins=6)


def _scene(device: str, n: int = 25, seed: int = 4, holes: bool = False):
    """Each scene holds the two models' points (rotated and shifted), then clutter: every
    reference point finds peaks."""
    model_points, model_normals = _cloud(14, 3)
    clutter_p, clutter_n = _cloud(n - 14, seed, holes=holes)
    rot = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    points = torch.cat([model_points @ rot.T + 0.5, clutter_p + 0.5], 1)
    normals = torch.cat([model_normals @ rot.T, clutter_n], 1)
    lengths = torch.tensor([n, 17] if holes else [n, n])
    return points.to(device), normals.to(device), lengths.to(device)


def _vote_args(model: ppf.PPFModel) -> tuple:
    return (
        model.points,
        model.normals,
        model.key_offsets,
        model.pair_ref,
        model.pair_alpha,
        model.distance_step,
        model.diameter,
        model.angle_bins,
        model.distance_bins,
    )


def _vote_samples(device: str) -> List[tuple]:
    model = _model(device)
    points, normals, lengths = _scene(device)
    m = _vote_args(model)
    return [
        (points, normals, lengths) + m + (3, 1, False, "dense", 1 << 24),
        (points, normals, None) + m + (4, 1, True, "sort", 1 << 24),
        (points.double(), normals.double(), lengths) + m + (2, 1, False, "sort", 50),  # many chunks
        (points[:, :0], normals[:, :0], None) + m + (5, 3, False, "dense", 1 << 24),
    ]


def _cluster_inputs(device: str, batch: int = 2, poses: int = 40, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, poses, 4, generator=g)
    q[:, poses // 2 :] = q[:, :1] + 0.05 * torch.randn(batch, poses - poses // 2, 4, generator=g)
    t = torch.rand(batch, poses, 3, generator=g)
    votes = torch.randint(1, 20, (batch, poses), generator=g)
    return q.to(device), t.to(device), votes.to(device)


def _cluster_samples(device: str) -> List[tuple]:
    q, t, votes = _cluster_inputs(device)
    thr = torch.tensor([0.3, 0.5], device=device)
    lengths = torch.tensor([40, 25], device=device)
    return [
        (q, t, votes, lengths, thr, math.radians(30.0), thr * 0.5, 4),
        (q, t, votes, lengths, thr, math.radians(30.0), thr * 4, 6, math.radians(50.0)),
        (q.double(), t.double(), votes, None, thr.double(), math.pi, thr * 0.1, 10),
        (q[:, :0], t[:, :0], votes[:, :0], None, thr, 0.5, thr, 0),
    ]


OP_SAMPLES = {
    "ppf_features": _features_samples,
    "ppf_model": _model_samples,
    "ppf_vote": _vote_samples,
    "pose_cluster": _cluster_samples,
}


def _features_wrapper_args(device: str) -> tuple:
    points, normals, lengths, step = _model_inputs(device, holes=True)
    pairs = torch.randint(-1, 13, (2, 30, 2), generator=torch.Generator().manual_seed(1)).to(device)
    return points, normals, pairs, step, lengths


def _vote_wrapper_args(device: str) -> tuple:
    points, normals, lengths = _scene(device, holes=True)
    return points, normals, _model(device, holes=True), lengths, 3, 2


def _cluster_wrapper_args(device: str) -> tuple:
    q, t, votes = _cluster_inputs(device)
    return q, t, votes, torch.tensor([0.3, 0.5], device=device), None, math.radians(20.0), None, 3


WRAPPER_CASES = {
    "ppf_features": WrapperCase(ppf.ppf_features, _features_wrapper_args),
    "ppf_model": WrapperCase(ppf.ppf_model, lambda d: _model_inputs(d, holes=True)[:3]),
    "ppf_vote": WrapperCase(ppf.ppf_vote, _vote_wrapper_args),
    "pose_cluster": WrapperCase(ppf.pose_cluster, _cluster_wrapper_args),
}
