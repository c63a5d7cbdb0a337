"""pointops.nn as OpenPCDet's pointnet2 (batch and stack): every stack util against slow NumPy
versions of OpenPCDet's kernels (tests/openpcdet_reference.py; OpenPCDet has no tests of its own
ops), the autograd Function classes' gradients, and OpenPCDet's own module code
(tests/openpcdet_code.py: pointnet2_modules.py of both halves and PV-RCNN / PV-RCNN++'s voxel set
abstraction, written anew) run on pointops.nn with only the import changed, against the same
code on the references."""

import copy

import pytest
import torch

import pointops.nn as pointnet2_utils
from pointops.nn import stack as pointnet2_stack_utils
from tests import openpcdet_code, openpcdet_reference as ref
from tests.conftest import DEVICES


def cloud(*shape, seed=0, scale=1.0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def stacked(counts, seed, scale=1.0):
    cnt = torch.tensor(counts, dtype=torch.int32)
    return cloud(int(cnt.sum()), 3, seed=seed, scale=scale), cnt


def to(device, *ts):
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in ts]


# ---- pointnet2_stack/pointnet2_utils.py ------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("radius, nsample", [(0.1, 4), (0.25, 16), (0.6, 48)])
def test_stack_ball_query(device, radius, nsample):
    xyz, cnt = stacked([150, 0, 90, 60], seed=1)
    new_xyz, new_cnt = stacked([20, 5, 0, 15], seed=2)
    new_xyz[-1] = 50.0  # an empty ball
    idx, empty = pointnet2_stack_utils.ball_query(radius, nsample, *to(device, xyz, cnt, new_xyz, new_cnt))
    exp_idx, exp_empty = ref.stack_ball_query(radius, nsample, xyz, cnt, new_xyz, new_cnt)
    assert idx.dtype == torch.int32 and idx.shape == (40, nsample) and empty.dtype == torch.bool
    assert torch.equal(idx.cpu(), exp_idx) and torch.equal(empty.cpu(), exp_empty)
    assert empty[20:25].all() and empty[-1]  # cloud 1 has no points


