"""pointops demo: one generated LiDAR scan, sampled, rasterized, voxelized and searched for planes,
drawn as pictures with titles, axes in metres and legends; and a depth camera's view of objects on a
table, found by point pair features (the ``ppf`` picture).

    python -m pointops.demo [--out DIR] [--device cpu|cuda] [--seed 3] [--beams 32] [--azimuth 1024]
                            [--only fps height ...]

Every picture but ``ppf`` shows the same scan: a spinning LiDAR (``pointops.scenes.lidar.lidar_scan``)
in a generated street scene with ground-truth planes and labels. Top views have x forward pointing
up and y left pointing left, as seen from above, with the sensor at (0, 0). The ops run on
``--device`` (CUDA when available, else the CPU); CPU and CUDA results are bit-identical, so those
pictures are the same on both (the ``ppf`` picture's matcher re-scores with torch matrix products,
which may round differently). The pictures are drawn with matplotlib: ``pip install '.[demo]'``.

Each picture is a function registered with :func:`picture`; a new family adds its own with::

    @picture("name")
    def draw_name(demo: Demo) -> Tuple[Figure, str]:   # the figure and a one-line summary
        ...

:class:`Demo` holds the scan on the device and what several pictures share (the detected planes,
the height above the ground), computed once and timed.
"""

import argparse
import math
import os
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

import pointops
from pointops import scenes
from pointops.scenes import lidar, tabletop

if TYPE_CHECKING:  # annotations only: matplotlib is imported where a picture is drawn
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Settings:
    """Sizes of the demo. The defaults (about 31k points) are sized for a CPU; ``--beams 64
    --azimuth 2048`` makes a denser scan for a GPU."""

    seed: int = 3  # the scene: seed 3 has a ground, two walls and a box side each holding >= 5 % of the points
    beams: int = 32  # LiDAR beams (rings)
    azimuth: int = 1024  # firings per revolution
    fps_k: int = 1024  # farthest point samples
    planes_k: int = 8  # planes detect_planes looks for
    n_phi: int = 45  # plane Hough grid: 4 degree orientation bins, 0.2 m rho bins over +-50 m
    n_theta: int = 45
    rho_step: float = 0.2
    rho_max: float = 50.0
    extent: float = 40.0  # top views show [-extent, extent) in x and y, metres
    cell: float = 0.2  # BEV cell, metres
    pillar: float = 0.5  # pillar size for the voxel picture, metres
    voxel: float = 0.25  # 3D voxel size for the voxel picture, metres
    ppf_occlusion: float = 0.3  # share of the PPF picture's target hidden by a box
    ppf_samples: int = 8000  # surface samples of each PPF model (downsampled to the preset's step)


# ---- the shared scan -------------------------------------------------------------------------------


class Demo:
    """The scan on ``device`` and the results several pictures share, computed once and timed."""

    def __init__(self, settings: Settings, device: str):
        self.settings = settings
        self.device = torch.device(device)
        self.scene = lidar.make_scene(settings.seed)
        scan = lidar.lidar_scan(
            self.scene,
            n_beams=settings.beams,
            n_azimuth=settings.azimuth,
            range_noise=0.02,
            clutter=0.05,
            seed=settings.seed,
        )
        # The pictures show the square around the sensor (as a detector's point_range would): the
        # far ground out to the LiDAR's 100 m would take a third of the FPS samples out of sight.
        inside = (scan.points[:, :2].abs() < settings.extent).all(1)
        self.scan = scan._replace(
            points=scan.points[inside],
            intensity=scan.intensity[inside],
            labels=scan.labels[inside],
            instance=scan.instance[inside],
            ray=scan.ray[inside],
        )
        self.points = self.scan.points[None].to(self.device)  # (1, N, 3)
        self.points_intensity = torch.cat([self.points, self.scan.intensity[None, :, None].to(self.device)], -1)
        self.timings: Dict[str, float] = {}  # op -> milliseconds on the device

    @property
    def n(self) -> int:
        return int(self.points.shape[1])

    def timed(self, name: str, fn: Callable):
        """fn() timed on the device (synchronized); on CUDA after one untimed warm-up call."""
        if self.device.type == "cuda":
            fn()
        self._sync()
        start = time.perf_counter()
        result = fn()
        self._sync()
        self.timings[name] = (time.perf_counter() - start) * 1e3
        return result

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @cached_property
    def planes(self) -> "pointops.PlaneDetections":
        s = self.settings
        return self.timed(
            "detect_planes",
            lambda: pointops.detect_planes(
                self.points,
                s.planes_k,
                n_phi=s.n_phi,
                n_theta=s.n_theta,
                rho_step=s.rho_step,
                rho_max=s.rho_max,
                iterations=2,
            ),
        )

    @cached_property
    def score(self) -> lidar.PlaneScore:
        return lidar.evaluate_planes(self.planes, self.scan.planes, self.scan.labels)

    @cached_property
    def ground(self) -> Tensor:
        """(4,) the ground as (n, d) with n pointing up: the detected plane with the most votes among
        those within 10 degrees of horizontal; z = -1.73 m (the sensor's mounting height) if none."""
        planes = self.planes.planes[0].cpu().double()
        for plane in planes:  # detect_planes returns planes in descending vote order
            if torch.isfinite(plane).all() and abs(float(plane[2])) >= math.cos(math.radians(10.0)):
                return plane if plane[2] > 0 else -plane
        return torch.tensor([0.0, 0.0, 1.0, -1.73], dtype=torch.float64)

    @cached_property
    def above_ground(self) -> Tensor:
        """(1, N, 4) x, y, height above the detected ground, intensity: the z that BEV pictures show,
        so that a tilted ground reads as 0 m everywhere."""
        # Elementwise, in a fixed order: a matmul would sum in a device-dependent order, and the
        # pictures would no longer be the same on CPU and CUDA.
        n = self.ground.float().tolist()
        p = self.points
        height = ((p[..., 0] * n[0] + p[..., 1] * n[1]) + p[..., 2] * n[2]) - n[3]
        return torch.cat([self.points[..., :2], height.unsqueeze(-1), self.points_intensity[..., 3:]], -1)

    @cached_property
    def height_range(self) -> Tuple[float, float]:
        """[low, high) of the height above ground the BEV pictures span: from just under the ground
        (range noise) to the 99.9th percentile of the points, in whole metres."""
        heights = self.above_ground[0, :, 2].float().cpu()
        return -0.5, float(max(2.0, math.ceil(float(heights.quantile(0.999)))))

    def bev_grid(self) -> Tuple[List[float], List[float]]:
        r, c = self.settings.extent, self.settings.cell
        low, high = self.height_range
        return [-r, -r, low, r, r, high], [c, c]


