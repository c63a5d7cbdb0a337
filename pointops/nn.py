"""OpenPCDet's PointNet++ under its own layout, so that a model switches by changing one import::

    # from pcdet.ops.pointnet2.pointnet2_batch import pointnet2_modules, pointnet2_utils
    from pointops import nn as pointnet2_modules
    from pointops import nn as pointnet2_utils
    # from pcdet.ops.pointnet2.pointnet2_stack import pointnet2_modules, pointnet2_utils
    from pointops.nn import stack as pointnet2_stack_modules
    from pointops.nn import stack as pointnet2_stack_utils

``pointnet2_batch``'s names are :mod:`pointops.compat.openpcdet`'s, handed on here;
``pointops.nn.stack`` is :mod:`pointops.compat.openpcdet_stack` (``pointnet2_stack``). Both are
described there and in docs/compat.md.
"""

import sys

from .compat import openpcdet_stack as stack
from .compat.openpcdet import (  # noqa: F401
    BallQuery,
    FarthestPointSampling,
    GatherOperation,
    GroupAll,
    GroupingOperation,
    PointnetFPModule,
    PointnetSAModule,
    PointnetSAModuleMSG,
    QueryAndGroup,
    ThreeInterpolate,
    ThreeNN,
    ball_query,
    farthest_point_sample,
    furthest_point_sample,
    gather_operation,
    grouping_operation,
    three_interpolate,
    three_nn,
)
from .compat.openpcdet import __all__ as _batch_names

# `import pointops.nn.stack` finds the module under this name, as `import os.path` does.
sys.modules[__name__ + ".stack"] = stack

__all__ = list(_batch_names) + ["stack"]
