"""Slow, exact pure-PyTorch definitions of the PPF ops (csrc/ppf/).

Every float32 step of csrc/ppf/ppf_math.h is repeated here as one float32 torch op, in the same
order (torch rounds each elementwise op on its own, as the kernels do with fused operations
spelled out), so keys, alpha bins, votes and poses equal the kernels' bit for bit. The
``*_float64`` functions compute the same quantities with float64 and the library's acos / atan2:
the tests hold the float32 definition close to them.

Brute force throughout: a dict for the model description, one accumulator per reference for
voting, all pairs of poses for clustering. Small inputs only.
"""

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

F32 = torch.float32

# The atan polynomial of ppf_math.h (atan(t) = t P(t^2) on [0, 1]), the same float32 values.
ATAN_COEFFICIENTS = [
    float.fromhex(h)
    for h in (
        "0x1.0p+0",
        "-0x1.5554b4p-2",
        "0x1.997532p-3",
        "-0x1.22f66ap-3",
        "0x1.b46b62p-4",
        "-0x1.3496a0p-4",
        "0x1.609a00p-5",
        "-0x1.0acfb2p-6",
        "0x1.7ca3bep-9",
    )
]
PI = float.fromhex("0x1.921fb6p+1")
HALF_PI = float.fromhex("0x1.921fb6p+0")
TWO_PI = float.fromhex("0x1.921fb6p+2")


def _c(value: float) -> Tensor:
    return torch.tensor(value, dtype=F32)


# torch's float32 sqrt on the CPU is not always correctly rounded (one ulp off at times, seen with
# AVX2 builds), and the kernels' are; sqrt and division of float32 values in float64, rounded back
# to float32, are the correctly rounded float32 results (float64 has more than 2 * 24 + 2 bits).
def _sqrt(x: Tensor) -> Tensor:
    return x.double().sqrt().to(F32)


def _div(a: Tensor, b: Tensor) -> Tensor:
    return (a.double() / b.double()).to(F32)


def atan2(y: Tensor, x: Tensor) -> Tensor:
    """ppf_atan2: float32 atan2 by a fixed polynomial (0 for (0, 0))."""
    ax, ay = x.abs(), y.abs()
    steep = ay > ax
    big, small = torch.where(steep, ay, ax), torch.where(steep, ax, ay)
    t = _div(small, torch.where(big == 0, _c(1.0), big))
    s = t * t
    p = torch.full_like(s, ATAN_COEFFICIENTS[-1])
    for c in reversed(ATAN_COEFFICIENTS[:-1]):
        p = p * s + _c(c)
    r = t * p
    r = torch.where(steep, _c(HALF_PI) - r, r)
    r = torch.where(x < 0, _c(PI) - r, r)
    r = torch.where(y < 0, -r, r)
    return torch.where(big == 0, _c(0.0), r)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """(a.x b.x + a.y b.y) + a.z b.z over the last dim, each step rounded."""
    return (a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1]) + a[..., 2] * b[..., 2]


def cross(a: Tensor, b: Tensor) -> Tensor:
    return torch.stack(
        [
            a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
            a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
            a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
        ],
        -1,
    )


def angle_between(a: Tensor, b: Tensor) -> Tensor:
    c = cross(a, b)
    return atan2(_sqrt(dot(c, c)), dot(a, b))


def unit_normals(points: Tensor, normals: Tensor) -> Tuple[Tensor, Tensor]:
    """(unit normals, valid): n / |n|, valid where points and normals are finite and n != 0."""
    points, normals = points.to(F32), normals.to(F32)
    length = _sqrt(dot(normals, normals))
    valid = torch.isfinite(points).all(-1) & torch.isfinite(normals).all(-1) & (length > 0) & torch.isfinite(length)
    unit = _div(normals, torch.where(valid, length, _c(1.0))[..., None])
    return torch.where(valid[..., None], unit, _c(float("nan"))), valid


