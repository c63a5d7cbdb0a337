"""PPF registration ops: features, model description, voting, pose clustering, presets.

Exactness: every op against pointops.reference.ppf (float32 step for step: bit for bit), the
float32 definitions against float64 ones, both voting backends against each other, CPU against
CUDA (bitwise, on a GPU machine)."""

import math
import os

import pytest
import torch

from pointops.ppf import ops as ppf
from pointops.reference import ppf as ref
from tests.conftest import DEVICES, assert_same

NAN = float("nan")


def blob(n, seed=0, scale=1.0, offset=(0.0, 0.0, 0.0)):
    """Points on a bumpy closed surface (r = 1 + 0.3 sin 3u cos 2v ...) with their exact normals:
    no symmetry, so poses are unique."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64) * 2 * math.pi
    v = torch.acos(torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1)
    u.requires_grad_(True)
    v.requires_grad_(True)
    r = 1 + 0.3 * torch.sin(3 * u) * torch.sin(v) ** 2 + 0.2 * torch.cos(2 * v) + 0.1 * torch.sin(u + v)
    p = torch.stack([r * torch.sin(v) * torch.cos(u) * 1.3, r * torch.sin(v) * torch.sin(u), r * torch.cos(v) * 0.8], 1)
    du = torch.stack(
        torch.autograd.grad(p.sum(0)[0], u, retain_graph=True)
        + torch.autograd.grad(p.sum(0)[1], u, retain_graph=True)
        + torch.autograd.grad(p.sum(0)[2], u, retain_graph=True),
        1,
    )
    dv = torch.stack(
        torch.autograd.grad(p.sum(0)[0], v, retain_graph=True)
        + torch.autograd.grad(p.sum(0)[1], v, retain_graph=True)
        + torch.autograd.grad(p.sum(0)[2], v),
        1,
    )
    n_ = torch.linalg.cross(du, dv)
    n_ = n_ / n_.norm(dim=1, keepdim=True)
    p = p.detach()
    # outward: the normal points away from the centre on a star-shaped surface
    n_ = torch.where(((n_ * p).sum(1, keepdim=True) < 0), -n_, n_).detach()
    p = p * scale + torch.tensor(offset, dtype=torch.float64)
    return p.float(), n_.float()


def random_rotation(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(4, generator=g, dtype=torch.float64)
    q = q / q.norm()
    return ppf.quaternion_to_matrix(q[None])[0]


# ---- atan2 and features ---------------------------------------------------------------------------


def test_atan2_is_close_to_the_library_and_exact_at_special_values():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(20000, generator=g) * torch.rand(20000, generator=g) ** 4
    x = torch.randn(20000, generator=g)
    got = ref.atan2(y, x).double()
    want = torch.atan2(y.double(), x.double())
    assert (got - want).abs().max() < 3e-7
    special = ref.atan2(torch.tensor([0.0, 1.0, 0.0, -1.0, 1.0, 0.0]), torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, -1.0]))
    assert special[0] == 0 and special[2] == 0
    assert abs(float(special[1]) - math.pi / 2) < 1e-7 and abs(float(special[3]) + math.pi / 2) < 1e-7
    assert abs(float(special[4]) - math.pi / 4) < 1e-7 and abs(float(special[5]) - math.pi) < 1e-6


def random_pairs(batch, n, count, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, n, (batch, count, 2), generator=g)
    pairs[:, :5, 1] = pairs[:, :5, 0]  # i == j
    pairs[:, 5, 0] = -1
    pairs[:, 6, 1] = n + 3
    return pairs


def oriented_batch(batch=3, n=120, seed=0):
    points, normals = zip(*(blob(n, seed + b, scale=0.5 + b) for b in range(batch)))
    points, normals = torch.stack(points), torch.stack(normals)
    normals = normals * (1 + torch.rand(normals.shape[:2], generator=torch.Generator().manual_seed(seed)))[..., None]
    normals[0, 3] = NAN  # a NaN normal
    normals[1, 4] = 0.0  # a zero normal
    points[2, 5, 1] = float("inf")
    points[0, 7] = points[0, 8]  # duplicates
    normals[0, 7] = normals[0, 8]
    return points, normals


@pytest.mark.parametrize("device", DEVICES)
def test_features_match_the_reference_bit_for_bit(device):
    points, normals = oriented_batch()
    pairs = random_pairs(3, 120, 400)
    pairs[0, 7] = torch.tensor([7, 8])
    step = torch.tensor([0.05, 0.1, -1.0])  # the last cloud's step is invalid: no keys
    lengths = torch.tensor([120, 90, 120])
    args = (points, normals, pairs, lengths, step, 30, 21)
    got = torch.ops.pointops.ppf_features(*[a.to(device) if isinstance(a, torch.Tensor) else a for a in args])
    want = ref.ppf_features(points, normals, pairs, step, lengths, 30, 21)
    assert_same(got, want)
    features, keys, alpha = [t.cpu() for t in got]
    assert (keys[2] == -1).all() and torch.isfinite(features[2]).any()
    assert torch.isnan(features[:, :5]).all() and (keys[:, :5] == -1).all()  # i == j
    assert torch.isnan(features[1, 6]).all()  # index past the cloud
    assert torch.isnan(features[0, 7]).all()  # coincident points
    over = pairs[1, :, 0].ge(90) | pairs[1, :, 1].ge(90)
    assert (keys[1][over] == -1).all()


def test_features_are_close_to_float64_and_keys_agree_away_from_bin_edges():
    points, normals = blob(300, seed=3)
    pairs = random_pairs(1, 300, 3000, seed=1)[:, 10:]
    pairs = pairs[:, pairs[0, :, 0] != pairs[0, :, 1]]
    step = torch.tensor([0.15])
    features, keys, alpha = ppf.ppf_features(points[None], normals[None], pairs, step)
    exact, exact_alpha = ref.ppf_features_float64(points[None], normals[None], pairs)
    assert (features.double() - exact).abs().max() < 2e-5
    gap = (alpha.double() - exact_alpha).abs()
    assert torch.minimum(gap, 2 * math.pi - gap).max() < 2e-5
    binning = ref.Binning(30, 21)
    scaled = torch.cat([exact[..., :1] / 0.15, exact[..., 1:] / (2 * math.pi / 30)], -1)
    safe = ((scaled - scaled.round()).abs() > 1e-4).all(-1) & (scaled[..., 0] < 21)
    bins = scaled.floor().long()
    bins[..., 1:] = bins[..., 1:].clamp(max=binning.feature_bins - 1)
    assert safe.float().mean() > 0.9
    assert (ppf.decode_keys(keys)[safe] == bins[safe]).all()
    assert (keys[safe] == ref.pack_keys(bins, binning.feature_bins)[safe]).all()


def test_key_packing_has_no_collisions_and_decodes():
    fb = 15
    grid = torch.stack(
        torch.meshgrid(torch.arange(3), torch.arange(fb), torch.arange(fb), torch.arange(fb), indexing="ij"), -1
    ).reshape(-1, 4)
    keys = ref.pack_keys(grid, fb)
    assert keys.unique().numel() == grid.shape[0] and int(keys.max()) == 3 * fb**3 - 1
    assert (ppf.decode_keys(keys, 30) == grid).all()
    assert (ppf.decode_keys(torch.tensor([-1]), 30) == -1).all()
    assert ppf.key_count(30, 21) == 21 * 15**3 and ppf.key_count(31, 21) == 21 * 16**3


# ---- model description ----------------------------------------------------------------------------


def model_args(points, normals, lengths, tau_d=0.1, angle_bins=30, diameter=None):
    return points, normals, lengths, diameter, tau_d, angle_bins, ppf.distance_bins_for(tau_d)


@pytest.mark.parametrize("device", DEVICES)
def test_model_matches_the_dict_reference(device):
    points, normals = oriented_batch(3, 60)
    lengths = torch.tensor([60, 41, 0])
    for args in (
        model_args(points, normals, lengths),
        model_args(points, normals, None, 0.07, 17, torch.tensor([2.0, float("nan"), 3.0])),
    ):
        got = torch.ops.pointops.ppf_model(*[a.to(device) if isinstance(a, torch.Tensor) else a for a in args])
        want = ref.ppf_model(*args)
        assert_same(got, want)
    assert got[1][1].isnan() and int(got[7][1]) == 0  # a NaN diameter: no pairs


def test_model_hash_array_against_a_python_dict():
    points, normals = blob(50, seed=5)
    model = ppf.ppf_model(points[None], normals[None], tau_d=0.1, angle_bins=24)
    table, _, alpha = ref.model_pairs(
        points, normals, 50, float(model.distance_step[0]), ref.Binning(24, model.distance_bins)
    )
    assert int(model.num_unique[0]) == len(table)
    assert int(model.num_pairs[0]) == sum(len(v) for v in table.values()) == 50 * 49
    for r in range(int(model.num_unique[0])):
        key = int(model.unique_keys[0, r])
        lo, hi = int(model.key_offsets[0, key]), int(model.key_offsets[0, key + 1])
        assert (lo, hi - lo) == (int(model.starts[0, r]), int(model.counts[0, r]))
        rows = list(zip(model.pair_ref[0, lo:hi].tolist(), model.pair_partner[0, lo:hi].tolist()))
        assert rows == table[key]
        assert all(float(model.pair_alpha[0, lo + e]) == float(alpha[i, j]) for e, (i, j) in enumerate(rows))
    # keys with no pairs have empty ranges
    sizes = model.key_offsets[0, 1:] - model.key_offsets[0, :-1]
    assert int((sizes > 0).sum()) == len(table)


@pytest.mark.parametrize("device", DEVICES)
def test_model_key_cap_keeps_evenly_spaced_pairs(device):
    """max_pairs_per_key: a key with more pairs keeps that many, at positions floor(t c / cap) of
    its (i, j) order; the rest of the description follows (offsets, runs, the vote)."""
    points, normals = oriented_batch(3, 60)
    lengths = torch.tensor([60, 41, 0])
    full = ref.ppf_model(*model_args(points, normals, lengths))
    for cap in (1, 3, 7, 10**6):
        args = model_args(points, normals, lengths) + (cap,)
        got = torch.ops.pointops.ppf_model(*[a.to(device) if isinstance(a, torch.Tensor) else a for a in args])
        want = ref.ppf_model(*args)
        assert_same(got, want)
        assert torch.equal(want[7], full[7])  # the same keys
        assert (want[6] <= cap).all() and torch.equal(want[6], full[6].clamp(max=cap))
    capped = ref.ppf_model(*(model_args(points, normals, lengths) + (3,)))
    b, r = 0, int(torch.nonzero(full[6][0] > 3)[0, 0])  # a key the cap thins
    c, lo, lo_capped = int(full[6][b, r]), int(full[5][b, r]), int(capped[5][b, r])
    for t in range(3):
        assert int(capped[8][b, lo_capped + t]) == int(full[8][b, lo + t * c // 3])
        assert int(capped[9][b, lo_capped + t]) == int(full[9][b, lo + t * c // 3])
    with pytest.raises(RuntimeError, match=r"max_pairs_per_key must be >= 0 \(0: no cap\), got -1"):
        torch.ops.pointops.ppf_model(*(model_args(points, normals, lengths) + (-1,)))


def test_vote_with_a_capped_model_equals_the_reference():
    scene_points, scene_normals, lengths, model = vote_inputs()
    capped = ppf.ppf_model(model.points, model.normals, model.lengths, tau_d=0.1, max_pairs_per_key=2)
    assert int(capped.num_pairs.sum()) < int(model.num_pairs.sum())
    want = ref.ppf_vote(
        scene_points,
        scene_normals,
        lengths,
        capped.points,
        capped.normals,
        capped.key_offsets,
        capped.pair_ref,
        capped.pair_alpha,
        capped.distance_step,
        capped.diameter,
        capped.angle_bins,
        capped.distance_bins,
        4,
        3,
        True,
    )
    for backend in ("dense", "sort"):
        assert_same(raw_vote(scene_points, scene_normals, lengths, capped, 4, 3, True, backend), want)
    cast = ref.votes_cast(
        scene_points,
        scene_normals,
        lengths,
        capped.key_offsets,
        capped.distance_step,
        capped.diameter,
        capped.angle_bins,
        capped.distance_bins,
        4,
        True,
    )
    full = ref.votes_cast(
        scene_points,
        scene_normals,
        lengths,
        model.key_offsets,
        model.distance_step,
        model.diameter,
        model.angle_bins,
        model.distance_bins,
        4,
        True,
    )
    assert 0 < int(cast.sum()) < int(full.sum())


def test_model_batch_equals_models_built_alone():
    points, normals = oriented_batch(3, 40, seed=2)
    lengths = torch.tensor([40, 25, 33])
    batched = ppf.ppf_model(points, normals, lengths, tau_d=0.08)
    for b in range(3):
        n = int(lengths[b])
        single = ppf.ppf_model(
            points[b : b + 1, :n], normals[b : b + 1, :n], tau_d=0.08, diameter=batched.diameter[b : b + 1]
        )
        pairs = int(batched.num_pairs[b])
        assert pairs == int(single.num_pairs[0]) > 0
        assert torch.equal(single.key_offsets[0], batched.key_offsets[b])
        assert torch.equal(single.pair_ref[0, :pairs], batched.pair_ref[b, :pairs])
        assert torch.equal(single.pair_partner[0, :pairs], batched.pair_partner[b, :pairs])
        assert torch.equal(single.pair_alpha[0, :pairs], batched.pair_alpha[b, :pairs])
        assert (batched.pair_ref[b, int(batched.num_pairs[b]) :] == -1).all()


def test_model_edge_cases():
    points, normals = blob(5, seed=1)
    for n in (0, 1):
        model = ppf.ppf_model(points[None, :n], normals[None, :n])
        assert model.pair_ref.shape == (1, 0) and int(model.num_pairs[0]) == 0 and int(model.num_unique[0]) == 0
    # NaN normals and duplicate points take no part in any pair
    p, n_ = points.clone(), normals.clone()
    n_[0] = NAN
    p[2] = p[1]
    model = ppf.ppf_model(p[None], n_[None], tau_d=0.1)
    rows = set(
        zip(
            model.pair_ref[0, : int(model.num_pairs[0])].tolist(),
            model.pair_partner[0, : int(model.num_pairs[0])].tolist(),
        )
    )
    assert all(0 not in r for r in rows) and (1, 2) not in rows and (2, 1) not in rows
    assert int(model.num_pairs[0]) == 4 * 3 - 2
    assert torch.isnan(model.normals[0, 0]).all()
    # B = 0
    empty = ppf.ppf_model(torch.zeros(0, 4, 3), torch.zeros(0, 4, 3))
    assert empty.key_offsets.shape == (0, ppf.key_count(30, 21) + 1)


def test_model_save_load_round_trip(tmp_path):
    points, normals = oriented_batch(3, 30)
    model = ppf.ppf_model(points, normals, torch.tensor([30, 20, 25]))
    path = os.path.join(tmp_path, "model.pt")
    model.save(path)
    loaded = ppf.PPFModel.load(path)
    assert type(loaded) is ppf.PPFModel
    for name in ppf.PPFModel._fields:
        a, b = getattr(model, name), getattr(loaded, name)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and a.dtype == b.dtype
        else:
            assert a == b


def test_model_errors():
    points, normals = blob(10)
    step = torch.tensor([0.1])
    op = torch.ops.pointops.ppf_model
    with pytest.raises(RuntimeError, match=r"normals must have the shape of points"):
        op(points[None], normals[None, :5], None, None, 0.05, 30, 21)
    with pytest.raises(RuntimeError, match=r"points must have shape \(B, N, 3\)"):
        op(points, normals, None, None, 0.05, 30, 21)
    with pytest.raises(RuntimeError, match=r"angle_bins must be in \[1, 360\], got 0"):
        op(points[None], normals[None], None, None, 0.05, 0, 21)
    with pytest.raises(RuntimeError, match=r"at most 2\^24"):
        op(points[None], normals[None], None, None, 0.05, 360, 21)
    with pytest.raises(RuntimeError, match=r"diameter must have shape \[1\], got \[2\]"):
        op(points[None], normals[None], None, torch.ones(2), 0.05, 30, 21)
    with pytest.raises(RuntimeError, match=r"tau_d must be in \(0, 1\], got 1.5"):
        op(points[None], normals[None], None, None, 1.5, 30, 21)
    with pytest.raises(RuntimeError, match=r"lengths must be Long, got Int"):
        op(points[None], normals[None], torch.tensor([3], dtype=torch.int32), None, 0.05, 30, 21)
    with pytest.raises(ValueError, match=r"tau_d must be in \(0, 1\]"):
        ppf.ppf_model(points[None], normals[None], tau_d=0.0)
    with pytest.raises(RuntimeError, match=r"pairs must have shape \(B, P, 2\)"):
        torch.ops.pointops.ppf_features(
            points[None], normals[None], torch.zeros(1, 4, 3, dtype=torch.long), None, step, 30, 21
        )


# ---- voting -------------------------------------------------------------------------------------


def vote_inputs(seed=0):
    """Two models (one padded), two scenes: transformed copies of the models among clutter."""
    mp0, mn0 = blob(40, seed=seed + 1)
    mp1, mn1 = blob(40, seed=seed + 2, scale=0.8)
    points = torch.stack([mp0, mp1])
    normals = torch.stack([mn0, mn1])
    model = ppf.ppf_model(points, normals, torch.tensor([40, 33]), tau_d=0.1)
    g = torch.Generator().manual_seed(seed)
    scenes_p, scenes_n = [], []
    for s in range(2):
        rot = random_rotation(seed * 10 + s).float()
        p = torch.cat([points[s] @ rot.T + torch.tensor([0.3, -0.2, 2.0]), torch.randn(20, 3, generator=g) * 1.5])
        n = torch.cat([normals[s] @ rot.T, torch.randn(20, 3, generator=g)])
        scenes_p.append(p)
        scenes_n.append(n)
    scene_points, scene_normals = torch.stack(scenes_p), torch.stack(scenes_n)
    scene_normals[0, 4] = NAN
    scene_points[1, 9] = scene_points[1, 10]
    return scene_points, scene_normals, torch.tensor([60, 51]), model


def raw_vote(
    scene_points, scene_normals, lengths, model, stride, k, spread, backend, chunk_votes=1 << 24, device="cpu"
):
    to = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731  (a one-line mover)
    return torch.ops.pointops.ppf_vote(
        to(scene_points),
        to(scene_normals),
        to(lengths),
        to(model.points),
        to(model.normals),
        to(model.key_offsets),
        to(model.pair_ref),
        to(model.pair_alpha),
        to(model.distance_step),
        to(model.diameter),
        model.angle_bins,
        model.distance_bins,
        stride,
        k,
        spread,
        backend,
        chunk_votes,
    )


@pytest.mark.parametrize("spread", [False, True])
def test_vote_backends_equal_the_brute_force_reference(spread):
    scene_points, scene_normals, lengths, model = vote_inputs()
    want = ref.ppf_vote(
        scene_points,
        scene_normals,
        lengths,
        model.points,
        model.normals,
        model.key_offsets,
        model.pair_ref,
        model.pair_alpha,
        model.distance_step,
        model.diameter,
        model.angle_bins,
        model.distance_bins,
        4,
        3,
        spread,
    )
    dense = raw_vote(scene_points, scene_normals, lengths, model, 4, 3, spread, "dense")
    assert_same(dense, want)
    for chunk in (1 << 24, 500, 1):  # one chunk, several, one reference per chunk
        assert_same(raw_vote(scene_points, scene_normals, lengths, model, 4, 3, spread, "sort", chunk), want)
    assert (dense[0] > 0).sum() > 20


def test_vote_peaks_name_the_matching_model_point():
    mp, mn = blob(80, seed=7)
    model = ppf.ppf_model(mp[None], mn[None], tau_d=0.1)
    rot = random_rotation(1).float()
    shift = torch.tensor([1.0, 2.0, -0.5])
    votes = ppf.ppf_vote((mp @ rot.T + shift)[None], (mn @ rot.T)[None], model, stride=5, k=1)
    assert (votes.model_index[0, 0, :, 0] == torch.arange(0, 80, 5)).float().mean() > 0.9
    matrices = ppf.quaternion_to_matrix(votes.quaternions[0, 0, :, 0])
    good = votes.model_index[0, 0, :, 0] == torch.arange(0, 80, 5)
    angle = (matrices[good] @ rot.T).diagonal(dim1=-2, dim2=-1).sum(-1).sub(1).div(2).clamp(-1, 1).acos()
    assert angle.max() < math.radians(12)
    assert (votes.translations[0, 0, good, 0] - shift).norm(dim=1).max() < 0.1 * float(model.diameter[0])


def test_vote_edge_cases():
    scene_points, scene_normals, lengths, model = vote_inputs()
    # empty scene: R = 0
    out = ppf.ppf_vote(scene_points[:, :0], scene_normals[:, :0], model)
    assert out.votes.shape == (2, 2, 0, 3)
    # zero lengths, and a NaN reference normal: no peaks there
    out = ppf.ppf_vote(scene_points, scene_normals, model, torch.tensor([0, 51]), stride=4, k=2)
    assert (out.votes[0] == 0).all() and (out.model_index[0] == -1).all() and torch.isnan(out.quaternions[0]).all()
    assert (out.votes[1, :, 13:] == 0).all()  # references past the length
    assert (out.votes[1].amax(-1) > 0).any()
    out = ppf.ppf_vote(scene_points, scene_normals, model, lengths, stride=4, k=2)
    assert (out.votes[0, :, 1] == 0).all()  # reference 4 has a NaN normal
    # a model of one point has no pairs, so no votes; k = 0 gives empty peaks
    tiny = ppf.ppf_model(model.points[:1, :1], model.normals[:1, :1])
    assert (ppf.ppf_vote(scene_points, scene_normals, tiny).votes == 0).all()
    assert ppf.ppf_vote(scene_points, scene_normals, model, k=0).votes.shape == (2, 2, 12, 0)


def test_vote_errors():
    scene_points, scene_normals, lengths, model = vote_inputs()
    with pytest.raises(RuntimeError, match=r'backend must be "dense" or "sort", got "hash"'):
        raw_vote(scene_points, scene_normals, lengths, model, 4, 3, False, "hash")
    with pytest.raises(RuntimeError, match=r"stride must be >= 1, got 0"):
        raw_vote(scene_points, scene_normals, lengths, model, 0, 3, False, "dense")
    with pytest.raises(RuntimeError, match=r"k \(peaks per reference\) must be in \[0, 64\], got 65"):
        raw_vote(scene_points, scene_normals, lengths, model, 4, 65, False, "dense")
    with pytest.raises(RuntimeError, match=r"chunk_votes must be >= 1, got 0"):
        raw_vote(scene_points, scene_normals, lengths, model, 4, 3, False, "sort", 0)
    with pytest.raises(RuntimeError, match=r"scene_normals must have the shape of scene_points"):
        raw_vote(scene_points, scene_normals[:, :5], lengths, model, 4, 3, False, "dense")
    bad = model._replace(pair_ref=model.pair_ref.long())
    with pytest.raises(RuntimeError, match=r"pair_ref must be Int, got Long"):
        raw_vote(scene_points, scene_normals, lengths, bad, 4, 3, False, "dense")
    bad = model._replace(key_offsets=model.key_offsets[:, :-1])
    with pytest.raises(RuntimeError, match=r"key_offsets must have shape"):
        raw_vote(scene_points, scene_normals, lengths, bad, 4, 3, False, "dense")


# ---- pose clustering -------------------------------------------------------------------------------


def cluster_inputs(seed=0, batch=2, poses=60):
    """Poses scattered around three instances (translations 1 apart) plus noise poses."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.2]])
    base = torch.randn(3, 4, generator=g)
    base = base / base.norm(dim=1, keepdim=True)
    which = torch.randint(0, 3, (batch, poses), generator=g)
    q = base[which] + 0.03 * torch.randn(batch, poses, 4, generator=g)
    t = centres[which] + 0.02 * torch.randn(batch, poses, 3, generator=g)
    flip = torch.rand(batch, poses, generator=g) < 0.3
    q = torch.where(flip[..., None], -q, q)  # q and -q: the same rotation
    noise = torch.rand(batch, poses, generator=g) < 0.25
    t = torch.where(noise[..., None], torch.rand(batch, poses, 3, generator=g) * 3 - 1, t)
    q = torch.where(noise[..., None], torch.randn(batch, poses, 4, generator=g), q)
    votes = torch.randint(1, 30, (batch, poses), generator=g)
    votes[0, 3] = 0
    q[-1, 5] = NAN
    return q, t, votes


