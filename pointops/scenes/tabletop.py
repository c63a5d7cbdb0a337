"""Object-recognition scenes with ground truth for PPF matching: meshes at known poses on a table,
seen by a depth camera.

A scene (:func:`make_ppf_scene`) stands a target mesh at a random rotation on a square table top
(the plane z = 0 of the world frame), scatters distractor meshes and boxes around it, and may put
an occluding box between the camera and the target, slid sideways until it hides a requested share
of the target. A pinhole depth camera (:func:`render_depth`) rasterizes every triangle in torch
with a z-buffer (the nearest surface wins each pixel: the ray through the pixel centre meets the
triangle's plane), so what the camera returns is exactly what it sees; the returns then get
Gaussian noise along their rays, or, with a :class:`DepthSensor`, a structured-light camera's
errors: depth noise growing with the square of the range, depth quantised in disparity steps, and
no return where the signal (an object's reflectivity times the cosine of the incidence angle) is
too weak: at grazing angles and on dark surfaces. Normals are the exact face normals of the
surfaces hit (turned towards the camera). Several instances of the target may stand in one scene.
Randomness comes only from ``torch.Generator`` objects seeded by the caller, so a seed gives the
same scene on every run; pure torch, float64, CPU.

Ground truth: ``pose`` (4, 4) maps model coordinates (the target mesh as ``load_mesh`` returns
it: centred on its bounding box, scaled to the requested diameter) into the camera frame (x right,
y down, z forward: OpenCV), the frame the points are in. ``occlusion`` is the share of the target's
pixels that the rest of the scene hides: 1 - (target pixels in the scene) / (target pixels when the
target is rendered alone from the same camera), so 0 means only self-occlusion (returns a sensor
drops do not count). ``poses`` and ``occlusions`` hold the same for every instance.

Meshes (:mod:`pointops.scenes.mesh`) are CGAL's example meshes (``load_mesh``) or procedural
ones (``blob_mesh``, ``box_mesh``).
"""

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..ppf.ops import quaternion_to_matrix
from .camera import Camera, focal_length
from .mesh import Mesh, box_mesh

_F64 = torch.float64


def random_rotation(g: torch.Generator) -> Tensor:
    """A uniformly random rotation (3, 3) float64 (normalized Gaussian quaternion)."""
    q = torch.randn(4, generator=g, dtype=_F64)
    return quaternion_to_matrix(q / q.norm())


# ---- camera and rasterizer ------------------------------------------------------------------------


def look_at(
    target: Tensor,
    distance: float,
    azimuth: float,
    elevation: float,
    width: int = 320,
    height: int = 240,
    fov_deg: float = 55.0,
) -> Camera:
    """A camera ``distance`` from ``target`` at the given azimuth / elevation (radians, elevation
    above the table), looking at it with the image's x axis horizontal."""
    forward = -torch.tensor(
        [math.cos(elevation) * math.cos(azimuth), math.cos(elevation) * math.sin(azimuth), math.sin(elevation)],
        dtype=_F64,
    )
    position = target - distance * forward
    right = torch.linalg.cross(forward, torch.tensor([0.0, 0.0, 1.0], dtype=_F64))
    right = right / right.norm()
    down = torch.linalg.cross(forward, right)
    return Camera(torch.stack([right, down, forward], 1), position, width, height, focal_length(width, fov_deg))


