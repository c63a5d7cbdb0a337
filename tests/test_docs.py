"""The documentation runs as written: every ```python block of README.md and docs/*.md is executed.

How the runner reads the Markdown (what a doc author needs to know):

- Every block fenced with ```python runs, each on its own in a fresh namespace (a reader copies one
  block at a time, so a block defines every name it uses), in a temporary working directory, with
  torch's generator seeded with 0. Fence a sketch that is not meant to run as ```text.
- Device: write ``device = "cuda" if torch.cuda.is_available() else "cpu"`` at the top of a block, so
  it runs as written anywhere. When no GPU is present, a block that names CUDA directly has it
  rewritten to the CPU: ``device="cuda"`` (an assignment or a keyword argument, ``cuda:N`` too),
  ``.cuda()`` and ``.to("cuda")``; comparisons such as ``device == "cuda"`` are left alone. On a
  GPU machine every block runs on CUDA as written.
- Sizes are the ones in the Markdown: keep examples small enough that all blocks together take
  well under a minute on a 2-core CPU (the GPU numbers live in the bench, not in the examples).
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
# device="cuda" / device = 'cuda:0' as an assignment or keyword argument, not device == "cuda";
# x.cuda(); x.to("cuda").
CUDA_DEVICE = re.compile(r"""(\bdevice\s*=)(?!=)(\s*)(["'])cuda(?::\d+)?\3""")
CUDA_METHOD = re.compile(r"""\.cuda\(\)""")
CUDA_TO = re.compile(r"""\.to\((["'])cuda(?::\d+)?\1\)""")


def python_blocks(path: Path):
    """(first line number, code) of each ```python block of a Markdown file."""
    text = path.read_text()
    for match in FENCE.finditer(text):
        yield text.count("\n", 0, match.start(1)) + 1, match.group(1)


def for_this_machine(code: str, has_cuda: bool) -> str:
    if has_cuda:
        return code
    code = CUDA_DEVICE.sub(r"\1\2\3cpu\3", code)
    return CUDA_TO.sub(r".to(\1cpu\1)", CUDA_METHOD.sub(".cpu()", code))


BLOCKS = [pytest.param(path, line, code, id=f"{path.relative_to(ROOT)}:{line}")
          for path in DOCS for line, code in python_blocks(path)]


@pytest.mark.parametrize("path, line, code", BLOCKS)
def test_block_runs(path, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks may write files (io examples)
    torch.manual_seed(0)
    source = for_this_machine(code, torch.cuda.is_available())
    # Pad with blank lines so that a traceback names the Markdown file and its line.
    compiled = compile("\n" * (line - 1) + source, str(path), "exec")
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


def test_cuda_device_rewrite():
    code = ('a = torch.zeros(2, device="cuda")\ndevice = \'cuda:1\'\n'
            'if device == "cuda":\n    pass\nf(device = "cuda")\nb = a.cuda() + a.to("cuda:0") + a.to(device)\n')
    assert for_this_machine(code, True) == code
    assert for_this_machine(code, False) == ('a = torch.zeros(2, device="cpu")\ndevice = \'cpu\'\n'
                                             'if device == "cuda":\n    pass\nf(device = "cpu")\n'
                                             'b = a.cpu() + a.to("cpu") + a.to(device)\n')


# A backquoted token that looks like a path in this repository: a known top-level folder or file,
# then path characters; placeholders (<family>) and globs are not paths.
REPO_PATH = re.compile(r"`((?:csrc|pointops|tests|tools|docs|configs|examples|\.ci)/[\w./-]*|"
                       r"(?:setup\.py|pyproject\.toml|README\.md))`")


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_docs_stand_alone(path):
    text = path.read_text()
    outside = re.findall(r"/work/[\w./-]+|\bseed[ _]0\d\d\b", text)
    for relative in re.findall(r"(?:\.\./)+[\w./-]+", text):
        if ROOT not in (path.parent / relative).resolve().parents:
            outside.append(relative)
    assert not outside, f"{path.name} points outside the repository: {outside}"
    missing = sorted({m.group(1) for m in REPO_PATH.finditer(text)
                      if not (ROOT / m.group(1).rstrip("/")).exists()})
    assert not missing, f"{path.name} names paths that are not in the repository: {missing}"
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (path.parent / image).is_file(), f"{path.name} shows a picture that is missing: {image}"
