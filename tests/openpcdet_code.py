"""OpenPCDet's PointNet++ module code and PV-RCNN's voxel set abstraction, written anew for the
tests as OpenPCDet calls them: every class takes the utils (and modules) it calls as the names
OpenPCDet imports (``pointnet2_utils``, ``pointnet2_stack_utils``, ``pointnet2_stack_modules``),
so a test runs the same module code on pointops.nn (only the import changed) and on the slow
NumPy versions of OpenPCDet's kernels in tests/openpcdet_reference.py.

Transcribed from open-mmlab/OpenPCDet @8cacccec: pcdet/ops/pointnet2/pointnet2_batch/
{pointnet2_utils.py (QueryAndGroup, GroupAll), pointnet2_modules.py}, pcdet/ops/pointnet2/
pointnet2_stack/{pointnet2_utils.py (QueryAndGroup), pointnet2_modules.py} and
pcdet/models/backbones_3d/pfe/voxel_set_abstraction.py (the BEV source and the ROI filter left
out: plain torch, no pointnet2 op)."""

import math
from types import SimpleNamespace
from typing import List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class EasyDict(dict):
    """The attribute access OpenPCDet's configs have (easydict.EasyDict: nested dicts too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for key, value in self.items():
            if isinstance(value, dict) and not isinstance(value, EasyDict):
                self[key] = EasyDict(value)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as error:
            raise AttributeError(name) from error


def batch_grouping_modules(pointnet2_utils):
    """pointnet2_batch/pointnet2_utils.py's QueryAndGroup and GroupAll, on the given utils."""

    class QueryAndGroup(nn.Module):
        def __init__(self, radius: float, nsample: int, use_xyz: bool = True):
            super().__init__()
            self.radius, self.nsample, self.use_xyz = radius, nsample, use_xyz

        def forward(self, xyz, new_xyz, features=None):
            idx = pointnet2_utils.ball_query(self.radius, self.nsample, xyz, new_xyz)
            xyz_trans = xyz.transpose(1, 2).contiguous()
            grouped_xyz = pointnet2_utils.grouping_operation(xyz_trans, idx)  # (B, 3, npoint, nsample)
            grouped_xyz -= new_xyz.transpose(1, 2).unsqueeze(-1)
            if features is not None:
                grouped_features = pointnet2_utils.grouping_operation(features, idx)
                if self.use_xyz:
                    new_features = torch.cat([grouped_xyz, grouped_features], dim=1)
                else:
                    new_features = grouped_features
            else:
                assert self.use_xyz, "Cannot have not features and not use xyz as a feature!"
                new_features = grouped_xyz
            return new_features

    class GroupAll(nn.Module):
        def __init__(self, use_xyz: bool = True):
            super().__init__()
            self.use_xyz = use_xyz

        def forward(self, xyz, new_xyz, features=None):
            grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
            if features is not None:
                grouped_features = features.unsqueeze(2)
                if self.use_xyz:
                    new_features = torch.cat([grouped_xyz, grouped_features], dim=1)
                else:
                    new_features = grouped_features
            else:
                new_features = grouped_xyz
            return new_features

    return SimpleNamespace(QueryAndGroup=QueryAndGroup, GroupAll=GroupAll)


