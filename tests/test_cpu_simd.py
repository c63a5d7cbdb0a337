"""The CPU kernels' vector paths (csrc/common/cpu_simd.h) give the exact oracles' results bit for bit.

The kernels take their AVX2 + FMA copies where the CPU has both and the portable ones elsewhere (the
CPU alone decides); both follow the rules that pointops.reference computes exactly, so this test
checks whichever path this machine takes, on cases chosen to reach the vector loops' edges. The
other tests compare the kernels with references and with CUDA on the same path.
"""

import numpy as np
import torch

import pointops  # noqa: F401  (registers the operators)
from pointops.reference import hough as hough_reference
from pointops.reference import sampling as sampling_reference

ops = torch.ops.pointops


def g(seed):
    return torch.Generator().manual_seed(seed)


def cloud(b, n, d=3, seed=0):
    p = torch.rand(b, n, d, generator=g(seed)) * 20 - 10
    if n > 9:
        p[0, 3, 0] = float("nan")
        p[-1, 7, d - 1] = float("inf")
        p[0, 5] = p[0, 4]
    return p


def assert_bitwise(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(actual.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8))


# Orientation counts that are not multiples of the vector width (8) or of a task (16), NaN/Inf
# points and weights, ragged lengths, duplicates.
def test_hough_planes_vote_like_the_oracle():
    for b, n, n_phi, n_theta, step, rho_max in [
        (2, 12, 7, 11, 0.37, 9.0),
        (1, 12, 9, 17, 0.1, 18.0),
        (2, 12, 3, 5, 0.05, 1.0),
    ]:
        p, w = cloud(b, n, seed=n_phi), torch.rand(b, n, generator=g(1)) - 0.3
        w[0, 2] = float("nan")
        lengths = torch.tensor([n - 3, n // 2][:b])
        for op, ball in ((ops.hough_planes, False), (ops.hough_planes_ball, True)):
            for kw in ({}, {"lengths": lengths, "weights": w}):
                actual = op(p, kw.get("lengths"), kw.get("weights"), n_phi, n_theta, step, rho_max)
                expected = hough_reference.hough_planes(p, n_phi, n_theta, step, rho_max, ball=ball, **kw)
                assert_bitwise(actual, torch.from_numpy(np.ascontiguousarray(expected)).reshape(actual.shape))


# Cloud sizes that are not multiples of the vector width, k above the cloud size, NaN/Inf points,
# duplicates (ties between lanes), float16 input.
def test_fps_picks_like_the_oracle():
    for b, n, d, k in [(2, 43, 3, 20), (1, 21, 5, 30), (3, 17, 1, 17), (1, 67, 2, 40)]:
        p = cloud(b, n, d, seed=n)
        dup = p.clone()
        dup[:, n // 2 :] = dup[:, :1]
        for points, lengths in ((p, None), (dup, torch.tensor([n] * b)), (p.half(), None)):
            actual = ops.fps(points, lengths, None, k)
            expected = sampling_reference.fps(points.float() if points.dtype == torch.half else points, k, lengths)
            for a, e in zip(actual, expected):
                assert_bitwise(a, e)


# ppf_vote's vector features and vote cells: partner counts that are not multiples of 8, NaN
# normals, a padded scene, exact and spread keys.
def test_ppf_vote_votes_like_the_oracle():
    from pointops.ppf import ops as ppf
    from pointops.reference import ppf as ppf_reference

    turn = torch.tensor([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]])
    mp, mn = torch.randn(1, 37, 3, generator=g(5)), torch.randn(1, 37, 3, generator=g(6))
    model = ppf.ppf_model(mp, mn, tau_d=0.15, angle_bins=12)
    sp = torch.cat([mp @ turn + 0.3, torch.randn(1, 50, 3, generator=g(7))], 1)
    sn = torch.cat([mn @ turn, torch.randn(1, 50, 3, generator=g(8))], 1)
    sn[0, 3] = float("nan")
    lengths = torch.tensor([83])
    for spread in (False, True):
        expected = ppf_reference.ppf_vote(
            sp,
            sn,
            lengths,
            model.points,
            model.normals,
            model.key_offsets,
            model.pair_ref,
            model.pair_alpha,
            model.distance_step,
            model.diameter,
            model.angle_bins,
            model.distance_bins,
            3,
            4,
            spread,
        )
        for backend in ("dense", "sort"):
            actual = ops.ppf_vote(
                sp,
                sn,
                lengths,
                model.points,
                model.normals,
                model.key_offsets,
                model.pair_ref,
                model.pair_alpha,
                model.distance_step,
                model.diameter,
                model.angle_bins,
                model.distance_bins,
                3,
                4,
                spread,
                backend,
                1 << 24,
            )
            for a, e in zip(actual, expected):
                assert_bitwise(a, e)
