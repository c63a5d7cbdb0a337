"""pointops.compat.pyg: torch_cluster's own tests of fps, knn, knn_graph, radius, radius_graph,
nearest and grid_cluster, ported (their inputs and expected values, written anew; each block
names its upstream file, rusty1s/pytorch_cluster at 3d1d9e3, test/), then what pointops adds:
exact orders and ties, points of any dimension, the batch_size path, a PyG-style PointNet++ that
trains under autocast. Where pointops deliberately differs the test says so."""

import itertools

import numpy as np
import pytest
import torch
from torch import Tensor

import pointops
from pointops.compat.pyg import fps, grid, grid_cluster, knn, knn_graph, nearest, radius, radius_graph
from pointops.reference import geometry as ref_geometry
from tests.conftest import DEVICES

scipy_spatial = pytest.importorskip("scipy.spatial")

GRAD_DTYPES = [torch.float16, torch.float32, torch.float64]  # torch_cluster.testing.grad_dtypes
FLOATING_DTYPES = GRAD_DTYPES + [torch.bfloat16]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64]


def tensor(values, dtype, device):
    return None if values is None else torch.tensor(values, dtype=dtype, device=device)


def to_set(edge_index):
    return set((i, j) for i, j in edge_index.t().tolist())


# ---- test/test_fps.py -----------------------------------------------------------------------------


@torch.jit.script
def fps2(x: Tensor, ratio: Tensor) -> Tensor:
    return fps(x, None, ratio, False)


@pytest.mark.parametrize("dtype,device", list(itertools.product(GRAD_DTYPES, DEVICES)))
def test_fps(dtype, device):
    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1], [-2, -2], [-2, +2], [+2, +2], [+2, -2]], dtype, device)
    batch = tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device)
    ptr_list = [0, 4, 8]
    ptr = torch.tensor(ptr_list, device=device)

    assert fps(x, batch, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, ratio=torch.tensor(0.5, device=device), random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, ptr=ptr_list, ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, ptr=ptr, ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, ratio=torch.tensor([0.5, 0.5], device=device), random_start=False).tolist() == [0, 2, 4, 6]

    assert fps(x, random_start=False).sort()[0].tolist() == [0, 5, 6, 7]
    assert fps(x, ratio=0.5, random_start=False).sort()[0].tolist() == [0, 5, 6, 7]
    assert fps(x, ratio=torch.tensor(0.5, device=device), random_start=False).sort()[0].tolist() == [0, 5, 6, 7]
    assert fps(x, ratio=torch.tensor([0.5], device=device), random_start=False).sort()[0].tolist() == [0, 5, 6, 7]
    assert fps2(x, torch.tensor([0.5], device=device)).sort()[0].tolist() == [0, 5, 6, 7]


@pytest.mark.parametrize("device", DEVICES)
def test_random_fps(device):
    N = 1024
    for _ in range(5):
        pos = torch.randn((2 * N, 3), device=device)
        batch = torch.cat(
            [torch.zeros(N, dtype=torch.long, device=device), torch.ones(N, dtype=torch.long, device=device)]
        )
        idx = fps(pos, batch, ratio=0.5)
        assert idx.min() >= 0 and idx.max() < 2 * N


def test_fps_matches_pointops_and_counts(device):
    # ceil(ratio * size) per cloud, each cloud's picks in order, rows of the packed cloud
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(50, 4, generator=g).to(device)  # any dimension
    batch = torch.tensor([0] * 20 + [2] * 30, device=device)  # cloud 1 is empty
    out = fps(pos, batch, ratio=0.3, random_start=False)
    first = pointops.farthest_point_sampling(pos[None, :20], 6).indices[0]
    second = pointops.farthest_point_sampling(pos[None, 20:], 9).indices[0] + 20
    assert out.tolist() == first.tolist() + second.tolist()
    # the same with batch_size given (offsets without reading batch.max()), and per-cloud ratios
    assert torch.equal(fps(pos, batch, ratio=0.3, random_start=False, batch_size=3), out)
    per_cloud = fps(pos, batch, ratio=torch.tensor([0.1, 0.5, 1.0], device=device), random_start=False)
    assert (
        per_cloud.tolist()
        == first[:2].tolist() + pointops.farthest_point_sampling(pos[None, 20:], 30).indices[0].add(20).tolist()
    )
    torch.manual_seed(1)
    a = fps(pos, batch, ratio=0.3)
    torch.manual_seed(1)
    assert torch.equal(fps(pos, batch, ratio=0.3), a)  # random_start follows torch's seed


