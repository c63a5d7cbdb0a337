"""PPF object detection and pose estimation: :class:`PPFMatcher`.

``PPFMatcher(model_points, model_normals=None, **config)`` builds the PPF description of one or
more models (``pointops.ppf.ppf_model``); ``.match(scene_points, scene_normals=None,
max_instances=...)`` finds them in one or more scenes:

1. the scene is downsampled to the models' distance step and, without normals, gets estimated
   normals turned towards the sensor (the origin);
2. ``ppf_vote``: every ``stride``-th scene point votes against every model (Drost's voting, pairs
   restricted to the model diameter), keeping ``peaks`` candidate poses per reference point;
3. ``pose_cluster``: the candidate poses of each (scene, model) are clustered by spatial hashing;
   the ``hypotheses`` best clusters at distinct places (at least ``suppression`` diameters
   apart) are kept, and ``turned_hypotheses`` more that may share a place with them but are
   turned by more than ``suppression_angle_deg``;
4. each hypothesis is refined by ICP (the ``geometry.icp`` op, every step of every hypothesis in
   one call per stage) and re-scored by its inlier fraction: the share of model points that land
   within ``inlier_distance`` distance steps of a scene point, less those the sensor saw
   through;
5. the ``max_instances`` best-scored hypotheses per (scene, model) are returned.

Models are centred on their bounding box inside the matcher, and returned poses map the
caller's model coordinates into the scene.

Downsampling, normal estimation, nearest neighbours and ICP are the geometry family's ops
(``pointops.geometry``). Every step is batched over scenes and models and runs on the inputs'
device, and ``match`` reads nothing back to the host: the downsampled scene has a fixed capacity
(``max_scene_points``), the visibility test's range image a fixed size (``range_image_cells``),
so at fixed input sizes a whole match can be captured in one CUDA graph.
"""

import math
from typing import Dict, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from .._checks import check_optional_tensor, check_tensor
from ..clouds import bounding_box
from ..geometry import estimate_normals, icp, knn, voxel_downsample
from ..presets import ppf_preset
from .ops import (
    PoseClusters,
    PPFModel,
    bounding_diameter,
    pose_cluster,
    pose_matrices,
    ppf_model,
    ppf_vote,
)
from .validation import check_scene, valid_model


def resolve_ppf_config(preset: str = "default", **overrides) -> Dict[str, Union[int, float, bool, str]]:
    """A preset (:func:`pointops.ppf_preset`, configs/ppf.yaml) with explicit values on top."""
    config = ppf_preset(preset)
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(f"unknown PPF options {sorted(unknown)}, expected some of {sorted(config)}")
    config.update(overrides)
    return config


# torch.profiler scopes of the matcher's stages (tools/profile_ppf_frame.py reads them)
_stage = torch.profiler.record_function


# ---- geometry: the geometry family's ops, composed for PPF --------------------------------------


def _as_batch(points: Tensor) -> Tensor:
    return points[None] if points.dim() == 2 else points


def _lengths(points: Tensor, lengths: Optional[Tensor]) -> Tensor:
    if lengths is None:
        return torch.full((points.shape[0],), points.shape[1], dtype=torch.int64, device=points.device)
    return lengths.clamp(0, points.shape[1])


