"""pointops: batched, exact point-cloud operators for PyTorch, on CPU and CUDA.

Every kernel is a ``torch.ops.pointops.*`` operator. Importing this package loads them (``_C``)
and the family modules, which hold each op's typed wrapper, its fake kernel for tracing and its
gradient where it has one. The API convention every function follows is in docs/api.md.
"""
import torch  # noqa: F401  (loads libtorch before the extension)

from ._version import __version__  # noqa: F401
from ._extension import _C  # noqa: F401,E402  (registers the operators; a clear ImportError when not built)

from . import datasets  # noqa: F401,E402  (synthetic scenes with ground truth; torch only, cheap to import)
from . import io  # noqa: F401,E402  (file readers / writers; their format libraries load on first use)
from . import nn  # noqa: F401,E402  (OpenPCDet-style PointNet++ functions and modules)
from . import pipelines  # noqa: F401,E402
from .bev import (  # noqa: E402
    DynamicVoxels,
    Voxels,
    bev_grid_size,
    bev_rasterize,
    height_image,
    pillar_scatter,
    voxelize,
    voxelize_dynamic,
)
from .geometry import (  # noqa: E402
    ICPResult,
    KNN,
    Normals,
    VoxelDownsample,
    estimate_normals,
    icp,
    transform_points,
    voxel_downsample,
    BallQuery,
    ball_query,
    group_points,
    interpolate,
    inverse_distance_weights,
    knn,
    knn_packed,
    three_nn,
)
from .hough import (  # noqa: E402
    Peaks,
    PlaneFit,
    ball_cells,
    ball_peaks_to_planes,
    hough_peaks,
    hough_plane_peaks,
    hough_planes,
    hough_planes_ball,
    peaks_to_planes,
    plane_grid_normals,
    plane_labels,
    plane_refit,
    rho_bins,
)
from .hough2d import (  # noqa: E402
    circle_perimeter_size,
    edge_points,
    hough_circles,
    hough_circles_max,
    hough_circles_points,
    hough_lines,
    hough_lines_points,
    line_angles,
    line_distances,
    rho_offset,
)
from .pipelines.hough2d import CircleDetections, LineDetections, detect_circles, detect_lines, synthetic_edges  # noqa: E402
from .pipelines.planes import PlaneDetections, detect_planes  # noqa: E402
from .ppf import PPF_PRESETS, PoseClusters, PPFModel, PPFVotes, decode_keys, pose_cluster, ppf_features, ppf_model, ppf_vote  # noqa: E402
from .presets import PlanePreset, bev_preset, list_presets, load_config, plane_preset  # noqa: E402
from .sampling import (  # noqa: E402
    SampledIndices,
    farthest_point_sampling,
    farthest_point_sampling_packed,
    sample_farthest_points,
)

__all__ = [
    "ball_cells",
    "ball_peaks_to_planes",
    "ball_query",
    "BallQuery",
    "bev_grid_size",
    "bev_preset",
    "bev_rasterize",
    "circle_perimeter_size",
    "CircleDetections",
    "datasets",
    "decode_keys",
    "detect_circles",
    "detect_lines",
    "detect_planes",
    "DynamicVoxels",
    "edge_points",
    "estimate_normals",
    "farthest_point_sampling",
    "farthest_point_sampling_packed",
    "group_points",
    "height_image",
    "hough_circles",
    "hough_circles_max",
    "hough_circles_points",
    "hough_lines",
    "hough_lines_points",
    "hough_peaks",
    "hough_plane_peaks",
    "hough_planes",
    "hough_planes_ball",
    "icp",
    "ICPResult",
    "interpolate",
    "inverse_distance_weights",
    "io",
    "KNN",
    "knn",
    "knn_packed",
    "line_angles",
    "line_distances",
    "LineDetections",
    "list_presets",
    "load_config",
    "nn",
    "Normals",
    "Peaks",
    "peaks_to_planes",
    "pillar_scatter",
    "plane_grid_normals",
    "plane_labels",
    "plane_preset",
    "plane_refit",
    "PlaneDetections",
    "PlaneFit",
    "PlanePreset",
    "pose_cluster",
    "PoseClusters",
    "ppf_features",
    "ppf_model",
    "PPF_PRESETS",
    "ppf_vote",
    "PPFModel",
    "PPFVotes",
    "rho_bins",
    "rho_offset",
    "sample_farthest_points",
    "SampledIndices",
    "synthetic_edges",
    "three_nn",
    "transform_points",
    "voxel_downsample",
    "VoxelDownsample",
    "voxelize",
    "voxelize_dynamic",
    "Voxels",
]
