"""Hard voxelization: mmcv-deterministic reference equality, edges, errors, CPU == CUDA."""

import numpy as np
import pytest
import torch

import pointops
from pointops.reference import bev as reference
from tests.conftest import assert_same

NAN = float("nan")
INF = float("inf")
SIZE = [0.5, 0.5, 1.0]
RANGE = [0.0, 0.0, 0.0, 3.0, 3.0, 2.0]  # a 6 x 6 x 2 grid


def voxelize(points, size, point_range, max_points, max_voxels, lengths=None, device="cpu"):
    lengths = None if lengths is None else lengths.to(device)
    return torch.ops.pointops.voxelize(points.to(device), lengths, size, point_range, max_points, max_voxels)


def check(points, size, point_range, max_points, max_voxels, lengths=None, device="cpu"):
    """Runs the op, compares it with the reference and returns the outputs on the CPU."""
    actual = voxelize(points, size, point_range, max_points, max_voxels, lengths, device)
    assert_same(actual, reference.voxelize(points, size, point_range, max_points, max_voxels, lengths))
    return tuple(a.cpu() for a in actual)


def clustered_clouds(batch, n, channels, dtype=torch.float32, seed=0):
    """Points snapped near a coarse lattice (many share a voxel) plus ~10% outside RANGE."""
    g = torch.Generator().manual_seed(seed)
    xyz = torch.randint(-1, 8, (batch, n, 3), generator=g).float() * 0.4 + torch.rand(batch, n, 3, generator=g) * 0.1
    features = torch.randn(batch, n, channels - 3, generator=g)
    return torch.cat([xyz, features], dim=2).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels", [3, 5])
def test_matches_reference_on_ragged_clouds(device, dtype, channels):
    points = clustered_clouds(4, 300, channels, dtype)
    lengths = torch.tensor([300, 120, 0, 299])
    voxels, coords, num_points, num_voxels, point_voxel = check(points, SIZE, RANGE, 5, 40, lengths, device)
    assert voxels.dtype == dtype and voxels.shape == (4, 40, 5, channels)
    assert num_voxels[2] == 0 and (point_voxel[1, 120:] == -1).all()
    assert (num_points > 0).sum(1).tolist() == num_voxels.tolist()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_cells_in_float32(device, dtype):
    points = clustered_clouds(2, 200, 4, dtype, seed=1)
    voxels = check(points, SIZE, RANGE, 4, 50, device=device)[0]
    assert voxels.dtype == dtype


def test_voxels_in_order_of_first_appearance(device):
    # Cells visited C, A, B, A, C, B: slots C = 0, A = 1, B = 2, whatever the cell order.
    a, b, c = [0.1, 0.1, 0.1], [1.2, 0.1, 0.1], [0.1, 2.7, 1.5]
    points = torch.tensor([[c, a, b, a, c, b]])
    _, coords, num_points, num_voxels, point_voxel = check(points, SIZE, RANGE, 4, 10, device=device)
    assert coords[0, :4].tolist() == [[1, 5, 0], [0, 0, 0], [0, 0, 2], [-1, -1, -1]]
    assert num_points[0, :4].tolist() == [2, 2, 2, 0] and num_voxels.tolist() == [3]
    assert point_voxel.tolist() == [[0, 1, 2, 1, 0, 2]]


def test_full_voxel_keeps_its_first_points(device):
    # 50 points in one voxel: the first 8 by index are stored, and all of them map to it.
    g = torch.Generator().manual_seed(3)
    xyz = torch.rand(1, 50, 3, generator=g) * 0.4 + 1.05
    points = torch.cat([xyz, torch.arange(50.0).view(1, 50, 1)], dim=2)
    voxels, coords, num_points, num_voxels, point_voxel = check(points, SIZE, RANGE, 8, 4, device=device)
    assert num_voxels.tolist() == [1] and num_points[0, 0] == 8 and coords[0, 0].tolist() == [1, 2, 2]
    assert voxels[0, 0, :, 3].tolist() == list(range(8))
    assert (point_voxel == 0).all()
    assert (voxels[0, 1:] == 0).all()