# ---- test/test_knn.py -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,device", list(itertools.product(GRAD_DTYPES, DEVICES)))
def test_knn(dtype, device):
    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1], [-1, -1], [-1, +1], [+1, +1], [+1, -1]], dtype, device)
    y = tensor([[1, 0], [-1, 0]], dtype, device)
    batch_x = tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device)
    batch_y = tensor([0, 1], torch.long, device)

    assert to_set(knn(x, y, 2)) == {(0, 2), (0, 3), (1, 0), (1, 1)}
    assert to_set(torch.jit.script(knn)(x, y, 2)) == {(0, 2), (0, 3), (1, 0), (1, 1)}
    assert to_set(knn(x, y, 2, batch_x, batch_y)) == {(0, 2), (0, 3), (1, 4), (1, 5)}
    # torch_cluster runs this on CUDA only (its CPU raises for cosine); pointops on both
    assert to_set(knn(x, y, 2, batch_x, batch_y, cosine=True)) == {(0, 2), (0, 3), (1, 4), (1, 5)}
    # skipping a batch
    batch_x = tensor([0, 0, 0, 0, 2, 2, 2, 2], torch.long, device)
    batch_y = tensor([0, 2], torch.long, device)
    assert to_set(knn(x, y, 2, batch_x, batch_y)) == {(0, 2), (0, 3), (1, 4), (1, 5)}


@pytest.mark.parametrize("dtype,device", list(itertools.product(GRAD_DTYPES, DEVICES)))
def test_knn_graph(dtype, device):
    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1]], dtype, device)
    expected = {(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)}
    assert to_set(knn_graph(x, k=2, flow="target_to_source")) == expected
    flipped = {(j, i) for i, j in expected}
    assert to_set(knn_graph(x, k=2, flow="source_to_target")) == flipped
    assert to_set(torch.jit.script(knn_graph)(x, k=2, flow="source_to_target")) == flipped


@pytest.mark.parametrize("device", DEVICES)
def test_knn_graph_large(device):
    x = torch.randn(1000, 3, device=device)
    edge_index = knn_graph(x, k=5, flow="target_to_source", loop=True)
    _, col = scipy_spatial.cKDTree(x.cpu().numpy()).query(x.cpu(), k=5)
    assert to_set(edge_index.cpu()) == set((i, j) for i, ns in enumerate(col) for j in ns)


# ---- test/test_radius.py --------------------------------------------------------------------------


def to_degree(edge_index):
    return torch.unique(edge_index[1], return_counts=True)[1].tolist()


@pytest.mark.parametrize("dtype,device", list(itertools.product(FLOATING_DTYPES, DEVICES)))
def test_radius(dtype, device):
    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1], [-1, -1], [-1, +1], [+1, +1], [+1, -1]], dtype, device)
    y = tensor([[0, 0], [0, 1]], dtype, device)
    batch_x = tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device)
    batch_y = tensor([0, 1], torch.long, device)

    expected = {(0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 5), (1, 6)}
    assert to_set(radius(x, y, 2, max_num_neighbors=4)) == expected
    assert to_set(torch.jit.script(radius)(x, y, 2, max_num_neighbors=4)) == expected
    assert to_set(radius(x, y, 2, batch_x, batch_y, max_num_neighbors=4)) == {
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 5),
        (1, 6),
    }
    batch_x = tensor([0, 0, 0, 0, 2, 2, 2, 2], torch.long, device)  # skipping a batch
    batch_y = tensor([0, 2], torch.long, device)
    assert to_set(radius(x, y, 2, batch_x, batch_y, max_num_neighbors=4)) == {
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 5),
        (1, 6),
    }


