"""detect_planes end to end on the GPU: time, host-side operations, syncs, and where the GPU time goes.

For each detect_planes case of tools/bench_hough.py (1M-point and 16 x 120k-point LiDAR clouds,
with the outdoor presets and a 180 x 180 x 256 vote grid), one JSON line with:
  ms             one call from an idle GPU (CUDA events; the host's dispatch and launches included)
  back_to_back_ms, graph_ms   calls queued back to back; calls replayed from one CUDA graph
  pytorch_ms     the same pipeline written in PyTorch on the plane ops (pointops.reference.hough
                 .detect_planes: an op call per refit band, the duplicate suppression a Python
                 loop, the bin-centre tables made on the host per call), the in-repo baseline
  ratio          pytorch_ms / ms
  python_ops     operators called from Python per call (torch.profiler's outermost events)
  kernel_ops     operators the detect_planes op issues (its direct children)
  events         every dispatcher event of the call, nested ones included
  syncs          CUDA runtime calls that wait for the GPU (cudaStreamSynchronize,
                 cudaDeviceSynchronize, cudaEventSynchronize, blocking cudaMemcpy)
  pytorch_python_ops, pytorch_syncs   the same counts for the PyTorch pipeline
then torch.profiler's kernel table of one call, sorted by the kernels' own CUDA time. Needs a GPU.

    python tools/profile_detect.py [--rows 15] [--cases 2] [--json out.jsonl]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)


def parse_args(argv=None):
    parser = cli.parser(__doc__)
    parser.add_argument("--rows", type=int, default=15, help="kernels shown per case (0: no table)")
    parser.add_argument("--cases", type=int, help="only the first this many cases")
    parser.add_argument("--json", help="also write the JSON lines here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, cli.ROOT)
import pointops
from pointops.reference import hough as reference
from pointops.scenes import lidar
from tools.bench import back_to_back_ms, graph_ms, time_ms
from tools.bench_hough import DETECT_CASES

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def counts(fn):
    """(top-level operators, children of pointops::detect_planes, all dispatcher events, syncs) of one call."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        with torch.profiler.record_function("the call"):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    call = next(e for e in events if e.name == "the call")
    ops = [e for e in events if "::" in e.name]
    top = [e for e in ops if e.cpu_parent is not None and e.cpu_parent.id == call.id]
    op = [e for e in ops if e.name == "pointops::detect_planes"]
    children = [e for e in ops if op and e.cpu_parent is not None and e.cpu_parent.id == op[0].id]
    # runtime calls that wait, issued during the call (the synchronize after it is this function's)
    syncs = [
        e
        for e in events
        if (e.name in SYNC_CALLS or e.name.startswith("cudaMemcpy") and "Async" not in e.name)
        and call.time_range.start <= e.time_range.start <= call.time_range.end
    ]
    return len(top), len(children), len(ops), len(syncs), prof


def case_points(b, n, scans={}):
    """B scans of seeds 0..B-1, each tiled to N points (bench_hough's clouds); scans made once."""
    for seed in range(b):
        if seed not in scans:
            scans[seed] = lidar.lidar_scan(lidar.make_scene(seed), range_noise=0.02, clutter=0.1, seed=seed).points
    return torch.stack([scans[s].repeat((n + len(scans[s]) - 1) // len(scans[s]), 1)[:n] for s in range(b)]).cuda()


def main(args):
    if not torch.cuda.is_available():
        sys.exit("tools/profile_detect.py profiles CUDA kernels: it needs a GPU")
    rows = []
    for b, n, k, floor, options in DETECT_CASES[: args.cases]:
        points = case_points(b, n)
        preset = pointops.plane_preset(options.get("preset", "outdoor"))
        explicit = dict(
            n_phi=options.get("n_phi", preset.n_phi),
            n_theta=options.get("n_theta", preset.n_theta),
            rho_step=options.get("rho_step", preset.rho_step),
            rho_max=preset.rho_max,
            distance_threshold=preset.distance_threshold,
            min_inliers=preset.min_inliers,
        )
        run = lambda: pointops.detect_planes(points, k, **options)  # noqa: E731
        pytorch = lambda: reference.detect_planes(points, k, None, **explicit)  # noqa: E731
        for got, want in zip(run(), pytorch()):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)  # the same planes
        config = options["preset"] if "preset" in options else f"{explicit['n_phi']}x{explicit['n_theta']}"
        row = {
            "case": config,
            "B": b,
            "N": n,
            "k": k,
            "device": torch.cuda.get_device_name(),
            "floor_ms": floor,
            "ms": time_ms(run, "cuda"),
            "back_to_back_ms": back_to_back_ms(run, calls=10, rounds=5),
            "graph_ms": graph_ms(run, calls=5, rounds=5),
            "pytorch_ms": time_ms(pytorch, "cuda"),
        }
        row["ratio"] = round(row["pytorch_ms"] / row["ms"], 2)
        row["python_ops"], row["kernel_ops"], row["events"], row["syncs"], prof = counts(run)
        row["pytorch_python_ops"], _, row["pytorch_events"], row["pytorch_syncs"], _ = counts(pytorch)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.rows:
            print(
                prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=60)
            )
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(
        cli.table(
            rows,
            [(key, key, "") for key in ("case", "B", "N", "k")]
            + [(key, key, ".2f") for key in ("ms", "back_to_back_ms", "graph_ms", "pytorch_ms", "ratio")]
            + [
                (key, key, "d")
                for key in ("python_ops", "kernel_ops", "events", "syncs", "pytorch_python_ops", "pytorch_syncs")
            ],
            title=f"detect_planes on {torch.cuda.get_device_name()} (ms: one call from an idle GPU)",
        )
    )


if __name__ == "__main__":
    main(ARGS)
