"""Point pair feature (PPF) registration ops (wraps csrc/ppf/): features, the model description,
voting and pose clustering, with their fake kernels.

A point pair feature (Drost et al., CVPR 2010) of two oriented points is
``(|d|, angle(n1, d), angle(n2, d), angle(n1, n2))``, ``d = p2 - p1``. Binned by a distance step
(``tau_d`` times the model diameter) and an angle step (``2 pi / angle_bins``, 12 degrees by
default), it becomes an integer key: ``((d_bin * F + a1) * F + a2) * F + a3`` with
``F = ceil(angle_bins / 2)`` bins per angle, a mixed-radix packing, so distinct bins never share a
key. The model description (:func:`ppf_model`) is the parallel hash array of every ordered pair
of model points by key; :func:`ppf_vote` looks scene pairs up in it and votes for (model point,
rotation about the normal) per scene reference point; :func:`pose_cluster` groups the resulting
poses. ``pointops.PPFMatcher`` (:mod:`pointops.ppf.matcher`) chains them with downsampling, normals and ICP.

Every float step that decides a key, a vote or a pose rounds alone and uses no library
transcendental (csrc/ppf/ppf_math.h), so CPU and CUDA agree bit for bit and
``pointops.reference.ppf`` reproduces them in plain torch.
"""

import math
from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from .._checks import (
    check_dim,
    check_dtype,
    check_floating,
    check_optional_batch_vector,
    check_output_fits,
    check_same_device,
    check_shape,
    check_tensor,
    require,
)
from ..clouds import bounding_box

# ---- fake kernels: the checks of csrc/ppf/ppf_args.h and the ops' check_*_args ----------------------


def _check_oriented_clouds(
    points: Tensor,
    normals: Tensor,
    lengths: Optional[Tensor],
    p: str = "points",
    n: str = "normals",
    lengths_name: str = "lengths",
) -> None:
    check_dim(points, p, 3, "(B, N, 3)")
    check_floating(points, p)
    torch._check(points.shape[2] == 3, lambda: f"{p} must have shape (B, N, 3), got shape {tuple(points.shape)}")
    check_floating(normals, n)
    check_same_device(normals, n, points, p)
    torch._check(
        normals.shape == points.shape,
        lambda: f"{n} must have the shape of {p} {tuple(points.shape)}, got {tuple(normals.shape)}",
    )
    check_optional_batch_vector(lengths, lengths_name, points.shape[0], points, p)


def _check_cloud_values(t: Tensor, name: str, batch: int, ref: Tensor, ref_name: str = "points") -> None:
    check_floating(t, name)
    check_shape(t, name, (batch,))
    check_same_device(t, name, ref, ref_name)


def _feature_bins(angle_bins: int) -> int:
    torch._check(1 <= angle_bins <= 360, lambda: f"angle_bins must be in [1, 360], got {angle_bins}")
    return (angle_bins + 1) // 2


def key_count(angle_bins: int, distance_bins: int) -> int:
    """K, the number of keys: distance_bins * ceil(angle_bins / 2)^3."""
    return distance_bins * _feature_bins(angle_bins) ** 3


@torch.library.register_fake("pointops::ppf_features")
def _ppf_features_fake(points, normals, pairs, lengths, distance_step, angle_bins, distance_bins):
    _check_oriented_clouds(points, normals, lengths)
    check_dim(pairs, "pairs", 3, "(B, P, 2)")
    check_dtype(pairs, "pairs", torch.int64)
    check_same_device(pairs, "pairs", points)
    torch._check(
        pairs.shape[0] == points.shape[0] and pairs.shape[2] == 2,
        lambda: f"pairs must have shape (B, P, 2) with B = {points.shape[0]}, got shape {tuple(pairs.shape)}",
    )
    _check_cloud_values(distance_step, "distance_step", points.shape[0], points)
    _feature_bins(angle_bins)
    batch, count = pairs.shape[:2]
    return (
        points.new_empty((batch, count, 4), dtype=torch.float32),
        points.new_empty((batch, count), dtype=torch.int64),
        points.new_empty((batch, count), dtype=torch.float32),
    )