def basis(n: Tensor) -> Tuple[Tensor, Tensor]:
    """build_basis: (b1, b2) completing unit normals n (..., 3) to frames with rows (n, b1, b2)."""
    x, y, z = n[..., 0], n[..., 1], n[..., 2]
    sign = torch.where(z >= 0, _c(1.0), _c(-1.0))
    a = _div(_c(-1.0), sign + z)
    b = (x * y) * a
    b1 = torch.stack([_c(1.0) + ((sign * x) * x) * a, sign * b, (-sign) * x], -1)
    b2 = torch.stack([b, sign + (y * y) * a, -y], -1)
    return b1, b2


def pair_features(p1: Tensor, n1: Tensor, p2: Tensor, n2: Tensor) -> Tuple[Tensor, Tensor]:
    """Features (..., 4) and alpha (...) of pairs with unit normals (no validity handling)."""
    d = p2 - p1
    b1, b2 = basis(n1)
    features = torch.stack([_sqrt(dot(d, d)), angle_between(n1, d), angle_between(n2, d), angle_between(n1, n2)], -1)
    return features, atan2(dot(b2, d), dot(b1, d))


class Binning(NamedTuple):
    angle_bins: int
    distance_bins: int

    @property
    def feature_bins(self) -> int:
        return (self.angle_bins + 1) // 2

    @property
    def angle_step(self) -> float:
        """float32(2 pi / angle_bins), rounded from double as the host code does."""
        return float(torch.tensor(2.0 * math.pi / self.angle_bins, dtype=torch.float64).to(F32))

    @property
    def alpha_scale(self) -> float:
        """float32(angle_bins / (2 pi)), rounded from double as the host code does."""
        return float(torch.tensor(self.angle_bins / (2.0 * math.pi), dtype=torch.float64).to(F32))

    @property
    def key_count(self) -> int:
        return self.distance_bins * self.feature_bins**3


def dim_bins(value: Tensor, step: Tensor, bins: int, clamp_top: bool) -> Tuple[Tensor, Tensor]:
    """(bin, neighbour bin or -1) of one feature dimension; bin -1 when past the last bin and not
    clamped."""
    scaled = _div(value, step)
    lower = scaled.floor()
    inside = lower < bins
    bin_ = torch.where(inside, lower, _c(bins - 1 if clamp_top else -1)).to(torch.int64)
    fraction = scaled - lower
    side = torch.where(fraction < 0.5, lower - _c(1.0), lower + _c(1.0))
    side_ok = (side >= 0) & (side < bins)
    side_i = torch.where(side_ok, side, _c(0.0)).to(torch.int64)
    neighbour = torch.where(side_ok & (side_i != bin_), side_i, -1)
    if not clamp_top:
        neighbour = torch.where(inside, neighbour, -1)
    return bin_, neighbour


def feature_bins(features: Tensor, distance_step: Tensor, binning: Binning) -> Tuple[Tensor, Tensor]:
    """Bins (..., 4) int64 (distance bin -1 when too far) and neighbour bins (..., 4)."""
    angle_step = _c(binning.angle_step)
    parts = [dim_bins(features[..., 0], distance_step, binning.distance_bins, False)]
    parts += [dim_bins(features[..., q], angle_step, binning.feature_bins, True) for q in (1, 2, 3)]
    return torch.stack([p[0] for p in parts], -1), torch.stack([p[1] for p in parts], -1)


def pack_keys(bins: Tensor, feature_bins: int) -> Tensor:
    fb = feature_bins
    return ((bins[..., 0] * fb + bins[..., 1]) * fb + bins[..., 2]) * fb + bins[..., 3]


def spread_keys(bins: Tensor, neighbours: Tensor, feature_bins: int) -> Tensor:
    """(..., 16) keys of neighbour-bin voting, lookup mask order (ppf_math.h spread_key); -1 where
    a requested neighbour does not exist."""
    out = []
    for mask in range(16):
        chosen, ok = [], torch.ones(bins.shape[:-1], dtype=torch.bool)
        for q in range(4):
            if mask & (1 << q):
                chosen.append(neighbours[..., q])
                ok = ok & (neighbours[..., q] >= 0)
            else:
                chosen.append(bins[..., q])
        key = pack_keys(torch.stack(chosen, -1), feature_bins)
        out.append(torch.where(ok, key, -1))
    return torch.stack(out, -1)