@pytest.mark.parametrize("device", DEVICES)
def test_cluster_matches_the_brute_force_reference(device):
    q, t, votes = cluster_inputs()
    thr = torch.tensor([0.1, 0.15])
    for lengths, k, sup, turn in (
        (None, 5, thr * 3, math.pi),
        (torch.tensor([60, 41]), 8, thr, math.pi),
        (None, 2, torch.full((2,), NAN), math.pi),
        (None, 12, thr * 20, math.radians(40.0)),
        (torch.tensor([60, 41]), 9, thr * 3, 0.01),
    ):
        got = torch.ops.pointops.pose_cluster(
            q.to(device),
            t.to(device),
            votes.to(device),
            None if lengths is None else lengths.to(device),
            thr.to(device),
            math.radians(20.0),
            sup.to(device),
            k,
            turn,
        )
        want = ref.pose_cluster(q, t, votes, lengths, thr, math.radians(20.0), sup, k, turn)
        assert_same(got, want)


def test_cluster_suppression_keeps_a_turned_pose_at_the_same_place():
    """Two rotations at one place: suppression by distance alone returns one cluster there; with
    an angle below the turn between them, the second becomes the next cluster."""
    turned = torch.tensor([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])  # 90 degrees about z
    q = torch.stack([torch.tensor([1.0, 0.0, 0.0, 0.0])] * 6 + [turned] * 4)[None]
    t = torch.zeros(1, 10, 3)
    t[0, :, 0] = torch.linspace(0, 0.01, 10)
    votes = torch.ones(1, 10, dtype=torch.long)
    thr = torch.tensor([0.05])
    alone = ppf.pose_cluster(q, t, votes, thr, suppression_distance=thr * 10, k=3)
    assert alone.centers[0].tolist() == [0, -1, -1] and alone.scores[0, 0] == 6
    both = ppf.pose_cluster(q, t, votes, thr, suppression_distance=thr * 10, k=3, suppression_angle=math.radians(45))
    assert both.centers[0].tolist() == [0, 6, -1] and both.scores[0].tolist() == [6, 4, 0]
    torch.testing.assert_close(both.quaternions[0, 1], turned)


