"""Benchmark rows of the peers' drop-ins, run by tools/bench.py or alone: PV-RCNN++'s vector pool
(pointops.nn.stack) against the plain-PyTorch brute force of OpenPCDet's semantics.

Workload: two generated street scans (pointops.scenes.lidar, 64 beams, ~120k returns each); as
x_conv4's voxel centres (Waymo's 0.1 m voxels 8 times down), the centres of their occupied 0.8 m
voxels and of those voxels' 26 neighbours (the dilation of the padded 3 x 3 x 3 sparse
convolutions), ~27k a scan, so that most cubes of half-width 9.6 m hold over 1,000 of them; and
4,096 keypoints a scan by farthest point sampling, as PV-RCNN++'s Waymo configuration takes them.

Rows (each against its baseline in the same run):
  vector_pool three_nn d=4.8 / d=9.6: three_nn_for_vector_pool_by_two_step with x_conv4's two
      groups (max_neighbour_distance 2.4 and 4.8, multiplier 2, 3 x 3 x 3 grid centres): the first
      1,000 points of each keypoint's cube (cube_query_packed), then each grid centre's 3 nearest of
      them (one knn_packed). `cube_query_ms` times the first step alone. Baseline: the brute force
      in plain PyTorch, every keypoint against every point of its cloud (the first 1,000 inside the
      cube by a cumulative count), then every grid centre against those slots, its 3 nearest by
      three argmins; `indices_equal` checks the two agree.
  vector_pool layer: OpenPCDet's VectorPoolAggregationModuleMSG with the Waymo x_conv4 settings
      (64 input channels), forward and backward; baseline: the same layer with the brute-force
      search in place of pointops'.
On the CPU each row also gives `cpu_ms` and `baseline_cpu_ms`, the CPU time of all threads (the
fairer figure on a shared machine).

    python tools/bench_compat.py [--quick] [--device cpu] [--json f]
    python tools/bench.py --ops vector_pool   # the same rows
"""

import json
import os
import statistics
import sys
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)

