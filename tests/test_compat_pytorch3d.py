"""pointops.compat.pytorch3d: pytorch3d's own tests of knn_points, knn_gather,
sample_farthest_points and chamfer_distance, ported (their inputs and expected values, written
anew; each block names its upstream file, facebookresearch/pytorch3d at 9381c40), then what
pointops adds: gradients in float64, a chamfer loss that trains, mixed precision under autocast.
Where pointops deliberately differs the test says so."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from pointops.compat.pytorch3d import KNN, chamfer_distance, knn_gather, knn_points, sample_farthest_points


def assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


# ---- tests/test_knn.py -----------------------------------------------------------------------


def knn_naive(p1, p2, lengths1, lengths2, K, norm=2):
    """pytorch3d's naive kNN: every pair's distance, sorted; zeros where fewer than K."""
    n, P1, D = p1.shape
    P2 = p2.shape[1]
    lengths1 = torch.full((n,), P1, dtype=torch.int64) if lengths1 is None else lengths1
    lengths2 = torch.full((n,), P2, dtype=torch.int64) if lengths2 is None else lengths2
    dists = torch.zeros((n, P1, K), dtype=torch.float32, device=p1.device)
    idx = torch.zeros((n, P1, K), dtype=torch.int64, device=p1.device)
    for b in range(n):
        num1, num2 = int(lengths1[b]), int(lengths2[b])
        diff = p1[b, :num1].view(num1, 1, D) - p2[b, :num2].view(1, num2, D)
        d = (diff * diff).sum(2) if norm == 2 else diff.abs().sum(2)
        kept = min(num2, K)
        for i in range(num1):
            values, order = d[i].sort()
            dists[b, i, :kept] = values[:kept]
            idx[b, i, :kept] = order[:kept]
    return KNN(dists, idx, None)


def check_knn_against_naive(device, ragged):
    for N, D, P1, P2, K, norm in itertools.product([1, 4], [3, 5, 8, 2], [8, 24], [8, 16, 32], [1, 3, 10], [1, 2]):
        torch.manual_seed(2)
        make = torch.rand if ragged else torch.randn
        x = make(N, P1, D, device=device, requires_grad=True)
        y = make(N, P2, D, device=device, requires_grad=True)
        lengths1 = torch.randint(1, P1, (N,), device=device) if ragged else None
        lengths2 = torch.randint(1, P2, (N,), device=device) if ragged else None
        x2, y2 = x.detach().clone().requires_grad_(True), y.detach().clone().requires_grad_(True)
        expected = knn_naive(x, y, lengths1, lengths2, K, norm)
        actual = knn_points(x2, y2, lengths1=lengths1, lengths2=lengths2, K=K, norm=norm)
        assert_close(actual.dists, expected.dists)
        assert torch.equal(actual.idx, expected.idx)
        grad = torch.ones((N, P1, K), device=device)
        (expected.dists * grad).sum().backward()
        (actual.dists * grad).sum().backward()
        # upstream allows 5e-6 absolute; a point's gradient sums up to P1 float32 terms, in
        # another order than the naive autograd, so 1e-6 relative is allowed on top
        assert_close(x2.grad, x.grad, rtol=1e-6, atol=5e-6)
        assert_close(y2.grad, y.grad, rtol=1e-6, atol=5e-6)


def test_knn_vs_python_square(device):
    check_knn_against_naive(device, ragged=False)


def test_knn_vs_python_ragged(device):
    check_knn_against_naive(device, ragged=True)


def test_knn_unsorted_request_still_sorted():
    # Deliberately different: pytorch3d's CUDA test asserts that return_sorted=False leaves the
    # neighbours unsorted; pointops always returns them nearest first, which is a valid answer.
    torch.manual_seed(3)
    x, y = torch.randn(2, 24, 3), torch.randn(2, 32, 3)
    unsorted = knn_points(x, y, K=10, return_sorted=False)
    assert torch.equal(unsorted.dists, knn_points(x, y, K=10).dists)
    assert (unsorted.dists[..., 1:] >= unsorted.dists[..., :-1]).all()


def test_knn_gather(device):
    N, P1, P2, K, D = 4, 16, 12, 8, 3
    torch.manual_seed(4)
    x, y = torch.rand((N, P1, D), device=device), torch.rand((N, P2, D), device=device)
    lengths1 = torch.randint(1, P1, (N,), device=device)
    lengths2 = torch.randint(1, P2, (N,), device=device)
    out = knn_points(x, y, lengths1=lengths1, lengths2=lengths2, K=K)
    y_nn = knn_gather(y, out.idx, lengths2)
    for n in range(N):
        for p1 in range(P1):
            for k in range(K):
                if k < lengths2[n]:
                    assert torch.equal(y_nn[n, p1, k], y[n, out.idx[n, p1, k]])
                else:
                    assert (y_nn[n, p1, k] == 0).all()
    with_nn = knn_points(x, y, lengths1=lengths1, lengths2=lengths2, K=K, return_nn=True)
    assert torch.equal(with_nn.knn, y_nn) and knn_points(x, y, K=K).knn is None


def test_knn_invalid_norm():
    x, y = torch.rand(4, 16, 3), torch.rand(4, 12, 3)
    for norm in (3, 0):
        with pytest.raises(ValueError, match="Support for 1 or 2 norm."):
            knn_points(x, y, K=8, norm=norm)
    with pytest.raises(ValueError, match="same batch dimension"):
        knn_points(x, y[:2], K=2)
    with pytest.raises(ValueError, match="same point dimension"):
        knn_points(x, y[..., :2], K=2)
    # pytorch3d's test_knn_check_version tests which of its four kernels takes a (D, K): pointops
    # has one kernel, so ``version`` is accepted and ignored
    assert torch.equal(knn_points(x, y, K=4, version=2).idx, knn_points(x, y, K=4).idx)


def test_knn_padding_is_pytorch3ds(device):
    # past lengths2 (K > points) and past lengths1: index 0, distance 0 (pointops.knn writes -1 / +inf)
    x, y = torch.rand(2, 5, 3, device=device), torch.rand(2, 6, 3, device=device)
    out = knn_points(
        x, y, lengths1=torch.tensor([5, 2], device=device), lengths2=torch.tensor([6, 3], device=device), K=4
    )
    assert (out.idx[1, :, 3] == 0).all() and (out.dists[1, :, 3] == 0).all()
    assert (out.idx[1, 2:] == 0).all() and (out.dists[1, 2:] == 0).all()
    assert out.dists.dtype == torch.float32
    assert knn_points(x.double(), y.double(), K=2).dists.dtype == torch.float64


# ---- gradients in float64, against autograd through the reference --------------------------------


def test_knn_points_gradcheck_float64(device):
    torch.manual_seed(5)
    x = torch.rand(2, 7, 3, dtype=torch.float64, device=device, requires_grad=True)
    y = torch.rand(2, 9, 3, dtype=torch.float64, device=device, requires_grad=True)
    lengths2 = torch.tensor([9, 2], device=device)  # K > points in cloud 1: padding, no gradient
    assert torch.autograd.gradcheck(lambda a, b: knn_points(a, b, lengths2=lengths2, K=3).dists, (x, y))
    for D, norm in ((5, 2), (3, 1)):  # the brute-force path
        a = torch.rand(2, 6, D, dtype=torch.float64, device=device, requires_grad=True)
        b = torch.rand(2, 8, D, dtype=torch.float64, device=device, requires_grad=True)
        assert torch.autograd.gradcheck(lambda p, q: knn_points(p, q, K=2, norm=norm).dists, (a, b))


# ---- tests/test_sample_farthest_points.py ---------------------------------------------------------


def fps_naive(points, lengths=None, K=50):
    """pytorch3d's loop reference: argmax of the running minimum squared distance, from index 0."""
    n, P, D = points.shape
    lengths = torch.full((n,), P, dtype=torch.int64) if lengths is None else lengths
    K = torch.full((n,), K, dtype=torch.int64) if isinstance(K, int) else torch.as_tensor(K)
    max_k = int(K.max())
    out = torch.full((n, max_k), -1, dtype=torch.int64)
    for b in range(n):
        count = int(lengths[b])
        closest = torch.full((count,), float("inf"))
        selected = 0
        out[b, 0] = 0
        for i in range(1, min(count, int(K[b]))):
            d = ((points[b, selected] - points[b, :count]) ** 2).sum(-1)
            closest = torch.minimum(d, closest)
            selected = int(torch.argmax(closest))
            out[b, i] = selected
    gathered = points.gather(1, out.clamp(min=0)[..., None].expand(-1, -1, D))
    return torch.where((out >= 0)[..., None], gathered, torch.zeros_like(gathered)), out


