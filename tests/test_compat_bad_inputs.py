"""Adversarial inputs to the peers' adapters (pointops.compat, pointops.nn): batch descriptions
that contradict themselves (decreasing offsets and counts, counts that do not add up, unsorted or
negative batch vectors, batch sizes that disagree), out-of-range scalars, indices below -1 or past
the rows, non-tensors and tensors of the wrong rank or dtype. Every one must raise an error that
names the caller's argument (ValueError, or TypeError for a non-tensor), never return an answer;
a peer that misbehaves on such input (torch_cluster does not check that a batch is sorted,
Pointcept reads feat[-5]) does not make the drop-in less strict. The few inputs that have an
answer (a NaN point, an index past an empty cloud) are checked for it at the end."""

import numpy as np
import pytest
import torch

from pointops import nn as pnn
from pointops.compat import mmcv
from pointops.compat import openpcdet_stack as st
from pointops.compat import pointcept as pc
from pointops.compat import pyg
from pointops.compat import pytorch3d as p3d

g = torch.Generator().manual_seed(0)
X = torch.rand(10, 3, generator=g)
F = torch.rand(10, 4, generator=g)
B = torch.rand(2, 10, 3, generator=g)
BF = torch.rand(2, 4, 10, generator=g)
nan = float("nan")
BN = B.clone()
BN[0, 2, 0] = nan
XN = X.clone()
XN[3, 1] = nan


def I32(*v):
    return torch.tensor(v, dtype=torch.int32)


def I64(*v):
    return torch.tensor(v, dtype=torch.int64)


C = []


def case(name, names, fn):
    C.append((name, names, fn))


# ---- Pointcept offsets ---------------------------------------------------------------
for fname, f in [
    ("knn_query", lambda o, no: pc.knn_query(3, X, o, X, no)),
    ("ball_query", lambda o, no: pc.ball_query(3, 0.5, 0.0, X, o, X, no)),
    ("random_ball_query", lambda o, no: pc.random_ball_query(3, 0.5, 0.0, X, o, X, no)),
    ("interpolation", lambda o, no: pc.interpolation(X, X, F, o, no)),
    ("query_and_group", lambda o, no: pc.query_and_group(3, X, X, F, None, o, no)),
    ("knn_query_and_group", lambda o, no: pc.knn_query_and_group(F, X, o, X, no, nsample=3)),
    ("ball_query_and_group", lambda o, no: pc.ball_query_and_group(F, X, o, X, no, max_radio=0.5, nsample=3)),
    ("farthest_point_sampling", lambda o, no: pc.farthest_point_sampling(X, o, I32(2, 4))),
]:
    case(f"pointcept.{fname} decreasing offset", ["offset"], lambda f=f: f(I32(6, 4, 10), I32(3, 6, 10)))
    case(f"pointcept.{fname} offset past rows", ["offset"], lambda f=f: f(I32(4, 12), I32(4, 10)))
    case(f"pointcept.{fname} offset short of rows", ["offset"], lambda f=f: f(I32(4, 8), I32(4, 10)))
    case(f"pointcept.{fname} negative offset", ["offset"], lambda f=f: f(I32(-2, 10), I32(4, 10)))
    case(f"pointcept.{fname} float offset", ["offset"], lambda f=f: f(torch.tensor([4.0, 10.0]), I32(4, 10)))
    case(f"pointcept.{fname} 2-D offset", ["offset"], lambda f=f: f(I32(4, 10)[None], I32(4, 10)))
    if fname != "farthest_point_sampling":
        case(f"pointcept.{fname} decreasing new_offset", ["new_offset"], lambda f=f: f(I32(4, 10), I32(6, 4, 10)))
        case(f"pointcept.{fname} new_offset other batch", ["new_offset", "offset"], lambda f=f: f(I32(4, 10), I32(10)))
case(
    "pointcept.farthest_point_sampling decreasing new_offset",
    ["new_offset"],
    lambda: pc.farthest_point_sampling(X, I32(4, 10), I32(3, 2)),
)
case(
    "pointcept.farthest_point_sampling new_offset batch",
    ["new_offset"],
    lambda: pc.farthest_point_sampling(X, I32(4, 10), I32(3)),
)
case("pointcept.knn_query negative nsample", ["nsample"], lambda: pc.knn_query(-1, X, I32(10)))
case("pointcept.knn_query float nsample", ["nsample"], lambda: pc.knn_query(2.5, X, I32(10)))
case("pointcept.ball_query negative nsample", ["nsample"], lambda: pc.ball_query(-1, 0.5, 0.0, X, I32(10)))
case("pointcept.ball_query radius nan", ["max_radius"], lambda: pc.ball_query(3, nan, 0.0, X, I32(10)))
case("pointcept.ball_query min>max", ["min_radius", "max_radius"], lambda: pc.ball_query(3, 0.1, 0.5, X, I32(10)))
case("pointcept.ball_query negative min", ["min_radius"], lambda: pc.ball_query(3, 0.5, -1.0, X, I32(10)))
case(
    "pointcept.random_ball_query min>max",
    ["min_radius", "max_radius"],
    lambda: pc.random_ball_query(3, 0.1, 0.5, X, I32(10)),
)
case("pointcept.grouping idx -5", ["idx"], lambda: pc.grouping(torch.full((4, 3), -5, dtype=torch.int32), F, X))
case("pointcept.grouping idx past", ["idx"], lambda: pc.grouping(torch.full((4, 3), 10, dtype=torch.int32), F, X))
case(
    "pointcept.grouping feat rows",
    ["feat", "xyz"],
    lambda: pc.grouping(torch.zeros((4, 3), dtype=torch.int32), F[:5], X, X[:4], True),
)
case("pointcept.grouping2 idx -5", ["idx"], lambda: pc.grouping2(F, torch.full((4, 3), -5, dtype=torch.int32)))
case("pointcept.grouping 1-D idx", ["idx"], lambda: pc.grouping(torch.zeros(4, dtype=torch.int32), F, X))
case(
    "pointcept.query_and_group idx -5",
    ["idx"],
    lambda: pc.query_and_group(3, X, X, F, torch.full((10, 3), -5, dtype=torch.int32), I32(10), I32(10)),
)
case(
    "pointcept.query_and_group negative dilation",
    ["dilation"],
    lambda: pc.query_and_group(3, X, X, F, None, I32(10), I32(10), dilation=-2),
)
case(
    "pointcept.query_and_group zero nsample",
    ["nsample"],
    lambda: pc.query_and_group(0, X, X, F, None, I32(10), I32(10)),
)
case("pointcept.interpolation k 0", ["k"], lambda: pc.interpolation(X, X, F, I32(10), I32(10), k=0))
case("pointcept.interpolation feat rows", ["feat"], lambda: pc.interpolation(X, X, F[:4], I32(10), I32(10)))
case("pointcept.knn_query_and_group no nsample", ["nsample"], lambda: pc.knn_query_and_group(F, X, I32(10)))
case("pointcept.knn_query_and_group no offset", ["offset"], lambda: pc.knn_query_and_group(F, X, None, nsample=3))
case(
    "pointcept.ball_query_and_group no radius", ["max_radio"], lambda: pc.ball_query_and_group(F, X, I32(10), nsample=3)
)
case("pointcept.offset2batch decreasing", ["offset"], lambda: pc.offset2batch(I32(6, 4, 10)))
case("pointcept.batch2offset negative", ["batch"], lambda: pc.batch2offset(I64(0, -1)))
case("pointcept.batch2offset unsorted", ["batch"], lambda: pc.batch2offset(I64(1, 0, 1)))
case("pointcept.batch2offset float", ["batch"], lambda: pc.batch2offset(torch.tensor([0.0, 1.0])))

