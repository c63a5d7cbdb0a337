"""BEV family (csrc/bev): bird's-eye-view images, hard and dynamic voxelization, pillar scatter."""

from .ops import (
    CHANNELS,
    DynamicVoxels,
    Voxels,
    bev_grid_size,
    bev_rasterize,
    height_image,
    pillar_scatter,
    voxelize,
    voxelize_dynamic,
)
