"""What a user passes that the ops themselves never see (docs/api.md): arrays where tensors go are
refused the same way everywhere, one number is a per-axis size, an unbatched cloud is named by the
argument the user passed, detected planes share the ground truth's sign, and NaN-padded results
compare as the docs say."""

import numpy as np
import pytest
import torch

import pointops
from pointops.scenes import lidar

P = torch.rand(1, 64, 3)
EDGES = torch.zeros(1, 32, 32, dtype=torch.bool)
EDGES[0, 8, 4:28] = True

# (function, the arguments with the tensor to replace, that argument's position, its name)
CALLS = {
    "farthest_point_sampling": (lambda x: pointops.farthest_point_sampling(x, 4), "points"),
    "farthest_point_sampling_packed": (
        lambda x: pointops.farthest_point_sampling_packed(x, torch.tensor([0, 64]), 4),
        "points",
    ),
    "sample_farthest_points": (lambda x: pointops.sample_farthest_points(x, K=4), "points"),
    "bev_rasterize": (lambda x: pointops.bev_rasterize(x, ["max_z"], preset="kitti"), "points"),
    "height_image": (lambda x: pointops.height_image(x, preset="kitti"), "points"),
    "voxelize": (lambda x: pointops.voxelize(x, 0.25, [0, 0, 0, 1, 1, 1], 4, 16), "points"),
    "voxelize_dynamic": (lambda x: pointops.voxelize_dynamic(x, 0.25, [0, 0, 0, 1, 1, 1]), "points"),
    "hough_planes": (lambda x: pointops.hough_planes(x, 0.2, 5.0), "points"),
    "plane_labels": (lambda x: pointops.plane_labels(x, torch.tensor([[[0.0, 0, 1, 0]]]), 0.1), "points"),
    "detect_planes": (lambda x: pointops.detect_planes(x, 2), "points"),
    "knn": (lambda x: pointops.knn(x, P, 2), "queries"),
    "ball_query": (lambda x: pointops.ball_query(P, x, 0.1, 4), "points"),
    "three_nn": (lambda x: pointops.three_nn(x, P), "queries"),
    "voxel_downsample": (lambda x: pointops.voxel_downsample(x, 0.25), "points"),
    "estimate_normals": (lambda x: pointops.estimate_normals(x, 4), "points"),
    "icp": (lambda x: pointops.icp(x, P, 0.5, method="point_to_point"), "sources"),
    "transform_points": (lambda x: pointops.transform_points(x, torch.eye(4)[None, None]), "points"),
    "edge_points": (lambda x: pointops.edge_points(x), "edges"),
    "hough_circles": (lambda x: pointops.hough_circles(x, [5]), "edges"),
    "detect_circles": (lambda x: pointops.detect_circles(x, [5, 6], 2), "edges"),
    "hough_lines": (lambda x: pointops.hough_lines(x), "edges"),
    "detect_lines": (lambda x: pointops.detect_lines(x, 2), "edges"),
    "ppf_model": (lambda x: pointops.ppf_model(x, P, 0.05), "points"),
    "PPFMatcher": (lambda x: pointops.PPFMatcher(x[0], None), "model_points"),
}


def _tensor_for(name):
    return EDGES if "edge" in name or "circles" in name or "lines" in name else P


@pytest.mark.parametrize("name", sorted(CALLS))
def test_arrays_are_refused_by_name(name):
    call, argument = CALLS[name]
    array = _tensor_for(name).numpy()
    if name == "PPFMatcher":
        array = array[None]
    with pytest.raises(TypeError) as error:
        call(array)
    message = str(error.value)
    assert message.startswith(f"{argument} must be a torch.Tensor"), message
    assert f"got numpy.ndarray: pass torch.from_numpy({argument})" in message, message
    with pytest.raises(TypeError, match=f"{argument} must be a torch.Tensor.*got list: pass torch.tensor"):
        call(_tensor_for(name).tolist())