# ---- drawing helpers -------------------------------------------------------------------------------

PICTURES: Dict[str, Callable[[Demo], Tuple["Figure", str]]] = {}


def picture(name: str):
    """Registers a picture function ``fn(demo) -> (Figure, one-line summary)``, written to NAME.png."""

    def register(fn):
        PICTURES[name] = fn
        return fn

    return register


def figure(width: float, height: float):
    """A matplotlib figure of width x height inches at 100 dpi, laid out so that titles, colour bars
    and legends do not overlap."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def top_view(ax, demo: Demo, title: str, dark: bool = False) -> None:
    """Axes of a top view: y (left) along the horizontal axis, increasing to the left, x (forward)
    up, in metres; the sensor and its x / y axes drawn at the origin (in white over a dark image)."""
    r = demo.settings.extent
    ax.set_xlim(r, -r)
    ax.set_ylim(-r, r)
    ax.set_aspect("equal")
    ax.set_xlabel("y (m), left")
    ax.set_ylabel("x (m), forward")
    ax.set_title(title, fontsize=10)
    from matplotlib import patheffects

    ink, paper = ("white", "black") if dark else ("black", "white")
    outline = [patheffects.withStroke(linewidth=3, foreground=paper)]
    arrow = dict(arrowstyle="-|>", color=ink, lw=1.5, path_effects=outline)
    ax.annotate("", xy=(0, 0.2 * r), xytext=(0, 0), arrowprops=arrow)
    ax.annotate("", xy=(0.2 * r, 0), xytext=(0, 0), arrowprops=arrow)
    ax.text(0, 0.22 * r, "x", color=ink, fontsize=11, fontweight="bold", ha="center", va="bottom", path_effects=outline)
    ax.text(0.22 * r, 0, "y", color=ink, fontsize=11, fontweight="bold", ha="right", va="center", path_effects=outline)
    ax.plot(
        [0],
        [0],
        marker="o",
        markersize=6,
        color="black",
        markerfacecolor="white",
        linestyle="none",
        label="sensor",
        zorder=5,
    )


def image_extent(point_range: Sequence[float]) -> Tuple[float, float, float, float]:
    """imshow extent of a forward_up image (row 0 = x near x_max, column 0 = y near y_max)."""
    return (point_range[4], point_range[1], point_range[0], point_range[3])


def _to_forward_up(image: Tensor) -> Tensor:
    """(..., H, W) OpenPCDet layout [iy, ix] -> (..., W, H) top view [W-1-ix, H-1-iy]."""
    return image.transpose(-1, -2).flip(-1, -2)


def _masked(values: Tensor, empty: Tensor) -> np.ma.MaskedArray:
    return np.ma.masked_array(values.float().cpu().numpy(), mask=empty.cpu().numpy())


def _colormap(name: str, empty: str = "#e6e6e6"):
    import matplotlib

    return matplotlib.colormaps[name].with_extremes(bad=empty)  # bad: cells with no point


# Detection i is drawn in colour i; the ground truth plane it matches gets the same colour.
_PLANE_COLOURS = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#17becf",
    "#e377c2",
    "#8c564b",
    "#bcbd22",
    "#7f7f7f",
]
_NO_PLANE = "#c8c8c8"


def _scatter_labels(ax, xy: np.ndarray, colours: np.ndarray, order: np.ndarray) -> None:
    ax.scatter(xy[order, 1], xy[order, 0], c=colours[order], s=0.6, linewidths=0, rasterized=True)


# ---- the pictures ----------------------------------------------------------------------------------


@picture("fps")
def draw_fps(demo: Demo):
    k = demo.settings.fps_k
    samples, indices = demo.timed("sample_farthest_points", lambda: pointops.sample_farthest_points(demo.points, K=k))
    assert int(indices.unique().numel()) == k, "farthest point sampling repeated a point"
    points, samples = demo.scan.points.numpy(), samples[0].cpu().numpy()
    fig = figure(8, 8.4)
    ax = fig.add_subplot()
    top_view(
        ax,
        demo,
        f"sample_farthest_points: {k:,} samples (red) of all {demo.n:,} points (grey)\n"
        "the samples spread evenly in space, whatever the density of the points",
    )
    from matplotlib.lines import Line2D

    ax.scatter(points[:, 1], points[:, 0], s=0.6, c="#8c8c8c", linewidths=0, rasterized=True)
    ax.scatter(samples[:, 1], samples[:, 0], s=9, c="#d62728", linewidths=0)
    ax.legend(
        handles=[
            ax.get_legend_handles_labels()[0][0],
            Line2D([], [], marker="o", markersize=3, linestyle="none", color="#8c8c8c", label=f"all {demo.n:,} points"),
            Line2D(
                [],
                [],
                marker="o",
                markersize=5,
                linestyle="none",
                color="#d62728",
                label=f"{k:,} farthest point samples",
            ),
        ],
        loc="lower right",
        framealpha=0.9,
    )
    return fig, f"{k} farthest point samples of {demo.n} points"


@picture("height")
def draw_height(demo: Demo):
    import matplotlib.colors

    point_range, cell = demo.bev_grid()
    low, high = demo.height_range
    gray = demo.timed("height_image", lambda: pointops.height_image(demo.above_ground, None, point_range, cell))[0]
    fig = figure(8.6, 8.4)
    ax = fig.add_subplot()
    top_view(
        ax,
        demo,
        f"height_image: the highest point of each {cell[0]} m cell, height above the detected "
        f"ground\nuint8 0..255 over [{low:g}, {high:g}) m, {tuple(gray.shape)}; "
        "grey: no point",
    )
    image = ax.imshow(
        _masked(gray, gray == 0),
        cmap=_colormap("viridis"),
        extent=image_extent(point_range),
        norm=matplotlib.colors.Normalize(0, 255),
        interpolation="nearest",
    )
    scale = 255.0 / (high - low)
    metres = np.arange(math.ceil(low), math.floor(high) + 1)
    bar = fig.colorbar(image, ax=ax, shrink=0.8, ticks=(metres - low) * scale)
    bar.set_ticklabels([f"{m:g} m" for m in metres])
    bar.set_label(f"height h above the ground; pixel value floor((h - ({low:g} m)) * 255 / {high - low:g} m)")
    ax.legend(loc="lower right")
    return fig, f"height image {tuple(gray.shape)} uint8, height above ground in [{low:g}, {high:g}) m"


@picture("bev")
def draw_bev(demo: Demo):
    from matplotlib.patches import Patch

    point_range, cell = demo.bev_grid()
    low, high = demo.height_range
    channels = ["max_z", "density", "top_feature", "occupancy"]
    image = demo.timed(
        "bev_rasterize",
        lambda: pointops.bev_rasterize(demo.above_ground, channels, None, point_range, cell, forward_up=True),
    )[0]
    # The picture's arithmetic on the CPU: CUDA divides a tensor by a Python number as a product
    # with its reciprocal, which can round a pixel differently from the CPU's division.
    max_z, density, top, occupancy = image.cpu()
    empty = occupancy == 0
    # Intensities of Lambertian returns are mostly small: show them against their 99th percentile.
    bright = max(float(top[~empty].quantile(0.99)), 1e-6) if bool((~empty).any()) else 1.0
    composite = torch.stack([(max_z - low) / (high - low), density, top / bright], -1).clamp(0, 1)
    composite = composite * occupancy.unsqueeze(-1)

    fig = figure(13, 11.6)
    axes = fig.subplots(2, 2)
    extent = image_extent(point_range)
    ax = axes[0, 0]
    top_view(ax, demo, "the three channels as one RGB image (Complex-YOLO's input)", dark=True)
    ax.imshow(composite.numpy(), extent=extent, interpolation="nearest")
    ax.legend(
        handles=[
            Patch(color="red", label=f"R: max_z, [{low:g}, {high:g}) m"),
            Patch(color="lime", label="G: density"),
            Patch(color="blue", label=f"B: top_feature, 0..{bright:.2f}"),
            Patch(color="black", label="no point"),
        ],
        loc="lower right",
        framealpha=0.9,
    )
    panels = [
        (axes[0, 1], max_z, "max_z: highest point per cell", "height above the ground (m)", "viridis", (low, high)),
        (axes[1, 0], density, "density: min(1, ln(count + 1) / ln 64)", "density", "magma", (0.0, 1.0)),
        (axes[1, 1], top, "top_feature: intensity of the highest point", "intensity", "cividis", (0.0, bright)),
    ]
    for ax, values, title, unit, cmap, (vmin, vmax) in panels:
        top_view(ax, demo, title)
        shown = ax.imshow(
            _masked(values, empty), cmap=_colormap(cmap), vmin=vmin, vmax=vmax, extent=extent, interpolation="nearest"
        )
        fig.colorbar(shown, ax=ax, shrink=0.75, label=unit)
    fig.suptitle(
        f"bev_rasterize: {', '.join(channels)} of {demo.n:,} points on a {cell[0]} m grid, "
        f"{tuple(image.shape[1:])} per channel, forward_up; "
        "grey / black: no point",
        fontsize=12,
    )
    return fig, f"BEV channels max_z, density, top_feature {tuple(image.shape[1:])} and their RGB composite"


@picture("planes")
def draw_planes(demo: Demo):
    from matplotlib.lines import Line2D

    det, score, scan = demo.planes, demo.score, demo.scan
    planes, votes, labels = det.planes[0].cpu(), det.votes[0].cpu(), det.labels[0].cpu().numpy()
    real = [i for i in range(planes.shape[0]) if bool(torch.isfinite(planes[i]).all())]
    xy = scan.points.numpy()
    colours = np.array(_PLANE_COLOURS)

    fig = figure(16, 8.8)
    left, right = fig.subplots(1, 2)
    point_colours = np.where(labels >= 0, colours[np.clip(labels, 0, None) % len(colours)], _NO_PLANE)
    # The biggest plane (the ground) first, then the smaller ones over it; points on no plane under all.
    size = np.bincount(labels[labels >= 0], minlength=planes.shape[0])
    order = np.argsort(np.where(labels >= 0, -size[np.clip(labels, 0, None)], -len(labels) - 1), kind="stable")
    top_view(
        left,
        demo,
        f"detect_planes: {len(real)} planes (k = {demo.settings.planes_k}), points coloured by "
        f"label\n{demo.settings.n_phi} x {demo.settings.n_theta} orientations, "
        f"{demo.settings.rho_step} m rho bins, 2 rounds",
    )
    _scatter_labels(left, xy, point_colours, order)
    handles = []
    for i in real:
        n, d = planes[i, :3].tolist(), float(planes[i, 3])
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="none",
                color=colours[i % len(colours)],
                label=f"#{i}: {int(votes[i]):,} votes, n = ({n[0]:+.2f}, {n[1]:+.2f}, {n[2]:+.2f}), d = {d:.2f} m",
            )
        )
    handles.append(Line2D([], [], marker="o", linestyle="none", color=_NO_PLANE, label="on no plane"))
    left.legend(
        handles=handles,
        loc="lower right",
        fontsize=8,
        framealpha=0.9,
        title="detection: peak votes, n . p = d",
        title_fontsize=8,
    )

    # Ground truth: a plane found by detection i in colour i, the others dark grey.
    truth = scan.labels.numpy()
    match_of = {int(score.matched[i]): i for i in reversed(real) if int(score.matched[i]) >= 0}
    plane_colour = np.array(
        [colours[match_of[p] % len(colours)] if p in match_of else "#505050" for p in range(scan.planes.shape[0])]
        or ["#505050"]
    )
    truth_colours = np.where(truth >= 0, plane_colour[np.clip(truth, 0, None)], _NO_PLANE)
    truth_size = np.bincount(truth[truth >= 0], minlength=scan.planes.shape[0])
    truth_order = np.argsort(np.where(truth >= 0, -truth_size[np.clip(truth, 0, None)], -len(truth) - 1), kind="stable")
    top_view(
        right,
        demo,
        f"ground truth: recall {score.recall:.2f} of the {int(score.required.sum())} planes "
        f"holding >= 5 % of the points,\nprecision {score.precision:.2f} "
        "(a match: within 2 degrees and 5 cm)",
    )
    _scatter_labels(right, xy, truth_colours, truth_order)
    kinds = [demo.scene.object_kind[int(o)] for o in demo.scene.plane_object]
    handles = []
    for p in np.argsort(-truth_size, kind="stable"):
        if truth_size[p] == 0 or (p not in match_of and not bool(score.required[p]) and len(handles) >= 6):
            continue
        share = 100.0 * truth_size[p] / len(truth)
        found = f"found by #{match_of[p]}" if p in match_of else "not found"
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="none",
                color=plane_colour[p],
                label=f"plane {p} ({kinds[p]}, {share:.1f} % of points): {found}",
            )
        )
    handles.append(Line2D([], [], marker="o", linestyle="none", color="#505050", label="other planes, not found"))
    handles.append(Line2D([], [], marker="o", linestyle="none", color=_NO_PLANE, label="poles and clutter"))
    right.legend(handles=handles, loc="lower right", fontsize=8, framealpha=0.9)
    return fig, (
        f"{len(real)} detected planes next to the ground truth (recall {score.recall:.2f}, "
        f"precision {score.precision:.2f})"
    )


@picture("voxels")
def draw_voxels(demo: Demo):
    import matplotlib.colors

    s = demo.settings
    point_range, _ = demo.bev_grid()
    low, high = demo.height_range
    max_points = 32
    height, width = pointops.bev_grid_size(point_range, [s.pillar, s.pillar])
    pillars = demo.timed(
        "voxelize",
        lambda: pointops.voxelize(
            demo.above_ground,
            [s.pillar, s.pillar, high - low],
            point_range,
            max_points_per_voxel=max_points,
            max_voxels=height * width,
        ),
    )
    counts = pillars.num_points.to(torch.float32).unsqueeze(-1)  # (1, V, 1) the pillars' one feature
    canvas = demo.timed(
        "pillar_scatter", lambda: pointops.pillar_scatter(counts, pillars.coords, pillars.num_voxels, height, width)
    )[0, 0]
    canvas = _to_forward_up(canvas)
    cubes = demo.timed(
        "voxelize_dynamic",
        lambda: pointops.voxelize_dynamic(demo.above_ground, [s.voxel, s.voxel, s.voxel], point_range),
    )
    coords = cubes.coords[0, : int(cubes.num_voxels[0])].long().cpu()  # (V, 3) (z, y, x)
    cols_h, cols_w = pointops.bev_grid_size(point_range, [s.voxel, s.voxel])
    per_column = torch.bincount(coords[:, 1] * cols_w + coords[:, 2], minlength=cols_h * cols_w)
    per_column = _to_forward_up(per_column.reshape(cols_h, cols_w))

    fig = figure(16, 7.6)
    left, right = fig.subplots(1, 2)
    extent = image_extent(point_range)
    n_pillars, kept = int(pillars.num_voxels[0]), int((pillars.point_voxel[0] >= 0).sum())
    top_view(
        left,
        demo,
        f"voxelize into {s.pillar} m pillars: {n_pillars:,} pillars hold {kept:,} of the "
        f"{demo.n:,} points\n"
        f"points stored per pillar (at most {max_points}), placed on the grid by pillar_scatter",
    )
    shown = left.imshow(
        _masked(canvas, canvas == 0),
        cmap=_colormap("plasma"),
        extent=extent,
        norm=matplotlib.colors.LogNorm(1, max_points),
        interpolation="nearest",
    )
    bar = fig.colorbar(shown, ax=left, shrink=0.75, label="points in the pillar")
    bar.set_ticks([1, 2, 4, 8, 16, 32])
    bar.set_ticklabels(["1", "2", "4", "8", "16", "32 (full)"])
    left.legend(loc="lower right")
    n_voxels = int(cubes.num_voxels[0])
    top_view(
        right,
        demo,
        f"voxelize_dynamic into {s.voxel} m cubes: {n_voxels:,} occupied voxels\n"
        "occupied voxels per column: tall objects stand out",
    )
    top = max(int(per_column.max()), 2)
    shown = right.imshow(
        _masked(per_column, per_column == 0),
        cmap=_colormap("plasma"),
        extent=extent,
        vmin=1,
        vmax=top,
        interpolation="nearest",
    )
    fig.colorbar(
        shown,
        ax=right,
        shrink=0.75,
        label=f"occupied {s.voxel} m voxels in the column (x {s.voxel} m: the column's filled height)",
    )
    right.legend(loc="lower right")
    return fig, f"{n_pillars} pillars (points per pillar) and {n_voxels} voxels (voxels per column)"


def _phi_theta_rho(planes: Tensor) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phi, theta) in degrees and rho in metres of planes (n, d) in the accumulator's convention:
    theta in [0, 180), so (n, d) is turned to (-n, -d) where needed (the same plane)."""
    n, d = planes[:, :3].double(), planes[:, 3].double()
    flip = torch.atan2(n[:, 1], n[:, 0]) < 0
    n, d = torch.where(flip.unsqueeze(-1), -n, n), torch.where(flip, -d, d)
    theta = torch.atan2(n[:, 1], n[:, 0]).clamp(0, math.pi)
    phi = torch.acos(n[:, 2].clamp(-1, 1))
    return np.degrees(phi.numpy()), np.degrees(theta.numpy()), d.numpy()