def test_voxels_past_max_voxels_are_dropped_with_their_points(device):
    # 36 x-y cells visited in a scrambled order, each twice; only the first 5 voxels are kept, and
    # a kept voxel's later points still find it after dropped voxels appeared.
    order = torch.randperm(36, generator=torch.Generator().manual_seed(4))
    cells = torch.cat([order, order.flip(0)])
    xyz = torch.stack([(cells % 6) * 0.5 + 0.25, (cells // 6) * 0.5 + 0.25, torch.full((72,), 0.5)], 1)
    points = xyz.unsqueeze(0)
    _, coords, num_points, num_voxels, point_voxel = check(points, SIZE, RANGE, 3, 5, device=device)
    assert num_voxels.tolist() == [5] and num_points[0].tolist() == [2] * 5
    assert point_voxel[0, :5].tolist() == [0, 1, 2, 3, 4] and (point_voxel[0, 5:67] == -1).all()
    assert point_voxel[0, 67:].tolist() == [4, 3, 2, 1, 0]
    assert coords[0, :, 2].tolist() == (order[:5] % 6).tolist()


def test_points_on_voxel_borders(device):
    # Exact binary sizes: a coordinate on a border belongs to the voxel above it.
    size, point_range = [0.25, 0.25, 0.25], [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0]
    x = torch.tensor([-1.0, -0.75, -0.5, 0.0, 0.25, 0.75])
    points = torch.stack([x, x.flip(0), torch.zeros(6)], 1).unsqueeze(0)
    _, coords, _, _, point_voxel = check(points, size, point_range, 2, 10, device=device)
    assert coords[0, :6, 2].tolist() == [0, 1, 2, 4, 5, 7]
    assert coords[0, :6, 1].tolist() == [7, 5, 4, 2, 1, 0]
    assert (coords[0, :6, 0] == 4).all() and point_voxel.tolist() == [list(range(6))]


def test_range_edges_are_half_open(device):
    lo, hi = np.float32(0.0), np.float32(3.0)
    below_max = float(np.nextafter(hi, np.float32(0)))
    below_min = float(np.nextafter(lo, np.float32(-1)))
    points = torch.tensor(
        [
            [
                [0.0, 0.0, 0.0],  # the min corner: cell (0, 0, 0)
                [below_max, 1.0, 1.0],  # just inside max x: the last cell
                [3.0, 1.0, 1.0],  # x == x_max: outside
                [1.0, 3.0, 1.0],  # y == y_max
                [1.0, 1.0, 2.0],  # z == z_max
                [below_min, 1.0, 1.0],  # just below x_min
                [1.0, 1.0, -1e-30],  # just below z_min
                [-0.0, 1.0, 1.0],  # -0.0 is x_min
            ]
        ]
    )
    _, coords, _, num_voxels, point_voxel = check(points, SIZE, RANGE, 2, 10, device=device)
    assert point_voxel.tolist() == [[0, 1, -1, -1, -1, -1, -1, 2]]
    assert coords[0, :3].tolist() == [[0, 0, 0], [1, 2, 5], [1, 2, 0]] and num_voxels.tolist() == [3]


def test_float32_rounding_near_borders_matches_reference(device):
    # KITTI's y range with 0.1 voxels (not exact in binary): coordinates on and one ulp around
    # each nominal border, where (y - y_min) / dy rounds either way.
    point_range, size = [0.0, -40.0, -3.0, 70.4, 40.0, 1.0], [0.1, 0.1, 0.2]
    border = np.float32(-40.0) + np.arange(801, dtype=np.float32) * np.float32(0.1)
    ys = np.concatenate([border, np.nextafter(border, np.float32(-np.inf)), np.nextafter(border, np.float32(np.inf))])
    xs = np.float32(70.4) - np.abs(ys) / np.float32(2)  # sweeps x up to x_max too
    points = torch.from_numpy(np.stack([xs, ys, np.zeros_like(ys)], 1)).unsqueeze(0)
    check(points, size, point_range, 3, 3000, device=device)
    check(points.double(), size, point_range, 3, 3000, device=device)


def test_range_not_a_whole_number_of_voxels(device):
    # round(1.2 / 0.25) = 5 cells along x: the last one reaches past x_max, to 1.25.
    size, point_range = [0.25, 1.0, 1.0], [0.0, 0.0, 0.0, 1.2, 1.0, 1.0]
    points = torch.tensor([[[1.1, 0.5, 0.5], [1.22, 0.5, 0.5], [1.25, 0.5, 0.5]]])
    _, coords, _, _, point_voxel = check(points, size, point_range, 2, 4, device=device)
    assert point_voxel.tolist() == [[0, 0, -1]] and coords[0, 0].tolist() == [0, 0, 4]
    # round(1.1 / 0.25) = 4: cells stop at 1.0, before x_max.
    _, _, _, _, point_voxel = check(
        points * 0 + torch.tensor([1.05, 0.5, 0.5]), size, [0, 0, 0, 1.1, 1, 1], 2, 4, device=device
    )
    assert point_voxel.tolist() == [[-1, -1, -1]]


def test_nan_and_inf_coordinates_are_dropped(device):
    points = torch.tensor(
        [
            [
                [0.2, 0.2, 0.2, 1.0],
                [NAN, 0.2, 0.2, 2.0],
                [0.2, INF, 0.2, 3.0],
                [0.2, 0.2, -INF, 4.0],
                [0.3, 0.3, 0.3, NAN],  # a NaN feature is carried, not dropped
            ]
        ]
    )
    voxels, _, num_points, _, point_voxel = check(points, SIZE, RANGE, 4, 4, device=device)
    assert point_voxel.tolist() == [[0, -1, -1, -1, 0]] and num_points[0, 0] == 2
    assert voxels[0, 0, 0, 3] == 1.0 and voxels[0, 0, 1, 3].isnan()


@pytest.mark.parametrize("shape", [(0, 10, 4), (2, 0, 4), (3, 5, 3)])
def test_empty_inputs(device, shape):
    points = torch.full(shape, 10.0)  # (3, 5, 3): every point outside the range
    voxels, coords, num_points, num_voxels, point_voxel = voxelize(points, SIZE, RANGE, 4, 6, device=device)
    assert voxels.shape == (shape[0], 6, 4, shape[2]) and (voxels == 0).all()
    assert coords.shape == (shape[0], 6, 3) and (coords == -1).all()
    assert (num_points == 0).all() and (num_voxels == 0).all()
    assert point_voxel.shape == shape[:2] and (point_voxel == -1).all()


def test_lengths_are_clamped(device):
    points = clustered_clouds(3, 50, 4, seed=5)
    actual = voxelize(points, SIZE, RANGE, 3, 20, torch.tensor([-3, 0, 400]), device)
    assert_same(actual, reference.voxelize(points, SIZE, RANGE, 3, 20, torch.tensor([0, 0, 50])))


def test_zero_capacity(device):
    points = clustered_clouds(2, 80, 4, seed=6)
    check(points, SIZE, RANGE, 0, 30, device=device)  # point_voxel and coords only
    _, coords, _, num_voxels, point_voxel = check(points, SIZE, RANGE, 3, 0, device=device)
    assert coords.shape == (2, 0, 3) and (num_voxels == 0).all() and (point_voxel == -1).all()


def test_non_contiguous_points(device):
    base = clustered_clouds(2, 60, 6, seed=7)
    points = base[:, ::2, 1:]  # strided in N and C
    assert not points.is_contiguous()
    assert_same(voxelize(points, SIZE, RANGE, 3, 30, device=device), voxelize(points.contiguous(), SIZE, RANGE, 3, 30))


def test_wrappers(device):
    points = clustered_clouds(2, 100, 4, seed=8).to(device)
    lengths = torch.tensor([100, 70], device=device)
    result = pointops.voxelize(points, SIZE, RANGE, 5, 30, lengths)
    assert isinstance(result, pointops.Voxels)
    assert_same(result, torch.ops.pointops.voxelize(points, lengths, SIZE, RANGE, 5, 30))

    point_voxel, coords, num_voxels = pointops.voxelize_dynamic(points, SIZE, RANGE, lengths)
    hard = torch.ops.pointops.voxelize(points, lengths, SIZE, RANGE, 0, 100)
    assert_same((point_voxel, coords, num_voxels), (hard[4], hard[1], hard[3]))
    # No caps: every point inside the grid gets a voxel, whose cell is the point's own.
    per_point = coords.gather(1, point_voxel.clamp(min=0).unsqueeze(-1).expand(-1, -1, 3)).long()
    cell = torch.floor(points[..., :3] / torch.tensor(SIZE, device=device)).long().flip(-1)
    inside = ((cell >= 0) & (cell < torch.tensor([2, 6, 6], device=device))).all(-1)
    inside &= torch.arange(100, device=device) < lengths.unsqueeze(1)
    assert ((point_voxel >= 0) == inside).all()
    assert (per_point[inside] == cell[inside]).all()


def test_bench_baseline_matches_the_op(device):
    """tools/bench.py times voxelize against the plain-PyTorch baseline: both must agree."""
    points = clustered_clouds(2, 400, 4, seed=9).to(device)
    expected = voxelize(points, SIZE, RANGE, 4, 25, device=device)
    assert_same(reference.voxelize_baseline(points, SIZE, RANGE, 4, 25), expected)


BAD_ARGUMENTS = [
    (dict(points=torch.rand(10, 3)), r"points must have shape \(B, N, C\)"),
    (dict(points=torch.ones(1, 10, 3, dtype=torch.int32)), r"points must be float32, float64"),
    (dict(points=torch.rand(1, 10, 2)), r"C >= 3"),
    (dict(lengths=torch.tensor([3], dtype=torch.int32)), r"lengths must be Long"),
    (dict(lengths=torch.tensor([3, 4])), r"lengths must have shape \[1\]"),
    (dict(voxel_size=[0.5, 0.5]), r"voxel_size must have 3 values"),
    (dict(voxel_size=[0.5, 0.0, 0.5]), r"voxel_size\[1\] \(y\) must be finite and > 0"),
    (dict(voxel_size=[0.5, 0.5, NAN]), r"voxel_size\[2\] \(z\) must be finite and > 0"),
    (dict(voxel_size=[-0.5, 0.5, 0.5]), r"voxel_size\[0\] \(x\) must be finite and > 0"),
    (dict(point_range=[0.0, 0.0, 0.0, 1.0, 1.0]), r"point_range must have 6 values"),
    (dict(point_range=[0.0, 2.0, 0.0, 1.0, 1.0, 1.0]), r"point_range must have finite y_min < y_max"),
    (dict(point_range=[0.0, 0.0, 0.0, INF, 1.0, 1.0]), r"point_range must have finite x_min < x_max"),
    (
        dict(point_range=[0.0, 0.0, 0.0, 0.2, 1.0, 1.0]),
        r"point_range and voxel_size must give the grid 1 to 2\^24 voxels along x",
    ),
    (dict(voxel_size=[1e-8, 0.5, 0.5]), r"point_range and voxel_size must give the grid 1 to 2\^24 voxels along x"),
    (
        dict(voxel_size=[1.0, 1.0, 1.0], point_range=[0.0, 0.0, 0.0, 2.0**24, 2.0**24, 2.0**24]),
        r"batch \* grid cells must fit int64",
    ),
    (dict(max_points_per_voxel=-1), r"max_points_per_voxel must be >= 0"),
    (dict(max_voxels=-2), r"max_voxels must be >= 0"),
    (dict(max_voxels=2**31), r"max_voxels must be at most 2147483647"),
]


@pytest.mark.parametrize("overrides,message", BAD_ARGUMENTS)
def test_bad_arguments_raise_clear_errors(device, overrides, message):
    args = dict(
        points=torch.rand(1, 10, 4),
        lengths=None,
        voxel_size=[0.5, 0.5, 0.5],
        point_range=[0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        max_points_per_voxel=4,
        max_voxels=8,
    )
    args.update(overrides)
    args = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pointops.voxelize(**args)


@pytest.mark.cuda
def test_lengths_on_another_device_is_an_error():
    with pytest.raises(RuntimeError, match=r"lengths must be on the same device as points"):
        torch.ops.pointops.voxelize(torch.rand(1, 10, 4, device="cuda"), torch.tensor([5]), SIZE, RANGE, 2, 4)


def kitti_like(batch, n, seed, dtype=torch.float32):
    """Uniform in KITTI's range (and a margin outside it) with repeated points, as a LiDAR's
    duplicate returns, so voxels hold from one to hundreds of points."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = torch.tensor([-2.0, -42.0, -3.5]), torch.tensor([72.0, 42.0, 1.5])
    xyz = torch.rand(batch, n, 3, generator=g) * (hi - lo) + lo
    dense = torch.rand(batch, n // 4, 3, generator=g) * torch.tensor([3.0, 3.0, 0.6]) + torch.tensor([10.0, 0.0, -1.0])
    xyz[:, : n // 4] = dense
    xyz = xyz[:, torch.randperm(n, generator=g)]
    xyz[:, ::97] = xyz[:, 1::97][:, : xyz[:, ::97].shape[1]]
    features = torch.rand(batch, n, 2, generator=g)
    return torch.cat([xyz, features], dim=2).to(dtype)


KITTI = ([0.1, 0.1, 0.2], [0.0, -40.0, -3.0, 70.4, 40.0, 1.0])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("max_points,max_voxels", [(32, 40000), (5, 3000), (1, 100000), (0, 50000)])
def test_cuda_matches_cpu_on_kitti_sizes(dtype, max_points, max_voxels):
    points = kitti_like(3, 60000, seed=10, dtype=dtype)
    lengths = torch.tensor([60000, 41234, 0])
    cpu = voxelize(points, *KITTI, max_points, max_voxels, lengths)
    cuda = voxelize(points, *KITTI, max_points, max_voxels, lengths, device="cuda")
    assert_same(cuda, cpu)


@pytest.mark.cuda
def test_cuda_matches_reference_on_small_clouds():
    points = clustered_clouds(4, 300, 5)
    check(points, SIZE, RANGE, 5, 40, torch.tensor([300, 120, 0, 299]), device="cuda")
    check(points, SIZE, RANGE, 2, 7, None, device="cuda")


@pytest.mark.cuda
def test_cuda_matches_cpu_with_many_clouds_and_a_large_grid():
    # 64 clouds x 2048 x 2048 x 80 cells: keys need 35 bits, past the 24 of one KITTI grid.
    points = kitti_like(64, 3000, seed=11)
    size, point_range = [0.05, 0.05, 0.1], [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0]
    assert_same(
        voxelize(points, size, point_range, 4, 2500, device="cuda"), voxelize(points, size, point_range, 4, 2500)
    )


@pytest.mark.cuda
def test_cuda_single_voxel_with_many_points():
    points = torch.full((2, 5000, 4), 0.7)
    points[..., 3] = torch.arange(5000.0)
    assert_same(voxelize(points, SIZE, RANGE, 64, 3, device="cuda"), voxelize(points, SIZE, RANGE, 64, 3))