def batch_modules(pointnet2_utils):
    """pointnet2_batch/pointnet2_modules.py on the given utils."""

    class _PointnetSAModuleBase(nn.Module):
        def __init__(self):
            super().__init__()
            self.npoint = None
            self.groupers = None
            self.mlps = None
            self.pool_method = "max_pool"

        def forward(self, xyz, features=None, new_xyz=None):
            new_features_list = []
            xyz_flipped = xyz.transpose(1, 2).contiguous()
            if new_xyz is None:
                new_xyz = (
                    pointnet2_utils.gather_operation(
                        xyz_flipped, pointnet2_utils.farthest_point_sample(xyz, self.npoint)
                    )
                    .transpose(1, 2)
                    .contiguous()
                    if self.npoint is not None
                    else None
                )
            for i in range(len(self.groupers)):
                new_features = self.groupers[i](xyz, new_xyz, features)  # (B, C, npoint, nsample)
                new_features = self.mlps[i](new_features)
                if self.pool_method == "max_pool":
                    new_features = F.max_pool2d(new_features, kernel_size=[1, new_features.size(3)])
                elif self.pool_method == "avg_pool":
                    new_features = F.avg_pool2d(new_features, kernel_size=[1, new_features.size(3)])
                else:
                    raise NotImplementedError
                new_features_list.append(new_features.squeeze(-1))
            return new_xyz, torch.cat(new_features_list, dim=1)

    class PointnetSAModuleMSG(_PointnetSAModuleBase):
        def __init__(self, *, npoint, radii, nsamples, mlps, bn=True, use_xyz=True, pool_method="max_pool"):
            super().__init__()
            assert len(radii) == len(nsamples) == len(mlps)
            self.npoint = npoint
            self.groupers = nn.ModuleList()
            self.mlps = nn.ModuleList()
            for i in range(len(radii)):
                radius = radii[i]
                nsample = nsamples[i]
                self.groupers.append(
                    pointnet2_utils.QueryAndGroup(radius, nsample, use_xyz=use_xyz)
                    if npoint is not None
                    else pointnet2_utils.GroupAll(use_xyz)
                )
                mlp_spec = mlps[i]
                if use_xyz:
                    mlp_spec[0] += 3
                shared_mlps = []
                for k in range(len(mlp_spec) - 1):
                    shared_mlps.extend(
                        [
                            nn.Conv2d(mlp_spec[k], mlp_spec[k + 1], kernel_size=1, bias=False),
                            nn.BatchNorm2d(mlp_spec[k + 1]),
                            nn.ReLU(),
                        ]
                    )
                self.mlps.append(nn.Sequential(*shared_mlps))
            self.pool_method = pool_method

    class PointnetSAModule(PointnetSAModuleMSG):
        def __init__(
            self, *, mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True, pool_method="max_pool"
        ):
            super().__init__(
                mlps=[mlp],
                npoint=npoint,
                radii=[radius],
                nsamples=[nsample],
                bn=bn,
                use_xyz=use_xyz,
                pool_method=pool_method,
            )

    class PointnetFPModule(nn.Module):
        def __init__(self, *, mlp, bn=True):
            super().__init__()
            shared_mlps = []
            for k in range(len(mlp) - 1):
                shared_mlps.extend(
                    [
                        nn.Conv2d(mlp[k], mlp[k + 1], kernel_size=1, bias=False),
                        nn.BatchNorm2d(mlp[k + 1]),
                        nn.ReLU(),
                    ]
                )
            self.mlp = nn.Sequential(*shared_mlps)

        def forward(self, unknown, known, unknow_feats, known_feats):
            if known is not None:
                dist, idx = pointnet2_utils.three_nn(unknown, known)
                dist_recip = 1.0 / (dist + 1e-8)
                norm = torch.sum(dist_recip, dim=2, keepdim=True)
                weight = dist_recip / norm
                interpolated_feats = pointnet2_utils.three_interpolate(known_feats, idx, weight)
            else:
                interpolated_feats = known_feats.expand(*known_feats.size()[0:2], unknown.size(1))
            if unknow_feats is not None:
                new_features = torch.cat([interpolated_feats, unknow_feats], dim=1)
            else:
                new_features = interpolated_feats
            new_features = new_features.unsqueeze(-1)
            new_features = self.mlp(new_features)
            return new_features.squeeze(-1)

    return SimpleNamespace(
        PointnetSAModuleMSG=PointnetSAModuleMSG, PointnetSAModule=PointnetSAModule, PointnetFPModule=PointnetFPModule
    )


def stack_query_and_group(pointnet2_utils):
    """pointnet2_stack/pointnet2_utils.py's QueryAndGroup on the given utils."""

    class QueryAndGroup(nn.Module):
        def __init__(self, radius: float, nsample: int, use_xyz: bool = True):
            super().__init__()
            self.radius, self.nsample, self.use_xyz = radius, nsample, use_xyz

        def forward(self, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features=None):
            assert xyz.shape[0] == xyz_batch_cnt.sum()
            assert new_xyz.shape[0] == new_xyz_batch_cnt.sum()
            idx, empty_ball_mask = pointnet2_utils.ball_query(
                self.radius, self.nsample, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt
            )
            grouped_xyz = pointnet2_utils.grouping_operation(xyz, xyz_batch_cnt, idx, new_xyz_batch_cnt)
            grouped_xyz -= new_xyz.unsqueeze(-1)
            grouped_xyz[empty_ball_mask] = 0
            if features is not None:
                grouped_features = pointnet2_utils.grouping_operation(features, xyz_batch_cnt, idx, new_xyz_batch_cnt)
                grouped_features[empty_ball_mask] = 0
                if self.use_xyz:
                    new_features = torch.cat([grouped_xyz, grouped_features], dim=1)
                else:
                    new_features = grouped_features
            else:
                assert self.use_xyz, "Cannot have not features and not use xyz as a feature!"
                new_features = grouped_xyz
            return new_features, idx

    return QueryAndGroup


