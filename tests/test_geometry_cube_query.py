"""cube_query_packed (the cube and closed-ball neighbourhoods of PV-RCNN++'s vector pool) against
the pure-PyTorch reference of pointops.reference.geometry on every device, its edge cases and
errors; CPU == CUDA bit for bit."""

import pytest
import torch

import pointops
from pointops.reference import geometry as ref
from tests.test_geometry_neighbors import assert_same, lidar_like, rand


def run(device, queries, query_offsets, points, offsets, distance, k, ball=False):
    return pointops.cube_query_packed(
        queries.to(device), query_offsets.to(device), points.to(device), offsets.to(device), distance, k, ball
    )


@pytest.mark.parametrize("ball", [False, True])
@pytest.mark.parametrize("distance, k", [(0.15, 8), (0.3, 40), (0.3, 0), (0.0, 4), (0.6, 300)])
def test_matches_reference(device, ball, distance, k):
    points, queries = rand(260, 3, seed=60), rand(90, 3, seed=61)
    queries[:20] = points[5:25]  # centres on points: distance 0 still finds them
    offsets = torch.tensor([0, 100, 100, 230, 260])
    query_offsets = torch.tensor([0, 30, 40, 40, 85])  # rows 85.. are in no cloud; cloud 1 has no points
    expected = ref.cube_query_packed(queries, query_offsets, points, offsets, distance, k, ball)
    actual = run(device, queries, query_offsets, points, offsets, distance, k, ball)
    assert_same(actual, expected)
    assert (actual.indices[85:] == -1).all() and (actual.counts[85:] == 0).all()
    assert (actual.counts[:20] > 0).all()


def test_cube_and_ball_semantics(device):
    # points on the axes and the diagonals of the unit cube around the origin
    points = torch.tensor(
        [
            [1.0, 0, 0],
            [0, -1.0, 0],
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.5],
            [0.6, 0.6, 0.6],
            [0.6, 0.6, 0.0],
            [0, 0, 1.0000001],
        ]
    )
    centre = torch.zeros(1, 3)
    offsets, query_offsets = torch.tensor([0, 7]), torch.tensor([0, 1])
    cube = run(device, centre, query_offsets, points, offsets, 1.0, 8)
    assert cube.indices.tolist() == [[0, 1, 2, 4, 5, -1, -1, -1]] and cube.counts.tolist() == [5]  # ends included
    ball = run(device, centre, query_offsets, points, offsets, 1.0, 8, ball=True)
    assert ball.indices.tolist() == [[0, 1, 5, -1, -1, -1, -1, -1]] and ball.counts.tolist() == [3]  # d2 <= 1
    # ball_query's ball is open: the points at distance 1 are out
    assert pointops.ball_query_packed(centre, query_offsets, points, offsets, 1.0, 8).counts.tolist() == [1]


def test_counts_every_hit_past_k(device):
    # dense cubes: many more hits than k, found in index order whatever their place in space
    points = rand(4000, 3, seed=62)
    points = points[points[:, 0].argsort()].contiguous()  # indices sorted along x, as a sweep's
    queries = rand(200, 3, seed=63)
    offsets, query_offsets = torch.tensor([0, 1500, 4000]), torch.tensor([0, 120, 200])
    for distance, k in ((0.1, 16), (0.25, 64), (0.4, 1000)):
        for ball in (False, True):
            expected = ref.cube_query_packed(queries, query_offsets, points, offsets, distance, k, ball)
            actual = run(device, queries, query_offsets, points, offsets, distance, k, ball)
            assert_same(actual, expected)
        assert (actual.counts > k).any() or k == 1000
    # k = 0 counts only; a second call with the largest count keeps every hit
    counts = run(device, queries, query_offsets, points, offsets, 0.4, 0).counts
    full = run(device, queries, query_offsets, points, offsets, 0.4, int(counts.max()))
    assert torch.equal(full.counts, counts) and torch.equal((full.indices >= 0).sum(1), counts)


def test_absent_points_duplicates_and_empty(device):
    points = rand(50, 3, seed=64)
    points[10:20] = points[0]  # duplicates: all hits, in index order
    points[3, 1] = float("nan")
    points[4, 2] = float("inf")
    queries = torch.cat([points[:2], torch.tensor([[float("nan"), 0.5, 0.5], [float("inf"), 0.0, 0.0]])])
    offsets, query_offsets = torch.tensor([0, 50]), torch.tensor([0, 4])
    for ball in (False, True):
        out = run(device, queries, query_offsets, points, offsets, 2.0, 64, ball)
        assert_same(out, ref.cube_query_packed(queries, query_offsets, points, offsets, 2.0, 64, ball))
        assert out.counts.tolist() == [48, 48, 0, 0]  # every finite point; nothing for NaN/Inf centres
        assert 3 not in out.indices[0].tolist() and 4 not in out.indices[0].tolist()
    empty = run(device, queries[:0], torch.tensor([0, 0]), points, offsets, 0.5, 5)
    assert empty.indices.shape == (0, 5) and empty.counts.shape == (0,)
    no_points = run(device, queries, query_offsets, points[:0], torch.tensor([0, 0]), 0.5, 5)
    assert (no_points.indices == -1).all() and (no_points.counts == 0).all()
    no_clouds = run(device, queries, torch.tensor([0]), points, torch.tensor([0]), 0.5, 5)
    assert (no_clouds.indices == -1).all() and no_clouds.counts.shape == (4,)


