"""Every shell command of README.md and docs/*.md runs as written.

The commands are read from the Markdown's ```bash blocks, one per line (a trailing comment is not
part of the command), and each must be listed in COMMANDS with who runs it: .ci/run (the README's
install-and-demo and install-and-test commands), or a slow test here (POINTOPS_SLOW_TESTS=1). A new
documented command without a runner fails test_every_documented_command_has_a_runner.

The slow tests play a user who has torch and a copy of the source: a fresh virtual environment
with the torch release of this one (and numpy) installed by pip, a clean copy of the checkout (what
a fresh clone holds), and each command run by bash, exactly as the docs write it, in that copy with
the environment's bin/ first on PATH. The extension is compiled once (the wheel build) and every
later build reuses its objects. About 10 minutes on 2 cores.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch

from test_install import source_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
SHELL_FENCE = re.compile(r"^```(?:bash|sh|shell)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

# Every documented command -> who runs it. Keep in step with the docs (a test checks both ways).
CI = ".ci/run"
# CI: .ci/run runs the command, itself or through tools/check_deploy.sh.
COMMANDS = {
    "bash tools/install.sh && .venv/bin/python -m pointops.demo --out out/demo": CI,
    "bash tools/install.sh && .venv/bin/python -m pytest -q tests": CI,
    "pip install build ninja wheel && python -m build --no-isolation --wheel": "test_wheel_build_and_install",
    "pip install dist/pointops-*.whl": "test_wheel_build_and_install",
    "pip install --no-build-isolation .": "test_install_from_source",
    "pip install --no-build-isolation -e .": "test_install_from_source",
    "pip install --no-build-isolation '.[io]'": "test_extras",
    "pip install --no-build-isolation '.[demo]'": "test_extras",
    "pip install 'plyfile==1.1.5' 'pypcd4==1.5.1' 'laspy==2.7.0' 'lazrs==0.8.2' 'trimesh==5.2.0'": "test_extras",
    "pip install 'matplotlib==3.11.2'": "test_extras",
    "python -m pointops.demo --out out/demo": "test_demo_commands",
    "python -m pointops.demo --out docs/pictures --device cpu": "test_demo_commands",
    "torchrun --nproc-per-node=2 examples/ddp_pipeline.py --frames 16 --out /tmp/ddp": "test_multi_gpu_commands",
    "python tools/bench_ddp.py --gpus 1 2": "test_multi_gpu_commands",
    "python tools/bench_ddp.py --device cpu --gpus 1 2 --frames 8 --beams 16 --azimuth 512 --steps 2": "test_multi_gpu_commands",
    # docs/deploy.md: the C++ face
    "cmake -S . -B build/cmake -DCMAKE_PREFIX_PATH=\"$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')\"": CI,
    'cmake --build build/cmake -j "$(nproc)"': CI,
    "cmake --install build/cmake --prefix build/prefix": CI,
    "cmake -S examples/cpp -B build/examples -DCMAKE_PREFIX_PATH=\"$PWD/build/prefix;$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')\" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed": CI,
    'cmake --build build/examples -j "$(nproc)"': CI,
    "python examples/cpp/export_models.py --out build/models": CI,
    "build/examples/run_scripted build/models": CI,
    "build/examples/cloud_tool build/models/scene.ply --save build/models/cloud_tool.pt": CI,
    "python examples/cpp/export_models.py --out build/models --check-cloud build/models/cloud_tool.pt": CI,
    "build/examples/cloud_tool build/models/scene.bin": CI,
    "cmake -S tests/cpp -B build/api_test -DCMAKE_PREFIX_PATH=\"$PWD/build/prefix;$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')\"": CI,
    "cmake --build build/api_test": CI,
    "python tests/cpp/write_api_cases.py build/api_cases.pt": CI,
    "build/api_test/test_api build/api_cases.pt": CI,
}


def shell_commands(path):
    """(line number, command) of every command line in the ```bash blocks of a Markdown file."""
    text = open(os.path.join(ROOT, path)).read()
    for match in SHELL_FENCE.finditer(text):
        first = text.count("\n", 0, match.start(1)) + 1
        for offset, line in enumerate(match.group(1).splitlines()):
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                yield first + offset, command


def documented():
    return {command: f"{path}:{line}" for path in DOCS for line, command in shell_commands(path)}


def test_every_documented_command_has_a_runner():
    found = documented()
    unrun = {c: where for c, where in found.items() if c not in COMMANDS}
    assert not unrun, f"documented commands that nothing runs (add them to COMMANDS and run them): {unrun}"
    stale = sorted(set(COMMANDS) - set(found))
    assert not stale, f"COMMANDS lists commands the docs no longer show: {stale}"
    tests = {name for name in COMMANDS.values() if name != CI}
    assert tests <= set(globals()), f"runners that do not exist: {sorted(tests - set(globals()))}"


def test_ci_runs_the_readme_commands():
    # .ci/run, and tools/check_deploy.sh which it runs (docs/deploy.md's commands)
    ci = open(os.path.join(ROOT, ".ci", "run")).read() + open(os.path.join(ROOT, "tools", "check_deploy.sh")).read()
    for command, runner in COMMANDS.items():
        if runner == CI:
            for part in command.split(" && "):
                assert part in ci, f".ci/run does not run `{part}` (of `{command}`)"


def test_shell_commands_are_read_from_the_fences(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text("```bash\n# a comment\npip install x   # why\n\n  make \n```\n```python\nno = 1\n```\n")
    assert list(shell_commands(str(sample))) == [(3, "pip install x"), (5, "make")]