def stack_modules(pointnet2_utils):
    """pointnet2_stack/pointnet2_modules.py on the given utils."""

    def build_local_aggregation_module(input_channels, config):
        local_aggregation_name = config.get("NAME", "StackSAModuleMSG")
        if local_aggregation_name == "StackSAModuleMSG":
            mlps = config.MLPS
            for k in range(len(mlps)):
                mlps[k] = [input_channels] + mlps[k]
            cur_layer = StackSAModuleMSG(
                radii=config.POOL_RADIUS, nsamples=config.NSAMPLE, mlps=mlps, use_xyz=True, pool_method="max_pool"
            )
            num_c_out = sum([x[-1] for x in mlps])
        elif local_aggregation_name == "VectorPoolAggregationModuleMSG":
            cur_layer = VectorPoolAggregationModuleMSG(input_channels=input_channels, config=config)
            num_c_out = config.MSG_POST_MLPS[-1]
        else:
            raise NotImplementedError
        return cur_layer, num_c_out

    class StackSAModuleMSG(nn.Module):
        def __init__(
            self,
            *,
            radii: List[float],
            nsamples: List[int],
            mlps: List[List[int]],
            use_xyz=True,
            pool_method="max_pool",
        ):
            super().__init__()
            assert len(radii) == len(nsamples) == len(mlps)
            self.groupers = nn.ModuleList()
            self.mlps = nn.ModuleList()
            for i in range(len(radii)):
                radius = radii[i]
                nsample = nsamples[i]
                self.groupers.append(pointnet2_utils.QueryAndGroup(radius, nsample, use_xyz=use_xyz))
                mlp_spec = mlps[i]
                if use_xyz:
                    mlp_spec[0] += 3
                shared_mlps = []
                for k in range(len(mlp_spec) - 1):
                    shared_mlps.extend(
                        [
                            nn.Conv2d(mlp_spec[k], mlp_spec[k + 1], kernel_size=1, bias=False),
                            nn.BatchNorm2d(mlp_spec[k + 1]),
                            nn.ReLU(),
                        ]
                    )
                self.mlps.append(nn.Sequential(*shared_mlps))
            self.pool_method = pool_method
            self.init_weights()

        def init_weights(self):
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight)
                    if m.bias is not None:
                        nn.init.constant_(m.bias, 0)
                if isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1.0)
                    nn.init.constant_(m.bias, 0)

        def forward(self, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features=None, empty_voxel_set_zeros=True):
            new_features_list = []
            for k in range(len(self.groupers)):
                new_features, ball_idxs = self.groupers[k](xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features)
                new_features = new_features.permute(1, 0, 2).unsqueeze(dim=0)
                new_features = self.mlps[k](new_features)
                if self.pool_method == "max_pool":
                    new_features = F.max_pool2d(new_features, kernel_size=[1, new_features.size(3)]).squeeze(dim=-1)
                elif self.pool_method == "avg_pool":
                    new_features = F.avg_pool2d(new_features, kernel_size=[1, new_features.size(3)]).squeeze(dim=-1)
                else:
                    raise NotImplementedError
                new_features = new_features.squeeze(dim=0).permute(1, 0)
                new_features_list.append(new_features)
            new_features = torch.cat(new_features_list, dim=1)
            return new_xyz, new_features

    class StackPointnetFPModule(nn.Module):
        def __init__(self, *, mlp: List[int]):
            super().__init__()
            shared_mlps = []
            for k in range(len(mlp) - 1):
                shared_mlps.extend(
                    [
                        nn.Conv2d(mlp[k], mlp[k + 1], kernel_size=1, bias=False),
                        nn.BatchNorm2d(mlp[k + 1]),
                        nn.ReLU(),
                    ]
                )
            self.mlp = nn.Sequential(*shared_mlps)

        def forward(self, unknown, unknown_batch_cnt, known, known_batch_cnt, unknown_feats=None, known_feats=None):
            dist, idx = pointnet2_utils.three_nn(unknown, unknown_batch_cnt, known, known_batch_cnt)
            dist_recip = 1.0 / (dist + 1e-8)
            norm = torch.sum(dist_recip, dim=-1, keepdim=True)
            weight = dist_recip / norm
            interpolated_feats = pointnet2_utils.three_interpolate(known_feats, idx, weight)
            if unknown_feats is not None:
                new_features = torch.cat([interpolated_feats, unknown_feats], dim=1)
            else:
                new_features = interpolated_feats
            new_features = new_features.permute(1, 0)[None, :, :, None]
            new_features = self.mlp(new_features)
            new_features = new_features.squeeze(dim=0).squeeze(dim=-1).permute(1, 0)
            return new_features

    class VectorPoolLocalInterpolateModule(nn.Module):
        def __init__(
            self,
            mlp,
            num_voxels,
            max_neighbour_distance,
            nsample,
            neighbor_type,
            use_xyz=True,
            neighbour_distance_multiplier=1.0,
            xyz_encoding_type="concat",
        ):
            super().__init__()
            self.num_voxels = num_voxels
            self.num_total_grids = self.num_voxels[0] * self.num_voxels[1] * self.num_voxels[2]
            self.max_neighbour_distance = max_neighbour_distance
            self.neighbor_distance_multiplier = neighbour_distance_multiplier
            self.nsample = nsample
            self.neighbor_type = neighbor_type
            self.use_xyz = use_xyz
            self.xyz_encoding_type = xyz_encoding_type
            if mlp is not None:
                if self.use_xyz:
                    mlp[0] += 9 if self.xyz_encoding_type == "concat" else 0
                shared_mlps = []
                for k in range(len(mlp) - 1):
                    shared_mlps.extend(
                        [
                            nn.Conv2d(mlp[k], mlp[k + 1], kernel_size=1, bias=False),
                            nn.BatchNorm2d(mlp[k + 1]),
                            nn.ReLU(),
                        ]
                    )
                self.mlp = nn.Sequential(*shared_mlps)
            else:
                self.mlp = None
            self.num_avg_length_of_neighbor_idxs = 1000

        def forward(
            self, support_xyz, support_features, xyz_batch_cnt, new_xyz, new_xyz_grid_centers, new_xyz_batch_cnt
        ):
            with torch.no_grad():
                dist, idx, num_avg_length_of_neighbor_idxs = pointnet2_utils.three_nn_for_vector_pool_by_two_step(
                    support_xyz,
                    xyz_batch_cnt,
                    new_xyz,
                    new_xyz_grid_centers,
                    new_xyz_batch_cnt,
                    self.max_neighbour_distance,
                    self.nsample,
                    self.neighbor_type,
                    self.num_avg_length_of_neighbor_idxs,
                    self.num_total_grids,
                    self.neighbor_distance_multiplier,
                )
            self.num_avg_length_of_neighbor_idxs = max(
                self.num_avg_length_of_neighbor_idxs, num_avg_length_of_neighbor_idxs.item()
            )
            dist_recip = 1.0 / (dist + 1e-8)
            norm = torch.sum(dist_recip, dim=-1, keepdim=True)
            weight = dist_recip / torch.clamp_min(norm, min=1e-8)
            empty_mask = idx.view(-1, 3)[:, 0] == -1
            idx.view(-1, 3)[empty_mask] = 0
            interpolated_feats = pointnet2_utils.three_interpolate(
                support_features, idx.view(-1, 3), weight.view(-1, 3)
            )
            interpolated_feats = interpolated_feats.view(idx.shape[0], idx.shape[1], -1)
            if self.use_xyz:
                near_known_xyz = support_xyz[idx.view(-1, 3).long()].view(-1, 3, 3)
                local_xyz = (new_xyz_grid_centers.view(-1, 1, 3) - near_known_xyz).view(-1, idx.shape[1], 9)
                if self.xyz_encoding_type == "concat":
                    interpolated_feats = torch.cat((interpolated_feats, local_xyz), dim=-1)
                else:
                    raise NotImplementedError
            new_features = interpolated_feats.view(-1, interpolated_feats.shape[-1])
            new_features[empty_mask, :] = 0
            if self.mlp is not None:
                new_features = new_features.permute(1, 0)[None, :, :, None]
                new_features = self.mlp(new_features)
                new_features = new_features.squeeze(dim=0).squeeze(dim=-1).permute(1, 0)
            return new_features

    class VectorPoolAggregationModule(nn.Module):
        def __init__(
            self,
            input_channels,
            num_local_voxel=(3, 3, 3),
            local_aggregation_type="local_interpolation",
            num_reduced_channels=30,
            num_channels_of_local_aggregation=32,
            post_mlps=(128,),
            max_neighbor_distance=None,
            neighbor_nsample=-1,
            neighbor_type=0,
            neighbor_distance_multiplier=2.0,
        ):
            super().__init__()
            self.num_local_voxel = num_local_voxel
            self.total_voxels = self.num_local_voxel[0] * self.num_local_voxel[1] * self.num_local_voxel[2]
            self.local_aggregation_type = local_aggregation_type
            self.input_channels = input_channels
            self.num_reduced_channels = input_channels if num_reduced_channels is None else num_reduced_channels
            self.num_channels_of_local_aggregation = num_channels_of_local_aggregation
            self.max_neighbour_distance = max_neighbor_distance
            self.neighbor_nsample = neighbor_nsample
            self.neighbor_type = neighbor_type
            if self.local_aggregation_type == "local_interpolation":
                self.local_interpolate_module = VectorPoolLocalInterpolateModule(
                    mlp=None,
                    num_voxels=self.num_local_voxel,
                    max_neighbour_distance=self.max_neighbour_distance,
                    nsample=self.neighbor_nsample,
                    neighbor_type=self.neighbor_type,
                    neighbour_distance_multiplier=neighbor_distance_multiplier,
                )
                num_c_in = (self.num_reduced_channels + 9) * self.total_voxels
            else:
                self.local_interpolate_module = None
                num_c_in = (self.num_reduced_channels + 3) * self.total_voxels
            num_c_out = self.total_voxels * self.num_channels_of_local_aggregation
            self.separate_local_aggregation_layer = nn.Sequential(
                nn.Conv1d(num_c_in, num_c_out, kernel_size=1, groups=self.total_voxels, bias=False),
                nn.BatchNorm1d(num_c_out),
                nn.ReLU(),
            )
            post_mlp_list = []
            c_in = num_c_out
            for cur_num_c in post_mlps:
                post_mlp_list.extend(
                    [
                        nn.Conv1d(c_in, cur_num_c, kernel_size=1, bias=False),
                        nn.BatchNorm1d(cur_num_c),
                        nn.ReLU(),
                    ]
                )
                c_in = cur_num_c
            self.post_mlps = nn.Sequential(*post_mlp_list)
            self.num_mean_points_per_grid = 20

        def vector_pool_with_voxel_query(self, xyz, xyz_batch_cnt, features, new_xyz, new_xyz_batch_cnt):
            use_xyz = 1
            pooling_type = 0 if self.local_aggregation_type == "voxel_avg_pool" else 1
            new_features, new_local_xyz, num_mean_points_per_grid, point_cnt_of_grid = (
                pointnet2_utils.vector_pool_with_voxel_query_op(
                    xyz,
                    xyz_batch_cnt,
                    features,
                    new_xyz,
                    new_xyz_batch_cnt,
                    self.num_local_voxel[0],
                    self.num_local_voxel[1],
                    self.num_local_voxel[2],
                    self.max_neighbour_distance,
                    self.num_reduced_channels,
                    use_xyz,
                    self.num_mean_points_per_grid,
                    self.neighbor_nsample,
                    self.neighbor_type,
                    pooling_type,
                )
            )
            self.num_mean_points_per_grid = max(self.num_mean_points_per_grid, num_mean_points_per_grid.item())
            num_new_pts = new_features.shape[0]
            new_local_xyz = new_local_xyz.view(num_new_pts, -1, 3)
            new_features = new_features.view(num_new_pts, -1, self.num_reduced_channels)
            new_features = torch.cat((new_local_xyz, new_features), dim=-1).view(num_new_pts, -1)
            return new_features, point_cnt_of_grid

        @staticmethod
        def get_dense_voxels_by_center(point_centers, max_neighbour_distance, num_voxels):
            R = max_neighbour_distance
            device = point_centers.device
            x_grids = torch.arange(
                -R + R / num_voxels[0], R - R / num_voxels[0] + 1e-5, 2 * R / num_voxels[0], device=device
            )
            y_grids = torch.arange(
                -R + R / num_voxels[1], R - R / num_voxels[1] + 1e-5, 2 * R / num_voxels[1], device=device
            )
            z_grids = torch.arange(
                -R + R / num_voxels[2], R - R / num_voxels[2] + 1e-5, 2 * R / num_voxels[2], device=device
            )
            x_offset, y_offset, z_offset = torch.meshgrid(x_grids, y_grids, z_grids, indexing="ij")
            xyz_offset = torch.cat(
                (
                    x_offset.contiguous().view(-1, 1),
                    y_offset.contiguous().view(-1, 1),
                    z_offset.contiguous().view(-1, 1),
                ),
                dim=-1,
            )
            return point_centers[:, None, :] + xyz_offset[None, :, :]

        def vector_pool_with_local_interpolate(self, xyz, xyz_batch_cnt, features, new_xyz, new_xyz_batch_cnt):
            voxel_centers = self.get_dense_voxels_by_center(
                point_centers=new_xyz,
                max_neighbour_distance=self.max_neighbour_distance,
                num_voxels=self.num_local_voxel,
            )
            voxel_features = self.local_interpolate_module.forward(
                support_xyz=xyz,
                support_features=features,
                xyz_batch_cnt=xyz_batch_cnt,
                new_xyz=new_xyz,
                new_xyz_grid_centers=voxel_centers,
                new_xyz_batch_cnt=new_xyz_batch_cnt,
            )
            return voxel_features.contiguous().view(-1, self.total_voxels * voxel_features.shape[-1])

        def forward(self, xyz, xyz_batch_cnt, new_xyz, new_xyz_batch_cnt, features, **kwargs):
            N, C = features.shape
            features = features.view(N, -1, self.num_reduced_channels).sum(dim=1)
            if self.local_aggregation_type in ["voxel_avg_pool", "voxel_random_choice"]:
                vector_features, point_cnt_of_grid = self.vector_pool_with_voxel_query(
                    xyz=xyz,
                    xyz_batch_cnt=xyz_batch_cnt,
                    features=features,
                    new_xyz=new_xyz,
                    new_xyz_batch_cnt=new_xyz_batch_cnt,
                )
            elif self.local_aggregation_type == "local_interpolation":
                vector_features = self.vector_pool_with_local_interpolate(
                    xyz=xyz,
                    xyz_batch_cnt=xyz_batch_cnt,
                    features=features,
                    new_xyz=new_xyz,
                    new_xyz_batch_cnt=new_xyz_batch_cnt,
                )
            else:
                raise NotImplementedError
            vector_features = vector_features.permute(1, 0)[None, :, :]
            new_features = self.separate_local_aggregation_layer(vector_features)
            new_features = self.post_mlps(new_features)
            new_features = new_features.squeeze(dim=0).permute(1, 0)
            return new_xyz, new_features

    class VectorPoolAggregationModuleMSG(nn.Module):
        def __init__(self, input_channels, config):
            super().__init__()
            self.model_cfg = config
            self.num_groups = self.model_cfg.NUM_GROUPS
            c_in = 0
            for k in range(self.num_groups):
                cur_config = self.model_cfg[f"GROUP_CFG_{k}"]
                cur_vector_pool_module = VectorPoolAggregationModule(
                    input_channels=input_channels,
                    num_local_voxel=cur_config.NUM_LOCAL_VOXEL,
                    post_mlps=cur_config.POST_MLPS,
                    max_neighbor_distance=cur_config.MAX_NEIGHBOR_DISTANCE,
                    neighbor_nsample=cur_config.NEIGHBOR_NSAMPLE,
                    local_aggregation_type=self.model_cfg.LOCAL_AGGREGATION_TYPE,
                    num_reduced_channels=self.model_cfg.get("NUM_REDUCED_CHANNELS", None),
                    num_channels_of_local_aggregation=self.model_cfg.NUM_CHANNELS_OF_LOCAL_AGGREGATION,
                    neighbor_distance_multiplier=2.0,
                )
                self.__setattr__(f"layer_{k}", cur_vector_pool_module)
                c_in += cur_config.POST_MLPS[-1]
            c_in += 3
            shared_mlps = []
            for cur_num_c in self.model_cfg.MSG_POST_MLPS:
                shared_mlps.extend(
                    [
                        nn.Conv1d(c_in, cur_num_c, kernel_size=1, bias=False),
                        nn.BatchNorm1d(cur_num_c),
                        nn.ReLU(),
                    ]
                )
                c_in = cur_num_c
            self.msg_post_mlps = nn.Sequential(*shared_mlps)

        def forward(self, **kwargs):
            features_list = []
            for k in range(self.num_groups):
                cur_xyz, cur_features = self.__getattr__(f"layer_{k}")(**kwargs)
                features_list.append(cur_features)
            features = torch.cat(features_list, dim=-1)
            features = torch.cat((cur_xyz, features), dim=-1)
            features = features.permute(1, 0)[None, :, :]
            new_features = self.msg_post_mlps(features)
            new_features = new_features.squeeze(dim=0).permute(1, 0)
            return cur_xyz, new_features

    return SimpleNamespace(
        build_local_aggregation_module=build_local_aggregation_module,
        StackSAModuleMSG=StackSAModuleMSG,
        StackPointnetFPModule=StackPointnetFPModule,
        VectorPoolLocalInterpolateModule=VectorPoolLocalInterpolateModule,
        VectorPoolAggregationModule=VectorPoolAggregationModule,
        VectorPoolAggregationModuleMSG=VectorPoolAggregationModuleMSG,
    )