def _hough_legend(s: Settings) -> list:
    from matplotlib.lines import Line2D

    return [
        Line2D(
            [],
            [],
            marker="o",
            markersize=11,
            linestyle="none",
            markerfacecolor="none",
            markeredgecolor="black",
            label=f"hough_plane_peaks: the {3 * s.planes_k} strongest (bin centres)",
        ),
        Line2D(
            [],
            [],
            marker="X",
            markersize=9,
            linestyle="none",
            color="#7f7f7f",
            label="detect_planes after refit (#i, colours as in planes.png)",
        ),
    ]


@picture("hough")
def draw_hough(demo: Demo):
    import matplotlib.colors
    from matplotlib import patheffects

    s = demo.settings
    acc = demo.timed(
        "hough_planes",
        lambda: pointops.hough_planes(demo.points, s.rho_step, s.rho_max, n_phi=s.n_phi, n_theta=s.n_theta),
    )  # (1, n_phi, n_theta, n_rho)
    peaks = (
        demo.timed(
            "hough_plane_peaks",
            lambda: pointops.hough_plane_peaks(acc, k=3 * s.planes_k, radius=[2, 2, 2], min_votes=50.0),
        )
        .indices[0]
        .cpu()
    )
    peaks = peaks[peaks[:, 0] >= 0].double()
    acc = acc[0].cpu()
    n_rho = acc.shape[2]
    bin_phi, bin_theta, bin_rho = 180.0 / s.n_phi, 180.0 / s.n_theta, 2 * s.rho_max / n_rho
    peak_phi, peak_theta = (peaks[:, 0] + 0.5) * bin_phi, (peaks[:, 1] + 0.5) * bin_theta
    peak_rho = (peaks[:, 2] + 0.5) * bin_rho - s.rho_max
    planes = demo.planes.planes[0].cpu()
    real = [i for i in range(planes.shape[0]) if bool(torch.isfinite(planes[i]).all())]
    det_phi, det_theta, det_rho = _phi_theta_rho(planes[real]) if real else (np.zeros(0),) * 3
    outline = [patheffects.withStroke(linewidth=2.5, foreground="black")]

    def mark(ax, xs, ys, which):
        ax.scatter(xs, ys, s=150, facecolors="none", edgecolors="white", linewidths=1.5)
        for j, (x, y) in enumerate(which):
            i = real[j]
            colour = _PLANE_COLOURS[i % len(_PLANE_COLOURS)]
            ax.scatter([x], [y], s=90, marker="X", color=colour, edgecolors="white", linewidths=1.0, zorder=4)
            ax.annotate(
                f"#{i}",
                (x, y),
                textcoords="offset points",
                xytext=(8, -14),
                color=colour,
                fontsize=11,
                fontweight="bold",
                path_effects=outline,
            )

    fig = figure(16, 7.4)
    left, right = fig.subplots(1, 2)
    best = acc.max(2).values.float()  # (n_phi, n_theta): votes of each orientation's best rho bin
    # The ground's rows near the poles outvote everything; clip the colours to the range of the
    # other orientations so that the walls stand out from the ground's smear.
    off_pole = best[int(20 / bin_phi) : s.n_phi - int(20 / bin_phi)]
    low, high = float(off_pole.median()), max(float(off_pole.max()), float(off_pole.median()) + 1)
    shown = left.imshow(
        best.numpy(),
        cmap="magma",
        extent=(0, 180, 180, 0),
        aspect="auto",
        norm=matplotlib.colors.Normalize(low, high),
        interpolation="nearest",
    )
    fig.colorbar(
        shown,
        ax=left,
        extend="both",
        label="votes of the best rho bin (clipped to the orientations 20-160 degrees from +z)",
    )
    mark(left, peak_theta, peak_phi, list(zip(det_theta, det_phi)))
    left.set_xlim(0, 180)
    left.set_ylim(180, 0)
    left.set_xlabel("theta (degrees): azimuth of the normal, over a half-turn")
    left.set_ylabel("phi (degrees): angle of the normal from +z (0: ground, 90: walls)")
    left.legend(handles=_hough_legend(s), loc="lower right", fontsize=8, framealpha=0.9)
    left.set_title(
        f"hough_planes: {s.n_phi} x {s.n_theta} x {n_rho} accumulator of {demo.n:,} points "
        "\neach orientation at its best rho; the ground fills the rows "
        "phi = 0 and 180",
        fontsize=10,
    )

    # The (theta, rho) slice through phi = 90 degrees: the vertical planes (walls, box sides).
    row = min(int(90.0 / bin_phi), s.n_phi - 1)
    phi_low, phi_high = row * bin_phi, (row + 1) * bin_phi
    slice_ = acc[row].float().T  # (n_rho, n_theta)
    shown = right.imshow(
        slice_.numpy(),
        origin="lower",
        aspect="auto",
        cmap="magma",
        extent=(0, 180, -s.rho_max, s.rho_max),
        norm=matplotlib.colors.PowerNorm(0.5, 0, max(float(slice_.max()), 1)),
        interpolation="nearest",
    )
    fig.colorbar(shown, ax=right, label="votes (square-root scale)")
    in_row = (peaks[:, 0] == row).numpy()
    vertical = [(j, t, r) for j, (p, t, r) in enumerate(zip(det_phi, det_theta, det_rho)) if phi_low <= p < phi_high]
    right.scatter(peak_theta[in_row], peak_rho[in_row], s=150, facecolors="none", edgecolors="white", linewidths=1.5)
    for j, t, r in vertical:
        i = real[j]
        colour = _PLANE_COLOURS[i % len(_PLANE_COLOURS)]
        right.scatter([t], [r], s=90, marker="X", color=colour, edgecolors="white", linewidths=1.0, zorder=4)
        right.annotate(
            f"#{i}: {int(demo.planes.votes[0, i]):,} votes",
            (t, r),
            textcoords="offset points",
            xytext=(9, 5),
            color=colour,
            fontsize=10,
            fontweight="bold",
            path_effects=outline,
        )
    right.set_xlabel("theta (degrees)")
    right.set_ylabel("rho (m): the plane's signed distance from the sensor")
    right.legend(handles=_hough_legend(s), loc="lower right", fontsize=8, framealpha=0.9)
    right.set_title(
        f"the slice {phi_low:g} <= phi < {phi_high:g} degrees: vertical planes, {s.rho_step} m rho bins\n"
        "a wall is one bright cell; the points of one vertical line (a pole) vote along a sine curve",
        fontsize=10,
    )
    return fig, (
        f"Hough accumulator {tuple(acc.shape)}: every orientation at its best rho, and the theta-rho "
        f"slice through phi = 90 degrees, with the peaks and the detected planes"
    )


