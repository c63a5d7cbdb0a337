"""PPFMatcher on degenerate input: invalid model points are as if absent, degenerate models are
refused at construction, empty or all-invalid scenes are results, max_instances is checked and the
range image's memory is bounded (pointops/ppf/validation.py)."""

import pytest
import torch

from pointops.ppf.matcher import PPFMatcher, range_image
from tests.test_ppf import two_instance_scene

CONFIG = dict(tau_d=0.07, hypotheses=3, icp_iterations=3)


@pytest.fixture(scope="module")
def scene():
    return two_instance_scene()


@pytest.fixture(scope="module")
def matcher(scene):
    mp, mn, _, _, _ = scene
    return PPFMatcher(mp, mn, **CONFIG)


def _equal(a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("bad", ["nan_point", "inf_point", "nan_normal"])
def test_invalid_model_rows_match_as_if_absent(scene, matcher, bad):
    mp, mn, sp, sn, _ = scene
    holes = torch.tensor([0, 17, 1200, 2999])
    p, n = mp.clone(), mn.clone()
    if bad == "nan_point":
        p[holes, 1] = float("nan")
    elif bad == "inf_point":
        p[holes, 0] = float("inf")
    else:
        n[holes, 2] = float("nan")
    keep = torch.ones(mp.shape[0], dtype=torch.bool)
    keep[holes] = False
    with_holes = PPFMatcher(p, n, **CONFIG)
    without = PPFMatcher(mp[keep], mn[keep], **CONFIG)
    assert torch.isfinite(with_holes.center).all()
    torch.testing.assert_close(with_holes.center, without.center, rtol=0, atol=0)
    a = with_holes.match(sp, sn, max_instances=2)
    b = without.match(sp, sn, max_instances=2)
    _equal(a, b)
    assert (a.scores > 0.2).all()


def test_invalid_rows_of_a_model_without_normals_are_absent_too(scene):
    mp, _, _, _, _ = scene
    p = mp.clone()
    p[5] = float("nan")
    keep = torch.arange(mp.shape[0]) != 5
    a, b = PPFMatcher(p, **CONFIG), PPFMatcher(mp[keep], **CONFIG)
    torch.testing.assert_close(a.model.normals, b.model.normals, rtol=0, atol=0)
    torch.testing.assert_close(a.center, b.center, rtol=0, atol=0)


@pytest.mark.parametrize(
    "points, says",
    [
        (torch.zeros(0, 3), "0 distinct valid points"),
        (torch.tensor([[1.0, 2.0, 3.0]]), "1 distinct valid points"),
        (torch.tensor([[1.0, 2.0, 3.0]] * 50), "1 distinct valid points"),
        (torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]] * 10), "2 distinct valid points"),
        (torch.full((30, 3), float("nan")), "0 distinct valid points"),
        (torch.tensor([[0.0, 0.0, 0.0], [1e-38, 0.0, 0.0], [0.0, 1e-38, 0.0]]), "is not a positive float32"),
    ],
)
def test_degenerate_models_are_refused_at_construction(points, says):
    with pytest.raises(ValueError, match=says) as error:
        PPFMatcher(points, torch.ones_like(points), **CONFIG)
    assert "voxel_size" not in str(error.value)


def test_one_degenerate_model_of_a_batch_is_named(scene):
    mp, mn, _, _, _ = scene
    points = torch.stack([mp[:100], mp[:100]])
    points[1] = points[1, :1]  # 100 copies of one point
    with pytest.raises(ValueError, match="model 1 has 1 distinct"):
        PPFMatcher(points, torch.stack([mn[:100]] * 2), **CONFIG)
    lengths = torch.tensor([100, 2])
    with pytest.raises(ValueError, match="model 1 has 2 distinct"):
        PPFMatcher(torch.stack([mp[:100]] * 2), torch.stack([mn[:100]] * 2), lengths, **CONFIG)


