"""Geometry ops: neighbourhoods (kNN, ball query, interpolation), downsampling, normals, registration."""
from .neighbors import KNN, knn, knn_packed  # noqa: F401
