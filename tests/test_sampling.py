"""Farthest point sampling: reference equality, edge cases, errors, CPU == CUDA on every plan."""

import pytest
import torch

import pointops
from pointops.reference import sampling as reference
from tests.conftest import assert_same

NAN = float("nan")
INF = float("inf")


def ragged_clouds(dtype=torch.float32, seed=0):
    """Three clouds with duplicates, a NaN and an Inf point, and lengths below N."""
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(3, 40, 3, generator=g).to(dtype)
    points[0, 5] = points[0, 2]  # exact duplicates
    points[0, 17] = points[0, 2]
    points[1, 3, 1] = NAN
    points[1, 9, 2] = INF
    lengths = torch.tensor([40, 25, 7])
    return points, lengths


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_reference_on_ragged_clouds(device, dtype):
    points, lengths = ragged_clouds(dtype)
    start = torch.tensor([3, 0, 6])
    expected = reference.fps(points, 30, lengths, start)  # k > lengths[1], lengths[2]
    actual = torch.ops.pointops.fps(points.to(device), lengths.to(device), start.to(device), 30)
    assert_same(actual, expected)
    assert actual[0].dtype == torch.int64 and actual[1].dtype == dtype


@pytest.mark.parametrize("dims", [1, 2, 4, 5])
def test_any_dimension_matches_reference(device, dims):
    points = torch.randn(2, 33, dims, generator=torch.Generator().manual_seed(dims))
    expected = reference.fps(points, 12)
    assert_same(torch.ops.pointops.fps(points.to(device), None, None, 12), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(device, dtype):
    points = torch.rand(2, 30, 3, generator=torch.Generator().manual_seed(1)).to(dtype)
    expected = reference.fps(points.float(), 10)
    actual = torch.ops.pointops.fps(points.to(device), None, None, 10)
    assert actual[1].dtype == torch.float32
    assert_same(actual, expected)


def test_never_repeats_a_point_on_duplicates(device):
    # 4 distinct positions, each 5 times: after 4 picks every distance is 0, then the
    # lowest-index unpicked points follow in order.
    base = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    points = base.repeat(5, 1).unsqueeze(0)
    idx, dist = torch.ops.pointops.fps(points.to(device), None, None, 22)
    idx, dist = idx.cpu()[0], dist.cpu()[0]
    assert idx[:20].unique().numel() == 20
    assert idx[20:].tolist() == [-1, -1]
    assert (dist[4:20] == 0).all() and dist[0] == INF
    assert idx[4:20].tolist() == sorted(idx[4:20].tolist())
    assert_same((idx.unsqueeze(0), dist.unsqueeze(0)), reference.fps(points, 22))


def test_nan_and_inf_points_are_never_picked(device):
    points = torch.rand(1, 12, 3, generator=torch.Generator().manual_seed(4))
    points[0, 0, 0] = NAN  # also the default start: falls back to the first finite point
    points[0, 4, 2] = -INF
    idx, dist = torch.ops.pointops.fps(points.to(device), None, None, 12)
    idx = idx.cpu()[0]
    assert idx[0] == 1 and dist.cpu()[0, 0] == INF
    assert 0 not in idx.tolist() and 4 not in idx.tolist()
    assert idx[-2:].tolist() == [-1, -1]
    assert_same(torch.ops.pointops.fps(points.to(device), None, None, 12), reference.fps(points, 12))


def test_all_nan_cloud_returns_minus_one(device):
    points = torch.full((1, 6, 3), NAN)
    idx, dist = torch.ops.pointops.fps(points.to(device), None, None, 3)
    assert idx.cpu().tolist() == [[-1, -1, -1]] and dist.cpu().tolist() == [[-1.0, -1.0, -1.0]]


def test_start_outside_cloud_falls_back_to_first_point(device):
    points, lengths = ragged_clouds()
    start = torch.tensor([-5, 25, 100])  # 25 == lengths[1]: outside
    idx, _ = torch.ops.pointops.fps(points.to(device), lengths.to(device), start.to(device), 4)
    assert idx[:, 0].cpu().tolist() == [0, 0, 0]
    assert_same(
        torch.ops.pointops.fps(points.to(device), lengths.to(device), start.to(device), 4),
        reference.fps(points, 4, lengths, start),
    )


def test_lengths_are_clamped_to_the_padded_size(device):
    points, _ = ragged_clouds()
    lengths = torch.tensor([-3, 0, 400])
    expected = reference.fps(points, 5, torch.tensor([0, 0, 40]))
    assert_same(torch.ops.pointops.fps(points.to(device), lengths.to(device), None, 5), expected)


def test_huge_coordinates_keep_their_range(device):
    # Squared distances up to 1e34: no cap like torch_cluster's 5e4 initial distance.
    points = torch.tensor([[[0.0, 0, 0], [1e17, 0, 0], [3e16, 0, 0], [-2e16, 0, 0]]])
    idx, dist = torch.ops.pointops.fps(points.to(device), None, None, 4)
    assert idx.cpu().tolist() == [[0, 1, 2, 3]]
    assert dist.cpu()[0, 1].item() == pytest.approx(1e34, rel=1e-6)
    assert_same((idx, dist), reference.fps(points, 4))


@pytest.mark.parametrize("shape", [(0, 10, 3), (2, 0, 3)])
def test_empty_inputs(device, shape):
    idx, dist = torch.ops.pointops.fps(torch.rand(shape, device=device), None, None, 4)
    assert idx.shape == (shape[0], 4) and dist.shape == (shape[0], 4)
    assert (idx == -1).all() and (dist == -1).all()


def test_k_zero(device):
    idx, dist = torch.ops.pointops.fps(torch.rand(2, 5, 3, device=device), None, None, 0)
    assert idx.shape == (2, 0) and dist.shape == (2, 0)


def test_packed_matches_padded(device):
    points, lengths = ragged_clouds()
    packed = torch.cat([points[b, : lengths[b]] for b in range(3)])
    offsets = torch.tensor([0, 40, 65, 72])
    start = torch.tensor([1, 2, 3])
    idx_p, dist_p = torch.ops.pointops.fps_packed(packed.to(device), offsets.to(device), start.to(device), 30)
    idx_r, dist_r = reference.fps(points, 30, lengths, start)
    global_idx = torch.where(idx_r >= 0, idx_r + offsets[:-1, None], idx_r)
    assert_same((idx_p, dist_p), (global_idx, dist_r))


def test_packed_with_empty_cloud_and_no_clouds(device):
    points = torch.rand(5, 3, device=device)
    idx, _ = torch.ops.pointops.fps_packed(points, torch.tensor([0, 0, 5], device=device), None, 2)
    assert idx.cpu().tolist() == [[-1, -1], [0, idx.cpu()[1, 1].item()]]
    idx, dist = torch.ops.pointops.fps_packed(points, torch.tensor([0], device=device), None, 2)
    assert idx.shape == (0, 2) and dist.shape == (0, 2)


def test_wrapper_options(device):
    points, lengths = ragged_clouds()
    points, lengths = points.to(device), lengths.to(device)
    result = pointops.farthest_point_sampling(points, 30, lengths)
    idx, dist = result
    assert torch.equal(result.indices, idx) and torch.equal(result.distances, dist) and dist.shape == (3, 30)
    assert_same(tuple(t.cpu() for t in result), torch.ops.pointops.fps(points.cpu(), lengths.cpu(), None, 30))
    # PV-RCNN style padding: the valid picks again, in order
    rep = pointops.farthest_point_sampling(points, 30, lengths, pad="repeat").indices.cpu()
    assert rep[2].tolist() == (idx[2, :7].cpu().tolist() * 5)[:30]
    with pytest.raises(ValueError, match="pad must be"):
        pointops.farthest_point_sampling(points, 3, pad="wrap")


def test_sample_farthest_points_takes_pytorch3d_calls(device):
    """pytorch3d's documented calls: (points, lengths=None, K=50, random_start_point=False)."""
    points, lengths = ragged_clouds()
    points, lengths = points.to(device), lengths.to(device)
    idx = pointops.farthest_point_sampling(points, 30, lengths).indices
    sampled, sidx = pointops.sample_farthest_points(points, lengths, K=30)
    assert torch.equal(sidx, idx)
    assert torch.equal(sampled[0], points[0, idx[0]])
    assert (sampled[2, 7:] == 0).all() and (sidx[2, 7:] == -1).all()
    assert torch.equal(pointops.sample_farthest_points(points, lengths, 30)[1], idx)
    default = pointops.sample_farthest_points(points[:, :, :3])
    assert default[0].shape == (3, 50, 3) and default[1].shape == (3, 50)
    assert default[1].dtype == torch.int64 and (default[1][:, 40:] == -1).all()
    # a per-cloud K: a list or a tensor; rows pad to max(K) with index -1 and zero points
    for per_cloud in ([5, 12, 3], torch.tensor([5, 12, 3], device=device)):
        chosen, cidx = pointops.sample_farthest_points(points, lengths, K=per_cloud)
        assert cidx.shape == (3, 12)
        assert torch.equal(cidx[1], idx[1, :12])
        assert torch.equal(cidx[0, :5], idx[0, :5]) and (cidx[0, 5:] == -1).all()
        assert (cidx[2, 3:] == -1).all() and (chosen[2, 3:] == 0).all()
    torch.manual_seed(0)
    _, ridx = pointops.sample_farthest_points(points, lengths, K=4, random_start_point=True)
    assert ((ridx[:, 0] >= 0) & (ridx[:, 0] < lengths)).all()
    with pytest.raises(ValueError, match="K and points must have the same batch dimension"):
        pointops.sample_farthest_points(points, lengths, K=[3, 4])


def test_random_start_follows_torch_seed(device):
    points, lengths = ragged_clouds()
    points, lengths = points.to(device), lengths.to(device)
    torch.manual_seed(7)
    a = pointops.farthest_point_sampling(points, 5, lengths, random_start=True).indices
    torch.manual_seed(7)
    b = pointops.farthest_point_sampling(points, 5, lengths, random_start=True).indices
    assert torch.equal(a, b)
    assert ((a[:, 0] >= 0) & (a[:, 0] < lengths)).all()
    starts = set()
    for seed in range(8):
        torch.manual_seed(seed)
        starts.add(int(pointops.farthest_point_sampling(points, 1, lengths, random_start=True).indices[0, 0]))
    assert len(starts) > 1
    offsets = torch.tensor([0, 10, 30], device=device)
    torch.manual_seed(3)
    p = pointops.farthest_point_sampling_packed(points[0, :30], offsets, 2, random_start=True).indices
    assert (p[0, 0] < 10) and (10 <= p[1, 0] < 30)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda d: torch.ops.pointops.fps(torch.rand(5, 3, device=d), None, None, 2), r"\(B, N, D\)"),
        (lambda d: torch.ops.pointops.fps(torch.rand(1, 5, 0, device=d), None, None, 2), "D >= 1"),
        (lambda d: torch.ops.pointops.fps(torch.ones(1, 5, 3, dtype=torch.int32, device=d), None, None, 2), "Int"),
        (
            lambda d: torch.ops.pointops.fps(torch.rand(2, 5, 3, device=d), torch.tensor([5], device=d), None, 2),
            r"lengths must have shape \[2\]",
        ),
        (
            lambda d: torch.ops.pointops.fps(
                torch.rand(2, 5, 3, device=d), torch.tensor([5, 5], device=d, dtype=torch.int32), None, 2
            ),
            "lengths must be Long",
        ),
        (
            lambda d: torch.ops.pointops.fps(
                torch.rand(2, 5, 3, device=d), None, torch.zeros(3, dtype=torch.int64, device=d), 2
            ),
            "start must have shape",
        ),
        (lambda d: torch.ops.pointops.fps(torch.rand(2, 5, 3, device=d), None, None, -1), "k must be >= 0, got -1"),
        (
            lambda d: torch.ops.pointops.fps_packed(
                torch.rand(5, 3, device=d), torch.zeros(0, dtype=torch.int64, device=d), None, 2
            ),
            "B \\+ 1 >= 1",
        ),
        (
            lambda d: torch.ops.pointops.fps_packed(
                torch.rand(2, 5, 3, device=d), torch.tensor([0, 5], device=d), None, 2
            ),
            r"\(P, D\)",
        ),
    ],
)
def test_bad_input_raises_clear_errors(device, call, message):
    with pytest.raises(RuntimeError, match=message):
        call(device)


