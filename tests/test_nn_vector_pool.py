"""PV-RCNN++'s vector pool on pointops.nn.stack where clouds are dense: OpenPCDet lists the first
points of each centre's cloud inside a cube around it, however many points the ball around that
cube holds. Held against the NumPy versions of OpenPCDet's kernels (tests/openpcdet_reference.py),
up to OpenPCDet's own module code with the Waymo configuration's vector-pool settings, outputs and
gradients."""

import copy
import math

import pytest
import torch

import pointops
from pointops.nn import stack as pointnet2_stack_utils
from tests import openpcdet_code, openpcdet_reference as ref

# OpenPCDet's tools/cfgs/waymo_models/pv_rcnn_plusplus.yaml, PFE.SA_LAYER.x_conv4 (x_conv3's
# differs in its distances only: 1.2 and 2.4)
WAYMO_X_CONV4 = dict(
    NAME="VectorPoolAggregationModuleMSG",
    NUM_GROUPS=2,
    LOCAL_AGGREGATION_TYPE="local_interpolation",
    NUM_REDUCED_CHANNELS=32,
    NUM_CHANNELS_OF_LOCAL_AGGREGATION=32,
    MSG_POST_MLPS=[128],
    FILTER_NEIGHBOR_WITH_ROI=True,
    RADIUS_OF_NEIGHBOR_WITH_ROI=6.4,
    GROUP_CFG_0=dict(NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=2.4, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[64, 64]),
    GROUP_CFG_1=dict(NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=4.8, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[64, 64]),
)
INPUT_CHANNELS = 64  # x_conv4's


def to(device, *ts):
    return [t.to(device) for t in ts]


def lattice(lo, hi, step=0.8):
    axes = [torch.arange(a, b, step) for a, b in zip(lo, hi)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)


def dense_scene(seed):
    """Two clouds of voxel centres on x_conv4's 0.8 m lattice (Waymo's 0.1 m voxels, 8 times
    down): a ground layer and a building block each, stacked in a random order, with 64 features;
    keypoints near and inside the blocks, where a keypoint's ball holds over 1,000 points."""
    g = torch.Generator().manual_seed(seed)
    clouds = [
        torch.cat([lattice((-24, -24, 0), (24, 24, 0.1)), lattice((-6, -6, 0.8), (6, 6, 7.2))]),
        torch.cat([lattice((-16, -16, 0), (16, 16, 0.1)), lattice((2, -4, 0.8), (10, 4, 5.6))]),
    ]
    clouds = [c[torch.randperm(c.shape[0], generator=g)] for c in clouds]
    keypoints = [
        torch.rand(24, 3, generator=g) * torch.tensor([20.0, 20.0, 4.0]) - torch.tensor([10.0, 10.0, 0.0]),
        torch.rand(16, 3, generator=g) * torch.tensor([16.0, 12.0, 4.0]) - torch.tensor([2.0, 6.0, 0.0]),
    ]
    xyz = torch.cat(clouds)
    features = torch.randn(xyz.shape[0], INPUT_CHANNELS, generator=g)
    cnt = torch.tensor([c.shape[0] for c in clouds], dtype=torch.int32)
    new_cnt = torch.tensor([k.shape[0] for k in keypoints], dtype=torch.int32)
    return xyz, cnt, torch.cat(keypoints), new_cnt, features


def first_ball_points_in_cube(xyz, cnt, new_xyz, new_cnt, distance, slots=1000):
    """The neighbours a search through the ball finds: the first `slots` points of the ball of
    radius sqrt(3) distance, then the cube test (rows of xyz, -1 padded)."""
    offsets, new_offsets = [torch.nn.functional.pad(c.long().cumsum(0), (1, 0)) for c in (cnt, new_cnt)]
    idx = pointops.ball_query_packed(
        new_xyz, new_offsets, xyz, offsets, distance * math.sqrt(3.0) * (1 + 2**-20), slots, pad="minus_one"
    ).indices
    inside = (idx >= 0) & ((xyz[idx.clamp(min=0)] - new_xyz[:, None]).abs() <= distance).all(-1)
    return torch.where(inside, idx, torch.full_like(idx, -1)).sort(1).values