FPS_POINTS = [
    [[-1.0, -1.0], [-1.3, 1.1], [0.2, -1.1], [0.0, 0.0], [1.3, 1.3], [1.0, 0.5], [-1.3, 0.2], [1.5, -0.5]],
    [[-2.2, -2.4], [-2.1, 2.0], [2.2, 2.1], [2.1, -2.4], [0.4, -1.0], [0.3, 0.3], [1.2, 0.5], [4.5, 4.5]],
]


def test_fps_simple(device):
    points = torch.tensor(FPS_POINTS, device=device)
    out_points, out_inds = sample_farthest_points(points, K=2)
    assert out_inds.tolist() == [[0, 4], [0, 7]]
    assert torch.equal(out_points, points.gather(1, out_inds[..., None].expand(-1, -1, 2)))
    out_points, out_inds = sample_farthest_points(points, K=[3, 2])
    assert out_inds.tolist() == [[0, 4, 1], [0, 7, -1]]
    assert torch.equal(out_points[1, 2], torch.zeros(2, device=device))
    assert torch.equal(out_points[0], points[0, [0, 4, 1]])


def test_fps_compare_random_heterogeneous(device):
    N, P, D, K = 5, 20, 5, 8
    torch.manual_seed(6)
    points = torch.randn((N, P, D))
    naive_points, naive_idx = fps_naive(points, K=K)
    out_points, out_idx = sample_farthest_points(points.to(device), K=K)
    assert out_idx.min() >= 0 and torch.equal(out_idx.cpu(), naive_idx)
    assert torch.equal(out_points.cpu(), naive_points)
    # K > P, ragged lengths
    K = 30
    points1 = torch.randn((N, P, D), requires_grad=True)
    points2 = points1.detach().clone().to(device).requires_grad_(True)
    lengths = torch.randint(1, P, (N,))
    naive_points, naive_idx = fps_naive(points1, lengths, K=K)
    out_points, out_idx = sample_farthest_points(points2, lengths.to(device), K=K)
    assert torch.equal(out_idx.cpu(), naive_idx)
    assert torch.equal(out_points.cpu(), naive_points.detach())
    for n in range(N):
        assert out_idx[n].ne(-1).sum() <= lengths[n] and out_idx[n].max() <= lengths[n]
        kept = out_idx[n][out_idx[n] >= 0]
        assert len(kept.unique()) == len(kept)
    (naive_points * torch.ones((N, K, D))).sum().backward()
    (out_points * torch.ones((N, K, D), device=device)).sum().backward()
    assert_close(points2.grad.cpu(), points1.grad, rtol=0, atol=5e-6)


