"""Neighbourhood ops (knn, knn_packed, ball_query, three_nn, interpolation, grouping) against the
pure-PyTorch references of pointops.reference.geometry, on every device and search strategy;
CPU == CUDA bit for bit; edge cases and error messages.

The ops pick brute force or the grid from the sizes alone (csrc/geometry/knn_cpu.cpp,
pick_strategy): on the CPU, clouds of at most 128 points or at most 8 queries per cloud take brute
force; on CUDA, queries x points per cloud up to 2^27 (2^29 for ball queries, whose brute force
runs a warp per query), and above that kNN of k <= 8 over padded clouds of at most 64 KB of
points (4,096 float32 points, 2,048 float64) builds each cloud's grid in a block's shared memory
(knn_cuda.cu), larger k and larger clouds the batch grid. The `strategy` fixture (tests/conftest.py) makes every search of a test
take the strategy it names: rows past the lengths (which change no result) push the sizes to the
grid ("grid": the batch grid; "block": the block grid, kNN on CUDA only), and calls of at most 8
queries per cloud keep the CPU on brute force (the tests' sizes keep CUDA there)."""

import pytest
import torch

import pointops
from pointops.reference import geometry as ref
from tests.conftest import STRATEGIES, assert_same

BLOCK_GRID_BYTES = 65536  # knn_cuda.cu's kBlockPointBytes: 16 bytes a float32 point, 32 a float64 one
CUDA_BRUTE_LIMIT = 2**27  # queries x points per cloud
CUDA_BALL_BRUTE_LIMIT = 2**29  # ball_query_cuda.cu's kBruteScale = 4


def _pad_rows(t, rows, dim):
    extra = list(t.shape)
    extra[dim] = rows - t.shape[dim]
    return torch.cat([t, t.new_zeros(extra)], dim) if extra[dim] > 0 else t


