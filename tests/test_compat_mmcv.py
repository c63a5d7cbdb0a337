"""mmcv's own op tests (open-mmlab/mmcv @a8073c74, tests/test_ops/test_*.py), ported to
pointops.compat.mmcv: their inputs and expected values (tests/mmcv_cases.py,
tests/data/mmcv_3d_ops.npz), run on every device (mmcv runs most of them on CUDA only). Where
pointops deliberately differs, the test says so and checks pointops' documented behaviour. Then
what mmcv does not test: min_radius on stacked clouds, uniform sampling, Function classes."""

import os

import numpy as np
import pytest
import torch

from pointops.compat import mmcv
from pointops.reference import geometry as ref
from tests import mmcv_cases as case
from tests.conftest import DEVICES

DATA = np.load(os.path.join(os.path.dirname(__file__), "data", "mmcv_3d_ops.npz"))


def t(values, device, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=device)


# ---- test_ball_query.py ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_ball_query(device):
    xyz, new_xyz = t(case.BALL_XYZ, device), t(case.BALL_CENTRES, device)
    idx = mmcv.ball_query(0, 0.2, 5, xyz, new_xyz)
    assert idx.dtype == torch.int32
    assert torch.equal(idx.cpu(), torch.tensor(case.BALL_EXPECTED, dtype=torch.int32))
    # dilated ball query
    idx = mmcv.ball_query(0.2, 0.4, 5, xyz, new_xyz)
    assert torch.equal(idx.cpu(), torch.tensor(case.BALL_EXPECTED_DILATED, dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_stack_ball_query(device, dtype):
    new_xyz, xyz = t(case.STACK_BALL_CENTRES, device, dtype), t(case.STACK_BALL_XYZ, device, dtype)
    counts = (
        torch.tensor([5, 5], dtype=torch.int32, device=device),
        torch.tensor([10, 10], dtype=torch.int32, device=device),
    )
    idx = mmcv.ball_query(0, 0.2, 5, xyz, new_xyz, counts[1], counts[0])
    assert torch.equal(idx.cpu(), torch.tensor(case.STACK_BALL_EXPECTED, dtype=torch.int32))


# ---- test_knn.py -----------------------------------------------------------------------------------


def _topk_expected(centres, points, k):
    # mmcv's expected value: torch.topk over their squared distances, transposed to (B, k, npoint)
    a = centres.unsqueeze(2).repeat(1, 1, points.shape[1], 1)
    b = points.unsqueeze(1).repeat(1, centres.shape[1], 1, 1)
    dist = ((a - b) * (a - b)).sum(-1)
    return dist.topk(k=k, dim=2, largest=False)[1].transpose(2, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_knn(device):
    new_xyz, xyz = t(case.KNN_CENTRES, device), t(case.KNN_XYZ, device)
    expected = _topk_expected(new_xyz.cpu(), xyz.cpu(), 5)
    idx = mmcv.knn(5, xyz, new_xyz)
    assert idx.dtype == torch.int32 and idx.shape == (2, 5, 5)
    assert torch.equal(idx.cpu().long(), expected)
    idx = mmcv.knn(5, xyz.transpose(1, 2).contiguous(), new_xyz.transpose(1, 2).contiguous(), True)
    assert torch.equal(idx.cpu().long(), expected)
    idx = mmcv.knn(5, xyz, xyz)
    assert torch.equal(idx.cpu().long(), _topk_expected(xyz.cpu(), xyz.cpu(), 5))


# ---- test_three_nn.py / test_three_interpolate.py ---------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_three_nn(device):
    dist, idx = mmcv.three_nn(t(case.THREE_NN_UNKNOWN, device), t(case.THREE_NN_KNOWN, device))
    torch.testing.assert_close(dist.cpu(), torch.tensor(case.THREE_NN_EXPECTED_DIST), atol=1e-4, rtol=1e-8)
    assert torch.equal(idx.cpu(), torch.tensor(case.THREE_NN_EXPECTED_IDX, dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_three_interpolate(device, dtype):
    features = t(case.INTERP_FEATURES, device, dtype)
    idx = torch.tensor(case.INTERP_IDX, device=device).int()
    weight = t(case.INTERP_WEIGHT, device, dtype)
    out = mmcv.three_interpolate(features, idx, weight)
    expected = t(case.INTERP_EXPECTED_OUTPUT, device, dtype)
    assert torch.allclose(out, expected, 1e-3, 1e-4)


# ---- test_gather_points.py / test_group_points.py --------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_gather_points(device):
    features = t(case.GATHER_FEATURES, device)
    idx = torch.tensor(case.GATHER_IDX, dtype=torch.int32, device=device)
    expected = t(case.GATHER_EXPECTED_OUTPUT, device)
    assert torch.allclose(mmcv.gather_points(features, idx), expected)
    assert torch.allclose(mmcv.gather_points(features.half(), idx), expected.half())


GROUP_IDX = [
    [[0, 0, 0], [3, 3, 3], [8, 8, 8], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
    [[0, 0, 0], [6, 6, 6], [9, 9, 9], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
]
STACK_GROUP_IDX = [
    [0, 0, 0],
    [3, 3, 3],
    [8, 8, 8],
    [1, 1, 1],
    [0, 0, 0],
    [2, 2, 2],
    [0, 0, 0],
    [6, 6, 6],
    [9, 9, 9],
    [0, 0, 0],
    [1, 1, 1],
    [0, 0, 0],
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_grouping_points(device, dtype):
    idx = torch.tensor(GROUP_IDX, device=device).int()
    features = t(case.GROUP_FEATURES, device, dtype).requires_grad_()
    output = mmcv.grouping_operation(features, idx)
    output.backward(output)
    assert torch.allclose(output, t(case.GROUP_EXPECTED, device, dtype))
    expected_grad = t(case.GROUP_EXPECTED_GRAD, device, dtype)
    if dtype == torch.float16:
        # deliberately: the gradient of float16 features is the exact sum of the float16 copies
        # rounded once (pointops sums in float32); mmcv's expected sums are of the float32 values,
        # 0.3 % away (6.9576 vs 12 x half(0.5798) = 6.955)
        assert torch.allclose(features.grad, expected_grad, rtol=1e-3, atol=1e-3)
    else:
        assert torch.allclose(features.grad, expected_grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_stack_grouping_points(device, dtype):
    idx = torch.tensor(STACK_GROUP_IDX, device=device).int()
    features = t(case.STACK_GROUP_FEATURES, device, dtype)
    features_batch_cnt = torch.tensor([3, 3], device=device).int()
    indices_batch_cnt = torch.tensor([6, 6], device=device).int()
    output = mmcv.grouping_operation(features, idx, features_batch_cnt, indices_batch_cnt)
    assert torch.allclose(output, t(case.STACK_GROUP_EXPECTED, device, dtype))


# ---- test_furthest_point_sample.py -----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_fps(device):
    idx = mmcv.furthest_point_sample(t(case.FPS_XYZ, device), 3)
    assert torch.equal(idx.cpu(), torch.tensor(case.FPS_EXPECTED, dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_fps_with_dist(device):
    xyz = t(case.FPS_XYZ, device)
    xyz_square_dist = ((xyz.unsqueeze(dim=1) - xyz.unsqueeze(dim=2)) ** 2).sum(-1)
    idx = mmcv.furthest_point_sample_with_dist(xyz_square_dist, 3)
    assert torch.equal(idx.cpu(), torch.tensor(case.FPS_EXPECTED, dtype=torch.int32))
    idx = mmcv.furthest_point_sample_with_dist(torch.from_numpy(DATA["fps_distance"]).to(device), 16)
    assert torch.equal(idx.cpu(), torch.from_numpy(DATA["fps_idx"]))


# ---- test_voxelization.py --------------------------------------------------------------------------


def expected_voxels():
    points, num = DATA["voxel_points"], DATA["voxel_num_points"]
    voxels = np.zeros((num.shape[0], 1000, points.shape[1]), dtype=points.dtype)
    start = 0
    for i, k in enumerate(num):
        voxels[i, :k] = points[DATA["voxel_point_rows"][start : start + k]]
        start += k
    return voxels


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("deterministic", [True, False])
def test_voxelization(device, deterministic):
    voxel_size, point_cloud_range = [0.5, 0.5, 0.5], [0, -40, -3, 70.4, 40, 1]
    points = torch.from_numpy(DATA["voxel_points"]).contiguous().to(device)
    hard = mmcv.Voxelization(voxel_size, point_cloud_range, 1000, deterministic=deterministic)
    voxels, coors, num_points_per_voxel = hard(points)
    # deliberately: deterministic=False gives the deterministic result (one of mmcv's possible ones)
    assert np.all(coors.cpu().numpy() == DATA["voxel_coords"])
    assert np.all(voxels.cpu().numpy() == expected_voxels())
    assert np.all(num_points_per_voxel.cpu().numpy() == DATA["voxel_num_points"])
    dynamic = mmcv.Voxelization(voxel_size, point_cloud_range, -1)
    coors = dynamic(points).cpu().numpy()
    points, expected = points.cpu().numpy(), expected_voxels()
    for i, voxel in enumerate(DATA["voxel_coords"]):
        inside = np.all(coors == voxel, axis=1)
        count = points[inside].shape[0]
        assert count == DATA["voxel_num_points"][i] > 0
        assert np.all(points[inside] == expected[i][:count])


@pytest.mark.parametrize("device", DEVICES)
def test_voxelization_capped(device):
    # test_voxelization_nondeterministic's properties with max_voxels = 50 and max_points = 10:
    # distinct coordinates, each a dynamic voxel, holding its first points (all of them when fewer)
    points = torch.from_numpy(DATA["voxel_points"]).contiguous().to(device)
    hard = mmcv.Voxelization([0.5, 0.5, 0.5], [0, -40, -3, 70.4, 40, 1], 10, 50)
    dynamic = mmcv.Voxelization([0.5, 0.5, 0.5], [0, -40, -3, 70.4, 40, 1], -1)
    voxels, coors, num = (x.cpu() for x in hard(points))
    per_point = dynamic(points).cpu()
    assert voxels.shape == (50, 10, 4) and len({tuple(c) for c in coors.tolist()}) == 50
    for v in range(50):
        rows = torch.nonzero((per_point == coors[v]).all(1)).flatten()
        assert int(num[v]) == min(10, rows.numel())
        assert torch.equal(voxels[v, : int(num[v])], points.cpu()[rows[: int(num[v])]])
        assert (voxels[v, int(num[v]) :] == 0).all()
    # deliberately: a point outside the range is -1 in all three columns
    assert ((per_point == -1).all(1) | (per_point >= 0).all(1)).all()


# ---- beyond mmcv's tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_stack_ball_query_min_radius_and_empty_rows(device):
    g = torch.Generator().manual_seed(0)
    xyz, centres = torch.rand(60, 3, generator=g), torch.rand(12, 3, generator=g)
    centres[-1] = 9.0  # no hit: mmcv's row -1, 0, 0, ...
    cnt, ccnt = torch.tensor([40, 20], dtype=torch.int32), torch.tensor([7, 5], dtype=torch.int32)
    idx = mmcv.ball_query(0.1, 0.4, 6, *[x.to(device) for x in (xyz, centres, cnt, ccnt)]).cpu()
    # deliberately: the stack path applies min_radius (mmcv's stack kernel ignores it)
    for rows, points, queries in ((slice(0, 7), xyz[:40], centres[:7]), (slice(7, 12), xyz[40:], centres[7:])):
        expected, counts = ref.ball_query(queries[None], points[None], 0.4, 6, pad="first", min_radius=0.1)
        expected = torch.where(counts[0, :, None] > 0, expected[0], torch.zeros_like(expected[0]))
        expected[counts[0] == 0, 0] = -1
        assert torch.equal(idx[rows].long(), expected)
    assert idx[-1].tolist() == [-1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_query_and_group(device):
    g = torch.Generator().manual_seed(1)
    xyz, features = torch.rand(2, 200, 3, generator=g).to(device), torch.randn(2, 5, 200, generator=g).to(device)
    centres = xyz[:, :16].contiguous()
    grouper = mmcv.QueryAndGroup(
        0.3, 8, min_radius=0.05, return_grouped_xyz=True, normalize_xyz=True, return_grouped_idx=True
    )
    new_features, grouped_xyz, idx = grouper(xyz, centres, features)
    assert new_features.shape == (2, 8, 16, 8) and grouped_xyz.shape == (2, 3, 16, 8)
    assert torch.equal(idx, mmcv.ball_query(0.05, 0.3, 8, xyz, centres))
    torch.testing.assert_close(new_features[:, :3], (grouped_xyz - centres.transpose(1, 2)[..., None]) / 0.3)
    # kNN grouping (max_radius None)
    out = mmcv.QueryAndGroup(None, 4, return_grouped_idx=True)(xyz, centres, features)
    assert torch.equal(out[1], mmcv.knn(4, xyz, centres).transpose(1, 2))
    # uniform sampling: the distinct neighbours first (ascending), the rest drawn among them
    torch.manual_seed(2)
    _, unique_cnt, idx = mmcv.QueryAndGroup(
        0.12, 16, uniform_sample=True, return_unique_cnt=True, return_grouped_idx=True
    )(xyz, centres, features)
    base = mmcv.ball_query(0, 0.12, 16, xyz, centres)
    for b in range(2):
        for m in range(16):
            distinct = torch.unique(base[b, m])
            assert int(unique_cnt[b, m]) == distinct.numel()
            assert torch.equal(idx[b, m, : distinct.numel()], distinct)
            assert set(idx[b, m].tolist()) == set(distinct.tolist())
    assert mmcv.GroupAll()(xyz, None, features).shape == (2, 8, 1, 200)


def test_function_classes():
    g = torch.Generator().manual_seed(3)
    xyz = torch.rand(2, 40, 3, generator=g)
    assert torch.equal(mmcv.FurthestPointSampling.apply(xyz, 5), mmcv.furthest_point_sample(xyz, 5))
    assert torch.equal(mmcv.BallQuery.apply(0.0, 0.3, 6, xyz, xyz[:, :5]), mmcv.ball_query(0, 0.3, 6, xyz, xyz[:, :5]))
    assert torch.equal(mmcv.KNN.apply(3, xyz, xyz[:, :5]), mmcv.knn(3, xyz, xyz[:, :5]))
    features = torch.randn(12, 4, generator=g, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, 6, (10, 3), generator=g).int()
    cnt, icnt = torch.tensor([6, 6]).int(), torch.tensor([5, 5]).int()
    assert torch.autograd.gradcheck(lambda f: mmcv.GroupingOperation.apply(f, idx, cnt, icnt), (features,))
    batch_features = torch.randn(2, 4, 12, generator=g, dtype=torch.float64, requires_grad=True)
    batch_idx = torch.randint(0, 12, (2, 5, 3), generator=g).int()
    assert torch.autograd.gradcheck(lambda f: mmcv.GroupingOperation.apply(f, batch_idx), (batch_features,))
    assert torch.autograd.gradcheck(
        lambda f: mmcv.GatherPoints.apply(f, batch_idx[..., 0].contiguous()), (batch_features,)
    )