def test_cluster_finds_every_instance_and_averages_it():
    q, t, votes = cluster_inputs(seed=1, batch=1, poses=300)
    out = ppf.pose_cluster(
        q,
        t,
        votes,
        torch.tensor([0.1]),
        angle_threshold=math.radians(20.0),
        suppression_distance=torch.tensor([0.5]),
        k=5,
    )
    found = out.translations[0, :3]
    centres = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.2]])
    assert torch.cdist(found, centres).amin(0).max() < 0.02
    assert (out.scores[0, :3] > out.scores[0, 3:].amax()).all() and (out.scores[0, :3] > 500).all()
    assert (out.members[0, :3] > 40).all()
    assert (out.quaternions[0, :, 0] >= 0).all()
    # q and -q count as one rotation: flipping every quaternion changes nothing
    flipped = ppf.pose_cluster(
        -q,
        t,
        votes,
        torch.tensor([0.1]),
        angle_threshold=math.radians(20.0),
        suppression_distance=torch.tensor([0.5]),
        k=5,
    )
    assert torch.equal(flipped.scores, out.scores) and torch.equal(flipped.centers, out.centers)


def test_cluster_edge_cases_and_errors():
    q, t, votes = cluster_inputs()
    thr = torch.tensor([0.1, 0.1])
    assert ppf.pose_cluster(q, t, votes, thr, k=0).scores.shape == (2, 0)
    out = ppf.pose_cluster(q, t, torch.zeros_like(votes), thr, k=3)
    assert (out.centers == -1).all() and torch.isnan(out.quaternions).all() and (out.scores == 0).all()
    out = ppf.pose_cluster(q, t, votes, torch.tensor([-1.0, NAN]), k=3)
    assert (out.centers == -1).all()
    far = t.clone()
    far[0, :] = 1e9  # more than 2^16 cells from the origin: left out
    assert (ppf.pose_cluster(q, far, votes, thr, k=3).centers[0] == -1).all()
    with pytest.raises(RuntimeError, match=r"angle_threshold must be in \(0, pi\] radians, got 4"):
        torch.ops.pointops.pose_cluster(q, t, votes, None, thr, 4.0, thr, 3)
    with pytest.raises(RuntimeError, match=r"votes must be Long, got Int"):
        torch.ops.pointops.pose_cluster(q, t, votes.int(), None, thr, 0.5, thr, 3)
    with pytest.raises(RuntimeError, match=r"suppression_angle must be in \(0, pi\] radians, got 0"):
        torch.ops.pointops.pose_cluster(q, t, votes, None, thr, 0.5, thr, 3, 0.0)
    with pytest.raises(RuntimeError, match=r"translations must have shape \[2, 60, 3\]"):
        torch.ops.pointops.pose_cluster(q, t[:, :5], votes, None, thr, 0.5, thr, 3)
    with pytest.raises(RuntimeError, match=r"at most 4095 batch entries"):
        z = torch.zeros(4096, 1, 4)
        torch.ops.pointops.pose_cluster(
            z, z[..., :3], torch.zeros(4096, 1, dtype=torch.long), None, torch.ones(4096), 0.5, torch.ones(4096), 1
        )


