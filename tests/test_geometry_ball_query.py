"""ball_query's minimum radius, ball_query_packed and the index-ordered grid search, against the
pure-PyTorch references of pointops.reference.geometry, on every device and search strategy;
CPU == CUDA bit for bit."""

import pytest
import torch

import pointops
from pointops.reference import geometry as ref
from tests.conftest import assert_same
from tests.test_geometry_neighbors import lidar_like, rand


@pytest.mark.parametrize("pad", ["first", "minus_one"])
@pytest.mark.parametrize("radius, min_radius, k", [(0.3, 0.1, 16), (0.3, 0.2, 40), (0.5, 0.45, 8), (0.2, 0.3, 4)])
def test_min_radius_matches_reference(device, strategy, pad, radius, min_radius, k):
    queries, points = rand(2, 60, 3, seed=40), rand(2, 300, 3, seed=41)
    queries[:, :20] = points[:, 5:25]  # centres on points: the point itself (d2 = 0) is a hit
    lengths = torch.tensor([300, 120])
    expected = ref.ball_query(queries, points, radius, k, None, lengths, pad, min_radius)
    actual = pointops.ball_query(
        queries.to(device), points.to(device), radius, k, None, lengths.to(device), pad, min_radius
    )
    assert_same(actual, expected)
    assert (actual.counts[:, :20] > 0).all()  # the centre is always found


def test_min_radius_semantics(device):
    # points on a line at x = 0, 0.5, ..., 4.5; the ball around the origin of radii [1.0, 2.0)
    points = torch.zeros(1, 10, 3)
    points[0, :, 0] = torch.arange(10) * 0.5
    centre = torch.zeros(1, 1, 3)
    out = pointops.ball_query(centre.to(device), points.to(device), 2.0, 6, min_radius=1.0)
    assert out.indices.tolist() == [[[0, 2, 3, 0, 0, 0]]] and out.counts.tolist() == [[3]]  # x = 0, 1, 1.5
    out = pointops.ball_query(centre.to(device) + 0.25, points.to(device), 2.0, 6, min_radius=1.0, pad="minus_one")
    assert out.indices.tolist() == [[[3, 4, -1, -1, -1, -1]]]  # x = 1.5, 2.0 (0.25 away: none at the centre)


@pytest.mark.parametrize("pad", ["first", "minus_one"])
@pytest.mark.parametrize("radius, k, min_radius", [(0.15, 8, 0.0), (0.3, 40, 0.0), (0.3, 16, 0.1), (0.0, 4, 0.0)])
def test_packed_matches_reference(device, strategy, pad, radius, k, min_radius):
    points, queries = rand(260, 3, seed=42), rand(90, 3, seed=43)
    offsets = torch.tensor([0, 100, 100, 230, 260])
    query_offsets = torch.tensor([0, 30, 40, 40, 85])  # rows 85.. are in no cloud; cloud 1 has no points
    expected = ref.ball_query_packed(queries, query_offsets, points, offsets, radius, k, pad, min_radius)
    actual = pointops.ball_query_packed(
        queries.to(device), query_offsets.to(device), points.to(device), offsets.to(device), radius, k, pad, min_radius
    )
    assert_same(actual, expected)
    assert (actual.indices[85:] == -1).all() and (actual.counts[85:] == 0).all()


def test_packed_equals_padded(device, strategy):
    points = lidar_like(2000, seed=44)
    queries = points[::7].contiguous()
    cut, qcut = 1200, int(queries.shape[0] * 0.6)
    offsets, query_offsets = torch.tensor([0, cut, 2000]), torch.tensor([0, qcut, queries.shape[0]])
    packed = pointops.ball_query_packed(
        queries.to(device), query_offsets.to(device), points.to(device), offsets.to(device), 2.0, 24
    )
    first = pointops.ball_query(queries[None, :qcut].to(device), points[None, :cut].to(device), 2.0, 24)
    second = pointops.ball_query(queries[None, qcut:].to(device), points[None, cut:].to(device), 2.0, 24)
    shifted = torch.where(second.indices >= 0, second.indices + cut, second.indices)
    assert torch.equal(packed.indices.cpu(), torch.cat([first.indices[0], shifted[0]]).cpu())
    assert torch.equal(packed.counts.cpu(), torch.cat([first.counts[0], second.counts[0]]).cpu())