def _rasterize(camera: Camera, vertices: Tensor, faces: Tensor) -> Tuple[Tensor, Tensor]:
    """Per pixel (H * W,): depth of the nearest triangle (inf where none) and its index (-1).
    ``vertices`` are in the camera frame; triangles with a vertex closer than 1e-3 are dropped."""
    w, h, f = camera.width, camera.height, camera.focal
    depth = torch.full((h * w,), math.inf, dtype=_F64)
    owner = torch.full((h * w,), -1, dtype=torch.int64)
    tri = vertices[faces]  # (F, 3, 3)
    keep = (tri[..., 2] > 1e-3).all(1)
    tri, ids = tri[keep], torch.nonzero(keep)[:, 0]
    if ids.numel() == 0:
        return depth, owner
    u = tri[..., 0] / tri[..., 2] * f + w / 2  # pixel coordinates; pixel (r, c) centre at (c + .5, r + .5)
    v = tri[..., 1] / tri[..., 2] * f + h / 2
    c0 = (u.amin(1) - 0.5).ceil().clamp(0, w).long()
    c1 = (u.amax(1) - 0.5).floor().clamp(-1, w - 1).long()
    r0 = (v.amin(1) - 0.5).ceil().clamp(0, h).long()
    r1 = (v.amax(1) - 0.5).floor().clamp(-1, h - 1).long()
    cols, rows = (c1 - c0 + 1).clamp(min=0), (r1 - r0 + 1).clamp(min=0)
    count = cols * rows
    live = count > 0
    tri, ids, u, v, c0, r0, cols, count = (
        tri[live],
        ids[live],
        u[live],
        v[live],
        c0[live],
        r0[live],
        cols[live],
        count[live],
    )
    which = torch.repeat_interleave(torch.arange(ids.numel()), count)
    local = torch.arange(int(count.sum())) - torch.repeat_interleave(count.cumsum(0) - count, count)
    col = c0[which] + local % cols[which]
    row = r0[which] + local // cols[which]
    px, py = col.to(_F64) + 0.5, row.to(_F64) + 0.5
    ua, va = u[which], v[which]
    # edge functions: inside when all three have the sign of the triangle's area (either winding)
    e = [
        (ua[:, (k + 1) % 3] - ua[:, k]) * (py - va[:, k]) - (va[:, (k + 1) % 3] - va[:, k]) * (px - ua[:, k])
        for k in range(3)
    ]
    area = e[0] + e[1] + e[2]
    inside = ((e[0] >= 0) & (e[1] >= 0) & (e[2] >= 0)) | ((e[0] <= 0) & (e[1] <= 0) & (e[2] <= 0))
    inside = inside & (area != 0)
    # depth: the ray (x, y, 1) through the pixel centre meets the triangle's plane n . p = n . v0
    t = tri[which]
    normal = torch.linalg.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0])
    ray = torch.stack([(px - w / 2) / f, (py - h / 2) / f, torch.ones_like(px)], 1)
    denom = (normal * ray).sum(1)
    z = (normal * t[:, 0]).sum(1) / torch.where(denom == 0, torch.ones_like(denom), denom)
    inside = inside & (denom != 0) & (z > 0)
    pix = (row * w + col)[inside]
    z, tri_id = z[inside], ids[which[inside]]
    depth.scatter_reduce_(0, pix, z, reduce="amin")
    nearest = z == depth[pix]
    owner.scatter_reduce_(0, pix[nearest], tri_id[nearest], reduce="amax", include_self=True)
    return depth, owner


class DepthImage(NamedTuple):
    depth: Tensor  # (H * W,) float64 depth (z) of the nearest surface, inf where none
    surface: Tensor  # (H * W,) int64 object of that surface (-1: none), see render_depth
    normal: Tensor  # (H * W, 3) float64 unit normal of that surface in the camera frame, facing the camera


def render_depth(camera: Camera, meshes: Sequence[Mesh], table_half: float = 0.0) -> DepthImage:
    """Renders world-frame meshes (object k = meshes[k]) and, when ``table_half`` > 0, the table
    top: the square |x|, |y| <= table_half of the plane z = 0 (object len(meshes))."""
    to_cam = camera.world_to_camera
    rays = camera.rays()
    depth = torch.full((rays.shape[0],), math.inf, dtype=_F64)
    surface = torch.full((rays.shape[0],), -1, dtype=torch.int64)
    normal = torch.zeros(rays.shape[0], 3, dtype=_F64)
    if meshes:
        vertices = torch.cat([m.vertices for m in meshes]) @ to_cam[:3, :3].T + to_cam[:3, 3]
        offsets = torch.tensor([0] + [m.vertices.shape[0] for m in meshes]).cumsum(0)
        faces = torch.cat([m.faces + offsets[k] for k, m in enumerate(meshes)])
        face_object = torch.cat([torch.full((m.faces.shape[0],), k) for k, m in enumerate(meshes)])
        depth, owner = _rasterize(camera, vertices, faces)
        hit = owner >= 0
        surface[hit] = face_object[owner[hit]]
        tri = vertices[faces[owner[hit]]]
        n = torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        normal[hit] = n / n.norm(dim=1, keepdim=True)
    if table_half > 0:
        up = to_cam[:3, 2]  # the world z axis in the camera frame
        origin = to_cam[:3, 3]  # the world origin in the camera frame
        denom = rays @ up
        t = (origin @ up) / torch.where(denom == 0, torch.ones_like(denom), denom)
        world = (rays * t[:, None] - origin) @ to_cam[:3, :3]
        on_table = (denom != 0) & (t > 0) & (world[:, 0].abs() <= table_half) & (world[:, 1].abs() <= table_half)
        nearer = on_table & (t < depth)
        depth = torch.where(nearer, t, depth)
        surface = torch.where(nearer, len(meshes), surface)
        normal[nearer] = up
    facing = (normal * rays).sum(1) > 0  # turn every normal towards the camera
    normal = torch.where(facing[:, None], -normal, normal)
    return DepthImage(depth, surface, normal)