def _grid_rows(cuda, clouds, queries, points, limit, block_points=0):
    """Rows (queries, points) per cloud, at least the given ones, for which the sizes pick the batch
    grid, or with block_points (the most a block grid takes) the block grid where the points fit."""
    points = max(points, (block_points if 0 < points <= block_points else 16384) if cuda else 129)
    queries = max(queries, 9)
    if cuda:
        queries = max(queries, limit // (clouds * points) + 1)
    return queries, points


def _padded_search(strategy, call, queries, points, query_lengths, lengths, limit=CUDA_BRUTE_LIMIT):
    """call(queries, points, query_lengths, lengths) -> a tuple of (B, M, ...) outputs, made with the
    given strategy."""
    b, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    if b == 0:
        return call(queries, points, query_lengths, lengths)
    if strategy in ("grid", "block"):
        block = BLOCK_GRID_BYTES // (32 if points.dtype == torch.float64 else 16) if strategy == "block" else 0
        m_rows, n_rows = _grid_rows(queries.is_cuda, b, m, n, limit, block)
        every = torch.ones(b, dtype=torch.int64, device=queries.device)
        ql = every * m if query_lengths is None else query_lengths.clamp(0, m)
        pl = every * n if lengths is None else lengths.clamp(0, n)
        out = call(_pad_rows(queries, m_rows, 1), _pad_rows(points, n_rows, 1), ql, pl)
        return type(out)(*(t[:, :m] for t in out))
    if queries.is_cuda:
        assert b * m * n <= limit, "too large for brute force on CUDA"
    if queries.is_cuda or n <= 128 or m <= 8:
        return call(queries, points, query_lengths, lengths)
    parts = []
    for first in range(0, m, 8):
        rows = min(8, m - first)
        ql = None if query_lengths is None else (query_lengths - first).clamp(0, rows)
        parts.append(call(queries[:, first : first + rows], points, ql, lengths))
    return type(parts[0])(*(torch.cat(ts, 1) for ts in zip(*parts)))


def _packed_search(strategy, call, queries, query_offsets, points, offsets, limit=CUDA_BRUTE_LIMIT):
    """call(queries, query_offsets, points, offsets) -> a tuple of (Mq, ...) outputs, made with the
    given strategy."""
    b, m, n = offsets.numel() - 1, queries.shape[0], points.shape[0]
    if b <= 0:
        return call(queries, query_offsets, points, offsets)
    # the clouds as the op sees them: offsets clamped to the rows, made non-decreasing
    qo = torch.cummax(query_offsets.clamp(0, m), 0).values
    po = torch.cummax(offsets.clamp(0, n), 0).values
    if strategy in ("grid", "block"):  # packed clouds take the batch grid
        m_rows, n_rows = _grid_rows(queries.is_cuda, b, -(-m // b), -(-n // b), limit)
        out = call(_pad_rows(queries, m_rows * b, 0), qo, _pad_rows(points, n_rows * b, 0), po)
        return type(out)(*(t[:m] for t in out))
    if queries.is_cuda:
        assert m * (n // b) <= limit, "too large for brute force on CUDA"
    if queries.is_cuda or n // b <= 128 or m // b <= 8:
        return call(queries, query_offsets, points, offsets)
    parts = []
    for first in range(0, m, 8 * b):
        rows = min(8 * b, m - first)
        parts.append(call(queries[first : first + rows], (qo - first).clamp(0, rows), points, po))
    return type(parts[0])(*(torch.cat(ts, 0) for ts in zip(*parts)))


_SEARCHES = {
    name: getattr(pointops, name) for name in ("knn", "knn_packed", "ball_query", "ball_query_packed", "three_nn")
}


def use_strategy(monkeypatch, strategy):
    """Make pointops' searches (knn, knn_packed, ball_query, ball_query_packed, three_nn) take `strategy`."""

    def knn(queries, points, k, query_lengths=None, lengths=None, max_distance=None):
        return _padded_search(
            strategy,
            lambda q, p, ql, pl: _SEARCHES["knn"](q, p, k, ql, pl, max_distance),
            queries,
            points,
            query_lengths,
            lengths,
        )

    def knn_packed(queries, query_offsets, points, offsets, k):
        return _packed_search(
            strategy,
            lambda q, qo, p, po: _SEARCHES["knn_packed"](q, qo, p, po, k),
            queries,
            query_offsets,
            points,
            offsets,
        )

    def ball_query(queries, points, radius, k, query_lengths=None, lengths=None, pad="first", min_radius=0.0):
        return _padded_search(
            strategy,
            lambda q, p, ql, pl: _SEARCHES["ball_query"](q, p, radius, k, ql, pl, pad, min_radius),
            queries,
            points,
            query_lengths,
            lengths,
            CUDA_BALL_BRUTE_LIMIT,
        )

    def ball_query_packed(queries, query_offsets, points, offsets, radius, k, pad="first", min_radius=0.0):
        return _packed_search(
            strategy,
            lambda q, qo, p, po: _SEARCHES["ball_query_packed"](q, qo, p, po, radius, k, pad, min_radius),
            queries,
            query_offsets,
            points,
            offsets,
            CUDA_BALL_BRUTE_LIMIT,
        )

    def three_nn(queries, points, query_lengths=None, lengths=None):
        return _padded_search(strategy, _SEARCHES["three_nn"], queries, points, query_lengths, lengths)

    for search in (knn, knn_packed, ball_query, ball_query_packed, three_nn):
        monkeypatch.setattr(pointops, search.__name__, search)


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def lidar_like(n, seed=0):
    """Uneven density: most points near the origin on a ground plane, a sparse far field, walls."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(n, generator=g) ** 3 * 60 + 0.5
    a = torch.rand(n, generator=g) * 6.283
    z = torch.randn(n, generator=g) * 0.05 - 1.7
    pts = torch.stack([r * torch.cos(a), r * torch.sin(a), z], 1)
    wall = torch.rand(n, generator=g) < 0.2
    pts[wall, 1] = 8.0
    pts[wall, 2] = torch.rand(int(wall.sum()), generator=g) * 3 - 1.7
    return pts


# ---- knn ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 8, 16, 33, 120])
def test_knn_matches_reference(device, strategy, k):
    queries, points = rand(3, 70, 3, seed=1), rand(3, 110, 3, seed=2)
    query_lengths, lengths = torch.tensor([70, 9, 0]), torch.tensor([110, 5, 60])
    expected = ref.knn(queries, points, k, query_lengths, lengths)
    actual = pointops.knn(queries.to(device), points.to(device), k, query_lengths.to(device), lengths.to(device))
    assert_same(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_clustered_and_flat_clouds(device, strategy, dtype):
    g = torch.Generator().manual_seed(3)
    centres = torch.rand(8, 3, generator=g, dtype=dtype) * 10
    clustered = centres[torch.randint(0, 8, (600,), generator=g)] + torch.randn(600, 3, generator=g, dtype=dtype) * 0.05
    flat = torch.rand(600, 3, generator=g, dtype=dtype) * torch.tensor([20.0, 5.0, 0.0], dtype=dtype)
    points = torch.stack([clustered, flat])
    queries = torch.rand(2, 150, 3, generator=g, dtype=dtype) * 24 - 2  # some outside the clouds
    for k in (1, 5, 19):
        assert_same(pointops.knn(queries.to(device), points.to(device), k), ref.knn(queries, points, k))


def test_knn_lidar_like(device, strategy):
    points = lidar_like(3000)[None]
    queries = torch.cat([points[:, ::7], rand(1, 100, 3, seed=4) * 140 - 70], 1)
    assert_same(pointops.knn(queries.to(device), points.to(device), 16), ref.knn(queries, points, 16))


def test_knn_ties_go_to_lowest_index(device, strategy):
    points = torch.randint(0, 3, (2, 300, 3), generator=torch.Generator().manual_seed(5)).float()
    queries = torch.cat([points[:, :40], points[:, :40] + 0.5], 1)
    indices, distances = pointops.knn(queries.to(device), points.to(device), 25)
    assert_same((indices, distances), ref.knn(queries, points, 25))
    # equal distances list their indices in increasing order
    same = distances[..., 1:] == distances[..., :-1]
    assert same.any()
    assert (indices[..., 1:][same] > indices[..., :-1][same]).all()


def test_knn_duplicates_of_the_query(device, strategy):
    points = torch.zeros(1, 50, 3)
    points[0, 10:] = 1.0
    indices, distances = pointops.knn(torch.zeros(1, 1, 3, device=device), points.to(device), 12)
    assert indices.tolist() == [[list(range(10)) + [10, 11]]]
    assert distances[0, 0, :10].eq(0).all() and distances[0, 0, 10:].eq(3).all()


def test_knn_nan_and_inf(device, strategy):
    points, queries = rand(2, 200, 3, seed=6), rand(2, 40, 3, seed=7)
    points[0, ::6, 1] = float("nan")
    points[1, ::4, 2] = float("inf")
    points[1, 1, 0] = float("-inf")
    queries[0, 3, 0] = float("nan")
    queries[1, 5] = float("inf")
    indices, distances = pointops.knn(queries.to(device), points.to(device), 10)
    assert_same((indices, distances), ref.knn(queries, points, 10))
    assert not torch.isin(indices[0].cpu(), torch.arange(0, 200, 6)).any()
    assert (indices[0, 3] == -1).all() and torch.isinf(distances[0, 3]).all()
    assert (indices[1, 5] == -1).all()


def test_knn_overflowing_distance_is_still_a_neighbour(device, strategy):
    # a finite point whose squared distance overflows float32 to +inf comes after every finite one
    points = torch.tensor([[[3e38, 0.0, 0.0], [1.0, 0.0, 0.0], [float("nan"), 0.0, 0.0], [-3e38, 0.0, 0.0]]])
    indices, distances = pointops.knn(torch.zeros(1, 1, 3, device=device), points.to(device), 4)
    assert indices.tolist() == [[[1, 0, 3, -1]]]
    assert distances[0, 0, 0] == 1 and torch.isinf(distances[0, 0, 1:]).all()
    assert_same((indices, distances), ref.knn(torch.zeros(1, 1, 3), points, 4))


def test_knn_far_and_huge_coordinates(device, strategy):
    for scale, dtype in ((1e30, torch.float32), (1e200, torch.float64), (1e-30, torch.float32)):
        points = torch.randn(1, 500, 3, generator=torch.Generator().manual_seed(8), dtype=dtype) * scale
        queries = torch.randn(1, 30, 3, generator=torch.Generator().manual_seed(9), dtype=dtype) * scale * 3
        assert_same(pointops.knn(queries.to(device), points.to(device), 6), ref.knn(queries, points, 6))


def far_outliers(points, seed):
    """points (B, N, 3) with a few far points per cloud: 1 km, 200 km and 1e30 away (one axis or
    all three, either side), the grid's bounding box many orders wider than the cloud."""
    g = torch.Generator().manual_seed(seed)
    far = torch.tensor([[1e3, 0.5, 0.5], [-2e5, 2e5, -2e5], [0.5, 0.5, 1e30], [3e4, -1e3, 7e3]])
    points = points.clone()
    for b in range(points.shape[0]):
        rows = torch.randperm(points.shape[1], generator=g)[: len(far)]
        points[b, rows] = far.to(points.dtype)
    return points


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_far_outliers(device, strategy, dtype):
    # The grid spans the trimmed box (grid.h), the outliers clamped into its outer cells: still exact,
    # queries in the cloud, at the outliers and beyond them included.
    points = far_outliers(
        torch.cat([rand(1, 1500, 3, seed=50, dtype=dtype), lidar_like(1500, seed=51)[None].to(dtype)]), seed=52
    )
    queries = torch.cat([points[:, ::11], rand(2, 40, 3, seed=53, dtype=dtype) * 4e3 - 2e3], 1)
    for k in (1, 3, 16):
        assert_same(
            pointops.knn(queries.to(device), points.to(device), k, lengths=torch.tensor([1500, 1400]).to(device)),
            ref.knn(queries, points, k, lengths=torch.tensor([1500, 1400])),
        )


def test_knn_and_ball_query_with_far_noise(device, strategy):
    # 1.5 % of each cloud spread over a 4 km cube: more far points than the near trim drops
    # (n / 1,024 a side and axis), fewer than the far one (n / 64), so the grid's box is the far
    # trim's (grid.h). Still exact, for queries in the cloud and at the noise.
    g = torch.Generator().manual_seed(60)
    points = torch.cat([rand(1, 2000, 3, seed=61), lidar_like(2000, seed=62)[None] / 20])
    for b in range(2):
        rows = torch.randperm(2000, generator=g)[:30]
        points[b, rows] = (torch.rand(30, 3, generator=g) - 0.5) * 4000
    queries = points[:, ::7].contiguous()
    for k in (1, 16):
        assert_same(pointops.knn(queries.to(device), points.to(device), k), ref.knn(queries, points, k))
    assert_same(
        pointops.ball_query(queries.to(device), points.to(device), 0.1, 16), ref.ball_query(queries, points, 0.1, 16)
    )


def test_knn_empty_shapes(device, strategy):
    def run(b, m, n, k, lengths=None):
        q, p = torch.rand(b, m, 3, device=device), torch.rand(b, n, 3, device=device)
        out = pointops.knn(q, p, k, lengths=lengths)
        assert out.indices.shape == (b, m, k) and out.distances.shape == (b, m, k)
        assert (out.indices == -1).all() and torch.isinf(out.distances).all()

    run(0, 5, 7, 3)  # B = 0
    run(2, 0, 7, 3)  # M = 0
    run(2, 5, 0, 3)  # N = 0
    run(2, 5, 7, 3, torch.zeros(2, dtype=torch.int64, device=device))  # empty clouds
    out = pointops.knn(torch.rand(2, 5, 3, device=device), torch.rand(2, 7, 3, device=device), 0)
    assert out.indices.shape == (2, 5, 0)


def test_knn_lengths_are_clamped(device, strategy):
    queries, points = rand(2, 20, 3, seed=10), rand(2, 30, 3, seed=11)
    odd = pointops.knn(
        queries.to(device),
        points.to(device),
        4,
        torch.tensor([-3, 99], device=device),
        torch.tensor([99, -1], device=device),
    )
    plain = pointops.knn(
        queries.to(device),
        points.to(device),
        4,
        torch.tensor([0, 20], device=device),
        torch.tensor([30, 0], device=device),
    )
    assert_same(odd, plain)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_knn_half_inputs_compute_in_float32(device, dtype):
    queries, points = rand(2, 30, 3, seed=12).to(dtype), rand(2, 90, 3, seed=13).to(dtype)
    actual = pointops.knn(queries.to(device), points.to(device), 7)
    assert actual.distances.dtype == torch.float32
    assert_same(actual, pointops.knn(queries.float().to(device), points.float().to(device), 7))


def test_knn_packed_matches_padded(device, strategy):
    points, queries = rand(150, 3, seed=14), rand(60, 3, seed=15)
    offsets, query_offsets = torch.tensor([0, 70, 70, 150]), torch.tensor([0, 20, 35, 55])
    expected = ref.knn_packed(queries, query_offsets, points, offsets, 9)
    actual = pointops.knn_packed(queries.to(device), query_offsets.to(device), points.to(device), offsets.to(device), 9)
    assert_same(actual, expected)
    assert (actual.indices[55:] == -1).all()  # rows past the last query offset
    # cloud 0 by itself, padded: packed indices are rows of the packed points
    padded = pointops.knn(queries[None, :20].to(device), points[None, :70].to(device), 9)
    assert_same((actual.indices[:20], actual.distances[:20]), (padded.indices[0], padded.distances[0]))
    second = pointops.knn(queries[None, 35:55].to(device), points[None, 70:].to(device), 9)
    assert torch.equal(
        actual.indices[35:55].cpu(), torch.where(second.indices[0] >= 0, second.indices[0] + 70, -1).cpu()
    )


def test_knn_packed_offsets_are_clamped_and_made_monotone(device):
    points, queries = rand(50, 3, seed=16), rand(20, 3, seed=17)
    odd = pointops.knn_packed(
        queries.to(device),
        torch.tensor([-5, 10, 4, 99], device=device),
        points.to(device),
        torch.tensor([0, 30, 10, 80], device=device),
        3,
    )
    plain = pointops.knn_packed(
        queries.to(device),
        torch.tensor([0, 10, 10, 20], device=device),
        points.to(device),
        torch.tensor([0, 30, 30, 50], device=device),
        3,
    )
    assert_same(odd, plain)


def test_knn_strategies_agree_on_larger_clouds(device, monkeypatch):
    points = torch.cat([rand(1, 4000, 3, seed=18), lidar_like(4000, seed=19)[None] / 30])
    queries = torch.cat([rand(1, 1300, 3, seed=20), points[1:, ::3][:, :1300]])
    results = []
    for s in STRATEGIES:
        use_strategy(monkeypatch, s)
        results.append(pointops.knn(queries.to(device), points.to(device), 11))
    assert_same(results[0], results[1])


def test_knn_cell_size_does_not_change_results(device, monkeypatch):
    # the grid's cells hold about max(2, (k + 1) / 3) points: 3, 13 and 40 for k = 9, 40 and 120,
    # and the 9 nearest are the same
    points, queries = lidar_like(2000, seed=21)[None], lidar_like(300, seed=22)[None]
    use_strategy(monkeypatch, "grid")
    results = [pointops.knn(queries.to(device), points.to(device), k) for k in (9, 40, 120)]
    for result in results[1:]:
        assert_same((result.indices[..., :9], result.distances[..., :9]), results[0])


@pytest.mark.parametrize("k", [1, 4, 40])
def test_knn_max_distance_matches_reference(device, strategy, k):
    points = torch.cat([lidar_like(900, seed=5)[None] / 10, rand(1, 900, 3, seed=6) * 4])
    points[1, ::50] = float("nan")
    queries = torch.cat([points[:, ::3] + 0.02, rand(2, 200, 3, seed=7) * 30 - 15], 1)  # near and far
    lengths = torch.tensor([900, 700])
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        for radius in (0.0, 0.05, 0.3, 1e30):
            expected = ref.knn(q, p, k, None, lengths, radius)
            assert_same(pointops.knn(q.to(device), p.to(device), k, None, lengths.to(device), radius), expected)
    # every point within the radius is kept as without it, nothing beyond it
    full = pointops.knn(queries, points, k, None, lengths)
    near = pointops.knn(queries, points, k, None, lengths, 0.3)
    inside = full.distances <= torch.tensor(0.09, dtype=torch.float64).float()
    assert torch.equal(near.indices[inside], full.indices[inside]) and (near.indices[~inside] == -1).all()
    assert torch.isinf(near.distances[~inside]).all()


def test_knn_errors():
    q, p = torch.rand(2, 5, 3), torch.rand(2, 7, 3)
    with pytest.raises(RuntimeError, match=r"points must have shape \(B, N, 3\)"):
        pointops.knn(q, torch.rand(2, 7, 2), 3)
    with pytest.raises(RuntimeError, match=r"queries must have shape \(B, M, 3\) \(3 dimensions\), got shape \[5, 3\]"):
        pointops.knn(q[0], p, 3)
    with pytest.raises(RuntimeError, match="same batch size B"):
        pointops.knn(torch.rand(3, 5, 3), p, 3)
    with pytest.raises(RuntimeError, match="queries must have the dtype of points"):
        torch.ops.pointops.knn(q.double(), None, p, None, 3)  # the wrapper promotes (test_mixed_precision.py)
    with pytest.raises(RuntimeError, match="points must be float32, float64, float16 or bfloat16, got Int"):
        pointops.knn(q, p.int(), 3)
    with pytest.raises(RuntimeError, match="k must be >= 0, got -1"):
        pointops.knn(q, p, -1)
    for bad in (-0.5, float("nan")):
        with pytest.raises(RuntimeError, match=r"max_distance must be >= 0 \(or None\), got"):
            pointops.knn(q, p, 3, max_distance=bad)
    with pytest.raises(RuntimeError, match="lengths must be Long, got Int"):
        pointops.knn(q, p, 3, lengths=torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(RuntimeError, match=r"query_lengths must have shape \[2\], got \[3\]"):
        pointops.knn(q, p, 3, query_lengths=torch.tensor([1, 2, 3]))
    with pytest.raises(RuntimeError, match="offsets must have B \\+ 1 >= 1 entries"):
        pointops.knn_packed(q[0], torch.tensor([0, 5]), p[0], torch.zeros(0, dtype=torch.int64), 3)
    with pytest.raises(RuntimeError, match="query_offsets and offsets must both have B \\+ 1 entries, got 2 and 3"):
        pointops.knn_packed(q[0], torch.tensor([0, 5]), p[0], torch.tensor([0, 3, 7]), 3)


@pytest.mark.cuda
@pytest.mark.parametrize("k", [1, 4, 16, 32, 50])
def test_knn_cpu_equals_cuda(strategy, k):
    points = torch.cat([rand(1, 5000, 3, seed=23), lidar_like(5000, seed=24)[None] / 20])
    points[0, ::97] = float("nan")
    queries = torch.cat([rand(1, 2000, 3, seed=25), points[1:, ::2][:, :2000]])
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        assert_same(
            pointops.knn(q.cuda(), p.cuda(), k, lengths=torch.tensor([5000, 4000]).cuda()),
            pointops.knn(q, p, k, lengths=torch.tensor([5000, 4000])),
        )
        assert_same(
            pointops.knn(q.cuda(), p.cuda(), k, lengths=torch.tensor([5000, 4000]).cuda(), max_distance=0.02),
            pointops.knn(q, p, k, lengths=torch.tensor([5000, 4000]), max_distance=0.02),
        )


@pytest.mark.cuda
def test_far_outliers_cpu_equals_cuda(strategy):
    points = far_outliers(torch.cat([rand(1, 3000, 3, seed=57), lidar_like(3000, seed=58)[None] / 20]), seed=59)
    queries = torch.cat([points[:, ::7], rand(2, 30, 3, seed=60) * 2e3 - 1e3], 1)
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        for k in (3, 20):
            assert_same(pointops.knn(q.cuda(), p.cuda(), k), pointops.knn(q, p, k))
        assert_same(pointops.three_nn(q.cuda(), p.cuda()), pointops.three_nn(q, p))
        assert_same(pointops.ball_query(q.cuda(), p.cuda(), 0.05, 16), pointops.ball_query(q, p, 0.05, 16))


@pytest.mark.cuda
def test_far_noise_queries_cpu_equals_cuda(strategy):
    # 2 % of each cloud in a 4 km cube, searched against itself, and queries 100 km out: their
    # k-th neighbours lie farther than the grid's box is wide, so the CUDA batch grid hands them
    # to the block that scans the whole cloud (knn_cuda.cu, "Far queries").
    g = torch.Generator().manual_seed(63)
    points = torch.cat([rand(1, 6000, 3, seed=64), lidar_like(6000, seed=65)[None] / 20])
    for b in range(2):
        rows = torch.randperm(6000, generator=g)[:120]
        points[b, rows] = (torch.rand(120, 3, generator=g) - 0.5) * 4000
    far = torch.tensor([[1e5, 1e5, 1e5], [-1e5, 3e4, 2e5], [0.5, 0.5, -1e5]]).expand(2, 3, 3)
    queries = torch.cat([points, far], 1)
    lengths = torch.tensor([6000, 5500])
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        for k in (1, 5, 16, 32):
            assert_same(
                pointops.knn(q.cuda(), p.cuda(), k, lengths=lengths.cuda()), pointops.knn(q, p, k, lengths=lengths)
            )
        assert_same(
            pointops.knn(q.cuda(), p.cuda(), 16, lengths=lengths.cuda(), max_distance=500.0),
            pointops.knn(q, p, 16, lengths=lengths, max_distance=500.0),
        )
        offsets = torch.tensor([0, 6000, 12000])
        assert_same(
            pointops.knn_packed(
                q[:, :6000].reshape(-1, 3).cuda(), offsets.cuda(), p.reshape(-1, 3).cuda(), offsets.cuda(), 8
            ),
            pointops.knn_packed(q[:, :6000].reshape(-1, 3), offsets, p.reshape(-1, 3), offsets, 8),
        )
    # a larger cloud (17,170 points) with 1 % far noise: its queries beyond the grid are listed
    # before any ring, the others walk and are listed past their limit
    big = torch.cat([rand(1, 17000, 3, seed=66), (torch.rand(1, 170, 3, generator=g) - 0.5) * 4000], 1)
    big_queries = torch.cat([far[:1], big[:, ::97]], 1)
    for dtype in (torch.float32, torch.float64):
        q, p = big_queries.to(dtype), big.to(dtype)
        for k in (3, 16):
            assert_same(pointops.knn(q.cuda(), p.cuda(), k), pointops.knn(q, p, k))


@pytest.mark.cuda
def test_knn_packed_cpu_equals_cuda(strategy):
    points, queries = lidar_like(6000, seed=26), lidar_like(3000, seed=27)
    offsets, query_offsets = torch.tensor([0, 2500, 2500, 6000]), torch.tensor([0, 1000, 1500, 2900])
    assert_same(
        pointops.knn_packed(queries.cuda(), query_offsets.cuda(), points.cuda(), offsets.cuda(), 12),
        pointops.knn_packed(queries, query_offsets, points, offsets, 12),
    )


def test_knn_distances_carry_a_gradient_indices_do_not(device):
    # the gradient itself: tests/test_autograd.py
    queries = torch.rand(1, 10, 3, device=device, requires_grad=True)
    points = torch.rand(1, 20, 3, device=device, requires_grad=True)
    out = pointops.knn(queries, points, 4)
    assert not out.indices.requires_grad and out.distances.requires_grad
    out = pointops.knn(queries.detach(), points.detach(), 4)
    assert not out.distances.requires_grad


# ---- ball_query ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pad", ["first", "minus_one"])
@pytest.mark.parametrize("radius, k", [(0.1, 8), (0.3, 16), (0.3, 40), (2.0, 5), (0.0, 4)])
def test_ball_query_matches_reference(device, strategy, pad, radius, k):
    queries, points = rand(3, 60, 3, seed=30), rand(3, 300, 3, seed=31)
    query_lengths, lengths = torch.tensor([60, 7, 0]), torch.tensor([300, 20, 150])
    expected = ref.ball_query(queries, points, radius, k, query_lengths, lengths, pad)
    actual = pointops.ball_query(
        queries.to(device), points.to(device), radius, k, query_lengths.to(device), lengths.to(device), pad=pad
    )
    assert_same(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ball_query_uneven_density(device, strategy, dtype):
    points = lidar_like(3000, seed=32).to(dtype)[None]
    queries = torch.cat([points[:, ::11], (rand(1, 50, 3, seed=33, dtype=dtype) * 120 - 60)], 1)
    for radius, k in ((0.3, 16), (2.0, 32), (25.0, 64), (1e-3, 4)):
        assert_same(
            pointops.ball_query(queries.to(device), points.to(device), radius, k),
            ref.ball_query(queries, points, radius, k),
        )


def test_ball_query_semantics(device, strategy):
    # points on a line at x = 0, 0.5, 1.0, ... ; the ball around the origin, radius 1.0 (strict)
    points = torch.zeros(1, 10, 3)
    points[0, :, 0] = torch.arange(10) * 0.5
    points[0, 3, 0] = float("nan")  # never a hit
    points = points.flip(1).contiguous()  # x = 4.5 ... 0: hits are the last rows
    centre = torch.zeros(1, 2, 3)
    centre[0, 1] = 100.0  # no hit
    out = pointops.ball_query(centre.to(device), points.to(device), 1.0, 4)
    assert out.indices.tolist() == [[[8, 9, 8, 8], [-1, -1, -1, -1]]]  # x = 0.5, 0 (x = 1.0 is out)
    assert out.counts.tolist() == [[2, 0]]
    out = pointops.ball_query(centre.to(device), points.to(device), 1.0, 4, pad="minus_one")
    assert out.indices.tolist() == [[[8, 9, -1, -1], [-1, -1, -1, -1]]]
    out = pointops.ball_query(centre.to(device), points.to(device), 1.0, 1)
    assert out.indices.tolist() == [[[8], [-1]]] and out.counts.tolist() == [[1, 0]]
    # radius 0 finds nothing, not even a point at the centre itself
    out = pointops.ball_query(points.to(device), points.to(device), 0.0, 3)
    assert (out.indices == -1).all() and (out.counts == 0).all()


def test_ball_query_keeps_the_lowest_indices_of_a_dense_ball(device, strategy):
    points = rand(1, 5000, 3, seed=34)
    centre = torch.full((1, 1, 3), 0.5)
    out = pointops.ball_query(centre.to(device), points.to(device), 0.45, 32)
    inside = (((points[0] - 0.5) ** 2).sum(-1) < 0.45**2).nonzero().flatten()[:32]
    assert out.indices[0, 0].cpu().tolist() == inside.tolist() and out.counts.item() == 32


def test_ball_query_far_outliers(device, strategy):
    points = far_outliers(torch.cat([rand(1, 1500, 3, seed=54), lidar_like(1500, seed=55)[None] / 20]), seed=56)
    queries = torch.cat([points[:, ::9], torch.tensor([[[1e3, 0.5, 0.5], [1e3, 0.52, 0.5]]]).expand(2, 2, 3)], 1)
    for radius, k in ((0.05, 8), (0.2, 40)):
        assert_same(
            pointops.ball_query(queries.to(device), points.to(device), radius, k),
            ref.ball_query(queries, points, radius, k),
        )


def test_ball_query_empty_shapes(device, strategy):
    for b, m, n, k in ((0, 4, 5, 3), (2, 0, 5, 3), (2, 4, 0, 3), (2, 4, 5, 0)):
        out = pointops.ball_query(torch.rand(b, m, 3, device=device), torch.rand(b, n, 3, device=device), 0.5, k)
        assert out.indices.shape == (b, m, k) and out.counts.shape == (b, m)
        assert (out.indices == -1).all() and (out.counts == 0).all()


def test_ball_query_errors():
    q, p = torch.rand(2, 5, 3), torch.rand(2, 7, 3)
    with pytest.raises(RuntimeError, match="radius must be finite and >= 0, got -0.5"):
        pointops.ball_query(q, p, -0.5, 3)
    with pytest.raises(RuntimeError, match="radius must be finite and >= 0, got inf"):
        pointops.ball_query(q, p, float("inf"), 3)
    with pytest.raises(RuntimeError, match="k must be >= 0, got -2"):
        pointops.ball_query(q, p, 0.5, -2)
    with pytest.raises(RuntimeError, match="ball_query: queries and points must have the same batch size B"):
        pointops.ball_query(q[:1], p, 0.5, 2)
    with pytest.raises(ValueError, match='pad must be "first" or "minus_one", got "zero"'):
        pointops.ball_query(q, p, 0.5, 2, pad="zero")


@pytest.mark.cuda
@pytest.mark.parametrize("k", [4, 32, 64])
def test_ball_query_cpu_equals_cuda(strategy, k):
    points = torch.cat([rand(1, 6000, 3, seed=35), lidar_like(6000, seed=36)[None] / 20])
    points[1, ::89] = float("nan")
    queries = torch.cat([rand(1, 1500, 3, seed=37), points[1:, ::4][:, :1500]])
    for dtype in (torch.float32, torch.float64):
        q, p = queries.to(dtype), points.to(dtype)
        for radius in (0.02, 0.1):
            assert_same(pointops.ball_query(q.cuda(), p.cuda(), radius, k), pointops.ball_query(q, p, radius, k))


# ---- three_nn, interpolation, grouping ----------------------------------------------------------


def test_three_nn(device, strategy):
    queries, points = rand(2, 100, 3, seed=40), rand(2, 30, 3, seed=41)
    assert_same(pointops.three_nn(queries.to(device), points.to(device)), ref.three_nn(queries, points))
    out = pointops.three_nn(queries.to(device), points[:, :2].to(device))  # fewer than 3 points
    assert (out.indices[..., 2] == -1).all() and torch.isinf(out.distances[..., 2]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_interpolate_matches_reference(device, dtype):
    features = torch.randn(2, 40, 6, generator=torch.Generator().manual_seed(42)).to(dtype)
    indices = torch.randint(-1, 41, (2, 25, 3), generator=torch.Generator().manual_seed(43))  # -1 and 40: none
    weights = torch.rand(2, 25, 3, generator=torch.Generator().manual_seed(44)).to(dtype)
    actual = pointops.interpolate(features.to(device), indices.to(device), weights.to(device))
    assert actual.dtype == dtype and actual.shape == (2, 25, 6)
    assert_same((actual,), (ref.interpolate(features, indices, weights),))


def test_interpolate_with_inverse_distance_weights(device):
    known, unknown = rand(2, 50, 3, seed=45), rand(2, 80, 3, seed=46)
    features = torch.randn(2, 50, 4, generator=torch.Generator().manual_seed(47))
    nn3 = pointops.three_nn(unknown.to(device), known.to(device))
    weights = pointops.inverse_distance_weights(nn3.distances)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 80, device=device))
    # the definition: sqrt rounded once (via float64), the row sum column by column
    reciprocal = 1 / (torch.sqrt(nn3.distances.double()).float() + 1e-8)
    expected = reciprocal / ((reciprocal[..., :1] + reciprocal[..., 1:2]) + reciprocal[..., 2:3])
    torch.testing.assert_close(weights, expected, rtol=0, atol=0)
    out = pointops.interpolate(features.to(device), nn3.indices, weights)
    assert_same((out,), (ref.interpolate(features, nn3.indices.cpu(), weights.cpu()),))
    # padding (+inf distance) weighs nothing; a row with no neighbour is all zeros
    padded = pointops.inverse_distance_weights(torch.tensor([[[1.0, 4.0, float("inf")], [float("inf")] * 3]]))
    assert padded[0, 0, 2] == 0 and torch.equal(padded[0, 1], torch.zeros(3))


def test_interpolate_gradients(device):
    features = torch.randn(2, 12, 3, dtype=torch.float64, device=device, requires_grad=True)
    indices = torch.randint(-1, 13, (2, 7, 4), generator=torch.Generator().manual_seed(48)).to(device)
    weights = torch.rand(2, 7, 4, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(pointops.interpolate, (features, indices, weights))
    out = pointops.interpolate(features, indices, weights)
    out.sum().backward()
    # an index outside [0, N) gives no gradient to its weight
    outside = (indices < 0) | (indices >= 12)
    assert (weights.grad[outside] == 0).all() and outside.any()


def test_interpolate_errors():
    f, i, w = torch.rand(2, 5, 4), torch.zeros(2, 3, 3, dtype=torch.int64), torch.rand(2, 3, 3)
    with pytest.raises(RuntimeError, match=r"features must have shape \(B, N, C\)"):
        pointops.interpolate(f[0], i, w)
    with pytest.raises(RuntimeError, match="indices must be Long, got Int"):
        pointops.interpolate(f, i.int(), w)
    with pytest.raises(RuntimeError, match=r"weights must have shape \[2, 3, 3\], got \[2, 3, 2\]"):
        pointops.interpolate(f, i, w[..., :2])
    with pytest.raises(RuntimeError, match="weights must have the dtype of features"):
        torch.ops.pointops.interpolate(f, i, w.double())  # the wrapper promotes (test_mixed_precision.py)
    with pytest.raises(RuntimeError, match=r"indices must have the batch size of features \(2\)"):
        pointops.interpolate(f, i[:1], w[:1])


def test_group_points(device):
    features = torch.randn(2, 9, 5, generator=torch.Generator().manual_seed(49)).to(device)
    indices = torch.randint(-1, 10, (2, 4, 6), generator=torch.Generator().manual_seed(50)).to(device)
    out = pointops.group_points(features, indices)
    assert out.shape == (2, 4, 6, 5)
    torch.testing.assert_close(out.cpu(), ref.group_points(features.cpu(), indices.cpu()), rtol=0, atol=0)
    features.requires_grad_(True)
    pointops.group_points(features, indices).sum().backward()
    counts = torch.stack(
        [torch.bincount(indices[b][(indices[b] >= 0) & (indices[b] < 9)], minlength=9) for b in range(2)]
    ).to(features.dtype)
    torch.testing.assert_close(features.grad, counts[..., None].expand(-1, -1, 5))


@pytest.mark.cuda
def test_interpolate_cpu_equals_cuda():
    features = torch.randn(4, 3000, 64, generator=torch.Generator().manual_seed(51))
    indices = torch.randint(-1, 3000, (4, 5000, 3), generator=torch.Generator().manual_seed(52))
    weights = torch.rand(4, 5000, 3, generator=torch.Generator().manual_seed(53))
    for dtype in (torch.float32, torch.float64):
        f, w = features.to(dtype), weights.to(dtype)
        assert_same((pointops.interpolate(f.cuda(), indices.cuda(), w.cuda()),), (pointops.interpolate(f, indices, w),))