def test_fps_errors(device):
    N, P, D, K = 5, 40, 5, 8
    points = torch.randn((N, P, D), device=device)
    wrong_batch = torch.randint(1, K, (K,), device=device)
    with pytest.raises(ValueError, match="K and points must have"):
        sample_farthest_points(points, K=wrong_batch)
    with pytest.raises(ValueError, match="points and lengths must have"):
        sample_farthest_points(points, lengths=wrong_batch, K=K)
    # pytorch3d raises for a length above P (pointops.farthest_point_sampling clamps)
    with pytest.raises(ValueError, match="A value in lengths was too large"):
        sample_farthest_points(points, lengths=torch.full((N,), P + 1, device=device), K=K)


def test_fps_random_start(device):
    N, P, D, K = 5, 40, 5, 8
    torch.manual_seed(7)
    points = torch.randn((N, P, D), device=device)
    _, out_idx = sample_farthest_points(points, K=K, random_start_point=True)
    assert out_idx[:, 0].sum() > 0
    assert not out_idx[:, 0].eq(out_idx[0, 0]).all()


def test_fps_gradcheck(device):
    N, P, D, K = 2, 10, 3, 2
    torch.manual_seed(8)
    points = torch.randn((N, P, D), device=device, requires_grad=True)
    lengths = torch.randint(1, P, (N,), device=device)
    assert torch.autograd.gradcheck(
        sample_farthest_points, (points, lengths, K), check_undefined_grad=False, eps=2e-3, atol=0.001
    )


