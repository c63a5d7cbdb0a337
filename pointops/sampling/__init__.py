"""Sampling family (csrc/sampling): farthest point sampling of padded and packed clouds."""

from .ops import (
    SampledIndices,
    farthest_point_sampling,
    farthest_point_sampling_packed,
)
