"""Named parameter sets (presets), one YAML file per family in ``configs/``.

The YAML files are what users read, copy and edit; the functions below hold the same values as
code, so that a wrapper compiled by TorchScript can resolve a preset name (TorchScript reads no
files and no global dicts). ``tests/test_presets.py`` fails when the two differ.

    pointops.list_presets()              # {"bev": ["kitti", ...], "planes": [...], ...}
    pointops.load_config("bev")          # the YAML as a dict (needs PyYAML)
    pointops.bev_preset("kitti")         # ([x_min, y_min, z_min, x_max, y_max, z_max], [dx, dy])
    pointops.plane_preset("outdoor")     # PlanePreset(n_phi=90, ...)
    pointops.ppf_preset("fast")          # {"tau_d": 0.05, ...}: PPFMatcher's options
"""

import os
from typing import Dict, List, NamedTuple, Tuple, Union

BEV_PRESETS = ("kitti", "kitti_bev", "nuscenes", "waymo", "long_range_1024")
PLANE_PRESETS = ("indoor", "outdoor", "outdoor_fast")


def bev_preset(name: str) -> Tuple[List[float], List[float]]:
    """``(point_range, cell_size)`` of a named BEV grid (configs/bev.yaml says what each is)."""
    if name == "kitti":
        return [0.0, -39.68, -3.0, 69.12, 39.68, 1.0], [0.16, 0.16]
    if name == "kitti_bev":
        return [0.0, -40.0, -3.0, 70.4, 40.0, 1.0], [0.1, 0.1]
    if name == "nuscenes":
        return [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0], [0.2, 0.2]
    if name == "waymo":
        return [-75.2, -75.2, -2.0, 75.2, 75.2, 4.0], [0.32, 0.32]
    if name == "long_range_1024":
        return [0.0, -50.0, -5.0, 100.0, 50.0, 15.0], [0.09765, 0.09765]
    raise ValueError(
        "unknown BEV preset '" + name + "'; expected one of kitti, kitti_bev, nuscenes, waymo, long_range_1024"
    )


class PlanePreset(NamedTuple):
    """Parameters of :func:`pointops.detect_planes` (configs/planes.yaml)."""

    n_phi: int  # orientation cells over the polar angle [0, pi]
    n_theta: int  # orientation cells over the azimuth half-turn [0, pi)
    rho_step: float  # metres per rho bin
    rho_max: float  # rho bins tile [-rho_max, rho_max)
    distance_threshold: float  # inlier band, metres
    min_inliers: float  # smallest share of a cloud's points a plane must hold


def plane_preset(name: str) -> PlanePreset:
    """The named plane-detection parameters (configs/planes.yaml says what each is for)."""
    if name == "indoor":
        return PlanePreset(90, 90, 0.02, 8.0, 0.03, 0.02)
    if name == "outdoor":
        return PlanePreset(90, 90, 0.1, 50.0, 0.08, 0.02)
    if name == "outdoor_fast":
        return PlanePreset(90, 90, 0.390625, 50.0, 0.08, 0.02)
    raise ValueError("unknown plane preset '" + name + "'; expected one of indoor, outdoor, outdoor_fast")


# Named parameter sets of ppf_model / ppf_vote / pose_cluster / PPFMatcher; configs/ppf.yaml holds
# the same table (tests/test_presets.py keeps the two equal). Explicit arguments override a preset.
#   tau_d: distance step / model diameter (Drost: 0.05); the scene is downsampled to this step.
#   angle_bins: alpha bins over 2 pi (30: 12 degree steps; feature angles get 15 bins over pi).
#   stride: every stride-th scene point is a reference point.
#   peaks: (model point, alpha) peaks kept per reference point.
#   spread: also vote with the neighbouring feature bins (up to 16 keys per scene pair).
#   max_pairs_per_key: a model key keeps at most this many pairs (0: all); see ppf_model.
#   cluster_distance: pose cluster radius, in distance steps; cluster_angle_deg: rotation radius.
#   suppression: two instances' translations are at least this many diameters apart.
#   hypotheses: clusters refined by ICP and re-scored per (scene, model), at distinct places;
#   turned_hypotheses, suppression_angle_deg: as many more from a selection that removes only
#   the candidates within suppression diameters and this rotation of a chosen one (a turned
#   pose at a hypothesis' place, where a wrong rotation won the instance's votes).
#   icp_iterations: ICP steps at 3 x inlier_distance, then as many at inlier_distance;
#   inlier_distance (in distance steps), inlier_normal_deg: an inlier of re-scoring lies within
#   inlier_distance of a scene point whose normal is within inlier_normal_deg of its own.
#   visibility: re-scoring also subtracts model points the sensor (at the scene's origin) saw through.
#   normal_neighbors: k of the kNN normal estimate when normals are not given.
# what tools/eval_ppf.py measures: finer steps, every other scene point, neighbour bins, keys
# capped at 256 pairs
_PPF_DEFAULT: Dict[str, Union[int, float, bool, str]] = {
    "tau_d": 0.035,
    "angle_bins": 30,
    "stride": 2,
    "peaks": 10,
    "spread": True,
    "max_pairs_per_key": 256,
    "cluster_distance": 1.0,
    "cluster_angle_deg": 24.0,
    "suppression": 0.5,
    "suppression_angle_deg": 48.0,
    "hypotheses": 10,
    "turned_hypotheses": 4,
    "icp_iterations": 10,
    "inlier_distance": 1.0,
    "inlier_normal_deg": 25.0,
    "visibility": True,
    "normal_neighbors": 30,
}
PPF_PRESETS: Dict[str, Dict[str, Union[int, float, bool, str]]] = {
    "default": _PPF_DEFAULT,
    # Drost's parameters (tau_d 0.05, every 5th point, exact bins), keys capped at 32 pairs: about
    # 1/500 of the default's votes on a 640 x 480 frame; the rest as the default
    "fast": {**_PPF_DEFAULT, "tau_d": 0.05, "stride": 5, "peaks": 3, "spread": False, "max_pairs_per_key": 32},
}


def ppf_preset(name: str) -> Dict[str, Union[int, float, bool, str]]:
    """A copy of the named options of :class:`pointops.PPFMatcher` (configs/ppf.yaml says what each is)."""
    if name not in PPF_PRESETS:
        raise ValueError(f"unknown PPF preset '{name}'; expected one of {', '.join(sorted(PPF_PRESETS))}")
    return dict(PPF_PRESETS[name])


def config_dir() -> str:
    """The folder holding the YAML presets: ``pointops/configs`` in an installed package, else the
    repository's top-level ``configs/`` (a source checkout or an editable install)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "configs"), os.path.join(os.path.dirname(here), "configs")):
        if os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError("no configs folder next to " + here + " or in its parent")


def load_config(family: str) -> Dict[str, Dict]:
    """The presets of a family (``bev``, ``planes``, ...) as read from its YAML file (needs PyYAML)."""
    try:
        import yaml
    except ImportError as error:  # an optional dependency: the presets above need no YAML
        raise ImportError("load_config reads YAML with PyYAML: pip install pyyaml") from error
    path = os.path.join(config_dir(), family + ".yaml")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(config_dir()) if f.endswith(".yaml"))
        raise ValueError("no preset family '" + family + "' (" + path + "); known: " + ", ".join(known))
    with open(path) as f:
        return yaml.safe_load(f)


def list_presets() -> Dict[str, List[str]]:
    """Every preset name, by family: {"bev": [...], "planes": [...], ...}."""
    return {"bev": list(BEV_PRESETS), "planes": list(PLANE_PRESETS), "ppf": list(PPF_PRESETS)}