def test_fps_samples_in_float32_as_pytorch3d(device):
    # pytorch3d converts the points to float32 before sampling and returns float32 points
    torch.manual_seed(9)
    points = torch.randn(3, 60, 3, dtype=torch.float64, device=device)
    sampled, idx = sample_farthest_points(points, K=12)
    expected = sample_farthest_points(points.float(), K=12)
    assert sampled.dtype == torch.float32 and torch.equal(idx, expected[1]) and torch.equal(sampled, expected[0])
    half, half_idx = sample_farthest_points(points.half(), K=12)
    assert half.dtype == torch.float32
    assert torch.equal(half_idx, sample_farthest_points(points.half().float(), K=12)[1])
    # lengths of another integer dtype are converted, as pytorch3d does
    lengths = torch.tensor([60, 30, 5], dtype=torch.int32, device=device)
    assert torch.equal(
        sample_farthest_points(points, lengths, K=8)[1], sample_farthest_points(points, lengths.long(), K=8)[1]
    )


# ---- tests/test_chamfer.py ------------------------------------------------------------------------


class Clouds:
    """The parts of pytorch3d's Pointclouds that chamfer_distance reads, from lists."""

    def __init__(self, points, normals=None):
        self.points, self.normals = points, normals
        self.size = max([len(p) for p in points], default=0)

    def _pad(self, items):
        out = torch.zeros(len(items), self.size, 3)
        for i, p in enumerate(items):
            out[i, : len(p)] = p
        return out

    def points_padded(self):
        return self._pad(self.points)

    def normals_padded(self):
        return None if self.normals is None else self._pad(self.normals)

    def num_points_per_cloud(self):
        return torch.tensor([len(p) for p in self.points], dtype=torch.int64)


def init_pointclouds(N, P1, P2, device, allow_empty=True, seed=1):
    torch.manual_seed(seed)
    low = 0 if allow_empty else 1
    p1_lengths = torch.randint(low, P1, (N,), device=device)
    p2_lengths = torch.randint(low, P2, (N,), device=device)
    P1, P2 = int(p1_lengths.max()), int(p2_lengths.max())
    weights = torch.rand((N,), device=device)
    p1, p2 = torch.rand((N, P1, 3), device=device), torch.rand((N, P2, 3), device=device)
    n1, n2 = torch.rand((N, P1, 3), device=device), torch.rand((N, P2, 3), device=device)
    n1, n2 = n1 / n1.norm(dim=-1, keepdim=True), n2 / n2.norm(dim=-1, keepdim=True)
    for t in (p1, p2, n1, n2):
        t.requires_grad_(True)
    return p1_lengths, p2_lengths, p1, p2, n1, n2, weights


def chamfer_naive(x, y, x_normals=None, y_normals=None, norm=2, abs_cosine=True, x_lengths=None, y_lengths=None):
    """pytorch3d's naive chamfer: every pair's distance (+inf past the lengths), the minima, and the
    normals' 1 - cosine at the argmin; terms past a cloud's length are 0."""
    N, P1, _ = x.shape
    P2 = y.shape[1]
    x_lengths = torch.full((N,), P1) if x_lengths is None else x_lengths.cpu()
    y_lengths = torch.full((N,), P2) if y_lengths is None else y_lengths.cpu()
    dist = torch.full((N, P1, P2), float("inf"), device=x.device)
    for n in range(N):
        for i1 in range(int(x_lengths[n])):
            for i2 in range(int(y_lengths[n])):
                diff = x[n, i1] - y[n, i2]
                dist[n, i1, i2] = (diff**2).sum() if norm == 2 else diff.abs().sum()
    x_mask = torch.arange(P1)[None] >= x_lengths[:, None]
    y_mask = torch.arange(P2)[None] >= y_lengths[:, None]
    x_dist = torch.where(x_mask.to(x.device), torch.zeros(()), dist.min(2)[0])
    y_dist = torch.where(y_mask.to(x.device), torch.zeros(()), dist.min(1)[0])
    lnorm = [None, None]
    if x_normals is not None:
        x_index = dist.argmin(2).view(N, P1, 1).expand(N, P1, 3)
        y_index = dist.argmin(1).view(N, P2, 1).expand(N, P2, 3)
        c1 = F.cosine_similarity(x_normals, y_normals.gather(1, x_index), dim=2, eps=1e-6)
        c2 = F.cosine_similarity(y_normals, x_normals.gather(1, y_index), dim=2, eps=1e-6)
        l1, l2 = (1 - c1.abs(), 1 - c2.abs()) if abs_cosine else (1 - c1, 1 - c2)
        lnorm = [
            torch.where(x_mask.to(x.device), torch.zeros(()), l1),
            torch.where(y_mask.to(x.device), torch.zeros(()), l2),
        ]
    return [x_dist, y_dist], lnorm


