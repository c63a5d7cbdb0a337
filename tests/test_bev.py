"""BEV rasterization, height image and pillar scatter: references, edge cases, errors, CPU == CUDA.

Exact (bit for bit) against pointops.reference.bev: max_z, min_z, count, occupancy, max_feature,
top_feature, height_slices. The fixed-point means and the density are compared at
MEAN_TOL / DENSITY_TOL (float32 rounding of the float64 reference); CPU and CUDA agree exactly on
all channels.
"""

import math

import numpy as np
import pytest
import torch

import pointops
from pointops.reference import bev as reference

NAN = float("nan")
INF = float("inf")
ALL = list(pointops.bev.CHANNELS)
EXACT = {"max_z", "min_z", "count", "occupancy", "max_feature", "top_feature", "height_slices"}
MEAN_TOL = dict(rtol=1e-6, atol=1e-6)
DENSITY_TOL = dict(rtol=2e-7, atol=0.0)
RANGE = [-4.0, -3.0, -2.0, 4.0, 3.0, 2.0]
CELL = [0.5, 0.4]
SLICES = 5


def rasterize(points, channels, lengths=None, point_range=RANGE, cell_size=CELL, **kw):
    device_lengths = None if lengths is None else lengths.to(points.device)
    return torch.ops.pointops.bev_rasterize(
        points,
        device_lengths,
        point_range,
        cell_size,
        channels,
        kw.get("feature_column", 3),
        kw.get("density_base", 64.0),
        kw.get("height_slices", SLICES),
        kw.get("forward_up", False),
    )


def channel_slices(channels, slices=SLICES):
    """name -> slice of output channels."""
    out, c = {}, 0
    for name in channels:
        width = slices if name == "height_slices" else 1
        out[name] = slice(c, c + width)
        c += width
    return out


def assert_matches_reference(actual, expected, channels, slices=SLICES):
    actual = actual.cpu()
    assert actual.dtype == torch.float32 and actual.shape == expected.shape
    for name, sl in channel_slices(channels, slices).items():
        a, e = actual[:, sl], expected[:, sl]
        if name in EXACT:
            torch.testing.assert_close(a, e, rtol=0, atol=0, msg=lambda m: name + ": " + m)
        elif name == "density":
            torch.testing.assert_close(a, e, **DENSITY_TOL, msg=lambda m: name + ": " + m)
        else:
            torch.testing.assert_close(a, e, **MEAN_TOL, msg=lambda m: name + ": " + m)


def scene(batch=3, n=400, dims=5, seed=0, dtype=torch.float32):
    """Random clouds over (and past) RANGE with NaN/Inf rows, border points, duplicates of z
    (top-point ties) and NaN / huge features."""
    g = torch.Generator().manual_seed(seed)
    pts = torch.rand(batch, n, dims, generator=g, dtype=torch.float64)
    pts[..., 0] = pts[..., 0] * 10 - 5
    pts[..., 1] = pts[..., 1] * 8 - 4
    pts[..., 2] = pts[..., 2] * 5 - 2.5
    pts[..., 3:] = pts[..., 3:] * 100 - 20
    pts[0, 1, 0] = NAN
    pts[0, 2, 2] = INF
    pts[1, 3, 1] = -INF
    pts[0, 4, :3] = torch.tensor([-4.0, -3.0, -2.0])  # the range's lowest corner: counts
    pts[0, 5, :3] = torch.tensor([4.0, 0.0, 0.0])  # x == x_max: outside
    pts[0, 6, :3] = torch.tensor([0.5, 0.4, 2.0])  # z == z_max: outside
    pts[0, 7, :3] = torch.tensor([0.5, 0.4, 1.0])  # on a cell corner
    pts[0, 8:12, :3] = torch.tensor([1.1, 1.1, 0.75])  # equal z: the lowest index is the top point
    pts[0, 8:12, 3] = torch.tensor([7.0, 8.0, 9.0, 10.0])
    pts[1, 10, 3] = NAN
    pts[1, 11, 3] = 1e12
    pts[-1, 12, 3] = -1e12
    return pts.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("forward_up", [False, True])
