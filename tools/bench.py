"""pointops benchmarks: JSON lines of (op, sizes, device, median ms, baseline ms, ratio).

Times with CUDA events after warm-up and reports medians. Each op is measured against an in-repo
baseline in the same run: for fps, the classic one-block-per-cloud kernel (OpenPCDet /
PointNet++ style, tools/baselines/fps_classic.cu, compiled here on first use) and, at small sizes, the pure
PyTorch loop; for bev_rasterize, the pure-PyTorch scatter_reduce + bincount image a user writes;
for pillar_scatter, OpenPCDet's PointPillarScatter (a loop of index_put over clouds) and a batched
index_put. BEV rows also give `hbm_fraction`: (input + output bytes) / time / the GPU's peak HBM
bandwidth, the bound these ops live under, and on CUDA `ms_back_to_back`: the time per call of
calls queued back to back (`ms` times each call alone, from an idle GPU, so it includes the
host's dispatch and the launch). `--plot out.png` draws the ratios. Without a GPU it
times the CPU kernels at small sizes (for the harness itself; CPU figures are not the product's
numbers).

For hough_planes the baseline is the plane vote as a user writes it in PyTorch (a matmul for rho
per chunk of points, then one bincount); for hough_peaks, max-pool NMS (no seam) + topk; for
voxelize, the sort-based pure PyTorch voxelization a user would write (voxelize_baseline, checked
equal to the op before timing).

Every row prints as a JSON line as it is measured (one line per row: the progress), and the run
ends with a table of all rows: op, case, sizes, device, median ms, baseline ms and their ratio.

    python tools/bench.py [--ops fps bev_rasterize pillar_scatter hough_planes hough_peaks voxelize ...]
                          [--quick] [--device cpu] [--json f] [--plot f]
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)

if __name__ == "__main__":
    ARGS = cli.bench_parser(__doc__).parse_args()  # --help answers here, before torch loads

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pointops  # noqa: E402,F401
from pointops.reference.bev import (  # noqa: E402
    bev_rasterize_baseline, pillar_scatter_baseline, pillar_scatter_per_cloud_baseline, voxelize_baseline)
from pointops.reference.hough import (  # noqa: E402
    hough_peaks_baseline, hough_planes_baseline, plane_labels_baseline, plane_refit_baseline)
from pointops.reference.sampling import fps_torch_loop  # noqa: E402
from pointops.scenes.lidar import sampled_street  # noqa: E402

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


def back_to_back_ms(fn, calls=50, rounds=10):
    """Median milliseconds per call of `calls` calls queued back to back between two CUDA events:
    the GPU time a pipeline that keeps the GPU busy sees, where each host dispatch hides behind
    the previous call's kernels (time_ms instead starts each call on an idle GPU)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(rounds):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return statistics.median(samples)




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


def bench_fps(device, quick, results):
    cases = FPS_CASES if device == "cuda" else FPS_CASES_CPU
    if quick:
        cases = cases[:2]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for b, n, k, floor in cases:
        g = torch.Generator(device=device).manual_seed(0)
        points = torch.rand(b, n, 3, device=device, generator=g)
        row = {"op": "fps", "B": b, "N": n, "k": k, "D": 3, "device": name, "floor_ms": floor}
        if device == "cuda":
            row["baseline"] = "classic one-block-per-cloud kernel (OpenPCDet style)"
            row["baseline_ms"] = time_ms(lambda: classic_module().classic_fps(points, k), device)
        if n * k <= 1024 * 512 * 32:
            row["torch_loop_ms"] = time_ms(lambda: fps_torch_loop(points, k), device)
        out = dict(row)
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


# Peak HBM bandwidth (bytes/s) by GPU name, for hbm_fraction.
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12}


def hbm_fraction(device_name, nbytes, ms):
    peak = next((v for k, v in PEAK_BANDWIDTH.items() if k in device_name), None)
    return None if peak is None else round(nbytes / (ms * 1e-3) / peak, 3)