# ---- OpenPCDet stack counts ------------------------------------------------------------
for fname, f in [
    ("ball_query", lambda c, nc: st.ball_query(0.5, 3, X, c, X, nc)),
    ("three_nn", lambda c, nc: st.three_nn(X, nc, X, c)),
    ("QueryAndGroup", lambda c, nc: st.QueryAndGroup(0.5, 3)(X, c, X, nc, F)),
    ("StackSAModuleMSG", lambda c, nc: st.StackSAModuleMSG(radii=[0.5], nsamples=[3], mlps=[[4, 8]])(X, c, X, nc, F)),
    ("StackPointnetFPModule", lambda c, nc: st.StackPointnetFPModule(mlp=[8, 8])(X, nc, X, c, F, F)),
    ("mmcv.ball_query stack", lambda c, nc: mmcv.ball_query(0.0, 0.5, 3, X, X, c, nc)),
    ("grouping_operation", lambda c, nc: st.grouping_operation(F, c, torch.zeros(10, 3, dtype=torch.int32), nc)),
    (
        "mmcv.grouping_operation stack",
        lambda c, nc: mmcv.grouping_operation(F, torch.zeros(10, 3, dtype=torch.int32), c, nc),
    ),
]:
    case(
        f"stack.{fname} negative count",
        ["batch_cnt", "xyz_batch_cnt", "known_batch_cnt", "features_batch_cnt"],
        lambda f=f: f(I32(-2, 12), I32(4, 6)),
    )
    case(f"stack.{fname} counts short", ["batch_cnt"], lambda f=f: f(I32(4, 4), I32(4, 6)))
    case(f"stack.{fname} counts long", ["batch_cnt"], lambda f=f: f(I32(4, 8), I32(4, 6)))
    case(f"stack.{fname} new counts long", ["batch_cnt"], lambda f=f: f(I32(4, 6), I32(4, 8)))
    case(f"stack.{fname} new counts negative", ["batch_cnt"], lambda f=f: f(I32(4, 6), I32(12, -2)))
    case(f"stack.{fname} count batch differ", ["batch_cnt"], lambda f=f: f(I32(4, 6), I32(10)))
    case(f"stack.{fname} float counts", ["batch_cnt"], lambda f=f: f(torch.tensor([4.0, 6.0]), I32(4, 6)))
case("stack.ball_query negative nsample", ["nsample"], lambda: st.ball_query(0.5, -3, X, I32(10), X, I32(10)))
case("stack.ball_query nan radius", ["radius"], lambda: st.ball_query(nan, 3, X, I32(10), X, I32(10)))
case("stack.stack_fps negative npoint", ["npoint"], lambda: st.stack_farthest_point_sample(X, I32(4, 6), -2))
case("stack.stack_fps negative list npoint", ["npoint"], lambda: st.stack_farthest_point_sample(X, I32(4, 6), [2, -1]))
case("stack.stack_fps npoint batch", ["npoint"], lambda: st.stack_farthest_point_sample(X, I32(4, 6), [2, 2, 2]))
case("stack.stack_fps float npoint", ["npoint"], lambda: st.stack_farthest_point_sample(X, I32(4, 6), 2.5))
case(
    "stack.grouping idx -5",
    ["idx"],
    lambda: st.grouping_operation(F, I32(10), torch.full((10, 3), -5, dtype=torch.int32), I32(10)),
)
case(
    "stack.three_interpolate idx -5",
    ["idx"],
    lambda: st.three_interpolate(F, torch.full((10, 3), -5, dtype=torch.int32), torch.rand(10, 3)),
)
case(
    "stack.three_interpolate weight shape",
    ["weight"],
    lambda: st.three_interpolate(F, torch.zeros((10, 3), dtype=torch.int32), torch.rand(10, 2)),
)
case(
    "stack.three_interpolate 3-D features",
    ["features"],
    lambda: st.three_interpolate(F[None], torch.zeros((10, 3), dtype=torch.int32), torch.rand(10, 3)),
)

