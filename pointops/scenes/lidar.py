"""Synthetic LiDAR and depth-camera scenes with ground truth (planes, per-point labels).

A scene (:func:`make_scene`) is a set of analytic primitives in a world frame with z up and the
ground through the origin: a ground plane (possibly slightly tilted), vertical walls, yaw-rotated
boxes whose five visible faces are bounded patches of their own planes, and vertical poles
(cylinders: objects that are not planes). A sensor (:func:`lidar_scan`,
:func:`depth_camera_scan`) casts all its rays against every primitive at once in torch, keeps the
nearest hit, then adds range noise, dropout and clutter. Randomness comes only from
``torch.Generator`` objects seeded by the caller, so a seed gives the same scene and scan on every
run.

Ground truth of a scan is expressed in the sensor frame (points are too):

- ``planes (P, 4)``: ``(nx, ny, nz, d)`` with ``|n| = 1`` and ``n . x = d`` on the plane, and
  ``d >= 0``: the normal points away from the sensor (Hessian normal form), so every plane has a
  single parameterization. Row ``p`` is scene plane ``p`` (ground first, then walls, then box
  faces), whether or not the scan saw it.
- ``labels (N,)``: the plane a point was measured on, -1 for poles and clutter. Range noise moves a
  point along its ray, so its distance to its plane is at most ``|noise|``.
- ``instance (N,)``: the scene object (index into ``scene.object_kind``), -1 for clutter.

:func:`evaluate_planes` scores a plane detector against this ground truth.
"""

import math
from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .camera import Camera, focal_length

_F64 = torch.float64
# Rays are cast in chunks: (chunk, primitives) float64 temporaries stay a few MB each.
_RAY_CHUNK = 16384


@dataclass(frozen=True)
class Scene:
    """Analytic primitives in the world frame (float64 so the ground truth is exact).

    Plane ``p`` is the rectangle ``center[p] + a * u[p] + b * v[p]`` with ``|a| <= half[p, 0]``,
    ``|b| <= half[p, 1]`` (the ground's half extents are infinite); its world plane is
    ``planes[p] = (n, d)`` with ``n = u x v`` and ``d = n . center``; ``n`` points up for the
    ground and out of boxes.
    Pole ``c`` is the vertical cylinder of radius ``pole_radius[c]`` around ``pole_center[c]``
    (x, y) between heights ``pole_z[c, 0]`` and ``pole_z[c, 1]``, closed at the top.
    """

    seed: int
    planes: Tensor  # (P, 4) world frame
    plane_center: Tensor  # (P, 3)
    plane_u: Tensor  # (P, 3)
    plane_v: Tensor  # (P, 3)
    plane_half: Tensor  # (P, 2)
    plane_object: Tensor  # (P,) int64
    plane_solid: Tensor  # (P,) bool: a box face, seen from outside (the normal's side) only
    pole_center: Tensor  # (C, 2)
    pole_radius: Tensor  # (C,)
    pole_z: Tensor  # (C, 2)
    pole_object: Tensor  # (C,) int64
    object_kind: Tuple[str, ...]  # (O,) "ground", "wall", "box" or "pole"
    object_albedo: Tensor  # (O,) in [0, 1]

    def ground_height(self, xy: Tensor) -> Tensor:
        """Height of the ground under world points ``xy (..., 2)``."""
        n = self.planes[0]
        return (n[3] - xy[..., 0] * n[0] - xy[..., 1] * n[1]) / n[2]


class Scan(NamedTuple):
    """One sensor sweep; see the module docstring for the conventions."""

    points: Tensor  # (N, 3) float32, sensor frame
    intensity: Tensor  # (N,) float32 in [0, 1]
    labels: Tensor  # (N,) int64 plane index, -1 for poles and clutter
    instance: Tensor  # (N,) int64 object index, -1 for clutter
    ray: Tensor  # (N,) int64 index of the ray that measured the point (clutter: the ray it floats on)
    planes: Tensor  # (P, 4) float32, sensor frame, d >= 0
    pose: Tensor  # (4, 4) float32, sensor frame -> world frame