def test_a_ball_of_more_than_1000_points_keeps_its_cube_points(device):
    # 1,200 points in a tight blob 12 m away come first in the cloud, 10 points near the origin
    # last; around a centre at the origin the cube of half-width 9.6 holds the 10, the ball of
    # radius 16.6 around it all 1,210
    g = torch.Generator().manual_seed(80)
    blob = torch.tensor([12.0, 0.0, 0.0]) + torch.rand(1200, 3, generator=g) * 0.1
    near = torch.rand(10, 3, generator=g) * 2 - 1
    xyz, cnt = torch.cat([blob, near]), torch.tensor([1210], dtype=torch.int32)
    new_xyz, new_cnt = torch.zeros(1, 3), torch.tensor([1], dtype=torch.int32)
    grid = openpcdet_code.stack_modules(pointnet2_stack_utils).VectorPoolAggregationModule.get_dense_voxels_by_center(
        new_xyz, 4.8, [3, 3, 3]
    )
    args = (4.8, -1, 0, 1000, 27, 2.0)
    dist, idx, _ = pointnet2_stack_utils.three_nn_for_vector_pool_by_two_step(
        *to(device, xyz, cnt, new_xyz, grid, new_cnt), *args
    )
    exp_dist, exp_idx, _ = ref.three_nn_for_vector_pool_by_two_step(xyz, cnt, new_xyz, grid, new_cnt, *args)
    assert torch.equal(idx.cpu(), exp_idx) and torch.equal(dist.cpu(), exp_dist)
    assert (idx >= 1200).all()  # three neighbours among the 10 near points for every grid centre
    assert (first_ball_points_in_cube(xyz, cnt, new_xyz, new_cnt, 9.6) == -1).all()  # what the ball's first 1,000 miss


def build(ns):
    torch.manual_seed(5)
    layer, c_out = ns.build_local_aggregation_module(
        INPUT_CHANNELS, openpcdet_code.EasyDict(copy.deepcopy(WAYMO_X_CONV4))
    )
    assert c_out == 128
    return layer


