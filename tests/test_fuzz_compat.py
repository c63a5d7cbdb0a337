"""Property fuzzing of the peers' adapters (pointops.compat, pointops.nn): hypothesis draws packed
clouds with ragged batch descriptions (empty clouds, duplicates, NaN rows) and, beside them,
descriptions that contradict themselves. Each adapter must equal pointops.reference laid out the
peer's way (its indices, padding and distances), and every contradictory description, index or
scalar must raise a ValueError naming the argument; never an answer.

The budget is tests/test_fuzz.py's (POINTOPS_FUZZ_EXAMPLES, default 25: seconds in all)."""

import pytest
import torch

from pointops import nn as pnn
from pointops.compat import mmcv, pyg
from pointops.compat import openpcdet_stack as stack
from pointops.compat import pointcept
from pointops.compat import pytorch3d as p3d
from pointops.reference import geometry as ref

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz suite needs hypothesis (pointops' test extra)")
st = pytest.importorskip("hypothesis.strategies")
from hypothesis import given  # noqa: E402

from tests.test_fuzz import FUZZ, _coordinate, _same  # noqa: E402


@st.composite
def packed(draw, clouds=(1, 4), size=(0, 12), special=True):
    """Packed points (P, 3) float32 and their per-cloud counts (B,) int64 (some clouds empty)."""
    counts = draw(st.lists(st.integers(*size), min_size=clouds[0], max_size=clouds[1]))
    total = sum(counts)
    values = draw(st.lists(_coordinate(special=special), min_size=3 * total, max_size=3 * total))
    return torch.tensor(values, dtype=torch.float32).reshape(total, 3), torch.tensor(counts, dtype=torch.int64)


def _offsets(counts):
    return torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])


@st.composite
def packed_pair(draw, special=True):
    """Points and queries of the same clouds: (xyz, counts, new_xyz, new_counts)."""
    xyz, counts = draw(packed(special=special))
    new_counts = torch.tensor(draw(st.lists(st.integers(0, 8), min_size=counts.shape[0], max_size=counts.shape[0])))
    total = int(new_counts.sum())
    values = draw(st.lists(_coordinate(special=special), min_size=3 * total, max_size=3 * total))
    return xyz, counts, torch.tensor(values, dtype=torch.float32).reshape(total, 3), new_counts


@st.composite
def broken_counts(draw, rows):
    """Per-cloud counts that do not describe `rows` rows: a negative count, or a wrong sum."""
    counts = draw(st.lists(st.integers(-3, rows + 3), min_size=1, max_size=4))
    if all(c >= 0 for c in counts) and sum(counts) == rows:
        counts[0] += draw(st.sampled_from([-1, 1])) if counts[0] > 0 else 1
    return torch.tensor(counts, dtype=torch.int32)


# ---- Pointcept: cumulative ends --------------------------------------------------------------------


@FUZZ
@given(packed_pair(), st.integers(0, 6))
def test_pointcept_knn_query_is_the_packed_reference(pair, nsample):
    xyz, counts, new_xyz, new_counts = pair
    idx, dist = pointcept.knn_query(nsample, xyz, counts.cumsum(0).int(), new_xyz, new_counts.cumsum(0).int())
    want_idx, want_d2 = ref.knn_packed(new_xyz, _offsets(new_counts), xyz, _offsets(counts), nsample)
    _same([idx, dist], [want_idx.int(), torch.sqrt(want_d2.double()).float()])


@FUZZ
@given(packed_pair(special=False), st.data())
def test_pointcept_refuses_ends_that_contradict_the_rows(pair, data):
    xyz, counts, new_xyz, new_counts = pair
    ends, new_ends = counts.cumsum(0).int(), new_counts.cumsum(0).int()
    rows = xyz.shape[0]
    broken = ends.clone()
    i = data.draw(st.integers(0, ends.shape[0] - 1))
    if i < ends.shape[0] - 1:
        broken[i] = rows + data.draw(st.integers(1, 5))  # above a later end: a decrease
    else:
        broken[i] = data.draw(st.sampled_from([-1, rows + 1] + ([rows - 1] if rows > 0 else [])))
    with pytest.raises(ValueError, match="^offset must be non-decreasing"):
        pointcept.knn_query(2, xyz, broken, new_xyz, new_ends)
    with pytest.raises(ValueError, match="^offset must be non-decreasing"):
        pointcept.interpolation(xyz, new_xyz, torch.ones(rows, 2), broken, new_ends)


