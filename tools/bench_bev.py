"""Benchmark rows of the BEV family (bev_rasterize, pillar_scatter, voxelize), run by tools/bench.py
or alone.

Baselines in the same run: for bev_rasterize, the pure-PyTorch scatter_reduce + bincount image a
user writes; for pillar_scatter, OpenPCDet's PointPillarScatter (a loop of index_put over clouds)
and a batched index_put; for voxelize, the sort-based pure PyTorch voxelization a user would write
(voxelize_baseline, checked equal to the op before timing). Rows also give `hbm_fraction`: (input
+ output bytes) / time / the GPU's peak HBM bandwidth, the bound these ops live under, and on CUDA
`ms_back_to_back`: the time per call of calls queued back to back. The bev_rasterize rows also
split one call from an idle GPU: `kernel_ms` (the kernel alone, replayed from a CUDA graph),
`host_ms` (the host's time in the call: wrapper, checks, allocations, launch) and, as the floor
any op pays, `torch_add_ms` / `torch_add_host_ms`: a 10-element torch add timed the same ways.

    python tools/bench_bev.py [--quick] [--device cpu] [--json f]"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy

OPS = ["bev_rasterize", "pillar_scatter", "voxelize"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch

sys.path.insert(0, cli.ROOT)
import pointops
from bench import back_to_back_ms, graph_ms, time_ms
from pointops.reference.bev import (
    bev_rasterize_baseline,
    pillar_scatter_baseline,
    pillar_scatter_per_cloud_baseline,
    voxelize_baseline,
)
from pointops.scenes.lidar import sampled_street

ROOT = os.path.dirname(os.path.abspath(__file__))


# Peak HBM bandwidth (bytes/s) by GPU name, for hbm_fraction.
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12}


def hbm_fraction(device_name, nbytes, ms):
    peak = next((v for k, v in PEAK_BANDWIDTH.items() if k in device_name), None)
    return None if peak is None else round(nbytes / (ms * 1e-3) / peak, 3)


def host_ms(fn, reps=50):
    """Median milliseconds the host spends in fn() on an idle GPU: from the call to its return,
    with the GPU drained before each call (the work the host does before the GPU can start)."""
    fn()
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(samples)


def lidar_clouds(batch, n, device, seed=0):
    """(B, N, 4) x, y, z, intensity: the demo's street scene (dense near the sensor, like a LiDAR),
    one draw per cloud, with an intensity that fades with range."""
    clouds = torch.stack([sampled_street(n, seed=seed + b) for b in range(batch)])
    intensity = (1.0 - clouds.norm(dim=-1, keepdim=True) / 60.0).clamp(0.0, 1.0)
    return torch.cat([clouds, intensity], -1).to(device)


EIGHT_CHANNELS = ["max_z", "min_z", "mean_z", "count", "density", "max_feature", "mean_feature", "top_feature"]
# (case, B, N, preset, channels, floor_ms, floor_ratio): the target time and speed-up
BEV_CASES = [
    ("a", 8, 120_000, "kitti_bev", ["max_z", "top_feature", "density"], 0.08, 3.5),
    ("b", 8, 300_000, "long_range_1024", EIGHT_CHANNELS, None, 3.5),
]
BEV_CASES_CPU = [
    ("a", 2, 20_000, "kitti_bev", ["max_z", "top_feature", "density"], None, None),
    ("b", 1, 50_000, "long_range_1024", EIGHT_CHANNELS, None, None),
]


def bench_bev(device, quick, results):
    cases = BEV_CASES if device == "cuda" else BEV_CASES_CPU
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for case, b, n, preset, channels, floor_ms, floor_ratio in cases[: 1 if quick else None]:
        points = lidar_clouds(b, n, device)
        point_range, cell_size = pointops.bev_preset(preset)
        height, width = pointops.bev_grid_size(point_range, cell_size)
        row = {
            "op": "bev_rasterize",
            "case": case,
            "B": b,
            "N": n,
            "H": height,
            "W": width,
            "channels": channels,
            "device": name,
            "floor_ms": floor_ms,
            "floor_ratio": floor_ratio,
            "baseline": "pure PyTorch: bincount + scatter_reduce per channel",
        }

        def op():
            return pointops.bev_rasterize(points, channels, None, point_range, cell_size)

        def baseline():
            return bev_rasterize_baseline(points, point_range, cell_size, channels)

        row["ms"] = time_ms(op, device)
        row["baseline_ms"] = time_ms(baseline, device)
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        if device == "cuda":
            row["ms_back_to_back"] = back_to_back_ms(op)
            row["baseline_ms_back_to_back"] = back_to_back_ms(baseline)
            # What one call from an idle GPU is made of: the kernel alone (replayed from a CUDA
            # graph), the host's time to return from the call (the wrapper, the op's checks and
            # allocations, the launch), and as a reference a one-kernel torch op timed the same way.
            row["kernel_ms"] = graph_ms(op)
            row["host_ms"] = host_ms(op)
            tiny = torch.zeros(10, device=device)
            row["torch_add_ms"] = time_ms(lambda: tiny.add(1.0), device)
            row["torch_add_host_ms"] = host_ms(lambda: tiny.add(1.0))
        nbytes = points.numel() * points.element_size() + b * len(channels) * height * width * 4
        row["hbm_fraction"] = hbm_fraction(name, nbytes, row["ms"])
        checks = [] if floor_ms is None else [row["ms"] <= floor_ms]
        checks += [] if floor_ratio is None else [row["ratio"] >= floor_ratio]
        if checks:
            row["meets_floor"] = all(checks)
        results.append(row)
        print(json.dumps(row), flush=True)


# (B, pillars, F, H, W, floor_ratio): OpenPCDet's KITTI grid
PILLAR_CASES = [(8, 12_000, 64, 496, 432, 3.0)]
PILLAR_CASES_CPU = [(2, 3_000, 16, 496, 432, None)]


def bench_pillar_scatter(device, quick, results):
    cases = PILLAR_CASES if device == "cuda" else PILLAR_CASES_CPU
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for b, p, f, height, width, floor_ratio in cases:
        g = torch.Generator(device=device).manual_seed(0)
        features = torch.randn(b, p, f, device=device, generator=g)
        cells = torch.randperm(height * width, device=device, generator=g)[: b * p].view(b, p)
        coords = torch.stack([torch.zeros_like(cells), cells // width, cells % width], -1).int()
        num_voxels = torch.full((b,), p - p // 10, dtype=torch.int64, device=device)
        row = {
            "op": "pillar_scatter",
            "case": "c",
            "B": b,
            "P": p,
            "F": f,
            "H": height,
            "W": width,
            "device": name,
            "floor_ms": None,
            "floor_ratio": floor_ratio,
            "baseline": "OpenPCDet PointPillarScatter (loop over clouds, index_put)",
        }
        row["ms"] = time_ms(lambda: pointops.pillar_scatter(features, coords, num_voxels, height, width), device)
        row["baseline_ms"] = time_ms(
            lambda: pillar_scatter_per_cloud_baseline(features, coords, num_voxels, height, width), device
        )
        row["batched_index_put_ms"] = time_ms(
            lambda: pillar_scatter_baseline(features, coords, num_voxels, height, width).contiguous(), device
        )
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        row["ratio_batched_index_put"] = round(row["batched_index_put_ms"] / row["ms"], 2)
        nbytes = sum(t.numel() * t.element_size() for t in (features, coords, num_voxels)) + b * f * height * width * 4
        row["hbm_fraction"] = hbm_fraction(name, nbytes, row["ms"])
        if floor_ratio is not None:
            row["meets_floor"] = row["ratio"] >= floor_ratio
        results.append(row)
        print(json.dumps(row), flush=True)


# KITTI-like: 250k points uniform in the PointPillars/SECOND range, 0.1 x 0.1 x 0.2 m voxels.
VOXEL_RANGE = [0.0, -40.0, -3.0, 70.4, 40.0, 1.0]
VOXEL_SIZE = [0.1, 0.1, 0.2]
VOXEL_MAX_POINTS = 32
VOXEL_MAX_VOXELS = 40000
# (B, N, floor_ms: the target time or None)
VOXELIZE_CASES = [(1, 250000, 0.5), (4, 250000, None), (1, 20000, None)]
VOXELIZE_CASES_CPU = [(1, 20000, None), (4, 20000, None)]


def bench_voxelize(device, quick, results):
    cases = VOXELIZE_CASES if device == "cuda" else VOXELIZE_CASES_CPU
    if quick:
        cases = cases[:1]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for b, n, floor in cases:
        g = torch.Generator(device=device).manual_seed(0)
        lo = torch.tensor(VOXEL_RANGE[:3], device=device)
        hi = torch.tensor(VOXEL_RANGE[3:], device=device)
        xyz = torch.rand(b, n, 3, device=device, generator=g) * (hi - lo) + lo
        points = torch.cat([xyz, torch.rand(b, n, 1, device=device, generator=g)], dim=2)
        args = (VOXEL_SIZE, VOXEL_RANGE, VOXEL_MAX_POINTS, VOXEL_MAX_VOXELS)

        def op():
            return torch.ops.pointops.voxelize(points, None, *args)

        def baseline():
            return voxelize_baseline(points, *args)

        result = op()
        for actual, expected in zip(result, baseline()):
            assert torch.equal(actual, expected), "voxelize differs from its baseline"
        row = {
            "op": "voxelize",
            "B": b,
            "N": n,
            "C": 4,
            "K": VOXEL_MAX_POINTS,
            "V": VOXEL_MAX_VOXELS,
            "device": name,
            "floor_ms": floor,
            "num_voxels": result[3].tolist(),
            "baseline": "sort-based pure PyTorch (torch.unique + stable argsort)",
        }
        row["baseline_ms"] = time_ms(baseline, device)
        row["ms"] = time_ms(op, device)
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        if floor is not None:
            row["meets_floor"] = row["ms"] <= floor
        results.append(row)
        print(json.dumps(row), flush=True)


def run(device, quick, ops, results):
    if "bev_rasterize" in ops:
        bench_bev(device, quick, results)
    if "pillar_scatter" in ops:
        bench_pillar_scatter(device, quick, results)
    if "voxelize" in ops:
        bench_voxelize(device, quick, results)