class SceneBatch(NamedTuple):
    """Scans of several scenes, padded pointops style: cloud b is rows [0, lengths[b])."""

    points: Tensor  # (B, N_max, 3) float32, zero padding
    lengths: Tensor  # (B,) int64
    intensity: Tensor  # (B, N_max) float32, zero padding
    labels: Tensor  # (B, N_max) int64, -1 padding
    instance: Tensor  # (B, N_max) int64, -1 padding
    planes: List[Tensor]  # B tensors (P_b, 4) float32
    scenes: List[Scene]


def _uniform(g: torch.Generator, low: float, high: float, n: int = 1) -> Tensor:
    return torch.rand(n, generator=g, dtype=_F64) * (high - low) + low


def _box_faces(center: Tensor, yaw: float, size: Tensor) -> List[Tuple[Tensor, Tensor, Tensor, Tuple[float, float]]]:
    """Four sides and the top of a box standing on its bottom face (buried, so left out)."""
    a = torch.tensor([math.cos(yaw), math.sin(yaw), 0.0], dtype=_F64)
    b = torch.tensor([-math.sin(yaw), math.cos(yaw), 0.0], dtype=_F64)
    z = torch.tensor([0.0, 0.0, 1.0], dtype=_F64)
    half_length, w, h = (float(s) / 2 for s in size)
    faces = []
    for sign in (1.0, -1.0):  # u x v points out of the box
        faces.append((center + sign * half_length * a, sign * b, z, (w, h)))
        faces.append((center + sign * w * b, sign * z, a, (h, half_length)))
    faces.append((center + h * z, a, b, (half_length, w)))
    return faces