@picture("ppf")
def draw_ppf(demo: Demo):
    """Not the LiDAR scan: a depth camera's view of CGAL meshes (procedural blobs without Debian's
    libcgal-demo) on a table, with one PPFMatcher looking for all of them at once."""
    from matplotlib.lines import Line2D

    s = demo.settings
    found = demo.timed(
        "PPFMatcher.match",
        lambda: demo_match(
            seed=s.seed,
            occlusion=s.ppf_occlusion,
            model_samples=s.ppf_samples,
            device=demo.device,
            scene_options=dict(camera_distance=(4.2, 4.6), width=480, height=360),
            preset="fast",
        ),
    )

    def image(points: Tensor) -> np.ndarray:  # the camera's image plane: x right, y down
        p = points.double().numpy()
        return np.stack([p[:, 0] / p[:, 2], -p[:, 1] / p[:, 2]], 1)

    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]
    fig = figure(16, 7.5)
    left, right = fig.subplots(1, 2)
    scene_uv = image(found.scene_points)
    labels = found.scene_labels.numpy()
    m = len(found.names)
    grey = np.where(labels < 0, 0.85, np.where(labels < m, 0.45, 0.68))  # table, models, boxes
    scene_colour = np.repeat(grey[:, None], 3, 1)
    for ax in (left, right):
        ax.scatter(scene_uv[:, 0], scene_uv[:, 1], s=1.5, c=scene_colour, linewidths=0)
        ax.set_aspect("equal")
        ax.set_xlabel("x / z (camera image plane)")
        ax.set_ylabel("-y / z")
    left.set_title(
        f"the depth camera's {found.scene_points.shape[0]:,} points; the models (dark) stand on a "
        f"table (light)\nwith boxes (grey), the target ({found.names[0]}) {100 * found.occlusion:.0f} % occluded"
    )
    handles = []
    summary = []
    for i, name in enumerate(found.names):
        if not bool(torch.isfinite(found.poses[i]).all()):
            handles.append(Line2D([], [], linestyle="none", marker="o", color=colours[i % 5], label=f"{name}: none"))
            summary.append(f"{name} none")
            continue
        uv = image(found.found_points[i])
        right.scatter(uv[:, 0], uv[:, 1], s=2, color=colours[i % 5], linewidths=0, alpha=0.8)
        label = f"{name}: score {float(found.scores[i]):.2f}"
        if i == 0:
            error = float((found.found_points[0] - found.true_points).norm(dim=1).mean())
            label += f", points {error:.3f} diameters (mean) from the true pose"
        handles.append(Line2D([], [], linestyle="none", marker="o", color=colours[i % 5], label=label))
        summary.append(f"{name} {float(found.scores[i]):.2f}")
    truth_uv = image(found.true_points)
    right.scatter(truth_uv[::4, 0], truth_uv[::4, 1], s=6, facecolors="none", edgecolors="black", linewidths=0.4)
    handles.append(
        Line2D(
            [],
            [],
            linestyle="none",
            marker="o",
            markerfacecolor="none",
            color="black",
            label=f"{found.names[0]} at its true pose",
        )
    )
    right.legend(
        handles=handles,
        loc="lower right",
        fontsize=8,
        framealpha=0.9,
        title="best pose of each model (inlier score after ICP)",
        title_fontsize=8,
    )
    right.set_title(f"PPFMatcher (preset fast) over {m} models at once: each drawn at its best pose")
    return fig, f"PPF matching of {m} models in a depth image: " + ", ".join(summary)