@pytest.mark.parametrize("radius, k", [(0.3, 8), (0.6, 40)])
def test_rows_of_several_clouds_side_by_side(device, strategy, radius, k):
    # CUDA's brute force searches consecutive query rows together: rows of different clouds side by
    # side (7 queries a cloud, packed clouds of 5, 1, 7 and 1 queries) each search their own cloud
    queries, points = rand(3, 7, 3, seed=48), rand(3, 120, 3, seed=49)
    lengths, query_lengths = torch.tensor([120, 50, 90]), torch.tensor([7, 3, 6])
    expected = ref.ball_query(queries, points, radius, k, query_lengths, lengths)
    actual = pointops.ball_query(
        queries.to(device), points.to(device), radius, k, query_lengths.to(device), lengths.to(device)
    )
    assert_same(actual, expected)
    packed_queries, packed_points = rand(14, 3, seed=50), rand(200, 3, seed=51)
    query_offsets, offsets = torch.tensor([0, 5, 6, 13, 14]), torch.tensor([0, 60, 110, 170, 200])
    expected = ref.ball_query_packed(packed_queries, query_offsets, packed_points, offsets, radius, k)
    actual = pointops.ball_query_packed(
        packed_queries.to(device), query_offsets.to(device), packed_points.to(device), offsets.to(device), radius, k
    )
    assert_same(actual, expected)
    assert (actual.counts[:13] > 0).all()  # the rows have hits to place


@pytest.mark.parametrize("order", ["random", "by_x"])
@pytest.mark.parametrize("radius, k", [(0.2, 16), (0.4, 64), (0.8, 128), (0.1, 64)])
def test_dense_balls_in_index_order(device, strategy, order, radius, k):
    # balls holding far more than k points, with indices either unrelated to space or sorted along
    # x (as a LiDAR scan's are along its sweep), where the search's index windows are mostly empty
    points = rand(2, 4000, 3, seed=45)
    if order == "by_x":
        points = torch.gather(points, 1, points[..., :1].argsort(1).expand(-1, -1, 3)).contiguous()
    queries = rand(2, 200, 3, seed=46)
    expected = ref.ball_query(queries, points, radius, k)
    assert_same(pointops.ball_query(queries.to(device), points.to(device), radius, k), expected)


def test_coordinates_far_from_the_origin(device, strategy):
    # coordinates about 2^33 cells from the origin: the grid's rounding slack spans more cells than
    # the index-ordered search tracks, so the search walks them cell by cell, exactly as well
    points = 1e10 + rand(1, 2000, 3, seed=47, dtype=torch.float64) * 0.01
    queries = points[:, ::9].contiguous()
    for radius, k in ((0.001, 8), (0.004, 48)):
        assert_same(
            pointops.ball_query(queries.to(device), points.to(device), radius, k),
            ref.ball_query(queries, points, radius, k),
        )


def test_errors():
    q, p = torch.rand(2, 5, 3), torch.rand(2, 7, 3)
    with pytest.raises(RuntimeError, match="min_radius must be finite and >= 0, got -0.1"):
        pointops.ball_query(q, p, 0.5, 3, min_radius=-0.1)
    with pytest.raises(RuntimeError, match="ball_query_packed: query_offsets and offsets must both have B"):
        pointops.ball_query_packed(q[0], torch.tensor([0, 5]), p[0], torch.tensor([0, 3, 7]), 0.5, 3)
    with pytest.raises(RuntimeError, match="offsets must be Long, got Int"):
        pointops.ball_query_packed(q[0], torch.tensor([0, 5]), p[0], torch.tensor([0, 7], dtype=torch.int32), 0.5, 3)


@pytest.mark.cuda
@pytest.mark.parametrize("k", [4, 32, 64, 128])
def test_cpu_equals_cuda(strategy, k):
    points = torch.cat([rand(6000, 3, seed=48), lidar_like(6000, seed=49) / 20])
    points[::97] = float("nan")
    offsets = torch.tensor([0, 6000, 6000, 12000])
    queries = torch.cat([rand(1500, 3, seed=50), points[6000::4]])
    query_offsets = torch.tensor([0, 1500, 1500, queries.shape[0]])
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        for radius, min_radius in ((0.02, 0.0), (0.1, 0.0), (0.4, 0.0), (0.1, 0.05)):
            expected = pointops.ball_query_packed(q, query_offsets, p, offsets, radius, k, "first", min_radius)
            actual = pointops.ball_query_packed(
                q.cuda(), query_offsets.cuda(), p.cuda(), offsets.cuda(), radius, k, "first", min_radius
            )
            assert_same(actual, expected)
            expected = pointops.ball_query(q[None, :1500], p[None, :6000], radius, k, min_radius=min_radius)
            actual = pointops.ball_query(q[None, :1500].cuda(), p[None, :6000].cuda(), radius, k, min_radius=min_radius)
            assert_same(actual, expected)
