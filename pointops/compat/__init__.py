"""The peers' call sites on pointops' kernels: each module is named after a peer and takes that
peer's calls exactly, so a model switches by changing one import line (docs/compat.md).

* :mod:`pointops.compat.mmcv`: ``mmcv.ops``' point ops (``furthest_point_sample(_with_dist)``,
  ``ball_query`` with ``min_radius`` and its stack variant, ``knn``, ``three_nn``,
  ``three_interpolate``, ``gather_points``, ``grouping_operation``, ``QueryAndGroup``,
  ``GroupAll``, ``Voxelization``);
* :mod:`pointops.compat.pointcept`: Pointcept's ``libs/pointops`` (``knn_query``,
  ``ball_query``, ``random_ball_query``, ``farthest_point_sampling``, ``grouping``,
  ``interpolation``, ``query_and_group``, ...) on packed clouds with int32 cumulative offsets;
* :mod:`pointops.compat.pyg`: torch_cluster's ``fps``, ``knn``, ``knn_graph``, ``radius``,
  ``radius_graph``, ``nearest``, ``grid_cluster`` (batch vectors, ``edge_index`` outputs);
* :mod:`pointops.compat.pytorch3d`: ``knn_points``, ``knn_gather``, ``sample_farthest_points``,
  ``chamfer_distance``.

OpenPCDet's pointnet2 (batch and stack) is :mod:`pointops.nn` and :mod:`pointops.nn.stack`.
"""
from . import mmcv, pointcept, pyg, pytorch3d  # noqa: F401

__all__ = ["mmcv", "pointcept", "pyg", "pytorch3d"]