# ---- CPU == CUDA ----------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("spread", [False, True])
def test_vote_cuda_equals_cpu_with_model_slices(spread):
    """A 1,500-point model needs several shared-memory slices on the GPU (and a padded second
    model beside it, a table of slice rows per model); every backend and device must agree bit
    for bit."""
    mp, mn = blob(1500, seed=11)
    model = ppf.ppf_model(torch.stack([mp, mp * 0.8]), torch.stack([mn, mn]), torch.tensor([1500, 1100]), tau_d=0.05)
    rot = random_rotation(5).float()
    g = torch.Generator().manual_seed(2)
    scene_p = torch.cat([mp[::2] @ rot.T + torch.tensor([0.2, 0.0, 1.0]), torch.randn(300, 3, generator=g)])[None]
    scene_n = torch.cat([mn[::2] @ rot.T, torch.randn(300, 3, generator=g)])[None]
    cpu = raw_vote(scene_p, scene_n, None, model, 7, 4, spread, "dense")
    for backend, chunk in (("dense", 1 << 24), ("sort", 1 << 24), ("sort", 20000)):
        assert_same(raw_vote(scene_p, scene_n, None, model, 7, 4, spread, backend, chunk, device="cuda"), cpu)
    if not spread:  # the CPU sort of the spread votes takes over a minute; smaller tests cover it
        assert_same(raw_vote(scene_p, scene_n, None, model, 7, 4, spread, "sort"), cpu)


