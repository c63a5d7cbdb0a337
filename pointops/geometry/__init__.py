"""Geometry ops: neighbourhoods (kNN, ball query, interpolation), downsampling, normals, registration."""
from .cube_query import CubeQuery, cube_query_packed  # noqa: F401
from .downsample import VoxelDownsample, voxel_downsample  # noqa: F401
from .icp import ICPResult, icp, transform_points  # noqa: F401
from .neighbors import (  # noqa: F401
    KNN,
    BallQuery,
    ball_query,
    ball_query_packed,
    group_points,
    interpolate,
    inverse_distance_weights,
    knn,
    knn_packed,
    three_nn,
)
from .normals import Normals, estimate_normals  # noqa: F401