def lidar_clouds(batch, n, device, seed=0):
    """(B, N, 4) x, y, z, intensity: the demo's street scene (dense near the sensor, like a LiDAR),
    one draw per cloud, with an intensity that fades with range."""
    clouds = torch.stack([sampled_street(n, seed=seed + b) for b in range(batch)])
    intensity = (1.0 - clouds.norm(dim=-1, keepdim=True) / 60.0).clamp(0.0, 1.0)
    return torch.cat([clouds, intensity], -1).to(device)




EIGHT_CHANNELS = ["max_z", "min_z", "mean_z", "count", "density", "max_feature", "mean_feature", "top_feature"]
# (case, B, N, preset, channels, floor_ms, floor_ratio): (a) and (b) from issue 3
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
        row = {"op": "bev_rasterize", "case": case, "B": b, "N": n, "H": height, "W": width,
               "channels": channels, "device": name, "floor_ms": floor_ms, "floor_ratio": floor_ratio,
               "baseline": "pure PyTorch: bincount + scatter_reduce per channel"}

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
        nbytes = points.numel() * points.element_size() + b * len(channels) * height * width * 4
        row["hbm_fraction"] = hbm_fraction(name, nbytes, row["ms"])
        checks = [] if floor_ms is None else [row["ms"] <= floor_ms]
        checks += [] if floor_ratio is None else [row["ratio"] >= floor_ratio]
        if checks:
            row["meets_floor"] = all(checks)
        results.append(row)
        print(json.dumps(row), flush=True)






# (B, pillars, F, H, W, floor_ratio): (c) from issue 3, OpenPCDet's KITTI grid
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
        row = {"op": "pillar_scatter", "case": "c", "B": b, "P": p, "F": f, "H": height, "W": width,
               "device": name, "floor_ms": None, "floor_ratio": floor_ratio,
               "baseline": "OpenPCDet PointPillarScatter (loop over clouds, index_put)"}
        row["ms"] = time_ms(lambda: pointops.pillar_scatter(features, coords, num_voxels, height, width), device)
        row["baseline_ms"] = time_ms(lambda: pillar_scatter_per_cloud_baseline(features, coords, num_voxels, height, width), device)
        row["batched_index_put_ms"] = time_ms(
            lambda: pillar_scatter_baseline(features, coords, num_voxels, height, width).contiguous(), device)
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        row["ratio_batched_index_put"] = round(row["batched_index_put_ms"] / row["ms"], 2)
        nbytes = sum(t.numel() * t.element_size() for t in (features, coords, num_voxels)) + b * f * height * width * 4
        row["hbm_fraction"] = hbm_fraction(name, nbytes, row["ms"])
        if floor_ratio is not None:
            row["meets_floor"] = row["ratio"] >= floor_ratio
        results.append(row)
        print(json.dumps(row), flush=True)


def size_label(row, separator=" "):
    keys = [k for k in ("B", "N", "P", "k", "V", "K", "F") if k in row]
    grid = f'{row["H"]}x{row["W"]}' if "H" in row else ""
    return separator.join([" ".join(f"{k}={row[k]}" for k in keys), grid]).strip()






# (N, n_phi, n_theta, rho bins, floor_ms from the issue or None)
HOUGH_CASES = [(1_000_000, 180, 180, 256, 25.0), (23_000_000, 180, 180, 256, 500.0)]
HOUGH_CASES_CPU = [(20_000, 45, 45, 64, None)]