@pytest.mark.parametrize("size", [0.25, 1, np.float32(0.25)])
def test_one_number_is_every_axis(size):
    cube = [float(size)] * 3
    ours = pointops.voxel_downsample(P, size)
    assert torch.equal(ours.points, pointops.voxel_downsample(P, cube).points)
    box = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert torch.equal(pointops.voxelize(P, size, box, 4, 64).coords, pointops.voxelize(P, cube, box, 4, 64).coords)
    assert torch.equal(
        pointops.voxelize_dynamic(P, size, box).point_voxel, pointops.voxelize_dynamic(P, cube, box).point_voxel
    )
    square = [float(size)] * 2
    assert torch.equal(
        pointops.bev_rasterize(P, ["count"], point_range=box, cell_size=size),
        pointops.bev_rasterize(P, ["count"], point_range=box, cell_size=square),
    )
    assert torch.equal(
        pointops.height_image(P, point_range=box, cell_size=size),
        pointops.height_image(P, point_range=box, cell_size=square),
    )
    assert pointops.bev_grid_size(box, size) == pointops.bev_grid_size(box, square)


def test_one_number_under_torchscript():
    scripted = torch.jit.script(pointops.voxel_downsample)
    assert torch.equal(scripted(P, 0.25).points, pointops.voxel_downsample(P, [0.25, 0.25, 0.25]).points)
    assert torch.equal(scripted(P, [0.25, 0.25, 0.25]).points, pointops.voxel_downsample(P, 0.25).points)
    scripted = torch.jit.script(pointops.bev_rasterize)
    box = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert torch.equal(scripted(P, ["count"], None, box, 0.25), pointops.bev_rasterize(P, ["count"], None, box, 0.25))


def test_a_wrong_number_of_sizes_is_still_named():
    with pytest.raises(RuntimeError, match="voxel_size must have 3 values"):
        pointops.voxel_downsample(P, [0.1, 0.1])


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda x: pointops.estimate_normals(x, 4), "points"),
        (lambda x: pointops.icp(x, P, 0.5, method="point_to_point"), "sources"),
        (lambda x: pointops.icp(P, x, 0.5, method="point_to_point"), "targets"),
        (lambda x: pointops.group_points(x, torch.zeros(1, 8, 2, dtype=torch.int64)), "features"),
    ],
)
def test_an_unbatched_cloud_is_named_by_its_argument(call, argument):
    """These wrappers pass their clouds on to other ops (estimate_normals' points are the kNN
    search's queries): the message names the argument the user passed."""
    with pytest.raises(ValueError) as error:
        call(P[0])
    assert str(error.value).startswith(f"{argument} must have shape (B, "), str(error.value)
    assert str(error.value).endswith(f"got [64, 3]: a single cloud is {argument}[None]"), str(error.value)


def test_detected_planes_have_the_ground_truths_sign():
    scans = [lidar.lidar_scan(lidar.make_scene(seed), n_beams=16, n_azimuth=512, seed=seed) for seed in (3, 5)]
    for scan in scans:
        det = pointops.detect_planes(scan.points[None], 8, n_phi=45, n_theta=45, iterations=2)
        planes = det.planes[0][torch.isfinite(det.planes[0, :, 3])]
        assert len(planes) >= 3 and (planes[:, 3] >= 0).all(), planes
        assert (scan.planes[:, 3] >= 0).all()
        # every detected plane that matches a ground-truth one matches it with the same sign
        score = lidar.evaluate_planes(planes, scan.planes, scan.labels)
        for i, match in enumerate(score.matched.tolist()):
            if match >= 0:
                assert float(planes[i, :3].double() @ scan.planes[match, :3].double()) > 0.99


def test_nan_padded_results_compare_as_documented():
    scan = lidar.lidar_scan(lidar.make_scene(3), n_beams=16, n_azimuth=512, seed=3)
    a = pointops.detect_planes(scan.points[None], 16)
    b = pointops.detect_planes(scan.points[None], 16)
    assert torch.isnan(a.planes).any(), "the example needs NaN rows"
    assert not torch.equal(a.planes, b.planes)  # what surprises: identical results, NaN != NaN
    assert torch.equal(a.planes.nan_to_num(), b.planes.nan_to_num())
    torch.testing.assert_close(a.planes, b.planes, rtol=0, atol=0, equal_nan=True)