@torch.library.register_fake("pointops::ppf_model")
def _ppf_model_fake(points, normals, lengths, diameter, tau_d, angle_bins, distance_bins, max_pairs_per_key=0):
    _check_oriented_clouds(points, normals, lengths)
    torch._check(
        points.shape[1] <= 46340,
        lambda: f"ppf_model: a model may have at most 46340 points (its ordered pairs index int32), got N = "
        f"{points.shape[1]}",
    )
    if isinstance(points.shape[1], int):
        check_output_fits(
            points.device,
            f"N = {points.shape[1]} model points (N (N - 1) pairs)",
            (points.shape[0], points.shape[1] * max(points.shape[1] - 1, 0)),
            12,
        )
    if diameter is not None:
        _check_cloud_values(diameter, "diameter", points.shape[0], points)
    torch._check(0.0 < tau_d <= 1.0, lambda: f"tau_d must be in (0, 1], got {tau_d}")
    torch._check(max_pairs_per_key >= 0, lambda: f"max_pairs_per_key must be >= 0 (0: no cap), got {max_pairs_per_key}")
    batch, n = points.shape[:2]
    pairs = n * (n - 1) if n > 0 else 0
    keys = key_count(angle_bins, distance_bins)
    unique = min(pairs, keys)
    f32, i64, i32 = torch.float32, torch.int64, torch.int32
    return (
        points.new_empty((batch, n, 3), dtype=f32),
        points.new_empty((batch,), dtype=f32),
        points.new_empty((batch,), dtype=f32),
        points.new_empty((batch, keys + 1), dtype=i64),
        points.new_empty((batch, unique), dtype=i64),
        points.new_empty((batch, unique), dtype=i64),
        points.new_empty((batch, unique), dtype=i64),
        points.new_empty((batch,), dtype=i64),
        points.new_empty((batch, pairs), dtype=i32),
        points.new_empty((batch, pairs), dtype=i32),
        points.new_empty((batch, pairs), dtype=f32),
    )


# ---- features ------------------------------------------------------------------------------------


def ppf_features(
    points: Tensor,
    normals: Tensor,
    pairs: Tensor,
    distance_step: Tensor,
    lengths: Optional[Tensor] = None,
    angle_bins: int = 30,
    distance_bins: int = 21,
):
    """Point pair features, keys and alpha of given pairs.

    Args:
        points, normals: (B, N, 3) floating (computed in float32); normals need not be unit.
        pairs: (B, P, 2) int64 (first, second) point indices of cloud b.
        distance_step: (B,) floating distance bin width per cloud.
        lengths: (B,) int64, cloud b is rows [0, lengths[b]); None = all N.
        angle_bins: alpha bins over 2 pi; feature angles get ceil(angle_bins / 2) bins over pi.
        distance_bins: pairs with a distance bin >= this get key -1.

    Returns:
        (features (B, P, 4) float32: |d| and three angles in radians, NaN rows where the pair has
        no feature (an index outside the cloud, a non-finite coordinate or normal, a zero normal,
        coincident points); keys (B, P) int64, -1 where there is none; alpha (B, P) float32, the
        angle of d about n1 in the first point's frame, NaN with the features).
    """
    check_tensor(points, "points", "(B, N, 3)")
    check_tensor(normals, "normals", "(B, N, 3)")
    check_tensor(distance_step, "distance_step", "(B,)")
    _check_positive_values(distance_step, "distance_step")
    return torch.ops.pointops.ppf_features(points, normals, pairs, lengths, distance_step, angle_bins, distance_bins)


def _check_positive_values(t: Tensor, name: str, zero: bool = False) -> None:
    """Per-cloud lengths (a diameter, a distance step, a suppression radius): finite and > 0 (>= 0
    with ``zero``), or every distance bin is inf or NaN (a device-side assert on CUDA, where nothing
    else syncs)."""
    if t.is_floating_point():
        bad = ~(torch.isfinite(t) & ((t >= 0) if zero else (t > 0)))
        require(~bad.any(), name + " must be finite and " + (">= 0" if zero else "> 0"), False, name, t, bad)