# ---- a depth sensor's errors ----------------------------------------------------------------------


@dataclass(frozen=True)
class DepthSensor:
    """The errors of a structured-light depth camera (a Kinect-like one by default), for
    :func:`make_ppf_scene`. Lengths are in metres; the scene's units (target diameters) are
    ``unit`` metres each (a 20 cm object by default, seen from 0.5 to 0.7 m).

    * Depth noise along the optical axis with standard deviation ``noise_base + noise_quadratic
      (z - noise_origin)^2`` metres at depth z (Nguyen, Izadi and Lovell, 3DIMPVT 2012, fitted
      Kinect's axial noise as 1.2 mm + 1.9 mm/m^2 (z - 0.4 m)^2).
    * Quantised depth: the camera measures disparity ``focal * baseline / z`` in steps of
      1 / ``subpixel`` pixel (the image's own focal length in pixels), so depth comes in steps that
      grow with z^2 (0.8 mm at 0.6 m with a 0.075 m baseline, 1/8 pixel and the default
      640-pixel-wide, 45-degree camera).
    * Missing returns: a return's signal is its surface's reflectivity times the cosine of the
      angle between the ray and the surface normal; below ``min_signal`` it is lost, and up to
      twice that it is lost with a probability falling linearly to 0: surfaces seen at grazing
      angles and dark surfaces lose returns, dark ones at smaller angles.
    * Reflectivity: every object of the scene (each instance, distractor, box, the occluder and
      the table) draws its own uniformly from ``reflectivity``.
    """

    unit: float = 0.2
    noise_base: float = 0.0012
    noise_quadratic: float = 0.0019
    noise_origin: float = 0.4
    baseline: float = 0.075
    subpixel: float = 8.0
    min_signal: float = 0.1
    reflectivity: Tuple[float, float] = (0.15, 1.0)

    def depth_noise(self, z: Tensor) -> Tensor:
        """Standard deviation (metres) of the depth noise at depth z (metres)."""
        return self.noise_base + self.noise_quadratic * (z - self.noise_origin) ** 2

    def quantise(self, z: Tensor, focal: float) -> Tensor:
        """Depths (metres) as a disparity measured in steps of 1 / subpixel pixel returns them."""
        fb = focal * self.baseline
        steps = torch.round(fb / z * self.subpixel).clamp(min=1)
        return fb / (steps / self.subpixel)

    def return_probability(self, signal: Tensor) -> Tensor:
        """Probability that a return of this signal (reflectivity x cos incidence) comes back."""
        return ((signal - self.min_signal) / self.min_signal).clamp(0.0, 1.0)


# ---- scenes ----------------------------------------------------------------------------------------


class PPFScene(NamedTuple):
    """A depth-camera view of a target among distractors; see the module docstring."""

    points: Tensor  # (N, 3) float32 camera frame, depth noise along the rays included
    normals: Tensor  # (N, 3) float32 exact unit normals of the surfaces hit, facing the camera
    labels: Tensor  # (N,) int64: 0 target (0 .. K-1: its K instances), then distractor meshes, boxes and the occluder; -1 table
    pose: Tensor  # (4, 4) float32 model -> camera frame (the first instance)
    occlusion: float  # share of the (first) target's pixels hidden by the rest of the scene
    visible: int  # target pixels in the scene
    model_diameter: float
    poses: Optional[Tensor] = None  # (K, 4, 4) float32 every instance's pose
    occlusions: Optional[Tensor] = None  # (K,) float64 every instance's occluded share


def _resting_pose(mesh: Mesh, rotation: Tensor, xy: Tuple[float, float]) -> Tensor:
    """The pose that rotates the mesh, then stands it on z = 0 at (x, y)."""
    lowest = float((mesh.vertices @ rotation.T)[:, 2].min())
    pose = torch.eye(4, dtype=_F64)
    pose[:3, :3] = rotation
    pose[:3, 3] = torch.tensor([xy[0], xy[1], -lowest], dtype=_F64)
    return pose