# ---- OpenPCDet batch ---------------------------------------------------------------------
case(
    "nn.gather_operation batch",
    ["idx", "features"],
    lambda: pnn.gather_operation(BF, torch.zeros(3, 4, dtype=torch.int32)),
)
case(
    "nn.gather_operation batch 1",
    ["idx", "features"],
    lambda: pnn.gather_operation(BF, torch.zeros(1, 4, dtype=torch.int32)),
)
case("nn.gather_operation idx -5", ["idx"], lambda: pnn.gather_operation(BF, torch.full((2, 4), -5, dtype=torch.int32)))
case("nn.gather_operation idx -1", ["idx"], lambda: pnn.gather_operation(BF, torch.full((2, 4), -1, dtype=torch.int32)))
case(
    "nn.gather_operation idx past", ["idx"], lambda: pnn.gather_operation(BF, torch.full((2, 4), 10, dtype=torch.int32))
)
case("nn.gather_operation float idx", ["idx"], lambda: pnn.gather_operation(BF, torch.zeros(2, 4)))
case(
    "nn.grouping_operation batch",
    ["idx", "features"],
    lambda: pnn.grouping_operation(BF, torch.zeros(1, 4, 3, dtype=torch.int32)),
)
case(
    "nn.grouping_operation idx -5",
    ["idx"],
    lambda: pnn.grouping_operation(BF, torch.full((2, 4, 3), -5, dtype=torch.int32)),
)
case("nn.grouping_operation 2-D idx", ["idx"], lambda: pnn.grouping_operation(BF, torch.zeros(2, 4, dtype=torch.int32)))
case(
    "nn.three_interpolate idx -5",
    ["idx"],
    lambda: pnn.three_interpolate(BF, torch.full((2, 4, 3), -5, dtype=torch.int32), torch.rand(2, 4, 3)),
)
case(
    "nn.three_interpolate batch",
    ["idx", "features"],
    lambda: pnn.three_interpolate(BF, torch.zeros((1, 4, 3), dtype=torch.int32), torch.rand(1, 4, 3)),
)
case(
    "nn.three_interpolate weight",
    ["weight"],
    lambda: pnn.three_interpolate(BF, torch.zeros((2, 4, 3), dtype=torch.int32), torch.rand(2, 4, 2)),
)
case("nn.three_nn batch", ["known", "unknown"], lambda: pnn.three_nn(B, B[:1]))
case("nn.three_nn 2-D", ["unknown"], lambda: pnn.three_nn(B[0], B))
case("nn.furthest_point_sample float npoint", ["npoint"], lambda: pnn.furthest_point_sample(B, 2.5))
case("nn.furthest_point_sample 2-D", ["xyz"], lambda: pnn.furthest_point_sample(B[0], 2))
case("nn.ball_query batch", ["new_xyz", "xyz"], lambda: pnn.ball_query(0.2, 3, B, B[:1]))
case("nn.ball_query float nsample", ["nsample"], lambda: pnn.ball_query(0.2, 2.5, B, B))
case(
    "nn.PointnetSAModuleMSG features batch",
    ["features"],
    lambda: pnn.PointnetSAModuleMSG(npoint=4, radii=[0.5], nsamples=[3], mlps=[[4, 8]])(B, BF[:1]),
)
case(
    "nn.PointnetSAModuleMSG npoint negative",
    ["npoint"],
    lambda: pnn.PointnetSAModuleMSG(npoint=-4, radii=[0.5], nsamples=[3], mlps=[[4, 8]])(B, BF),
)
case(
    "nn.PointnetSAModuleMSG lists differ",
    ["radii", "nsamples", "mlps"],
    lambda: pnn.PointnetSAModuleMSG(npoint=4, radii=[0.5, 1.0], nsamples=[3], mlps=[[4, 8]]),
)
case(
    "nn.PointnetSAModuleMSG pool",
    ["pool_method"],
    lambda: pnn.PointnetSAModuleMSG(npoint=4, radii=[0.5], nsamples=[3], mlps=[[4, 8]], pool_method="sum")(B, BF),
)
case("nn.QueryAndGroup no new_xyz", ["new_xyz"], lambda: pnn.QueryAndGroup(0.5, 3)(B, None))
case(
    "nn.QueryAndGroup no features no xyz",
    ["use_xyz", "features"],
    lambda: pnn.QueryAndGroup(0.5, 3, use_xyz=False)(B, B),
)

# ---- mmcv ----------------------------------------------------------------------------------
case("mmcv.ball_query min>max", ["min_radius", "max_radius"], lambda: mmcv.ball_query(0.5, 0.1, 3, B, B))
case("mmcv.ball_query negative sample_num", ["sample_num"], lambda: mmcv.ball_query(0.0, 0.5, -3, B, B))
case(
    "mmcv.ball_query one count only",
    ["center_xyz_batch_cnt", "xyz_batch_cnt"],
    lambda: mmcv.ball_query(0.0, 0.5, 3, X, X, I32(10), None),
)
case("mmcv.knn k 0", ["k"], lambda: mmcv.knn(0, B, B))
case("mmcv.knn k negative", ["k"], lambda: mmcv.knn(-2, B, B))
case("mmcv.knn transposed wrong", ["xyz", "transposed"], lambda: mmcv.knn(2, B, B, transposed=True))
case(
    "mmcv.fps_with_dist not square",
    ["points_dist"],
    lambda: mmcv.furthest_point_sample_with_dist(torch.rand(2, 10, 8), 3),
)
case(
    "mmcv.fps_with_dist negative",
    ["num_points"],
    lambda: mmcv.furthest_point_sample_with_dist(torch.rand(2, 10, 10), -3),
)
case(
    "mmcv.fps_with_dist nan",
    ["points_dist"],
    lambda: mmcv.furthest_point_sample_with_dist(torch.full((2, 10, 10), nan), 3),
)
case(
    "mmcv.gather_points idx -5",
    ["indices", "idx"],
    lambda: mmcv.gather_points(BF, torch.full((2, 4), -5, dtype=torch.int32)),
)
case(
    "mmcv.grouping batch idx -5",
    ["indices", "idx"],
    lambda: mmcv.grouping_operation(BF, torch.full((2, 4, 3), -5, dtype=torch.int32)),
)
case(
    "mmcv.voxelization zero size",
    ["voxel_size"],
    lambda: mmcv.voxelization(torch.rand(10, 4), [0.0, 0.1, 0.1], [0, 0, 0, 1, 1, 1]),
)
case(
    "mmcv.voxelization negative size",
    ["voxel_size"],
    lambda: mmcv.voxelization(torch.rand(10, 4), [-0.1, 0.1, 0.1], [0, 0, 0, 1, 1, 1]),
)
case(
    "mmcv.voxelization subnormal size",
    ["voxel_size"],
    lambda: mmcv.voxelization(torch.rand(10, 4), [1e-45, 0.1, 0.1], [0, 0, 0, 1, 1, 1]),
)
case(
    "mmcv.voxelization range inverted",
    ["coors_range"],
    lambda: mmcv.voxelization(torch.rand(10, 4), [0.1, 0.1, 0.1], [1, 0, 0, 0, 1, 1]),
)
case(
    "mmcv.voxelization range len",
    ["coors_range"],
    lambda: mmcv.voxelization(torch.rand(10, 4), [0.1, 0.1, 0.1], [0, 0, 0, 1, 1]),
)
case(
    "mmcv.voxelization negative max_points",
    ["max_points"],
    lambda: mmcv.voxelization(torch.rand(10, 4), [0.1, 0.1, 0.1], [0, 0, 0, 1, 1, 1], -3, 10),
)
case(
    "mmcv.voxelization 3-D points",
    ["points"],
    lambda: mmcv.voxelization(torch.rand(1, 10, 4), [0.1, 0.1, 0.1], [0, 0, 0, 1, 1, 1]),
)
case(
    "mmcv.Voxelization zero size",
    ["voxel_size"],
    lambda: mmcv.Voxelization([0.0, 0.1, 0.1], [0, 0, 0, 1, 1, 1], 3)(torch.rand(10, 4)),
)
case("mmcv.QueryAndGroup negative sample_num", ["sample_num"], lambda: mmcv.QueryAndGroup(0.5, -3)(B, B))

