"""pointops benchmarks: JSON lines of (op, sizes, device, median ms, baseline ms, ratio), one family
per tools/bench_<family>.py (sampling, bev, hough, geometry, ppf), each run by this script.

Times with CUDA events after warm-up and reports medians. Each op is measured against a baseline
in the same run (a classic kernel of the peers, or the plain-PyTorch way a user writes the op;
each family's file says which), so the figure is a ratio that holds on a noisy machine. On CUDA
`ms` times each call alone, from an idle GPU (the host's dispatch and the launch included), and
some rows add `ms_back_to_back`, the time per call of calls queued back to back, or `kernel_ms`,
the GPU time per call of calls replayed from one CUDA graph (no host dispatch). `--plot out.png`
draws the ratios. Without a GPU it times the CPU kernels at small sizes (for the harness itself;
CPU figures are not the product's numbers).

Every row prints as a JSON line as it is measured (one line per row: the progress), and the run
ends with a table of all rows: op, case, sizes, device, median ms, baseline ms and their ratio.

    python tools/bench.py [--ops fps bev_rasterize knn ppf_match ...] [--quick] [--device cpu] [--json f] [--plot f]
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # imports nothing heavy

if __name__ == "__main__":
    ARGS = cli.bench_parser(__doc__).parse_args()  # --help answers here, before torch loads

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pointops  # noqa: F401  (loads the operators the families time)


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


def graph_ms(fn, calls=20, rounds=10):
    """Median milliseconds per call of `calls` calls captured in one CUDA graph and replayed: the
    GPU time of the call's kernels alone, with no host dispatch or launch latency (for rows where
    both time_ms and back_to_back_ms are the host's dispatch, not the kernels)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return statistics.median(samples)


if __name__ == "__main__":
    cli.run(ARGS)