def voxel_set_abstraction(pointnet2_stack_modules, pointnet2_stack_utils):
    """pcdet/models/backbones_3d/pfe/voxel_set_abstraction.py's VoxelSetAbstraction (raw points
    and voxel-centre sources; keypoints by FPS or sectorized FPS around given points)."""

    def sector_fps(points, num_sampled_points, num_sectors):
        sector_size = np.pi * 2 / num_sectors
        point_angles = torch.atan2(points[:, 1], points[:, 0]) + np.pi
        sector_idx = (point_angles / sector_size).floor().clamp(min=0, max=num_sectors)
        xyz_points_list = []
        xyz_batch_cnt = []
        num_sampled_points_list = []
        for k in range(num_sectors):
            mask = sector_idx == k
            cur_num_points = mask.sum().item()
            if cur_num_points > 0:
                xyz_points_list.append(points[mask])
                xyz_batch_cnt.append(cur_num_points)
                ratio = cur_num_points / points.shape[0]
                num_sampled_points_list.append(min(cur_num_points, math.ceil(ratio * num_sampled_points)))
        xyz = torch.cat(xyz_points_list, dim=0)
        xyz_batch_cnt = torch.tensor(xyz_batch_cnt, device=points.device).int()
        sampled_points_batch_cnt = torch.tensor(num_sampled_points_list, device=points.device).int()
        sampled_pt_idxs = pointnet2_stack_utils.stack_farthest_point_sample(
            xyz.contiguous(), xyz_batch_cnt, sampled_points_batch_cnt
        ).long()
        return xyz[sampled_pt_idxs]

    class VoxelSetAbstraction(nn.Module):
        def __init__(self, model_cfg, num_rawpoint_features=None):
            super().__init__()
            self.model_cfg = model_cfg
            SA_cfg = self.model_cfg.SA_LAYER
            self.SA_layers = nn.ModuleList()
            self.SA_layer_names = []
            c_in = 0
            for src_name in self.model_cfg.FEATURES_SOURCE:
                if src_name in ["bev", "raw_points"]:
                    continue
                input_channels = SA_cfg[src_name]["INPUT_CHANNELS"]
                cur_layer, cur_num_c_out = pointnet2_stack_modules.build_local_aggregation_module(
                    input_channels=input_channels, config=EasyDict(SA_cfg[src_name])
                )
                self.SA_layers.append(cur_layer)
                self.SA_layer_names.append(src_name)
                c_in += cur_num_c_out
            if "raw_points" in self.model_cfg.FEATURES_SOURCE:
                self.SA_rawpoints, cur_num_c_out = pointnet2_stack_modules.build_local_aggregation_module(
                    input_channels=num_rawpoint_features - 3, config=EasyDict(SA_cfg["raw_points"])
                )
                c_in += cur_num_c_out
            self.vsa_point_feature_fusion = nn.Sequential(
                nn.Linear(c_in, self.model_cfg.NUM_OUTPUT_FEATURES, bias=False),
                nn.BatchNorm1d(self.model_cfg.NUM_OUTPUT_FEATURES),
                nn.ReLU(),
            )

        def get_sampled_points(self, batch_dict):
            batch_size = batch_dict["batch_size"]
            src_points = batch_dict["points"][:, 1:4]
            batch_indices = batch_dict["points"][:, 0].long()
            keypoints_list = []
            for bs_idx in range(batch_size):
                bs_mask = batch_indices == bs_idx
                sampled_points = src_points[bs_mask].unsqueeze(dim=0)
                if self.model_cfg.SAMPLE_METHOD == "FPS":
                    cur_pt_idxs = pointnet2_stack_utils.farthest_point_sample(
                        sampled_points[:, :, 0:3].contiguous(), self.model_cfg.NUM_KEYPOINTS
                    ).long()
                    if sampled_points.shape[1] < self.model_cfg.NUM_KEYPOINTS:
                        times = int(self.model_cfg.NUM_KEYPOINTS / sampled_points.shape[1]) + 1
                        non_empty = cur_pt_idxs[0, : sampled_points.shape[1]]
                        cur_pt_idxs[0] = non_empty.repeat(times)[: self.model_cfg.NUM_KEYPOINTS]
                    keypoints = sampled_points[0][cur_pt_idxs[0]].unsqueeze(dim=0)
                elif self.model_cfg.SAMPLE_METHOD == "SPC":
                    cur_keypoints = sector_fps(
                        points=sampled_points[0],
                        num_sampled_points=self.model_cfg.NUM_KEYPOINTS,
                        num_sectors=self.model_cfg.SPC_SAMPLING.NUM_SECTORS,
                    )
                    bs_idxs = cur_keypoints.new_ones(cur_keypoints.shape[0]) * bs_idx
                    keypoints = torch.cat((bs_idxs[:, None], cur_keypoints), dim=1)
                else:
                    raise NotImplementedError
                keypoints_list.append(keypoints)
            keypoints = torch.cat(keypoints_list, dim=0)
            if len(keypoints.shape) == 3:
                batch_idx = (
                    torch.arange(batch_size, device=keypoints.device)
                    .view(-1, 1)
                    .repeat(1, keypoints.shape[1])
                    .view(-1, 1)
                )
                keypoints = torch.cat((batch_idx.float(), keypoints.view(-1, 3)), dim=1)
            return keypoints

        @staticmethod
        def aggregate_keypoint_features_from_one_source(
            batch_size, aggregate_func, xyz, xyz_features, xyz_bs_idxs, new_xyz, new_xyz_batch_cnt
        ):
            xyz_batch_cnt = xyz.new_zeros(batch_size).int()
            for bs_idx in range(batch_size):
                xyz_batch_cnt[bs_idx] = (xyz_bs_idxs == bs_idx).sum()
            pooled_points, pooled_features = aggregate_func(
                xyz=xyz.contiguous(),
                xyz_batch_cnt=xyz_batch_cnt,
                new_xyz=new_xyz,
                new_xyz_batch_cnt=new_xyz_batch_cnt,
                features=xyz_features.contiguous(),
            )
            return pooled_features

        def forward(self, batch_dict):
            keypoints = self.get_sampled_points(batch_dict)
            point_features_list = []
            batch_size = batch_dict["batch_size"]
            new_xyz = keypoints[:, 1:4].contiguous()
            new_xyz_batch_cnt = new_xyz.new_zeros(batch_size).int()
            for k in range(batch_size):
                new_xyz_batch_cnt[k] = (keypoints[:, 0] == k).sum()
            if "raw_points" in self.model_cfg.FEATURES_SOURCE:
                raw_points = batch_dict["points"]
                pooled_features = self.aggregate_keypoint_features_from_one_source(
                    batch_size=batch_size,
                    aggregate_func=self.SA_rawpoints,
                    xyz=raw_points[:, 1:4],
                    xyz_features=raw_points[:, 4:].contiguous(),
                    xyz_bs_idxs=raw_points[:, 0],
                    new_xyz=new_xyz,
                    new_xyz_batch_cnt=new_xyz_batch_cnt,
                )
                point_features_list.append(pooled_features)
            for k, src_name in enumerate(self.SA_layer_names):
                cur_coords = batch_dict["voxel_centers"][src_name]  # (V, 4) [bs_idx, x, y, z]
                cur_features = batch_dict["voxel_features"][src_name].contiguous()
                pooled_features = self.aggregate_keypoint_features_from_one_source(
                    batch_size=batch_size,
                    aggregate_func=self.SA_layers[k],
                    xyz=cur_coords[:, 1:4].contiguous(),
                    xyz_features=cur_features,
                    xyz_bs_idxs=cur_coords[:, 0],
                    new_xyz=new_xyz,
                    new_xyz_batch_cnt=new_xyz_batch_cnt,
                )
                point_features_list.append(pooled_features)
            point_features = torch.cat(point_features_list, dim=-1)
            batch_dict["point_features_before_fusion"] = point_features.view(-1, point_features.shape[-1])
            batch_dict["point_features"] = self.vsa_point_feature_fusion(
                point_features.view(-1, point_features.shape[-1])
            )
            batch_dict["point_coords"] = keypoints
            return batch_dict

    return VoxelSetAbstraction