@pytest.mark.parametrize("dtype,device", list(itertools.product(FLOATING_DTYPES, DEVICES)))
def test_radius_graph(dtype, device):
    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1]], dtype, device)
    expected = {(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)}
    assert to_set(radius_graph(x, r=2.5, flow="target_to_source")) == expected
    flipped = {(j, i) for i, j in expected}
    assert to_set(radius_graph(x, r=2.5, flow="source_to_target")) == flipped
    assert to_set(torch.jit.script(radius_graph)(x, r=2.5, flow="source_to_target")) == flipped

    assert set(to_degree(radius_graph(x, r=100, flow="source_to_target", max_num_neighbors=1))) == {1}
    same = tensor([[-1, -1], [-1, -1], [-1, -1], [-1, -1]], dtype, device)
    assert set(to_degree(radius_graph(same, r=100, flow="source_to_target", max_num_neighbors=1))) == {1}

    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1], [-1, -1], [-1, +1], [+1, +1], [+1, -1]], dtype, device)
    batch_x = tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device)
    edge_index = radius_graph(x, r=100, batch=batch_x, flow="source_to_target", max_num_neighbors=1)
    assert set(to_degree(edge_index)) == {1}
    assert [int(i / 4) for i in edge_index[0]] == batch_x.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_radius_graph_large(device):
    x = torch.randn(1000, 3, device=device)
    edge_index = radius_graph(x, r=0.5, flow="target_to_source", loop=True, max_num_neighbors=2000)
    col = scipy_spatial.cKDTree(x.cpu().numpy()).query_ball_point(x.cpu(), r=0.5)
    assert to_set(edge_index.cpu()) == set((i, j) for i, ns in enumerate(col) for j in ns)


# ---- test/test_nearest.py -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,device", list(itertools.product(GRAD_DTYPES, DEVICES)))
def test_nearest(dtype, device):
    x = tensor([[-1, -1], [-1, +1], [+1, +1], [+1, -1], [-2, -2], [-2, +2], [+2, +2], [+2, -2]], dtype, device)
    y = tensor([[-1, 0], [+1, 0], [-2, 0], [+2, 0]], dtype, device)
    batch_x = tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device)
    batch_y = tensor([0, 0, 1, 1], torch.long, device)
    assert nearest(x, y, batch_x, batch_y).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert nearest(x, y).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert torch.jit.script(nearest)(x, y, batch_x, batch_y).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]

    # invalid input: instance 1 only in batch_x
    batch_x = tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device)
    batch_y = tensor([0, 0, 0, 0], torch.long, device)
    with pytest.raises(ValueError):
        nearest(x, y, batch_x, batch_y)
    with pytest.raises(ValueError):  # implicitly, as batch_y=None
        nearest(x, y, batch_x, batch_y=None)
    # instance 2 only in batch_x (an instance in the middle missing)
    with pytest.raises(ValueError):
        nearest(x, y, tensor([0, 0, 1, 1, 2, 2, 3, 3], torch.long, device), tensor([0, 1, 3, 3], torch.long, device))
    # batch_x unsorted
    with pytest.raises(ValueError):
        nearest(x, y, tensor([0, 0, 1, 0, 0, 0, 0], torch.long, device), tensor([0, 0, 1, 1], torch.long, device))
    # batch_y unsorted
    with pytest.raises(ValueError):
        nearest(x, y, tensor([0, 0, 0, 0, 1, 1, 1, 1], torch.long, device), tensor([0, 0, 1, 0], torch.long, device))


# ---- test/test_grid.py ----------------------------------------------------------------------------

GRID_TESTS = [
    {"pos": [2, 6], "size": [5], "cluster": [0, 0]},
    {"pos": [2, 6], "size": [5], "start": [0], "cluster": [0, 1]},
    {"pos": [[0, 0], [11, 9], [2, 8], [2, 2], [8, 3]], "size": [5, 5], "cluster": [0, 5, 3, 0, 1]},
    {"pos": [[0, 0], [11, 9], [2, 8], [2, 2], [8, 3]], "size": [5, 5], "end": [19, 19], "cluster": [0, 6, 4, 0, 1]},
]