def check_gradients(loss, loss_norm, pred_loss, pred_loss_norm, pairs):
    """The gradients of (loss + loss_norm) and of the naive terms agree on every (ours, naive) pair."""
    total = loss.sum() + (loss_norm.sum() if loss_norm is not None else 0)
    pred = pred_loss.sum() + (pred_loss_norm.sum() if pred_loss_norm is not None else 0)
    ours = torch.autograd.grad(total, [a for a, _ in pairs], allow_unused=True)
    theirs = torch.autograd.grad(pred, [b for _, b in pairs], allow_unused=True)
    for a, b in zip(ours, theirs):
        a = torch.zeros(()) if a is None else a
        b = torch.zeros(()) if b is None else b
        assert_close(a.cpu().expand_as(b.cpu()) if a.dim() == 0 else a.cpu(), b.cpu(), rtol=1e-4, atol=1e-6)


def test_chamfer_point_batch_reduction_mean(device):
    N, max_P1, max_P2 = 7, 10, 18
    for norm in (1, 2):
        _, _, p1, p2, _, _, weights = init_pointclouds(N, max_P1, max_P2, device)
        p11, p22 = p1.detach().clone().requires_grad_(True), p2.detach().clone().requires_grad_(True)
        P1, P2 = p1.shape[1], p2.shape[1]
        pred, _ = chamfer_naive(p1, p2, norm=norm)
        loss, loss_norm = chamfer_distance(p11, p22, weights=weights, norm=norm)
        expected = ((pred[0].sum(1) / P1 + pred[1].sum(1) / P2) * weights).sum() / weights.sum()
        assert_close(loss, expected)
        assert loss_norm is None
        check_gradients(loss, None, expected, None, [(p11, p1), (p22, p2)])


def test_chamfer_vs_naive_heterogeneous(device):
    N, max_P1, max_P2 = 3, 70, 70
    for norm, single, abs_cosine in itertools.product((1, 2), (False, True), (True, False)):
        x_lengths, y_lengths, p1, p2, n1, n2, weights = init_pointclouds(N, max_P1, max_P2, device, allow_empty=False)
        loss, loss_norm = chamfer_distance(
            p1,
            p2,
            x_lengths=x_lengths,
            y_lengths=y_lengths,
            x_normals=n1,
            y_normals=n2,
            weights=weights,
            norm=norm,
            single_directional=single,
            abs_cosine=abs_cosine,
        )
        pred, pred_norm = chamfer_naive(p1, p2, n1, n2, norm, abs_cosine, x_lengths, y_lengths)
        w = weights.view(N, 1)
        expected = ((pred[0] * w).sum(1) / x_lengths).sum()
        expected_norm = ((pred_norm[0] * w).sum(1) / x_lengths).sum()
        if not single:
            expected = expected + ((pred[1] * w).sum(1) / y_lengths).sum()
            expected_norm = expected_norm + ((pred_norm[1] * w).sum(1) / y_lengths).sum()
        assert_close(loss, expected / weights.sum(), rtol=1e-4, atol=1e-6)
        assert_close(loss_norm, expected_norm / weights.sum(), rtol=1e-4, atol=1e-6)


def test_chamfer_pointcloud_objects(device):
    # pytorch3d's Pointclouds objects: anything with points_padded / num_points_per_cloud /
    # normals_padded is read as one (Clouds above)
    x_lengths, y_lengths, p1, p2, n1, n2, _ = init_pointclouds(3, 30, 30, "cpu", allow_empty=False)
    cloud1 = Clouds(
        [p1[i, : x_lengths[i]].detach() for i in range(3)], [n1[i, : x_lengths[i]].detach() for i in range(3)]
    )
    cloud2 = Clouds(
        [p2[i, : y_lengths[i]].detach() for i in range(3)], [n2[i, : y_lengths[i]].detach() for i in range(3)]
    )
    loss, loss_norm = chamfer_distance(cloud1, cloud2)
    tensor_loss, tensor_norm = chamfer_distance(
        p1, p2, x_lengths=x_lengths, y_lengths=y_lengths, x_normals=n1, y_normals=n2
    )
    assert_close(loss, tensor_loss.detach())
    assert_close(loss_norm, tensor_norm.detach())
    loss, loss_norm = chamfer_distance(Clouds(cloud1.points), Clouds(cloud2.points))
    assert_close(loss, tensor_loss.detach()) and loss_norm is None


