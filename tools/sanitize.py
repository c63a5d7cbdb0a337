"""Every pointops op under compute-sanitizer's memcheck, initcheck, racecheck and synccheck, one
process per (op, tool), so one slow or failing run cannot stop the others; prints a table of
op x tool -> errors (the "ERROR SUMMARY: N errors" line of each run; racecheck's "RACECHECK
SUMMARY: ... (N errors, M warnings)").

    python tools/sanitize.py                      # every op, every tool (needs a GPU and the CUDA build)
    python tools/sanitize.py --ops knn fps --tools memcheck
    python tools/sanitize.py --jobs 12            # 12 runs at a time (each its own process)
    python tools/sanitize.py --dry-run            # no GPU: list the runs and run each op's samples on the CPU
    python tools/sanitize.py --run-op knn         # the per-op runner that compute-sanitizer starts

The inputs are the registration harness' samples (tests/op_samples.py and tests/samples_*.py, all
small), moved to the GPU. Each run sets PYTORCH_NO_CUDA_MEMORY_CACHING=1, so every tensor is its
own cudaMalloc: memcheck then sees a read past a tensor's end (inside a cached block it would
land in another tensor), and initcheck sees each allocation's first write. --print-limit bounds
a run's report; --error-exitcode is left at 0 so that the count is read from the summary line,
and a run that ends without one (a crash, a timeout) shows as "crash" / "timeout".
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = ("memcheck", "initcheck", "racecheck", "synccheck")
# racecheck's analysis of shared memory is per launch and slow; initcheck tracks every byte
TOOL_OPTIONS = {
    "memcheck": ["--leak-check", "no"],
    "initcheck": [],  # "--track-unused-memory no": the device image's compute-sanitizer took "no" for the program
    "racecheck": ["--racecheck-report", "hazard"],
    "synccheck": [],
}
SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error|RACECHECK SUMMARY:.*?\((\d+)\s+error")


def _samples():
    sys.path.insert(0, ROOT)
    from tests.op_samples import OP_SAMPLES  # noqa: PLC0415  (the harness' samples, not a pointops import)

    return OP_SAMPLES


def run_op(name: str, device: str) -> int:
    """Runs every sample of one op on `device` and waits for it; returns the number of samples."""
    import torch  # noqa: PLC0415  (after the command line: --help answers without torch)

    samples = _samples()  # imports pointops from the repository, which registers the ops
    op = getattr(torch.ops.pointops, name)
    count = 0
    for args in samples[name](device):
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        op(*args)
        count += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return count


def errors_reported(output: str):
    """The error count of a run's last summary line (memcheck, initcheck, synccheck: "ERROR
    SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: ... (N errors, M warnings)"), or None."""
    found = ["".join(groups) for groups in SUMMARY.findall(output)]
    return found[-1] if found else None


def command(sanitizer: str, tool: str, name: str, print_limit: int):
    return (
        [sanitizer, "--tool", tool, "--print-limit", str(print_limit), "--error-exitcode", "0"]
        + TOOL_OPTIONS[tool]
        + [sys.executable, os.path.abspath(__file__), "--run-op", name, "--device", "cuda"]
    )


def sanitize(name: str, tool: str, sanitizer: str, timeout: float, print_limit: int, log_dir: str):
    env = dict(
        os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command(sanitizer, tool, name, print_limit),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        output, result = (e.stdout or "") + (e.stderr or "") if isinstance(e.stdout, str) else "", "timeout"
    else:
        output = done.stdout + done.stderr
        errors = errors_reported(output)
        result = "crash" if errors is None else (errors if done.returncode == 0 else f"{errors}!")
    if log_dir:
        with open(os.path.join(log_dir, f"{name}.{tool}.log"), "w") as f:
            f.write(output)
    return result, time.perf_counter() - start


def table(ops, tools, cells) -> str:
    width = max([len(o) for o in ops] + [2])
    lines = [" ".join(["op".ljust(width)] + [t.rjust(10) for t in tools])]
    for op in ops:
        lines.append(" ".join([op.ljust(width)] + [str(cells.get((op, t), "-")).rjust(10) for t in tools]))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", help="ops to run (default: every op of the harness)")
    parser.add_argument("--tools", nargs="*", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per (op, tool) run")
    parser.add_argument("--print-limit", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--log-dir", default="", help="keep each run's report here")
    parser.add_argument(
        "--sanitizer", default=shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    )
    parser.add_argument("--dry-run", action="store_true", help="list the runs; run each op's samples on the CPU")
    parser.add_argument("--run-op", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.run_op:
        run_op(args.run_op, args.device)
        return 0
    samples = _samples()
    ops = args.ops or sorted(samples)
    unknown = sorted(set(ops) - set(samples))
    if unknown:
        parser.error(f"no samples for {unknown}; the harness has {sorted(samples)}")
    if args.dry_run:
        for name in ops:
            count = run_op(name, "cpu")
            for tool in args.tools:
                print(" ".join(command(args.sanitizer, tool, name, args.print_limit)))
            print(f"# {name}: {count} samples run on the CPU")
        print(f"{len(ops)} ops x {len(args.tools)} tools = {len(ops) * len(args.tools)} runs")
        return 0
    if not os.path.exists(args.sanitizer):
        parser.error(f"compute-sanitizer not found at {args.sanitizer} (pass --sanitizer)")
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    cells, bad = {}, 0
    runs = [(name, tool) for name in ops for tool in args.tools]

    def one(run):
        return run, sanitize(*run, args.sanitizer, args.timeout, args.print_limit, args.log_dir)

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:  # each run is a subprocess
        for (name, tool), (result, seconds) in pool.map(one, runs):
            cells[(name, tool)] = result
            bad += result != "0"
            print(f"{name} {tool}: {result} ({seconds:.0f} s)", flush=True)
    print(table(ops, args.tools, cells))
    print(f"{bad} of {len(ops) * len(args.tools)} runs with errors (a trailing ! marks a non-zero exit)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