def bench_hough(device, quick, ops, results):
    cases = HOUGH_CASES if device == "cuda" else HOUGH_CASES_CPU
    if quick:
        cases = cases[:1]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for n, n_phi, n_theta, n_rho, floor in cases:
        if device == "cuda" and torch.cuda.mem_get_info()[0] < n * 12 * 4 + (2 << 30):
            print(json.dumps({"op": "hough_planes", "N": n, "skipped": "not enough free GPU memory"}))
            continue
        g = torch.Generator(device=device).manual_seed(0)
        points = torch.rand(1, n, 3, device=device, generator=g) * 20 - 10  # a 20 m cube
        rho_max = 17.5  # > 10 sqrt(3): every rho is in range
        rho_step = 2 * rho_max / n_rho
        acc = pointops.hough_planes(points, rho_step, rho_max, n_phi=n_phi, n_theta=n_theta)
        sizes = {"B": 1, "N": n, "n_phi": n_phi, "n_theta": n_theta, "n_rho": n_rho, "device": name}
        if "hough_planes" in ops:
            row = dict(op="hough_planes", **sizes, floor_ms=floor)
            row["ms"] = time_ms(lambda: pointops.hough_planes(points, rho_step, rho_max, n_phi=n_phi, n_theta=n_theta), device)
            row["votes_per_s"] = float("%.3g" % (n * n_phi * n_theta / (row["ms"] * 1e-3)))
            if n <= 1_000_000:
                row["baseline"] = "PyTorch matmul + bincount per 2048 points"
                row["baseline_ms"] = time_ms(
                    lambda: hough_planes_baseline(points[0], n_phi, n_theta, rho_step, rho_max), device, min_reps=1)
                row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
            if floor is not None:
                row["meets_floor"] = row["ms"] <= floor
            results.append(row)
            print(json.dumps(row), flush=True)
        if "hough_peaks" in ops and n <= 1_000_000:
            row = dict(op="hough_peaks", **sizes, k=16, radius=2, floor_ms=None)
            row["ms"] = time_ms(lambda: pointops.hough_plane_peaks(acc, 16, [2, 2, 2]), device)
            row["baseline"] = "max_pool3d NMS + topk (no seam)"
            row["baseline_ms"] = time_ms(lambda: hough_peaks_baseline(acc, 2, 16), device)
            row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
            results.append(row)
            print(json.dumps(row), flush=True)


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
            return voxelize_baseline(points, *args)

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


# (B, N, k, floor_ms, options): issue 4's end-to-end rows (one vote, peaks, top-k, refit, labels)
# with the outdoor presets and with the issue's vote grid (180 x 180 orientations, 256 rho bins
# over the preset's +-50 m). tools/eval_planes.py gives each one's accuracy.
ISSUE_GRID = {"n_phi": 180, "n_theta": 180, "rho_step": 100.0 / 256}
DETECT_CASES = [(b, n, k, floor, options)
                for options in ({"preset": "outdoor"}, {"preset": "outdoor_fast"}, ISSUE_GRID)
                for b, n, k, floor in ((1, 1_000_000, 16, 35.0), (16, 120_000, 8, 60.0))]
DETECT_CASES_CPU = [(1, 20_000, 4, None, {})]






# (B, N, K): plane_refit on LiDAR scans (tiled to N) with the planes detect_planes finds there,
# padded with copies to K rows; against the plain PyTorch refit above.
PLANE_FIT_CASES = [(1, 1_000_000, 16), (16, 120_000, 32)]
PLANE_FIT_CASES_CPU = [(1, 20_000, 8)]


