"""The peers' call sites on pointops' kernels: each module is named after a peer and takes that
peer's calls exactly, so a model switches by changing one import line (docs/compat.md). They call
the families' wrappers (:mod:`pointops.sampling`, :mod:`pointops.geometry`, :mod:`pointops.bev`),
and share what they have in common through one private module, ``_peer``.

* :mod:`pointops.compat.openpcdet`: OpenPCDet's ``pointnet2_batch`` (PointNet++ on padded clouds:
  ``furthest_point_sample``, ``ball_query``, ``three_nn``, ..., ``PointnetSAModuleMSG``,
  ``PointnetFPModule``), also reachable as :mod:`pointops.nn`;
* :mod:`pointops.compat.openpcdet_stack`: OpenPCDet's ``pointnet2_stack`` (packed clouds with
  per-cloud counts: PV-RCNN's ``StackSAModuleMSG``, PV-RCNN++'s vector pool), also reachable as
  ``pointops.nn.stack``;
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
"""

from . import mmcv, openpcdet, openpcdet_stack, pointcept, pyg, pytorch3d  # noqa: F401

__all__ = ["mmcv", "openpcdet", "openpcdet_stack", "pointcept", "pyg", "pytorch3d"]