def test_every_channel_matches_reference(device, dtype, forward_up):
    points = scene(dtype=dtype)
    lengths = torch.tensor([400, 250, 0])
    expected = reference.bev_rasterize(points, RANGE, CELL, ALL, lengths, height_slices=SLICES, forward_up=forward_up)
    actual = rasterize(points.to(device), ALL, lengths, forward_up=forward_up)
    assert actual.shape == (3, 9 + SLICES, *((16, 15) if forward_up else (15, 16)))
    assert_matches_reference(actual, expected, ALL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(device, dtype):
    points = scene(dtype=dtype, seed=1)
    expected = reference.bev_rasterize(points, RANGE, CELL, ALL, height_slices=SLICES)
    assert_matches_reference(rasterize(points.to(device), ALL), expected, ALL)


def test_channel_order_and_subsets_follow_the_request(device):
    points = scene(seed=2).to(device)
    full = rasterize(points, ALL)
    where = channel_slices(ALL)
    picked = ["top_feature", "height_slices", "count"]
    sub = rasterize(points, picked)
    torch.testing.assert_close(sub, torch.cat([full[:, where[c]] for c in picked], 1), rtol=0, atol=0)


def test_cell_borders_and_range_edges(device):
    # Cell sizes that are powers of two make every border exactly representable.
    pr, cs = [0.0, 0.0, 0.0, 2.0, 1.0, 1.0], [0.25, 0.5]
    pts = torch.tensor(
        [
            [
                [0.0, 0.0, 0.0, 1.0],  # lowest corner of the range: cell (0, 0)
                [0.25, 0.5, 0.5, 2.0],  # on a cell corner: the upper cell (1, 1)
                [0.2499999, 0.4999999, 0.5, 3.0],
                [1.999999, 0.999999, 0.999999, 4.0],  # just inside the top corner: last cell
                [2.0, 0.5, 0.5, 5.0],  # x == x_max: ignored
                [1.0, 1.0, 0.5, 6.0],  # y == y_max: ignored
                [1.0, 0.5, 1.0, 7.0],  # z == z_max: ignored
                [-1e-7, 0.5, 0.5, 8.0],  # just below x_min: ignored
            ]
        ]
    )
    count = rasterize(pts.to(device), ["count"], point_range=pr, cell_size=cs).cpu()[0, 0]
    assert count.shape == (2, 8)
    expected = torch.zeros(2, 8)
    expected[0, 0] = 2  # the corner point and the one just below the (1, 1) corner
    expected[1, 1] = 1
    expected[1, 7] = 1
    torch.testing.assert_close(count, expected, rtol=0, atol=0)
    expected_ref = reference.bev_rasterize(pts, pr, cs, ["count"])
    torch.testing.assert_close(count, expected_ref[0, 0], rtol=0, atol=0)


def test_range_that_is_not_whole_cells_drops_the_last_sliver(device):
    # 69.12 / 0.1 = 691.2 -> W = 691: x in [69.1, 69.12) is in the range but past the last cell.
    pr, cs = [0.0, -1.0, -3.0, 69.12, 1.0, 1.0], [0.1, 0.1]
    assert pointops.bev_grid_size(pr, cs) == (20, 691)
    pts = torch.tensor([[[69.05, 0.0, 0.0], [69.11, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    image = rasterize(pts.to(device), ["count"], point_range=pr, cell_size=cs).cpu()
    assert image.shape == (1, 1, 20, 691)
    assert image.sum() == 2 and image[0, 0, 10, 690] == 1 and image[0, 0, 10, 0] == 1
    torch.testing.assert_close(image, reference.bev_rasterize(pts, pr, cs, ["count"]), rtol=0, atol=0)


def test_nan_and_inf_points_are_ignored(device):
    pts = torch.tensor([[[NAN, 0.0, 0.0, 1.0], [0.0, INF, 0.0, 1.0], [0.0, 0.0, -INF, 1.0], [0.1, 0.1, 0.1, 5.0]]])
    image = rasterize(pts.to(device), ["count", "max_z", "top_feature"]).cpu()
    assert image[0, 0].sum() == 1 and image[0, 2].sum() == 5.0
    assert torch.isfinite(image).all()


def test_bad_features_are_sanitized(device):
    # NaN reads as 0, values beyond 2^30 are clamped; x, y, z channels are unaffected.
    pts = torch.tensor([[[0.1, 0.1, 0.5, NAN], [0.1, 0.1, 0.2, 3e9], [0.1, 0.1, 0.1, -INF]]])
    image = rasterize(pts.to(device), ["count", "max_z", "max_feature", "mean_feature", "top_feature"]).cpu()[
        0, :, 7, 8
    ]
    limit = 2.0**30
    assert image[:2].tolist() == [3.0, 0.5]
    assert image[2] == limit and image[4] == 0.0
    assert image[3].item() == pytest.approx((0.0 + limit - limit) / 3, abs=1e-6)


def test_top_feature_ties_go_to_the_lowest_index(device):
    pts = torch.tensor(
        [[[0.1, 0.1, 0.7, 1.0], [0.2, 0.1, 0.9, 2.0], [0.3, 0.1, 0.9, 3.0], [0.1, 0.1, 0.9, 4.0], [0.2, 0.1, 0.8, 5.0]]]
    )
    image = rasterize(pts.to(device), ["top_feature", "max_z", "count"]).cpu()[0, :, 7, 8]
    assert image.tolist() == [2.0, pytest.approx(0.9), 5.0]


def test_all_points_in_one_cell(device):
    n = 3000
    g = torch.Generator().manual_seed(5)
    pts = torch.rand(2, n, 4, generator=g) * torch.tensor([0.4, 0.3, 3.0, 50.0]) + torch.tensor([1.0, 1.0, -1.5, -25.0])
    lengths = torch.tensor([n, 17])
    image = rasterize(pts.to(device), ALL, lengths).cpu()
    nonempty = (image[:, ALL.index("count")] > 0).sum((1, 2))
    assert nonempty.tolist() == [1, 1]
    assert_matches_reference(image, reference.bev_rasterize(pts, RANGE, CELL, ALL, lengths, height_slices=SLICES), ALL)
    assert image[0, ALL.index("density")].max() == 1.0  # 3000 points >= 63: saturated


def test_density_follows_complex_yolo_for_every_count(device):
    # Counts 1..300 in 300 cells, against min(1, ln(n + 1) / ln(base)) for two bases.
    rows = []
    for k in range(300):
        rows += [[k % 20 + 0.5, k // 20 + 0.5, 0.0]] * (k + 1)
    pts = torch.tensor([rows])
    for base in (64.0, 1000.0):
        image = rasterize(
            pts.to(device),
            ["density", "count"],
            point_range=[0.0, 0.0, -1.0, 20.0, 20.0, 1.0],
            cell_size=[1.0, 1.0],
            density_base=base,
        ).cpu()[0]
        occupied = image[1] > 0
        assert sorted(image[1][occupied].tolist()) == list(range(1, 301))
        expected = torch.tensor([min(1.0, math.log(c + 1) / math.log(base)) for c in image[1][occupied].tolist()])
        torch.testing.assert_close(image[0][occupied], expected, **DENSITY_TOL)


@pytest.mark.parametrize("shape", [(0, 10, 4), (2, 0, 4)])
def test_empty_inputs(device, shape):
    image = rasterize(torch.rand(shape, device=device), ALL)
    assert image.shape == (shape[0], 9 + SLICES, 15, 16)
    assert (image == 0).all()


def test_lengths_are_clamped_and_empty_clouds_are_zero(device):
    points = scene(seed=3)
    lengths = torch.tensor([-5, 10_000, 0])
    image = rasterize(points.to(device), ALL, lengths).cpu()
    assert (image[0] == 0).all() and (image[2] == 0).all()
    assert_matches_reference(
        image, reference.bev_rasterize(points, RANGE, CELL, ALL, torch.tensor([0, 400, 0]), height_slices=SLICES), ALL
    )


def test_feature_column_choice(device):
    points = scene(seed=4)
    for column in (2, 4):
        expected = reference.bev_rasterize(points, RANGE, CELL, ["max_feature", "top_feature"], feature_column=column)
        actual = rasterize(points.to(device), ["max_feature", "top_feature"], feature_column=column)
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


def test_forward_up_is_the_rotated_image(device):
    points = scene(seed=6).to(device)
    canonical = rasterize(points, ALL)
    seed = rasterize(points, ALL, forward_up=True)
    torch.testing.assert_close(seed, canonical.transpose(-1, -2).flip(-1, -2), rtol=0, atol=0)


def test_height_image_is_seed_004(device):
    g = torch.Generator().manual_seed(7)
    cloud = torch.rand(2000, 3, generator=g) * torch.tensor([110.0, 110.0, 24.0]) - torch.tensor([5.0, 55.0, 7.0])
    cloud_range, voxel_size = [0.0, -50.0, -5.0, 100.0, 50.0, 15.0], [0.09765, 0.09765]
    image = pointops.height_image(cloud.unsqueeze(0).to(device), preset="long_range_1024")
    assert image.dtype == torch.uint8 and image.shape == (1, 1024, 1024)  # (grid_x, grid_y) as in the seed
    expected = reference.height_image(cloud.numpy(), cloud_range, voxel_size)
    assert np.array_equal(image[0].cpu().numpy(), expected)
    assert expected.max() > 200
    flat = pointops.height_image(cloud.unsqueeze(0).to(device), None, cloud_range, voxel_size, forward_up=False)
    assert torch.equal(flat, image.transpose(-1, -2).flip(-1, -2))


def test_repeated_runs_are_identical(device):
    points = scene(batch=2, n=3000, seed=8).to(device)
    first = rasterize(points, ALL)
    for _ in range(3):
        assert torch.equal(rasterize(points, ALL), first)


def test_presets_and_grid_sizes():
    assert pointops.bev_grid_size(preset="kitti") == (496, 432)
    assert pointops.bev_grid_size(preset="kitti_bev") == (800, 704)
    assert pointops.bev_grid_size(preset="nuscenes") == (512, 512)
    assert pointops.bev_grid_size(preset="waymo") == (470, 470)
    assert pointops.bev_grid_size(preset="long_range_1024") == (1024, 1024)
    assert pointops.bev_grid_size(preset="waymo", cell_size=[0.1, 0.1]) == (1504, 1504)
    for name in pointops.presets.BEV_PRESETS:
        point_range, cell_size = pointops.bev_preset(name)
        assert len(point_range) == 6 and len(cell_size) == 2
    with pytest.raises(ValueError, match="unknown BEV preset 'kitty'"):
        pointops.bev_preset("kitty")
    with pytest.raises(ValueError, match="point_range"):
        pointops.bev_rasterize(torch.rand(1, 4, 3), ["count"])


def test_wrapper_with_preset(device):
    points = scene(batch=2, seed=9).to(device) * 10
    image = pointops.bev_rasterize(points, ["max_z", "density"], preset="kitti")
    assert image.shape == (2, 2, 496, 432)
    explicit = rasterize(points, ["max_z", "density"], None, *pointops.bev_preset("kitti"))
    assert torch.equal(image, explicit)


def bad(device, **overrides):
    args = dict(
        points=torch.rand(2, 5, 4, device=device),
        lengths=None,
        point_range=RANGE,
        cell_size=CELL,
        channels=["max_z"],
        feature_column=3,
        density_base=64.0,
        height_slices=0,
        forward_up=False,
    )
    args.update(overrides)
    return lambda: torch.ops.pointops.bev_rasterize(*args.values())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(points=torch.rand(5, 4)), r"points must have shape \(B, N, C\)"),
        (dict(points=torch.rand(2, 5, 2)), r"C >= 3"),
        (dict(points=torch.ones(2, 5, 4, dtype=torch.int32)), "points must be float32"),
        (dict(lengths=torch.tensor([5])), r"lengths must have shape \[2\]"),
        (dict(lengths=torch.tensor([5, 5], dtype=torch.int32)), "lengths must be Long"),
        (dict(point_range=[0.0, 0.0, 0.0, 1.0, 1.0]), r"point_range must be \[x_min.*got 5 values"),
        (dict(point_range=[0.0, 0.0, 0.0, -1.0, 1.0, 1.0]), r"min < max on every axis, got x in \[0, -1\)"),
        (dict(point_range=[0.0, 0.0, NAN, 1.0, 1.0, 1.0]), "point_range must be finite"),
        (dict(cell_size=[0.1]), r"cell_size must be \[dx, dy\]"),
        (dict(cell_size=[0.1, 0.0]), "cell_size must be finite and > 0"),
        (dict(cell_size=[100.0, 0.1]), "cells along x"),
        (dict(channels=[]), "channels must name at least one"),
        (dict(channels=["max_z", "height"]), "unknown channel 'height'; expected one of max_z, min_z"),
        (dict(channels=["count", "count"]), "'count' is named twice"),
        (dict(channels=["height_slices"]), "height_slices must be between 1 and 1024"),
        (dict(channels=["max_z"], height_slices=-1), "height_slices must be >= 0"),
        (dict(channels=["top_feature"], feature_column=4), r"feature_column must be in \[0, 4\)"),
        (dict(channels=["density"], density_base=1.0), "density_base must be finite and > 1"),
    ],
)
def test_bad_arguments_raise_clear_errors(device, overrides, message):
    overrides = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in overrides.items()}
    with pytest.raises(RuntimeError, match=message):
        bad(device, **overrides)()


# ---------------------------------------------------------------------------------------------
# pillar scatter


def pillars(batch=3, count=300, channels=6, height=20, width=30, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, count, channels, generator=g).to(dtype)
    coords = torch.stack(
        [
            torch.zeros(batch, count, dtype=torch.int32),
            torch.randint(-2, height + 2, (batch, count), generator=g, dtype=torch.int32),
            torch.randint(-2, width + 2, (batch, count), generator=g, dtype=torch.int32),
        ],
        -1,
    )
    coords[0, 7, 0] = 1  # a second z layer: ignored
    coords[0, :40] = coords[0, 40:80]  # duplicates: the lower index must win
    num_voxels = torch.tensor(([count, count // 2, 0] + [count] * batch)[:batch], dtype=torch.int64)
    return features, coords, num_voxels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_pillar_scatter_matches_reference(device, dtype):
    features, coords, num_voxels = pillars(dtype=dtype)
    expected = reference.pillar_scatter(features, coords, num_voxels, 20, 30)
    actual = torch.ops.pointops.pillar_scatter(features.to(device), coords.to(device), num_voxels.to(device), 20, 30)
    assert actual.dtype == dtype and actual.shape == (3, 6, 20, 30)
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


def test_pillar_scatter_lowest_index_wins_a_shared_cell(device):
    features = torch.arange(12, dtype=torch.float32).reshape(1, 4, 3)
    coords = torch.tensor([[[0, 1, 2], [0, 0, 0], [0, 1, 2], [0, 0, 0]]], dtype=torch.int32)
    num_voxels = torch.tensor([4], dtype=torch.int64)
    canvas = pointops.pillar_scatter(features.to(device), coords.to(device), num_voxels.to(device), 2, 3).cpu()
    assert canvas[0, :, 1, 2].tolist() == [0.0, 1.0, 2.0]
    assert canvas[0, :, 0, 0].tolist() == [3.0, 4.0, 5.0]
    assert canvas.sum() == 15.0


def test_pillar_scatter_ignores_padding_and_outside_cells(device):
    features = torch.ones(1, 5, 2)
    coords = torch.tensor([[[0, 0, 0], [0, -1, 0], [0, 0, 3], [1, 1, 1], [0, 1, 1]]], dtype=torch.int32)
    canvas = pointops.pillar_scatter(
        features.to(device), coords.to(device), torch.tensor([4], device=device), 2, 3
    ).cpu()
    assert canvas.sum() == 2 and canvas[0, :, 0, 0].tolist() == [1.0, 1.0]  # pillar 4 is padding


@pytest.mark.parametrize("shape", [(0, 5, 4), (2, 0, 4), (2, 5, 0)])
def test_pillar_scatter_empty_inputs(device, shape):
    features = torch.rand(shape, device=device)
    coords = torch.zeros(shape[0], shape[1], 3, dtype=torch.int32, device=device)
    num_voxels = torch.full((shape[0],), shape[1], dtype=torch.int64, device=device)
    canvas = torch.ops.pointops.pillar_scatter(features, coords, num_voxels, 4, 6)
    assert canvas.shape == (shape[0], shape[2], 4, 6)
    if shape[1] == 0:
        assert (canvas == 0).all()


def test_pillar_scatter_grid_from_preset(device):
    features, coords, num_voxels = pillars(batch=1, height=496, width=432)
    canvas = pointops.pillar_scatter(features.to(device), coords.to(device), num_voxels.to(device), preset="kitti")
    assert canvas.shape == (1, 6, 496, 432)
    with pytest.raises(ValueError, match="height and width"):
        pointops.pillar_scatter(features, coords, num_voxels)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            (torch.rand(5, 4), torch.zeros(5, 3, dtype=torch.int32), torch.zeros(1, dtype=torch.int64), 4, 4),
            r"features must have shape \(B, P, F\)",
        ),
        (
            (torch.rand(1, 5, 4), torch.zeros(1, 5, 3, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), 4, 4),
            "coords must be Int",
        ),
        (
            (torch.rand(1, 5, 4), torch.zeros(1, 5, 4, dtype=torch.int32), torch.zeros(1, dtype=torch.int64), 4, 4),
            r"coords must have shape \[1, 5, 3\]",
        ),
        (
            (torch.rand(1, 5, 4), torch.zeros(1, 5, 3, dtype=torch.int32), torch.zeros(2, dtype=torch.int64), 4, 4),
            r"num_voxels must have shape \[1\]",
        ),
        (
            (torch.rand(1, 5, 4), torch.zeros(1, 5, 3, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), 4, 4),
            "num_voxels must be Long",
        ),
        (
            (torch.rand(1, 5, 4), torch.zeros(1, 5, 3, dtype=torch.int32), torch.zeros(1, dtype=torch.int64), -1, 4),
            "height must be >= 0, got -1",
        ),
        (
            (
                torch.ones(1, 5, 4, dtype=torch.int32),
                torch.zeros(1, 5, 3, dtype=torch.int32),
                torch.zeros(1, dtype=torch.int64),
                4,
                4,
            ),
            "features must be float32",
        ),
    ],
)
def test_pillar_scatter_bad_arguments(device, args, message):
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pointops.pillar_scatter(*args)


# ---------------------------------------------------------------------------------------------
# CUDA == CPU, bit for bit, at sizes that exercise contention and many blocks


# Every channel, the sums, and subsets whose records hold only some fields (the KITTI channels; no
# top key; top key and min_z; max_feature alone); a grid of 704 x 800 cells (whole 32-cell bitmap
# words per cloud) and one of 542 x 471 (a cloud's last word is partial).
SUBSETS = [
    ["max_z", "top_feature", "density"],
    ["occupancy", "min_z", "max_feature", "count"],
    ["top_feature", "min_z", "max_z"],
    ["max_feature"],
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("forward_up", [False, True])
@pytest.mark.parametrize("channels", [ALL, ["mean_z", "min_z", "mean_feature", "count"], *SUBSETS])
@pytest.mark.parametrize("cell_size", [[0.1, 0.1], [0.13, 0.17]])
def test_cuda_equals_cpu(dtype, forward_up, channels, cell_size):
    from pointops.scenes.lidar import sampled_street

    clouds = torch.stack([sampled_street(60_000, seed=s) for s in range(3)])
    intensity = (clouds.norm(dim=-1, keepdim=True) / 40).clamp(max=1)
    points = torch.cat([clouds, intensity, -intensity * 1e3], -1).to(dtype)
    points[0, :50, 3] = NAN
    lengths = torch.tensor([60_000, 31_000, 0])
    kw = dict(
        point_range=[0.0, -40.0, -3.0, 70.4, 40.0, 1.0], cell_size=cell_size, height_slices=35, forward_up=forward_up
    )
    for column in (3, 4):
        expected = rasterize(points, channels, lengths, feature_column=column, **kw)
        actual = rasterize(points.cuda(), channels, lengths, feature_column=column, **kw)
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.cuda
def test_cuda_equals_cpu_when_each_block_ranks_several_tiles():
    # 2 x 3600 x 3600 cells are ~810k bitmap words: a block of the rank phase scans more than one
    # 512-word tile (about three with 528 resident blocks), and one tile straddles the two clouds.
    g = torch.Generator().manual_seed(3)
    points = torch.rand(2, 150_000, 4, generator=g) * torch.tensor([360.0, 360.0, 4.0, 1.0])
    points[..., 2] -= 3.0
    points[:, :50_000, :2] *= 0.01  # a dense corner: fully occupied words
    kw = dict(point_range=[0.0, 0.0, -3.0, 360.0, 360.0, 1.0], cell_size=[0.1, 0.1])
    lengths = torch.tensor([150_000, 90_000])
    channels = ["max_z", "top_feature", "density"]
    expected = rasterize(points, channels, lengths, **kw)
    actual = rasterize(points.cuda(), channels, lengths, **kw)
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.cuda
def test_cuda_repeated_runs_are_identical():
    points = scene(batch=4, n=200_000, seed=10)
    points[..., :3] *= torch.tensor([0.2, 0.2, 1.0])  # a dense core: heavy atomic contention
    points = points.cuda()
    # the finer grid is mostly empty cells
    for channels, cell_size in ((ALL, CELL), *((channels, [0.005, 0.01]) for channels in SUBSETS)):
        first = rasterize(points, channels, cell_size=cell_size)
        for _ in range(5):
            assert torch.equal(rasterize(points, channels, cell_size=cell_size), first)


@pytest.mark.cuda
def test_cuda_pillar_scatter_equals_cpu():
    features, coords, num_voxels = pillars(batch=4, count=12_000, channels=64, height=496, width=432, seed=3)
    expected = torch.ops.pointops.pillar_scatter(features, coords, num_voxels, 496, 432)
    actual = torch.ops.pointops.pillar_scatter(features.cuda(), coords.cuda(), num_voxels.cuda(), 496, 432)
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.cuda
def test_cuda_mixed_devices_raise():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.pointops.bev_rasterize(
            torch.rand(2, 5, 4, device="cuda"), torch.tensor([5, 5]), RANGE, CELL, ["count"]
        )
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.pointops.pillar_scatter(
            torch.rand(1, 5, 4, device="cuda"),
            torch.zeros(1, 5, 3, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32, device="cuda"),
            4,
            4,
        )