def bench_plane_fit(device, quick, results):
    from pointops.scenes import lidar

    cases = PLANE_FIT_CASES if device == "cuda" else PLANE_FIT_CASES_CPU
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for b, n, k in cases[:1] if quick else cases:
        clouds = []
        for seed in range(b):
            scan = lidar.lidar_scan(lidar.make_scene(seed), range_noise=0.02, clutter=0.1, seed=seed).points
            clouds.append(scan.repeat((n + len(scan) - 1) // len(scan), 1)[:n])
        points = torch.stack(clouds).to(device)
        found = pointops.detect_planes(points, 8).planes
        planes = torch.nan_to_num(found, nan=0.0).repeat(1, (k + 7) // 8, 1)[:, :k].contiguous()
        row = {"op": "plane_refit", "B": b, "N": n, "K": k, "device": name,
               "baseline": "plain PyTorch: einsum residuals, one-hot float64 moments, eigh",
               "ms": time_ms(lambda: pointops.plane_refit(points, planes, 0.08), device),
               "baseline_ms": time_ms(lambda: plane_refit_baseline(points, planes, 0.08), device, min_reps=1)}
        row["ratio"] = round(row["baseline_ms"] / row["ms"], 2)
        row["labels_ms"] = time_ms(lambda: pointops.plane_labels(points, planes, 0.08), device)
        row["labels_baseline_ms"] = time_ms(lambda: plane_labels_baseline(points, planes, 0.08), device)
        row["labels_ratio"] = round(row["labels_baseline_ms"] / row["labels_ms"], 2)
        results.append(row)
        print(json.dumps(row), flush=True)


def bench_detect_planes(device, quick, results):
    """detect_planes end to end (one round) on generated LiDAR scans (tiled to N points per cloud),
    against issue 4's floors (no in-repo baseline: the plain PyTorch vote alone does not fit in
    memory at the outdoor preset's 1,000 rho bins for 1M points)."""
    from pointops.scenes import lidar

    cases = DETECT_CASES if device == "cuda" else DETECT_CASES_CPU
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for b, n, k, floor, options in cases[:1] if quick else cases:
        clouds = []
        for seed in range(b):
            scan = lidar.lidar_scan(lidar.make_scene(seed), range_noise=0.02, clutter=0.1, seed=seed).points
            clouds.append(scan.repeat((n + len(scan) - 1) // len(scan), 1)[:n])
        points = torch.stack(clouds).to(device)
        config = options.get("preset", "outdoor") if "n_phi" not in options else "x".join(
            str(options[key]) for key in ("n_phi", "n_theta"))
        row = {"op": "detect_planes", "case": config, "B": b, "N": n, "k": k, "device": name, "floor_ms": floor,
               "ms": time_ms(lambda: pointops.detect_planes(points, k, **options), device)}
        if floor is not None:
            row["meets_floor"] = row["ms"] <= floor
        results.append(row)
        print(json.dumps(row), flush=True)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if "ratio" in r]
    if not rows:
        return
    labels = [r["op"] + "\n" + size_label(r, "\n") for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    ax.bar(range(len(rows)), [r["ratio"] for r in rows])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("speed-up over in-repo baseline")
    ax.set_title(f'pointops on {rows[0]["device"]}')
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def family_benches():
    """tools/bench_<family>.py modules with rows for this bench: each has OPS (the op names it
    times) and run(device, quick, ops, results), which appends its rows to results."""
    import importlib

    sys.path.insert(0, ROOT)
    return [importlib.import_module(name) for name in cli.family_ops()]


def run(args):
    """Time args.ops on args.device (default: cuda when available) and print the rows as JSON lines,
    then as a table."""
    device = cli.default_device(args.device)
    families = family_benches()
    results = []
    if "fps" in args.ops:
        bench_fps(device, args.quick, results)
    if "bev_rasterize" in args.ops:
        bench_bev(device, args.quick, results)
    if "pillar_scatter" in args.ops:
        bench_pillar_scatter(device, args.quick, results)
    if "hough_planes" in args.ops or "hough_peaks" in args.ops:
        bench_hough(device, args.quick, args.ops, results)
    if "voxelize" in args.ops:
        bench_voxelize(device, args.quick, results)
    if "plane_refit" in args.ops:
        bench_plane_fit(device, args.quick, results)
    if "detect_planes" in args.ops:
        bench_detect_planes(device, args.quick, results)
    for module in families:
        if any(op in args.ops for op in module.OPS):
            module.run(device, args.quick, args.ops, results)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in results)
    if args.plot:
        plot(results, args.plot)
    print(cli.bench_table(results), flush=True)
    return results


if __name__ == "__main__":
    run(ARGS)
