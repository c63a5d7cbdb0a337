"""Gradients: the differentiable ops against autograd through plain-PyTorch references, a small
PointPillars-style model that trains through pillar_scatter, and ops without a gradient whose
outputs never require grad."""

import pytest
import torch

import pointops
from pointops.reference import bev as ref_bev
from pointops.reference import geometry as ref_geometry
from tests.op_samples import OP_SAMPLES

DIFFERENTIABLE = {
    "bev_rasterize",
    "pillar_scatter",
    "voxelize",
    "interpolate",
    "voxel_downsample",
    "estimate_normals",
    "transform_points",
    "knn",
    "knn_packed",
}


def _grad_of(fn, x, weight):
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    (out * weight).sum().backward()
    return x.grad


def _pillars(device, batch=2, count=30, channels=5, height=6, width=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, count, channels, generator=g, dtype=torch.float64)
    coords = torch.stack(
        [
            torch.zeros(batch, count, dtype=torch.int32),
            torch.randint(-1, height + 1, (batch, count), generator=g, dtype=torch.int32),
            torch.randint(-1, width + 1, (batch, count), generator=g, dtype=torch.int32),
        ],
        -1,
    )
    coords[0, 3, 0] = 1  # a pillar off the single layer
    num_voxels = torch.tensor([count, count // 2])
    return features.to(device), coords.to(device), num_voxels.to(device), height, width


def test_pillar_scatter_gradient_equals_the_reference(device):
    features, coords, num_voxels, height, width = _pillars(device)
    weight = torch.randn(2, 5, height, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ours = _grad_of(
        lambda f: pointops.pillar_scatter(f, coords, num_voxels, height, width), features, weight.to(device)
    )
    theirs = _grad_of(
        lambda f: ref_bev.pillar_scatter(f, coords.cpu(), num_voxels.cpu(), height, width), features.cpu(), weight
    )
    torch.testing.assert_close(ours.cpu(), theirs, rtol=0, atol=0)
    assert (ours[1, 15:] == 0).all()  # pillars past num_voxels get nothing


def _tie_free_cloud(device, batch=2, n=300, seed=3):
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(batch, n, 4, generator=g) * torch.tensor([4.0, 3.0, 2.0, 1.0]) - torch.tensor(
        [2.0, 1.5, 1.0, 0.0]
    )
    return points.to(device)


@pytest.mark.parametrize("channel", ["max_z", "min_z", "mean_z", "max_feature", "mean_feature", "top_feature"])
def test_bev_gradient_equals_the_plain_pytorch_image(device, channel):
    points = _tie_free_cloud(device)
    point_range, cell_size = [-1.5, -1.0, -0.8, 1.5, 1.0, 0.8], [0.5, 0.25]
    height, width = pointops.bev_grid_size(point_range, cell_size)
    weight = torch.randn(2, 1, height, width, generator=torch.Generator().manual_seed(4)).to(device)
    ours = _grad_of(lambda p: pointops.bev_rasterize(p, [channel], None, point_range, cell_size), points, weight)
    theirs = _grad_of(lambda p: ref_bev.bev_rasterize_baseline(p, point_range, cell_size, [channel]), points, weight)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    assert ours.abs().sum() > 0


def test_bev_counts_and_layouts_have_no_gradient_but_pass_through(device):
    points = _tie_free_cloud(device)
    point_range, cell_size = [-1.5, -1.0, -0.8, 1.5, 1.0, 0.8], [0.5, 0.25]
    image = pointops.bev_rasterize(
        points.requires_grad_(True),
        ["count", "density", "occupancy", "max_z"],
        None,
        point_range,
        cell_size,
        forward_up=True,
        height_slices=0,
    )
    image[:, :3].sum().backward()
    assert (points.grad == 0).all()
    # forward_up moves each cell: the gradient still reaches the point that holds the max
    flat = _grad_of(
        lambda p: pointops.bev_rasterize(p, ["max_z"], None, point_range, cell_size),
        points,
        torch.ones(1, device=device),
    )
    turned = _grad_of(
        lambda p: pointops.bev_rasterize(p, ["max_z"], None, point_range, cell_size, forward_up=True),
        points,
        torch.ones(1, device=device),
    )
    torch.testing.assert_close(flat, turned, rtol=0, atol=0)


def test_voxelize_gradient_equals_the_reference(device):
    g = torch.Generator().manual_seed(5)
    points = (torch.rand(2, 200, 4, generator=g) * 2.2 - 0.1).to(device)
    size, point_range = [0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0]
    weight = torch.randn(2, 20, 3, 4, generator=g).to(device)
    ours = _grad_of(lambda p: pointops.voxelize(p, size, point_range, 3, 20).voxels, points, weight)
    theirs = _grad_of(lambda p: ref_bev.voxelize_baseline(p, size, point_range, 3, 20)[0], points, weight)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert (ours != 0).any() and (ours == 0).any()  # stored points get the gradient, dropped ones none


def _knn_inputs(device, dtype=torch.float64, seed=6):
    g = torch.Generator().manual_seed(seed)
    queries = torch.rand(2, 9, 3, generator=g, dtype=dtype)
    points = torch.rand(2, 12, 3, generator=g, dtype=dtype)
    points[1, 4] = queries[1, 2]  # a query on a point: distance 0, gradient 0
    return queries.to(device), points.to(device)


def test_knn_distance_gradient_equals_autograd_through_the_reference(device):
    queries, points = _knn_inputs(device)
    lengths, query_lengths = torch.tensor([12, 3], device=device), torch.tensor([9, 7], device=device)
    weight = torch.randn(2, 9, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(device)
    for wrt in ("queries", "points"):

        def ours(x):
            q, p = (x, points) if wrt == "queries" else (queries, x)
            d = pointops.knn(q, p, 5, query_lengths, lengths).distances
            return torch.where(torch.isfinite(d), d, torch.zeros_like(d))  # padding: +inf, no gradient

        def theirs(x):
            q, p = (x, points) if wrt == "queries" else (queries, x)
            d = ref_geometry.knn(q.cpu(), p.cpu(), 5, query_lengths.cpu(), lengths.cpu())[1]
            return torch.where(torch.isfinite(d), d, torch.zeros_like(d))

        x = queries if wrt == "queries" else points
        torch.testing.assert_close(
            _grad_of(ours, x, weight).cpu(), _grad_of(theirs, x.cpu(), weight.cpu()), rtol=1e-12, atol=1e-12
        )
        assert torch.autograd.gradcheck(ours, (x.detach().clone().requires_grad_(True),))


def test_knn_packed_distance_gradient_equals_the_padded_one(device):
    queries, points = _knn_inputs(device)
    weight = torch.randn(18, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(8)).to(device)
    offsets, query_offsets = torch.tensor([0, 12, 24], device=device), torch.tensor([0, 9, 18], device=device)
    q = queries.detach().clone().requires_grad_(True)
    p = points.detach().clone().requires_grad_(True)
    (pointops.knn_packed(q.view(-1, 3), query_offsets, p.view(-1, 3), offsets, 4).distances * weight).sum().backward()
    q2 = queries.detach().clone().requires_grad_(True)
    p2 = points.detach().clone().requires_grad_(True)
    (pointops.knn(q2, p2, 4).distances * weight.view(2, 9, 4)).sum().backward()
    # a point's gradient sums its neighbours' terms with scatter_add: on CUDA by atomics, in no
    # fixed order, so the last bits of a float64 sum may differ there
    exact = dict(rtol=0, atol=0) if device == "cpu" else dict(rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(q.grad, q2.grad, **exact)
    torch.testing.assert_close(p.grad, p2.grad, **exact)


def test_knn_distance_gradient_under_compile(device):
    # (opcheck's autograd check sums every output into one tensor, which fails on the int64
    # indices, so the registered backward is traced here)
    queries, points = _knn_inputs(device)

    def loss(q, p):
        return pointops.knn(q, p, 3).distances.square().sum()

    eager = torch.autograd.grad(loss(queries.requires_grad_(True), points.requires_grad_(True)), (queries, points))
    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    traced = torch.autograd.grad(compiled(queries, points), (queries, points))
    exact = dict(rtol=0, atol=0) if device == "cpu" else dict(rtol=1e-12, atol=1e-15)  # CUDA: atomic sums
    for a, b in zip(traced, eager):
        torch.testing.assert_close(a, b, **exact)


def test_knn_gradient_at_coincident_points_is_zero_through_a_square_root(device):
    # sqrt(d) has an infinite derivative at d = 0: where a query sits on its neighbour the
    # gradient is 0, not NaN (PointNet++ interpolation takes sqrt of these distances, and
    # queries often coincide with points there)
    queries, points = _knn_inputs(device, torch.float32)
    q = queries.detach().clone().requires_grad_(True)
    p = points.detach().clone().requires_grad_(True)
    pointops.knn(q, p, 3).distances.sqrt().sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(p.grad).all()
    assert (q.grad[1, 2] != 0).any()  # its other two neighbours still pull


class TinyPointPillars(torch.nn.Module):
    """Points -> pillars (voxelize) -> a per-point MLP max-pooled per pillar -> pillar_scatter ->
    a conv head: the shape of a PointPillars backbone, small enough for a CPU test."""

    def __init__(self, scatter):
        super().__init__()
        self.scatter = scatter
        self.pillar_net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.head = torch.nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, points):
        v = pointops.voxelize(points, [0.5, 0.5, 4.0], [0.0, -2.0, -2.0, 4.0, 2.0, 2.0], 8, 40)
        features = self.pillar_net(v.voxels)  # (B, V, K, 8)
        filled = torch.arange(8, device=points.device).view(1, 1, 8) < v.num_points.unsqueeze(-1)
        pillars = torch.where(filled.unsqueeze(-1), features, torch.zeros_like(features)).amax(2)
        canvas = self.scatter(pillars, v.coords, v.num_voxels, 8, 8)
        return self.head(canvas)


def test_a_pointpillars_model_trains_through_pillar_scatter(device):
    torch.manual_seed(0)
    points = (torch.rand(2, 150, 4) * torch.tensor([4.0, 4.0, 2.0, 1.0]) - torch.tensor([0.0, 2.0, 1.0, 0.0])).to(
        device
    )
    target = torch.rand(2, 1, 8, 8).to(device)
    model = TinyPointPillars(pointops.pillar_scatter).to(device)
    reference = TinyPointPillars(
        lambda f, c, n, h, w: ref_bev.pillar_scatter(f.cpu(), c.cpu(), n.cpu(), h, w).to(device)
    ).to(device)
    reference.load_state_dict(model.state_dict())
    loss = torch.nn.functional.mse_loss(model(points), target)
    loss.backward()
    torch.nn.functional.mse_loss(reference(points), target).backward()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-6, atol=1e-7)
    before = [p.detach().clone() for p in model.pillar_net.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(points), target)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert all(not torch.equal(a, b) for a, b in zip(before, model.pillar_net.parameters()))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("op_name", sorted(set(OP_SAMPLES) - DIFFERENTIABLE))
def test_outputs_without_a_gradient_never_require_grad(op_name):
    op = getattr(torch.ops.pointops, op_name)
    for args in OP_SAMPLES[op_name]("cpu"):
        leafs = tuple(
            a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args
        )
        outputs = op(*leafs)
        for out in outputs if isinstance(outputs, tuple) else (outputs,):
            assert not out.requires_grad, f"{op_name} returns an output that requires grad but has no gradient"
