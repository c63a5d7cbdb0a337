"""pointops.compat.pointcept as Pointcept's libs/pointops (Pointcept/Pointcept @d74c646,
libs/pointops/functions/*.py and src/*/*_kernel.cu). Pointcept has no tests of these ops; each
function is held against a slow NumPy version of Pointcept's kernel or Python code written anew
here (float32, one rounding per operation, the same distance formula), and Point Transformer v1's
transition and attention layers, written anew as Pointcept's point_transformer_seg.py calls
pointops, run on pointops.compat.pointcept and on those references alike."""

import numpy as np
import pytest
import torch
import torch.nn as tnn
from types import SimpleNamespace

import pointops.compat.pointcept as pointops
from tests.conftest import DEVICES

F32 = np.float32


def packed(counts, seed, scale=1.0):
    """Packed clouds and Pointcept's int32 cumulative offsets."""
    g = torch.Generator().manual_seed(seed)
    xyz = torch.rand(sum(counts), 3, generator=g) * scale
    return xyz, torch.tensor(np.cumsum(counts), dtype=torch.int32)


def to(device, *ts):
    return [t.to(device) for t in ts]


def _bounds(offset):
    end = [int(v) for v in offset]
    return [0] + end[:-1], end


def _d2(q, pts):
    dx, dy, dz = F32(q[0]) - pts[:, 0], F32(q[1]) - pts[:, 1], F32(q[2]) - pts[:, 2]
    return (dx * dx + dy * dy) + dz * dz


def _rows_of(offset, new_offset):
    """(start, end) of the cloud of each query row."""
    start, end = _bounds(offset)
    new_start, new_end = _bounds(new_offset)
    out = []
    for b in range(len(end)):
        out += [(start[b], end[b])] * (new_end[b] - new_start[b])
    return out


# ---- NumPy versions of Pointcept's kernels and Python code ------------------------------------------


def np_knn_query(nsample, xyz, offset, new_xyz, new_offset):
    """knn_query_cuda_kernel: the nsample smallest squared distances of the query's cloud (ties
    to the lowest index here: Pointcept's heap orders them its own way), -1 / +inf past them."""
    p, q = xyz.numpy().astype(F32), new_xyz.numpy().astype(F32)
    idx = np.full((q.shape[0], nsample), -1, dtype=np.int32)
    dist = np.full((q.shape[0], nsample), np.inf, dtype=F32)
    for m, (s, e) in enumerate(_rows_of(offset, new_offset)):
        d2 = _d2(q[m], p[s:e])
        order = np.argsort(d2, kind="stable")[:nsample]
        idx[m, : len(order)] = order + s
        dist[m, : len(order)] = np.sqrt(d2[order])
    return torch.from_numpy(idx), torch.from_numpy(dist)


def np_ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz, new_offset):
    """ball_query_cuda_kernel: candidates d2 <= 1e-5 or min^2 <= d2 < max^2 sorted by distance
    (stable here); all of them when at most nsample, else those at ranks int(c / nsample * i)
    in float32."""
    p, q = xyz.numpy().astype(F32), new_xyz.numpy().astype(F32)
    r_max2, r_min2 = F32(max_radius) * F32(max_radius), F32(min_radius) * F32(min_radius)
    idx = np.full((q.shape[0], nsample), -1, dtype=np.int32)
    dist = np.full((q.shape[0], nsample), np.inf, dtype=F32)
    for m, (s, e) in enumerate(_rows_of(offset, new_offset)):
        d2 = _d2(q[m], p[s:e])
        cand = np.nonzero((d2.astype(np.float64) <= 1e-5) | ((d2 >= r_min2) & (d2 < r_max2)))[0]
        cand = cand[np.argsort(d2[cand], kind="stable")]
        if len(cand) <= nsample:
            pick = np.arange(len(cand))
        else:
            sep = F32(len(cand)) / F32(nsample)
            pick = np.array([int(sep * F32(i)) for i in range(nsample)])
        idx[m, : len(pick)] = cand[pick] + s
        dist[m, : len(pick)] = np.sqrt(d2[cand[pick]])
    return torch.from_numpy(idx), torch.from_numpy(dist)


