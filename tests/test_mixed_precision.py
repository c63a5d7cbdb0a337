"""Mixed precision end to end: every public function that takes two float tensors accepts
autocast's mixed dtypes (a float16 / bfloat16 activation meeting float32 points) and computes as
with both promoted to the wider type (docs/api.md's dtype table), and a PointNet++ on pointops.nn
trains under torch.autocast (CPU bfloat16; CUDA float16 marked cuda). The compat modules' models
train under autocast in tests/test_compat_pyg.py and tests/test_compat_pytorch3d.py."""

from typing import Callable, List, NamedTuple

import pytest
import torch

import pointops
from pointops import nn as pn
from pointops.compat import pyg, pytorch3d
from tests.op_samples import WRAPPER_CASES

LOW = [torch.float16, torch.bfloat16]


class MixedCase(NamedTuple):
    fn: Callable
    make_args: Callable[[str], tuple]
    floats: List[int]  # positions of the float tensors that may differ in dtype
    promoted: bool  # outputs take the promoted dtype (else each keeps its own input's, as documented)


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _wrapper_case(name, promoted=True):
    case = WRAPPER_CASES[name]
    args = case.make_args("cpu")
    floats = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    return MixedCase(case.fn, case.make_args, floats, promoted)


def _cases():
    cases = {}
    for name in (
        "ball_query",
        "ball_query_packed",
        "estimate_normals",
        "hough_planes_ball",
        "interpolate",
        "knn",
        "knn_packed",
        "plane_labels",
        "plane_refit",
        "plane_refit_bands",
        "pose_cluster",
        "ppf_features",
        "ppf_model",
        "ppf_vote",
        "three_nn",
        "transform_points",
    ):
        cases[name] = _wrapper_case(name)
    cases["cube_query_packed"] = _wrapper_case("cube_query_packed")
    # voxel_downsample: centroids keep the points' dtype, means the features'; icp: the poses
    # come back in the initial poses' dtype (both documented)
    cases["voxel_downsample"] = _wrapper_case("voxel_downsample", promoted=False)
    cases["icp"] = _wrapper_case("icp", promoted=False)
    cases["icp_partial_view"] = _wrapper_case("icp_partial_view", promoted=False)
    cases["hough_planes"] = MixedCase(
        lambda p, w: pointops.hough_planes(p, 0.1, 2.0, None, 8, 8, w),
        lambda d: (torch.rand(2, 50, 3, generator=_g(1)).to(d), torch.rand(2, 50, generator=_g(2)).to(d)),
        [0, 1],
        True,
    )
    cases["hough_circles"] = MixedCase(
        lambda e, gr: pointops.hough_circles(e, [3, 5], gradients=gr),
        lambda d: (
            (torch.rand(2, 30, 30, generator=_g(3)) > 0.8).float().to(d),
            torch.randn(2, 2, 30, 30, generator=_g(4)).to(d),
        ),
        [0, 1],
        True,
    )
    cases["detect_circles"] = MixedCase(
        lambda e, gr: pointops.detect_circles(e, [3, 5], 3, gradients=gr),
        lambda d: (
            (torch.rand(2, 30, 30, generator=_g(3)) > 0.8).float().to(d),
            torch.randn(2, 2, 30, 30, generator=_g(4)).to(d),
        ),
        [0, 1],
        True,
    )
    cases["hough_circles_points"] = MixedCase(
        lambda w, gr: pointops.hough_circles_points(
            torch.randint(0, 30, (2, 40, 2), generator=_g(5)).to(w.device), [3, 5], [30, 30], None, w, False, gr
        ),
        lambda d: (torch.rand(2, 40, generator=_g(6)).to(d), torch.randn(2, 40, 2, generator=_g(7)).to(d)),
        [0, 1],
        True,
    )
    cases["estimate_normals_viewpoint"] = MixedCase(
        lambda p, v: pointops.estimate_normals(p, 8, viewpoint=v),
        lambda d: (torch.rand(2, 50, 3, generator=_g(8)).to(d), torch.randn(2, 3, generator=_g(9)).to(d)),
        [0, 1],
        True,
    )
    # OpenPCDet's PointNet++ functions
    cases["nn.three_nn"] = MixedCase(
        pn.three_nn,
        lambda d: (torch.rand(2, 40, 3, generator=_g(10)).to(d), torch.rand(2, 12, 3, generator=_g(11)).to(d)),
        [0, 1],
        True,
    )
    cases["nn.ball_query"] = MixedCase(
        lambda xyz, new_xyz: pn.ball_query(0.3, 8, xyz, new_xyz),
        lambda d: (torch.rand(2, 40, 3, generator=_g(12)).to(d), torch.rand(2, 12, 3, generator=_g(13)).to(d)),
        [0, 1],
        True,
    )
    # the compat modules
    cases["compat.pyg.knn"] = MixedCase(
        lambda x, y: pyg.knn(x, y, 3),
        lambda d: (torch.rand(30, 3, generator=_g(14)).to(d), torch.rand(10, 3, generator=_g(15)).to(d)),
        [0, 1],
        True,
    )
    cases["compat.pyg.radius"] = MixedCase(
        lambda x, y: pyg.radius(x, y, 0.4),
        lambda d: (torch.rand(30, 3, generator=_g(16)).to(d), torch.rand(10, 3, generator=_g(17)).to(d)),
        [0, 1],
        True,
    )
    cases["compat.pyg.nearest"] = MixedCase(
        pyg.nearest,
        lambda d: (torch.rand(30, 2, generator=_g(18)).to(d), torch.rand(6, 2, generator=_g(19)).to(d)),
        [0, 1],
        True,
    )
    cases["compat.pytorch3d.knn_points"] = MixedCase(
        lambda a, b: pytorch3d.knn_points(a, b, K=3),
        lambda d: (torch.rand(2, 20, 3, generator=_g(20)).to(d), torch.rand(2, 25, 3, generator=_g(21)).to(d)),
        [0, 1],
        True,
    )
    cases["compat.pytorch3d.chamfer_distance"] = MixedCase(
        lambda a, b: pytorch3d.chamfer_distance(a, b)[0],
        lambda d: (torch.rand(2, 20, 3, generator=_g(22)).to(d), torch.rand(2, 25, 3, generator=_g(23)).to(d)),
        [0, 1],
        True,
    )
    return cases