@pytest.mark.parametrize("test,dtype,device", list(itertools.product(GRID_TESTS, DTYPES, DEVICES)))
def test_grid_cluster(test, dtype, device):
    pos = tensor(test["pos"], dtype, device)
    size = tensor(test["size"], dtype, device)
    start = tensor(test.get("start"), dtype, device)
    end = tensor(test.get("end"), dtype, device)
    cluster = grid_cluster(pos, size, start, end)
    assert cluster.tolist() == test["cluster"]
    assert torch.equal(torch.jit.script(grid_cluster)(pos, size, start, end), cluster)
    assert grid is grid_cluster


# ---- what pointops adds ---------------------------------------------------------------------------


def packed_clouds(device, dims=3, seed=2, sizes=(40, 0, 25, 60)):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(sum(sizes), dims, generator=g)
    batch = torch.cat([torch.full((s,), b, dtype=torch.long) for b, s in enumerate(sizes)])
    return x.to(device), batch.to(device)


@pytest.mark.parametrize("dims", [1, 2, 3, 6])
def test_knn_order_and_values_match_the_reference(device, dims):
    # grouped by query, nearest first, ties to the lowest index; any dimension (6: brute force)
    x, batch_x = packed_clouds(device, dims, seed=3)
    y, batch_y = packed_clouds(device, dims, seed=4, sizes=(10, 5, 0, 12))
    x[7] = x[3]  # a tie
    edge_index = knn(x, y, 6, batch_x, batch_y)
    expected_rows, expected_cols = [], []
    for b in range(4):
        xs, ys = (batch_x == b).nonzero()[:, 0], (batch_y == b).nonzero()[:, 0]
        if len(xs) == 0 or len(ys) == 0:
            continue
        pad = torch.nn.functional.pad
        q, p = pad(y[ys].cpu(), (0, max(0, 3 - dims))), pad(x[xs].cpu(), (0, max(0, 3 - dims)))
        if dims > 3:
            d = ((q[:, None, :] - p[None, :, :]) ** 2).sum(-1)
            idx = torch.sort(d, dim=1, stable=True)[1][:, :6]
        else:
            idx = ref_geometry.knn(q[None], p[None], min(6, len(xs)))[0][0]
        for i, row in enumerate(idx.tolist()):
            expected_rows += [int(ys[i])] * len(row)
            expected_cols += [int(xs[j]) for j in row]
    assert edge_index.cpu().tolist() == [expected_rows, expected_cols]
    assert torch.equal(knn(x, y, 6, batch_x, batch_y, batch_size=4), edge_index)


@pytest.mark.parametrize("dims", [2, 3, 5])
def test_radius_keeps_the_first_hits_by_index(device, dims):
    x, batch_x = packed_clouds(device, dims, seed=5)
    y, batch_y = packed_clouds(device, dims, seed=6, sizes=(10, 5, 0, 12))
    r, cap = 0.45, 7
    edge_index = radius(x, y, r, batch_x, batch_y, max_num_neighbors=cap)
    expected = [[], []]
    for i in range(len(y)):
        same = (batch_x == batch_y[i]).nonzero()[:, 0].tolist()
        d2 = ((x[same].double() - y[i].double()) ** 2).sum(-1)
        hits = [j for j, d in zip(same, d2.tolist()) if d < r * r][:cap]
        expected[0] += [i] * len(hits)
        expected[1] += hits
    assert edge_index.cpu().tolist() == expected
    # ignore_same_index: the query's own row gives its place to the next hit
    graph = radius(x, x, r, batch_x, batch_x, max_num_neighbors=cap, ignore_same_index=True)
    loops = radius(x, x, r, batch_x, batch_x, max_num_neighbors=cap + 1)
    keep = loops[0] != loops[1]
    trimmed = [[], []]
    for i in range(len(x)):
        cols = loops[1][keep & (loops[0] == i)].tolist()[:cap]
        trimmed[0] += [i] * len(cols)
        trimmed[1] += cols
    assert graph.cpu().tolist() == trimmed


def test_knn_cosine_ranks_by_angle(device):
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(30, 8, generator=g).to(device), torch.randn(5, 8, generator=g).to(device)
    cos = torch.nn.functional.cosine_similarity(y[:, None], x[None], dim=-1)
    edge_index = knn(x, y, 4, cosine=True)
    assert edge_index[1].view(5, 4).tolist() == torch.sort(1 - cos, dim=1, stable=True)[1][:, :4].tolist()