# ---- PyG ------------------------------------------------------------------------------------
BV = I64(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
UNS = I64(0, 1, 0, 1, 0, 1, 0, 1, 0, 1)
for fname, f in [
    ("fps", lambda b, bs: pyg.fps(X, b, 0.5, False, bs)),
    ("knn", lambda b, bs: pyg.knn(X, X, 2, b, b, batch_size=bs)),
    ("knn_graph", lambda b, bs: pyg.knn_graph(X, 2, b, batch_size=bs)),
    ("radius", lambda b, bs: pyg.radius(X, X, 0.5, b, b, batch_size=bs)),
    ("radius_graph", lambda b, bs: pyg.radius_graph(X, 0.5, b, batch_size=bs)),
    ("nearest", lambda b, bs: pyg.nearest(X, X, b, b)),
    ("knn 5-D", lambda b, bs: pyg.knn(torch.rand(10, 5), torch.rand(10, 5), 2, b, b, batch_size=bs)),
    ("radius 5-D", lambda b, bs: pyg.radius(torch.rand(10, 5), torch.rand(10, 5), 0.5, b, b, batch_size=bs)),
]:
    case(f"pyg.{fname} unsorted batch", ["batch"], lambda f=f: f(UNS, None))
    case(f"pyg.{fname} negative batch", ["batch"], lambda f=f: f(I64(-1, 0, 0, 0, 1, 1, 1, 1, 1, 1), None))
    case(f"pyg.{fname} batch len", ["batch"], lambda f=f: f(BV[:8], None))
    case(f"pyg.{fname} float batch", ["batch"], lambda f=f: f(BV.float(), None))
    if fname != "nearest":
        case(f"pyg.{fname} batch_size too small", ["batch_size"], lambda f=f: f(BV, 1))
        case(f"pyg.{fname} batch_size 0", ["batch_size"], lambda f=f: f(BV, 0))
        case(f"pyg.{fname} batch_size negative", ["batch_size"], lambda f=f: f(BV, -2))
case("pyg.fps ratio > 1", ["ratio"], lambda: pyg.fps(X, None, 1.5))
case("pyg.fps ratio 0", ["ratio"], lambda: pyg.fps(X, None, 0.0))
case("pyg.fps ratio negative", ["ratio"], lambda: pyg.fps(X, None, -0.5))
case("pyg.fps ratio nan", ["ratio"], lambda: pyg.fps(X, None, nan))
case("pyg.fps ratio tensor > 1", ["ratio"], lambda: pyg.fps(X, None, torch.tensor(1.5)))
case("pyg.fps ratio tensor per cloud wrong", ["ratio"], lambda: pyg.fps(X, BV, torch.tensor([0.5, 0.5, 0.5])))
case("pyg.fps ptr decreasing", ["ptr"], lambda: pyg.fps(X, None, 0.5, ptr=[0, 6, 4, 10]))
case("pyg.fps ptr past rows", ["ptr"], lambda: pyg.fps(X, None, 0.5, ptr=[0, 6, 12]))
case("pyg.fps ptr start", ["ptr"], lambda: pyg.fps(X, None, 0.5, ptr=[2, 6, 10]))
case("pyg.fps ptr tensor decreasing", ["ptr"], lambda: pyg.fps(X, None, 0.5, ptr=I64(0, 6, 4, 10)))
case("pyg.knn k negative", ["k"], lambda: pyg.knn(X, X, -1))
case("pyg.knn dims differ", ["x", "y"], lambda: pyg.knn(X, torch.rand(4, 2), 2))
case("pyg.knn one batch only", ["batch_x", "batch_y"], lambda: pyg.knn(X, X, 2, BV, None))
case("pyg.radius negative r", ["r"], lambda: pyg.radius(X, X, -0.5))
case("pyg.radius nan r", ["r"], lambda: pyg.radius(X, X, nan))
case("pyg.radius 5-D negative r", ["r"], lambda: pyg.radius(torch.rand(10, 5), torch.rand(10, 5), -0.5))
case("pyg.radius negative max_num", ["max_num_neighbors"], lambda: pyg.radius(X, X, 0.5, max_num_neighbors=-1))
case("pyg.radius_graph flow", ["flow"], lambda: pyg.radius_graph(X, 0.5, flow="up"))
case("pyg.knn_graph flow", ["flow"], lambda: pyg.knn_graph(X, 2, flow="up"))
case("pyg.knn_graph negative k", ["k"], lambda: pyg.knn_graph(X, -3))
case("pyg.nearest dims differ", ["x", "y"], lambda: pyg.nearest(X, torch.rand(4, 2)))
case("pyg.nearest empty y", ["y"], lambda: pyg.nearest(X, X[:0]))
case("pyg.grid_cluster zero size", ["size"], lambda: pyg.grid_cluster(X, torch.tensor([0.0, 0.1, 0.1])))
case("pyg.grid_cluster negative size", ["size"], lambda: pyg.grid_cluster(X, torch.tensor([-0.1, 0.1, 0.1])))
case("pyg.grid_cluster nan size", ["size"], lambda: pyg.grid_cluster(X, torch.tensor([nan, 0.1, 0.1])))
case("pyg.grid_cluster tiny size", ["size"], lambda: pyg.grid_cluster(X, torch.tensor([1e-30, 1e-30, 1e-30])))
case("pyg.grid_cluster size len", ["size"], lambda: pyg.grid_cluster(X, torch.tensor([0.1, 0.1])))
case(
    "pyg.grid_cluster end < start",
    ["end", "start"],
    lambda: pyg.grid_cluster(X, torch.tensor([0.1, 0.1, 0.1]), torch.zeros(3), -torch.ones(3)),
)
case(
    "pyg.grid_cluster points before start",
    ["start", "pos"],
    lambda: pyg.grid_cluster(X, torch.tensor([0.1, 0.1, 0.1]), torch.ones(3)),
)
case("pyg.grid_cluster nan pos", ["pos"], lambda: pyg.grid_cluster(XN, torch.tensor([0.1, 0.1, 0.1])))

# ---- pytorch3d ---------------------------------------------------------------------------------
case("p3d.knn_points negative K", ["K"], lambda: p3d.knn_points(B, B, K=-1))
case("p3d.knn_points lengths > P", ["lengths2"], lambda: p3d.knn_points(B, B, lengths2=I64(12, 3)))
case("p3d.knn_points negative lengths", ["lengths1"], lambda: p3d.knn_points(B, B, lengths1=I64(-1, 3)))
case("p3d.knn_points lengths batch", ["lengths2"], lambda: p3d.knn_points(B, B, lengths2=I64(3)))
case("p3d.knn_points 2-D", ["p1"], lambda: p3d.knn_points(B[0], B[0]))
case("p3d.knn_gather idx -5", ["idx"], lambda: p3d.knn_gather(B, torch.full((2, 4, 2), -5)))
case("p3d.knn_gather idx past", ["idx"], lambda: p3d.knn_gather(B, torch.full((2, 4, 2), 10)))
case(
    "p3d.knn_gather lengths batch",
    ["lengths"],
    lambda: p3d.knn_gather(B, torch.zeros((2, 4, 2), dtype=torch.int64), I64(3)),
)
case("p3d.sfp negative K", ["K"], lambda: p3d.sample_farthest_points(B, K=-1))
case("p3d.sfp negative K list", ["K"], lambda: p3d.sample_farthest_points(B, K=[2, -1]))
case("p3d.sfp negative lengths", ["lengths"], lambda: p3d.sample_farthest_points(B, lengths=I64(-1, 3), K=2))
case("p3d.sfp float K", ["K"], lambda: p3d.sample_farthest_points(B, K=2.5))
case("p3d.chamfer negative lengths", ["x_lengths"], lambda: p3d.chamfer_distance(B, B, x_lengths=I64(-1, 3)))
case("p3d.chamfer weights nan", ["weights"], lambda: p3d.chamfer_distance(B, B, weights=torch.tensor([nan, 1.0])))
case(
    "p3d.chamfer normals shape",
    ["x_normals"],
    lambda: p3d.chamfer_distance(B, B, x_normals=torch.rand(2, 10, 2), y_normals=torch.rand(2, 10, 3)),
)
case(
    "p3d.chamfer normals rows",
    ["x_normals"],
    lambda: p3d.chamfer_distance(B, B, x_normals=torch.rand(2, 4, 3), y_normals=torch.rand(2, 10, 3)),
)


@pytest.mark.parametrize("name, names, call", C, ids=[c[0] for c in C])
def test_bad_input_is_refused_by_name(name, names, call):
    with pytest.raises((ValueError, TypeError)) as error:
        call()
    message = str(error.value)
    assert any(n in message for n in names), message


# scalars of the wrong type or range: (call, the argument's name in the message)
SCALARS = [
    (lambda: pc.knn_query("3", X, I32(10)), "nsample must be an int >= 0, got '3'"),
    (lambda: st.ball_query(float("inf"), 3, X, I32(10), X, I32(10)), "radius must be finite"),
    (lambda: pyg.radius(X, X, "0.5"), "r must be a number, got '0.5'"),
    (lambda: pyg.fps(X, None, True), "ratio must be a number, got True"),
    (lambda: mmcv.knn(True, B, B), "k must be an int >= 1, got True"),
    (lambda: p3d.knn_points(B, B, K=2.0), "K must be an int >= 0, got 2.0"),
    (lambda: p3d.chamfer_distance(B, B, norm=3), "norm must be 1 or 2, got 3"),
    (
        lambda: pnn.PointnetSAModuleMSG(npoint=4, radii=[-0.5], nsamples=[3], mlps=[[4, 8]]),
        r"radii\[0\] must be finite",
    ),
    (
        lambda: pnn.PointnetSAModuleMSG(npoint=4, radii=[0.5], nsamples=[2.5], mlps=[[4, 8]]),
        r"nsamples\[0\] must be an int",
    ),
    (lambda: st.StackSAModuleMSG(radii=[0.5], nsamples=[3], mlps=[[4, 0]]), r"mlps\[0\]\[1\] must be an int >= 1"),
    (lambda: st.StackSAModuleMSG(radii=[0.5, 1.0], nsamples=[3], mlps=[[4, 8]]), "radii, nsamples and mlps must have"),
    (lambda: st.QueryAndGroup(float("nan"), 3), "radius must be finite"),
    (lambda: mmcv.QueryAndGroup(0.5, 3, min_radius=-1.0), "min_radius must be finite and >= 0"),
    (lambda: mmcv.Voxelization([0.1, 0.1], [0, 0, 0, 1, 1, 1], 3)(torch.rand(10, 4)), "voxel_size must have 3 values"),
]


@pytest.mark.parametrize("call, match", SCALARS)
def test_scalars_are_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_stack_fps_counts_are_checked():
    with pytest.raises(ValueError, match="^xyz_batch_cnt must be per-cloud counts >= 0 adding up to the 10 rows"):
        st.stack_farthest_point_sample(X, I32(4, 4), 3)
    with pytest.raises(ValueError, match="^xyz_batch_cnt must be per-cloud counts"):
        st.stack_farthest_point_sample(X, I32(-2, 12), [1, 1])


# ---- every tensor argument of every entry point: the wrong rank, dtype or type ------------------------

E = {}


def entry(name, fn, **kw):
    E[name] = (fn, kw)


POINTCEPT = dict(xyz=X, offset=I32(4, 10), new_xyz=X[:6], new_offset=I32(3, 6))
STACK = dict(xyz=X, xyz_batch_cnt=I32(4, 6), new_xyz=X[:6], new_xyz_batch_cnt=I32(3, 3))


entry(
    "pc.knn_query",
    lambda **k: pc.knn_query(3, k["xyz"], k["offset"], k["new_xyz"], k["new_offset"]),
    **POINTCEPT,
)
entry(
    "pc.ball_query",
    lambda **k: pc.ball_query(3, 0.5, 0.0, k["xyz"], k["offset"], k["new_xyz"], k["new_offset"]),
    **POINTCEPT,
)
entry(
    "pc.random_ball_query",
    lambda **k: pc.random_ball_query(3, 0.5, 0.0, k["xyz"], k["offset"], k["new_xyz"], k["new_offset"]),
    **POINTCEPT,
)
entry(
    "pc.fps",
    lambda **k: pc.farthest_point_sampling(k["xyz"], k["offset"], k["new_offset"]),
    xyz=X,
    offset=I32(4, 10),
    new_offset=I32(2, 4),
)
entry(
    "pc.grouping",
    lambda **k: pc.grouping(k["idx"], k["feat"], k["xyz"], k["new_xyz"], True),
    idx=torch.zeros(6, 3, dtype=torch.int32),
    feat=F,
    xyz=X,
    new_xyz=X[:6],
)
entry("pc.grouping2", lambda **k: pc.grouping2(k["input"], k["idx"]), input=F, idx=torch.zeros(6, 3, dtype=torch.int32))
entry(
    "pc.interpolation",
    lambda **k: pc.interpolation(k["xyz"], k["new_xyz"], k["feat"], k["offset"], k["new_offset"]),
    xyz=X,
    new_xyz=X[:6],
    feat=F,
    offset=I32(4, 10),
    new_offset=I32(3, 6),
)
entry(
    "pc.query_and_group",
    lambda **k: pc.query_and_group(3, k["xyz"], k["new_xyz"], k["feat"], None, k["offset"], k["new_offset"]),
    xyz=X,
    new_xyz=X[:6],
    feat=F,
    offset=I32(4, 10),
    new_offset=I32(3, 6),
)
entry("pc.offset2batch", lambda **k: pc.offset2batch(k["offset"]), offset=I32(4, 10))
entry("pc.batch2offset", lambda **k: pc.batch2offset(k["batch"]), batch=torch.tensor([0, 0, 1]))
entry(
    "st.ball_query",
    lambda **k: st.ball_query(0.5, 3, k["xyz"], k["xyz_batch_cnt"], k["new_xyz"], k["new_xyz_batch_cnt"]),
    **STACK,
)
entry(
    "st.grouping_operation",
    lambda **k: st.grouping_operation(k["features"], k["features_batch_cnt"], k["idx"], k["idx_batch_cnt"]),
    features=F,
    features_batch_cnt=I32(4, 6),
    idx=torch.zeros(6, 3, dtype=torch.int32),
    idx_batch_cnt=I32(3, 3),
)
entry(
    "st.three_nn",
    lambda **k: st.three_nn(k["unknown"], k["unknown_batch_cnt"], k["known"], k["known_batch_cnt"]),
    unknown=X,
    unknown_batch_cnt=I32(4, 6),
    known=X[:6],
    known_batch_cnt=I32(3, 3),
)
entry(
    "st.three_interpolate",
    lambda **k: st.three_interpolate(k["features"], k["idx"], k["weight"]),
    features=F,
    idx=torch.zeros(6, 3, dtype=torch.int32),
    weight=torch.rand(6, 3),
)
entry(
    "st.stack_fps",
    lambda **k: st.stack_farthest_point_sample(k["xyz"], k["xyz_batch_cnt"], 3),
    xyz=X,
    xyz_batch_cnt=I32(4, 6),
)
entry(
    "st.StackSAModuleMSG",
    lambda **k: st.StackSAModuleMSG(radii=[0.5], nsamples=[3], mlps=[[4, 8]])(
        k["xyz"], k["xyz_batch_cnt"], k["new_xyz"], k["new_xyz_batch_cnt"], k["features"]
    ),
    xyz=X,
    xyz_batch_cnt=I32(4, 6),
    new_xyz=X[:6],
    new_xyz_batch_cnt=I32(3, 3),
    features=F,
)
entry(
    "st.StackPointnetFPModule",
    lambda **k: st.StackPointnetFPModule(mlp=[8, 8])(
        k["unknown"], k["unknown_batch_cnt"], k["known"], k["known_batch_cnt"], k["unknown_feats"], k["known_feats"]
    ),
    unknown=X,
    unknown_batch_cnt=I32(4, 6),
    known=X[:6],
    known_batch_cnt=I32(3, 3),
    unknown_feats=F,
    known_feats=F[:6],
)
entry("nn.fps", lambda **k: pnn.furthest_point_sample(k["xyz"], 3), xyz=B)
entry(
    "nn.gather_operation",
    lambda **k: pnn.gather_operation(k["features"], k["idx"]),
    features=BF,
    idx=torch.zeros(2, 3, dtype=torch.int32),
)
entry("nn.three_nn", lambda **k: pnn.three_nn(k["unknown"], k["known"]), unknown=B, known=B[:, :5])
entry(
    "nn.three_interpolate",
    lambda **k: pnn.three_interpolate(k["features"], k["idx"], k["weight"]),
    features=BF,
    idx=torch.zeros(2, 6, 3, dtype=torch.int32),
    weight=torch.rand(2, 6, 3),
)
entry(
    "nn.grouping_operation",
    lambda **k: pnn.grouping_operation(k["features"], k["idx"]),
    features=BF,
    idx=torch.zeros(2, 6, 3, dtype=torch.int32),
)
entry("nn.ball_query", lambda **k: pnn.ball_query(0.5, 3, k["xyz"], k["new_xyz"]), xyz=B, new_xyz=B[:, :5])
entry(
    "nn.PointnetSAModuleMSG",
    lambda **k: pnn.PointnetSAModuleMSG(npoint=4, radii=[0.5], nsamples=[3], mlps=[[4, 8]])(k["xyz"], k["features"]),
    xyz=B,
    features=BF,
)
entry(
    "nn.PointnetFPModule",
    lambda **k: pnn.PointnetFPModule(mlp=[8, 8])(k["unknown"], k["known"], k["unknow_feats"], k["known_feats"]),
    unknown=B,
    known=B[:, :5],
    unknow_feats=BF,
    known_feats=BF[:, :, :5],
)
entry(
    "mmcv.ball_query", lambda **k: mmcv.ball_query(0.0, 0.5, 3, k["xyz"], k["center_xyz"]), xyz=B, center_xyz=B[:, :5]
)
entry(
    "mmcv.ball_query_stack",
    lambda **k: mmcv.ball_query(0.0, 0.5, 3, k["xyz"], k["center_xyz"], k["xyz_batch_cnt"], k["center_xyz_batch_cnt"]),
    xyz=X,
    center_xyz=X[:6],
    xyz_batch_cnt=I32(4, 6),
    center_xyz_batch_cnt=I32(3, 3),
)
entry("mmcv.knn", lambda **k: mmcv.knn(3, k["xyz"], k["center_xyz"]), xyz=B, center_xyz=B[:, :5])
entry("mmcv.fps", lambda **k: mmcv.furthest_point_sample(k["points_xyz"], 3), points_xyz=B)
entry(
    "mmcv.fps_dist",
    lambda **k: mmcv.furthest_point_sample_with_dist(k["points_dist"], 3),
    points_dist=torch.rand(2, 10, 10),
)
entry("mmcv.three_nn", lambda **k: mmcv.three_nn(k["target"], k["source"]), target=B, source=B[:, :5])
entry(
    "mmcv.three_interpolate",
    lambda **k: mmcv.three_interpolate(k["features"], k["indices"], k["weight"]),
    features=BF,
    indices=torch.zeros(2, 6, 3, dtype=torch.int32),
    weight=torch.rand(2, 6, 3),
)
entry(
    "mmcv.gather_points",
    lambda **k: mmcv.gather_points(k["features"], k["indices"]),
    features=BF,
    indices=torch.zeros(2, 3, dtype=torch.int32),
)
entry(
    "mmcv.grouping_operation",
    lambda **k: mmcv.grouping_operation(k["features"], k["indices"]),
    features=BF,
    indices=torch.zeros(2, 6, 3, dtype=torch.int32),
)
entry(
    "mmcv.grouping_stack",
    lambda **k: mmcv.grouping_operation(k["features"], k["indices"], k["features_batch_cnt"], k["indices_batch_cnt"]),
    features=F,
    indices=torch.zeros(6, 3, dtype=torch.int32),
    features_batch_cnt=I32(4, 6),
    indices_batch_cnt=I32(3, 3),
)
entry(
    "mmcv.QueryAndGroup",
    lambda **k: mmcv.QueryAndGroup(0.5, 3)(k["points_xyz"], k["center_xyz"], k["features"]),
    points_xyz=B,
    center_xyz=B[:, :5],
    features=BF,
)
entry(
    "mmcv.voxelization",
    lambda **k: mmcv.voxelization(k["points"], [0.1, 0.1, 0.1], [0, 0, 0, 1, 1, 1]),
    points=torch.rand(10, 4),
)
entry("pyg.fps", lambda **k: pyg.fps(k["src"], k["batch"], 0.5), src=X, batch=torch.tensor([0] * 4 + [1] * 6))
entry(
    "pyg.knn",
    lambda **k: pyg.knn(k["x"], k["y"], 2, k["batch_x"], k["batch_y"]),
    x=X,
    y=X[:6],
    batch_x=torch.tensor([0] * 4 + [1] * 6),
    batch_y=torch.tensor([0] * 3 + [1] * 3),
)
entry("pyg.knn_graph", lambda **k: pyg.knn_graph(k["x"], 2, k["batch"]), x=X, batch=torch.tensor([0] * 4 + [1] * 6))
entry(
    "pyg.radius",
    lambda **k: pyg.radius(k["x"], k["y"], 0.5, k["batch_x"], k["batch_y"]),
    x=X,
    y=X[:6],
    batch_x=torch.tensor([0] * 4 + [1] * 6),
    batch_y=torch.tensor([0] * 3 + [1] * 3),
)
entry(
    "pyg.radius_graph",
    lambda **k: pyg.radius_graph(k["x"], 0.5, k["batch"]),
    x=X,
    batch=torch.tensor([0] * 4 + [1] * 6),
)
entry(
    "pyg.nearest",
    lambda **k: pyg.nearest(k["x"], k["y"], k["batch_x"], k["batch_y"]),
    x=X,
    y=X[:6],
    batch_x=torch.tensor([0] * 4 + [1] * 6),
    batch_y=torch.tensor([0] * 3 + [1] * 3),
)
entry("pyg.grid_cluster", lambda **k: pyg.grid_cluster(k["pos"], k["size"]), pos=X, size=torch.tensor([0.1, 0.1, 0.1]))
entry(
    "p3d.knn_points",
    lambda **k: p3d.knn_points(k["p1"], k["p2"], k["lengths1"], k["lengths2"], K=2),
    p1=B,
    p2=B[:, :5],
    lengths1=torch.tensor([10, 4]),
    lengths2=torch.tensor([5, 3]),
)
entry(
    "p3d.knn_gather",
    lambda **k: p3d.knn_gather(k["x"], k["idx"], k["lengths"]),
    x=B,
    idx=torch.zeros(2, 4, 2, dtype=torch.int64),
    lengths=torch.tensor([10, 4]),
)
entry(
    "p3d.sfp",
    lambda **k: p3d.sample_farthest_points(k["points"], k["lengths"], K=3),
    points=B,
    lengths=torch.tensor([10, 4]),
)
entry(
    "p3d.chamfer",
    lambda **k: p3d.chamfer_distance(k["x"], k["y"], k["x_lengths"], k["y_lengths"]),
    x=B,
    y=B[:, :5],
    x_lengths=torch.tensor([10, 4]),
    y_lengths=torch.tensor([5, 3]),
)


def _mutations(t):
    yield "rank+1", t[None]
    if t.dim() > 0:
        yield "rank-1", t[0]
    yield ("int" if t.is_floating_point() else "float"), (t.to(torch.int64) if t.is_floating_point() else t.float())
    yield "bool", t.bool()
    yield "numpy", t.numpy()
    yield "list", t.tolist()


# what has an answer: integer coordinates are torch_cluster's (converted to float64), any tensor
# gathers (pytorch3d's knn_gather), a (3,) viewpoint-like slice
ANSWERS = {
    ("pyg.fps", "src", "int"),
    ("pyg.knn", "x", "int"),
    ("pyg.knn", "y", "int"),
    ("pyg.knn_graph", "x", "int"),
    ("pyg.radius", "x", "int"),
    ("pyg.radius", "y", "int"),
    ("pyg.radius_graph", "x", "int"),
    ("pyg.nearest", "x", "int"),
    ("pyg.nearest", "y", "int"),
    ("pyg.grid_cluster", "pos", "int"),
    ("p3d.knn_gather", "x", "int"),
    ("p3d.knn_gather", "x", "bool"),
    ("p3d.sfp", "points", "int"),
    ("p3d.sfp", "points", "bool"),
}


@pytest.mark.parametrize("name", sorted(E))
def test_every_tensor_argument_is_named(name):
    fn, kw = E[name]
    fn(**kw)  # the call itself is good
    for arg, t in kw.items():
        for how, bad in _mutations(t):
            args = dict(kw)
            args[arg] = bad
            if (name, arg, how) in ANSWERS:
                fn(**args)
                continue
            with pytest.raises((ValueError, TypeError, RuntimeError)) as error:
                fn(**args)
            assert arg in str(error.value), (name, arg, how, str(error.value))


# ---- what has an answer ------------------------------------------------------------------------------


def test_nan_in_is_nan_out():
    """A NaN point is no one's neighbour; the chamfer distance of its cloud is NaN (pytorch3d
    computes NaN too), and knn_points' distances of a NaN query are NaN, not padding's 0."""
    loss, _ = p3d.chamfer_distance(BN, B, batch_reduction=None)
    assert torch.isnan(loss[0]) and torch.isfinite(loss[1])
    loss, _ = p3d.chamfer_distance(B, BN, batch_reduction=None, single_directional=True)
    assert torch.isnan(loss[0]) and torch.isfinite(loss[1])
    out = p3d.knn_points(BN, B, K=2)
    assert torch.isnan(out.dists[0, 2]).all() and torch.isfinite(out.dists[0, 3]).all()


def test_an_index_past_its_cloud_adds_nothing():
    """three_interpolate's index past the rows (three_nn's padding of an empty cloud) adds
    nothing; OpenPCDet's ball_query gives index 0 in an empty cloud, which groups zeros."""
    idx = torch.full((10, 3), 10, dtype=torch.int32)
    assert (st.three_interpolate(F, idx, torch.rand(10, 3)) == 0).all()
    assert (pnn.three_interpolate(BF, idx[None].expand(2, -1, -1), torch.rand(2, 10, 3)) == 0).all()
    out = st.grouping_operation(F, I32(10, 0), torch.zeros(2, 3, dtype=torch.int32), I32(1, 1))
    assert (out[1] == 0).all() and torch.equal(out[0], F[0][:, None].expand(-1, 3))


def test_empty_answers_are_answers():
    assert p3d.knn_points(B, B, K=0).idx.shape == (2, 10, 0)
    assert pyg.knn(X, X, 0).shape == (2, 0)
    assert mmcv.voxelization(torch.rand(10, 4), [0.1, 0.1, 0.1], [0, 0, 0, 1, 1, 1], 3, 0)[0].shape[0] == 0


def test_a_tensor_of_samples_per_cloud_is_read_once_and_checked():
    assert st.stack_farthest_point_sample(X, I32(4, 6), torch.tensor([2, 3])).shape == (5,)
    with pytest.raises(ValueError, match="npoint must have one count per cloud"):
        st.stack_farthest_point_sample(X, I32(4, 6), torch.tensor([2, 3, 1]))
    with pytest.raises(ValueError, match=r"npoint\[1\] must be an int >= 0, got -1"):
        st.stack_farthest_point_sample(X, I32(4, 6), torch.tensor([2, -1]))
    assert np  # the sweep above passes NumPy arrays where tensors go


# ---- CUDA: where a check reads its values ---------------------------------------------------------------

# Each script breaks one check that reads nothing back on CUDA: the call makes no host read (the
# script turns torch's sync debug mode to "error" around it), and the device-side assert, whose
# message names the argument, fails the process: at the call itself when a later launch in it
# finds the assert already fired, else at the next synchronisation.
I32C = "dtype=torch.int32, device='cuda'"
DEVICE_ASSERTS = {  # argument: (the inputs, made before the sync check; the call)
    "offset": (
        f"a = torch.tensor([6, 4, 10], {I32C}); b = torch.tensor([3, 6, 10], {I32C})",
        "pointcept.knn_query(2, x, a, x, b)",
    ),
    "xyz_batch_cnt": (
        f"a = torch.tensor([-2, 12], {I32C}); b = torch.tensor([4, 6], {I32C})",
        "stack.ball_query(0.5, 2, x, a, x, b)",
    ),
    "idx": (
        f"a = torch.rand(2, 4, 10, device='cuda'); b = torch.full((2, 3), -5, {I32C})",
        "nn.gather_operation(a, b)",
    ),
    "lengths2": ("a = torch.tensor([12], device='cuda')", "pytorch3d.knn_points(x[None], x[None], lengths2=a)"),
    "voxel_size": ("a = x[None] * 1e30", "pointops.voxel_downsample(a, 0.01)"),
}


@pytest.mark.cuda
@pytest.mark.parametrize("argument", sorted(DEVICE_ASSERTS))
def test_cuda_checks_without_a_host_read_are_device_side_asserts(argument):
    import subprocess
    import sys

    script = (
        "import torch, pointops\n"
        "from pointops import nn\n"
        "from pointops.compat import openpcdet_stack as stack, pointcept, pytorch3d\n"
        "x = torch.rand(10, 3, device='cuda')\n"
        f"{DEVICE_ASSERTS[argument][0]}\n"
        "torch.cuda.synchronize()\n"
        "torch.cuda.set_sync_debug_mode('error')\n"
        f"out = {DEVICE_ASSERTS[argument][1]}\n"
        "torch.cuda.set_sync_debug_mode('default')\n"
        "torch.cuda.synchronize()\n"
        "print('no error', flush=True)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert "called a synchronizing CUDA operation" not in output, output  # the check read a value back
    assert run.returncode != 0 and "no error" not in run.stdout, output
    assert "device-side assert" in output and argument in output, output


@pytest.mark.cuda
def test_cuda_checks_where_the_call_reads_the_host_raise_at_once():
    x = torch.rand(10, 3, device="cuda")
    unsorted = torch.tensor([0, 1] * 5, device="cuda")
    with pytest.raises(ValueError, match="^batch_x must be sorted cloud indices"):
        pyg.knn(x, x, 2, unsorted, unsorted)
    with pytest.raises(ValueError, match="^new_offset must be non-decreasing"):
        pc.farthest_point_sampling(
            x,
            torch.tensor([4, 10], dtype=torch.int32, device="cuda"),
            torch.tensor([3, 2], dtype=torch.int32, device="cuda"),
        )
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        p3d.sample_farthest_points(x[None], torch.tensor([-1], device="cuda"), K=2)
    assert torch.cuda.is_available() and float(x.sum()) > 0  # the context is intact