def decode_keys(keys: Tensor, angle_bins: int = 30) -> Tensor:
    """The bins (..., 4) int64 (distance, angle(n1, d), angle(n2, d), angle(n1, n2)) of packed
    keys; -1 rows for key -1."""
    fb = (angle_bins + 1) // 2
    k = keys.clamp(min=0)
    bins = torch.stack([k // fb**3, (k // fb**2) % fb, (k // fb) % fb, k % fb], -1)
    return torch.where((keys >= 0)[..., None], bins, -1)


# ---- model description ----------------------------------------------------------------------------


class PPFModel(NamedTuple):
    """The description of B models (padded to N points): the parallel hash array of every ordered
    pair of model points by key. Build it with :func:`ppf_model`; ``save`` / ``load`` round-trip
    it through ``torch.save``; every field is a tensor or a number, so TorchScript functions take it
    as a NamedTuple. P = N (N - 1) and K = :func:`key_count` (angle_bins, distance_bins)."""

    points: Tensor  # (B, N, 3) float32 model points
    normals: Tensor  # (B, N, 3) float32 unit normals; NaN rows for points that take no part
    lengths: Tensor  # (B,) int64
    diameter: Tensor  # (B,) float32 model diameter (bounding-box diagonal unless given)
    distance_step: Tensor  # (B,) float32 tau_d * diameter
    key_offsets: Tensor  # (B, K + 1) int64 CSR: key k's pairs are rows [key_offsets[b, k], key_offsets[b, k + 1])
    unique_keys: Tensor  # (B, min(P, K)) int64 distinct keys ascending, -1 past num_unique
    starts: Tensor  # (B, min(P, K)) int64 first pair row of each distinct key
    counts: Tensor  # (B, min(P, K)) int64 pairs of each distinct key
    num_unique: Tensor  # (B,) int64
    pair_ref: Tensor  # (B, P) int32 reference point of each pair, sorted by key; -1 past the pairs
    pair_partner: Tensor  # (B, P) int32 second point of each pair
    pair_alpha: Tensor  # (B, P) float32 alpha of each pair in the reference point's frame
    angle_bins: int
    distance_bins: int
    tau_d: float

    @property
    def num_pairs(self) -> Tensor:
        """(B,) int64 pairs of each model."""
        return self.key_offsets[:, -1]

    def to(self, device: Union[str, torch.device]) -> "PPFModel":
        return PPFModel(*[f.to(device) if isinstance(f, Tensor) else f for f in self])

    def save(self, path) -> None:
        """torch.save of the fields as a dict of tensors and numbers (load with PPFModel.load)."""
        torch.save({name: getattr(self, name) for name in self._fields}, path)

    @staticmethod
    def load(path, map_location=None) -> "PPFModel":
        fields = torch.load(path, map_location=map_location, weights_only=True)
        return PPFModel(**{name: fields[name] for name in PPFModel._fields})


def bounding_diameter(points: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    """(B,) float32 diagonal of each cloud's axis-aligned bounding box over its finite rows (0 for
    an empty cloud), the diameter :func:`ppf_model` uses by default. It bounds every pair distance,
    so the distance bins of a model cover all its pairs. Plain torch: equal to ppf_model's own
    (float32, sqrt((ex ex + ey ey) + ez ez)) up to the rounding of torch's sqrt."""
    box = bounding_box(points.to(torch.float32), lengths)
    e = box.high - box.low
    return torch.sqrt((e[:, 0] * e[:, 0] + e[:, 1] * e[:, 1]) + e[:, 2] * e[:, 2])


def distance_bins_for(tau_d: float) -> int:
    """Distance bins that hold every pair of a model when the step is tau_d * diameter and the
    diameter bounds the pair distances: floor(1 / tau_d) + 1 (the +1 takes |d| = diameter)."""
    return int(math.floor(1.0 / tau_d)) + 1


def ppf_model(
    points: Tensor,
    normals: Tensor,
    lengths: Optional[Tensor] = None,
    tau_d: float = 0.05,
    angle_bins: int = 30,
    diameter: Optional[Tensor] = None,
    max_pairs_per_key: int = 0,
) -> PPFModel:
    """The PPF description of B models at once (Drost's global model description).

    Args:
        points, normals: (B, N, 3) floating model points and normals (N <= 46340; normals need
            not be unit).
        lengths: (B,) int64, model b is rows [0, lengths[b]); None = all N.
        tau_d: the distance step as a fraction of the diameter (Drost: 0.05).
        angle_bins: alpha bins over 2 pi (30: 12 degrees).
        diameter: (B,) the model diameters; None = each model's bounding-box diagonal (computed
            in the op, in float32). Pairs farther apart than floor(1 / tau_d) + 1 steps are left
            out, so a diameter below the largest pair distance drops the farthest pairs.
        max_pairs_per_key: 0 (the default) keeps every pair; otherwise a key shared by more
            pairs keeps this many, evenly spaced in its (i, j) order (positions
            floor(t * count / max_pairs_per_key)). Flat faces and symmetric shapes give a few keys
            thousands of pairs (every planar pair of a face has one key), each a vote for every
            scene pair that looks the key up, and those votes say little about which model point
            matched; the cap bounds a lookup's votes (a hard form of weighting frequent features
            down), so such a model costs about what a curved model of the same size does.
            ``num_pairs`` counts the pairs kept.

    Returns:
        :class:`PPFModel`. Every ordered pair (i, j), i != j, of points with finite coordinates
        and a nonzero finite normal that do not coincide is listed under its key, by (i, j)
        within a key (less those a cap leaves out); identical on CPU and CUDA.
    """
    check_tensor(points, "points", "(B, N, 3)")
    check_tensor(normals, "normals", "(B, N, 3)")
    if not torch.jit.is_scripting() and (not isinstance(tau_d, (int, float)) or isinstance(tau_d, bool)):
        raise ValueError("tau_d must be a number in (0, 1], got " + repr(tau_d))
    if not 0.0 < tau_d <= 1.0:
        raise ValueError(f"tau_d must be in (0, 1], got {tau_d}")
    if diameter is not None:
        check_tensor(diameter, "diameter", "(B,)")
        _check_positive_values(diameter, "diameter")
    batch, n = points.shape[0], points.shape[1]
    if lengths is None:
        lengths = torch.full((batch,), n, dtype=torch.int64, device=points.device)
    bins = distance_bins_for(tau_d)
    (
        unit,
        diameters,
        step,
        key_offsets,
        unique_keys,
        starts,
        counts,
        num_unique,
        pair_ref,
        pair_partner,
        pair_alpha,
    ) = torch.ops.pointops.ppf_model(points, normals, lengths, diameter, tau_d, angle_bins, bins, max_pairs_per_key)
    return PPFModel(
        points.to(torch.float32).contiguous(),
        unit,
        lengths.clamp(0, n),
        diameters,
        step,
        key_offsets,
        unique_keys,
        starts,
        counts,
        num_unique,
        pair_ref,
        pair_partner,
        pair_alpha,
        angle_bins,
        bins,
        float(tau_d),
    )


# ---- voting -------------------------------------------------------------------------------------


@torch.library.register_fake("pointops::ppf_vote")
def _ppf_vote_fake(
    scene_points,
    scene_normals,
    scene_lengths,
    model_points,
    model_normals,
    key_offsets,
    pair_ref,
    pair_alpha,
    distance_step,
    diameter,
    angle_bins,
    distance_bins,
    stride,
    k,
    spread=False,
    backend="dense",
    chunk_votes=1 << 24,
):
    _check_oriented_clouds(scene_points, scene_normals, scene_lengths, "scene_points", "scene_normals", "scene_lengths")
    check_dim(model_points, "model_points", 3, "(M, Nm, 3)")
    check_dtype(model_points, "model_points", torch.float32)
    torch._check(
        model_points.shape[2] == 3,
        lambda: f"model_points must have shape (M, Nm, 3), got shape {tuple(model_points.shape)}",
    )
    check_same_device(model_points, "model_points", scene_points, "scene_points")
    check_dtype(model_normals, "model_normals", torch.float32)
    check_same_device(model_normals, "model_normals", scene_points, "scene_points")
    torch._check(
        model_normals.shape == model_points.shape,
        lambda: f"model_normals must have the shape of model_points {tuple(model_points.shape)}, got "
        f"{tuple(model_normals.shape)}",
    )
    models = model_points.shape[0]
    keys = key_count(angle_bins, distance_bins)
    check_dtype(key_offsets, "key_offsets", torch.int64)
    check_same_device(key_offsets, "key_offsets", scene_points, "scene_points")
    check_shape(key_offsets, "key_offsets", (models, keys + 1))
    check_dtype(pair_ref, "pair_ref", torch.int32)
    check_same_device(pair_ref, "pair_ref", scene_points, "scene_points")
    check_dim(pair_ref, "pair_ref", 2, "(M, P)")
    torch._check(
        pair_ref.shape[0] == models,
        lambda: f"pair_ref must have shape (M, P) with M = {models}, got shape {tuple(pair_ref.shape)}",
    )
    check_dtype(pair_alpha, "pair_alpha", torch.float32)
    check_same_device(pair_alpha, "pair_alpha", scene_points, "scene_points")
    check_shape(pair_alpha, "pair_alpha", pair_ref.shape)
    _check_cloud_values(distance_step, "distance_step", models, scene_points, "scene_points")
    _check_cloud_values(diameter, "diameter", models, scene_points, "scene_points")
    torch._check(stride >= 1, lambda: f"stride must be >= 1, got {stride}")
    torch._check(0 <= k <= 64, lambda: f"k (peaks per reference) must be in [0, 64], got {k}")
    torch._check(backend in ("dense", "sort"), lambda: f'backend must be "dense" or "sort", got "{backend}"')
    scenes, n = scene_points.shape[:2]
    refs = (n + stride - 1) // stride
    shape = (scenes, model_points.shape[0], refs, k)
    check_output_fits(
        scene_points.device, f"k = {k} peaks of every {stride}-th scene point (stride)", shape, 3 * 8 + 7 * 4
    )
    return (
        scene_points.new_empty(shape, dtype=torch.int64),
        scene_points.new_empty(shape, dtype=torch.int64),
        scene_points.new_empty(shape, dtype=torch.int64),
        scene_points.new_empty(shape + (4,), dtype=torch.float32),
        scene_points.new_empty(shape + (3,), dtype=torch.float32),
    )


class PPFVotes(NamedTuple):
    """Output of :func:`ppf_vote`: the k peaks of each scene reference point against each model,
    shapes (S, M, R, k) with R = ceil(N / stride)."""

    votes: Tensor  # (S, M, R, k) int64, 0 where there is no peak
    model_index: Tensor  # (S, M, R, k) int64 model point matched to the reference, -1 where none
    alpha_bin: Tensor  # (S, M, R, k) int64 rotation bin about the normal, -1 where none
    quaternions: Tensor  # (S, M, R, k, 4) float32 (w, x, y, z), w >= 0; NaN where none
    translations: Tensor  # (S, M, R, k, 3) float32; NaN where none


def ppf_vote(
    scene_points: Tensor,
    scene_normals: Tensor,
    model: PPFModel,
    scene_lengths: Optional[Tensor] = None,
    stride: int = 5,
    k: int = 3,
    spread: bool = False,
    backend: str = "dense",
    chunk_votes: int = 1 << 24,
) -> PPFVotes:
    """Drost's voting: every stride-th scene point against every model of ``model``.

    Each reference point r (a scene point with a finite position and nonzero normal) is paired
    with every other valid scene point within the model's diameter; each pair's key selects the
    model pairs with the same discretized feature, and each model pair (i, j) votes for (model
    point i, alpha bin of alpha_scene - alpha_model), the rotation about the normal that aligns
    the two pairs. The peaks of the (model point x alpha) accumulator of r are candidate poses.

    Args:
        scene_points, scene_normals: (S, N, 3) floating (computed in float32; normals need not
            be unit).
        model: a :class:`PPFModel` of M models (on the scene's device).
        scene_lengths: (S,) int64, scene s is rows [0, scene_lengths[s]); None = all N.
        stride: reference point r is scene point r * stride.
        k: peaks kept per reference (<= 64); ties go to the lowest cell i * angle_bins + bin.
        spread: also look each scene pair up under the neighbouring feature bins (in each of the
            4 dimensions the bin on the side the value is nearer to: up to 16 keys per pair),
            against discretization noise.
        backend: "dense", a per-reference (model point x alpha) accumulator, in shared memory on
            CUDA, with no host sync; or "sort", every vote a 64-bit key counted by radix sort and
            run-length encoding, in chunks of about ``chunk_votes`` votes (it reads the vote counts
            back to the host once). Both give identical results. The dense vote's cost grows with
            the votes, and per reference with its accumulator: nm x angle_bins cells to clear and
            scan for the peaks, and on CUDA one model-point slice per about 850 points (30 alpha
            bins, 112 KB of shared memory), each re-walking the reference's scene pairs. The sort
            vote's grows with the votes alone, about 52 bytes of memory traffic each through the
            sort's passes: it is memory-bandwidth bound. So "sort" is the right choice where a
            reference casts few votes against many cells (models of tens of thousands of points
            voted on with sparse scenes or large strides), "dense" everywhere else (the presets).
        chunk_votes: votes per chunk of the sort backend, which holds about 52 bytes of device
            memory a vote of a chunk (keys 8, sorted keys 8, indices 4 + 4, runs 8 + 4 + 4 and the
            sort's scratch): the default 2^24 takes about 0.9 GB; to stay within B bytes pass
            B // 52. Larger chunks mean fewer launches; one reference's votes are never split.

    Returns:
        :class:`PPFVotes`; identical on CPU and CUDA, bit for bit.
    """
    check_tensor(scene_points, "scene_points", "(B, N, 3)")
    check_tensor(scene_normals, "scene_normals", "(B, N, 3)")
    return PPFVotes(
        *torch.ops.pointops.ppf_vote(
            scene_points,
            scene_normals,
            scene_lengths,
            model.points,
            model.normals,
            model.key_offsets,
            model.pair_ref,
            model.pair_alpha,
            model.distance_step,
            model.diameter,
            model.angle_bins,
            model.distance_bins,
            stride,
            k,
            spread,
            backend,
            chunk_votes,
        )
    )


# ---- pose clustering ------------------------------------------------------------------------------


@torch.library.register_fake("pointops::pose_cluster")
def _pose_cluster_fake(
    quaternions,
    translations,
    votes,
    lengths,
    distance_threshold,
    angle_threshold,
    suppression_distance,
    k,
    suppression_angle=math.pi,
):
    check_dim(quaternions, "quaternions", 3, "(B, M, 4)")
    check_floating(quaternions, "quaternions")
    torch._check(
        quaternions.shape[2] == 4,
        lambda: f"quaternions must have shape (B, M, 4), got shape {tuple(quaternions.shape)}",
    )
    batch, poses = quaternions.shape[0], quaternions.shape[1]
    check_floating(translations, "translations")
    check_same_device(translations, "translations", quaternions, "quaternions")
    check_shape(translations, "translations", (batch, poses, 3))
    check_dtype(votes, "votes", torch.int64)
    check_same_device(votes, "votes", quaternions, "quaternions")
    check_shape(votes, "votes", (batch, poses))
    check_optional_batch_vector(lengths, "lengths", batch, quaternions, "quaternions")
    _check_cloud_values(distance_threshold, "distance_threshold", batch, quaternions, "quaternions")
    _check_cloud_values(suppression_distance, "suppression_distance", batch, quaternions, "quaternions")
    torch._check(
        0 < angle_threshold <= math.pi, lambda: f"angle_threshold must be in (0, pi] radians, got {angle_threshold}"
    )
    torch._check(
        0 < suppression_angle <= math.pi,
        lambda: f"suppression_angle must be in (0, pi] radians, got {suppression_angle}",
    )
    torch._check(k >= 0, lambda: f"k must be >= 0, got {k}")
    check_output_fits(quaternions.device, f"k = {k}", (batch, k), 7 * 4 + 3 * 8)
    return (
        quaternions.new_empty((batch, k, 4), dtype=torch.float32),
        quaternions.new_empty((batch, k, 3), dtype=torch.float32),
        quaternions.new_empty((batch, k), dtype=torch.int64),
        quaternions.new_empty((batch, k), dtype=torch.int64),
        quaternions.new_empty((batch, k), dtype=torch.int64),
    )


class PoseClusters(NamedTuple):
    """Output of :func:`pose_cluster`: the best k clusters of each batch entry, best first."""

    quaternions: Tensor  # (B, k, 4) float32 vote-weighted mean rotation (w >= 0); NaN where none
    translations: Tensor  # (B, k, 3) float32 vote-weighted mean translation; NaN where none
    scores: Tensor  # (B, k) int64 summed votes of the members; 0 where none
    members: Tensor  # (B, k) int64 poses in the cluster; 0 where none
    centers: Tensor  # (B, k) int64 index of the cluster's centre pose; -1 where none


def pose_cluster(
    quaternions: Tensor,
    translations: Tensor,
    votes: Tensor,
    distance_threshold: Tensor,
    lengths: Optional[Tensor] = None,
    angle_threshold: float = math.radians(24.0),
    suppression_distance: Optional[Tensor] = None,
    k: int = 1,
    suppression_angle: float = math.pi,
) -> PoseClusters:
    """Clusters candidate poses by spatial hashing of their translations.

    Pose i's cluster is every pose in the 27 cells (cell size ``distance_threshold``) around its
    own whose translation lies within ``distance_threshold`` and whose rotation lies within
    ``angle_threshold`` (|q_i . q_j| >= cos(angle / 2): q and -q are one rotation); its score is
    the sum of their votes. The best cluster (ties to the lowest pose index) is kept, every pose
    within ``suppression_distance`` of its centre (and within ``suppression_angle`` of its
    rotation) leaves, and so on k times, so several instances of one model come out. Each kept
    cluster is the vote-weighted average of its members (float64 sums in a fixed order).

    Args:
        quaternions: (B, M, 4) floating (w, x, y, z); translations (B, M, 3) floating; votes
            (B, M) int64. A pose takes part when votes > 0 and it is finite (and within 2^16 cells
            of the origin).
        distance_threshold: (B,) floating translation radius and cell size; an entry whose
            threshold is not finite and > 0 (a degenerate model's step of 0) gets no cluster.
        lengths: (B,) int64 poses per entry; None = all M.
        angle_threshold: rotation radius in radians, in (0, pi].
        suppression_distance: (B,) floating, finite and >= 0 (a ValueError names it); None =
            distance_threshold (only the cluster's own neighbourhood leaves).
        k: clusters per entry.
        suppression_angle: in (0, pi] radians; pi (the default) removes the poses near the
            centre whatever their rotation. Smaller keeps a differently turned pose at the same
            place for a later round: where a wrong rotation won an instance's votes, the right
            one can still become a hypothesis.

    Returns:
        :class:`PoseClusters`; identical on CPU and CUDA, bit for bit.
    """
    if suppression_distance is None:
        suppression_distance = distance_threshold
    else:
        check_tensor(suppression_distance, "suppression_distance", "(B,)")
        _check_positive_values(suppression_distance, "suppression_distance", True)
    return PoseClusters(
        *torch.ops.pointops.pose_cluster(
            quaternions,
            translations,
            votes,
            lengths,
            distance_threshold,
            angle_threshold,
            suppression_distance,
            k,
            suppression_angle,
        )
    )


def quaternion_to_matrix(quaternions: Tensor) -> Tensor:
    """(..., 3, 3) rotation matrices of unit quaternions (..., 4) (w, x, y, z)."""
    w, x, y, z = quaternions.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z),
        2 * (x * y - w * z),
        2 * (x * z + w * y),
        2 * (x * y + w * z),
        1 - 2 * (x * x + z * z),
        2 * (y * z - w * x),
        2 * (x * z - w * y),
        2 * (y * z + w * x),
        1 - 2 * (x * x + y * y),
    ]
    return torch.stack(rows, -1).reshape(quaternions.shape[:-1] + (3, 3))


def pose_matrices(quaternions: Tensor, translations: Tensor) -> Tensor:
    """(..., 4, 4) rigid transforms from quaternions (..., 4) and translations (..., 3)."""
    shape = quaternions.shape[:-1]
    out = torch.zeros(shape + (4, 4), dtype=quaternions.dtype, device=quaternions.device)
    out[..., :3, :3] = quaternion_to_matrix(quaternions)
    out[..., :3, 3] = translations
    out[..., 3, 3] = 1.0
    return out
