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
4. each hypothesis is refined by ICP and re-scored by its inlier fraction: the share of model
   points that land within ``inlier_distance`` distance steps of a scene point;
5. the ``max_instances`` best-scored hypotheses per (scene, model) are returned.

Models are centred on their bounding box inside the matcher, and returned poses map the
caller's model coordinates into the scene.

Downsampling, normal estimation, nearest neighbours and ICP are the geometry family's ops
(``pointops.geometry``). Every step is batched over scenes and models and runs on the inputs'
device; ``prepare_scene`` reads the downsampled clouds' sizes once (the voxel op keeps the input's
capacity), the range image of the visibility test is built per scene.
"""
import math
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from ..geometry import estimate_normals, knn, voxel_downsample
from ..ppf import (
    PPF_PRESETS,
    PoseClusters,
    PPFModel,
    bounding_diameter,
    pose_cluster,
    pose_matrices,
    ppf_model,
    ppf_vote,
)


def resolve_ppf_config(preset: str = "default", **overrides) -> Dict[str, Union[int, float, bool, str]]:
    """A preset of :data:`pointops.ppf.PPF_PRESETS` with explicit values on top."""
    if preset not in PPF_PRESETS:
        raise ValueError(f"unknown PPF preset '{preset}', expected one of {sorted(PPF_PRESETS)}")
    config = dict(PPF_PRESETS[preset])
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


def downsample(points: Tensor, normals: Optional[Tensor], lengths: Tensor, voxel: float
               ) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """``geometry.voxel_downsample`` at one voxel size, normals averaged per voxel (then made unit;
    zero where they cancel), trimmed to the largest cloud (one read of the lengths: the op keeps
    the input's capacity)."""
    out = voxel_downsample(points.float(), [voxel] * 3, lengths, normals.float() if normals is not None else None)
    size = int(out.lengths.max()) if out.lengths.numel() else 0
    pts = out.points[:, :size].contiguous()
    nrm = None
    if normals is not None:
        nrm = out.features[:, :size]
        nrm = nrm / nrm.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return pts, nrm, out.lengths


def nearest_neighbors(queries: Tensor, points: Tensor, lengths: Tensor, max_distance: Optional[float] = None
                      ) -> Tuple[Tensor, Tensor]:
    """Distance (B, Q) from each query (B, Q, 3) to the nearest of the first lengths[b] points of
    cloud b and its index (B, Q) (``geometry.knn``, k = 1); inf and -1 for an empty cloud or none
    within ``max_distance`` (the search stops there: a wrong pose's points in free space would
    otherwise search far)."""
    found = knn(queries.float(), points.float(), 1, None, lengths, max_distance)
    return found.distances[..., 0].sqrt(), found.indices[..., 0]


# ICP: a model point and its nearest scene point correspond when their normals are within 60
# degrees.
_NORMAL_AGREEMENT = 0.5


def _skew(v: Tensor) -> Tensor:
    zero = torch.zeros_like(v[..., 0])
    return torch.stack([zero, -v[..., 2], v[..., 1], v[..., 2], zero, -v[..., 0], -v[..., 1], v[..., 0], zero],
                       -1).reshape(v.shape[:-1] + (3, 3))


def refine_icp(model_points: Tensor, model_normals: Tensor, model_lengths: Tensor, scene_points: Tensor,
               scene_normals: Tensor, scene_lengths: Tensor, poses: Tensor, iterations: int,
               max_distance: float) -> Tensor:
    """Point-to-plane ICP of every hypothesis ``poses[b, h]`` (B, H, 4, 4) of model b into scene b
    at once. A model point takes part when it faces the sensor (at the origin) under the current
    pose, and corresponds to its nearest scene point (``geometry.knn``) when they are within
    ``max_distance`` and their normals within 60 degrees: on a partial view the model's far side,
    and the occluders and support in front of or under it, would otherwise pull the model off.
    (``geometry.icp`` has no such tests, which cost it most of the coarse hypotheses of occluded
    targets in our trials, hence this loop over the same ops.) Each iteration solves the
    linearized (small-angle) problem about the correspondences' centroid; a hypothesis with fewer
    than 6 correspondences, or whose step would turn it by more than 0.5 rad or move it by more
    than 3 max_distance, stops. No host sync; non-finite poses come back unchanged."""
    batch, hyps = poses.shape[:2]
    n = model_points.shape[1]
    finite = torch.isfinite(poses).flatten(2).all(2)
    eye = torch.eye(4, device=poses.device, dtype=poses.dtype)
    pose = torch.where(finite[..., None, None], poses, eye)
    active = finite.clone()
    valid = (torch.arange(n, device=poses.device)[None, :] < model_lengths[:, None])[:, None, :]  # (B, 1, N)
    limit = torch.full((batch, 1, 1), float(max_distance), device=poses.device)
    for _ in range(iterations):
        rot, shift = pose[..., :3, :3], pose[..., :3, 3]
        moved = model_points[:, None] @ rot.transpose(-1, -2) + shift[..., None, :]  # (B, H, N, 3)
        moved_n = model_normals[:, None] @ rot.transpose(-1, -2)
        dist, index = nearest_neighbors(moved.reshape(batch, hyps * n, 3), scene_points, scene_lengths,
                                        float(max_distance))
        gather = index.clamp(min=0)[..., None].expand(-1, -1, 3)
        dst = torch.gather(scene_points, 1, gather).reshape(batch, hyps, n, 3)
        dst_n = torch.gather(scene_normals, 1, gather).reshape(batch, hyps, n, 3)
        facing = (moved * moved_n).sum(-1) < 0
        keep = (dist.reshape(batch, hyps, n) <= limit) & ((moved_n * dst_n).sum(-1) >= _NORMAL_AGREEMENT) & valid
        keep = keep & facing
        w = keep.to(moved.dtype)
        count = w.sum(-1)  # (B, H)
        centre = (moved * w[..., None]).sum(2) / count.clamp(min=1)[..., None]
        a = torch.cat([torch.linalg.cross(moved - centre[..., None, :], dst_n, dim=-1), dst_n], -1)  # (B, H, N, 6)
        rhs = ((dst - moved) * dst_n).sum(-1)
        a = a.double() * w[..., None].double()
        ata = a.transpose(-1, -2) @ a + 1e-9 * torch.eye(6, device=a.device, dtype=a.dtype)
        atb = (a * rhs[..., None].double()).sum(2)
        # solve_ex: no host sync to check for singular systems (the diagonal term keeps them
        # regular; a non-finite step fails the tests below)
        x = torch.linalg.solve_ex(ata, atb, check_errors=False)[0].to(pose.dtype)  # (B, H, 6)
        w_rot, t = x[..., :3], x[..., 3:]
        angle = w_rot.norm(dim=-1)
        go = active & (count >= 6) & (angle <= 0.5) & (t.norm(dim=-1) <= 3 * limit[..., 0])
        axis = w_rot / angle.clamp(min=1e-12)[..., None]
        k = _skew(axis)
        step_rot = (torch.eye(3, device=pose.device) + torch.sin(angle)[..., None, None] * k
                    + (1 - torch.cos(angle))[..., None, None] * (k @ k))
        step = eye.expand(batch, hyps, 4, 4).clone()
        step[..., :3, :3] = step_rot
        step[..., :3, 3] = centre + t - (step_rot @ centre[..., None])[..., 0]
        pose = torch.where(go[..., None, None], step @ pose, pose)
        active = go
    return torch.where(finite[..., None, None], pose, poses)


def refine_coarse_to_fine(model_points: Tensor, model_normals: Tensor, model_lengths: Tensor, scene_points: Tensor,
                          scene_normals: Tensor, scene_lengths: Tensor, poses: Tensor, iterations: int,
                          max_distance: float) -> Tensor:
    """:func:`refine_icp` at 3 x ``max_distance`` (a wide capture range), then at ``max_distance``."""
    for reach in (3.0, 1.0):
        poses = refine_icp(model_points, model_normals, model_lengths, scene_points, scene_normals, scene_lengths,
                           poses, iterations, max_distance * reach)
    return poses


class GraphedRefinement:
    """:func:`refine_coarse_to_fine` on CUDA replayed from a CUDA graph, one per input shape.

    The refinement is a few hundred small launches (about 40 ops an ICP step) and no host sync,
    so its cost on a GPU is the host's launching, not the GPU's work. A shape's first call runs
    eagerly; its second runs it once on a side stream (warm-up), captures it into a graph over
    static copies of the inputs and replays; later calls copy the inputs in and replay, returning
    the same bits as the eager loop (the same kernels run). So scenes of ever-changing sizes cost
    no captures, and at most ``capacity`` graphs (with their memory) are kept, the oldest dropped
    first. A shape whose capture fails runs eagerly from then on."""

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self.graphs: Dict[tuple, Tuple[object, List[Tensor], Tensor]] = {}
        self.seen: Dict[tuple, int] = {}
        self.failed: set = set()

    def __call__(self, *inputs: Tensor, iterations: int, max_distance: float) -> Tensor:
        def run(*tensors: Tensor) -> Tensor:
            return refine_coarse_to_fine(*tensors, iterations, max_distance)

        key = tuple((t.shape, t.dtype, t.device) for t in inputs) + (iterations, max_distance)
        if key in self.failed:
            return run(*inputs)
        if key not in self.graphs:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] < 2 or self.capacity <= 0:
                if len(self.seen) > 64 * max(self.capacity, 1):
                    self.seen.clear()
                return run(*inputs)
            if len(self.graphs) >= self.capacity:
                del self.graphs[next(iter(self.graphs))]
            static = [t.clone() for t in inputs]
            side = torch.cuda.Stream(inputs[0].device)
            side.wait_stream(torch.cuda.current_stream(inputs[0].device))
            with torch.cuda.stream(side):
                run(*static)  # warm-up: library handles and workspaces are made outside the capture
            torch.cuda.current_stream(inputs[0].device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    output = run(*static)
            except RuntimeError:
                self.failed.add(key)
                return run(*inputs)
            self.graphs[key] = (graph, static, output)
        graph, static, output = self.graphs[key]
        for target, source in zip(static, inputs):
            target.copy_(source)
        graph.replay()
        return output.clone()


class RangeImage(NamedTuple):
    """Nearest range seen per direction from a sensor at the origin: cell (row, col) of an
    (azimuth, elevation) grid of ``cell`` radians starting at ``start``; inf where nothing was
    seen."""

    ranges: Tensor  # (rows * cols,) float32
    start: Tuple[float, float]
    cell: float
    cols: int
    rows: int


def _directions(points: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """(azimuth, elevation, range) of points seen from the origin, the optical axis along z."""
    azimuth = torch.atan2(points[:, 0], points[:, 2])
    elevation = torch.atan2(points[:, 1], points[:, [0, 2]].norm(dim=1))
    return azimuth, elevation, points.norm(dim=1)


def range_image(points: Tensor, cell_size: float) -> RangeImage:
    """The range image of one scene's raw points (N, 3) with cells of ``cell_size`` at the
    median range."""
    p = points[torch.isfinite(points).all(1)].float()
    if p.shape[0] == 0:
        return RangeImage(torch.full((1,), float("inf"), device=points.device), (0.0, 0.0), 1.0, 1, 1)
    azimuth, elevation, ranges = _directions(p)
    cell = cell_size / max(float(ranges.median()), 1e-12)
    start = (float(azimuth.min()), float(elevation.min()))
    col = ((azimuth - start[0]) / cell).long()
    row = ((elevation - start[1]) / cell).long()
    cols, rows = int(col.max()) + 1, int(row.max()) + 1
    image = torch.full((rows * cols,), float("inf"), device=p.device)
    image.scatter_reduce_(0, row * cols + col, ranges, reduce="amin")
    return RangeImage(image, start, cell, cols, rows)


def see_through(image: RangeImage, points: Tensor, normals: Tensor, margin: float) -> Tensor:
    """(..., N) bool: model points (..., N, 3) facing the sensor where the sensor saw a surface
    more than ``margin`` behind them, i.e. through where the model would be (free-space
    violations of a wrong pose; points hidden behind the scene are not counted)."""
    flat = points.reshape(-1, 3)
    azimuth, elevation, ranges = _directions(flat)
    col = ((azimuth - image.start[0]) / image.cell).floor().long()
    row = ((elevation - image.start[1]) / image.cell).floor().long()
    inside = (col >= 0) & (col < image.cols) & (row >= 0) & (row < image.rows)
    seen = image.ranges[(row.clamp(0, image.rows - 1) * image.cols + col.clamp(0, image.cols - 1))]
    facing = (normals.reshape(-1, 3) * flat).sum(1) < 0
    through = inside & facing & torch.isfinite(seen) & (seen > ranges + margin)
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
        near = ((t[:, :h] - t[:, h:h + 1]).norm(dim=-1) <= radius[:, None]) & kept[:, :h]
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
        preset: a name in :data:`pointops.ppf.PPF_PRESETS` (configs/ppf.yaml).
        **config: explicit values of the preset's options, which override it.
    """

    def __init__(self, model_points: Tensor, model_normals: Optional[Tensor] = None,
                 model_lengths: Optional[Tensor] = None, preset: str = "default", **config):
        self.config = resolve_ppf_config(preset, **config)
        cfg = self.config
        points = _as_batch(model_points).float()
        lengths = _lengths(points, model_lengths)
        if model_normals is None:
            normals = estimate_normals(points, int(cfg["normal_neighbors"]), lengths, orientation="outward").normals
        else:
            normals = _as_batch(model_normals).float()
        self.diameter = bounding_diameter(points, lengths)
        valid = torch.arange(points.shape[1], device=points.device)[None, :] < lengths[:, None]
        big = torch.tensor(float("inf"), device=points.device)
        low = torch.where(valid[..., None], points, big).amin(1)
        high = torch.where(valid[..., None], points, -big).amax(1)
        self.center = torch.where(valid.any(1)[:, None], (low + high) / 2, torch.zeros_like(low))  # (M, 3)
        centred = points - self.center[:, None, :]
        # each model at its own step (tau_d diameters), then padded into one batch
        parts = [downsample(centred[b:b + 1], normals[b:b + 1], lengths[b:b + 1],
                            float(self.diameter[b]) * float(cfg["tau_d"]))
                 for b in range(points.shape[0])]
        size = max([p[0].shape[1] for p in parts] + [0])
        down = points.new_zeros(points.shape[0], size, 3)
        down_normals = points.new_zeros(points.shape[0], size, 3)
        for b, (p, n, _) in enumerate(parts):
            down[b, : p.shape[1]], down_normals[b, : p.shape[1]] = p[0], n[0]
        down_lengths = torch.cat([p[2] for p in parts]) if parts else lengths
        self.model: PPFModel = ppf_model(down, down_normals, down_lengths, tau_d=float(cfg["tau_d"]),
                                         angle_bins=int(cfg["angle_bins"]), diameter=self.diameter,
                                         max_pairs_per_key=int(cfg["max_pairs_per_key"]))
        # the smallest and largest distance step, read once here so that match() needs no host
        # sync between voting and re-scoring (its GPU work then overlaps the launches)
        steps = self.model.distance_step.cpu()
        self.step_range = (float(steps.min()), float(steps.max())) if steps.numel() else (0.0, 0.0)
        self.cuda_graphs = True  # replay the ICP refinement from CUDA graphs on CUDA (GraphedRefinement)
        self._graphed = GraphedRefinement()

    @property
    def num_models(self) -> int:
        return self.model.points.shape[0]

    def to(self, device: Union[str, torch.device]) -> "PPFMatcher":
        self.model = self.model.to(device)
        self.diameter = self.diameter.to(device)
        self.center = self.center.to(device)
        return self

    def prepare_scene(self, scene_points: Tensor, scene_normals: Optional[Tensor] = None,
                      scene_lengths: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
        """Downsampled scene points, normals and lengths (S, N', 3), (S, N', 3), (S,)."""
        points = _as_batch(scene_points).float()
        lengths = _lengths(points, scene_lengths)
        if scene_normals is None:
            # PCA normals of the dense scene, turned towards the sensor, then averaged per voxel:
            # the noise of the returns averages out over more points than a voxel's own
            with _stage("ppf.normals"):
                normals = estimate_normals(points, int(self.config["normal_neighbors"]), lengths,
                                           orientation="viewpoint").normals
        else:
            normals = _as_batch(scene_normals).float()
        with _stage("ppf.downsample"):
            down, down_normals, down_lengths = downsample(points, normals, lengths, self.step_range[0])
        return down, down_normals, down_lengths

    def hypotheses(self, points: Tensor, normals: Tensor, lengths: Tensor, k: int, turned: int = 0):
        """Voting and clustering on a prepared scene: the k best pose clusters of each (scene,
        model) at distinct places (``suppression`` diameters apart), then the ``turned`` best of
        a second selection that removes only candidates within ``suppression_angle_deg`` of a
        chosen rotation, leaving out clusters the first already holds (-1 centres there). As
        ``pointops.ppf.PoseClusters`` with batch S * M (scene-major) and k + turned clusters."""
        cfg = self.config
        with _stage("ppf.vote"):
            votes = ppf_vote(points, normals, self.model, lengths, stride=int(cfg["stride"]), k=int(cfg["peaks"]),
                             spread=bool(cfg["spread"]), backend=str(cfg["backend"]))
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
        extra = pose_cluster(q, t, v, threshold, angle_threshold=angle, suppression_distance=suppression,
                             k=turned, suppression_angle=math.radians(float(cfg["suppression_angle_deg"])))
        repeated = (extra.centers[:, :, None] == places.centers[:, None, :]).any(2)
        gone = repeated | (extra.centers < 0)
        extra = PoseClusters(torch.where(gone[..., None], torch.full_like(extra.quaternions, math.nan), extra.quaternions),
                             torch.where(gone[..., None], torch.full_like(extra.translations, math.nan),
                                         extra.translations),
                             torch.where(gone, torch.zeros_like(extra.scores), extra.scores),
                             torch.where(gone, torch.zeros_like(extra.members), extra.members),
                             torch.where(gone, torch.full_like(extra.centers, -1), extra.centers))
        return PoseClusters(*(torch.cat([a, b], 1) for a, b in zip(places, extra)))

    def match(self, scene_points: Tensor, scene_normals: Optional[Tensor] = None,
              scene_lengths: Optional[Tensor] = None, max_instances: int = 1, refine: bool = True,
              downsample: bool = True) -> PPFMatches:
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
        with _stage("ppf.match"):
            return self._match(scene_points, scene_normals, scene_lengths, max_instances, refine, downsample)

    def _match(self, scene_points: Tensor, scene_normals: Optional[Tensor], scene_lengths: Optional[Tensor],
               max_instances: int, refine: bool, downsample: bool) -> PPFMatches:
        cfg = self.config
        if downsample:
            points, normals, lengths = self.prepare_scene(scene_points, scene_normals, scene_lengths)
        else:
            if scene_normals is None:
                raise ValueError("match(downsample=False) needs scene_normals")
            points, normals = _as_batch(scene_points).float(), _as_batch(scene_normals).float()
            lengths = _lengths(points, scene_lengths)
        scenes, models = points.shape[0], self.num_models
        images = None
        if bool(cfg["visibility"]):  # before voting: building the range images reads sizes back
            with _stage("ppf.range_image"):
                raw = _as_batch(scene_points).float()
                raw_lengths = _lengths(raw, scene_lengths).tolist()
                cell = self.step_range[0] * 0.7
                per_scene = [range_image(raw[k, : raw_lengths[k]], cell) for k in range(scenes)]
                images = [per_scene[k] for k in range(scenes) for _ in range(models)]  # scene-major, as scene_idx
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
        inlier_range = (self.step_range[0] * float(cfg["inlier_distance"]), self.step_range[1] * float(cfg["inlier_distance"]))
        if refine and int(cfg["icp_iterations"]) > 0:
            inputs = (model_points, model_normals, model_lengths, sp, sn, sl, poses.contiguous())
            with _stage("ppf.refine"):
                if poses.is_cuda and self.cuda_graphs:
                    poses = self._graphed(*inputs, iterations=int(cfg["icp_iterations"]),
                                          max_distance=inlier_range[0])
                else:
                    poses = refine_coarse_to_fine(*inputs, int(cfg["icp_iterations"]), inlier_range[0])
        with _stage("ppf.verify"):
            scores = self.verify(model_points, model_normals, model_lengths, sp, sn, sl, poses, inlier, images,
                                 float(cfg["inlier_normal_deg"]), inlier_range[1])
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
        return PPFMatches(poses.reshape(shape + (4, 4)), scores.clamp(min=0).reshape(shape),
                          torch.where(found, votes, torch.zeros_like(votes)).reshape(shape))

    @staticmethod
    def verify(model_points: Tensor, model_normals: Tensor, model_lengths: Tensor, scene_points: Tensor,
               scene_normals: Tensor, scene_lengths: Tensor, poses: Tensor, threshold: Tensor,
               images: Optional[List[RangeImage]] = None, normal_deg: float = 25.0,
               search_radius: Optional[float] = None) -> Tensor:
        """(B, H) score of pose poses[b, h] of model b in scene b: (inliers - violations) / points,
        clamped at 0. An inlier is a model point within threshold[b] of a scene point whose normal
        is within ``normal_deg`` of its own (a curved model patch laid on a plane keeps few); a
        violation (with ``images``, one range image per b) a model point facing the sensor where
        the sensor saw a surface more than threshold[b] behind it. 0 for non-finite poses.
        ``search_radius`` (>= every threshold, or None) bounds the nearest-neighbour search."""
        batch, hyps = poses.shape[:2]
        n = model_points.shape[1]
        finite = torch.isfinite(poses).flatten(2).all(2)
        safe = torch.where(finite[..., None, None], poses, torch.eye(4, device=poses.device).expand_as(poses))
        rot = safe[..., :3, :3].transpose(-1, -2)
        moved = model_points[:, None] @ rot + safe[..., None, :3, 3]  # (B, H, N, 3)
        moved_n = model_normals[:, None] @ rot
        dist, index = nearest_neighbors(moved.reshape(batch, hyps * n, 3), scene_points, scene_lengths,
                                        search_radius)
        nearest_n = torch.gather(scene_normals, 1, index.clamp(min=0)[..., None].expand(-1, -1, 3))
        agree = (moved_n.reshape(batch, hyps * n, 3) * nearest_n).sum(-1) >= math.cos(math.radians(normal_deg))
        valid = torch.arange(n, device=poses.device)[None, None, :] < model_lengths[:, None, None]
        hits = (((dist <= threshold[:, None]) & agree).reshape(batch, hyps, n) & valid).sum(2).float()
        if images is not None:
            for b in range(batch):
                through = see_through(images[b], moved[b], moved_n[b], float(threshold[b]))
                hits[b] -= (through & valid[b]).sum(1).float()
        score = (hits / model_lengths.clamp(min=1)[:, None].float()).clamp(min=0)
        return torch.where(finite, score, torch.zeros_like(score))


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


def demo_match(seed: int = 0, mesh: str = "bunny00", occlusion: float = 0.3, distractors: int = 2,
               model_samples: int = 20000, device: Union[str, torch.device] = "cpu",
               scene_options: Optional[Dict[str, object]] = None, **config) -> PPFDemo:
    """Looks for a target and its distractors (pointops.datasets_ppf: CGAL meshes when Debian's
    libcgal-demo is installed, else procedural blobs) in a generated scene with one PPFMatcher
    over all of them, on ``device``, and returns what a picture draws. ``scene_options`` go to
    ``datasets_ppf.make_ppf_scene`` (the camera's distance, the image size, ...); ``config`` to
    the matcher."""
    from .. import datasets_ppf as dp

    if dp.cgal_available():
        names = [mesh] + [name for name in dp.EVAL_MESHES if name != mesh][:distractors]
        meshes = [dp.load_mesh(name) for name in names]
    else:
        names = ["blob 1"] + [f"blob {s}" for s in range(2, 2 + distractors)]
        meshes = [dp.blob_mesh(seed=s) for s in range(1, 2 + distractors)]
    samples = [dp.sample_surface(m, model_samples, seed=seed + i) for i, m in enumerate(meshes)]
    model_points = torch.stack([p for p, _ in samples]).float().to(device)
    model_normals = torch.stack([n for _, n in samples]).float().to(device)
    matcher = PPFMatcher(model_points, model_normals, **config)
    scene = dp.make_ppf_scene(seed, meshes[0], meshes[1:], occlusion=occlusion, **(scene_options or {}))
    found = matcher.match(scene.points.to(device), scene.normals.to(device), max_instances=1)
    poses = found.poses[0, :, 0].cpu()  # (M, 4, 4)
    sample = model_points[:, :: max(1, model_samples // 2000)].cpu()
    placed = sample @ poses[:, :3, :3].transpose(1, 2) + poses[:, None, :3, 3]
    truth = sample[0] @ scene.pose[:3, :3].T + scene.pose[:3, 3]
    return PPFDemo(scene.points, scene.labels, names, placed, truth, poses, found.scores[0, :, 0].cpu(), scene.pose,
                   scene.occlusion)