@pytest.mark.cuda
def test_model_cuda_equals_cpu_at_size():
    mp, mn = blob(2000, seed=12)
    points = torch.stack([mp, mp * 0.5])
    normals = torch.stack([mn, mn])
    lengths = torch.tensor([2000, 1700])
    for cap in (0, 50):  # every pair, and at most 50 per key
        args = model_args(points, normals, lengths, tau_d=0.05) + (cap,)
        cpu = torch.ops.pointops.ppf_model(*args)
        cuda = torch.ops.pointops.ppf_model(*[a.cuda() if isinstance(a, torch.Tensor) else a for a in args])
        assert_same(cuda, cpu)


@pytest.mark.cuda
def test_cluster_cuda_equals_cpu_at_size():
    q, t, votes = cluster_inputs(seed=3, batch=4, poses=5000)
    thr, sup = torch.tensor([0.05, 0.1, 0.2, 0.02]), torch.tensor([0.5, 0.3, 1.0, 0.0])
    cpu = torch.ops.pointops.pose_cluster(q, t, votes, None, thr, math.radians(24.0), sup, 10)
    cuda = torch.ops.pointops.pose_cluster(
        q.cuda(), t.cuda(), votes.cuda(), None, thr.cuda(), math.radians(24.0), sup.cuda(), 10
    )
    assert_same(cuda, cpu)


# ---- presets and the matcher --------------------------------------------------------------------


def test_matcher_config_errors():
    from pointops.ppf.matcher import PPFMatcher, resolve_ppf_config

    assert resolve_ppf_config("default", stride=3)["stride"] == 3
    assert resolve_ppf_config("fast")["tau_d"] == 0.05
    with pytest.raises(ValueError, match="unknown PPF preset 'slow'"):
        resolve_ppf_config("slow")
    with pytest.raises(ValueError, match=r"unknown PPF options \['strides'\]"):
        PPFMatcher(torch.rand(20, 3), torch.rand(20, 3), strides=2)