def test_dtypes(device):
    points, queries = rand(300, 3, seed=65), rand(40, 3, seed=66)
    offsets, query_offsets = torch.tensor([0, 300]), torch.tensor([0, 40])
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        q, p = queries.to(dtype), points.to(dtype)
        expected = ref.cube_query_packed(q, query_offsets, p, offsets, 0.2, 24)
        assert_same(run(device, q, query_offsets, p, offsets, 0.2, 24), expected)
    # mixed dtypes are promoted
    assert_same(
        run(device, queries.half(), query_offsets, points, offsets, 0.2, 24),
        ref.cube_query_packed(queries.half().float(), query_offsets, points, offsets, 0.2, 24),
    )


def test_coordinates_far_from_the_origin(device):
    # the grid's rounding slack spans more cells than the index-ordered walk tracks: the search
    # goes cell by cell, exactly as well
    points = 1e10 + rand(2000, 3, seed=67, dtype=torch.float64) * 0.01
    queries = points[::9].contiguous()
    offsets, query_offsets = torch.tensor([0, 2000]), torch.tensor([0, queries.shape[0]])
    for distance, k in ((0.001, 8), (0.004, 48)):
        for ball in (False, True):
            assert_same(
                run(device, queries, query_offsets, points, offsets, distance, k, ball),
                ref.cube_query_packed(queries, query_offsets, points, offsets, distance, k, ball),
            )


def test_errors():
    q, p = torch.rand(5, 3), torch.rand(7, 3)
    offsets, query_offsets = torch.tensor([0, 7]), torch.tensor([0, 5])
    with pytest.raises(RuntimeError, match="distance must be finite and >= 0, got -0.1"):
        pointops.cube_query_packed(q, query_offsets, p, offsets, -0.1, 3)
    with pytest.raises(RuntimeError, match="distance must be finite and >= 0, got nan"):
        pointops.cube_query_packed(q, query_offsets, p, offsets, float("nan"), 3)
    with pytest.raises(RuntimeError, match="k must be >= 0, got -1"):
        pointops.cube_query_packed(q, query_offsets, p, offsets, 0.5, -1)
    with pytest.raises(RuntimeError, match="cube_query_packed: query_offsets and offsets must both have B"):
        pointops.cube_query_packed(q, query_offsets, p, torch.tensor([0, 3, 7]), 0.5, 3)
    with pytest.raises(RuntimeError, match="offsets must be Long, got Int"):
        pointops.cube_query_packed(q, query_offsets, p, offsets.int(), 0.5, 3)
    with pytest.raises(RuntimeError, match=r"points must have shape \(P, 3\)"):
        pointops.cube_query_packed(q, query_offsets, p[None], offsets, 0.5, 3)
    with pytest.raises(RuntimeError, match="k = 1000000000000 implies an output of shape"):
        pointops.cube_query_packed(q, query_offsets, p, offsets, 0.5, 10**12)
    with pytest.raises(TypeError, match="points must be a torch.Tensor"):
        pointops.cube_query_packed(q, query_offsets, p.numpy(), offsets, 0.5, 3)


@pytest.mark.cuda
@pytest.mark.parametrize("k", [4, 32, 64, 1000])
def test_cpu_equals_cuda(k):
    points = torch.cat([rand(6000, 3, seed=68), lidar_like(6000, seed=69) / 20])
    points[::97] = float("nan")
    offsets = torch.tensor([0, 6000, 6000, 12000])
    queries = torch.cat([rand(1500, 3, seed=70), points[6000::4]])
    query_offsets = torch.tensor([0, 1500, 1500, queries.shape[0]])
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        for distance in (0.02, 0.1, 0.4):
            for ball in (False, True):
                expected = pointops.cube_query_packed(q, query_offsets, p, offsets, distance, k, ball)
                actual = pointops.cube_query_packed(
                    q.cuda(), query_offsets.cuda(), p.cuda(), offsets.cuda(), distance, k, ball
                )
                assert_same(actual, expected)
