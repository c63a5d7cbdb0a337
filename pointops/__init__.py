"""pointops: batched, exact point-cloud operators for PyTorch, on CPU and CUDA.

Every kernel is a ``torch.ops.pointops.*`` operator; this package loads them (``_C``), registers
their fake kernels for tracing (``_fake``) and exposes typed wrappers.
"""
import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C  # noqa: F401  (registers the operators)
from . import _fake  # noqa: F401  (fake kernels for torch.compile / export)
from . import datasets  # noqa: F401  (synthetic scenes with ground truth; torch only, cheap to import)
from .geometry import KNN, knn, knn_packed
from .bev import bev_grid_size, bev_preset, bev_rasterize, height_image, pillar_scatter
from .geometry import ICPResult, Normals, VoxelDownsample, estimate_normals, icp, transform_points, voxel_downsample
from .hough import (
    ball_cells,
    ball_peaks_to_planes,
    hough_peaks,
    hough_plane_peaks,
    hough_planes,
    hough_planes_ball,
    peaks_to_planes,
    plane_grid_normals,
    rho_bins,
)
from .ppf import PPF_PRESETS, PoseClusters, PPFModel, PPFVotes, decode_keys, pose_cluster, ppf_features, ppf_model, ppf_vote
from .planes import PLANE_PRESETS, PlaneDetections, detect_planes, plane_labels, refit_planes
from .sampling import farthest_point_sampling, farthest_point_sampling_packed, sample_farthest_points
from .voxelize import Voxels, voxelize, voxelize_dynamic

__all__ = [
    "ball_cells",
    "ball_peaks_to_planes",
    "bev_grid_size",
    "bev_preset",
    "bev_rasterize",
    "datasets",
    "detect_planes",
    "estimate_normals",
    "height_image",
    "KNN",
    "knn",
    "knn_packed",
    "hough_peaks",
    "icp",
    "ICPResult",
    "Normals",
    "hough_plane_peaks",
    "hough_planes",
    "hough_planes_ball",
    "peaks_to_planes",
    "pillar_scatter",
    "plane_grid_normals",
    "plane_labels",
    "PLANE_PRESETS",
    "PlaneDetections",
    "PPF_PRESETS",
    "PoseClusters",
    "PPFModel",
    "PPFVotes",
    "decode_keys",
    "pose_cluster",
    "ppf_features",
    "ppf_model",
    "ppf_vote",
    "refit_planes",
    "rho_bins",
    "farthest_point_sampling",
    "farthest_point_sampling_packed",
    "sample_farthest_points",
    "transform_points",
    "Voxels",
    "VoxelDownsample",
    "voxel_downsample",
    "voxelize",
    "voxelize_dynamic",
]
__version__ = "0.1.0"