def two_instance_scene():
    """A scene of two rotated copies of a sampled blob mesh on a plane, seen from the origin,
    with exact normals; the poses of the copies in model coordinates."""
    from pointops import scenes
    from pointops.scenes import tabletop

    mesh = scenes.blob_mesh(seed=1)
    mp, mn, _ = scenes.sample_surface(mesh, 3000, seed=0)
    poses = []
    parts_p, parts_n = [], []
    for k, shift in enumerate(([-0.8, 0.1, 3.0], [0.9, -0.2, 3.3])):
        pose = torch.eye(4, dtype=torch.float64)
        pose[:3, :3] = tabletop.random_rotation(torch.Generator().manual_seed(10 + k))
        pose[:3, 3] = torch.tensor(shift, dtype=torch.float64)
        sp, sn, _ = scenes.sample_surface(mesh, 1500, seed=5 + k)
        p, n = sp @ pose[:3, :3].T + pose[:3, 3], sn @ pose[:3, :3].T
        seen = (n * p).sum(1) < 0  # the side facing the sensor
        parts_p.append(p[seen])
        parts_n.append(n[seen])
        poses.append(pose.float())
    g = torch.Generator().manual_seed(3)
    plane = torch.rand(1500, 3, generator=g, dtype=torch.float64) * torch.tensor([4.0, 0.0, 3.0]) + torch.tensor(
        [-2.0, 0.7, 2.0]
    )
    parts_p.append(plane)
    parts_n.append(torch.tensor([[0.0, -1.0, 0.0]], dtype=torch.float64).expand(1500, 3))
    return mp.float(), mn.float(), torch.cat(parts_p).float(), torch.cat(parts_n).float(), poses


def rotation_error_deg(a, b):
    cos = ((a[:3, :3] @ b[:3, :3].T).trace() - 1) / 2
    return math.degrees(math.acos(float(cos.clamp(-1, 1))))


def test_matcher_recovers_both_instances_of_a_model():
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, sn, truths = two_instance_scene()
    matcher = PPFMatcher(mp, mn, tau_d=0.07, hypotheses=4, icp_iterations=5)
    out = matcher.match(sp, sn, max_instances=2)
    assert out.poses.shape == (1, 1, 2, 4, 4) and out.scores.shape == (1, 1, 2)
    found = out.poses[0, 0]
    for truth in truths:
        gap = (found[:, :3, 3] - truth[:3, 3]).norm(dim=1)
        best = int(gap.argmin())
        assert float(gap[best]) < 0.05 and rotation_error_deg(found[best], truth) < 5.0
    assert (out.scores[0, 0] > 0.2).all() and (out.votes[0, 0] > 0).all()


def test_matcher_instances_are_distinct_places():
    """With max_instances > 1, a hypothesis that refinement pulled onto a better one's place gives
    way (score -1), ties to the lower index; one instance keeps the plain ranking."""
    from pointops.ppf.matcher import distinct_places

    poses = torch.eye(4).repeat(2, 5, 1, 1)
    poses[0, :, :3, 3] = torch.tensor([[0.0, 0, 0], [0.05, 0, 0], [1.0, 0, 0], [1.02, 0, 0], [NAN, 0, 0]])
    poses[1, :, :3, 3] = torch.tensor([[0.0, 0, 0], [0.0, 0, 0], [0.0, 2, 0], [3.0, 0, 0], [0.0, 0, 0]])
    scores = torch.tensor([[0.5, 0.6, 0.3, 0.3, 0.9], [0.4, 0.4, -1.0, 0.2, 0.1]])
    got = distinct_places(poses, scores, torch.tensor([0.1, 0.1]))
    assert torch.equal(got, torch.tensor([[-1.0, 0.6, 0.3, -1.0, 0.9], [0.4, -1.0, -1.0, 0.2, -1.0]]))


def test_matcher_batches_scenes_and_models():
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, sn, truths = two_instance_scene()
    other = mp * torch.tensor([1.0, 0.5, 2.0])  # a different model
    matcher = PPFMatcher(torch.stack([mp, other]), torch.stack([mn, mn]), tau_d=0.07, hypotheses=3, icp_iterations=3)
    scenes = torch.stack([sp, sp.flip(0)])
    out = matcher.match(scenes, torch.stack([sn, sn.flip(0)]), max_instances=1, refine=False)
    assert out.poses.shape == (2, 2, 1, 4, 4)
    for s in range(2):
        gap = (out.poses[s, 0, 0, :3, 3][None] - torch.stack([t[:3, 3] for t in truths])).norm(dim=1)
        assert float(gap.min()) < 0.05
    # the padded-batch result equals the per-scene one
    alone = matcher.match(sp, sn, max_instances=1, refine=False)
    torch.testing.assert_close(alone.poses[0], out.poses[0], equal_nan=True)