# ---- slow: the commands in a fresh environment --------------------------------------------------


class Fresh:
    """A fresh virtual environment with this torch release, and a clean copy of the checkout."""

    def __init__(self, base):
        self.base = base
        self.copy = os.path.join(base, "pointops-src")
        self.venv = os.path.join(base, "venv")
        self.elsewhere = os.path.join(base, "elsewhere")
        os.makedirs(self.elsewhere)
        for name in source_files():
            os.makedirs(os.path.join(self.copy, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(self.copy, name))
        self.log = []
        self.shell(f"{sys.executable} -m venv {self.venv}", cwd=base)
        version = torch.__version__.split("+")[0]
        self.shell(f"pip install --disable-pip-version-check torch=={version} numpy", cwd=base)

    def env(self):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["PATH"] = os.path.join(self.venv, "bin") + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = self.venv
        return env

    def shell(self, command, cwd=None, timeout=3600):
        """Runs command with bash in the copy (or cwd), the environment's bin/ first on PATH."""
        start = time.perf_counter()
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd or self.copy,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        seconds = time.perf_counter() - start
        self.log.append((command, seconds, result.returncode))
        print(f"[{seconds:6.1f} s] rc {result.returncode}: {command}", flush=True)
        assert result.returncode == 0, f"`{command}` failed:\n{(result.stdout + result.stderr)[-4000:]}"
        return result

    def doc(self, command):
        """A documented command, as the docs write it."""
        assert command in COMMANDS and command in documented(), command
        return self.shell(command)

    def which_pointops(self):
        """The pointops that this environment's python imports from a folder outside the copy, and
        one op run on it."""
        code = (
            "import pointops, torch; print(pointops.__file__); "
            "print(torch.ops.pointops.fps(torch.rand(1, 50, 3), None, None, 4)[0].shape)"
        )
        out = self.shell(f"python -c '{code}'", cwd=self.elsewhere).stdout.split("\n")
        assert out[1] == "torch.Size([1, 4])", out
        return out[0]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    environment = Fresh(str(tmp_path_factory.mktemp("doc-commands")))
    yield environment
    print("\n".join(f"{seconds:7.1f} s  rc {rc}  {command}" for command, seconds, rc in environment.log))


def site_packages(fresh):
    return glob.glob(os.path.join(fresh.venv, "lib", "python*", "site-packages"))[0]


@pytest.mark.slow
def test_wheel_build_and_install(fresh):
    fresh.doc("pip install build ninja wheel && python -m build --no-isolation --wheel")
    wheels = glob.glob(os.path.join(fresh.copy, "dist", "pointops-*.whl"))
    assert len(wheels) == 1, wheels
    fresh.doc("pip install dist/pointops-*.whl")
    assert fresh.which_pointops() == os.path.join(site_packages(fresh), "pointops", "__init__.py")


@pytest.mark.slow
def test_install_from_source(fresh):
    result = fresh.doc("pip install --no-build-isolation .")
    assert "Successfully installed pointops" in result.stdout, result.stdout[-2000:]
    assert fresh.which_pointops() == os.path.join(site_packages(fresh), "pointops", "__init__.py")
    fresh.doc("pip install --no-build-isolation -e .")
    assert fresh.which_pointops() == os.path.join(fresh.copy, "pointops", "__init__.py")


@pytest.mark.slow
def test_extras(fresh):
    fresh.doc("pip install --no-build-isolation '.[io]'")
    fresh.doc("pip install --no-build-isolation '.[demo]'")
    fresh.doc("pip install 'plyfile==1.1.5' 'pypcd4==1.5.1' 'laspy==2.7.0' 'lazrs==0.8.2' 'trimesh==5.2.0'")
    fresh.doc("pip install 'matplotlib==3.11.2'")
    fresh.shell("python -c 'import plyfile, pypcd4, laspy, lazrs, trimesh, matplotlib'", cwd=fresh.elsewhere)


@pytest.mark.slow
def test_demo_commands(fresh):
    pytest.importorskip("matplotlib", reason="compares the pictures with matplotlib's PNG reader")
    out = fresh.doc("python -m pointops.demo --out out/demo").stdout
    assert out.count("wrote out/demo/") == 7, out
    fresh.doc("python -m pointops.demo --out docs/pictures --device cpu")
    # Redrawn on the CPU, the committed pictures come out the same (the PNG files may differ in
    # their metadata; the pixels may not).
    import matplotlib.image

    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "pictures", "*.png"))):
        redrawn = os.path.join(fresh.copy, "docs", "pictures", os.path.basename(path))
        assert (matplotlib.image.imread(path) == matplotlib.image.imread(redrawn)).all(), path


@pytest.mark.slow
def test_multi_gpu_commands(fresh):
    if os.path.exists("/tmp/ddp"):
        shutil.rmtree("/tmp/ddp")
    fresh.doc("torchrun --nproc-per-node=2 examples/ddp_pipeline.py --frames 16 --out /tmp/ddp")
    assert sorted(os.listdir("/tmp/ddp")) == ["rank0_of2.pt", "rank1_of2.pt"]
    table = fresh.doc(
        "python tools/bench_ddp.py --device cpu --gpus 1 2 --frames 8 --beams 16 --azimuth 512 --steps 2"
    ).stdout
    assert "scaling" in table and "grew most from 1 to 2 ranks" in table, table
    # On the CPU its defaults are small; on two GPUs this is the lead's measurement (docs/multi_gpu.md).
    if torch.cuda.device_count() != 1:
        fresh.doc("python tools/bench_ddp.py --gpus 1 2")