@FUZZ
@given(st.integers(1, 6), st.integers(-8, 14))
def test_pointcept_grouping_takes_minus_one_and_rows_only(rows, index):
    feat = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2)
    idx = torch.tensor([[0, index]], dtype=torch.int32)
    if -1 <= index < rows:
        out = pointcept.grouping2(feat, idx)
        expected = feat[index] if index >= 0 else torch.zeros(2)
        assert torch.equal(out[0, 1], expected)
    else:  # Pointcept would read feat[-5]: a wrong row, not "none"
        with pytest.raises(ValueError, match=r"^idx must hold indices -1 \(none\) or in \[0, "):
            pointcept.grouping2(feat, idx)


# ---- OpenPCDet / mmcv stacked counts ----------------------------------------------------------------


@FUZZ
@given(packed_pair(), st.sampled_from([0.0, 0.25, 0.6, 1.5]), st.integers(0, 5))
def test_stack_ball_query_is_the_packed_reference(pair, radius, nsample):
    xyz, counts, new_xyz, new_counts = pair
    idx, empty = stack.ball_query(radius, nsample, xyz, counts.int(), new_xyz, new_counts.int())
    offsets, new_offsets = _offsets(counts), _offsets(new_counts)
    rows, hits = ref.ball_query_packed(new_xyz, new_offsets, xyz, offsets, radius, nsample, pad="first")
    cloud = torch.searchsorted(new_offsets[1:], torch.arange(new_xyz.shape[0]), right=True)
    local = torch.where(rows >= 0, rows - offsets[cloud][:, None], torch.zeros_like(rows))
    _same([idx, empty], [local.int(), hits == 0])


@FUZZ
@given(packed(special=False), st.data())
def test_stack_refuses_counts_that_contradict_the_rows(cloud, data):
    xyz, counts = cloud
    broken = data.draw(broken_counts(xyz.shape[0]))
    new_counts = torch.zeros(broken.shape[0], dtype=torch.int32)
    for call in (
        lambda: stack.ball_query(0.5, 2, xyz, broken, xyz[:0], new_counts),
        lambda: stack.three_nn(xyz[:0], new_counts, xyz, broken),
        lambda: mmcv.ball_query(0.0, 0.5, 2, xyz, xyz[:0], broken, new_counts),
        lambda: stack.grouping_operation(
            torch.ones(xyz.shape[0], 2), broken, torch.zeros(0, 2, dtype=torch.int32), new_counts
        ),
    ):
        with pytest.raises(ValueError, match=r"_batch_cnt must be per-cloud counts >= 0 adding up to the "):
            call()


# ---- PyG batch vectors ------------------------------------------------------------------------------


@FUZZ
@given(packed_pair(), st.integers(0, 4))
def test_pyg_knn_is_the_packed_reference(pair, k):
    xyz, counts, new_xyz, new_counts = pair
    batch_x = torch.repeat_interleave(torch.arange(counts.shape[0]), counts)
    batch_y = torch.repeat_interleave(torch.arange(counts.shape[0]), new_counts)
    edges = pyg.knn(xyz, new_xyz, k, batch_x, batch_y, batch_size=counts.shape[0])
    rows, _ = ref.knn_packed(new_xyz, _offsets(new_counts), xyz, _offsets(counts), k)
    found = rows >= 0
    expected = torch.stack([torch.arange(new_xyz.shape[0])[:, None].expand_as(rows)[found], rows[found]])
    _same([edges], [expected])


@FUZZ
@given(st.lists(st.integers(-1, 3), min_size=1, max_size=12), st.one_of(st.none(), st.integers(1, 4)))
def test_pyg_refuses_a_batch_vector_that_is_not_sorted_clouds(values, batch_size):
    x = torch.rand(len(values), 3)
    batch = torch.tensor(values)
    clouds = batch_size if batch_size is not None else max(max(values) + 1, 1)
    good = all(v >= 0 for v in values) and values == sorted(values) and max(values) < clouds
    if good:
        pyg.knn_graph(x, 2, batch, batch_size=batch_size)
        pyg.radius_graph(x, 0.5, batch, batch_size=batch_size)
    else:
        for call in (
            lambda: pyg.knn_graph(x, 2, batch, batch_size=batch_size),
            lambda: pyg.radius_graph(x, 0.5, batch, batch_size=batch_size),
            lambda: pyg.fps(x, batch, 0.5, batch_size=batch_size),
        ):
            with pytest.raises(ValueError, match=r"^batch must be sorted cloud indices"):
                call()