def test_mixed_and_integer_dtypes(device):
    x, batch = packed_clouds(device, 3, seed=8, sizes=(20, 30))
    expected = knn(x, x.half().float(), 3, batch, batch)
    # autocast's mixed dtypes: promoted to the wider one, as torch ops do
    assert torch.equal(knn(x, x.half(), 3, batch, batch), expected)
    grid_points = torch.randint(0, 10, (50, 3), generator=torch.Generator().manual_seed(9)).to(device)
    assert torch.equal(knn(grid_points, grid_points, 4), knn(grid_points.double(), grid_points.double(), 4))
    assert torch.equal(radius(grid_points, grid_points, 2.5), radius(grid_points.double(), grid_points.double(), 2.5))
    assert torch.equal(
        nearest(grid_points[:20], grid_points[20:]), nearest(grid_points[:20].float(), grid_points[20:].float())
    )


def test_empty_inputs(device):
    x = torch.zeros(0, 3, device=device)
    y = torch.rand(4, 3, device=device)
    assert knn(x, y, 2).shape == (2, 0) and radius(x, y, 0.5).shape == (2, 0)
    assert knn_graph(x, 3).shape == (2, 0) and radius_graph(x, 0.5).shape == (2, 0)
    assert fps(x, ratio=0.5).shape == (0,)


@pytest.mark.cuda
def test_batch_size_given_converts_the_batch_vector_without_a_sync():
    x, batch = packed_clouds("cuda", 3, seed=10, sizes=(64, 64))
    ptr = torch.tensor([0, 64, 128], device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    from pointops.compat.pyg import _ptr

    try:
        got = _ptr(batch, 128, 2, batch.device)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(got, ptr)  # (reading the comparison back is a sync of its own)


class PyGPointNet(torch.nn.Module):
    """PyG's PointNet++ classifier (examples/pointnet2_classification.py) on these functions, with
    the PointNetConv message (an MLP of [x_j, pos_j - pos_i], max-aggregated) written in torch."""

    def __init__(self, classes=4):
        super().__init__()
        self.mlp1 = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64))
        self.mlp2 = torch.nn.Sequential(torch.nn.Linear(64 + 3, 64), torch.nn.ReLU(), torch.nn.Linear(64, 128))
        self.head = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))

    @staticmethod
    def conv(mlp, x, pos, batch, ratio, r):
        idx = fps(pos, batch, ratio=ratio, random_start=False)
        row, col = radius(pos, pos[idx], r, batch, batch[idx], max_num_neighbors=32)
        relative = pos[col] - pos[idx][row]
        message = mlp(relative if x is None else torch.cat([x[col], relative.to(x.dtype)], 1))
        out = message.new_full((len(idx), message.shape[1]), float("-inf"))
        out = out.scatter_reduce(0, row.view(-1, 1).expand_as(message), message, "amax")
        return out, pos[idx], batch[idx]

    def forward(self, pos, batch, clouds):
        x, pos, batch = self.conv(self.mlp1, None, pos, batch, 0.5, 0.3)
        x, pos, batch = self.conv(self.mlp2, x, pos, batch, 0.25, 0.6)
        pooled = x.new_full((clouds, x.shape[1]), float("-inf")).scatter_reduce(
            0, batch.view(-1, 1).expand_as(x), x, "amax"
        )
        return self.head(pooled)


def train_pyg_under_autocast(device, dtype, steps=10):
    torch.manual_seed(12)
    pos, batch = packed_clouds(device, 3, seed=13, sizes=(128, 96, 128, 64))
    labels = torch.tensor([0, 1, 2, 3], device=device)
    model = PyGPointNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device_type=device, dtype=dtype):
            logits = model(pos, batch, 4)
            assert logits.dtype == dtype
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_pyg_pointnet_trains_under_cpu_autocast_bfloat16():
    train_pyg_under_autocast("cpu", torch.bfloat16)


@pytest.mark.cuda
def test_pyg_pointnet_trains_under_cuda_autocast_float16():
    train_pyg_under_autocast("cuda", torch.float16)
