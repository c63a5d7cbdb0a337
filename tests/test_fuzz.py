"""Property fuzzing against pointops.reference: hypothesis draws small clouds (ragged lengths,
duplicate points, NaN / Inf rows, signed zeros, points on cell borders) and every op must equal
its oracle bit for bit (the normals within float64 rounding).

CI runs POINTOPS_FUZZ_EXAMPLES examples per property (default 25: a few seconds in all); set it
higher for a longer search, e.g. POINTOPS_FUZZ_EXAMPLES=2000. Failing examples print their seed;
hypothesis keeps no database here (derandomize=False, database=None), so a CI run draws anew."""

import math
import os

import numpy as np
import pytest
import torch

import pointops
from pointops.ppf import ops as ppf
from pointops.reference import bev as ref_bev
from pointops.reference import hough as ref_hough
from pointops.reference import geometry as ref_geometry
from pointops.reference import ppf as ref_ppf
from pointops.reference import sampling as ref_sampling

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz suite needs hypothesis (pointops' test extra)")
st = pytest.importorskip("hypothesis.strategies")
from hypothesis import HealthCheck, given, settings  # noqa: E402  (after the skip when hypothesis is absent)

EXAMPLES = int(os.environ.get("POINTOPS_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# coordinates on a coarse lattice (many ties, points on cell borders), with signed zeros and a few
# non-finite values
_SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.0, float("nan"), float("inf"), float("-inf")]


def _coordinate(lo=-2.0, hi=2.0, special=True):
    lattice = st.integers(int(lo * 4), int(hi * 4)).map(lambda v: v / 4.0)
    choices = [lattice, st.floats(lo, hi, allow_nan=False, width=32)]
    if special:
        choices.append(st.sampled_from(_SPECIAL))
    return st.one_of(*choices)


@st.composite
def clouds(draw, batch=(1, 3), n=(0, 24), dims=3, special=True, lo=-2.0, hi=2.0):
    b = draw(st.integers(*batch))
    count = draw(st.integers(*n))
    values = draw(st.lists(_coordinate(lo, hi, special), min_size=b * count * dims, max_size=b * count * dims))
    points = torch.tensor(values, dtype=torch.float32).reshape(b, count, dims)
    lengths = torch.tensor(draw(st.lists(st.integers(0, count), min_size=b, max_size=b)), dtype=torch.int64)
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return points.to(dtype), lengths


def _same(actual, expected):
    for a, e in zip(actual, expected):
        a, e = torch.as_tensor(a).cpu(), torch.as_tensor(e).cpu()
        assert a.shape == e.shape, (a.shape, e.shape)
        torch.testing.assert_close(a.to(e.dtype), e, rtol=0, atol=0, equal_nan=True)


@FUZZ
@given(clouds(dims=3), st.integers(0, 30), st.booleans())
def test_fps(cloud, k, with_start):
    points, lengths = cloud
    start = torch.zeros(points.shape[0], dtype=torch.int64) + (3 if with_start else 0)
    _same(torch.ops.pointops.fps(points, lengths, start, k), ref_sampling.fps(points, k, lengths, start))


@FUZZ
@given(clouds(), clouds(), st.integers(0, 12), st.one_of(st.none(), st.sampled_from([0.0, 0.25, 1.0])))
def test_knn(query_cloud, point_cloud, k, max_distance):
    queries, query_lengths = query_cloud
    points, lengths = point_cloud
    batch = min(queries.shape[0], points.shape[0])
    queries, query_lengths = queries[:batch], query_lengths[:batch]
    points, lengths = points[:batch].to(queries.dtype), lengths[:batch]
    actual = pointops.knn(queries, points, k, query_lengths, lengths, max_distance)
    _same(actual, ref_geometry.knn(queries, points, k, query_lengths, lengths, max_distance))


@FUZZ
@given(clouds(batch=(1, 1), n=(0, 30)), clouds(batch=(1, 1), n=(0, 30)), st.integers(0, 10), st.data())
def test_knn_packed(query_cloud, point_cloud, k, data):
    queries = query_cloud[0][0]
    points = point_cloud[0][0].to(queries.dtype)
    cuts = sorted(data.draw(st.lists(st.integers(0, points.shape[0]), min_size=2, max_size=2)))
    qcuts = sorted(data.draw(st.lists(st.integers(0, queries.shape[0]), min_size=2, max_size=2)))
    offsets = torch.tensor([0] + cuts + [points.shape[0]])
    query_offsets = torch.tensor([0] + qcuts + [queries.shape[0]])
    _same(
        pointops.knn_packed(queries, query_offsets, points, offsets, k),
        ref_geometry.knn_packed(queries, query_offsets, points, offsets, k),
    )


@FUZZ
@given(clouds(), st.sampled_from([0.0, 0.25, 0.5, 1.5]), st.integers(0, 10), st.sampled_from(["first", "minus_one"]))
def test_ball_query(cloud, radius, k, pad):
    points, lengths = cloud
    queries = points.flip(1)
    _same(
        pointops.ball_query(queries, points, radius, k, lengths, lengths, pad),
        ref_geometry.ball_query(queries, points, radius, k, lengths, lengths, pad),
    )


@FUZZ
@given(clouds(dims=4, lo=-0.5, hi=3.5), st.integers(0, 4), st.integers(0, 40))
def test_voxelize(cloud, max_points, max_voxels):
    points, lengths = cloud
    size, point_range = [0.5, 0.5, 1.0], [0.0, 0.0, 0.0, 3.0, 3.0, 2.0]
    actual = torch.ops.pointops.voxelize(points, lengths, size, point_range, max_points, max_voxels)
    _same(actual, ref_bev.voxelize(points, size, point_range, max_points, max_voxels, lengths))


_BEV_CHANNELS = [
    "max_z",
    "min_z",
    "mean_z",
    "count",
    "density",
    "occupancy",
    "max_feature",
    "mean_feature",
    "top_feature",
    "height_slices",
]


@FUZZ
@given(
    clouds(dims=4, lo=-2.5, hi=2.5),
    st.lists(st.sampled_from(_BEV_CHANNELS), min_size=1, max_size=4, unique=True),
    st.booleans(),
)
def test_bev_rasterize(cloud, channels, forward_up):
    points, lengths = cloud
    point_range, cell = [-2.0, -1.5, -1.0, 2.0, 1.5, 1.0], [0.25, 0.5]
    actual = pointops.bev_rasterize(
        points, channels, lengths, point_range, cell, height_slices=3, forward_up=forward_up
    )
    expected = ref_bev.bev_rasterize(
        points, point_range, cell, channels, lengths, height_slices=3, forward_up=forward_up
    )
    # mean channels are within one fixed-point step of the exact mean (csrc/bev/rasterize.h)
    c = 0
    for name in channels:
        width = 3 if name == "height_slices" else 1
        a, e = actual[:, c : c + width], expected[:, c : c + width]
        if name.startswith("mean"):
            torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6)
        else:
            _same([a], [e])
        c += width


@st.composite
def pixel_lists(draw, height=12, width=15):
    b = draw(st.integers(1, 2))
    n = draw(st.integers(0, 20))
    xs = draw(st.lists(st.integers(-2, width + 1), min_size=b * n, max_size=b * n))
    ys = draw(st.lists(st.integers(-2, height + 1), min_size=b * n, max_size=b * n))
    points = torch.stack([torch.tensor(xs, dtype=torch.int64), torch.tensor(ys, dtype=torch.int64)], -1).reshape(
        b, n, 2
    )
    lengths = torch.tensor(draw(st.lists(st.integers(0, n), min_size=b, max_size=b)), dtype=torch.int64)
    return points, lengths, height, width


@FUZZ
@given(pixel_lists(), st.lists(st.integers(0, 9), min_size=0, max_size=4))
def test_hough_circles_points(lists, radii):
    points, lengths, height, width = lists
    actual = torch.ops.pointops.hough_circles_points(points, lengths, None, None, height, width, radii, 0.0)
    _same([actual], [ref_hough.hough_circles_points(points, lengths, None, None, height, width, radii)])


@FUZZ
@given(pixel_lists(), st.lists(st.floats(-3.2, 3.2, allow_nan=False), min_size=0, max_size=6))
def test_hough_lines_points(lists, theta):
    points, lengths, height, width = lists
    actual = torch.ops.pointops.hough_lines_points(points, lengths, None, height, width, theta)
    _same([actual], [ref_hough.hough_lines_points(points, lengths, None, height, width, theta)])


@FUZZ
@given(clouds(), st.sampled_from([0.25, 0.5, 1.0, 1e-7]), st.booleans())  # 1e-7: past the key's span
def test_voxel_downsample(cloud, size, ranged):
    points, lengths = cloud
    point_range = [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0] if ranged else None
    actual = pointops.voxel_downsample(points, [size] * 3, lengths, None, point_range)
    expected = ref_geometry.voxel_downsample(points, [size] * 3, lengths, None, point_range)
    _same([actual.points, actual.lengths, actual.point_voxel], [expected[0], expected[2], expected[3]])


@FUZZ
@given(clouds(n=(0, 20), special=False), st.integers(3, 8), st.sampled_from([0, 1, 2]), st.data())
def test_estimate_normals(cloud, k, orientation, data):
    points, lengths = cloud
    points = points.double()
    if data.draw(st.booleans()) and points.numel():
        points[0, 0, 0] = float("nan")  # a non-finite point gets normal 0 and is no one's neighbour
    neighbors = ref_geometry.nearest_neighbors(points, points, min(k, max(points.shape[1], 1)), lengths, lengths)
    normals, curvature = torch.ops.pointops.estimate_normals(points, lengths, neighbors, None, orientation)
    expected, expected_curvature, determined = ref_geometry.estimate_normals(
        points, neighbors, lengths, None, orientation
    )
    # eigenvectors are defined up to the gap between the two smallest eigenvalues: compare where
    # both say the normal is determined and the neighbourhood is not nearly degenerate
    agree = (normals != 0).any(-1).numpy() == determined
    assert agree.all()
    got = normals.numpy()
    # a normal (nearly) perpendicular to the ray to the viewpoint has no orientation: the sign of a
    # dot product of about 1e-16 decides it, and the reference's LAPACK eigenvectors round
    # differently from the op's Jacobi sweeps, so compare those up to sign
    ray = -points.numpy()  # the viewpoint is the origin
    ambiguous = np.abs((expected * ray).sum(-1)) <= 1e-9 * np.linalg.norm(ray, axis=-1)
    same = np.isclose(got, expected, rtol=0, atol=1e-6).all(-1)
    flipped = np.isclose(got, -expected, rtol=0, atol=1e-6).all(-1)
    close = same | (flipped & ambiguous & (orientation != 0)) | (expected_curvature > 0.3)
    assert close.all()
    np.testing.assert_allclose(curvature.numpy(), expected_curvature, rtol=0, atol=1e-9)


@FUZZ
@given(st.integers(0, 10**6), st.integers(6, 16), st.integers(1, 4), st.integers(1, 3), st.booleans())
def test_ppf_vote(seed, scene_size, stride, k, spread):
    g = torch.Generator().manual_seed(seed)
    model_points = torch.randn(2, 8, 3, generator=g)
    model_normals = torch.randn(2, 8, 3, generator=g)
    model = ppf.ppf_model(model_points, model_normals, torch.tensor([8, 6]), tau_d=0.25, angle_bins=6)
    scene = torch.cat([model_points[:1], torch.randn(1, scene_size, 3, generator=g)], 1)
    normals = torch.cat([model_normals[:1], torch.randn(1, scene_size, 3, generator=g)], 1)
    if seed % 3 == 0:
        scene[0, 2] = float("nan")
    lengths = torch.tensor([8 + scene_size - seed % 4])
    want = ref_ppf.ppf_vote(
        scene,
        normals,
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
        stride,
        k,
        spread,
    )
    got = torch.ops.pointops.ppf_vote(
        scene,
        normals,
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
        stride,
        k,
        spread,
        "dense",
        1 << 24,
    )
    _same(got, want)


@FUZZ
@given(st.integers(0, 10**6), st.sampled_from([0, 5, 60]))
def test_detect_planes_labels_only_finite_points_on_their_plane(seed, holes):
    """A property of the pipeline (no oracle): every labelled point is finite, within lengths and
    within distance_threshold of its plane, and the planes have unit normals."""
    g = torch.Generator().manual_seed(seed)
    uv = torch.rand(1, 300, 2, generator=g) * 4 - 2
    noise = torch.randn(1, 300, generator=g) * 0.002
    points = torch.stack([uv[..., 0], uv[..., 1], noise], -1)
    points[0, :holes] = float("nan")
    lengths = torch.tensor([250])
    out = pointops.detect_planes(points, 2, lengths, "indoor", distance_threshold=0.02)
    labels = out.labels[0]
    labelled = labels >= 0
    assert not labelled[250:].any() and not labelled[:holes].any()
    planes = out.planes[0]
    found = torch.isfinite(planes).all(-1)
    assert torch.allclose(planes[found, :3].norm(dim=-1), torch.ones(int(found.sum())), atol=1e-5)
    if labelled.any():
        plane = planes[labels[labelled]]
        distance = ((points[0, labelled] * plane[:, :3]).sum(-1) - plane[:, 3]).abs()
        assert (distance <= 0.02 * 1.0001 + 1e-6).all()


def test_the_fuzz_budget_is_bounded():
    assert 1 <= EXAMPLES and (os.environ.get("POINTOPS_FUZZ_EXAMPLES") or EXAMPLES <= 50)
    assert math.isfinite(float(EXAMPLES))