@pytest.mark.parametrize("offsets", [[0, 5, 3], [0, 2, 9], [-1, 3, 5]])
def test_malformed_offsets_raise_on_the_cpu(offsets):
    with pytest.raises(RuntimeError, match=r"offsets must be non-decreasing values in \[0, P = 8\]"):
        torch.ops.pointops.fps_packed(torch.rand(8, 3), torch.tensor(offsets), None, 2)


@pytest.mark.cuda
def test_malformed_offsets_are_empty_clouds_on_cuda():
    points = torch.rand(8, 3, device="cuda")
    idx, _ = torch.ops.pointops.fps_packed(points, torch.tensor([0, 5, 3], device="cuda"), None, 2)
    assert idx[1].tolist() == [-1, -1]


def test_lengths_on_another_device_are_refused_when_tracing():
    points = torch.rand(2, 5, 3)
    with pytest.raises(RuntimeError, match="lengths must be on the same device as points"):
        torch.ops.pointops.fps(points, torch.tensor([5, 5], device="meta"), None, 2)


@pytest.mark.cuda
def test_mixed_devices_raise():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.pointops.fps(torch.rand(2, 5, 3, device="cuda"), torch.tensor([5, 5]), None, 2)


# Every CUDA layout the sizes pick (csrc/sampling/fps_plan.cpp; the plans named are those of a
# 114- or 132-SM sm_90 GPU: H100, H200) against the CPU: block, cluster and grid, with 8 or 16
# points per thread, with the spatial order or overflow streaming; D other than 2 or 3 streams.
@pytest.mark.cuda
@pytest.mark.parametrize(
    "batch, n, dims, k",
    [
        (3, 700, 3, 300),  # block, 8 points per thread
        (1, 2000, 3, 2000),  # block, every point picked
        (100, 9000, 3, 64),  # block (one SM per cloud), 16 points per thread, overflow streaming
        (2, 9000, 3, 257),  # cluster of 5, 8 points per thread
        (2, 20000, 2, 100),  # cluster of 10, D = 2
        (1, 65536, 3, 200),  # cluster of 16, 16 points per thread
        (2, 120000, 3, 300),  # cluster of 16, 7,500 points per block
        (40, 60000, 3, 16),  # cluster of 2-3, overflow streaming
        (1, 200000, 3, 100),  # grid of 98, 8 points per thread
        (2, 300000, 2, 64),  # grid of 57-66, 16 points per thread, D = 2
        (20, 200000, 3, 16),  # grid of 5-6, overflow streaming
        (4, 2500, 5, 64),  # D = 5: the streaming kernel
    ],
)
def test_cuda_equals_cpu_on_every_plan(batch, n, dims, k):
    g = torch.Generator().manual_seed(n + k)
    points = torch.randn(batch, n, dims, generator=g) * 30
    points[:, 11] = points[:, 3]  # duplicates
    points[0, 5, 0] = NAN
    lengths = torch.tensor([n - 17 * b for b in range(batch)])
    start = torch.tensor([b * 5 for b in range(batch)])
    expected = torch.ops.pointops.fps(points, lengths, start, k)
    actual = torch.ops.pointops.fps(points.cuda(), lengths.cuda(), start.cuda(), k)
    assert_same(actual, expected)
    packed = torch.cat([points[b, : lengths[b]] for b in range(batch)])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    expected_p = torch.ops.pointops.fps_packed(packed, offsets, start, k)
    assert_same(torch.ops.pointops.fps_packed(packed.cuda(), offsets.cuda(), start.cuda(), k), expected_p)


