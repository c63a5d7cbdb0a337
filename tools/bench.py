"""pointops benchmarks: JSON lines of (op, sizes, device, median ms, baseline ms, ratio).

Times with CUDA events after warm-up and reports medians. Each op is measured against an in-repo
baseline in the same run: for fps, the classic one-block-per-cloud kernel of seed 001
(tools/baselines/fps_classic.cu, compiled here on first use) and, at small sizes, the pure
PyTorch loop; for voxelize, the sort-based pure PyTorch voxelization a user would write
(torch_voxelize, checked equal to the op before timing). `--plot out.png` draws the ratios.
Without a GPU it times the CPU kernels at small sizes (for the harness itself; CPU figures are
not the product's numbers).

    python tools/bench.py [--ops fps voxelize] [--quick] [--plans auto grid:66 cluster:16] [--json f] [--plot f]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pointops  # noqa: E402,F401

ROOT = os.path.dirname(os.path.abspath(__file__))


def time_ms(fn, device, min_reps=5, budget_ms=1500.0):
    """Median milliseconds of fn() after a warm-up, CUDA events on CUDA, host clock on CPU."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        estimate = start.elapsed_time(end)
    else:
        t0 = time.perf_counter()
        fn()
        estimate = (time.perf_counter() - t0) * 1e3
    reps = int(max(min_reps, min(100, budget_ms / max(estimate, 1e-3))))
    samples = []
    for _ in range(reps):
        if device == "cuda":
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def torch_loop_fps(points, k):
    """The pure PyTorch way a user writes FPS: one vectorized step per pick."""
    b, n, _ = points.shape
    min_dist = torch.full((b, n), float("inf"), device=points.device)
    idx = torch.zeros(b, k, dtype=torch.int64, device=points.device)
    last = torch.zeros(b, dtype=torch.int64, device=points.device)
    rows = torch.arange(b, device=points.device)
    for s in range(1, k):
        d = ((points - points[rows, last].unsqueeze(1)) ** 2).sum(-1)
        min_dist = torch.minimum(min_dist, d)
        last = min_dist.argmax(1)
        idx[:, s] = last
    return idx


_classic = None


def classic_module():
    global _classic
    if _classic is None:
        from torch.utils.cpp_extension import load

        _classic = load("pointops_fps_classic", [os.path.join(ROOT, "baselines", "fps_classic.cu")],
                        extra_cuda_cflags=["-O3"], verbose=False)
    return _classic


# (B, N, k, floor_ms from the issue or None)
FPS_CASES = [
    (32, 1024, 512, 0.25),
    (16, 16384, 4096, 3.5),
    (2, 120000, 4096, 8.0),
    (1, 1000000, 4096, 12.0),
    (64, 16384, 4096, None),
    (64, 1024, 512, None),
    (8, 4096, 1024, None),
]
FPS_CASES_CPU = [(4, 1024, 256, None), (1, 16384, 512, None)]


def bench_fps(device, quick, plans, results):
    cases = FPS_CASES if device == "cuda" else FPS_CASES_CPU
    if quick:
        cases = cases[:2]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for b, n, k, floor in cases:
        g = torch.Generator(device=device).manual_seed(0)
        points = torch.rand(b, n, 3, device=device, generator=g)
        row = {"op": "fps", "B": b, "N": n, "k": k, "D": 3, "device": name, "floor_ms": floor}
        if device == "cuda":
            row["baseline"] = "classic one-block-per-cloud kernel (seed 001)"
            row["baseline_ms"] = time_ms(lambda: classic_module().classic_fps(points, k), device)
        if n * k <= 1024 * 512 * 32:
            row["torch_loop_ms"] = time_ms(lambda: torch_loop_fps(points, k), device)
        for plan in plans:
            os.environ["POINTOPS_FPS_PLAN"] = "" if plan == "auto" else plan
            out = dict(row, plan=plan)
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            out["ms"] = time_ms(lambda: torch.ops.pointops.fps(points, None, None, k), device)
            if device == "cuda":
                outputs = 2 * b * k * 8
                out["scratch_bytes_per_point"] = round(
                    max(0, torch.cuda.max_memory_allocated() - base - outputs) / (b * n), 3)
            if "baseline_ms" in out:
                out["ratio"] = round(out["baseline_ms"] / out["ms"], 2)
            if "torch_loop_ms" in out:
                out["ratio_torch_loop"] = round(out["torch_loop_ms"] / out["ms"], 2)
            out["us_per_step"] = round(out["ms"] * 1e3 / k, 3)
            if floor is not None:
                out["meets_floor"] = out["ms"] <= floor
            results.append(out)
            print(json.dumps(out), flush=True)
        os.environ.pop("POINTOPS_FPS_PLAN", None)


