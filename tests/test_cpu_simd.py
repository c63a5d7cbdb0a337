"""The CPU kernels' AVX2 paths (csrc/common/cpu_simd.h) give the portable paths' results bit for bit.

The choice is made once per process, so the portable results come from a subprocess run with
POINTOPS_CPU_SIMD=0; this process takes the AVX2 paths where the CPU has them. The other tests
compare the kernels with references and with CUDA on whichever path this machine takes.
"""
import os
import subprocess
import sys

import torch

import pointops  # noqa: F401  (registers the operators)

ops = torch.ops.pointops

# Cases chosen to reach the vector loops' edges: orientation and point counts that are not
# multiples of the vector width, NaN/Inf points and weights, ragged lengths, duplicates, ties.
CASES = r"""
import torch, pointops
ops = torch.ops.pointops
g = lambda s: torch.Generator().manual_seed(s)
def cloud(b, n, d=3, seed=0):
    p = torch.rand(b, n, d, generator=g(seed)) * 20 - 10
    if n > 9:
        p[0, 3, 0] = float("nan"); p[-1, 7, d - 1] = float("inf"); p[0, 5] = p[0, 4]
    return p
def outputs():
    out = []
    for b, n, nphi, nth, step, rmax in [(2, 1001, 7, 11, 0.37, 9.0), (1, 333, 18, 36, 0.1, 18.0), (2, 50, 3, 5, 0.05, 1.0)]:
        p, w = cloud(b, n, seed=n), torch.rand(b, n, generator=g(1)) - 0.3
        w[0, 2] = float("nan")
        lengths = torch.tensor([n - 3, n // 2][:b])
        for op in (ops.hough_planes, ops.hough_planes_ball):
            out += [op(p, None, None, nphi, nth, step, rmax), op(p, lengths, w, nphi, nth, step, rmax)]
    for b, n, d, k in [(2, 1003, 3, 200), (1, 77, 5, 90), (3, 17, 1, 17), (1, 4096, 2, 300)]:
        p = cloud(b, n, d, seed=n)
        dup = p.clone(); dup[:, n // 2:] = dup[:, :1]
        out += list(ops.fps(p, None, None, k)) + list(ops.fps(dup, torch.tensor([n] * b), None, k))
        out += list(ops.fps(p.half(), None, None, k))
    # ppf_vote: partner counts that are not multiples of 8, NaN normals, a padded scene, spread
    mp, mn = torch.randn(1, 37, 3, generator=g(5)), torch.randn(1, 37, 3, generator=g(6))
    model = pointops.ppf.ppf_model(mp, mn, tau_d=0.15, angle_bins=12)
    sp = torch.cat([mp @ torch.tensor([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]]) + 0.3, torch.randn(1, 50, 3, generator=g(7))], 1)
    sn = torch.cat([mn @ torch.tensor([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]]), torch.randn(1, 50, 3, generator=g(8))], 1)
    sn[0, 3] = float("nan")
    for spread in (False, True):
        for backend in ("dense", "sort"):
            out += list(pointops.ppf.ppf_vote(sp, sn, model, torch.tensor([83]), stride=3, k=4, spread=spread,
                                              backend=backend))
    return out
"""


def test_simd_and_portable_paths_agree(tmp_path):
    namespace = {}
    exec(CASES, namespace)
    vector = namespace["outputs"]()
    path = tmp_path / "portable.pt"
    code = CASES + f"\ntorch.save(outputs(), {str(path)!r})\n"
    env = dict(os.environ, POINTOPS_CPU_SIMD="0")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    portable = torch.load(path)
    assert len(portable) == len(vector)
    for i, (a, b) in enumerate(zip(vector, portable)):
        assert a.dtype == b.dtype and a.shape == b.shape, i
        assert torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)), f"output {i} differs"
