"""examples/ddp_pipeline.py under torchrun: each rank's per-frame outputs equal a one-process run
over the same frames, bit for bit, and DDP keeps the ranks' weights identical. On the CPU (gloo)
here; with POINTOPS_DDP_DEVICE=cuda on a machine with two or more GPUs (NCCL)."""

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "ddp_pipeline.py")
DEVICE = os.environ.get("POINTOPS_DDP_DEVICE", "cpu")
ARGS = ["--frames", "4", "--steps", "2", "--beams", "16", "--azimuth", "256", "--device", DEVICE]


def _run(processes: int, out: str) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        OMP_NUM_THREADS="1",
        NCCL_NVLS_ENABLE="0",
        TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
        NVSHMEM_DISABLE_NVLS="1",
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        SCRIPT,
        *ARGS,
        "--out",
        out,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _valid(name: str, value: torch.Tensor, other: torch.Tensor) -> tuple:
    """Per-frame outputs whose size follows the padded batch (labels: one per point) compare on
    the common prefix; the prefix past a frame's points is -1 padding in both."""
    if name == "labels":
        n = min(value.shape[0], other.shape[0])
        return value[:n], other[:n]
    return value, other


@pytest.mark.skipif(DEVICE == "cuda" and torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ranks_equal_one_process(tmp_path):
    _run(1, str(tmp_path / "single"))
    _run(2, str(tmp_path / "ranks"))
    single = torch.load(tmp_path / "single" / "rank0_of1.pt")
    ranks = [torch.load(tmp_path / "ranks" / f"rank{r}_of2.pt") for r in range(2)]
    seen = set()
    for part in ranks:
        for frame, outputs in part["frames"].items():
            seen.add(frame)
            for name, value in outputs.items():
                ours, theirs = _valid(name, value, single["frames"][frame][name])
                torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True, msg=f"frame {frame}: {name}")
    assert seen == set(single["frames"])
    for name, value in ranks[0]["weights"].items():
        torch.testing.assert_close(value, ranks[1]["weights"][name], rtol=0, atol=0)  # DDP keeps ranks in step
    assert ranks[0]["losses"][-1] < ranks[0]["losses"][0]


def test_bench_ddp_runs_one_then_two_ranks(tmp_path):
    """tools/bench_ddp.py on the CPU (gloo) at tiny sizes: one run per rank count, the frames
    split over the ranks, a table with the scaling and, with --profile, each run's host time by
    operation and what grew between the runs (docs/multi_gpu.md; GPUs give the product's figures)."""
    import json

    out = tmp_path / "rows.jsonl"
    command = [
        sys.executable,
        os.path.join(ROOT, "tools", "bench_ddp.py"),
        "--device",
        "cpu",
        "--gpus",
        "1",
        "2",
        "--frames",
        "4",
        "--beams",
        "8",
        "--azimuth",
        "256",
        "--batch",
        "1",
        "--workers",
        "0",
        "--pool",
        "2",
        "--warmup",
        "1",
        "--json",
        str(out),
        "--profile",
        "--profile-steps",
        "1",
    ]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["ranks"] for r in rows] == [1, 2]
    assert [r["frames"] for r in rows] == [3, 2]  # 4 frames, 1 per batch, the first batch of each rank untimed
    assert rows[0]["scaling"] == 1.0 and rows[1]["scaling"] > 0
    assert all(r["frames_per_s"] > 0 and r["preprocess_ms"] > 0 and r["train_ms"] > 0 for r in rows)
    lines = result.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("ranks  device")) :]
    assert table[0].split()[:4] == ["ranks", "device", "frames", "s"] and "scaling" in table[0]
    assert table[2].split()[0] == "1" and table[3].split()[0] == "2"
    assert table[4].startswith("per frame and rank, ") and "grew most from 1 to 2 ranks" in table[4]
    # --profile: per rank count, the operations by host time per frame (the pointops ops of the
    # preprocessing among them), then what grew from 1 to 2 ranks; no kernel launches on the CPU
    assert all(r["launches_per_frame"] == 0 for r in rows)
    for ranks in ("1 rank:", "2 ranks:"):
        at = next(i for i, line in enumerate(table) if line.startswith(ranks))
        assert "host time per frame by operation" in table[at] and table[at + 1].split()[0] == "operation"
    profiled = "\n".join(table)
    assert "pointops::" in profiled and "aten::" in profiled
    growth = next(i for i, line in enumerate(table) if line.startswith("host time per frame and rank that grew"))
    assert "from 1 to 2 ranks" in table[growth] and len(table) >= growth + 4
    assert all(len(line.split()) >= 4 for line in table[growth + 3 :])