def ppf_features(
    points: Tensor,
    normals: Tensor,
    pairs: Tensor,
    distance_step: Tensor,
    lengths: Optional[Tensor],
    angle_bins: int,
    distance_bins: int,
) -> Tuple[Tensor, Tensor, Tensor]:
    """The op ppf_features (csrc/ppf/features.h), elementwise in float32."""
    batch, n = points.shape[:2]
    binning = Binning(angle_bins, distance_bins)
    unit, valid = unit_normals(points, normals)
    points = points.to(F32)
    length = torch.full((batch,), n) if lengths is None else lengths.clamp(0, n)
    i, j = pairs[..., 0], pairs[..., 1]
    ok = (i >= 0) & (i < length[:, None]) & (j >= 0) & (j < length[:, None])
    ic, jc = i.clamp(0, max(n - 1, 0)), j.clamp(0, max(n - 1, 0))

    def take(t: Tensor, idx: Tensor) -> Tensor:
        return torch.gather(t, 1, idx[..., None].expand(-1, -1, t.shape[2]))

    if n == 0:
        shape = pairs.shape[:2]
        return (torch.full(shape + (4,), float("nan")), torch.full(shape, -1), torch.full(shape, float("nan")))
    ok = ok & torch.gather(valid, 1, ic) & torch.gather(valid, 1, jc)
    features, alpha = pair_features(take(points, ic), take(unit, ic), take(points, jc), take(unit, jc))
    ok = ok & (features[..., 0] > 0) & torch.isfinite(features[..., 0])
    features = torch.where(ok[..., None], features, _c(float("nan")))
    alpha = torch.where(ok, alpha, _c(float("nan")))
    step = distance_step.to(F32)
    step_ok = (step > 0) & torch.isfinite(step)
    bins, _ = feature_bins(features, torch.where(step_ok, step, _c(1.0))[:, None], binning)
    keys = torch.where(ok & step_ok[:, None] & (bins[..., 0] >= 0), pack_keys(bins, binning.feature_bins), -1)
    return features, keys, alpha


def ppf_features_float64(points: Tensor, normals: Tensor, pairs: Tensor) -> Tuple[Tensor, Tensor]:
    """(features (B, P, 4), alpha (B, P)) in float64 with acos / atan2: the definition the float32
    arithmetic approximates (no validity handling)."""
    p, n = points.double(), normals.double()
    n = n / n.norm(dim=-1, keepdim=True)
    take = lambda t, idx: torch.gather(t, 1, idx[..., None].expand(-1, -1, 3))  # noqa: E731  (a one-line helper of this oracle)
    p1, n1, p2, n2 = take(p, pairs[..., 0]), take(n, pairs[..., 0]), take(p, pairs[..., 1]), take(n, pairs[..., 1])
    d = p2 - p1
    dist = d.norm(dim=-1)
    u = d / dist[..., None]
    angle = lambda a, b: (a * b).sum(-1).clamp(-1, 1).acos()  # noqa: E731  (a one-line helper of this oracle)
    features = torch.stack([dist, angle(n1, u), angle(n2, u), angle(n1, n2)], -1)
    b1, b2 = basis(n1.float())
    alpha = torch.atan2((b2.double() * d).sum(-1), (b1.double() * d).sum(-1))
    return features, alpha


# ---- model description ---------------------------------------------------------------------------


def model_pairs(
    points: Tensor, normals: Tensor, length: int, distance_step: float, binning: Binning
) -> Tuple[Dict[int, List[Tuple[int, int]]], Tensor, Tensor]:
    """One model: {key: [(i, j), ...] in (i, j) order}, the unit normals and the alpha (N, N) of
    every pair (float32, exact)."""
    points, normals = points[:length].to(F32), normals[:length]
    unit, valid = unit_normals(points, normals)
    i, j = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    features, alpha = pair_features(points[i], unit[i], points[j], unit[j])
    bins, _ = feature_bins(features, _c(distance_step), binning)
    step_ok = distance_step > 0 and math.isfinite(distance_step)
    ok = (i != j) & valid[i] & valid[j] & (features[..., 0] > 0) & (bins[..., 0] >= 0) & step_ok
    keys = pack_keys(bins, binning.feature_bins)
    table: Dict[int, List[Tuple[int, int]]] = {}
    for a, b in zip(*torch.nonzero(ok, as_tuple=True)):
        table.setdefault(int(keys[a, b]), []).append((int(a), int(b)))
    return table, unit, alpha