def make_scene(
    seed: int,
    n_walls: int = 3,
    n_boxes: int = 8,
    n_poles: int = 6,
    max_tilt_deg: float = 2.0,
    radius: float = 40.0,
) -> Scene:
    """A random outdoor scene around the world origin, where sensors stand.

    Args:
        seed: seeds the ``torch.Generator`` that draws everything.
        n_walls: vertical walls, 3 to 12 m high, facing a random direction at 0.35 to 0.9
            ``radius`` from the origin.
        n_boxes: boxes (cars, containers, kiosks: 1.5-6 x 1.2-3 x 0.8-3 m) at random yaw, 5 m to
            0.8 ``radius`` from the origin; each contributes 5 planes (4 sides, top).
        n_poles: poles of radius 0.08-0.3 m and 3-9 m high, 4 m to 0.8 ``radius`` away.
        max_tilt_deg: the ground is tilted by up to this angle about a random horizontal axis.
        radius: scale of the layout, in metres.

    Objects stand on the ground and reach 0.2 m into it, so no gap shows under them however the
    ground tilts. Objects may overlap; the sensor sees whichever surface is nearest. Nothing
    contains the origin.

    Returns:
        a :class:`Scene` with ``1 + n_walls + 5 * n_boxes`` planes and ``n_poles`` poles.
    """
    g = torch.Generator().manual_seed(seed)
    tilt = math.radians(max_tilt_deg) * float(_uniform(g, 0.0, 1.0))
    tilt_axis = float(_uniform(g, 0.0, 2 * math.pi))
    ground_n = torch.tensor(
        [math.sin(tilt) * math.cos(tilt_axis), math.sin(tilt) * math.sin(tilt_axis), math.cos(tilt)], dtype=_F64
    )
    ground_u = torch.tensor([1.0, 0.0, 0.0], dtype=_F64) - ground_n[0] * ground_n
    ground_u = ground_u / ground_u.norm()
    ground_v = torch.linalg.cross(ground_n, ground_u)

    def ground_z(x: float, y: float) -> float:
        return float(-(ground_n[0] * x + ground_n[1] * y) / ground_n[2])

    sink = 0.2
    slope = math.tan(tilt)
    centers, us, vs, halves, objects = [torch.zeros(3, dtype=_F64)], [ground_u], [ground_v], [(math.inf, math.inf)], [0]
    kinds, albedo = ["ground"], [float(_uniform(g, 0.15, 0.35))]

    for _ in range(n_walls):
        yaw, offset, shift, length, height = (
            float(v)
            for v in torch.cat(
                [
                    _uniform(g, 0.0, 2 * math.pi),
                    _uniform(g, 0.35, 0.9) * radius,
                    _uniform(g, -0.3, 0.3) * radius,
                    _uniform(g, 0.4, 1.5) * radius,
                    _uniform(g, 3.0, 12.0),
                ]
            )
        )
        facing = (math.cos(yaw), math.sin(yaw))
        along = (-math.sin(yaw), math.cos(yaw))
        mid = (offset * facing[0] + shift * along[0], offset * facing[1] + shift * along[1])
        ends = [ground_z(mid[0] + s * length / 2 * along[0], mid[1] + s * length / 2 * along[1]) for s in (-1, 1)]
        bottom, top = min(ends) - sink, max(ends) + height
        centers.append(torch.tensor([mid[0], mid[1], (bottom + top) / 2], dtype=_F64))
        us.append(torch.tensor([along[0], along[1], 0.0], dtype=_F64))
        vs.append(torch.tensor([0.0, 0.0, 1.0], dtype=_F64))
        halves.append((length / 2, (top - bottom) / 2))
        objects.append(len(kinds))
        kinds.append("wall")
        albedo.append(float(_uniform(g, 0.3, 0.8)))

    def place(min_r: float, max_r: float) -> Tuple[float, float]:
        r, angle = float(_uniform(g, min_r, max_r)), float(_uniform(g, 0.0, 2 * math.pi))
        return r * math.cos(angle), r * math.sin(angle)

    for _ in range(n_boxes):
        x, y = place(5.0, 0.8 * radius)
        yaw = float(_uniform(g, 0.0, math.pi))
        size = torch.cat([_uniform(g, 1.5, 6.0), _uniform(g, 1.2, 3.0), _uniform(g, 0.8, 3.0)])
        depth = sink + slope * float(size[:2].norm()) / 2
        center = torch.tensor([x, y, ground_z(x, y) - depth + float(size[2]) / 2], dtype=_F64)
        size[2] += depth
        for c, u, v, half in _box_faces(center, yaw, size):
            centers.append(c)
            us.append(u)
            vs.append(v)
            halves.append(half)
            objects.append(len(kinds))
        kinds.append("box")
        albedo.append(float(_uniform(g, 0.2, 0.9)))

    pole_center, pole_radius, pole_z, pole_object = [], [], [], []
    for _ in range(n_poles):
        x, y = place(4.0, 0.8 * radius)
        r, height = float(_uniform(g, 0.08, 0.3)), float(_uniform(g, 3.0, 9.0))
        base = ground_z(x, y)
        pole_center.append((x, y))
        pole_radius.append(r)
        pole_z.append((base - sink - slope * r, base + height))
        pole_object.append(len(kinds))
        kinds.append("pole")
        albedo.append(float(_uniform(g, 0.3, 0.7)))

    plane_center, plane_u, plane_v = torch.stack(centers), torch.stack(us), torch.stack(vs)
    normals = torch.linalg.cross(plane_u, plane_v)
    planes = torch.cat([normals, (normals * plane_center).sum(1, keepdim=True)], 1)
    return Scene(
        seed=seed,
        planes=planes,
        plane_center=plane_center,
        plane_u=plane_u,
        plane_v=plane_v,
        plane_half=torch.tensor(halves, dtype=_F64),
        plane_object=torch.tensor(objects, dtype=torch.int64),
        plane_solid=torch.tensor([kinds[o] == "box" for o in objects]),
        pole_center=torch.tensor(pole_center, dtype=_F64).reshape(-1, 2),
        pole_radius=torch.tensor(pole_radius, dtype=_F64),
        pole_z=torch.tensor(pole_z, dtype=_F64).reshape(-1, 2),
        pole_object=torch.tensor(pole_object, dtype=torch.int64),
        object_kind=tuple(kinds),
        object_albedo=torch.tensor(albedo, dtype=_F64),
    )