OPS = ["vector_pool"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch  # noqa: E402

from bench import time_ms  # noqa: E402

import pointops  # noqa: E402
from pointops.compat import openpcdet_stack  # noqa: E402
from pointops.scenes import lidar as lidar_scenes  # noqa: E402

X_CONV4 = dict(
    NUM_GROUPS=2,
    LOCAL_AGGREGATION_TYPE="local_interpolation",
    NUM_REDUCED_CHANNELS=32,
    NUM_CHANNELS_OF_LOCAL_AGGREGATION=32,
    MSG_POST_MLPS=[128],
    GROUP_CFG_0=dict(NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=2.4, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[64, 64]),
    GROUP_CFG_1=dict(NUM_LOCAL_VOXEL=[3, 3, 3], MAX_NEIGHBOR_DISTANCE=4.8, NEIGHBOR_NSAMPLE=-1, POST_MLPS=[64, 64]),
)


class Config(dict):
    """OpenPCDet's EasyDict: attribute access, nested dicts too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for key, value in self.items():
            if isinstance(value, dict):
                self[key] = Config(value)

    def __getattr__(self, name):
        return self[name]


def scene(device, scans=2, keypoints=4096):
    """(voxel centres (N, 3), their counts (B,) int32, keypoints (M, 3), their counts) of `scans`
    street scans, stacked as OpenPCDet stacks them."""
    voxels, picks = [], []
    for seed in range(scans):
        points = lidar_scenes.lidar_scan(lidar_scenes.make_scene(seed), n_beams=64, seed=seed).points
        cells = torch.unique(torch.floor(points / 0.8), dim=0)
        around = torch.stack(torch.meshgrid(*[torch.arange(-1.0, 2.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
        voxels.append(torch.unique((cells[:, None] + around).reshape(-1, 3), dim=0) * 0.8 + 0.4)
        idx = pointops.farthest_point_sampling(points[None], keypoints).indices[0]
        picks.append(points[idx])
    cnt = torch.tensor([v.shape[0] for v in voxels], dtype=torch.int32)
    new_cnt = torch.tensor([p.shape[0] for p in picks], dtype=torch.int32)
    return torch.cat(voxels).to(device), cnt.to(device), torch.cat(picks).to(device), new_cnt.to(device)


def brute_three_nn_for_vector_pool(
    support_xyz,
    xyz_batch_cnt,
    new_xyz,
    new_xyz_grid_centers,
    new_xyz_batch_cnt,
    max_neighbour_distance,
    nsample,
    neighbor_type,
    avg_length_of_neighbor_idxs,
    num_total_grids,
    neighbor_distance_multiplier,
    max_neighbors=1000,
):
    """OpenPCDet's three_nn_for_vector_pool_by_two_step in plain PyTorch, brute force (same
    arguments and outputs): each centre against every point of its cloud, the first `limit` inside
    the cube (or closed ball) by a cumulative count, scattered into slots; then each grid centre
    against its centre's slots, the 3 nearest by three argmins (the first minimum: ties to the
    lowest slot). Reads the counts back to the host to loop over clouds."""
    limit = max_neighbors if nsample <= 0 else min(nsample, max_neighbors)
    m, g = new_xyz.shape[0], num_total_grids
    device = new_xyz.device
    d = torch.tensor(max_neighbour_distance * neighbor_distance_multiplier, dtype=torch.float32, device=device)
    grid = new_xyz_grid_centers.reshape(m, g, 3)
    out_idx = torch.full((m, g, 3), -1, dtype=torch.int64, device=device)
    out_d2 = torch.full((m, g, 3), float("inf"), device=device)
    starts, new_starts = [0], [0]
    for a, b in zip(xyz_batch_cnt.tolist(), new_xyz_batch_cnt.tolist()):
        starts.append(starts[-1] + a)
        new_starts.append(new_starts[-1] + b)
    chunk = 1024 if device.type == "cuda" else 64
    for b in range(len(starts) - 1):
        pts = support_xyz[starts[b] : starts[b + 1]]
        n = pts.shape[0]
        padded = torch.cat([pts, torch.full((1, 3), float("inf"), device=device)])  # slot n: no point
        for c0 in range(new_starts[b], new_starts[b + 1], chunk):
            c1 = min(c0 + chunk, new_starts[b + 1])
            local = pts[None] - new_xyz[c0:c1, None]  # (c, n, 3)
            if neighbor_type == 1:
                inside = (local[..., 0] * local[..., 0] + local[..., 1] * local[..., 1]) + local[..., 2] * local[
                    ..., 2
                ] <= d * d
            else:
                inside = ((local <= d) & (local >= -d)).all(-1)
            rank = inside.long().cumsum(1) - 1
            keep = inside & (rank < limit)
            slots = torch.full((c1 - c0, limit + 1), n, dtype=torch.int64, device=device)
            slots.scatter_(
                1,
                torch.where(keep, rank, torch.full_like(rank, limit)),
                torch.arange(n, device=device).expand(c1 - c0, n),
            )
            slots = slots[:, :limit]
            p = padded[slots]  # (c, S, 3)
            q = grid[c0:c1]
            dx = q[:, :, None, 0] - p[:, None, :, 0]
            dy = q[:, :, None, 1] - p[:, None, :, 1]
            dz = q[:, :, None, 2] - p[:, None, :, 2]
            d2 = (dx * dx + dy * dy) + dz * dz  # (c, G, S)
            for j in range(3):
                best = d2.argmin(-1, keepdim=True)
                value = d2.gather(-1, best)
                row = slots[:, None, :].expand_as(d2).gather(-1, best)
                found = value < float("inf")
                out_idx[c0:c1, :, j : j + 1] = torch.where(found, row + starts[b], torch.full_like(row, -1))
                out_d2[c0:c1, :, j : j + 1] = value
                d2 = d2.scatter(-1, best, float("inf"))
    missing = out_idx < 0
    out_d2 = torch.where(missing, out_d2[..., :1].expand_as(out_d2), out_d2)
    out_idx = torch.where(missing, out_idx[..., :1].expand_as(out_idx), out_idx)
    return torch.sqrt(out_d2), out_idx.int(), torch.tensor(avg_length_of_neighbor_idxs)


def cpu_time_ms(fn, reps=3):
    """Median CPU time of all threads of this process, in ms."""
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        samples.append((time.process_time() - t0) * 1e3)
    return statistics.median(samples)


def emit(results, row):
    if row.get("baseline_ms") and row.get("ms"):
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
    results.append(row)
    print(json.dumps(row), flush=True)


def timed(row, device, ours, baseline, reps):
    if device == "cuda":
        row["ms"] = time_ms(ours, device, min_reps=reps)
        row["baseline_ms"] = time_ms(baseline, device, min_reps=reps, budget_ms=500.0)
    else:
        row["ms"] = time_ms(ours, device, min_reps=reps, budget_ms=0.0)
        row["baseline_ms"] = time_ms(baseline, device, min_reps=reps, budget_ms=0.0)
        row["cpu_ms"] = cpu_time_ms(ours, reps)
        row["baseline_cpu_ms"] = cpu_time_ms(baseline, reps)


def bench_vector_pool(device, quick, results):
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    xyz, cnt, keypoints, new_cnt = scene(device, keypoints=1024 if quick else 4096)
    reps = 5 if device == "cuda" else 2
    offsets = torch.nn.functional.pad(cnt.long().cumsum(0), (1, 0))
    new_offsets = torch.nn.functional.pad(new_cnt.long().cumsum(0), (1, 0))
    for group in ("GROUP_CFG_0", "GROUP_CFG_1"):
        distance = X_CONV4[group]["MAX_NEIGHBOR_DISTANCE"]
        grid = openpcdet_stack.VectorPoolAggregationModule.get_dense_voxels_by_center(keypoints, distance, [3, 3, 3])
        args = (xyz, cnt, keypoints, grid, new_cnt, distance, -1, 0, 1000, 27, 2.0)
        counts = pointops.cube_query_packed(keypoints, new_offsets, xyz, offsets, 2 * distance, 0).counts
        row = {
            "op": "vector_pool",
            "case": f"three_nn d={2 * distance:g}",
            "N": int(xyz.shape[0]),
            "M": int(keypoints.shape[0]),
            "k": 1000,
            "device": name,
            "cube_points_mean": round(counts.float().mean().item(), 1),
            "centres_over_1000": int((counts > 1000).sum()),
            "baseline": "plain-PyTorch brute force (cube by cumulative count, 3 argmins over the slots)",
        }
        ours = openpcdet_stack.three_nn_for_vector_pool_by_two_step(*args)
        theirs = brute_three_nn_for_vector_pool(*args)
        row["indices_equal"] = bool(torch.equal(ours[1], theirs[1]))
        row["cube_query_ms"] = time_ms(
            lambda: pointops.cube_query_packed(keypoints, new_offsets, xyz, offsets, 2 * distance, 1000),
            device,
            min_reps=reps,
            budget_ms=0.0 if device == "cpu" else 1500.0,
        )
        timed(
            row,
            device,
            lambda: openpcdet_stack.three_nn_for_vector_pool_by_two_step(*args),
            lambda: brute_three_nn_for_vector_pool(*args),
            reps,
        )
        emit(results, row)

    torch.manual_seed(0)
    layer, _ = openpcdet_stack.build_local_aggregation_module(
        64, Config(NAME="VectorPoolAggregationModuleMSG", **X_CONV4)
    )
    layer = layer.to(device).train()
    features = torch.randn(xyz.shape[0], 64, device=device, requires_grad=True)

    def step():
        _, out = layer(xyz=xyz, xyz_batch_cnt=cnt, new_xyz=keypoints, new_xyz_batch_cnt=new_cnt, features=features)
        out.square().mean().backward()

    def brute_step():
        with mock.patch.object(openpcdet_stack, "three_nn_for_vector_pool_by_two_step", brute_three_nn_for_vector_pool):
            step()

    row = {
        "op": "vector_pool",
        "case": "layer fwd+bwd",
        "N": int(xyz.shape[0]),
        "M": int(keypoints.shape[0]),
        "device": name,
        "baseline": "the same layer on the brute-force search",
    }
    timed(row, device, step, brute_step, reps)
    emit(results, row)


def run(device, quick, ops, results):
    if "vector_pool" in ops:
        bench_vector_pool(device, quick, results)