def bounding_diagonal(points: Tensor) -> Tensor:
    """ppf_model's diameter of one model (N, 3): the float32 bounding-box diagonal of its finite
    rows, sqrt((ex ex + ey ey) + ez ez) correctly rounded; 0 when there is none."""
    p = points.to(F32)
    p = p[torch.isfinite(p).all(1)]
    if p.shape[0] == 0:
        return _c(0.0)
    e = p.amax(0) - p.amin(0)
    return _sqrt((e[0] * e[0] + e[1] * e[1]) + e[2] * e[2])


def ppf_model(
    points: Tensor,
    normals: Tensor,
    lengths: Optional[Tensor],
    diameter: Optional[Tensor],
    tau_d: float,
    angle_bins: int,
    distance_bins: int,
    max_pairs_per_key: int = 0,
) -> Tuple[Tensor, ...]:
    """The op ppf_model (csrc/ppf/model.h), built from a Python dict per model; a key with more
    than ``max_pairs_per_key`` pairs (when > 0) keeps its pairs at positions
    floor(t * count / max_pairs_per_key), t = 0, 1, ..."""
    batch, n = points.shape[:2]
    binning = Binning(angle_bins, distance_bins)
    pairs, keys = n * max(n - 1, 0), binning.key_count
    unique = min(pairs, keys)
    out_normals = torch.full((batch, n, 3), float("nan"))
    key_offsets = torch.zeros(batch, keys + 1, dtype=torch.int64)
    unique_keys = torch.full((batch, unique), -1, dtype=torch.int64)
    starts = torch.zeros(batch, unique, dtype=torch.int64)
    counts = torch.zeros(batch, unique, dtype=torch.int64)
    num_unique = torch.zeros(batch, dtype=torch.int64)
    pair_ref = torch.full((batch, pairs), -1, dtype=torch.int32)
    pair_partner = torch.full((batch, pairs), -1, dtype=torch.int32)
    pair_alpha = torch.full((batch, pairs), float("nan"))
    diameters = torch.zeros(batch)
    for b in range(batch):
        length = n if lengths is None else int(lengths[b].clamp(0, n))
        diameters[b] = diameter[b].to(F32) if diameter is not None else bounding_diagonal(points[b, :length])
    steps = _c(tau_d) * diameters
    for b in range(batch):
        length = n if lengths is None else int(lengths[b].clamp(0, n))
        table, unit, alpha = model_pairs(points[b], normals[b], length, float(steps[b]), binning)
        out_normals[b, :length] = unit
        row = 0
        for r, key in enumerate(sorted(table)):
            members = table[key]
            if 0 < max_pairs_per_key < len(members):
                members = [members[t * len(members) // max_pairs_per_key] for t in range(max_pairs_per_key)]
                table[key] = members
            unique_keys[b, r], starts[b, r], counts[b, r] = key, row, len(members)
            for i, j in members:
                pair_ref[b, row], pair_partner[b, row], pair_alpha[b, row] = i, j, alpha[i, j]
                row += 1
        num_unique[b] = len(table)
        sizes = torch.zeros(keys, dtype=torch.int64)
        for key, members in table.items():
            sizes[key] = len(members)
        key_offsets[b, 1:] = sizes.cumsum(0)
    return (
        out_normals,
        diameters,
        steps,
        key_offsets,
        unique_keys,
        starts,
        counts,
        num_unique,
        pair_ref,
        pair_partner,
        pair_alpha,
    )


# ---- voting --------------------------------------------------------------------------------------


def alpha_bins(scene_alpha: Tensor, model_alpha: Tensor, binning: Binning) -> Tensor:
    """ppf_math.h alpha_bin: (alpha_scene - alpha_model) wrapped to [0, 2 pi), times
    alpha_scale, floored."""
    alpha = scene_alpha - model_alpha
    alpha = torch.where(alpha < 0, alpha + _c(TWO_PI), alpha)
    bins = (alpha * _c(binning.alpha_scale)).floor().to(torch.int64)
    return torch.where(bins >= binning.angle_bins, bins - binning.angle_bins, bins)


def alpha_table(angle_bins: int) -> Tuple[List[float], List[float]]:
    """float32 cos and sin of the bin centres, from double, as the host computes them."""
    angles = [(k + 0.5) * 2.0 * math.pi / angle_bins for k in range(angle_bins)]
    to32 = lambda v: float(torch.tensor(v, dtype=torch.float64).to(F32))  # noqa: E731  (a one-line helper of this oracle)
    return [to32(math.cos(a)) for a in angles], [to32(math.sin(a)) for a in angles]


def vote_pose(
    scene_p: Tensor, scene_n: Tensor, model_p: Tensor, model_n: Tensor, cos_a: float, sin_a: float
) -> Tuple[Tensor, Tensor]:
    """ppf_math.h vote_pose for one vote: (quaternion (4,), translation (3,)) float32."""
    sb1, sb2 = basis(scene_n)
    mb1, mb2 = basis(model_n)
    c, s = _c(cos_a), _c(sin_a)
    row0 = model_n
    row1 = c * mb1 - s * mb2
    row2 = s * mb1 + c * mb2
    r = [[(scene_n[a] * row0[b] + sb1[a] * row1[b]) + sb2[a] * row2[b] for b in range(3)] for a in range(3)]
    t = torch.stack(
        [scene_p[a] - ((r[a][0] * model_p[0] + r[a][1] * model_p[1]) + r[a][2] * model_p[2]) for a in range(3)]
    )
    one, two, quarter = _c(1.0), _c(2.0), _c(0.25)
    trace = (r[0][0] + r[1][1]) + r[2][2]
    if trace > 0:
        q = _sqrt(trace + one) * two
        w, x, y, z = quarter * q, _div(r[2][1] - r[1][2], q), _div(r[0][2] - r[2][0], q), _div(r[1][0] - r[0][1], q)
    elif r[0][0] > r[1][1] and r[0][0] > r[2][2]:
        q = _sqrt(((one + r[0][0]) - r[1][1]) - r[2][2]) * two
        w, x, y, z = _div(r[2][1] - r[1][2], q), quarter * q, _div(r[0][1] + r[1][0], q), _div(r[0][2] + r[2][0], q)
    elif r[1][1] > r[2][2]:
        q = _sqrt(((one + r[1][1]) - r[0][0]) - r[2][2]) * two
        w, x, y, z = _div(r[0][2] - r[2][0], q), _div(r[0][1] + r[1][0], q), quarter * q, _div(r[1][2] + r[2][1], q)
    else:
        q = _sqrt(((one + r[2][2]) - r[0][0]) - r[1][1]) * two
        w, x, y, z = _div(r[1][0] - r[0][1], q), _div(r[0][2] + r[2][0], q), _div(r[1][2] + r[2][1], q), quarter * q
    norm = _sqrt(((w * w + x * x) + y * y) + z * z)
    scale = _div(torch.where(w < 0, _c(-1.0), _c(1.0)), norm)
    return torch.stack([w * scale, x * scale, y * scale, z * scale]), t


def reference_accumulator(
    scene_points: Tensor,
    scene_unit: Tensor,
    scene_valid: Tensor,
    ref: int,
    model: Tuple[Tensor, Tensor, Tensor],
    nm: int,
    distance_step: float,
    diameter: float,
    binning: Binning,
    spread: bool,
) -> Tensor:
    """The (nm * angle_bins,) int64 vote counts of one reference against one model, brute force.
    ``model`` is (key_offsets (K + 1,), pair_ref (P,), pair_alpha (P,)) of one model."""
    key_offsets, pair_ref, pair_alpha = model
    cells = torch.zeros(nm * binning.angle_bins, dtype=torch.int64)
    step, diam = _c(distance_step), _c(diameter)
    if (
        not bool(scene_valid[ref])
        or not (distance_step > 0 and math.isfinite(distance_step))
        or not math.isfinite(diameter)
        or pair_ref.numel() == 0
    ):
        return cells
    n = scene_points.shape[0]
    d = scene_points - scene_points[ref]
    square = dot(d, d)
    partner = scene_valid & (torch.arange(n) != ref) & (square > 0) & (square <= diam * diam)
    idx = torch.nonzero(partner)[:, 0]
    if idx.numel() == 0:
        return cells
    ref_n = scene_unit[ref].expand(idx.numel(), 3)
    features, scene_alpha = pair_features(
        scene_points[ref].expand(idx.numel(), 3), ref_n, scene_points[idx], scene_unit[idx]
    )
    bins, neighbours = feature_bins(features, step, binning)
    ok = bins[:, 0] >= 0
    keys = (
        spread_keys(bins, neighbours, binning.feature_bins)
        if spread
        else pack_keys(bins, binning.feature_bins)[:, None]
    )
    keys = torch.where(ok[:, None], keys, -1)
    for lookup in range(keys.shape[1]):
        key = keys[:, lookup]
        use = key >= 0
        if not use.any():
            continue
        lo, hi = key_offsets[key[use]], key_offsets[key[use] + 1]
        sizes = hi - lo
        ends = sizes.cumsum(0)
        flat = torch.arange(int(ends[-1]))
        owner = torch.searchsorted(ends, flat, right=True)  # the lookup each flat row belongs to
        rows = lo[owner] + flat - (ends - sizes)[owner]
        alphas = scene_alpha[use][owner]
        cell = pair_ref[rows].long() * binning.angle_bins + alpha_bins(alphas, pair_alpha[rows], binning)
        cells += torch.bincount(cell, minlength=cells.numel())
    return cells


def ppf_vote(
    scene_points: Tensor,
    scene_normals: Tensor,
    scene_lengths: Optional[Tensor],
    model_points: Tensor,
    model_normals: Tensor,
    key_offsets: Tensor,
    pair_ref: Tensor,
    pair_alpha: Tensor,
    distance_step: Tensor,
    diameter: Tensor,
    angle_bins: int,
    distance_bins: int,
    stride: int,
    k: int,
    spread: bool = False,
) -> Tuple[Tensor, ...]:
    """The op ppf_vote (csrc/ppf/vote.h), one accumulator per reference."""
    scenes, n = scene_points.shape[:2]
    models, nm = model_points.shape[:2]
    binning = Binning(angle_bins, distance_bins)
    refs = (n + stride - 1) // stride
    shape = (scenes, models, refs, k)
    votes = torch.zeros(shape, dtype=torch.int64)
    model_index = torch.full(shape, -1, dtype=torch.int64)
    alpha = torch.full(shape, -1, dtype=torch.int64)
    quaternions = torch.full(shape + (4,), float("nan"))
    translations = torch.full(shape + (3,), float("nan"))
    cos_t, sin_t = alpha_table(angle_bins)
    for s in range(scenes):
        length = n if scene_lengths is None else int(scene_lengths[s].clamp(0, n))
        points = scene_points[s, :length].to(F32)
        unit, valid = unit_normals(points, scene_normals[s, :length])
        for m in range(models):
            table = (key_offsets[m], pair_ref[m], pair_alpha[m])
            for r in range(refs):
                ref = r * stride
                if ref >= length:
                    continue
                acc = reference_accumulator(
                    points,
                    unit,
                    valid,
                    ref,
                    table,
                    nm,
                    float(distance_step[m].float()),
                    float(diameter[m].float()),
                    binning,
                    spread,
                )
                hit = torch.nonzero(acc > 0)[:, 0]
                order = sorted(hit.tolist(), key=lambda c: (-int(acc[c]), c))[:k]
                for q, cell in enumerate(order):
                    i, b = divmod(cell, angle_bins)
                    votes[s, m, r, q], model_index[s, m, r, q], alpha[s, m, r, q] = int(acc[cell]), i, b
                    quaternions[s, m, r, q], translations[s, m, r, q] = vote_pose(
                        points[ref], unit[ref], model_points[m, i], model_normals[m, i], cos_t[b], sin_t[b]
                    )
    return votes, model_index, alpha, quaternions, translations


def votes_cast(
    scene_points: Tensor,
    scene_normals: Tensor,
    scene_lengths: Optional[Tensor],
    key_offsets: Tensor,
    distance_step: Tensor,
    diameter: Tensor,
    angle_bins: int,
    distance_bins: int,
    stride: int,
    spread: bool = False,
    chunk: int = 64,
) -> Tensor:
    """(S, M, R) int64: the votes each reference of :func:`ppf_vote` casts against each model (the
    pair-list rows its scene pairs' keys select, every lookup counted), the same set of pairs and
    keys as the op; malformed rows, which the op skips, count here. A device-independent measure of
    the vote's work: the dense backend does one accumulator increment per vote. Vectorized over
    ``chunk`` references at a time, so whole frames take seconds, not hours."""
    scenes, n = scene_points.shape[:2]
    models = key_offsets.shape[0]
    binning = Binning(angle_bins, distance_bins)
    refs = (n + stride - 1) // stride
    out = torch.zeros(scenes, models, refs, dtype=torch.int64)
    sizes = (key_offsets[:, 1:] - key_offsets[:, :-1]).cpu()
    for s in range(scenes):
        length = n if scene_lengths is None else int(scene_lengths[s].clamp(0, n))
        points = scene_points[s, :length].cpu().to(F32)
        unit, valid = unit_normals(points, scene_normals[s, :length].cpu())
        ref_rows = torch.arange(0, length, stride)
        ref_rows = ref_rows[valid[ref_rows]]
        partners = torch.nonzero(valid)[:, 0]
        groups: Dict[Tuple[float, float], List[int]] = {}  # models of one step and diameter share the keys
        for m in range(models):
            groups.setdefault((float(distance_step[m].float()), float(diameter[m].float())), []).append(m)
        for (step_value, diam_value), members in groups.items():
            if not (step_value > 0 and math.isfinite(step_value) and math.isfinite(diam_value)):
                continue
            step, diam = _c(step_value), _c(diam_value)
            for first in range(0, ref_rows.numel(), chunk):
                rows = ref_rows[first : first + chunk]
                d = points[partners][None] - points[rows][:, None]
                square = dot(d, d)
                near = (square > 0) & (square <= diam * diam) & (partners[None] != rows[:, None])
                r_idx, p_idx = torch.nonzero(near, as_tuple=True)
                if r_idx.numel() == 0:
                    continue
                features, _ = pair_features(
                    points[rows[r_idx]], unit[rows[r_idx]], points[partners[p_idx]], unit[partners[p_idx]]
                )
                bins, neighbours = feature_bins(features, step, binning)
                ok = bins[:, 0] >= 0
                keys = (
                    spread_keys(bins, neighbours, binning.feature_bins)
                    if spread
                    else pack_keys(bins, binning.feature_bins)[:, None]
                )
                keys = torch.where(ok[:, None], keys, -1)
                for m in members:
                    count = torch.where(keys >= 0, sizes[m][keys.clamp(min=0)], 0).sum(1)
                    per_ref = torch.zeros(rows.numel(), dtype=torch.int64).index_add_(0, r_idx, count)
                    out[s, m, rows // stride] = per_ref
    return out


# ---- pose clustering -------------------------------------------------------------------------------


def pose_cluster(
    quaternions: Tensor,
    translations: Tensor,
    votes: Tensor,
    lengths: Optional[Tensor],
    distance_threshold: Tensor,
    angle_threshold: float,
    suppression_distance: Tensor,
    k: int,
    suppression_angle: float = math.pi,
) -> Tuple[Tensor, ...]:
    """The op pose_cluster (csrc/ppf/pose_cluster.h): every pair of poses compared (O(M^2))."""
    batch, poses = quaternions.shape[:2]
    out_q = torch.full((batch, k, 4), float("nan"))
    out_t = torch.full((batch, k, 3), float("nan"))
    scores_out = torch.zeros(batch, k, dtype=torch.int64)
    members_out = torch.zeros(batch, k, dtype=torch.int64)
    centers = torch.full((batch, k), -1, dtype=torch.int64)
    cos_half = float(torch.tensor(math.cos(angle_threshold / 2.0), dtype=torch.float64).to(F32))
    cos_suppress = (
        -1.0
        if suppression_angle >= math.pi
        else float(torch.tensor(math.cos(suppression_angle / 2.0), dtype=torch.float64).to(F32))
    )
    for b in range(batch):
        length = poses if lengths is None else int(lengths[b].clamp(0, poses))
        q, t, v = quaternions[b].to(F32), translations[b].to(F32), votes[b]
        thr, sup = distance_threshold[b].to(F32), suppression_distance[b].to(F32)
        norm = _sqrt(((q[:, 0] * q[:, 0] + q[:, 1] * q[:, 1]) + q[:, 2] * q[:, 2]) + q[:, 3] * q[:, 3])
        unit = _div(q, torch.where(norm > 0, norm, _c(1.0))[:, None])
        cell_f = _div(t, thr).floor()
        valid = (torch.arange(poses) < length) & (v > 0) & bool((thr > 0) & torch.isfinite(thr))
        valid = valid & torch.isfinite(t).all(1) & torch.isfinite(q).all(1) & (norm > 0) & torch.isfinite(norm)
        valid = valid & ((cell_f >= -(2.0**16)) & (cell_f < 2.0**16)).all(1)
        cell = torch.where(valid[:, None], cell_f, _c(0.0)).to(torch.int64)
        d = t[None, :, :] - t[:, None, :]
        near = dot(d, d) <= thr * thr
        c = (
            (unit[:, None, 0] * unit[None, :, 0] + unit[:, None, 1] * unit[None, :, 1])
            + unit[:, None, 2] * unit[None, :, 2]
        ) + unit[:, None, 3] * unit[None, :, 3]
        member = valid[:, None] & valid[None, :] & ((cell[None] - cell[:, None]).abs().amax(-1) <= 1) & near
        member = member & (c.abs() >= cos_half)
        scores = (member.long() * v[None, :]).sum(1)
        removed = torch.zeros(poses, dtype=torch.bool)
        for round_ in range(k):
            open_ = ~removed & (scores > 0)
            if not open_.any():
                break
            best_score = int(scores[open_].max())
            best = int(torch.nonzero(open_ & (scores == best_score))[0, 0])
            gap = t - t[best]
            removed = removed | ((dot(gap, gap) <= sup * sup) & (c[best].abs() >= cos_suppress))
            removed[best] = True
            js = torch.nonzero(member[best])[:, 0].tolist()
            js.sort(key=lambda j: (tuple((cell[j] - cell[best]).tolist()), j))
            w_sum, q_sum, t_sum, score = 0.0, [0.0] * 4, [0.0] * 3, 0
            for j in js:
                w = float(v[j])
                sw = -w if float(c[best, j]) < 0 else w
                q_sum = [q_sum[a] + sw * float(unit[j, a]) for a in range(4)]
                t_sum = [t_sum[a] + w * float(t[j, a]) for a in range(3)]
                w_sum += w
                score += int(v[j])
            qn = math.sqrt(((q_sum[0] * q_sum[0] + q_sum[1] * q_sum[1]) + q_sum[2] * q_sum[2]) + q_sum[3] * q_sum[3])
            sign = -1.0 if q_sum[0] < 0 else 1.0
            out_q[b, round_] = torch.tensor([(x * sign) / qn for x in q_sum], dtype=torch.float64).to(F32)
            out_t[b, round_] = torch.tensor([x / w_sum for x in t_sum], dtype=torch.float64).to(F32)
            scores_out[b, round_], members_out[b, round_], centers[b, round_] = score, len(js), best
    return out_q, out_t, scores_out, members_out, centers
