"""Synthetic scenes: determinism, ground truth that the points obey, noise/dropout/clutter rates,
batching, and the plane-detection score. Scans are kept small (16 x 512 rays) so the file is quick."""

import math

import pytest
import torch

import pointops
from pointops import scenes
from pointops.io import Mesh, PointCloud
from pointops.scenes import lidar

SMALL = dict(n_beams=16, n_azimuth=512)


def plane_residuals(scan):
    """|n . x - d| of every plane-labelled point against its own plane, in float64."""
    on = scan.labels >= 0
    planes = scan.planes.double()[scan.labels[on]]
    return ((scan.points.double()[on] * planes[:, :3]).sum(1) - planes[:, 3]).abs()


def to_world(scan):
    pose = scan.pose.double()
    return scan.points.double() @ pose[:3, :3].T + pose[:3, 3]


def test_same_seed_same_scan_and_other_seeds_differ():
    a = lidar.lidar_scan(lidar.make_scene(5), clutter=0.1, dropout=0.1, seed=5, **SMALL)
    b = lidar.lidar_scan(lidar.make_scene(5), clutter=0.1, dropout=0.1, seed=5, **SMALL)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    other_scene = lidar.make_scene(6)
    assert not torch.equal(other_scene.planes, lidar.make_scene(5).planes)
    other_noise = lidar.lidar_scan(lidar.make_scene(5), clutter=0.1, dropout=0.1, seed=6, **SMALL)
    assert not torch.equal(a.points, other_noise.points)
    assert torch.equal(a.planes, other_noise.planes)


def test_scene_layout():
    scene = lidar.make_scene(0, n_walls=2, n_boxes=3, n_poles=4)
    assert scene.planes.shape == (1 + 2 + 5 * 3, 4) and scene.pole_radius.shape == (4,)
    assert scene.object_kind == ("ground",) + ("wall",) * 2 + ("box",) * 3 + ("pole",) * 4
    assert torch.allclose(scene.planes[:, :3].norm(dim=1), torch.ones(18, dtype=torch.float64))
    assert scene.planes[0, 2] > math.cos(math.radians(2.0))  # tilt within max_tilt_deg
    assert (scene.planes[1:3, 2].abs() < 1e-12).all()  # walls are vertical
    assert scene.ground_height(torch.zeros(2, dtype=torch.float64)) == 0


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_labelled_points_lie_on_their_planes(noise):
    scan = lidar.lidar_scan(lidar.make_scene(1), range_noise=noise, seed=1, **SMALL)
    residual = plane_residuals(scan)
    assert residual.numel() > 1000
    if noise == 0:
        assert residual.max() < 1e-4  # float32 rounding of coordinates up to 100 m
    else:
        assert residual.max() < 5 * noise
        assert 0.3 * noise < residual.std() < noise  # noise along the ray, seen at an angle


def test_planes_are_in_hessian_form_in_the_sensor_frame():
    scene = lidar.make_scene(2)
    scan = lidar.lidar_scan(scene, sensor_height=1.8, range_noise=0.0, **SMALL)
    n, d = scan.planes[:, :3], scan.planes[:, 3]
    assert torch.allclose(n.norm(dim=1), torch.ones(len(n)))
    assert (d >= 0).all()
    # The sensor stands 1.8 m above the ground, vertically: its distance to the tilted ground is 1.8 cos(tilt).
    up = scene.planes[0, :3]
    assert torch.allclose(scan.planes[0], torch.cat([-up, 1.8 * up[2:]]).float(), atol=1e-6)
    assert torch.allclose(scan.pose[:3, 3], torch.tensor([0, 0, 1.8]))


def test_points_lie_inside_their_patches_and_on_their_poles():
    scene = lidar.make_scene(3)
    scan = lidar.lidar_scan(scene, range_noise=0.0, n_beams=32, n_azimuth=1024)
    world = to_world(scan)
    on = scan.labels > 0  # the ground is unbounded
    rel = world[on] - scene.plane_center[scan.labels[on]]
    a = (rel * scene.plane_u[scan.labels[on]]).sum(1).abs()
    b = (rel * scene.plane_v[scan.labels[on]]).sum(1).abs()
    half = scene.plane_half[scan.labels[on]]
    assert on.sum() > 100
    assert (a <= half[:, 0] + 1e-4).all() and (b <= half[:, 1] + 1e-4).all()

    pole_rows = torch.nonzero(scan.instance >= 0)[:, 0]
    is_pole = [scene.object_kind[i] == "pole" for i in scan.instance[pole_rows]]
    pole_rows = pole_rows[torch.tensor(is_pole, dtype=torch.bool)]
    assert pole_rows.numel() > 10 and (scan.labels[pole_rows] == -1).all()
    pole = scan.instance[pole_rows] - scene.pole_object[0]
    radial = (world[pole_rows, :2] - scene.pole_center[pole]).norm(dim=1)
    top = (world[pole_rows, 2] - scene.pole_z[pole, 1]).abs() < 1e-4
    assert ((radial - scene.pole_radius[pole]).abs() < 1e-4)[~top].all()
    assert (radial <= scene.pole_radius[pole] + 1e-4).all()