@FUZZ
@given(packed(special=False), st.one_of(st.floats(-1.0, 2.0), st.just(float("nan"))))
def test_pyg_fps_samples_ceil_ratio_of_every_cloud(cloud, ratio):
    xyz, counts = cloud
    batch = torch.repeat_interleave(torch.arange(counts.shape[0]), counts)
    if not (0.0 < ratio <= 1.0):
        with pytest.raises(ValueError, match=r"^ratio must be finite and in \(0.0, 1.0\]"):
            pyg.fps(xyz, batch, ratio, False, batch_size=counts.shape[0])
        return
    picks = pyg.fps(xyz, batch, ratio, False, batch_size=counts.shape[0])
    want = torch.ceil(counts.float() * torch.tensor(ratio, dtype=torch.float32)).long().tolist()  # in float32
    assert picks.shape[0] == sum(want)
    start = 0
    offsets = _offsets(counts).tolist()
    for b, n in enumerate(want):
        mine = picks[start : start + n]
        assert ((mine >= offsets[b]) & (mine < offsets[b + 1])).all() and len(set(mine.tolist())) == n
        start += n


# ---- pytorch3d padded clouds ------------------------------------------------------------------------


@st.composite
def padded(draw, size=(0, 10)):
    b = draw(st.integers(1, 3))
    n = draw(st.integers(*size))
    values = draw(st.lists(_coordinate(), min_size=b * n * 3, max_size=b * n * 3))
    lengths = torch.tensor(draw(st.lists(st.integers(0, n), min_size=b, max_size=b)))
    return torch.tensor(values, dtype=torch.float32).reshape(b, n, 3), lengths


@FUZZ
@given(padded(), padded(), st.integers(0, 4))
def test_knn_points_is_the_reference_with_pytorch3d_padding(c1, c2, k):
    (p1, l1), (p2, l2) = c1, c2
    batch = min(p1.shape[0], p2.shape[0])
    p1, l1, p2, l2 = p1[:batch], l1[:batch], p2[:batch], l2[:batch]
    out = p3d.knn_points(p1, p2, l1, l2, K=k)
    idx, d2 = ref.knn(p1, p2, k, l1, l2)
    none = idx < 0
    d2 = torch.where(none, torch.zeros_like(d2), d2)
    inside = (torch.arange(p1.shape[1])[None] < l1[:, None])[..., None]
    d2 = torch.where(inside & torch.isnan(p1).any(-1, keepdim=True), torch.full_like(d2, float("nan")), d2)
    d2 = torch.where(
        inside & ~torch.isnan(p1).any(-1, keepdim=True) & torch.isinf(p1).any(-1, keepdim=True),
        torch.full_like(d2, float("inf")),
        d2,
    )
    _same([out.idx, out.dists], [torch.where(none, torch.zeros_like(idx), idx), d2])


@FUZZ
@given(padded(size=(1, 8)), st.data())
def test_chamfer_is_nan_exactly_when_a_counted_point_is(cloud, data):
    x, lengths = cloud
    y = torch.rand(x.shape[0], 5, 3)
    loss, _ = p3d.chamfer_distance(x, y, x_lengths=lengths, batch_reduction=None, point_reduction="sum")
    counted = torch.arange(x.shape[1])[None] < lengths[:, None]
    has_nan = (torch.isnan(x).any(-1) & counted).any(1)
    assert torch.equal(torch.isnan(loss), has_nan)
    with pytest.raises(ValueError, match="^A length value was too long: x_lengths must be at most P"):
        p3d.chamfer_distance(x, y, x_lengths=lengths + x.shape[1] + 1)


# ---- OpenPCDet / mmcv gathers: indices of the rows, nothing else -------------------------------------------


@FUZZ
@given(st.integers(1, 3), st.integers(1, 6), st.lists(st.integers(-7, 9), min_size=1, max_size=5))
def test_gathers_take_the_rows_and_refuse_the_rest(batch, n, values):
    features = torch.rand(batch, 2, n)
    idx = torch.tensor(values, dtype=torch.int32)[None].expand(batch, -1).contiguous()
    if all(0 <= v < n for v in values):
        _same([pnn.gather_operation(features, idx)], [ref.gather_operation(features, idx)])
        _same([mmcv.grouping_operation(features, idx[:, None])], [ref.grouping_operation(features, idx[:, None])])
    else:
        with pytest.raises(ValueError, match=r"^idx must hold indices in \[0, "):
            pnn.gather_operation(features, idx)
        with pytest.raises(ValueError, match=r"^indices must hold indices in \[0, "):
            mmcv.grouping_operation(features, idx[:, None])
    with pytest.raises(ValueError, match="^idx must have the batch size B = "):
        pnn.gather_operation(features, torch.zeros(batch + 1, 1, dtype=torch.int32))
