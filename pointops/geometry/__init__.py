"""Geometry ops: neighbourhoods (kNN, ball query, interpolation), downsampling, normals, registration."""

from .cube_query import CubeQuery, cube_query_packed
from .downsample import VoxelDownsample, voxel_downsample
from .icp import ICPResult, icp, transform_points
from .neighbors import (
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
from .normals import Normals, estimate_normals