def test_ground_holds_a_large_share_and_ranges_respect_max_range():
    scan = lidar.lidar_scan(lidar.make_scene(4), max_range=60.0, clutter=0.1, **SMALL)
    assert (scan.labels == 0).float().mean() > 0.4
    assert scan.points.norm(dim=1).max() <= 60.0
    assert ((scan.intensity >= 0) & (scan.intensity <= 1)).all()
    assert scan.points.dtype == scan.intensity.dtype == torch.float32
    assert scan.labels.dtype == scan.instance.dtype == scan.ray.dtype == torch.int64


def test_returns_come_in_ray_order_with_their_beam_elevation():
    scan = lidar.lidar_scan(lidar.make_scene(4), range_noise=0.0, n_beams=8, n_azimuth=64, vertical_fov=(-20, 0))
    assert (scan.ray[1:] > scan.ray[:-1]).all()
    beam, step = scan.ray // 64, scan.ray % 64
    p = scan.points.double()
    elevation = torch.atan2(p[:, 2], p[:, :2].norm(dim=1))
    azimuth = torch.atan2(p[:, 1], p[:, 0]) % (2 * math.pi)
    assert torch.allclose(elevation, torch.deg2rad(-20 + beam * 20 / 7.0).double(), atol=1e-5)
    assert torch.allclose(azimuth, step.double() * (2 * math.pi / 64), atol=1e-5)


def test_dropout_removes_that_fraction():
    scene = lidar.make_scene(7)
    full = lidar.lidar_scan(scene, seed=3, **SMALL)
    dropped = lidar.lidar_scan(scene, seed=3, dropout=0.3, **SMALL)
    assert abs(dropped.points.shape[0] / full.points.shape[0] - 0.7) < 0.03
    assert set(dropped.ray.tolist()) <= set(full.ray.tolist())
    assert lidar.lidar_scan(scene, dropout=1.0, **SMALL).points.shape[0] == 0


def test_clutter_is_that_fraction_and_off_the_planes():
    scene = lidar.make_scene(8)
    clean = lidar.lidar_scan(scene, seed=4, range_noise=0.02, **SMALL)
    noisy = lidar.lidar_scan(scene, seed=4, range_noise=0.02, clutter=0.1, **SMALL)
    n = clean.points.shape[0]
    assert noisy.points.shape[0] == n + round(0.1 * n)
    assert torch.equal(noisy.points[:n], clean.points)
    extra = noisy.points[n:].double()
    assert (noisy.labels[n:] == -1).all() and (noisy.instance[n:] == -1).all()
    # On a plane's patch (within 3 sigma of it, inside its bounds) only by chance.
    world = to_world(noisy)[n:, None, :]
    gap = ((world * scene.planes[:, :3]).sum(2) - scene.planes[:, 3]).abs()
    rel = world - scene.plane_center
    inside = ((rel * scene.plane_u).sum(2).abs() <= scene.plane_half[:, 0]) & (
        (rel * scene.plane_v).sum(2).abs() <= scene.plane_half[:, 1]
    )
    assert ((gap < 0.06) & inside).any(1).float().mean() < 0.05
    assert extra.norm(dim=1).max() <= 100.0


