"""The documentation runs as written: every ```python block of README.md and docs/*.md is executed.

How the runner reads the Markdown (what a doc author needs to know):

- Every block fenced with ```python runs, each on its own in a fresh namespace (a reader copies one
  block at a time, so a block defines every name it uses), in a temporary working directory, with
  torch's generator seeded with 0. Fence a sketch that is not meant to run as ```text.
- Blocks run exactly as written, on a machine with a GPU and on one without. So a block picks its
  device with ``device = "cuda" if torch.cuda.is_available() else "cpu"`` and never names CUDA
  directly (``device="cuda"``, ``.cuda()``, ``.to("cuda")``): a test refuses those.
- Sizes are the ones in the Markdown: keep each example to a few seconds on a 2-core CPU (the GPU
  numbers live in the bench, not in the examples).
- A block that needs a library of an optional extra (plyfile, pypcd4, laspy, trimesh, matplotlib,
  PyYAML) is skipped, saying which, when that library is not installed (a ModuleNotFoundError for
  it, raised directly or as the cause of an ImportError).

The docs also stand alone: every repository path they name in backquotes exists.
"""

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# Format libraries of optional extras (setup.py's extras_require): a block needing one is skipped without it.
OPTIONAL_MODULES = {"plyfile", "pypcd4", "laspy", "lazrs", "trimesh", "matplotlib", "yaml"}
# A device named directly: device="cuda" / device = 'cuda:0' (an assignment or keyword argument, not
# device == "cuda" nor the device = "cuda" if torch.cuda.is_available() else "cpu" idiom), x.cuda(),
# x.to("cuda").
HARD_CODED_CUDA = re.compile(
    r"""\bdevice\s*=(?!=)\s*(["'])cuda(?::\d+)?\1(?![ \t]*if\b)|\.cuda\(\)|"""
    r"""\.to\((["'])cuda(?::\d+)?\2\)"""
)


def python_blocks(path: Path):
    """(first line number, code) of each ```python block of a Markdown file."""
    text = path.read_text()
    for match in FENCE.finditer(text):
        yield text.count("\n", 0, match.start(1)) + 1, match.group(1)


BLOCKS = [
    pytest.param(path, line, code, id=f"{path.relative_to(ROOT)}:{line}")
    for path in DOCS
    for line, code in python_blocks(path)
]


@pytest.mark.parametrize("path, line, code", BLOCKS)
def test_block_runs(path, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks may write files (io examples)
    torch.manual_seed(0)
    # Pad with blank lines so that a traceback names the Markdown file and its line.
    compiled = compile("\n" * (line - 1) + code, str(path), "exec")
    try:
        exec(compiled, {"__name__": "__docs__"})
    except ImportError as error:
        missing = error if isinstance(error, ModuleNotFoundError) else error.__cause__
        name = getattr(missing, "name", None) or ""
        if isinstance(missing, ModuleNotFoundError) and name.split(".")[0] in OPTIONAL_MODULES:
            pytest.skip(f"{path.name}:{line} needs {name}, an optional extra, which is not installed")
        raise


def test_the_runner_finds_the_blocks(tmp_path):
    readme = [line for line, _ in python_blocks(ROOT / "README.md")]
    assert len(readme) >= 5, "the README's examples were not found: is the fence still ```python?"
    sample = tmp_path / "sample.md"
    sample.write_text("x\n```python\na = 1\n```\n```text\nno = run\n```\n```python\nb = 2\nc = 3\n```\n")
    assert list(python_blocks(sample)) == [(3, "a = 1\n"), (9, "b = 2\nc = 3\n")]


@pytest.mark.parametrize("path, line, code", BLOCKS)
def test_block_picks_its_device(path, line, code):
    """A block that names CUDA directly would fail as written on a machine without a GPU."""
    found = [m.group(0) for m in HARD_CODED_CUDA.finditer(code)]
    assert not found, (
        f"{path.name}:{line} names CUDA directly ({found}); write "
        'device = "cuda" if torch.cuda.is_available() else "cpu" and use device'
    )


def test_hard_coded_cuda_is_found():
    code = (
        'a = torch.zeros(2, device="cuda")\ndevice = \'cuda:1\'\nif device == "cuda":\n    pass\n'
        'b = a.cuda() + a.to("cuda:0") + a.to(device)\n'
    )
    assert [m.group(0) for m in HARD_CODED_CUDA.finditer(code)] == [
        'device="cuda"',
        "device = 'cuda:1'",
        ".cuda()",
        '.to("cuda:0")',
    ]
    assert not HARD_CODED_CUDA.search('device = "cuda" if torch.cuda.is_available() else "cpu"\nx.to(device)\n')


# A backquoted token that looks like a path in this repository: a known top-level folder or file,
# then path characters; placeholders (<family>) and globs are not paths.
REPO_PATH = re.compile(
    r"`((?:csrc|pointops|tests|tools|docs|configs|examples|\.ci)/[\w./-]*|"
    r"(?:setup\.py|pyproject\.toml|README\.md))`"
)


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_docs_stand_alone(path):
    text = path.read_text()
    outside = re.findall(r"/work/[\w./-]+|\bseed[ _]0\d\d\b", text)
    for relative in re.findall(r"(?:\.\./)+[\w./-]+", text):
        if ROOT not in (path.parent / relative).resolve().parents:
            outside.append(relative)
    assert not outside, f"{path.name} points outside the repository: {outside}"
    missing = sorted({m.group(1) for m in REPO_PATH.finditer(text) if not (ROOT / m.group(1).rstrip("/")).exists()})
    assert not missing, f"{path.name} names paths that are not in the repository: {missing}"
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (path.parent / image).is_file(), f"{path.name} shows a picture that is missing: {image}"