def test_matcher_match_reads_nothing_back():
    """match() on fake tensors (no data at all): any .item(), .tolist(), int(tensor),
    float(tensor) or data-dependent shape would raise; estimated or given normals, several scenes
    and models, with and without downsampling."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, sn, _ = two_instance_scene()
    matcher = PPFMatcher(
        torch.stack([mp, mp * 0.8]),
        torch.stack([mn, mn]),
        tau_d=0.07,
        hypotheses=3,
        turned_hypotheses=2,
        icp_iterations=2,
    )
    scenes = torch.stack([sp, sp.flip(0)])
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        syncs = (DataDependentOutputException, DynamicOutputShapeException)
        for read_back in (
            lambda t: float(t.sum()),
            lambda t: t.tolist(),
            lambda t: int(t.max()),
            lambda t: t.nonzero(),
        ):  # the harness sees each kind of sync
            with pytest.raises(syncs):
                read_back(mode.from_tensor(sp))
        points, normals = mode.from_tensor(scenes), mode.from_tensor(torch.stack([sn, sn.flip(0)]))
        lengths = mode.from_tensor(torch.tensor([sp.shape[0], 1000]))
        for out in (
            matcher.match(points, None, lengths, max_instances=2),
            matcher.match(points, normals, max_instances=1),
            matcher.match(points, normals, lengths, max_instances=3, downsample=False),
        ):
            assert out.poses.shape[:2] == (2, 2) and out.scores.shape[:2] == (2, 2)


def test_matcher_scene_capacity_and_range_image():
    from pointops.ppf.matcher import PPFMatcher, range_image

    mp, mn, sp, sn, _ = two_instance_scene()
    roomy = PPFMatcher(mp, mn, tau_d=0.07)
    points, _, lengths = roomy.prepare_scene(sp, sn)
    assert points.shape[1] == sp.shape[0] and int(lengths[0]) < 1500  # capacity min(N, 16384), no trim
    tight = PPFMatcher(mp, mn, tau_d=0.07, max_scene_points=500)
    few, few_normals, few_lengths = tight.prepare_scene(sp, sn)
    assert few.shape == (1, 500, 3) and int(few_lengths[0]) == 500
    # an even spread over the voxels: voxel floor(j * count / 500) for row j
    count = int(lengths[0])
    pick = torch.arange(500) * count // 500
    torch.testing.assert_close(few[0], points[0, pick], rtol=0, atol=0)
    with pytest.raises(ValueError, match="max_scene_points must be >= 1"):
        PPFMatcher(mp, mn, max_scene_points=0)
    # the range image: fixed size, a cell of cell_size at the median range, centred on +z
    raw = torch.tensor(
        [[[0.0, 0.0, 2.0], [0.0, 0.0, 3.0], [0.2, 0.0, 1.0], [5.0, 0.0, -1.0], [NAN, 0.0, 1.0], [0.0, 0.0, 0.5]]]
    )
    image = range_image(raw, 0.02, torch.tensor([5]), cells=64)  # the last row is past the length
    assert image.ranges.shape == (1, 64 * 64) and math.isclose(float(image.cell[0]), 0.01, rel_tol=1e-6)
    seen = image.ranges[0][torch.isfinite(image.ranges[0])]
    # the two points on the axis share a cell (the nearer wins), the one behind the sensor lies outside
    assert sorted(seen.tolist()) == [float(raw[0, 2].norm()), 2.0]


def test_matcher_empty_scenes_find_nothing():
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, _, _ = two_instance_scene()
    matcher = PPFMatcher(mp, mn, tau_d=0.07, hypotheses=3, icp_iterations=2)
    for points, lengths in (
        (torch.zeros(1, 0, 3), None),
        (sp[None], torch.tensor([0])),
        (torch.full((1, 5, 3), NAN), None),
    ):
        out = matcher.match(points, None, lengths, max_instances=2)
        assert out.poses.shape == (1, 1, 2, 4, 4) and torch.isnan(out.poses).all()
        assert (out.scores == 0).all() and (out.votes == 0).all()


@pytest.mark.cuda
def test_matcher_match_replays_from_one_cuda_graph():
    """At fixed capacities a whole match (normals, downsampling, range image, voting, clustering,
    ICP, re-scoring, selection) is captured in one CUDA graph; replays equal eager matches, also
    of another frame copied into the captured input."""
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, sn, _ = two_instance_scene()
    matcher = PPFMatcher(mp.cuda(), mn.cuda(), tau_d=0.07, hypotheses=3, icp_iterations=3)
    frame = sp.cuda().clone()
    eager = matcher.match(frame, max_instances=2)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # library handles and workspaces are made outside the capture
        matcher.match(frame, max_instances=2)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = matcher.match(frame, max_instances=2)
    graph.replay()
    torch.cuda.synchronize()
    assert_same(captured, eager)
    other = sp.flip(0) @ torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # turned about the axis
    frame.copy_(other.cuda())
    graph.replay()
    torch.cuda.synchronize()
    assert_same(captured, matcher.match(other.cuda(), max_instances=2))


@pytest.mark.cuda
def test_matcher_match_does_not_sync_on_cuda():
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, sn, _ = two_instance_scene()
    matcher = PPFMatcher(mp.cuda(), mn.cuda(), tau_d=0.07, hypotheses=3, icp_iterations=3)
    scene, normals = sp.cuda(), sn.cuda()  # (a copy from pageable host memory is itself a sync)
    expected = matcher.match(scene, max_instances=2)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = matcher.match(scene, max_instances=2)
        given = matcher.match(scene, normals, max_instances=1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert_same(out, expected)
    assert given.poses.shape == (1, 1, 1, 4, 4)


def test_matcher_turned_hypotheses_add_only_new_clusters():
    from pointops.ppf.matcher import PPFMatcher

    mp, mn, sp, sn, truths = two_instance_scene()
    matcher = PPFMatcher(mp, mn, tau_d=0.07, hypotheses=3, turned_hypotheses=4)
    lengths = torch.tensor([sp.shape[0]])
    places = matcher.hypotheses(sp[None], sn[None], lengths, 3)
    both = matcher.hypotheses(sp[None], sn[None], lengths, 3, 4)
    assert both.centers.shape == (1, 7)
    for a, b in zip(places, both):  # the first selection is unchanged
        torch.testing.assert_close(b[:, :3], a, rtol=0, atol=0, equal_nan=True)
    extra = both.centers[0, 3:]
    kept = extra[extra >= 0]
    assert kept.numel() > 0 and not bool(torch.isin(kept, places.centers[0]).any())
    assert len(set(kept.tolist())) == kept.numel()
    gone = extra < 0
    assert torch.isnan(both.quaternions[0, 3:][gone]).all() and (both.scores[0, 3:][gone] == 0).all()


# ---- scene generator ----------------------------------------------------------------------------


def test_generated_scene_ground_truth_and_occlusion():
    from pointops import scenes
    from pointops.scenes import tabletop

    mesh = scenes.blob_mesh(seed=1, subdivisions=2)
    others = [scenes.blob_mesh(seed=2, subdivisions=2)]
    clear = tabletop.make_ppf_scene(4, mesh, others, occlusion=0.0, noise=0.0, width=160, height=120)
    hidden = tabletop.make_ppf_scene(4, mesh, others, occlusion=0.4, noise=0.0, width=160, height=120)
    again = tabletop.make_ppf_scene(4, mesh, others, occlusion=0.4, noise=0.0, width=160, height=120)
    assert torch.equal(hidden.points, again.points) and torch.equal(hidden.pose, again.pose)
    assert torch.equal(clear.pose, hidden.pose)  # the occluder moves nothing else
    assert clear.occlusion < 0.05 and abs(hidden.occlusion - 0.4) < 0.1
    assert 0 < hidden.visible < clear.visible
    # target points lie on the mesh under the true pose, and normals face the camera
    target = clear.points[clear.labels == 0].double()
    placed = mesh.transformed(clear.pose.double())
    samples, _, _ = scenes.sample_surface(placed, 8000, seed=0)
    assert torch.cdist(target, samples).amin(1).max() < 0.04
    assert ((clear.normals * clear.points).sum(1) < 0).all()
    assert (clear.labels == -1).any()  # the table


def test_generated_scene_instances_and_sensor():
    """Several instances (each with its pose and occluded share) and a depth sensor's errors:
    quantised depth, noise along z, returns lost at grazing angles and on dark surfaces."""
    from pointops import scenes
    from pointops.scenes import tabletop

    mesh = scenes.blob_mesh(seed=1, subdivisions=2)
    others = [scenes.blob_mesh(seed=2, subdivisions=2)]
    one = tabletop.make_ppf_scene(4, mesh, others, occlusion=0.4, noise=0.0, width=160, height=120)
    assert one.poses.shape == (1, 4, 4) and torch.equal(one.poses[0], one.pose)
    assert float(one.occlusions[0]) == one.occlusion
    three = tabletop.make_ppf_scene(
        4, mesh, others, noise=0.0, width=160, height=120, instances=3, camera_distance=(4.0, 4.5)
    )
    assert three.poses.shape == (3, 4, 4) and three.occlusions.shape == (3,)
    centres = three.poses[:, :3, 3].double()
    assert torch.pdist(centres).min() > 0.9  # instances stand apart
    for k in range(3):  # each instance's points lie on the mesh under its own pose
        own = three.points[three.labels == k].double()
        assert own.shape[0] > 20
        samples = scenes.sample_surface(mesh.transformed(three.poses[k].double()), 6000, seed=0).points
        assert torch.cdist(own, samples).amin(1).max() < 0.05
    sensor = tabletop.DepthSensor()
    real = tabletop.make_ppf_scene(4, mesh, others, occlusion=0.4, width=160, height=120, sensor=sensor)
    clean = tabletop.make_ppf_scene(4, mesh, others, occlusion=0.4, noise=0.0, width=160, height=120)
    assert torch.equal(real.pose, clean.pose) and real.occlusion == clean.occlusion
    assert 0 < real.points.shape[0] < clean.points.shape[0]  # returns lost
    # depth comes in disparity steps: focal * baseline / z is a multiple of 1 / subpixel pixel
    camera_focal = 160 / 2 / math.tan(math.radians(45.0) / 2)
    disparity = camera_focal * sensor.baseline / (real.points[:, 2].double() * sensor.unit) * sensor.subpixel
    assert (disparity - disparity.round()).abs().max() < 1e-2
    # no return survives where reflectivity x cos(incidence) is below the floor: grazing returns go first
    rays = real.points.double() / real.points.double().norm(dim=1, keepdim=True)
    incidence = (real.normals.double() * rays).sum(1).abs()
    assert incidence.min() >= sensor.min_signal - 1e-6
    assert float(sensor.return_probability(torch.tensor(0.05))) == 0.0
    assert float(sensor.return_probability(torch.tensor(0.2))) == 1.0
    assert sensor.depth_noise(torch.tensor(1.4)) > sensor.depth_noise(torch.tensor(0.6))
    with pytest.raises(ValueError, match="instances must be >= 1"):
        tabletop.make_ppf_scene(4, mesh, others, width=160, height=120, instances=0)


def test_sampling_a_square():
    from pointops import scenes
    from pointops.io import Mesh

    square = Mesh(
        torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=torch.float64),
        torch.tensor([[0, 1, 2], [0, 2, 3]]),
    )
    points, normals, _ = scenes.sample_surface(square, 500, seed=1)
    assert (points[:, 2] == 0).all() and (points >= 0).all() and (points <= 1).all()
    assert (normals == torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)).all()


def test_refinement_and_rescoring():
    """The pipeline's refinement (the geometry icp op on the sensor-facing model points) pulls a
    perturbed hypothesis back; re-scoring ranks the true pose above one in front of the surface
    the sensor saw."""
    from pointops import scenes
    from pointops.ppf.matcher import PPFMatcher, range_image, refine_poses
    from pointops.scenes import tabletop

    mesh = scenes.blob_mesh(seed=1, subdivisions=2)
    mp, mn, _ = scenes.sample_surface(mesh, 1500, seed=0)
    truth = torch.eye(4)
    truth[:3, :3] = tabletop.random_rotation(torch.Generator().manual_seed(4)).float()
    truth[:3, 3] = torch.tensor([0.1, -0.2, 3.0])
    sp, sn, _ = scenes.sample_surface(mesh, 3000, seed=1)
    sp, sn = (sp.float() @ truth[:3, :3].T + truth[:3, 3]), sn.float() @ truth[:3, :3].T
    seen = (sn * sp).sum(1) < 0
    sp, sn = sp[seen][None], sn[seen][None]
    nudge = torch.eye(4)
    nudge[:3, :3] = ppf.quaternion_to_matrix(torch.tensor([[1.0, 0.03, -0.02, 0.02]]) / 1.0009)[0]
    nudge[:3, 3] = torch.tensor([0.02, -0.01, 0.015])
    poses = torch.stack([truth @ nudge, truth, torch.full((4, 4), NAN)])[None]  # nudged about the model
    mp, mn = mp.float()[None], mn.float()[None]
    lengths, scene_lengths = torch.tensor([1500]), torch.tensor([sp.shape[1]])
    refined = refine_poses(mp, mn, lengths, sp, sn, scene_lengths, poses, 15, 0.05 / 3)
    assert rotation_error_deg(poses[0, 0], truth) > 4.0
    assert rotation_error_deg(refined[0, 0], truth) < 1.0 and (refined[0, 0, :3, 3] - truth[:3, 3]).norm() < 0.005
    assert torch.isnan(refined[0, 2]).all()
    shifted = truth.clone()
    shifted[:3, 3] += torch.tensor([0.0, 0.0, -0.3])  # in front of the surface the sensor saw
    image = range_image(sp, 0.03, scene_lengths)
    scores = PPFMatcher.verify(
        mp, mn, lengths, sp, sn, scene_lengths, torch.stack([truth, shifted])[None], torch.tensor([0.05]), image
    )
    assert float(scores[0, 0]) > 0.3 and float(scores[0, 1]) == 0.0


def test_demo_match_returns_what_a_picture_draws():
    from pointops.demo import demo_match

    demo = demo_match(seed=1, occlusion=0.2, distractors=2, model_samples=8000, preset="fast")
    assert len(demo.names) == 3 and demo.found_points.shape[0] == 3 and demo.found_points.shape[2] == 3
    assert demo.poses.shape == (3, 4, 4) and demo.scores.shape == (3,)
    assert demo.scene_points.shape[0] == demo.scene_labels.shape[0]
    assert (demo.found_points[0] - demo.true_points).norm(dim=1).mean() < 0.1
    if torch.cuda.is_available():  # the same matches on the GPU, up to the refinement's rounding
        cuda = demo_match(seed=1, occlusion=0.2, distractors=2, model_samples=8000, preset="fast", device="cuda")
        torch.testing.assert_close(cuda.poses, demo.poses, atol=1e-3, rtol=0)