def test_depth_camera_looks_along_z_and_sees_a_box():
    scene = lidar.make_scene(3)
    box = scene.plane_center[scene.plane_object == scene.object_kind.index("box")].mean(0)
    yaw = math.degrees(math.atan2(box[1], box[0]))
    scan = lidar.depth_camera_scan(scene, width=80, height=60, yaw=yaw, pitch=-5, max_range=40.0, range_noise=0.0)
    assert scan.points.shape[0] > 0.5 * 80 * 60
    assert (scan.points[:, 2] > 0).all()
    assert scan.ray.unique().numel() == scan.ray.numel() and scan.ray.max() < 80 * 60
    assert plane_residuals(scan).max() < 1e-4
    assert (scan.planes[:, 3] >= 0).all()
    kinds = {scene.object_kind[i] for i in scan.instance.tolist()}
    assert {"ground", "box"} <= kinds
    # Pixel (row, col) looks through its centre: x / z and y / z follow the pinhole model.
    focal = 40 / math.tan(math.radians(35))
    row, col = scan.ray // 80, scan.ray % 80
    p = scan.points.double()
    assert torch.allclose(p[:, 0] / p[:, 2] * focal + 40, col.double() + 0.5, atol=1e-3)
    assert torch.allclose(p[:, 1] / p[:, 2] * focal + 30, row.double() + 0.5, atol=1e-3)
    # The world frame agrees: the sensor frame maps back onto the scene's own planes.
    world = to_world(scan)
    on = scan.labels >= 0
    planes = scene.planes[scan.labels[on]]
    assert ((world[on] * planes[:, :3]).sum(1) - planes[:, 3]).abs().max() < 1e-4


def test_batch_pads_like_pointops():
    seeds = [0, 1, 2]
    batch = lidar.batch_scenes(seeds, clutter=0.05, **SMALL)
    assert batch.points.shape[0] == 3 and batch.lengths.dtype == torch.int64
    assert batch.points.shape[1] == int(batch.lengths.max())
    for b, seed in enumerate(seeds):
        scan = lidar.lidar_scan(lidar.make_scene(seed), clutter=0.05, seed=seed, **SMALL)
        n = scan.points.shape[0]
        assert batch.lengths[b] == n
        assert torch.equal(batch.points[b, :n], scan.points) and (batch.points[b, n:] == 0).all()
        assert torch.equal(batch.labels[b, :n], scan.labels) and (batch.labels[b, n:] == -1).all()
        assert torch.equal(batch.instance[b, :n], scan.instance) and (batch.instance[b, n:] == -1).all()
        assert torch.equal(batch.intensity[b, :n], scan.intensity)
        assert torch.equal(batch.planes[b], scan.planes)
    camera = lidar.batch_scenes([4], sensor="depth_camera", scene_options=dict(n_poles=0), width=16, height=12)
    assert camera.points.shape == (1, int(camera.lengths[0]), 3) and camera.scenes[0].pole_radius.numel() == 0
    with pytest.raises(ValueError, match="sensor must be"):
        lidar.batch_scenes([0], sensor="radar")


def test_empty_scene_and_bad_arguments():
    scene = lidar.make_scene(0, n_walls=0, n_boxes=0, n_poles=0)
    scan = lidar.lidar_scan(scene, n_beams=4, n_azimuth=32, clutter=0.2)
    assert scan.planes.shape == (1, 4) and set(scan.labels.tolist()) == {-1, 0}
    for bad in (dict(dropout=1.5), dict(range_noise=-1.0), dict(max_range=0.0), dict(clutter=-0.1)):
        with pytest.raises(ValueError, match="need max_range > 0"):
            lidar.lidar_scan(scene, n_beams=2, n_azimuth=4, **bad)


def rotate(plane, degrees):
    """The plane turned by ``degrees`` about an axis perpendicular to its normal."""
    n = plane[:3].double()
    axis = torch.linalg.cross(
        n,
        torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
        if n[2].abs() < 0.9
        else torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64),
    )
    axis = axis / axis.norm()
    angle = math.radians(degrees)
    turned = n * math.cos(angle) + torch.linalg.cross(axis, n) * math.sin(angle)
    return torch.cat([turned, plane[3:].double()]).float()


def test_evaluate_planes_applies_angle_offset_and_share():
    scan = lidar.lidar_scan(lidar.make_scene(0), **SMALL)
    score = lidar.evaluate_planes(scan.planes, scan.planes, scan.labels)
    assert score.recall == 1.0 and score.precision == 1.0
    assert score.required[0] and score.required.sum() < len(scan.planes)
    assert torch.equal(score.matched, torch.arange(len(scan.planes)))

    required = torch.nonzero(score.required)[:, 0]
    ground = scan.planes[0]
    near = torch.cat([rotate(ground, 1.5)[:3], ground[3:] + 0.04])
    flipped = -scan.planes[required[1:]]  # the same planes, other sign
    detected = torch.cat([near[None], flipped, torch.tensor([[0.0, 0.0, 1.0, 50.0]])])
    score = lidar.evaluate_planes(detected, scan.planes, scan.labels)
    assert score.recall == 1.0
    assert score.precision == pytest.approx((len(detected) - 1) / len(detected))
    assert score.matched[0] == 0 and score.matched[-1] == -1

    for miss in (rotate(ground, 2.5), torch.cat([ground[:3], ground[3:] + 0.06])):
        score = lidar.evaluate_planes(torch.cat([miss[None], flipped]), scan.planes, scan.labels)
        assert not score.found[0] and score.recall == pytest.approx(1 - 1 / len(required))
    score = lidar.evaluate_planes(torch.zeros(0, 4), scan.planes, scan.labels)
    assert score.recall == 0.0 and score.precision == 1.0 and score.matched.shape == (0,)