def np_fps(xyz, offset, new_offset):
    """farthest_point_sampling_cuda_kernel: from each cloud's first point, min distance to the picks
    (from 1e10), the largest picked (distinct data: no ties)."""
    p = xyz.numpy().astype(F32)
    start, end = _bounds(offset)
    new_start, new_end = _bounds(new_offset)
    out = []
    for b in range(len(end)):
        pts = p[start[b] : end[b]]
        temp, old = np.full(len(pts), 1e10, dtype=F32), 0
        picks = [0]
        for _ in range(1, new_end[b] - new_start[b]):
            temp = np.minimum(temp, _d2(pts[old], pts))
            old = int(np.argmax(temp))
            picks.append(old)
        out += [start[b] + i for i in picks]
    return torch.tensor(out, dtype=torch.int32)


def np_grouping(idx, feat, xyz, new_xyz, with_xyz):
    """functions/grouping.py's grouping: a zero row for -1; relative coordinates masked at -1."""
    f = np.concatenate([feat.detach().numpy(), np.zeros((1, feat.shape[1]), F32)])
    x = np.concatenate([xyz.numpy(), np.zeros((1, 3), F32)])
    i = idx.numpy().astype(np.int64)
    grouped = f[i]
    if with_xyz:
        rel = (x[i] - new_xyz.numpy()[:, None, :]) * (i >= 0)[..., None]
        grouped = np.concatenate([rel, grouped], -1)
    return torch.from_numpy(grouped.astype(F32))


def np_interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
    """functions/interpolation.py: inverse-distance weights of the k nearest, summed in order."""
    idx, dist = np_knn_query(k, xyz, offset, new_xyz, new_offset)
    recip = 1.0 / (dist.numpy() + F32(1e-8))
    weight = recip / recip.sum(1, keepdims=True)
    f = feat.detach().numpy()
    out = np.zeros((new_xyz.shape[0], f.shape[1]), F32)
    for j in range(k):
        valid = idx.numpy()[:, j] >= 0
        out = out + np.where(valid[:, None], f[idx.numpy()[:, j]] * weight[:, j : j + 1], F32(0))
    return torch.from_numpy(out)


def np_query_and_group(nsample, xyz, new_xyz, feat, offset, new_offset, dilation):
    """functions/utils.py's query_and_group with idx None: kNN of 1 + (nsample - 1)(dilation + 1),
    every (soft) (dilation + 1)-th column, per cloud as Pointcept's loop does."""
    total = 1 + (nsample - 1) * (dilation + 1)
    idx_all, _ = np_knn_query(total, xyz, offset, new_xyz, new_offset)
    start, end = _bounds(offset)
    new_start, new_end = _bounds(new_offset)
    rows = []
    for i in range(len(end)):
        soft = (end[i] - start[i] - 1) / (nsample - 1) - 1 if end[i] - start[i] < total else dilation
        rows.append(idx_all[new_start[i] : new_end[i], [int((soft + 1) * j) for j in range(nsample)]])
    idx = torch.cat(rows)
    grouped_xyz = xyz[idx.long()] - new_xyz[:, None]
    return torch.cat([grouped_xyz, feat[idx.long()]], -1), idx


# ---- the functions against them ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nsample", [1, 8, 40])
def test_knn_query(device, nsample):
    xyz, offset = packed([120, 30, 9], seed=0)
    new_xyz, new_offset = packed([20, 10, 6], seed=1)
    idx, dist = pointops.knn_query(nsample, *to(device, xyz, offset, new_xyz, new_offset))
    exp_idx, exp_dist = np_knn_query(nsample, xyz, offset, new_xyz, new_offset)
    assert idx.dtype == torch.int32 and dist.dtype == torch.float32
    assert torch.equal(idx.cpu(), exp_idx) and torch.equal(dist.cpu(), exp_dist)
    # deliberately: a missing neighbour has distance +inf (Pointcept: sqrt(1e10) = 1e5)
    if nsample > 9:
        assert torch.isinf(dist[-6:, 9:]).all() and (idx[-6:, 9:] == -1).all()
    # queries default to the points
    idx, _ = pointops.knn_query(nsample, *to(device, xyz, offset))
    assert torch.equal(idx.cpu(), np_knn_query(nsample, xyz, offset, xyz, offset)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "nsample, max_radius, min_radius", [(8, 0.2, 0.0), (16, 0.35, 0.1), (4, 0.5, 0.2), (32, 0.1, 0.0)]
)
def test_ball_query(device, nsample, max_radius, min_radius):
    xyz, offset = packed([300, 120], seed=2)
    new_xyz, new_offset = packed([25, 15], seed=3)
    new_xyz[:10] = xyz[:10] + 1e-3  # within sqrt(1e-5) of a point: a candidate whatever min_radius is
    new_xyz[-1] = 7.0  # no candidate
    idx, dist = pointops.ball_query(nsample, max_radius, min_radius, *to(device, xyz, offset, new_xyz, new_offset))
    exp_idx, exp_dist = np_ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz, new_offset)
    assert torch.equal(idx.cpu(), exp_idx)
    # deliberately: the distances of the sampled points (Pointcept writes their indices when it spreads)
    torch.testing.assert_close(dist.cpu(), exp_dist, rtol=0, atol=0)
    assert (idx[-1] == -1).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nsample, max_radius, min_radius", [(8, 0.3, 0.0), (6, 0.4, 0.15)])