# ---- the PPF scene ----


class PPFDemo(NamedTuple):
    """What a picture of a PPF match draws: M models looked for in one generated scene (camera
    frame, model diameter 1). Model 0 is the target, whose true pose the scene knows; the others
    stand around it as distractors."""

    scene_points: Tensor  # (N, 3) float32 the depth camera's points
    scene_labels: Tensor  # (N,) int64 0 target, 1.. distractors, boxes and occluder, -1 table
    names: List[str]  # (M,) the models
    found_points: Tensor  # (M, Nm, 3) float32 model points placed by each model's best pose (NaN: not found)
    true_points: Tensor  # (Nm, 3) float32 the target's points placed by its true pose
    poses: Tensor  # (M, 4, 4) float32 each model's best pose (NaN: none)
    scores: Tensor  # (M,) float32 their re-scores
    true_pose: Tensor  # (4, 4) float32 the target's
    occlusion: float  # share of the target hidden


def demo_match(
    seed: int = 0,
    mesh: str = "bunny00",
    occlusion: float = 0.3,
    distractors: int = 2,
    model_samples: int = 20000,
    device: Union[str, torch.device] = "cpu",
    scene_options: Optional[Dict[str, object]] = None,
    **config,
) -> PPFDemo:
    """Looks for a target and its distractors (pointops.scenes.tabletop: CGAL meshes when Debian's
    libcgal-demo is installed, else procedural blobs) in a generated scene with one PPFMatcher
    over all of them, on ``device``, and returns what a picture draws. ``scene_options`` go to
    ``scenes.tabletop.make_ppf_scene`` (the camera's distance, the image size, ...); ``config`` to
    the matcher."""
    if scenes.mesh.cgal_available():
        names = [mesh] + [name for name in scenes.mesh.EVAL_MESHES if name != mesh][:distractors]
        meshes = [scenes.load_mesh(name) for name in names]
    else:
        names = ["blob 1"] + [f"blob {s}" for s in range(2, 2 + distractors)]
        meshes = [scenes.blob_mesh(seed=s) for s in range(1, 2 + distractors)]
    samples = [scenes.sample_surface(m, model_samples, seed=seed + i) for i, m in enumerate(meshes)]
    model_points = torch.stack([s.points for s in samples]).float().to(device)
    model_normals = torch.stack([s.normals for s in samples]).float().to(device)
    matcher = pointops.PPFMatcher(model_points, model_normals, **config)
    scene = tabletop.make_ppf_scene(seed, meshes[0], meshes[1:], occlusion=occlusion, **(scene_options or {}))
    found = matcher.match(scene.points.to(device), scene.normals.to(device), max_instances=1)
    poses = found.poses[0, :, 0].cpu()  # (M, 4, 4)
    sample = model_points[:, :: max(1, model_samples // 2000)].cpu()
    placed = sample @ poses[:, :3, :3].transpose(1, 2) + poses[:, None, :3, 3]
    truth = sample[0] @ scene.pose[:3, :3].T + scene.pose[:3, 3]
    return PPFDemo(
        scene.points,
        scene.labels,
        names,
        placed,
        truth,
        poses,
        found.scores[0, :, 0].cpu(),
        scene.pose,
        scene.occlusion,
    )


# ---- command line ----------------------------------------------------------------------------------


def run(
    out: str, device: str, settings: Settings = Settings(), only: Optional[Sequence[str]] = None, dpi: int = 100
) -> List[str]:
    """Draws the pictures (all, or those named in ``only``) into the folder ``out``; returns their paths."""
    try:
        import matplotlib  # noqa: F401  (whether the demo extra is installed)
    except ImportError as error:
        raise ImportError(
            "the demo draws with matplotlib, which is not installed: pip install 'matplotlib==3.11.2'"
        ) from error
    names = list(PICTURES) if not only else list(only)
    unknown = [name for name in names if name not in PICTURES]
    if unknown:
        raise ValueError(f"unknown pictures {unknown}; there are {list(PICTURES)}")
    os.makedirs(out, exist_ok=True)
    demo = Demo(settings, device)
    print(
        f"scan: {demo.n:,} points of generated scene {settings.seed} ({settings.beams} beams x {settings.azimuth} "
        f"firings), on {demo.device}"
    )
    paths = []
    for name in names:
        timed = set(demo.timings)
        fig, summary = PICTURES[name](demo)
        path = os.path.join(out, name + ".png")
        fig.savefig(path, dpi=dpi)
        paths.append(path)
        ops = ", ".join(f"{op} {ms:.1f} ms" for op, ms in demo.timings.items() if op not in timed)
        print(f"wrote {path}: {summary}" + (f" ({ops} on {demo.device})" if ops else ""))
    return paths


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Settings()
    parser.add_argument("--out", default="out/demo", help="folder for the PNGs (made if missing)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the generated scene")
    parser.add_argument("--beams", type=int, default=defaults.beams, help="LiDAR beams")
    parser.add_argument("--azimuth", type=int, default=defaults.azimuth, help="LiDAR firings per revolution")
    parser.add_argument("--fps-k", type=int, default=defaults.fps_k, help="farthest point samples")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these pictures: " + ", ".join(PICTURES))
    args = parser.parse_args(argv)
    settings = Settings(seed=args.seed, beams=args.beams, azimuth=args.azimuth, fps_k=args.fps_k)
    start = time.perf_counter()
    paths = run(args.out, args.device, settings, args.only)
    print(f"{len(paths)} pictures in {os.path.abspath(args.out)} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
