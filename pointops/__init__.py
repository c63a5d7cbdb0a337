"""pointops: batched, exact point-cloud operators for PyTorch, on CPU and CUDA.

Every kernel is a ``torch.ops.pointops.*`` operator; this package loads them (``_C``), registers
their fake kernels for tracing (``_fake``) and exposes typed wrappers.
"""
import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C  # noqa: F401  (registers the operators)
from . import _fake  # noqa: F401  (fake kernels for torch.compile / export)
from .sampling import farthest_point_sampling, farthest_point_sampling_packed, sample_farthest_points
from .voxelize import Voxels, voxelize, voxelize_dynamic

__all__ = [
    "farthest_point_sampling",
    "farthest_point_sampling_packed",
    "sample_farthest_points",
    "Voxels",
    "voxelize",
    "voxelize_dynamic",
]
__version__ = "0.1.0"