CASES = _cases()


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("low", LOW)
def test_mixed_float_dtypes_compute_in_the_wider_type(device, name, low):
    case = CASES[name]
    args = case.make_args(device)
    for which in case.floats:
        mixed = list(args)
        mixed[which] = mixed[which].to(low)
        promoted = list(mixed)
        promoted[which] = promoted[which].to(torch.float32)  # what torch.promote_types gives with float32
        got = _tensors(case.fn(*mixed))
        expected = _tensors(case.fn(*promoted))
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            if case.promoted:
                assert a.dtype == b.dtype, f"{name}: {a.dtype} where the promoted call gives {b.dtype}"
            # an output kept in its input's low dtype is the promoted result rounded to it
            torch.testing.assert_close(a, b.to(a.dtype), rtol=0, atol=0, equal_nan=True)


def test_every_public_two_float_function_is_covered():
    """Every wrapper whose samples hold two float tensors has a mixed-dtype case here."""
    for name, case in WRAPPER_CASES.items():
        args = case.make_args("cpu")
        if sum(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args) >= 2:
            assert name in CASES, f"{name} takes two float tensors: add it to tests/test_mixed_precision.py"


def test_interpolate_under_autocast_takes_half_features_and_float32_weights(device):
    g = _g(30)
    features = torch.randn(2, 20, 6, generator=g).to(device)
    indices = torch.randint(-1, 20, (2, 9, 3), generator=g).to(device)
    weights = torch.rand(2, 9, 3, generator=g).to(device)
    low = features.to(torch.bfloat16).requires_grad_(True)
    w = weights.clone().requires_grad_(True)
    out = pointops.interpolate(low, indices, w)
    assert out.dtype == torch.float32  # bfloat16 * float32 -> float32, as torch's ops promote
    torch.testing.assert_close(out, pointops.interpolate(low.float(), indices, weights), rtol=0, atol=0)
    out.sum().backward()
    assert low.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32


class PointNet2(torch.nn.Module):
    """OpenPCDet's PointNet2MSG shape on pointops.nn: multi-scale and single-scale set
    abstraction, two feature propagation layers, a per-point head."""

    def __init__(self, channels=4, classes=3):
        super().__init__()
        self.sa1 = pn.PointnetSAModuleMSG(
            npoint=64, radii=[0.15, 0.3], nsamples=[8, 16], mlps=[[channels, 16, 16], [channels, 16, 32]]
        )
        self.sa2 = pn.PointnetSAModule(npoint=16, radius=0.5, nsample=8, mlp=[48, 32, 64])
        self.fp2 = pn.PointnetFPModule(mlp=[64 + 48, 64])
        self.fp1 = pn.PointnetFPModule(mlp=[64 + channels, 32])
        self.head = torch.nn.Conv1d(32, classes, 1)

    def forward(self, xyz, features):
        l1_xyz, l1_features = self.sa1(xyz, features)
        l2_xyz, l2_features = self.sa2(l1_xyz, l1_features)
        l1_features = self.fp2(l1_xyz, l2_xyz, l1_features, l2_features)
        return self.head(self.fp1(xyz, l1_xyz, features, l1_features))


def train_pointnet2_under_autocast(device, dtype, steps=8):
    torch.manual_seed(31)
    xyz = torch.rand(2, 256, 3, device=device)
    features = torch.randn(2, 4, 256, device=device)
    labels = (xyz[..., 0] > 0.5).long() + (xyz[..., 1] > 0.5).long()  # (B, N) in {0, 1, 2}
    model = PointNet2().to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device_type=device, dtype=dtype):
            logits = model(xyz, features)
            assert logits.dtype == dtype
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]


def test_pointnet2_trains_under_cpu_autocast_bfloat16():
    train_pointnet2_under_autocast("cpu", torch.bfloat16)


@pytest.mark.cuda
def test_pointnet2_trains_under_cuda_autocast_float16():
    train_pointnet2_under_autocast("cuda", torch.float16)
