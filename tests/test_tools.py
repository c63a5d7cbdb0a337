"""The scripts in tools/ are usable by a person: each answers --help at once (its parser runs
before torch and pointops load), its help says what it measures, and the shared progress lines
and tables of tools/cli.py read right."""

import glob
import io
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
SCRIPTS = sorted(glob.glob(os.path.join(TOOLS, "*.py")) + glob.glob(os.path.join(TOOLS, "*.sh")))
sys.path.insert(0, TOOLS)
import cli  # noqa: E402  (tools/ is put on sys.path first)

# Words that speak of the project's history instead of what a script measures.
HISTORY = re.compile(r"\bissue\s*#?\d+|\bseed\s*0\d\d\b|the issue's", re.IGNORECASE)


@pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.basename(p) for p in SCRIPTS])
def test_help_answers_at_once(path):
    command = ["bash", path, "--help"] if path.endswith(".sh") else [sys.executable, path, "--help"]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    assert len(text.split()) >= 10, f"{os.path.basename(path)} --help says too little: {text!r}"
    if path.endswith(".py"):
        assert text.startswith("usage: "), text[:200]
    assert not HISTORY.findall(text), f"{os.path.basename(path)} --help speaks of {HISTORY.findall(text)}"
    assert seconds < 5, f"{os.path.basename(path)} --help took {seconds:.1f} s (heavy imports before the parser?)"


@pytest.mark.parametrize(
    "path", [p for p in SCRIPTS if p.endswith(".py")], ids=[os.path.basename(p) for p in SCRIPTS if p.endswith(".py")]
)
def test_help_loads_no_torch(path, tmp_path):
    """--help works where torch cannot even be imported: the parser comes first."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch must not load for --help')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run(
        [sys.executable, path, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_every_script_is_listed():
    listed = dict(cli.scripts())
    assert set(listed) == {os.path.basename(p) for p in SCRIPTS}
    assert all(listed.values()), [name for name, what in listed.items() if not what]


def test_family_ops_are_read_without_import():
    ops = cli.family_ops()
    assert sorted(ops) == [
        "bench_bev",
        "bench_compat",
        "bench_cpu",
        "bench_geometry",
        "bench_hough",
        "bench_ppf",
        "bench_sampling",
    ]
    assert ops["bench_sampling"] == ["fps"]
    assert "knn" in ops["bench_geometry"] and "icp" in ops["bench_geometry"] and "detect_circles" in ops["bench_hough"]


def test_progress_lines_estimate_the_time_left():
    out = io.StringIO()
    progress = cli.Progress(3, "scenes", stream=out)
    progress.step("scene 0: 4 of 4 planes")
    progress.step()
    progress.step("scene 2")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"\[1/3\] scene 0: 4 of 4 planes \| [\d.]+ s, about [\d.]+ s left", lines[0]), lines[0]
    assert re.fullmatch(r"\[2/3\] [\d.]+ s, about [\d.]+ s left", lines[1]), lines[1]
    assert re.fullmatch(r"\[3/3\] scene 2 \| done in [\d.]+ s", lines[2]), lines[2]
    assert cli.duration(5) == "5.0 s" and cli.duration(100) == "2 min" and cli.duration(7200) == "2.0 h"


def test_table_aligns_text_left_and_numbers_right():
    rows = [{"layout": "grid", "recall": 1.0, "n": 50}, {"layout": "ball", "recall": 0.9712, "n": None}]
    text = cli.table(rows, [("layout", "layout", ""), ("recall", "recall", ".3f"), ("n", "scenes", "d")], title="t")
    assert text.splitlines() == [
        "t",
        "layout  recall  scenes",
        "------  ------  ------",
        "grid     1.000      50",
        "ball     0.971       -",
    ]


def test_bench_table_reads_bench_rows():
    rows = [
        {"op": "knn", "B": 2, "N": 4096, "k": 16, "device": "cpu", "ms": 1.5, "baseline_ms": 6.0, "ratio": 4.0},
        {"note": "open3d unavailable"},
    ]
    text = cli.bench_table(rows).splitlines()
    assert text[0].startswith("1 rows") and "B=2 N=4096 k=16" in text[3] and text[3].rstrip().endswith("4.00")


def test_sanitizer_summaries_are_read_for_every_tool():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import sanitize

    assert sanitize.errors_reported("========= ERROR SUMMARY: 0 errors\n") == "0"
    assert sanitize.errors_reported("x\n========= ERROR SUMMARY: 3 errors\n") == "3"
    assert sanitize.errors_reported("========= RACECHECK SUMMARY: 2 hazards displayed (1 errors, 1 warnings)") == "1"
    assert sanitize.errors_reported("Traceback (most recent call last):") is None