@pytest.mark.parametrize("point_reduction", ["mean", "sum", None, "max"])
@pytest.mark.parametrize("single", [False, True])
def test_chamfer_point_reductions(device, point_reduction, single):
    N, P1, P2 = 7, 10, 18
    _, _, p1, p2, n1, n2, weights = init_pointclouds(N, P1, P2, device)
    P1, P2 = p1.shape[1], p2.shape[1]
    use_normals = point_reduction != "max"
    p11, p22 = p1.detach().clone().requires_grad_(True), p2.detach().clone().requires_grad_(True)
    pred, pred_norm = chamfer_naive(p1, p2, n1 if use_normals else None, n2 if use_normals else None)
    w = None if point_reduction is None else weights
    loss, loss_norm = chamfer_distance(
        p11,
        p22,
        x_normals=n1 if use_normals else None,
        y_normals=n2 if use_normals else None,
        weights=w,
        batch_reduction=None,
        point_reduction=point_reduction,
        single_directional=single,
    )
    if point_reduction == "max":
        expected = pred[0].max(1).values if single else torch.maximum(pred[0].max(1).values, pred[1].max(1).values)
        assert_close(loss, expected * weights)
        assert loss_norm is None
        check_gradients(loss, None, expected * weights, None, [(p11, p1), (p22, p2)])
        return
    if point_reduction is None:
        if single:
            assert_close(loss, pred[0])
            assert_close(loss_norm, pred_norm[0])
        else:
            assert_close(torch.hstack(loss), torch.hstack(pred))
            assert_close(torch.hstack(loss_norm), torch.hstack(pred_norm))
        return
    scale = (P1, P2) if point_reduction == "mean" else (1, 1)
    expected = pred[0].sum(1) / scale[0] + (0 if single else pred[1].sum(1) / scale[1])
    expected_norm = pred_norm[0].sum(1) / scale[0] + (0 if single else pred_norm[1].sum(1) / scale[1])
    assert_close(loss, expected * weights)
    assert_close(loss_norm, expected_norm * weights)
    check_gradients(loss, loss_norm, expected * weights, expected_norm * weights, [(p11, p1), (p22, p2)])


def test_chamfer_joint_reduction(device):
    N, P1, P2 = 7, 10, 18
    _, _, p1, p2, n1, n2, weights = init_pointclouds(N, P1, P2, device)
    P1, P2 = p1.shape[1], p2.shape[1]
    pred, pred_norm = chamfer_naive(p1, p2, n1, n2)
    w = weights.view(N, 1)
    point_sum = ((pred[0] * w).sum(1) + (pred[1] * w).sum(1)).sum()
    norm_sum = ((pred_norm[0] * w).sum(1) + (pred_norm[1] * w).sum(1)).sum()
    point_mean = ((pred[0] * w).sum(1) / P1 + (pred[1] * w).sum(1) / P2).sum()
    norm_mean = ((pred_norm[0] * w).sum(1) / P1 + (pred_norm[1] * w).sum(1) / P2).sum()
    for batch_reduction, point_reduction, expected, expected_norm in (
        ("sum", "sum", point_sum, norm_sum),
        ("mean", "sum", point_sum / weights.sum(), norm_sum / weights.sum()),
        ("sum", "mean", point_mean, norm_mean),
        ("mean", "mean", point_mean / weights.sum(), norm_mean / weights.sum()),
    ):
        loss, loss_norm = chamfer_distance(
            p1,
            p2,
            x_normals=n1,
            y_normals=n2,
            weights=weights,
            batch_reduction=batch_reduction,
            point_reduction=point_reduction,
        )
        assert_close(loss, expected, rtol=1e-4, atol=1e-6)
        assert_close(loss_norm, expected_norm, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="batch_reduction must be one of"):
        chamfer_distance(p1, p2, weights=weights, batch_reduction="max")
    with pytest.raises(ValueError, match="point_reduction must be one of"):
        chamfer_distance(p1, p2, weights=weights, point_reduction="min")


