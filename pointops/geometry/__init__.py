"""Geometry ops: neighbourhoods (kNN, ball query, interpolation), downsampling, normals, registration."""
from .neighbors import (  # noqa: F401
    KNN,
    BallQuery,
    ball_query,
    group_points,
    interpolate,
    inverse_distance_weights,
    knn,
    knn_packed,
    three_nn,
)