def test_evaluate_planes_takes_the_detector_output_as_it_comes():
    scan = lidar.lidar_scan(lidar.make_scene(0), **SMALL)
    required = lidar.evaluate_planes(scan.planes, scan.planes, scan.labels).required
    perfect = scan.planes[required]
    nan = torch.full((3, 4), float("nan"))
    padded = torch.cat([perfect[:1], nan[:1], perfect[1:], nan[1:]])  # padding between and after
    score = lidar.evaluate_planes(padded, scan.planes, scan.labels)
    assert score.recall == 1.0 and score.precision == 1.0  # not len(perfect) / len(padded)
    assert score.matched.shape == (len(padded),)
    assert (score.matched[torch.isnan(padded[:, 0])] == -1).all()
    assert torch.equal(score.matched[~torch.isnan(padded[:, 0])], torch.nonzero(required)[:, 0])
    # an Inf row is padding too, and a wrong plane still costs precision
    wrong = torch.tensor([[0.0, 0.0, 1.0, 50.0], [float("inf"), 0.0, 0.0, 1.0]])
    score = lidar.evaluate_planes(torch.cat([padded, wrong]), scan.planes, scan.labels)
    assert score.precision == pytest.approx(len(perfect) / (len(perfect) + 1))
    # (1, M, 4) and a PlaneDetections-like tuple with a .planes field give the same score
    batched = lidar.evaluate_planes(padded[None], scan.planes, scan.labels)
    detections = pointops.PlaneDetections(padded[None], torch.zeros(1, len(padded)), scan.labels[None])
    as_detections = lidar.evaluate_planes(detections, scan.planes, scan.labels)
    for other in (batched, as_detections):
        assert other.recall == 1.0 and other.precision == 1.0 and torch.equal(other.matched, score.matched[:-2])
    # only padding: no detection, precision 1, recall 0
    score = lidar.evaluate_planes(nan, scan.planes, scan.labels)
    assert score.precision == 1.0 and score.recall == 0.0 and (score.matched == -1).all()


def test_evaluate_planes_refuses_batches_and_bad_shapes():
    scan = lidar.lidar_scan(lidar.make_scene(0), **SMALL)
    with pytest.raises(ValueError, match=r"scores one cloud, got detections of 2 clouds.*det.planes\[b\]"):
        lidar.evaluate_planes(torch.zeros(2, 3, 4), scan.planes, scan.labels)
    with pytest.raises(ValueError, match=r"\(M, 4\).*got \(5, 3\)"):
        lidar.evaluate_planes(torch.zeros(5, 3), scan.planes, scan.labels)
    with pytest.raises(TypeError, match="PlaneDetections, got list"):
        lidar.evaluate_planes([[0.0, 0.0, 1.0, 1.0]], scan.planes, scan.labels)


def test_evaluate_planes_on_detect_planes_output(device):
    scan = lidar.lidar_scan(lidar.make_scene(0), **SMALL)
    det = pointops.detect_planes(scan.points[None].to(device), 8, n_phi=45, n_theta=45, rho_step=0.2)
    assert torch.isnan(det.planes[0, :, 3]).any()  # fewer than 8 planes: the case the padding rule is for
    as_is = lidar.evaluate_planes(det, scan.planes, scan.labels)
    real = det.planes[0].cpu()
    stripped = lidar.evaluate_planes(real[~torch.isnan(real[:, 3])], scan.planes, scan.labels)
    assert (as_is.recall, as_is.precision) == (stripped.recall, stripped.precision)
    assert as_is.precision == 1.0 and as_is.recall == 1.0


# ---- meshes and cloud layouts -------------------------------------------------------------------


