"""Geometry family: neighbourhoods, downsampling, normals, registration."""
from .downsample import VoxelDownsample, voxel_downsample
from .icp import ICPResult, icp, transform_points
from .normals import Normals, estimate_normals
