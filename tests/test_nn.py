"""pointops.nn, the drop-in for OpenPCDet's PointNet++ ops and modules: each function against a
plain-PyTorch reference with OpenPCDet's shapes and dtypes, then a small PointNet++ (two set
abstraction layers, two feature propagation layers) against the same network built on the
references, its backward, and torch.compile(fullgraph=True), torch.export and TorchScript."""

import pytest
import torch
import torch.nn.functional as F

from pointops import nn as pn
from pointops.reference import geometry as ref
from tests.conftest import DEVICES


def cloud(b, n, seed, device="cpu"):
    return torch.rand(b, n, 3, generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_ball_query_is_openpcdet(device):
    xyz, new_xyz = cloud(2, 300, 0, device), cloud(2, 40, 1, device)
    new_xyz[0, 0] = 10.0  # no hit: a row of zeros
    idx = pn.ball_query(0.15, 8, xyz, new_xyz)
    assert idx.dtype == torch.int32 and idx.shape == (2, 40, 8)
    assert torch.equal(idx.cpu(), ref.openpcdet_ball_query(0.15, 8, xyz.cpu(), new_xyz.cpu()))
    assert (idx[0, 0] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_three_nn_three_interpolate_gather_grouping(device):
    unknown, known = cloud(2, 50, 2, device), cloud(2, 20, 3, device)
    dist, idx = pn.three_nn(unknown, known)
    ref_dist, ref_idx = ref.openpcdet_three_nn(unknown.cpu(), known.cpu())
    assert idx.dtype == torch.int32 and dist.dtype == torch.float32
    assert torch.equal(idx.cpu(), ref_idx) and torch.equal(dist.cpu(), ref_dist)
    features = torch.randn(2, 6, 20, generator=torch.Generator().manual_seed(4)).to(device)  # (B, C, m)
    weight = torch.rand(2, 50, 3, generator=torch.Generator().manual_seed(5)).to(device)
    out = pn.three_interpolate(features, idx, weight)
    assert out.shape == (2, 6, 50) and out.is_contiguous()
    torch.testing.assert_close(
        out.cpu(), ref.three_interpolate(features.cpu(), idx.cpu(), weight.cpu()), rtol=0, atol=0
    )
    pick = torch.randint(0, 20, (2, 7), generator=torch.Generator().manual_seed(6)).int().to(device)
    assert torch.equal(pn.gather_operation(features, pick).cpu(), ref.gather_operation(features.cpu(), pick.cpu()))
    group = torch.randint(0, 20, (2, 7, 4), generator=torch.Generator().manual_seed(7)).int().to(device)
    grouped = pn.grouping_operation(features, group)
    assert grouped.shape == (2, 6, 7, 4)
    assert torch.equal(grouped.cpu(), ref.grouping_operation(features.cpu(), group.cpu()))
    # fewer than 3 known points: index 0, distance +inf, as OpenPCDet
    dist, idx = pn.three_nn(unknown, known[:, :2])
    assert (idx[..., 2] == 0).all() and torch.isinf(dist[..., 2]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_furthest_point_sample(device):
    xyz = cloud(2, 100, 8, device)
    idx = pn.furthest_point_sample(xyz, 16)
    assert idx.dtype == torch.int32 and idx.shape == (2, 16) and (idx[:, 0] == 0).all()
    expected, _ = torch.ops.pointops.fps(xyz, None, None, 16)
    assert torch.equal(idx.long(), expected)
    # more picks than points: the picks again, in order
    idx = pn.furthest_point_sample(xyz[:, :5], 12)
    assert torch.equal(idx[:, 5:10], idx[:, :5]) and torch.equal(idx[:, 10:], idx[:, :2])


# ---- a small PointNet++ ---------------------------------------------------------------------------


class PointNet2(torch.nn.Module):
    """Two set abstraction layers (multi-scale, then single-scale) and two feature propagation
    layers, as OpenPCDet's PointNet2MSG backbone stacks them."""

    def __init__(self, channels=4):
        super().__init__()
        self.sa1 = pn.PointnetSAModuleMSG(
            npoint=64, radii=[0.15, 0.3], nsamples=[8, 16], mlps=[[channels, 16, 16], [channels, 16, 32]]
        )
        self.sa2 = pn.PointnetSAModule(npoint=16, radius=0.5, nsample=8, mlp=[48, 32, 64])
        self.fp2 = pn.PointnetFPModule(mlp=[64 + 48, 64])
        self.fp1 = pn.PointnetFPModule(mlp=[64 + channels, 32])

    def forward(self, xyz, features):
        l1_xyz, l1_features = self.sa1(xyz, features)
        assert l1_xyz is not None  # None only without npoint (GroupAll), as in OpenPCDet
        l2_xyz, l2_features = self.sa2(l1_xyz, l1_features)
        l1_features = self.fp2(l1_xyz, l2_xyz, l1_features, l2_features)
        return self.fp1(xyz, l1_xyz, features, l1_features)


def reference_sa(module, xyz, features):
    """A set abstraction layer of `module`'s MLPs on the plain-PyTorch references (farthest point
    sampling is pointops' fps op, tested in test_sampling.py)."""
    picks, _ = torch.ops.pointops.fps(xyz, None, None, module.npoint)
    new_xyz = ref.gather_operation(xyz.transpose(1, 2), picks).transpose(1, 2)
    outs = []
    for grouper, mlp in zip(module.groupers, module.mlps):
        idx = ref.openpcdet_ball_query(grouper.radius, grouper.nsample, xyz, new_xyz)
        grouped = ref.grouping_operation(xyz.transpose(1, 2), idx) - new_xyz.transpose(1, 2).unsqueeze(-1)
        grouped = torch.cat([grouped, ref.grouping_operation(features, idx)], 1)
        outs.append(F.max_pool2d(mlp(grouped), kernel_size=[1, grouped.shape[3]]).squeeze(-1))
    return new_xyz, torch.cat(outs, 1)


def reference_fp(module, unknown, known, unknown_features, known_features):
    dist, idx = ref.openpcdet_three_nn(unknown, known)
    recip = 1.0 / (dist + 1e-8)
    weight = recip / recip.sum(2, keepdim=True)
    interpolated = ref.three_interpolate(known_features, idx, weight)
    return module.mlp(torch.cat([interpolated, unknown_features], 1).unsqueeze(-1)).squeeze(-1)


def reference_forward(net, xyz, features):
    l1_xyz, l1_features = reference_sa(net.sa1, xyz, features)
    l2_xyz, l2_features = reference_sa(net.sa2, l1_xyz, l1_features)
    l1_features = reference_fp(net.fp2, l1_xyz, l2_xyz, l1_features, l2_features)
    return reference_fp(net.fp1, xyz, l1_xyz, features, l1_features)


def make_net_and_inputs(device):
    torch.manual_seed(0)
    net = PointNet2().to(device).eval()
    xyz = cloud(2, 256, 9, device)
    features = torch.randn(2, 4, 256, generator=torch.Generator().manual_seed(10)).to(device)
    return net, xyz, features


@pytest.mark.parametrize("device", DEVICES)
def test_pointnet2_forward_matches_reference(device, monkeypatch):
    # cuDNN convolutions may use TF32 by default, which rounds to 10 mantissa bits.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    net, xyz, features = make_net_and_inputs(device)
    with torch.no_grad():
        out = net(xyz, features)
        expected = reference_forward(net.cpu(), xyz.cpu(), features.cpu())
    assert out.shape == (2, 32, 256)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_pointnet2_backward_reaches_inputs(device):
    net, xyz, features = make_net_and_inputs(device)
    net.train()
    xyz.requires_grad_(True)
    features.requires_grad_(True)
    net(xyz, features).square().mean().backward()
    for t in (xyz, features):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    assert all(p.grad is not None for p in net.parameters())


def test_pointnet2_state_dict_keys_are_openpcdet():
    keys = set(PointNet2().sa1.state_dict())
    assert {"mlps.0.0.weight", "mlps.0.1.running_mean", "mlps.1.3.weight"} <= keys
    mlps = [[4, 16], [4, 32]]
    pn.PointnetSAModuleMSG(npoint=8, radii=[0.1, 0.2], nsamples=[4, 4], mlps=mlps)
    assert mlps == [[4, 16], [4, 32]]  # the caller's lists are left alone


@pytest.mark.parametrize("device", DEVICES)
def test_pointnet2_torchscript(device):
    net, xyz, features = make_net_and_inputs(device)
    scripted = torch.jit.script(net)
    with torch.no_grad():
        torch.testing.assert_close(scripted(xyz, features), net(xyz, features), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_pointnet2_export(device):
    net, xyz, features = make_net_and_inputs(device)
    exported = torch.export.export(net, (xyz, features))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(xyz, features), net(xyz, features), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_pointnet2_compile_fullgraph(device):
    net, xyz, features = make_net_and_inputs(device)
    torch._dynamo.reset()
    compiled = torch.compile(net, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(xyz, features), net(xyz, features), rtol=1e-4, atol=1e-5)