def test_chamfer_incorrect_weights(device):
    N, P1, P2 = 16, 64, 128
    p1 = torch.rand((N, P1, 3), device=device, requires_grad=True)
    p2 = torch.rand((N, P2, 3), device=device, requires_grad=True)
    weights = torch.zeros((N,), device=device)
    loss, loss_norm = chamfer_distance(p1, p2, weights=weights, batch_reduction="mean")
    assert loss.item() == 0 and loss.requires_grad and loss_norm.item() == 0 and loss_norm.requires_grad
    loss, loss_norm = chamfer_distance(p1, p2, weights=weights, batch_reduction=None)
    # Deliberately different: pytorch3d returns zeros of shape (N, N) here (its (N,) sum times an
    # (N, 1) view of the weights); pointops returns the (N,) a batch_reduction=None loss has
    assert loss.shape == (N,) and (loss == 0).all() and loss.requires_grad and loss_norm.shape == (N,)
    with pytest.raises(ValueError):
        chamfer_distance(p1, p2, weights=-torch.ones((N,), device=device))
    with pytest.raises(ValueError):
        chamfer_distance(p1, p2, weights=torch.zeros((N - 1,), device=device))


def test_chamfer_incorrect_inputs(device):
    _, _, p1, p2, n1, _, _ = init_pointclouds(7, 10, 18, device)
    with pytest.raises(ValueError, match="Expected normals to be of shape"):
        chamfer_distance(p1, p2, x_normals=n1[None])
    with pytest.raises(ValueError, match="Expected points to be of shape"):
        chamfer_distance(p1[None], p2)
    with pytest.raises(ValueError, match="Expected lengths to be of shape"):
        chamfer_distance(p1, p2, x_lengths=torch.tensor([1, 2, 3], device=device))
    with pytest.raises(ValueError, match="Pointclouds objects or torch.Tensor"):
        chamfer_distance(x=[1, 1, 1], y=[1, 1, 1])
    for norm in (0, 3):
        with pytest.raises(ValueError, match="Support for 1 or 2 norm."):
            chamfer_distance(p1, p2, norm=norm)


def test_chamfer_empty_clouds():
    points1 = Clouds([torch.zeros(0, 3), torch.zeros(10, 3)])
    points2 = Clouds([torch.ones(40, 3), torch.ones(40, 3)])
    loss, _ = chamfer_distance(points1, points2, batch_reduction=None)
    assert_close(loss, torch.tensor([0.0, 6.0]))
    loss2, _ = chamfer_distance(Clouds([]), Clouds([]))
    assert_close(loss2, torch.tensor(0.0))


# ---- what pointops adds: a chamfer loss that trains, mixed precision ------------------------------


def test_chamfer_loss_trains_a_cloud_onto_another(device):
    g = torch.Generator().manual_seed(10)  # the same clouds on every device
    target = torch.rand(2, 300, 3, generator=g).to(device)
    cloud = (torch.rand(2, 250, 3, generator=g) * 0.3 + 1.0).to(device).requires_grad_(True)
    optimizer = torch.optim.Adam([cloud], lr=0.02)
    losses = []
    for _ in range(150):
        optimizer.zero_grad()
        loss, _ = chamfer_distance(cloud, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]
    assert all(b <= a * 1.5 for a, b in zip(losses, losses[1:]))


class TinyPointNet(torch.nn.Module):
    """A PointNet++-style auto-encoder on the pytorch3d ops: farthest point sampling, kNN grouping
    with knn_points / knn_gather, a shared MLP max-pooled per group, a decoder that emits a
    cloud, and the chamfer loss against the input."""

    def __init__(self, out_points=64):
        super().__init__()
        self.out_points = out_points
        self.local = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64))
        self.decode = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, out_points * 3)
        )

    def forward(self, points):
        centres, _ = sample_farthest_points(points, K=32)
        groups = knn_points(centres, points, K=16, return_nn=True).knn  # (B, 32, 16, 3)
        local = self.local(groups - centres.unsqueeze(2)).max(2).values  # (B, 32, 64)
        shape = local.max(1).values  # (B, 64)
        return self.decode(shape).view(-1, self.out_points, 3)


def train_under_autocast(device, dtype, steps=8):
    torch.manual_seed(11)
    points = torch.rand(4, 256, 3, device=device)
    model = TinyPointNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device_type=device, dtype=dtype):
            pred = model(points)
            assert pred.dtype == dtype  # the decoder runs in the low precision ...
            loss, _ = chamfer_distance(pred, points)  # ... and meets float32 targets here
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_pointnet_trains_under_cpu_autocast_bfloat16():
    train_under_autocast("cpu", torch.bfloat16)


@pytest.mark.cuda
def test_pointnet_trains_under_cuda_autocast_float16():
    train_under_autocast("cuda", torch.float16)