def torch_voxelize(points, voxel_size, pc_range, max_points, max_voxels):
    """Deterministic hard voxelization the way a user writes it in PyTorch: per cloud, torch.unique
    of the cell keys, a stable argsort to group points by voxel in point order, and an argsort of
    each voxel's first point for the order of first appearance. Same outputs as pointops.voxelize
    (cells in float32: float32 points only)."""
    batch, n, channels = points.shape
    device = points.device
    lo = torch.tensor(pc_range[:3], dtype=torch.float32, device=device)
    size = torch.tensor(voxel_size, dtype=torch.float32, device=device)
    dims = torch.round((torch.tensor(pc_range[3:], dtype=torch.float32, device=device) - lo) / size).long()
    voxels = points.new_zeros(batch, max_voxels, max_points, channels)
    coords = torch.full((batch, max_voxels, 3), -1, dtype=torch.int32, device=device)
    num_points = torch.zeros(batch, max_voxels, dtype=torch.int32, device=device)
    num_voxels = torch.zeros(batch, dtype=torch.int32, device=device)
    point_voxel = torch.full((batch, n), -1, dtype=torch.int64, device=device)
    for b in range(batch):
        cell = torch.floor((points[b, :, :3] - lo) / size)
        idx = ((cell >= 0) & (cell < dims)).all(1).nonzero().squeeze(1)
        cell = cell[idx].long()
        key = (cell[:, 2] * dims[1] + cell[:, 1]) * dims[0] + cell[:, 0]
        unique, inverse, counts = torch.unique(key, return_inverse=True, return_counts=True)
        order = torch.argsort(inverse, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        first = idx[order[starts]]
        by_appearance = torch.argsort(first)
        rank = torch.empty_like(by_appearance)
        rank[by_appearance] = torch.arange(len(first), device=device)
        slot = rank[inverse]
        place = torch.empty_like(order)
        place[order] = torch.arange(len(order), device=device) - starts[inverse[order]]
        kept = slot < max_voxels
        point_voxel[b, idx[kept]] = slot[kept]
        stored = kept & (place < max_points)
        voxels[b, slot[stored], place[stored]] = points[b, idx[stored]]
        count = min(len(unique), max_voxels)
        voxel = by_appearance[:count]
        cells = unique[voxel]
        coords[b, :count] = torch.stack(
            [cells // (dims[0] * dims[1]), (cells // dims[0]) % dims[1], cells % dims[0]], 1).int()
        num_points[b, :count] = counts[voxel].clamp(max=max_points).int()
        num_voxels[b] = count
    return voxels, coords, num_points, num_voxels, point_voxel


# KITTI-like: 250k points uniform in the PointPillars/SECOND range, 0.1 x 0.1 x 0.2 m voxels.
VOXEL_RANGE = [0.0, -40.0, -3.0, 70.4, 40.0, 1.0]
VOXEL_SIZE = [0.1, 0.1, 0.2]
VOXEL_MAX_POINTS = 32
VOXEL_MAX_VOXELS = 40000
# (B, N, floor_ms from the issue or None)
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
            return torch_voxelize(points, *args)

        result = op()
        for actual, expected in zip(result, baseline()):
            assert torch.equal(actual, expected), "voxelize differs from its baseline"
        row = {"op": "voxelize", "B": b, "N": n, "C": 4, "K": VOXEL_MAX_POINTS, "V": VOXEL_MAX_VOXELS,
               "device": name, "floor_ms": floor, "num_voxels": result[3].tolist(),
               "baseline": "sort-based pure PyTorch (torch.unique + stable argsort)"}
        row["baseline_ms"] = time_ms(baseline, device)
        row["ms"] = time_ms(op, device)
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        if floor is not None:
            row["meets_floor"] = row["ms"] <= floor
        results.append(row)
        print(json.dumps(row), flush=True)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if "ratio" in r and r.get("plan", "auto") == "auto"]
    if not rows:
        return
    labels = [f'{r["op"]}\nB={r["B"]} N={r["N"]}\n' + (f'k={r["k"]}' if "k" in r else f'V={r["V"]}') for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    ax.bar(range(len(rows)), [r["ratio"] for r in rows])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("speed-up over in-repo baseline")
    ax.set_title(f'pointops on {rows[0]["device"]}')
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", default=["fps", "voxelize"])
    parser.add_argument("--quick", action="store_true", help="the first sizes only")
    parser.add_argument("--plans", nargs="*", default=["auto"],
                        help="fps layouts to time: auto, block, cluster:P, grid:P")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", help="also write the JSON lines here")
    parser.add_argument("--plot", help="write a PNG of the ratios here")
    args = parser.parse_args()
    results = []
    if "fps" in args.ops:
        bench_fps(args.device, args.quick, args.plans, results)
    if "voxelize" in args.ops:
        bench_voxelize(args.device, args.quick, results)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in results)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