def test_random_ball_query(device, nsample, max_radius, min_radius):
    xyz, offset = packed([200, 100], seed=4)
    new_xyz, new_offset = packed([12, 8], seed=5)
    candidates, _ = np_ball_query(10_000, max_radius, min_radius, xyz, offset, new_xyz, new_offset)
    seen = [set() for _ in range(20)]
    torch.manual_seed(6)
    for _ in range(30):
        idx, dist = pointops.random_ball_query(
            nsample, max_radius, min_radius, *to(device, xyz, offset, new_xyz, new_offset)
        )
        idx, dist = idx.cpu(), dist.cpu()
        for m in range(20):
            cand = set(candidates[m][candidates[m] >= 0].tolist())
            got = idx[m][idx[m] >= 0].tolist()
            assert len(got) == len(set(got)) == min(nsample, len(cand)) and set(got) <= cand
            assert (idx[m, len(got) :] == -1).all() and torch.isinf(dist[m, len(got) :]).all()
            expected = torch.sqrt(((xyz[got] - new_xyz[m]) ** 2).sum(-1))
            torch.testing.assert_close(dist[m, : len(got)], expected, rtol=1e-6, atol=1e-6)
            seen[m] |= set(got)
    # the random order reaches beyond the first candidates by index
    many = [m for m in range(20) if (candidates[m] >= 0).sum() > 2 * nsample]
    assert many and all(len(seen[m]) > nsample for m in many)


@pytest.mark.parametrize("device", DEVICES)
def test_farthest_point_sampling(device):
    xyz, offset = packed([60, 25, 40], seed=7)
    new_offset = torch.tensor([10, 15, 31], dtype=torch.int32)
    idx = pointops.farthest_point_sampling(*to(device, xyz, offset, new_offset))
    assert idx.dtype == torch.int32 and torch.equal(idx.cpu(), np_fps(xyz, offset, new_offset))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_xyz", [False, True])
def test_grouping_and_gradients(device, with_xyz):
    xyz, offset = packed([50, 30], seed=8)
    feat = torch.randn(80, 5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    idx, _ = pointops.knn_query(12, xyz, offset, xyz[::4].contiguous(), torch.tensor([13, 20], dtype=torch.int32))
    idx[0, -3:] = -1
    out = pointops.grouping(*to(device, idx, feat.float(), xyz, xyz[::4].contiguous()), with_xyz=with_xyz)
    torch.testing.assert_close(out.cpu(), np_grouping(idx, feat.float(), xyz, xyz[::4], with_xyz), rtol=0, atol=0)
    f = feat.to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: pointops.grouping(idx.to(device), t, xyz.double().to(device)), (f,))
    assert torch.autograd.gradcheck(lambda t: pointops.grouping2(t, idx.to(device)), (f,))
    assert (pointops.grouping2(f, idx.to(device))[0, -3:] == 0).all()  # deliberately: -1 groups zeros