def make_ppf_scene(
    seed: int,
    target: Mesh,
    distractors: Sequence[Mesh] = (),
    occlusion: float = 0.0,
    n_boxes: int = 2,
    noise: float = 0.002,
    camera_distance: Tuple[float, float] = (2.6, 3.4),
    elevation_deg: Tuple[float, float] = (25.0, 65.0),
    width: int = 320,
    height: int = 240,
    fov_deg: float = 45.0,
    table_half: float = 1.2,
    instances: int = 1,
    sensor: Optional[DepthSensor] = None,
) -> PPFScene:
    """One scene, all lengths in units of the target's diameter (target meshes as ``load_mesh``
    gives them, diameter 1; distractors the same size).

    Args:
        seed: seeds every random choice.
        target: the mesh to find, placed at a uniformly random rotation standing on the table
            at the origin.
        distractors: meshes placed at random rotations around it (0.8 to 1.6 diameters away).
        instances: copies of the target in the scene: the first at the origin, the others at
            their own random rotations 1.0 to 1.4 diameters from it and at least 1.0 from each
            other (distractors and boxes keep 0.9 away from them); the camera looks at their
            centroid, the occluder hides the first. One instance makes the same scene as before
            this option existed.
        occlusion: requested share of the target hidden by an occluding box (0: none); the box
            stands a third of the way from the target to the camera and slides sideways until the
            share is reached (bisection; the scene's ``occlusion`` is the measured share,
            distractors and clutter included).
        n_boxes: clutter boxes (0.2 to 0.6 diameters) scattered on the table.
        noise: standard deviation of the depth noise along each ray, in diameters (without a
            sensor).
        sensor: a :class:`DepthSensor` whose errors replace ``noise``: depth noise growing with
            the square of the range, quantised depth, missing returns at grazing angles and on
            dark surfaces (per-object reflectivity). None: the Gaussian ``noise`` alone.
        camera_distance, elevation_deg: ranges of the camera's distance from the target and its
            elevation above the table; the azimuth is uniform.
        width, height, fov_deg: the image.
        table_half: half the side of the square table top.
    """
    g = torch.Generator().manual_seed(seed)

    def uniform(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand(1, generator=g, dtype=_F64))

    if instances < 1:
        raise ValueError(f"instances must be >= 1, got {instances}")
    target_pose = _resting_pose(target, random_rotation(g), (0.0, 0.0))
    target_poses = [target_pose]
    spots = []  # (x, y) of the instances past the first
    for _ in range(instances - 1):
        for _try in range(50):
            angle, radius = uniform(0, 2 * math.pi), uniform(1.0, 1.4)
            xy = (radius * math.cos(angle), radius * math.sin(angle))
            if all(math.hypot(xy[0] - a, xy[1] - b) >= 1.0 for a, b in spots):
                break
        spots.append(xy)
        target_poses.append(_resting_pose(target, random_rotation(g), xy))
    placed = [target.transformed(pose) for pose in target_poses]
    centre = torch.stack([m.vertices.mean(0) for m in placed]).mean(0)

    def clear_of_instances(xy: Tuple[float, float]) -> bool:
        return all(math.hypot(xy[0] - a, xy[1] - b) >= 0.9 for a, b in spots)

    for mesh in distractors:
        for _try in range(50):
            angle, radius = uniform(0, 2 * math.pi), uniform(0.8, 1.6)
            xy = (radius * math.cos(angle), radius * math.sin(angle))
            if clear_of_instances(xy):
                break
        pose = _resting_pose(mesh, random_rotation(g), xy)
        placed.append(mesh.transformed(pose))
    for k in range(n_boxes):
        size = [uniform(0.2, 0.6) for _ in range(3)]
        for _try in range(50):
            angle, radius = uniform(0, 2 * math.pi), uniform(0.7, 1.5)
            xy = (radius * math.cos(angle), radius * math.sin(angle))
            if clear_of_instances(xy):
                break
        yaw = uniform(0, math.pi)
        rot = torch.tensor(
            [[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]], dtype=_F64
        )
        pose = _resting_pose(box_mesh(size), rot, xy)
        placed.append(box_mesh(size).transformed(pose))
    azimuth = uniform(0, 2 * math.pi)
    camera = look_at(
        centre, uniform(*camera_distance), azimuth, math.radians(uniform(*elevation_deg)), width, height, fov_deg
    )

    alone = render_depth(camera, placed[:1])
    target_pixels = alone.surface == 0
    if occlusion > 0 and bool(target_pixels.any()):
        # A thin box standing on the table a third of the way from the target to the camera, as
        # wide as the target and tall enough to reach above the line of sight over the target's
        # top, slid sideways (across the view) until it hides the requested share of the target's
        # pixels: the box alone is rendered against the target's depth at each bisection step.
        toward = camera.position - centre
        toward[2] = 0
        toward = toward / toward.norm().clamp(min=1e-9)
        side = torch.linalg.cross(toward, torch.tensor([0.0, 0.0, 1.0], dtype=_F64))
        fraction = 0.33
        mid = centre + toward * float((camera.position - centre)[:2].norm()) * fraction
        top = float(placed[0].vertices[:, 2].max())
        height_needed = top + fraction * (float(camera.position[2]) - top) + 0.15
        size = [0.1, 0.8, height_needed]
        yaw = math.atan2(float(side[1]), float(side[0])) - math.pi / 2  # the box's y axis along `side`
        rot = torch.tensor(
            [[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]], dtype=_F64
        )

        def occluder_pose(shift: float) -> Tensor:
            xy = mid[:2] + side[:2] * shift
            return _resting_pose(box_mesh(size), rot, (float(xy[0]), float(xy[1])))

        def occluder(shift: float) -> Mesh:
            return box_mesh(size).transformed(occluder_pose(shift))

        target_rays = camera.rays()[target_pixels]
        half = torch.tensor(size, dtype=_F64) / 2

        def hidden(shift: float) -> float:
            # the box's depth along the target's pixel rays (slab test), against the target's
            box_to_cam = camera.world_to_camera @ occluder_pose(shift)
            axes, centre_cam = box_to_cam[:3, :3], box_to_cam[:3, 3]
            origin = -(centre_cam @ axes)  # the camera centre in box coordinates
            direction = target_rays @ axes
            safe = torch.where(direction == 0, torch.full_like(direction, 1e-300), direction)
            t1, t2 = (-half - origin) / safe, (half - origin) / safe
            near = torch.minimum(t1, t2).amax(1)
            far = torch.maximum(t1, t2).amin(1)
            hit = (far >= near) & (far > 0) & (near < alone.depth[target_pixels])
            return float(hit.sum()) / float(target_pixels.sum())

        lo, hi = 0.0, 1.5  # shift 0 hides the target's middle, 1.5 clears it
        for _ in range(14):
            midpoint = (lo + hi) / 2
            if hidden(midpoint) > occlusion:
                lo = midpoint
            else:
                hi = midpoint
        placed.append(occluder(hi))

    image = render_depth(camera, placed, table_half)
    hit = torch.nonzero(torch.isfinite(image.depth))[:, 0]
    rays = camera.rays()[hit]
    surface = image.surface[hit]
    normals = image.normal[hit]
    if sensor is None:
        # noise along the ray: the point moves by `noise` (a distance, not a depth) along its ray
        distance = image.depth[hit] * rays.norm(dim=1) + noise * torch.randn(hit.numel(), generator=g, dtype=_F64)
        points = rays / rays.norm(dim=1, keepdim=True) * distance[:, None]
    else:
        # the sensor's own generator: the geometry above is the scene without a sensor
        gs = torch.Generator().manual_seed(seed * 1000003 + 1)
        lo, hi = sensor.reflectivity
        reflectivity = lo + (hi - lo) * torch.rand(len(placed) + 1, generator=gs, dtype=_F64)  # the table last
        incidence = (normals * rays).sum(1).abs() / rays.norm(dim=1)
        signal = reflectivity[torch.where(surface < 0, len(placed), surface)] * incidence
        returned = torch.rand(hit.numel(), generator=gs, dtype=_F64) < sensor.return_probability(signal)
        z = image.depth[hit] * sensor.unit  # metres; rays have z = 1
        z = z + sensor.depth_noise(z) * torch.randn(hit.numel(), generator=gs, dtype=_F64)
        z = sensor.quantise(z.clamp(min=1e-3), camera.focal)
        points = (rays * (z / sensor.unit)[:, None])[returned]
        surface, normals = surface[returned], normals[returned]
    labels = torch.where(surface == len(placed), -1, surface)
    # every instance's occluded share: its pixels in the scene against its pixels alone
    occlusions, visible_all = [], []
    for k in range(instances):
        alone_k = alone if k == 0 else render_depth(camera, placed[k : k + 1])
        own = int((alone_k.surface == 0).sum())
        seen = int((image.surface == k).sum())
        visible_all.append(seen)
        occlusions.append(1.0 - seen / max(own, 1))
    poses = torch.stack([camera.world_to_camera @ p for p in target_poses]).float()
    return PPFScene(
        points.float(),
        normals.float(),
        labels,
        poses[0],
        occlusions[0],
        visible_all[0],
        target.diameter,
        poses,
        torch.tensor(occlusions, dtype=_F64),
    )
