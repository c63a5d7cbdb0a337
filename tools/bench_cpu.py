"""CPU rows: every op on one cloud and one thread, as a DataLoader worker runs it.

A DataLoader worker gets one sample at a time and torch sets its thread count to 1, so each row
times one cloud (B = 1) on one thread against the plain PyTorch way a user would write the same
step (also on one thread). `ms` is the median wall time of a call, `cpu_ms` the median CPU time of
the calling thread (what the call costs a core, whatever else shares the machine; with one
thread the kernels run on the calling thread). hough_planes rows also give votes per second per
core (points x orientations / cpu_ms).

    python tools/bench_cpu.py [--quick] [--ops hough_planes fps ...] [--json f]
    python tools/bench.py --device cpu --ops cpu_kernels     # the same rows from the main bench

Every baseline is the one tools/bench.py times on the GPU; voxelize's is checked equal to the op.
The rows call the raw torch.ops.pointops operators, which the public wrappers call. The run ends
with a table of the rows.
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy

# The name tools/bench.py knows these rows by (`--ops cpu_kernels`); the rows themselves carry the
# op names.
OPS = ["cpu_kernels"]
ROW_OPS = [
    "hough_planes",
    "hough_peaks",
    "fps",
    "bev_rasterize",
    "voxelize",
    "pillar_scatter",
    "plane_labels",
    "plane_refit",
]


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="the smallest size of each op")
    parser.add_argument(
        "--ops",
        nargs="*",
        default=ROW_OPS,
        choices=ROW_OPS,
        metavar="OP",
        help=f"the ops to time (default: all of {' '.join(ROW_OPS)})",
    )
    parser.add_argument("--json", help="also write the JSON lines here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

import bench  # noqa: F401  (puts the repository first on sys.path)
import bench_bev
from pointops.reference.bev import bev_rasterize_baseline, pillar_scatter_per_cloud_baseline, voxelize_baseline
from pointops.reference.hough import (
    hough_peaks_baseline,
    hough_planes_baseline,
    plane_labels_baseline,
    plane_refit_baseline,
)
from pointops.reference.sampling import fps_torch_loop
import pointops  # noqa: F401  (registers the operators)

ops = torch.ops.pointops


def cpu_time_ms(fn, min_reps=3, budget_ms=3000.0):
    """(median wall ms, median thread CPU ms) of fn() after a warm-up call."""
    fn()
    t0 = time.thread_time()
    fn()
    estimate = (time.thread_time() - t0) * 1e3
    reps = int(max(min_reps, min(50, budget_ms / max(estimate, 1e-3))))
    wall, cpu = [], []
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpu.append((time.thread_time() - c0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def timed_row(row, op, baseline, min_reps=3):
    row["ms"], row["cpu_ms"] = (round(v, 3) for v in cpu_time_ms(op, min_reps))
    if baseline is not None:
        row["baseline_ms"], row["baseline_cpu_ms"] = (round(v, 3) for v in cpu_time_ms(baseline, 1, 1.0))
        row["ratio"] = round(row["baseline_cpu_ms"] / row["cpu_ms"], 2)
    row["floor_ms"] = None
    return row


def lidar_cloud(n, seed=0):
    """(1, n, 4) x, y, z, intensity, LiDAR-like: dense near the sensor (range 2 + 68 u^2 m over a
    half-turn ahead), two thirds on a ground plane at z = -1.7 m, the rest up to 2 m above it."""
    g = torch.Generator().manual_seed(seed)
    r = 2.0 + 68.0 * torch.rand(n, generator=g) ** 2
    a = (torch.rand(n, generator=g) - 0.5) * torch.pi
    ground = torch.rand(n, generator=g) < 2 / 3
    z = torch.where(ground, -1.7 + 0.02 * torch.randn(n, generator=g), -1.7 + 2.0 * torch.rand(n, generator=g))
    return torch.stack([r * a.cos(), r * a.sin(), z, torch.rand(n, generator=g)], 1).unsqueeze(0)


def hough_rows(quick, wanted):
    # A fine grid: 180 x 180 orientations, 0.1 m rho bins over +-18 m (360 bins), points in a
    # 20 m cube (every rho in range).
    n_phi = n_theta = 180
    rho_step, rho_max = 0.1, 18.0
    for n in [2_000, 20_000] if quick else [2_000, 20_000, 200_000]:
        points = torch.rand(1, n, 3, generator=torch.Generator().manual_seed(0)) * 20 - 10
        weights = torch.rand(1, n, generator=torch.Generator().manual_seed(1))
        sizes = {"B": 1, "N": n, "n_phi": n_phi, "n_theta": n_theta, "n_rho": round(2 * rho_max / rho_step)}
        if "hough_planes" in wanted:
            for weighted in (False, True):
                w = weights if weighted else None
                baseline = None
                if n == 2_000 and not weighted:  # 65 M votes take the baseline seconds already

                    def baseline():
                        return hough_planes_baseline(points[0], n_phi, n_theta, rho_step, rho_max)

                row = timed_row(
                    dict(
                        op="hough_planes",
                        **sizes,
                        weighted=weighted,
                        device="cpu",
                        baseline="PyTorch matmul + bincount per 2048 points" if baseline else None,
                    ),
                    lambda: ops.hough_planes(points, None, w, n_phi, n_theta, rho_step, rho_max),
                    baseline,
                    min_reps=1 if n >= 200_000 else 3,
                )
                row["votes_per_s_per_core"] = float("%.3g" % (n * n_phi * n_theta / (row["cpu_ms"] * 1e-3)))
                if "baseline_cpu_ms" in row:
                    row["baseline_votes_per_s_per_core"] = float(
                        "%.3g" % (n * n_phi * n_theta / (row["baseline_cpu_ms"] * 1e-3))
                    )
                yield row
        if "hough_peaks" in wanted and n == 20_000:
            acc = ops.hough_planes(points, None, None, n_phi, n_theta, rho_step, rho_max)
            yield timed_row(
                dict(
                    op="hough_peaks", **sizes, k=16, radius=2, device="cpu", baseline="max_pool3d NMS + topk (no seam)"
                ),
                lambda: ops.hough_peaks(acc, [2, 2, 2], [False] * 3, 1.0, 16, True),
                lambda: hough_peaks_baseline(acc, 2, 16),
            )


def fps_rows(quick, wanted):
    for n, k in [(16_384, 1_024)] if quick else [(16_384, 1_024), (16_384, 4_096), (120_000, 4_096)]:
        points = lidar_cloud(n)[..., :3].contiguous()
        baseline = (lambda: fps_torch_loop(points, k)) if n * k <= 16_384 * 4_096 else None
        yield timed_row(
            dict(
                op="fps",
                B=1,
                N=n,
                k=k,
                device="cpu",
                baseline="PyTorch loop, one vectorized step per pick" if baseline else None,
            ),
            lambda: ops.fps(points, None, None, k),
            baseline,
            min_reps=1,
        )


def bev_rows(quick, wanted):
    # The 0.1 m KITTI grid (preset kitti_bev): 800 x 704 cells.
    point_range, cell_size, height, width = [0.0, -40.0, -3.0, 70.4, 40.0, 1.0], [0.1, 0.1], 800, 704
    cases = [["max_z", "top_feature", "density"], bench_bev.EIGHT_CHANNELS]
    for channels in cases[:1] if quick else cases:
        points = lidar_cloud(120_000)
        yield timed_row(
            dict(
                op="bev_rasterize",
                B=1,
                N=120_000,
                H=height,
                W=width,
                channels=channels,
                device="cpu",
                baseline="pure PyTorch: bincount + scatter_reduce per channel",
            ),
            lambda: ops.bev_rasterize(points, None, point_range, cell_size, channels),
            lambda: bev_rasterize_baseline(points, point_range, cell_size, channels),
        )


def voxelize_rows(quick, wanted):
    n = 120_000
    g = torch.Generator().manual_seed(0)
    lo, hi = torch.tensor(bench_bev.VOXEL_RANGE[:3]), torch.tensor(bench_bev.VOXEL_RANGE[3:])
    points = torch.cat([torch.rand(1, n, 3, generator=g) * (hi - lo) + lo, torch.rand(1, n, 1, generator=g)], 2)
    args = (bench_bev.VOXEL_SIZE, bench_bev.VOXEL_RANGE, bench_bev.VOXEL_MAX_POINTS, bench_bev.VOXEL_MAX_VOXELS)
    for actual, expected in zip(torch.ops.pointops.voxelize(points, None, *args), voxelize_baseline(points, *args)):
        assert torch.equal(actual, expected), "voxelize differs from its baseline"
    yield timed_row(
        dict(
            op="voxelize",
            B=1,
            N=n,
            C=4,
            K=bench_bev.VOXEL_MAX_POINTS,
            V=bench_bev.VOXEL_MAX_VOXELS,
            device="cpu",
            baseline="sort-based pure PyTorch (torch.unique + stable argsort)",
        ),
        lambda: torch.ops.pointops.voxelize(points, None, *args),
        lambda: voxelize_baseline(points, *args),
    )


def pillar_rows(quick, wanted):
    p, f, height, width = 12_000, 64, 496, 432
    g = torch.Generator().manual_seed(0)
    features = torch.randn(1, p, f, generator=g)
    cells = torch.randperm(height * width, generator=g)[:p].view(1, p)
    coords = torch.stack([torch.zeros_like(cells), cells // width, cells % width], -1).int()
    num_voxels = torch.full((1,), p - p // 10, dtype=torch.int64)
    yield timed_row(
        dict(
            op="pillar_scatter",
            B=1,
            P=p,
            F=f,
            H=height,
            W=width,
            device="cpu",
            baseline="OpenPCDet PointPillarScatter (index_put)",
        ),
        lambda: ops.pillar_scatter(features, coords, num_voxels, height, width),
        lambda: pillar_scatter_per_cloud_baseline(features, coords, num_voxels, height, width),
    )


def plane_fit_rows(quick, wanted):
    n, k = 120_000, 8
    points = lidar_cloud(n)[..., :3].contiguous()
    # k planes through points of the cloud, tilted up to about 30 degrees from horizontal: each holds
    # some of the points (the ground most of them), as detect_planes' planes would.
    g = torch.Generator().manual_seed(0)
    normals = torch.cat([torch.rand(k, 2, generator=g) - 0.5, torch.ones(k, 1)], 1)
    normals = normals / normals.norm(dim=1, keepdim=True)
    anchors = points[0, torch.randint(0, n, (k,), generator=g)]
    planes = torch.cat([normals, (normals * anchors).sum(1, keepdim=True)], 1).unsqueeze(0)
    threshold = 0.1
    if "plane_labels" in wanted:
        yield timed_row(
            dict(op="plane_labels", B=1, N=n, K=k, device="cpu", baseline="PyTorch residuals (B, N, K) + argmax"),
            lambda: ops.plane_labels(points, None, planes, threshold),
            lambda: plane_labels_baseline(points, planes, threshold),
        )
    if "plane_refit" in wanted:
        yield timed_row(
            dict(op="plane_refit", B=1, N=n, K=k, device="cpu", baseline="PyTorch one-hot float64 moments + eigh"),
            lambda: ops.plane_refit(points, None, planes, threshold),
            lambda: plane_refit_baseline(points, planes, threshold),
        )


ROWS = [
    (("hough_planes", "hough_peaks"), hough_rows),
    (("fps",), fps_rows),
    (("bev_rasterize",), bev_rows),
    (("voxelize",), voxelize_rows),
    (("pillar_scatter",), pillar_rows),
    (("plane_labels", "plane_refit"), plane_fit_rows),
]


def run(device, quick, ops, results):
    """Rows for tools/bench.py: CPU only (on a GPU machine the CPU kernels are timed here too when
    --device cpu is given)."""
    if device != "cpu":
        return
    wanted = ROW_OPS if "cpu_kernels" in ops else [op for op in ROW_OPS if op in ops]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for names, rows in ROWS:
            if not any(name in wanted for name in names):
                continue
            for row in rows(quick, wanted):
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        torch.set_num_threads(threads)


def main(args):
    results = []
    run("cpu", args.quick, args.ops, results)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in results)
    print(cli.bench_table(results), flush=True)


if __name__ == "__main__":
    main(ARGS)