@pytest.mark.parametrize("device", DEVICES)
def test_interpolation(device):
    xyz, offset = packed([40, 2, 30], seed=10)  # cloud 1 has 2 points: a missing third neighbour
    new_xyz, new_offset = packed([100, 20, 50], seed=11)
    feat = torch.randn(72, 6, generator=torch.Generator().manual_seed(12))
    out = pointops.interpolation(*to(device, xyz, new_xyz, feat, offset, new_offset))
    torch.testing.assert_close(
        out.cpu(), np_interpolation(xyz, new_xyz, feat, offset, new_offset), rtol=2e-6, atol=2e-6
    )
    f = feat.double().to(device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: pointops.interpolation2(*to(device, xyz, new_xyz), t, *to(device, offset, new_offset)), (f,)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dilation", [0, 1, 3])
def test_query_and_group(device, dilation):
    xyz, offset = packed([80, 9, 40], seed=13)  # cloud 1 is smaller than the dilated neighbourhood
    new_xyz, new_offset = packed([20, 5, 10], seed=14)
    feat = torch.randn(129, 4, generator=torch.Generator().manual_seed(15))
    out, idx = pointops.query_and_group(
        6, *to(device, xyz, new_xyz, feat), None, *to(device, offset, new_offset), dilation=dilation
    )
    exp_out, exp_idx = np_query_and_group(6, xyz, new_xyz, feat, offset, new_offset, dilation)
    assert torch.equal(idx.cpu(), exp_idx)
    torch.testing.assert_close(out.cpu(), exp_out, rtol=0, atol=0)
    assert torch.equal(
        pointops.query_and_group(
            6,
            *to(device, xyz, new_xyz, feat),
            None,
            *to(device, offset, new_offset),
            dilation=dilation,
            with_feat=False,
        ).cpu(),
        exp_idx,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_query_and_group_helpers_and_offsets(device):
    xyz, offset = packed([50, 30], seed=16)
    feat = torch.randn(80, 3, generator=torch.Generator().manual_seed(17))
    grouped, idx = pointops.knn_query_and_group(*to(device, feat, xyz, offset), nsample=8, with_xyz=True)
    assert torch.equal(idx.cpu(), np_knn_query(8, xyz, offset, xyz, offset)[0])
    torch.testing.assert_close(grouped.cpu(), np_grouping(idx.cpu(), feat, xyz, xyz, True), rtol=0, atol=0)
    grouped, idx = pointops.ball_query_and_group(*to(device, feat, xyz, offset), max_radio=0.3, nsample=8)
    assert torch.equal(idx.cpu(), np_ball_query(8, 0.3, 0, xyz, offset, xyz, offset)[0])
    batch = pointops.offset2batch(offset.to(device))
    assert batch.tolist() == [0] * 50 + [1] * 30
    assert pointops.batch2offset(batch).tolist() == [50, 80] and pointops.batch2offset(batch).dtype == torch.int32


# ---- Point Transformer v1's layers, as point_transformer_seg.py calls pointops -----------------------


def point_transformer_layers(pointops):
    """TransitionDown (stride 4), PointTransformerLayer and TransitionUp of Pointcept's
    point_transformer_seg.py, written anew (einops spelled out in torch)."""

    class PointTransformerLayer(tnn.Module):
        def __init__(self, planes, share_planes=4, nsample=8):
            super().__init__()
            self.mid_planes, self.share_planes, self.nsample = planes, share_planes, nsample
            self.linear_q, self.linear_k, self.linear_v = (
                tnn.Linear(planes, planes),
                tnn.Linear(planes, planes),
                tnn.Linear(planes, planes),
            )
            self.linear_p = tnn.Sequential(tnn.Linear(3, 3), tnn.ReLU(), tnn.Linear(3, planes))
            self.linear_w = tnn.Sequential(tnn.ReLU(), tnn.Linear(planes, planes // share_planes))

        def forward(self, pxo):
            p, x, o = pxo
            x_q, x_k, x_v = self.linear_q(x), self.linear_k(x), self.linear_v(x)
            x_k, idx = pointops.knn_query_and_group(
                x_k, p, o, new_xyz=p, new_offset=o, nsample=self.nsample, with_xyz=True
            )
            x_v, _ = pointops.knn_query_and_group(
                x_v, p, o, new_xyz=p, new_offset=o, idx=idx, nsample=self.nsample, with_xyz=False
            )
            p_r, x_k = x_k[:, :, 0:3], x_k[:, :, 3:]
            p_r = self.linear_p(p_r)
            w = torch.softmax(self.linear_w(x_k - x_q.unsqueeze(1) + p_r), dim=1)  # (n, nsample, c / s)
            n, ns, c = x_v.shape
            v = (x_v + p_r).view(n, ns, self.share_planes, c // self.share_planes)
            return torch.einsum("ntsi,nti->nsi", v, w).reshape(n, c)

    class TransitionDown(tnn.Module):
        def __init__(self, in_planes, out_planes, stride=4, nsample=8):
            super().__init__()
            self.stride, self.nsample = stride, nsample
            self.linear = tnn.Linear(3 + in_planes, out_planes, bias=False)
            self.pool = tnn.MaxPool1d(nsample)

        def forward(self, pxo):
            p, x, o = pxo
            n_o, count = [o[0].item() // self.stride], o[0].item() // self.stride
            for i in range(1, o.shape[0]):
                count += (o[i].item() - o[i - 1].item()) // self.stride
                n_o.append(count)
            n_o = torch.tensor(n_o, dtype=torch.int32, device=p.device)
            idx = pointops.farthest_point_sampling(p, o, n_o)
            n_p = p[idx.long(), :]
            x, _ = pointops.knn_query_and_group(
                x, p, offset=o, new_xyz=n_p, new_offset=n_o, nsample=self.nsample, with_xyz=True
            )
            x = torch.relu(self.linear(x).transpose(1, 2).contiguous())
            return [n_p, self.pool(x).squeeze(-1), n_o]

    class TransitionUp(tnn.Module):
        def __init__(self, in_planes, out_planes):
            super().__init__()
            self.linear1 = tnn.Linear(out_planes, out_planes)
            self.linear2 = tnn.Linear(in_planes, out_planes)

        def forward(self, pxo1, pxo2):
            p1, x1, o1 = pxo1
            p2, x2, o2 = pxo2
            return self.linear1(x1) + pointops.interpolation(p2, p1, self.linear2(x2), o2, o1)

    class Net(tnn.Module):
        def __init__(self):
            super().__init__()
            self.down = TransitionDown(4, 16)
            self.attention = PointTransformerLayer(16)
            self.up = TransitionUp(16, 4)

        def forward(self, p, x, o):
            p2, x2, o2 = self.down([p, x, o])
            x2 = self.attention([p2, x2, o2])
            return self.up([p, x, o], [p2, x2, o2])

    return Net


def _reference_pointops():
    def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None):
        if new_xyz is None or new_offset is None:
            new_xyz, new_offset = xyz, offset
        return np_knn_query(nsample, xyz, offset, new_xyz, new_offset)

    def grouping(idx, feat, xyz, new_xyz=None, with_xyz=False):
        # Pointcept's own torch code, on the reference kNN's indices
        new_xyz = xyz if new_xyz is None else new_xyz
        m, nsample, c = idx.shape[0], idx.shape[1], feat.shape[1]
        xyz = torch.cat([xyz, torch.zeros([1, 3])], dim=0)
        feat = torch.cat([feat, torch.zeros([1, c])], dim=0)
        grouped_feat = feat[idx.view(-1).long(), :].view(m, nsample, c)
        if with_xyz:
            mask = torch.sign(idx + 1)
            grouped_xyz = xyz[idx.view(-1).long(), :].view(m, nsample, 3) - new_xyz.unsqueeze(1)
            grouped_xyz = torch.einsum("n s c, n s -> n s c", grouped_xyz, mask.float())
            return torch.cat((grouped_xyz, grouped_feat), -1)
        return grouped_feat

    def knn_query_and_group(
        feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, nsample=None, with_xyz=False
    ):
        if idx is None:
            idx, _ = knn_query(nsample, xyz, offset, new_xyz, new_offset)
        return grouping(idx, feat, xyz, new_xyz, with_xyz), idx

    def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
        idx, dist = knn_query(k, xyz, offset, new_xyz, new_offset)
        weight = 1.0 / (dist + 1e-8)
        weight = weight / weight.sum(1, keepdim=True)
        new_feat = torch.zeros((new_xyz.shape[0], feat.shape[1]))
        for i in range(k):
            new_feat += feat[idx[:, i].long(), :] * weight[:, i].unsqueeze(-1)
        return new_feat

    return SimpleNamespace(
        knn_query=knn_query,
        knn_query_and_group=knn_query_and_group,
        interpolation=interpolation,
        farthest_point_sampling=lambda p, o, n_o: np_fps(p, o, n_o.cpu()),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_point_transformer_layers_run_on_pointops(device):
    xyz, offset = packed([160, 96], seed=18)
    feat = torch.randn(256, 4, generator=torch.Generator().manual_seed(19))
    torch.manual_seed(20)
    net = point_transformer_layers(pointops)().to(device)
    reference = point_transformer_layers(_reference_pointops())()
    reference.load_state_dict(net.state_dict())
    out = net(*to(device, xyz, feat, offset))
    with torch.no_grad():
        expected = reference(xyz, feat, offset)
    torch.testing.assert_close(out.detach().cpu(), expected, rtol=1e-5, atol=1e-5)
    f = feat.to(device).requires_grad_()
    net(xyz.to(device), f, offset.to(device)).square().mean().backward()
    assert f.grad is not None and f.grad.abs().sum() > 0
    assert all(p.grad is not None for p in net.parameters())