def downsample(
    points: Tensor, normals: Optional[Tensor], lengths: Tensor, voxel: float, capacity: Optional[int] = None
) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """``geometry.voxel_downsample`` at one voxel size, normals averaged per voxel (then made unit;
    zero where they cancel). The op keeps the input's capacity N; the result has min(capacity,
    N) rows with no host sync: a cloud of more voxels keeps that many, evenly spread over the
    op's voxel order (row j is voxel floor(j * count / capacity)), and its length becomes the
    capacity. None trims to the largest cloud instead, which reads the lengths back once (the
    model build)."""
    out = voxel_downsample(points.float(), [voxel] * 3, lengths, normals.float() if normals is not None else None)
    if capacity is None:
        size = int(out.lengths.max()) if out.lengths.numel() else 0
        pts, nrm, kept = out.points[:, :size].contiguous(), out.features[:, :size], out.lengths
    else:
        size = min(int(capacity), points.shape[1])
        count = out.lengths[:, None]  # (B, 1)
        rows = torch.arange(size, device=points.device)[None, :]
        pick = torch.where(count > size, rows * count // max(size, 1), rows)[..., None].expand(-1, -1, 3)
        pts, kept = out.points.gather(1, pick), out.lengths.clamp(max=size)
        nrm = out.features.gather(1, pick) if normals is not None else out.features
    if normals is None:
        return pts, None, kept
    return pts, nrm / nrm.norm(dim=-1, keepdim=True).clamp(min=1e-12), kept


def nearest_neighbors(
    queries: Tensor, points: Tensor, lengths: Tensor, max_distance: Optional[float] = None
) -> Tuple[Tensor, Tensor]:
    """Distance (B, Q) from each query (B, Q, 3) to the nearest of the first lengths[b] points of
    cloud b and its index (B, Q) (``geometry.knn``, k = 1); inf and -1 for an empty cloud or none
    within ``max_distance`` (the search stops there: a wrong pose's points in free space would
    otherwise search far)."""
    found = knn(queries.float(), points.float(), 1, None, lengths, max_distance)
    return found.distances[..., 0].sqrt(), found.indices[..., 0]


# The refinement's correspondences: a model point and its nearest scene point pair when their
# normals are within 60 degrees; a step turning by more than 0.5 rad, or moving the inliers'
# centroid by more than 3 correspondence distances, stops the hypothesis.
_NORMAL_ANGLE = math.pi / 3
_MAX_STEP_ANGLE = 0.5
_MAX_STEP_SHIFT = 3.0


def refine_poses(
    model_points: Tensor,
    model_normals: Tensor,
    model_lengths: Tensor,
    scene_points: Tensor,
    scene_normals: Tensor,
    scene_lengths: Tensor,
    poses: Tensor,
    iterations: int,
    max_distance: float,
) -> Tensor:
    """Point-to-plane ICP of every hypothesis ``poses[b, h]`` (B, H, 4, 4) of model b into scene b
    at once: ``iterations`` steps with correspondences within 3 ``max_distance`` (a wide capture
    range), then ``iterations`` more within ``max_distance``, each stage one call of the
    ``geometry.icp`` op (every step of every hypothesis inside it, no host sync). A model point
    takes part when it faces the sensor at the origin under the current pose, and pairs with its
    nearest scene point when their normals are within 60 degrees: on a partial view the model's
    far side, and the occluders and support in front of it or under it, would otherwise pull it
    off. Steps turn about the inliers' centroid; a hypothesis with fewer than 6 pairs, or whose
    step would turn it by more than 0.5 rad or move it by more than 3 correspondence distances,
    stops for the stage. Non-finite poses come back unchanged."""
    for reach in (3.0, 1.0):
        distance = max_distance * reach
        poses = icp(
            model_points,
            scene_points,
            distance,
            model_lengths,
            scene_lengths,
            poses,
            scene_normals,
            "point_to_plane",
            iterations,
            source_normals=model_normals,
            max_normal_angle=_NORMAL_ANGLE,
            viewpoint=[0.0, 0.0, 0.0],
            centered=True,
            max_step_angle=_MAX_STEP_ANGLE,
            max_step_translation=_MAX_STEP_SHIFT * distance,
        ).poses
    return poses


class RangeImage(NamedTuple):
    """Nearest range seen per direction from a sensor at the origin, for S scenes: an (azimuth,
    elevation) grid of ``cells`` x ``cells`` square cells of ``cell[s]`` radians centred on the
    optical axis +z (azimuth atan2(x, z), elevation atan2(y, |(x, z)|)); inf where nothing was
    seen. Its size is fixed by ``cells``, its cell by the scene (on the device)."""

    ranges: Tensor  # (S, cells * cells) float32, row-major by elevation
    cell: Tensor  # (S,) float32 radians; NaN for a scene with no finite point
    cells: int


def _directions(points: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """(azimuth, elevation, range) of points (..., 3) seen from the origin, the optical axis along z."""
    azimuth = torch.atan2(points[..., 0], points[..., 2])
    elevation = torch.atan2(points[..., 1], torch.hypot(points[..., 0], points[..., 2]))
    return azimuth, elevation, points.norm(dim=-1)


def _image_cells(azimuth: Tensor, elevation: Tensor, cell: Tensor, cells: int) -> Tuple[Tensor, Tensor]:
    """Flat cell index (row * cells + col, 0 outside) and whether the direction lies in the image;
    cell broadcasts against the directions. NaN directions or cells lie outside."""
    col = torch.floor(azimuth / cell) + cells // 2
    row = torch.floor(elevation / cell) + cells // 2
    inside = (col >= 0) & (col < cells) & (row >= 0) & (row < cells)
    flat = torch.where(inside, row * cells + col, torch.zeros_like(col)).long()
    return flat, inside


def range_image(points: Tensor, cell_size: float, lengths: Optional[Tensor] = None, cells: int = 1024) -> RangeImage:
    """The range image of scenes' raw points (S, N, 3) (or one scene (N, 3)), rows past
    ``lengths`` and non-finite points left out: a cell spans ``cell_size`` at the scene's median
    range (computed on the device), the image ``cells`` cells each way about the optical axis.
    Points outside it are not drawn (and a model point there is never seen through). No host
    sync: the image has the same size for every scene."""
    p = _as_batch(points).float()
    scenes, n = p.shape[:2]
    size = cells * cells
    if n == 0:
        return RangeImage(
            torch.full((scenes, size), float("inf"), device=p.device),
            torch.full((scenes,), float("nan"), device=p.device),
            cells,
        )
    valid = torch.isfinite(p).all(-1)
    if lengths is not None:
        valid = valid & (torch.arange(n, device=p.device)[None, :] < lengths[:, None])
    azimuth, elevation, ranges = _directions(p)
    median = torch.where(valid, ranges, torch.full_like(ranges, float("nan"))).nanmedian(dim=1).values  # (S,)
    cell = cell_size / median.clamp(min=1e-12)
    flat, inside = _image_cells(azimuth, elevation, cell[:, None], cells)
    inside = inside & valid
    # every point outside the image lands in one spare cell past the last scene's
    target = torch.where(
        inside, flat + torch.arange(scenes, device=p.device)[:, None] * size, torch.full_like(flat, scenes * size)
    )
    image = torch.full((scenes * size + 1,), float("inf"), device=p.device)
    seen = torch.where(inside, ranges, torch.full_like(ranges, float("inf")))
    image.scatter_reduce_(0, target.reshape(-1), seen.reshape(-1), reduce="amin")
    return RangeImage(image[: scenes * size].view(scenes, size), cell, cells)


def see_through(
    image: RangeImage, points: Tensor, normals: Tensor, margin: Tensor, scene_index: Optional[Tensor] = None
) -> Tensor:
    """(B, ...) bool: model points (B, ..., 3) facing the sensor where the sensor saw a surface
    more than ``margin[b]`` behind them, i.e. through where the model would be (free-space
    violations of a wrong pose; points hidden behind the scene, or outside the image, are not
    counted). Entry b reads the image of scene ``scene_index[b]`` (None: b)."""
    batch = points.shape[0]
    flat_points = points.reshape(batch, -1, 3)
    if scene_index is None:
        scene_index = torch.arange(batch, device=points.device)
    azimuth, elevation, ranges = _directions(flat_points)
    index, inside = _image_cells(azimuth, elevation, image.cell[scene_index][:, None], image.cells)
    seen = image.ranges.reshape(-1)[scene_index[:, None] * (image.cells * image.cells) + index]
    facing = (normals.reshape(batch, -1, 3) * flat_points).sum(-1) < 0
    through = inside & facing & torch.isfinite(seen) & (seen > ranges + margin[:, None])
    return through.reshape(points.shape[:-1])


# ---- the matcher --------------------------------------------------------------------------------


def distinct_places(poses: Tensor, scores: Tensor, radius: Tensor) -> Tensor:
    """(B, H) ``scores`` with -1 for every hypothesis (B, H, 4, 4) whose translation lies within
    ``radius[b]`` of a better-scored one's (ties to the lower index) that keeps its score: two
    instances of a model cannot share a place, but ICP often pulls a hypothesis and a turned one
    onto the same instance, which would fill two of ``max_instances`` slots. Greedy, in score
    order, H small steps with no host sync."""
    order = scores.argsort(dim=1, descending=True, stable=True)
    t = poses[..., :3, 3].gather(1, order[..., None].expand(-1, -1, 3))
    ranked = scores.gather(1, order)
    kept = ranked >= 0
    for h in range(1, scores.shape[1]):
        near = ((t[:, :h] - t[:, h : h + 1]).norm(dim=-1) <= radius[:, None]) & kept[:, :h]
        kept[:, h] &= ~near.any(1)
    return scores.scatter(1, order, torch.where(kept, ranked, torch.full_like(ranked, -1.0)))


class PPFMatches(NamedTuple):
    """Output of :meth:`PPFMatcher.match`, best first per (scene, model)."""

    poses: Tensor  # (S, M, K, 4, 4) float32 model -> scene transforms; NaN where no instance was found
    scores: Tensor  # (S, M, K) float32 inlier fraction of the model's points after refinement; 0 where none
    votes: Tensor  # (S, M, K) int64 summed votes of the instance's pose cluster; 0 where none


class PPFMatcher:
    """Finds models in scenes by point pair features: Drost's voting on the GPU-friendly ops of
    :mod:`pointops.ppf`, spatial-hash pose clustering, ICP refinement and inlier re-scoring.

    Args:
        model_points: (N, 3) or (M, N, 3) floating model points (M models padded to N).
        model_normals: the same shape, outward normals; None estimates them (PCA of
            ``normal_neighbors`` neighbours, turned away from the model's bounding-box centre:
            fine for closed, roughly star-shaped models; give real normals where you have them).
        model_lengths: (M,) int64 points per model; None = all N.
        preset: a name of :func:`pointops.ppf_preset` (configs/ppf.yaml).
        max_scene_points: the capacity of a downsampled scene (what ``match`` votes with): a
            scene with more voxels of the model's step keeps this many, evenly spread over its
            voxels (see :func:`downsample`). Fixed, so that ``match`` reads nothing back and can
            be captured in a CUDA graph; a 640 x 480 depth frame of a tabletop downsamples to
            2,000-7,000 points at the presets' steps.
        range_image_cells: the visibility test's range image is this many cells each way (a cell
            spans 0.7 of the smallest model step at the scene's median range), centred on the
            optical axis +z; scene points outside it are not drawn, and model points outside it
            are never counted as seen through. The image spans 1024 x 0.7 tau_d diameters /
            range radians: at tau_d 0.035 about 140 degrees from 10 model diameters away, 48
            degrees from 30.
        **config: explicit values of the preset's options, which override it.
    """

    def __init__(
        self,
        model_points: Tensor,
        model_normals: Optional[Tensor] = None,
        model_lengths: Optional[Tensor] = None,
        preset: str = "default",
        max_scene_points: int = 16384,
        range_image_cells: int = 1024,
        **config,
    ):
        check_tensor(model_points, "model_points", "(N, 3) or (M, N, 3)")
        check_optional_tensor(model_normals, "model_normals", "(N, 3) or (M, N, 3)")
        if max_scene_points < 1:
            raise ValueError(f"max_scene_points must be >= 1, got {max_scene_points}")
        if range_image_cells < 1:
            raise ValueError(f"range_image_cells must be >= 1, got {range_image_cells}")
        self.max_scene_points = int(max_scene_points)
        self.range_image_cells = int(range_image_cells)
        self.config = resolve_ppf_config(preset, **config)
        cfg = self.config
        # each model's valid rows first (as if its NaN / Inf rows were absent); degenerate models refused
        points, normals, lengths = valid_model(model_points, model_normals, model_lengths, float(cfg["tau_d"]))
        if normals is None:
            normals = estimate_normals(points, int(cfg["normal_neighbors"]), lengths, orientation="outward").normals
        self.diameter = bounding_diameter(points, lengths)
        box = bounding_box(points, lengths)
        self.center = (box.low + box.high) / 2  # (M, 3); 0 for an empty model (its box is 0)
        centred = points - self.center[:, None, :]
        # each model at its own step (tau_d diameters), then padded into one batch
        parts = [
            downsample(
                centred[b : b + 1],
                normals[b : b + 1],
                lengths[b : b + 1],
                float(self.diameter[b]) * float(cfg["tau_d"]),
            )
            for b in range(points.shape[0])
        ]
        size = max([p[0].shape[1] for p in parts] + [0])
        down = points.new_zeros(points.shape[0], size, 3)
        down_normals = points.new_zeros(points.shape[0], size, 3)
        for b, (p, n, _) in enumerate(parts):
            down[b, : p.shape[1]], down_normals[b, : p.shape[1]] = p[0], n[0]
        down_lengths = torch.cat([p[2] for p in parts]) if parts else lengths
        self.model: PPFModel = ppf_model(
            down,
            down_normals,
            down_lengths,
            tau_d=float(cfg["tau_d"]),
            angle_bins=int(cfg["angle_bins"]),
            diameter=self.diameter,
            max_pairs_per_key=int(cfg["max_pairs_per_key"]),
        )
        # the smallest and largest distance step, read once here so that match() needs no host
        # sync between voting and re-scoring (its GPU work then overlaps the launches)
        steps = self.model.distance_step.cpu()
        self.step_range = (float(steps.min()), float(steps.max())) if steps.numel() else (0.0, 0.0)

    @property
    def num_models(self) -> int:
        return self.model.points.shape[0]

    def to(self, device: Union[str, torch.device]) -> "PPFMatcher":
        self.model = self.model.to(device)
        self.diameter = self.diameter.to(device)
        self.center = self.center.to(device)
        return self

    def prepare_scene(
        self, scene_points: Tensor, scene_normals: Optional[Tensor] = None, scene_lengths: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Downsampled scene points, normals and lengths (S, N', 3), (S, N', 3), (S,), N' =
        min(N, max_scene_points), with no host sync."""
        check_tensor(scene_points, "scene_points", "(N, 3) or (S, N, 3)")
        check_optional_tensor(scene_normals, "scene_normals", "(N, 3) or (S, N, 3)")
        points = _as_batch(scene_points).float()
        lengths = _lengths(points, scene_lengths)
        if scene_normals is None:
            # PCA normals of the dense scene, turned towards the sensor, then averaged per voxel:
            # the noise of the returns averages out over more points than a voxel's own
            with _stage("ppf.normals"):
                normals = estimate_normals(
                    points, int(self.config["normal_neighbors"]), lengths, orientation="viewpoint"
                ).normals
        else:
            normals = _as_batch(scene_normals).float()
        with _stage("ppf.downsample"):
            down, down_normals, down_lengths = downsample(
                points, normals, lengths, self.step_range[0], self.max_scene_points
            )
        return down, down_normals, down_lengths

    def hypotheses(self, points: Tensor, normals: Tensor, lengths: Tensor, k: int, turned: int = 0):
        """Voting and clustering on a prepared scene: the k best pose clusters of each (scene,
        model) at distinct places (``suppression`` diameters apart), then the ``turned`` best of
        a second selection that removes only candidates within ``suppression_angle_deg`` of a
        chosen rotation, leaving out clusters the first already holds (-1 centres there). As
        ``pointops.ppf.PoseClusters`` with batch S * M (scene-major) and k + turned clusters."""
        cfg = self.config
        with _stage("ppf.vote"):
            votes = ppf_vote(
                points,
                normals,
                self.model,
                lengths,
                stride=int(cfg["stride"]),
                k=int(cfg["peaks"]),
                spread=bool(cfg["spread"]),
            )
        with _stage("ppf.cluster"):
            return self._clusters(votes, k, turned)

    def _clusters(self, votes, k: int, turned: int) -> PoseClusters:
        cfg = self.config
        scenes, models = votes.votes.shape[:2]
        q = votes.quaternions.reshape(scenes * models, -1, 4)
        t = votes.translations.reshape(scenes * models, -1, 3)
        v = votes.votes.reshape(scenes * models, -1)
        threshold = (self.model.distance_step * float(cfg["cluster_distance"])).repeat(scenes)
        suppression = (self.model.diameter * float(cfg["suppression"])).repeat(scenes)
        angle = math.radians(float(cfg["cluster_angle_deg"]))
        places = pose_cluster(q, t, v, threshold, angle_threshold=angle, suppression_distance=suppression, k=k)
        if turned <= 0:
            return places
        # Where a wrong rotation won an instance's votes, the right one is a weaker cluster at the
        # same place, which the first selection removed.
        extra = pose_cluster(
            q,
            t,
            v,
            threshold,
            angle_threshold=angle,
            suppression_distance=suppression,
            k=turned,
            suppression_angle=math.radians(float(cfg["suppression_angle_deg"])),
        )
        repeated = (extra.centers[:, :, None] == places.centers[:, None, :]).any(2)
        gone = repeated | (extra.centers < 0)
        extra = PoseClusters(
            torch.where(gone[..., None], torch.full_like(extra.quaternions, math.nan), extra.quaternions),
            torch.where(gone[..., None], torch.full_like(extra.translations, math.nan), extra.translations),
            torch.where(gone, torch.zeros_like(extra.scores), extra.scores),
            torch.where(gone, torch.zeros_like(extra.members), extra.members),
            torch.where(gone, torch.full_like(extra.centers, -1), extra.centers),
        )
        return PoseClusters(*(torch.cat([a, b], 1) for a, b in zip(places, extra)))

    def match(
        self,
        scene_points: Tensor,
        scene_normals: Optional[Tensor] = None,
        scene_lengths: Optional[Tensor] = None,
        max_instances: int = 1,
        refine: bool = True,
        downsample: bool = True,
    ) -> PPFMatches:
        """Finds up to ``max_instances`` instances of every model in every scene.

        Args:
            scene_points: (N, 3) or (S, N, 3) floating, in the frame of a sensor at the origin
                (estimated normals are turned towards it).
            scene_normals: the same shape, or None to estimate them.
            scene_lengths: (S,) int64; None = all N.
            max_instances: instances returned per (scene, model).
            refine: ICP refinement of the hypotheses before re-scoring.
            downsample: False takes the scene as given (already at about the models' distance
                step; normals required).

        Returns:
            :class:`PPFMatches` with K = max_instances.
        """
        check_tensor(scene_points, "scene_points", "(N, 3) or (S, N, 3)")
        check_optional_tensor(scene_normals, "scene_normals", "(N, 3) or (S, N, 3)")
        check_scene(scene_points, scene_normals, scene_lengths, max_instances, self.model.points.device)
        with _stage("ppf.match"):
            return self._match(scene_points, scene_normals, scene_lengths, max_instances, refine, downsample)

    def _match(
        self,
        scene_points: Tensor,
        scene_normals: Optional[Tensor],
        scene_lengths: Optional[Tensor],
        max_instances: int,
        refine: bool,
        downsample: bool,
    ) -> PPFMatches:
        cfg = self.config
        if downsample:
            points, normals, lengths = self.prepare_scene(scene_points, scene_normals, scene_lengths)
        else:
            if scene_normals is None:
                raise ValueError("match(downsample=False) needs scene_normals")
            points, normals = _as_batch(scene_points).float(), _as_batch(scene_normals).float()
            lengths = _lengths(points, scene_lengths)
        scenes, models = points.shape[0], self.num_models
        image = None
        if bool(cfg["visibility"]):
            with _stage("ppf.range_image"):
                raw = _as_batch(scene_points).float()
                image = range_image(raw, self.step_range[0] * 0.7, _lengths(raw, scene_lengths), self.range_image_cells)
        hyps = max(int(cfg["hypotheses"]), max_instances)
        clusters = self.hypotheses(points, normals, lengths, hyps, int(cfg["turned_hypotheses"]))
        poses = pose_matrices(clusters.quaternions, clusters.translations)  # (S*M, H, 4, 4), centred model frame
        # every (scene, model) pair: the model's points and the scene's points
        model_points = self.model.points.repeat(scenes, 1, 1)
        model_normals = self.model.normals.repeat(scenes, 1, 1)
        model_lengths = self.model.lengths.repeat(scenes)
        scene_idx = torch.arange(scenes, device=points.device).repeat_interleave(models)
        sp, sn, sl = points[scene_idx], normals[scene_idx], lengths[scene_idx]
        inlier = (self.model.distance_step * float(cfg["inlier_distance"])).repeat(scenes)
        inlier_range = (
            self.step_range[0] * float(cfg["inlier_distance"]),
            self.step_range[1] * float(cfg["inlier_distance"]),
        )
        if refine and int(cfg["icp_iterations"]) > 0:
            with _stage("ppf.refine"):
                poses = refine_poses(
                    model_points,
                    model_normals,
                    model_lengths,
                    sp,
                    sn,
                    sl,
                    poses,
                    int(cfg["icp_iterations"]),
                    inlier_range[0],
                )
        with _stage("ppf.verify"):
            scores = self.verify(
                model_points,
                model_normals,
                model_lengths,
                sp,
                sn,
                sl,
                poses,
                inlier,
                image,
                float(cfg["inlier_normal_deg"]),
                inlier_range[1],
                scene_idx,
            )
        scores = torch.where(clusters.centers >= 0, scores, torch.full_like(scores, -1.0))
        if max_instances > 1:  # instances are distinct places, not the refinement's duplicates
            scores = distinct_places(poses, scores, (self.model.diameter * float(cfg["suppression"])).repeat(scenes))
        order = scores.argsort(dim=1, descending=True, stable=True)[:, :max_instances]
        poses = poses.gather(1, order[..., None, None].expand(-1, -1, 4, 4))
        scores = scores.gather(1, order)
        votes = clusters.scores.gather(1, order)
        found = scores >= 0
        # back to the caller's model frame: x_model - center
        shift = torch.eye(4, device=poses.device).repeat(models, 1, 1)
        shift[:, :3, 3] = -self.center
        poses = poses @ shift.repeat(scenes, 1, 1)[:, None]
        poses = torch.where(found[..., None, None], poses, torch.full_like(poses, float("nan")))
        shape = (scenes, models, max_instances)
        return PPFMatches(
            poses.reshape(shape + (4, 4)),
            scores.clamp(min=0).reshape(shape),
            torch.where(found, votes, torch.zeros_like(votes)).reshape(shape),
        )

    @staticmethod
    def verify(
        model_points: Tensor,
        model_normals: Tensor,
        model_lengths: Tensor,
        scene_points: Tensor,
        scene_normals: Tensor,
        scene_lengths: Tensor,
        poses: Tensor,
        threshold: Tensor,
        image: Optional[RangeImage] = None,
        normal_deg: float = 25.0,
        search_radius: Optional[float] = None,
        image_index: Optional[Tensor] = None,
    ) -> Tensor:
        """(B, H) score of pose poses[b, h] of model b in scene b: (inliers - violations) / points,
        clamped at 0. An inlier is a model point within threshold[b] of a scene point whose normal
        is within ``normal_deg`` of its own (a curved model patch laid on a plane keeps few); a
        violation (with a range ``image``, entry b reading its scene ``image_index[b]``, None: b)
        a model point facing the sensor where the sensor saw a surface more than threshold[b]
        behind it. 0 for non-finite poses. ``search_radius`` (>= every threshold, or None) bounds
        the nearest-neighbour search. All entries at once, no host sync."""
        batch, hyps = poses.shape[:2]
        n = model_points.shape[1]
        finite = torch.isfinite(poses).flatten(2).all(2)
        safe = torch.where(finite[..., None, None], poses, torch.eye(4, device=poses.device).expand_as(poses))
        rot = safe[..., :3, :3].transpose(-1, -2)
        moved = model_points[:, None] @ rot + safe[..., None, :3, 3]  # (B, H, N, 3)
        moved_n = model_normals[:, None] @ rot
        dist, index = nearest_neighbors(moved.reshape(batch, hyps * n, 3), scene_points, scene_lengths, search_radius)
        if scene_points.shape[1] > 0:
            nearest_n = torch.gather(scene_normals, 1, index.clamp(min=0)[..., None].expand(-1, -1, 3))
            agree = (moved_n.reshape(batch, hyps * n, 3) * nearest_n).sum(-1) >= math.cos(math.radians(normal_deg))
        else:  # empty scenes: no neighbour at all
            agree = torch.zeros_like(dist, dtype=torch.bool)
        valid = torch.arange(n, device=poses.device)[None, None, :] < model_lengths[:, None, None]
        hits = (((dist <= threshold[:, None]) & agree).reshape(batch, hyps, n) & valid).sum(2).float()
        if image is not None:
            through = see_through(image, moved, moved_n, threshold, image_index)  # (B, H, N)
            hits = hits - (through & valid).sum(2).float()
        score = (hits / model_lengths.clamp(min=1)[:, None].float()).clamp(min=0)
        return torch.where(finite, score, torch.zeros_like(score))
