"""Benchmark rows of the sampling family (fps), run by tools/bench.py or alone.

fps is timed against the classic one-block-per-cloud kernel (OpenPCDet / PointNet++ style,
tools/baselines/fps_classic.cu, compiled here on first use) and, at small sizes, the pure PyTorch
loop, in the same run.

    python tools/bench_sampling.py [--quick] [--device cpu] [--json f]"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (imports nothing heavy)

OPS = ["fps"]

if __name__ == "__main__":  # run alone: tools/bench.py's command line, these rows by default
    sys.exit(cli.run_bench_rows(__doc__, OPS))

import torch  # noqa: E402

sys.path.insert(0, cli.ROOT)
import pointops  # noqa: E402,F401  (registers the ops)
from bench import time_ms  # noqa: E402
from build_baselines import baseline_module  # noqa: E402
from pointops.reference.sampling import fps_torch_loop  # noqa: E402


def classic_module():
    return baseline_module("fps_classic")


# (B, N, k, floor_ms: the target time or None)
FPS_CASES = [
    (32, 1024, 512, 0.25),
    (16, 16384, 4096, 2.0),
    (2, 120000, 4096, 4.0),
    (1, 1000000, 4096, 4.5),
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
                max(0, torch.cuda.max_memory_allocated() - base - outputs) / (b * n), 3
            )
        if "baseline_ms" in out:
            out["ratio"] = round(out["baseline_ms"] / out["ms"], 2)
        if "torch_loop_ms" in out:
            out["ratio_torch_loop"] = round(out["torch_loop_ms"] / out["ms"], 2)
        out["us_per_step"] = round(out["ms"] * 1e3 / k, 3)
        if floor is not None:
            out["meets_floor"] = out["ms"] <= floor
        results.append(out)
        print(json.dumps(out), flush=True)


def run(device, quick, ops, results):
    if "fps" in ops:
        bench_fps(device, quick, results)