# Lattice points: equal distances everywhere, so rounds of several picks must stop at every tie
# that the lowest-index rule decides.
@pytest.mark.cuda
@pytest.mark.parametrize("side, k", [(12, 1728), (20, 3000), (60, 1500)])  # block, cluster, grid
def test_cuda_equals_cpu_on_lattices(side, k):
    axis = torch.arange(side, dtype=torch.float32)
    points = torch.cartesian_prod(axis, axis, axis).unsqueeze(0)
    points = points[:, torch.randperm(points.shape[1], generator=torch.Generator().manual_seed(side))]
    start = torch.tensor([side])
    expected = torch.ops.pointops.fps(points, None, start, k)
    assert_same(torch.ops.pointops.fps(points.cuda(), None, start.cuda(), k), expected)


@pytest.mark.cuda
def test_cuda_deterministic_across_runs():
    points = torch.rand(4, 30000, 3, device="cuda")
    first = torch.ops.pointops.fps(points, None, None, 512)
    for _ in range(3):
        assert_same(torch.ops.pointops.fps(points, None, None, 512), tuple(t.cpu() for t in first))


@pytest.mark.cuda
@pytest.mark.slow
def test_cuda_equals_cpu_on_a_million_points():
    points = torch.rand(1, 1_000_000, 3, generator=torch.Generator().manual_seed(0))
    expected = torch.ops.pointops.fps(points, None, None, 256)
    assert_same(torch.ops.pointops.fps(points.cuda(), None, None, 256), expected)