def test_model_arguments_are_checked():
    p = torch.rand(40, 3)
    with pytest.raises(ValueError, match="model_points must have shape"):
        PPFMatcher(torch.rand(40, 2))
    with pytest.raises(ValueError, match="model_points must be float32"):
        PPFMatcher(torch.randint(0, 9, (40, 3)))
    with pytest.raises(ValueError, match="model_normals must have the shape of model_points"):
        PPFMatcher(p, torch.rand(39, 3))
    with pytest.raises(ValueError, match="model_lengths must be an int64 tensor of shape"):
        PPFMatcher(p, model_lengths=torch.tensor([40, 3]))
    with pytest.raises(ValueError, match="model_normals must be on the device"):
        PPFMatcher(p, p.to("meta"))
    with pytest.raises(TypeError, match="model_points must be a torch.Tensor"):
        PPFMatcher([[0.0, 0.0, 0.0]] * 5)


@pytest.mark.parametrize("kind", ["empty", "all_nan", "nan_normals", "zero_lengths", "batch_empty"])
def test_empty_or_invalid_scenes_return_no_instance(matcher, kind):
    normals = None
    lengths = None
    if kind == "empty":
        points = torch.zeros(0, 3)
    elif kind == "all_nan":
        points = torch.full((500, 3), float("nan"))
    elif kind == "nan_normals":
        points = torch.rand(500, 3) + 2
        normals = torch.full((500, 3), float("nan"))
    elif kind == "zero_lengths":
        points = torch.rand(2, 500, 3) + 2
        lengths = torch.tensor([0, 0])
    else:
        points = torch.zeros(3, 0, 3)
    out = matcher.match(points, normals, lengths, max_instances=2)
    scenes = 1 if points.dim() == 2 else points.shape[0]
    assert out.poses.shape == (scenes, 1, 2, 4, 4)
    assert torch.isnan(out.poses).all()
    assert (out.scores == 0).all() and (out.votes == 0).all()


def test_a_scene_of_only_invalid_points_next_to_a_real_one(scene, matcher):
    _, _, sp, sn, _ = scene
    nan = torch.full_like(sp, float("nan"))
    out = matcher.match(torch.stack([sp, nan]), torch.stack([sn, sn]), max_instances=1)
    assert out.scores[0, 0, 0] > 0.2
    assert torch.isnan(out.poses[1]).all() and (out.scores[1] == 0).all()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_max_instances_is_checked(matcher, value):
    with pytest.raises(ValueError, match="max_instances must be an int >= 1"):
        matcher.match(torch.rand(100, 3) + 2, max_instances=value)


def test_scene_arguments_are_checked(matcher):
    with pytest.raises(ValueError, match="scene_points must have shape"):
        matcher.match(torch.rand(100, 2))
    with pytest.raises(ValueError, match="scene_normals must have the shape of scene_points"):
        matcher.match(torch.rand(100, 3), torch.rand(99, 3))
    with pytest.raises(ValueError, match="scene_lengths must be an int64 tensor of shape"):
        matcher.match(torch.rand(2, 100, 3), scene_lengths=torch.tensor([5]))
    with pytest.raises(ValueError, match="scene_points must be on the matcher's device"):
        matcher.match(torch.rand(100, 3, device="meta"))


def test_range_image_of_points_far_apart_is_bounded():
    """Three points 1 km apart around a close median once asked for a 408 GB image: the image has
    cells x cells cells per scene whatever the points, and the point on the optical axis is drawn."""
    points = torch.tensor([[0.0, 0.0, 1.0], [1000.0, 0.0, 1.0], [0.0, 1000.0, -1000.0]])
    image = range_image(points, 0.0007, cells=256)
    assert image.ranges.shape == (1, 256 * 256) and image.cells == 256
    centre = 128 * 256 + 128
    assert float(image.ranges[0, centre]) == 1.0
    assert int(torch.isfinite(image.ranges).sum()) >= 1


def test_scene_points_far_apart_match_without_a_huge_image(matcher):
    points = torch.tensor([[0.0, 0.0, 1.0], [1000.0, 0.0, 1.0], [0.0, 1000.0, -1000.0]])
    out = matcher.match(points, max_instances=1)
    assert out.scores.shape == (1, 1, 1)