@pytest.mark.parametrize("train", [False, True])
def test_pv_rcnn_plusplus_vector_pool_on_a_dense_scene(device, train, monkeypatch):
    """OpenPCDet's VectorPoolAggregationModuleMSG with the Waymo x_conv4 settings (local
    interpolation, cubes of half-width 4.8 and 9.6) on pointops.nn.stack and on the references:
    the same outputs, feature gradients and weight gradients."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    xyz, cnt, new_xyz, new_cnt, features = dense_scene(81)
    # the scene is dense: balls of over 1,000 points whose first 1,000 miss cube points, and
    # cubes of over 1,000 points (OpenPCDet keeps their first 1,000)
    for distance in (4.8, 9.6):
        found, _ = ref._local_neighbors(
            xyz.numpy(), [0, int(cnt[0])], cnt.tolist(), 0, new_xyz[0].numpy(), distance, -1, 0, cap=10**9
        )
        assert len(found) > 1000 or distance == 4.8
    through_ball = first_ball_points_in_cube(xyz, cnt, new_xyz, new_cnt, 4.8)
    cube = pointops.cube_query_packed(
        new_xyz, torch.tensor([0, 24, 40]), xyz, torch.tensor([0, int(cnt[0]), xyz.shape[0]]), 4.8, 1000
    )
    assert not torch.equal(through_ball, cube.indices)

    ours = build(openpcdet_code.stack_modules(pointnet2_stack_utils)).to(device).train(train)
    theirs = build(openpcdet_code.stack_modules(ref.stack_utils)).train(train)
    theirs.load_state_dict(ours.state_dict())
    weight = torch.randn(new_xyz.shape[0], 128, generator=torch.Generator().manual_seed(82))

    def run(layer, device):
        f = features.detach().clone().to(device).requires_grad_()
        x, c, n, nc = to(device, xyz, cnt, new_xyz, new_cnt)
        _, out = layer(xyz=x, xyz_batch_cnt=c, new_xyz=n, new_xyz_batch_cnt=nc, features=f)
        (out * weight.to(device)).sum().backward()
        return out.detach().cpu(), f.grad.cpu(), {k: p.grad.cpu() for k, p in layer.named_parameters()}

    out, grad, weight_grads = run(ours, device)
    exp_out, exp_grad, exp_weight_grads = run(theirs, "cpu")
    assert out.shape == (40, 128) and out.abs().sum() > 0
    torch.testing.assert_close(out, exp_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad, exp_grad, rtol=1e-4, atol=1e-4 * exp_grad.abs().max().item())
    assert exp_grad.abs().sum() > 0 and set(weight_grads) == set(exp_weight_grads)
    for name, g in exp_weight_grads.items():
        torch.testing.assert_close(
            weight_grads[name], g, rtol=1e-4, atol=1e-4 * max(g.abs().max().item(), 1e-6), msg=lambda m: f"{name}: {m}"
        )
    # pointops' own modules are the same layers
    mine, _ = pointnet2_stack_utils.build_local_aggregation_module(
        INPUT_CHANNELS, openpcdet_code.EasyDict(copy.deepcopy(WAYMO_X_CONV4))
    )
    assert set(mine.state_dict()) == set(ours.state_dict())


@pytest.mark.parametrize(
    "neighbor_type, nsample, pooling_type", [(0, -1, 0), (1, -1, 0), (0, -1, 1), (0, 5, 1), (0, 300, 0), (1, 7, 1)]
)
def test_voxel_query_keeps_every_cube_point(device, neighbor_type, nsample, pooling_type):
    # cubes of 1,000 to 1,400 points: average pooling takes them all (OpenPCDet's has no cap)
    g = torch.Generator().manual_seed(83)
    xyz = torch.rand(1500, 3, generator=g) * 4
    cnt = torch.tensor([1500], dtype=torch.int32)
    new_xyz = torch.rand(6, 3, generator=g) * 0.4 + 1.8
    new_cnt = torch.tensor([6], dtype=torch.int32)
    features = torch.randn(1500, 6, generator=g, dtype=torch.float64).float()
    args = (3, 2, 2, 1.8, 3, 1, 100, nsample, neighbor_type, pooling_type)
    f = features.to(device).detach().clone().requires_grad_()
    out = pointnet2_stack_utils.vector_pool_with_voxel_query_op(
        *to(device, xyz, cnt), f, *to(device, new_xyz, new_cnt), *args
    )
    fe = features.detach().clone().requires_grad_()
    expected = ref.vector_pool_with_voxel_query_op(xyz, cnt, fe, new_xyz, new_cnt, *args)
    for a, e in zip(out, expected):
        torch.testing.assert_close(a.detach().cpu(), e, rtol=1e-5, atol=1e-5)
    if pooling_type == 0 and nsample < 0 and neighbor_type == 0:
        assert (out[3].sum(1) > 1000).all()
    weight = torch.randn(out[0].shape, generator=torch.Generator().manual_seed(84))
    (out[0] * weight.to(device)).sum().backward()
    (expected[0] * weight).sum().backward()
    torch.testing.assert_close(f.grad.cpu(), fe.grad, rtol=1e-5, atol=1e-5)
    # the Function class gives the same values and gradient
    f2 = features.to(device).detach().clone().requires_grad_()
    again = pointnet2_stack_utils.VectorPoolWithVoxelQuery.apply(
        *to(device, xyz, cnt), f2, *to(device, new_xyz, new_cnt), *args
    )
    assert torch.equal(again[0], out[0])
    (again[0] * weight.to(device)).sum().backward()
    torch.testing.assert_close(f2.grad, f.grad, rtol=1e-6, atol=1e-6)


def test_random_choice_stops_after_nsample_filled_cells(device):
    # a 2 x 1 x 1 grid of half-width 1 around the origin: points a, b in cell 0, then c in cell 1.
    # OpenPCDet takes a, skips b (its cell is filled: not counted) and takes c: nsample = 2 fills
    # both cells, not the cells of the first two neighbours
    xyz = torch.tensor([[-0.5, 0.0, 0.0], [-0.4, 0.1, 0.0], [0.5, 0.0, 0.2]])
    features = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    cnt, new_xyz, new_cnt = (
        torch.tensor([3], dtype=torch.int32),
        torch.zeros(1, 3),
        torch.tensor([1], dtype=torch.int32),
    )
    for nsample, filled in ((2, [1, 1]), (1, [1, 0]), (-1, [1, 1])):
        new_features, local_xyz, _, point_cnt = pointnet2_stack_utils.vector_pool_with_voxel_query_op(
            *to(device, xyz, cnt, features, new_xyz, new_cnt), 2, 1, 1, 1.0, 2, 1, 100, nsample, 0, 1
        )
        assert point_cnt.tolist() == [filled]
        expected = [1.0, 10.0] + ([3.0, 30.0] if filled[1] else [0.0, 0.0])
        assert new_features.tolist() == [expected]
        assert local_xyz[0, :3].tolist() == [-0.5, 0.0, 0.0]
    # average pooling with nsample = 2 takes a and b, the first two neighbours
    new_features, _, _, point_cnt = pointnet2_stack_utils.vector_pool_with_voxel_query_op(
        *to(device, xyz, cnt, features, new_xyz, new_cnt), 2, 1, 1, 1.0, 2, 1, 100, 2, 0, 0
    )
    assert point_cnt.tolist() == [[2, 0]] and new_features.tolist() == [[1.5, 15.0, 0.0, 0.0]]