def test_sample_surface_is_area_weighted():
    # Two triangles in the z = 0 plane with areas 1 and 3.
    vertices = torch.tensor(
        [[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 0.0, 0.0], [8.0, 0.0, 0.0], [5.0, 2.0, 0.0]]
    )
    mesh = Mesh(vertices, torch.tensor([[0, 1, 2], [3, 4, 5]]))
    n = 20000
    got = scenes.sample_surface(mesh, n, seed=11)
    on_first = int((got.face_index == 0).sum())
    # Binomial(n, 1/4): five standard deviations, so a correct sampler fails with p < 1e-6.
    sd = math.sqrt(n * 0.25 * 0.75)
    assert abs(on_first - n / 4) < 5 * sd, on_first
    assert got.points.dtype == torch.float32 and got.normals.dtype == torch.float32
    assert torch.equal(got.normals, torch.tensor([0.0, 0.0, 1.0]).expand(n, 3))
    # Inside their own triangle: barycentric coordinates all >= 0 (up to float32 rounding).
    a, b, c = (vertices[mesh.faces[got.face_index, i]].double() for i in range(3))
    p = got.points.double()
    v0, v1, v2 = b - a, c - a, p - a
    d00, d01, d11 = (v0 * v0).sum(1), (v0 * v1).sum(1), (v1 * v1).sum(1)
    d20, d21 = (v2 * v0).sum(1), (v2 * v1).sum(1)
    den = d00 * d11 - d01 * d01
    beta, gamma = (d11 * d20 - d01 * d21) / den, (d00 * d21 - d01 * d20) / den
    assert (beta >= -1e-6).all() and (gamma >= -1e-6).all() and (beta + gamma <= 1 + 1e-6).all()
    # Uniform within a triangle: the mean barycentric coordinates are 1/3 each (sd 1/sqrt(18 n)).
    first = got.face_index == 0
    tol = 5 / math.sqrt(18 * int(first.sum()))
    assert abs(float(beta[first].mean()) - 1 / 3) < tol and abs(float(gamma[first].mean()) - 1 / 3) < tol


def test_sample_surface_is_reproducible_and_skips_degenerate_faces():
    # a tetrahedron
    vertices = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    vertices = torch.cat([vertices, torch.tensor([[5.0, 5.0, 5.0]])])
    faces = torch.cat([torch.tensor([[4, 4, 4], [0, 1, 4]]), faces, torch.tensor([[1, 1, 2]])])
    faces[1] = torch.tensor([0, 1, 0])  # a degenerate face between two good ones
    mesh = Mesh(vertices.double(), faces)
    a = scenes.sample_surface(mesh, 500, seed=3)
    b = scenes.sample_surface(mesh, 500, seed=3)
    c = scenes.sample_surface(mesh, 500, generator=torch.Generator().manual_seed(3))
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y) and torch.equal(x, z)
    assert not torch.equal(a.points, scenes.sample_surface(mesh, 500, seed=4).points)
    assert a.points.dtype == torch.float64
    assert set(a.face_index.tolist()) == {2, 3, 4, 5}  # never faces 0, 1, 6 (zero area)
    assert torch.allclose(a.normals.norm(dim=1), torch.ones(500, dtype=torch.float64))
    # outward normal of face [1, 2, 3] of the tetrahedron
    assert torch.allclose(a.normals[a.face_index == 5][0], torch.full((3,), 3**-0.5, dtype=torch.float64))
    empty = scenes.sample_surface(mesh, 0)
    assert empty.points.shape == (0, 3) and empty.face_index.shape == (0,)
    with pytest.raises(ValueError, match="no surface"):
        scenes.sample_surface(Mesh(vertices, torch.tensor([[0, 1, 0]])), 10)
    with pytest.raises(ValueError, match="faces"):
        scenes.sample_surface(Mesh(vertices, torch.tensor([[0, 1, 9]])), 10)
    with pytest.raises(ValueError, match="no faces"):
        scenes.sample_surface(PointCloud(vertices), 10)


def test_pad_clouds():
    clouds = [torch.randn(5, 3), torch.randn(0, 3), PointCloud(torch.randn(2, 3))]
    points, lengths = pointops.pad_clouds(clouds)
    assert points.shape == (3, 5, 3) and lengths.tolist() == [5, 0, 2]
    assert torch.equal(points[0], clouds[0]) and torch.equal(points[2, :2], clouds[2].points)
    assert (points[1] == 0).all() and (points[2, 2:] == 0).all()
    points, lengths = pointops.pad_clouds([])
    assert points.shape == (0, 0, 3) and lengths.shape == (0,)
    with pytest.raises(ValueError, match="cloud 1"):
        pointops.pad_clouds([torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64)])