def _cast_chunk(scene: Scene, planes: Tensor, origin: Tensor, dirs: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Nearest hit of unit rays ``dirs (R, 3)`` from ``origin (3,)`` on the scene planes listed in
    ``planes (K,)`` and on every pole: range (R,) (+inf on a miss), primitive (R,) (index into
    ``planes``, then pole sides, then pole tops) and |cos incidence| (R,)."""
    normals, center, half = scene.planes[planes, :3], scene.plane_center[planes], scene.plane_half[planes]
    u, v = scene.plane_u[planes], scene.plane_v[planes]
    facing = dirs @ normals.T  # (R, K)
    t_plane = (scene.planes[planes, 3] - normals @ origin) / facing
    rel = origin - center
    a = (rel * u).sum(1) + t_plane * (dirs @ u.T)
    b = (rel * v).sum(1) + t_plane * (dirs @ v.T)
    hit = (t_plane > 0) & (a.abs() <= half[:, 0]) & (b.abs() <= half[:, 1])
    t_plane = t_plane.masked_fill_(~hit, math.inf)

    # Side of pole c: |o_xy + t d_xy - c|^2 = r^2; the origin is outside, so the smaller root enters.
    e = origin[:2] - scene.pole_center  # (C, 2)
    flat = (dirs[:, :2] ** 2).sum(1, keepdim=True)  # (R, 1)
    half_b = dirs[:, :2] @ e.T  # (R, C)
    disc = half_b**2 - flat * ((e**2).sum(1) - scene.pole_radius**2)
    t_side = (-half_b - disc.clamp(min=0).sqrt()) / flat
    z = origin[2] + t_side * dirs[:, 2:]
    hit = (disc >= 0) & (t_side > 0) & (z >= scene.pole_z[:, 0]) & (z <= scene.pole_z[:, 1])
    t_side = t_side.masked_fill_(~hit, math.inf)
    t_top = (scene.pole_z[:, 1] - origin[2]) / dirs[:, 2:]
    top_xy = origin[:2, None] + t_top[:, None, :] * dirs[:, :2, None] - scene.pole_center.T  # (R, 2, C)
    hit = (t_top > 0) & ((top_xy**2).sum(1) <= scene.pole_radius**2)
    t_top = t_top.masked_fill_(~hit, math.inf)

    t, primitive = torch.cat([t_plane, t_side, t_top], 1).min(1)
    n_planes, n_poles = normals.shape[0], e.shape[0]
    cos = facing.gather(1, primitive.clamp(max=n_planes - 1)[:, None])[:, 0].abs()
    if n_poles:
        side = (primitive >= n_planes) & (primitive < n_planes + n_poles)
        pole = (primitive - n_planes).clamp(0, n_poles - 1)
        radial = (origin[:2] + t[:, None] * dirs[:, :2] - scene.pole_center[pole]) / scene.pole_radius[pole, None]
        cos = torch.where(side, (radial * dirs[:, :2]).sum(1).abs(), cos)
        cos = torch.where(primitive >= n_planes + n_poles, dirs[:, 2].abs(), cos)
    return t, primitive, cos


def _cast(scene: Scene, origin: Tensor, dirs: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """As :func:`_cast_chunk` for all planes, with primitive indexing scene planes then poles."""
    # A box face seen from behind is never the nearest hit (the box's front is nearer): skip it.
    planes = torch.nonzero(~scene.plane_solid | (scene.planes[:, :3] @ origin > scene.planes[:, 3]))[:, 0]
    parts = [_cast_chunk(scene, planes, origin, chunk) for chunk in dirs.split(_RAY_CHUNK)]
    t, primitive, cos = (torch.cat(column) for column in zip(*parts))
    on_plane = primitive < planes.numel()
    primitive = torch.where(
        on_plane, planes[primitive.clamp(max=planes.numel() - 1)], primitive - planes.numel() + scene.planes.shape[0]
    )
    return t, primitive, cos


def _scan(
    scene: Scene,
    rotation: Tensor,
    origin: Tensor,
    dirs_sensor: Tensor,
    max_range: float,
    range_noise: float,
    dropout: float,
    clutter: float,
    seed: int,
) -> Scan:
    """Casts unit rays ``dirs_sensor (R, 3)`` of a sensor at ``origin`` whose axes are the columns
    of ``rotation`` (world frame) and applies noise, dropout and clutter."""
    if max_range <= 0 or range_noise < 0 or not 0 <= dropout <= 1 or clutter < 0:
        raise ValueError(
            f"need max_range > 0, range_noise >= 0, 0 <= dropout <= 1, clutter >= 0; got max_range={max_range}, "
            f"range_noise={range_noise}, dropout={dropout}, clutter={clutter}"
        )
    dirs_world = dirs_sensor @ rotation.T
    t, primitive, cos = _cast(scene, origin, dirs_world)

    g = torch.Generator().manual_seed(seed)
    measured = t + range_noise * torch.randn(t.shape, generator=g, dtype=_F64)
    kept = torch.rand(t.shape, generator=g, dtype=_F64) >= dropout
    ray = torch.nonzero(torch.isfinite(t) & (measured > 0) & (measured <= max_range) & kept)[:, 0]
    n_planes, not_plane = scene.planes.shape[0], torch.full((2 * scene.pole_object.numel(),), -1)
    labels = torch.cat([torch.arange(n_planes), not_plane])[primitive[ray]]
    instance = torch.cat([scene.plane_object, scene.pole_object, scene.pole_object])[primitive[ray]]
    # Lambertian return with mild atmospheric loss.
    intensity = scene.object_albedo[instance] * cos[ray] * torch.exp(-measured[ray] / 250.0)
    points = measured[ray, None] * dirs_sensor[ray]

    # Clutter (dust, rain, multipath) floats uniformly in the free space the sensor sees: a ray is
    # drawn with weight (free range)^3, then a range with density ~ r^2 along it.
    n_clutter = round(clutter * ray.numel())
    if n_clutter:
        free = t.clamp(max=max_range)
        clutter_ray = torch.multinomial(free**3, n_clutter, replacement=True, generator=g)
        clutter_range = free[clutter_ray] * torch.rand(n_clutter, generator=g, dtype=_F64) ** (1 / 3)
        points = torch.cat([points, clutter_range[:, None] * dirs_sensor[clutter_ray]])
        intensity = torch.cat([intensity, 0.2 * torch.rand(n_clutter, generator=g, dtype=_F64)])
        minus_one = torch.full((n_clutter,), -1, dtype=torch.int64)
        labels, instance = torch.cat([labels, minus_one]), torch.cat([instance, minus_one])
        ray = torch.cat([ray, clutter_ray])

    # World plane n.X = d becomes (R^T n).x = d - n.origin in the sensor frame; flip to d >= 0.
    normals = scene.planes[:, :3] @ rotation
    offsets = scene.planes[:, 3] - scene.planes[:, :3] @ origin
    sign = torch.where(offsets < 0, -1.0, 1.0).to(_F64)
    planes = torch.cat([normals * sign[:, None], (offsets * sign)[:, None]], 1)
    pose = torch.eye(4, dtype=_F64)
    pose[:3, :3], pose[:3, 3] = rotation, origin
    return Scan(
        points=points.float(),
        intensity=intensity.float(),
        labels=labels,
        instance=instance,
        ray=ray,
        planes=planes.float(),
        pose=pose.float(),
    )


def lidar_scan(
    scene: Scene,
    n_beams: int = 64,
    n_azimuth: int = 2048,
    vertical_fov: Tuple[float, float] = (-25.0, 3.0),
    max_range: float = 100.0,
    range_noise: float = 0.02,
    dropout: float = 0.0,
    clutter: float = 0.0,
    sensor_height: float = 1.73,
    seed: int = 0,
) -> Scan:
    """A spinning LiDAR standing ``sensor_height`` above the world origin.

    Args:
        scene: from :func:`make_scene`.
        n_beams: beams, evenly spaced in elevation over ``vertical_fov`` (degrees, low to high).
        n_azimuth: firings per revolution, evenly spaced, the first along +x, counter-clockwise.
        max_range: returns measured farther than this (metres) are lost.
        range_noise: standard deviation (metres) of Gaussian noise along each ray.
        dropout: probability that a return is lost.
        clutter: spurious returns added, as a fraction of the surviving returns, uniformly in the
            free space in front of the surfaces; labelled -1.
        sensor_height: metres above the ground at the origin.
        seed: seeds the noise, dropout and clutter (the scene has its own seed).

    Returns:
        a :class:`Scan` in the sensor frame (x forward, y left, z up, origin at the sensor, axes
        parallel to the world's). Returns come in ray order, ``ray = beam * n_azimuth + step``,
        beams from the lowest; clutter follows. ``ray // n_azimuth`` is the ring.
    """
    elevation = torch.linspace(math.radians(vertical_fov[0]), math.radians(vertical_fov[1]), n_beams, dtype=_F64)
    azimuth = torch.arange(n_azimuth, dtype=_F64) * (2 * math.pi / n_azimuth)
    el, az = elevation[:, None], azimuth[None, :]
    dirs = torch.stack(torch.broadcast_tensors(el.cos() * az.cos(), el.cos() * az.sin(), el.sin()), -1)
    origin = torch.tensor([0.0, 0.0, sensor_height], dtype=_F64)  # the ground passes through the world origin
    rotation = torch.eye(3, dtype=_F64)
    return _scan(scene, rotation, origin, dirs.reshape(-1, 3), max_range, range_noise, dropout, clutter, seed)


def depth_camera_scan(
    scene: Scene,
    width: int = 320,
    height: int = 240,
    horizontal_fov: float = 70.0,
    position: Tuple[float, float, float] = (0.0, 0.0, 1.5),
    yaw: float = 0.0,
    pitch: float = -15.0,
    max_range: float = 15.0,
    range_noise: float = 0.01,
    dropout: float = 0.0,
    clutter: float = 0.0,
    seed: int = 0,
) -> Scan:
    """A pinhole depth camera: one ray through each pixel centre, square pixels.

    Args:
        scene: from :func:`make_scene`.
        width, height: image size in pixels.
        horizontal_fov: degrees across the image width.
        position: camera centre in the world frame (z measured from the world origin, which lies
            on the ground).
        yaw: degrees, the viewing direction's heading (0 looks along +x, counter-clockwise).
        pitch: degrees above the horizon (negative looks down).
        max_range, range_noise, dropout, clutter, seed: as for :func:`lidar_scan`; the noise is
            along the ray.

    Returns:
        a :class:`Scan` in the camera's optical frame (x right, y down, z forward: OpenCV), so
        ``points[:, 2]`` is the depth of pixel ``ray = row * width + col``.
    """
    y, p = math.radians(yaw), math.radians(pitch)
    forward = torch.tensor([math.cos(p) * math.cos(y), math.cos(p) * math.sin(y), math.sin(p)], dtype=_F64)
    right = torch.tensor([math.sin(y), -math.cos(y), 0.0], dtype=_F64)
    camera = Camera(
        torch.stack([right, torch.linalg.cross(forward, right), forward], 1),
        torch.tensor(position, dtype=_F64),
        width,
        height,
        focal_length(width, horizontal_fov),
    )
    dirs = camera.rays()
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    return _scan(scene, camera.rotation, camera.position, dirs, max_range, range_noise, dropout, clutter, seed)


def sampled_street(n: int, seed: int = 0) -> Tensor:
    """Exactly n points, (n, 3) float32, sampled from a street (a ground plane, a wall, a box and a
    pole) densely near the origin as a LiDAR sees it (points thin out with range), in random order.
    No ray casting and no ground truth: a cheap cloud of a fixed size for benchmarks and demos,
    where :func:`lidar_scan` gives a scan with labels and planes."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    ground_n, wall_n, box_n, pole_n = int(n * 0.55), int(n * 0.2), int(n * 0.15), n - int(n * 0.9)
    r = torch.rand(ground_n, generator=g) ** 2 * 40.0
    a = torch.rand(ground_n, generator=g) * 2 * torch.pi
    parts.append(torch.stack([r * a.cos(), r * a.sin(), torch.randn(ground_n, generator=g) * 0.02 - 1.7], 1))
    t = torch.rand(wall_n, generator=g)
    parts.append(torch.stack([t * 60 - 30, torch.full_like(t, 12.0), torch.rand(wall_n, generator=g) * 4 - 1.7], 1))
    u = torch.rand(box_n, 3, generator=g) * torch.tensor([4.0, 2.0, 1.6]) + torch.tensor([6.0, -5.0, -1.7])
    face = torch.randint(0, 3, (box_n,), generator=g)
    u[torch.arange(box_n), face] = torch.where(
        torch.rand(box_n, generator=g) < 0.5,
        torch.tensor([6.0, -5.0, -1.7])[face],
        torch.tensor([10.0, -3.0, -0.1])[face],
    )
    parts.append(u)
    h = torch.rand(pole_n, generator=g) * 6 - 1.7
    ang = torch.rand(pole_n, generator=g) * 2 * torch.pi
    parts.append(torch.stack([-8 + 0.15 * ang.cos(), 4 + 0.15 * ang.sin(), h], 1))
    return torch.cat(parts)[torch.randperm(n, generator=g)]


def batch_scenes(
    seeds: Sequence[int], sensor: str = "lidar", scene_options: Optional[dict] = None, **scan_options
) -> SceneBatch:
    """Scans of ``make_scene(seed, **scene_options)`` for each seed, padded into one batch.

    ``sensor`` is ``"lidar"`` (:func:`lidar_scan`) or ``"depth_camera"`` (:func:`depth_camera_scan`);
    ``scan_options`` go to it, and each scan's noise is seeded with its scene's seed.
    """
    scan_fn = {"lidar": lidar_scan, "depth_camera": depth_camera_scan}.get(sensor)
    if scan_fn is None:
        raise ValueError(f'sensor must be "lidar" or "depth_camera", got "{sensor}"')
    scenes = [make_scene(seed, **(scene_options or {})) for seed in seeds]
    scans = [scan_fn(scene, seed=scene.seed, **scan_options) for scene in scenes]
    lengths = torch.tensor([s.points.shape[0] for s in scans], dtype=torch.int64)
    n_max, batch = int(lengths.max()) if scans else 0, len(scans)
    points = torch.zeros(batch, n_max, 3)
    intensity = torch.zeros(batch, n_max)
    labels = torch.full((batch, n_max), -1, dtype=torch.int64)
    instance = torch.full((batch, n_max), -1, dtype=torch.int64)
    for b, s in enumerate(scans):
        n = s.points.shape[0]
        points[b, :n], intensity[b, :n], labels[b, :n], instance[b, :n] = s.points, s.intensity, s.labels, s.instance
    return SceneBatch(points, lengths, intensity, labels, instance, [s.planes for s in scans], scenes)


class PlaneScore(NamedTuple):
    recall: float  # share of the required ground-truth planes that some detection matches
    precision: float  # share of the detections (padding rows left out) that match some ground-truth plane
    found: Tensor  # (P,) bool: ground-truth plane p is matched by a detection
    required: Tensor  # (P,) bool: ground-truth plane p holds at least min_share of the points
    matched: Tensor  # (M,) int64: per input row, the ground-truth plane it matches (the nearest); -1 if none or padding


def _one_cloud_planes(detected) -> Tensor:
    """A detector's planes for one cloud as a float64 CPU ``(M, 4)`` tensor, padding rows kept."""
    if not isinstance(detected, Tensor) and hasattr(detected, "planes"):
        detected = detected.planes  # a PlaneDetections (or anything shaped like it)
    if not isinstance(detected, Tensor):
        raise TypeError(f"detected must be a tensor of planes or a PlaneDetections, got {type(detected).__name__}")
    if detected.dim() == 3:
        if detected.shape[0] != 1:
            raise ValueError(
                f"evaluate_planes scores one cloud, got detections of {detected.shape[0]} clouds "
                f"{tuple(detected.shape)}; score cloud b alone: evaluate_planes(det.planes[b], "
                "batch.planes[b], batch.labels[b, :batch.lengths[b]])"
            )
        detected = detected[0]
    if detected.dim() == 1 and detected.shape[0] == 4:
        detected = detected[None]  # one plane
    if detected.dim() != 2 or detected.shape[1] != 4:
        raise ValueError(
            f"detected must be (M, 4) planes (n, d) of one cloud, or (1, M, 4); got {tuple(detected.shape)}"
        )
    return detected.detach().to("cpu", _F64)


def evaluate_planes(
    detected: Union[Tensor, Tuple[Tensor, ...]],
    planes: Tensor,
    labels: Tensor,
    max_angle_deg: float = 2.0,
    max_offset: float = 0.05,
    min_share: float = 0.05,
) -> PlaneScore:
    """Scores one cloud's detected planes against a scan's ``planes (P, 4)`` and ``labels (N,)``.

    ``detected`` is taken as a detector returns it: ``(M, 4)`` rows ``(n, d)``, ``(1, M, 4)``, or
    the :class:`pointops.PlaneDetections` of a one-cloud batch, on any device. Rows holding a NaN
    or Inf are padding (``detect_planes`` pads with NaN rows when it finds fewer than k planes):
    they are no detection, count for neither recall nor precision, and get ``matched == -1``.
    A batch of several clouds is refused: score each cloud on its own, with its labels cut to its
    length (``labels[b, :lengths[b]]``, since padding labels would count as points).

    A detection matches a ground-truth plane when their normals are within ``max_angle_deg`` and
    their offsets within ``max_offset`` metres; either sign of a detected ``(n, d)`` is accepted,
    since ``(n, d)`` and ``(-n, -d)`` are the same plane. Recall counts only the ground-truth planes
    holding at least ``min_share`` of the scan's points (clutter included in the total); precision
    counts a detection as right when it matches any ground-truth plane, seen or not. With no
    required plane the recall is 1; with no detection the precision is 1.
    """
    rows = _one_cloud_planes(detected)
    planes, labels = planes.detach().to("cpu", _F64), labels.detach().cpu()
    real = torch.isfinite(rows).all(1)
    detected = rows[real]
    cos = detected[:, :3] @ planes[:, :3].T / detected[:, :3].norm(dim=1, keepdim=True)  # (M, P)
    sign = torch.where(cos < 0, -1.0, 1.0).to(_F64)
    offset_gap = (detected[:, 3:] / detected[:, :3].norm(dim=1, keepdim=True) * sign - planes[:, 3]).abs()
    angle = cos.abs().clamp(max=1).acos()
    close = (angle <= math.radians(max_angle_deg)) & (offset_gap <= max_offset)  # (M, P)
    support = torch.bincount(labels[labels >= 0], minlength=planes.shape[0])[: planes.shape[0]]
    required = support >= min_share * max(labels.numel(), 1)
    found = close.any(0)
    # Nearly coplanar ground-truth planes (box tops at one height) can both be close: the nearest
    # in tolerance units wins.
    cost = (angle / math.radians(max_angle_deg) + offset_gap / max_offset).masked_fill(~close, math.inf)
    best = cost.argmin(1) if planes.shape[0] else torch.zeros(detected.shape[0], dtype=torch.int64)
    matched = torch.full((rows.shape[0],), -1, dtype=torch.int64)
    matched[real] = torch.where(close.any(1), best, -1)
    n_required = int(required.sum())
    recall = float((found & required).sum()) / n_required if n_required else 1.0
    precision = float(close.any(1).sum()) / detected.shape[0] if detected.shape[0] else 1.0
    return PlaneScore(recall, precision, found, required, matched)
