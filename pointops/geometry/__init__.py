"""Geometry ops: neighbourhoods (kNN, ball query, interpolation), downsampling, normals, registration."""
from .neighbors import KNN, knn, knn_packed  # noqa: F401
from .downsample import VoxelDownsample, voxel_downsample  # noqa: F401
from .icp import ICPResult, icp, transform_points  # noqa: F401
from .normals import Normals, estimate_normals  # noqa: F401