@pytest.mark.parametrize("device", DEVICES)
def test_stack_grouping_operation(device):
    features = torch.randn(300, 5, generator=torch.Generator().manual_seed(3))
    cnt = torch.tensor([150, 0, 90, 60], dtype=torch.int32)
    idx_cnt = torch.tensor([7, 3, 4, 6], dtype=torch.int32)
    idx = torch.randint(0, 60, (20, 6), generator=torch.Generator().manual_seed(4)).int()
    idx[7:10] = 0  # cloud 1 is empty: any index is outside it
    out = pointnet2_stack_utils.grouping_operation(*to(device, features, cnt, idx, idx_cnt))
    assert out.shape == (20, 5, 6) and out.is_contiguous()
    expected = ref.stack_grouping_operation(features, cnt, idx, idx_cnt)
    valid = torch.ones(20, dtype=torch.bool)
    valid[7:10] = False
    assert torch.equal(out.cpu()[valid], expected[valid])
    # deliberately: an index outside its cloud groups zeros (OpenPCDet reads past the cloud)
    assert (out[7:10] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_stack_three_nn_and_interpolate(device):
    unknown, ucnt = stacked([40, 30, 10], seed=5)
    known, kcnt = stacked([25, 2, 12], seed=6)  # cloud 1 has 2 known points: a padded neighbour
    dist, idx = pointnet2_stack_utils.three_nn(*to(device, unknown, ucnt, known, kcnt))
    exp_dist, exp_idx = ref.stack_three_nn(unknown, ucnt, known, kcnt)
    assert idx.dtype == torch.int32 and dist.dtype == torch.float32
    assert torch.equal(idx.cpu(), exp_idx) and torch.equal(dist.cpu(), exp_dist)
    assert torch.isinf(dist[40:70, 2]).all() and (idx[40:70, 2] == 25).all()
    features = torch.randn(39, 6, generator=torch.Generator().manual_seed(7))
    weight = torch.rand(80, 3, generator=torch.Generator().manual_seed(8))
    out = pointnet2_stack_utils.three_interpolate(*to(device, features, idx, weight))
    torch.testing.assert_close(out.cpu(), ref.stack_three_interpolate(features, idx.cpu(), weight), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("npoint", [8, [8, 3, 1], "tensor"])
def test_stack_farthest_point_sample(device, npoint):
    xyz, cnt = stacked([50, 20, 33], seed=9)
    if npoint == "tensor":
        npoint = torch.tensor([5, 20, 12], dtype=torch.int32, device=device)
    idx = pointnet2_stack_utils.stack_farthest_point_sample(*to(device, xyz, cnt), npoint)
    assert idx.dtype == torch.int32
    assert torch.equal(idx.cpu(), ref.stack_farthest_point_sample(xyz, cnt, npoint))
    # the batch FPS of the stack utils is pointnet2_batch's
    assert pointnet2_stack_utils.farthest_point_sample is pointnet2_utils.farthest_point_sample


@pytest.mark.parametrize("device", DEVICES)
def test_stack_fps_past_a_cloud_repeats_its_picks(device):
    xyz, cnt = stacked([5, 0, 40], seed=10)
    idx = pointnet2_stack_utils.stack_farthest_point_sample(*to(device, xyz, cnt), 8).cpu().view(3, 8)
    assert torch.equal(idx[0, 5:], idx[0, :3]) and sorted(idx[0, :5].tolist()) == [0, 1, 2, 3, 4]
    assert (idx[1] == 5).all()  # an empty cloud gives its start row, as OpenPCDet


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("neighbor_type, nsample", [(0, -1), (1, -1), (0, 5)])
def test_three_nn_for_vector_pool(device, neighbor_type, nsample):
    support, cnt = stacked([300, 200], seed=11, scale=4.0)
    new_xyz, new_cnt = stacked([12, 9], seed=12, scale=4.0)
    new_xyz[3] = 100.0  # no neighbour
    grid = openpcdet_code.stack_modules(pointnet2_stack_utils).VectorPoolAggregationModule.get_dense_voxels_by_center(
        new_xyz, 0.4, [3, 3, 3]
    )
    args = (0.4, nsample, neighbor_type, 1000, 27, 2.0)
    dist, idx, _ = pointnet2_stack_utils.three_nn_for_vector_pool_by_two_step(
        *to(device, support, cnt, new_xyz, grid, new_cnt), *args
    )
    exp_dist, exp_idx, _ = ref.three_nn_for_vector_pool_by_two_step(support, cnt, new_xyz, grid, new_cnt, *args)
    assert torch.equal(idx.cpu(), exp_idx) and torch.equal(dist.cpu(), exp_dist)
    assert (idx[3] == -1).all() and (idx[:3] >= 0).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("neighbor_type, nsample, pooling_type", [(0, -1, 0), (1, -1, 0), (0, -1, 1), (0, 4, 0)])
def test_vector_pool_with_voxel_query(device, neighbor_type, nsample, pooling_type):
    support, cnt = stacked([300, 200], seed=13, scale=4.0)
    new_xyz, new_cnt = stacked([12, 9], seed=14, scale=4.0)
    features = torch.randn(500, 6, generator=torch.Generator().manual_seed(15), dtype=torch.float32)
    args = (2, 3, 2, 0.8, 3, 1, 100, nsample, neighbor_type, pooling_type)
    out = pointnet2_stack_utils.vector_pool_with_voxel_query_op(
        *to(device, support, cnt, features, new_xyz, new_cnt), *args
    )
    expected = ref.vector_pool_with_voxel_query_op(support, cnt, features, new_xyz, new_cnt, *args)
    for a, e in zip(out, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-6, atol=1e-6)
    assert (out[3] > 0).any()


# ---- autograd Functions: OpenPCDet's gradients ------------------------------------------------------


def test_batch_functions_gradients():
    g = torch.Generator().manual_seed(16)
    features = torch.randn(2, 4, 30, generator=g, dtype=torch.float64, requires_grad=True)
    pick = torch.randint(0, 30, (2, 7), generator=g).int()
    group = torch.randint(0, 30, (2, 7, 5), generator=g).int()
    weight = torch.rand(2, 7, 3, generator=g, dtype=torch.float64)
    three = torch.randint(0, 30, (2, 7, 3), generator=g).int()
    for fn, args in (
        (pointnet2_utils.GatherOperation.apply, (pick,)),
        (pointnet2_utils.GroupingOperation.apply, (group,)),
        (pointnet2_utils.ThreeInterpolate.apply, (three, weight)),
    ):
        assert torch.autograd.gradcheck(lambda f: fn(f, *args), (features,))
    # the Functions give the plain functions' values
    assert torch.equal(
        pointnet2_utils.GroupingOperation.apply(features, group), pointnet2_utils.grouping_operation(features, group)
    )
    xyz = cloud(2, 40, 3, seed=17)
    assert torch.equal(
        pointnet2_utils.FarthestPointSampling.apply(xyz, 6), pointnet2_utils.farthest_point_sample(xyz, 6)
    )
    assert torch.equal(
        pointnet2_utils.BallQuery.apply(0.3, 5, xyz, xyz[:, :6]), pointnet2_utils.ball_query(0.3, 5, xyz, xyz[:, :6])
    )
    dist, idx = pointnet2_utils.ThreeNN.apply(xyz.requires_grad_(), xyz[:, :9])
    assert not dist.requires_grad and idx.dtype == torch.int32


def test_stack_functions_gradients():
    g = torch.Generator().manual_seed(18)
    features = torch.randn(50, 4, generator=g, dtype=torch.float64, requires_grad=True)
    cnt, idx_cnt = torch.tensor([30, 20], dtype=torch.int32), torch.tensor([6, 4], dtype=torch.int32)
    idx = torch.randint(0, 20, (10, 5), generator=g).int()
    three = torch.randint(0, 50, (10, 3), generator=g).int()
    weight = torch.rand(10, 3, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda f: pointnet2_stack_utils.GroupingOperation.apply(f, cnt, idx, idx_cnt), (features,)
    )
    assert torch.autograd.gradcheck(
        lambda f: pointnet2_stack_utils.ThreeInterpolate.apply(f, three, weight), (features,)
    )
    xyz, xcnt = stacked([30, 20], seed=19)
    out, empty = pointnet2_stack_utils.BallQuery.apply(0.3, 4, xyz, xcnt, xyz[::5].contiguous(), idx_cnt)
    assert out.shape == (10, 4) and not out.requires_grad
    assert pointnet2_stack_utils.StackFarthestPointSampling.apply(xyz, xcnt, 4).shape == (8,)


# ---- OpenPCDet's module code on pointops.nn (only the import changed) -------------------------------


def same_weights(a, b):
    b.load_state_dict(a.state_dict())
    return b


@pytest.mark.parametrize("device", DEVICES)
def test_openpcdet_batch_modules_run_on_pointops(device, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    ours = openpcdet_code.batch_modules(pointnet2_utils)  # `from pointops import nn as pointnet2_utils`
    theirs = openpcdet_code.batch_modules(ref.batch_utils)

    def build(ns):
        torch.manual_seed(0)
        return torch.nn.ModuleDict(
            {
                "sa1": ns.PointnetSAModuleMSG(npoint=64, radii=[0.1, 0.3], nsamples=[8, 32], mlps=[[2, 8], [2, 16]]),
                "sa2": ns.PointnetSAModule(npoint=16, radius=0.5, nsample=16, mlp=[24, 32]),
                "sa3": ns.PointnetSAModule(mlp=[32, 32]),  # group all
                "fp": ns.PointnetFPModule(mlp=[32 + 24, 16]),
            }
        ).eval()

    def run(net, xyz, features):
        l1_xyz, l1 = net["sa1"](xyz, features)
        l2_xyz, l2 = net["sa2"](l1_xyz, l1)
        _, l3 = net["sa3"](l2_xyz, l2)
        return net["fp"](l1_xyz, l2_xyz, l1, l2), l3

    xyz = cloud(2, 400, 3, seed=20)
    features = torch.randn(2, 2, 400, generator=torch.Generator().manual_seed(21))
    net = build(ours).to(device)
    reference = same_weights(net, build(theirs))
    with torch.no_grad():
        out = run(net, xyz.to(device), features.to(device))
        expected = run(reference, xyz, features)
    for a, e in zip(out, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    # pointops.nn's own modules are these modules (state_dict keys and outputs)
    mine = (
        same_weights(
            net["sa1"],
            pointnet2_utils.PointnetSAModuleMSG(npoint=64, radii=[0.1, 0.3], nsamples=[8, 32], mlps=[[2, 8], [2, 16]]),
        )
        .to(device)
        .eval()
    )
    with torch.no_grad():
        torch.testing.assert_close(
            mine(xyz.to(device), features.to(device))[1],
            net["sa1"](xyz.to(device), features.to(device))[1],
            rtol=0,
            atol=0,
        )


@pytest.mark.parametrize("device", DEVICES)
def test_openpcdet_stack_modules_run_on_pointops(device, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    ours = openpcdet_code.stack_modules(pointnet2_stack_utils)  # `from pointops.nn import stack as pointnet2_utils`
    theirs = openpcdet_code.stack_modules(ref.stack_utils)

    def build(ns):
        torch.manual_seed(1)
        return torch.nn.ModuleDict(
            {
                "sa": ns.StackSAModuleMSG(radii=[0.15, 0.4], nsamples=[8, 24], mlps=[[3, 16], [3, 16]]),
                "fp": ns.StackPointnetFPModule(mlp=[32 + 3, 8]),
            }
        ).eval()

    xyz, cnt = stacked([200, 150, 0, 120], seed=22)
    new_xyz, new_cnt = stacked([30, 20, 10, 25], seed=23)
    features = torch.randn(470, 3, generator=torch.Generator().manual_seed(24))
    net = build(ours).to(device)
    reference = same_weights(net, build(theirs))
    with torch.no_grad():
        _, out = net["sa"](*to(device, xyz, cnt, new_xyz, new_cnt, features))
        _, expected = reference["sa"](xyz, cnt, new_xyz, new_cnt, features)
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
        back = net["fp"](*to(device, xyz, cnt, new_xyz, new_cnt, features, out))
        back_ref = reference["fp"](xyz, cnt, new_xyz, new_cnt, features, expected)
        torch.testing.assert_close(back.cpu(), back_ref, rtol=1e-5, atol=1e-5)
    mine = (
        same_weights(
            net["sa"],
            pointnet2_stack_utils.StackSAModuleMSG(radii=[0.15, 0.4], nsamples=[8, 24], mlps=[[3, 16], [3, 16]]),
        )
        .to(device)
        .eval()
    )
    with torch.no_grad():
        torch.testing.assert_close(mine(*to(device, xyz, cnt, new_xyz, new_cnt, features))[1], out, rtol=0, atol=0)


def vsa_config(sample_method, raw_layer):
    raw = (
        dict(MLPS=[[16, 16], [16, 16]], POOL_RADIUS=[0.4, 0.8], NSAMPLE=[16, 16])
        if raw_layer == "msg"
        else dict(
            NAME="VectorPoolAggregationModuleMSG",
            NUM_GROUPS=2,
            LOCAL_AGGREGATION_TYPE="local_interpolation",
            NUM_REDUCED_CHANNELS=2,
            NUM_CHANNELS_OF_LOCAL_AGGREGATION=8,
            MSG_POST_MLPS=[16],
            GROUP_CFG_0=dict(
                NUM_LOCAL_VOXEL=[2, 2, 2], MAX_NEIGHBOR_DISTANCE=0.2, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[8, 8]
            ),
            GROUP_CFG_1=dict(
                NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=0.4, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[8, 8]
            ),
        )
    )
    return openpcdet_code.EasyDict(
        NUM_KEYPOINTS=64,
        NUM_OUTPUT_FEATURES=32,
        SAMPLE_METHOD=sample_method,
        SPC_SAMPLING=dict(NUM_SECTORS=6),
        FEATURES_SOURCE=["x_conv3", "raw_points"],
        SA_LAYER=dict(
            raw_points=raw,
            x_conv3=dict(INPUT_CHANNELS=8, MLPS=[[16, 16], [16, 16]], POOL_RADIUS=[1.2, 2.4], NSAMPLE=[16, 32]),
        ),
    )


def vsa_batch(seed):
    """Two scans (B = 2): raw points [bs_idx, x, y, z, intensity, elongation] and voxel centres with
    8 features, as PV-RCNN's VSA reads them from its batch_dict."""
    g = torch.Generator().manual_seed(seed)
    points, voxels, voxel_features = [], [], []
    for b, n in enumerate((700, 500)):
        r = torch.rand(n, generator=g) * 18 + 1
        a = torch.rand(n, generator=g) * 6.283
        xyz = torch.stack([r * torch.cos(a), r * torch.sin(a), torch.rand(n, generator=g) * 2 - 1.5], 1)
        points.append(torch.cat([torch.full((n, 1), float(b)), xyz, torch.rand(n, 2, generator=g)], 1))
        centres = torch.unique(torch.floor(xyz / 1.6), dim=0) * 1.6 + 0.8
        voxels.append(torch.cat([torch.full((centres.shape[0], 1), float(b)), centres], 1))
        voxel_features.append(torch.randn(centres.shape[0], 8, generator=g))
    return {
        "batch_size": 2,
        "points": torch.cat(points),
        "voxel_centers": {"x_conv3": torch.cat(voxels)},
        "voxel_features": {"x_conv3": torch.cat(voxel_features)},
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sample_method, raw_layer", [("FPS", "msg"), ("SPC", "vector_pool")])
def test_pv_rcnn_voxel_set_abstraction_runs_on_pointops(device, sample_method, raw_layer, monkeypatch):
    """PV-RCNN's VSA (FPS keypoints, StackSAModuleMSG) and PV-RCNN++'s (sectorized FPS, vector pool
    with local interpolation) with OpenPCDet's layer code on pointops.nn.stack."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    ours = openpcdet_code.voxel_set_abstraction(pointnet2_stack_utils, pointnet2_stack_utils)
    theirs = openpcdet_code.voxel_set_abstraction(openpcdet_code.stack_modules(ref.stack_utils), ref.stack_utils)
    torch.manual_seed(2)
    layer = ours(vsa_config(sample_method, raw_layer), num_rawpoint_features=5).eval().to(device)
    reference = same_weights(layer, theirs(vsa_config(sample_method, raw_layer), num_rawpoint_features=5).eval())
    batch = vsa_batch(25)
    device_batch = {
        k: ({s: t.to(device) for s, t in v.items()} if isinstance(v, dict) else to(device, v)[0])
        for k, v in batch.items()
    }
    with torch.no_grad():
        out = layer(copy.copy(device_batch))
        expected = reference(copy.copy(batch))
    assert torch.equal(out["point_coords"].cpu(), expected["point_coords"])
    torch.testing.assert_close(
        out["point_features_before_fusion"].cpu(), expected["point_features_before_fusion"], rtol=1e-4, atol=1e-5
    )
    torch.testing.assert_close(out["point_features"].cpu(), expected["point_features"], rtol=1e-4, atol=1e-5)
    # pointops' own modules build the same layers (state_dict keys) as OpenPCDet's code
    mine = openpcdet_code.voxel_set_abstraction(pointnet2_stack_utils, pointnet2_stack_utils)
    assert set(mine(vsa_config(sample_method, raw_layer), num_rawpoint_features=5).state_dict()) == set(
        layer.state_dict()
    )


@pytest.mark.parametrize("device", DEVICES)
def test_stack_layer_trains(device):
    """A StackSAModuleMSG + StackPointnetFPModule step: gradients reach the features and weights."""
    xyz, cnt = stacked([200, 150], seed=26)
    new_xyz, new_cnt = stacked([30, 20], seed=27)
    features = torch.randn(350, 3, generator=torch.Generator().manual_seed(28), requires_grad=True)
    sa = pointnet2_stack_utils.StackSAModuleMSG(radii=[0.2], nsamples=[8], mlps=[[3, 16]]).to(device)
    fp = pointnet2_stack_utils.StackPointnetFPModule(mlp=[16 + 3, 8]).to(device)
    f = features.to(device)
    _, pooled = sa(*to(device, xyz, cnt, new_xyz, new_cnt), f)
    fp(*to(device, xyz, cnt, new_xyz, new_cnt), f, pooled).square().mean().backward()
    assert features.grad is not None and features.grad.abs().sum() > 0
    assert all(p.grad is not None for p in list(sa.parameters()) + list(fp.parameters()))


def stack_layers_and_inputs(device):
    torch.manual_seed(3)
    sa = pointnet2_stack_utils.StackSAModuleMSG(radii=[0.2, 0.4], nsamples=[8, 16], mlps=[[3, 16], [3, 8]])
    fp = pointnet2_stack_utils.StackPointnetFPModule(mlp=[24 + 3, 8])
    net = torch.nn.ModuleList([sa, fp]).to(device).eval()
    xyz, cnt = stacked([200, 150], seed=29)
    new_xyz, new_cnt = stacked([30, 20], seed=30)
    features = torch.randn(350, 3, generator=torch.Generator().manual_seed(31))
    return net, to(device, xyz, cnt, new_xyz, new_cnt, features)


class StackNet(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.sa, self.fp = net[0], net[1]

    def forward(self, xyz, cnt, new_xyz, new_cnt, features):
        _, pooled = self.sa(xyz, cnt, new_xyz, new_cnt, features)
        return self.fp(xyz, cnt, new_xyz, new_cnt, features, pooled)


@pytest.mark.parametrize("device", DEVICES)
def test_stack_modules_script_and_export(device):
    net, args = stack_layers_and_inputs(device)
    model = StackNet(net)
    with torch.no_grad():
        expected = model(*args)
        torch.testing.assert_close(torch.jit.script(model)(*args), expected, rtol=0, atol=0)
        exported = torch.export.export(model, tuple(args))
        torch.testing.assert_close(exported.module()(*args), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_stack_modules_compile_fullgraph(device):
    net, args = stack_layers_and_inputs(device)
    model = StackNet(net)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, fullgraph=True)(*args), model(*args), rtol=1e-4, atol=1e-5)
