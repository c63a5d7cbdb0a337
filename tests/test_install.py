"""Packaging and install paths (docs/install.md): the version has one source, an installed package
ships configs/, a missing extension or torch gets a message that says what to do, and a rebuild
compiles nothing that did not change.

The cheap tests run everywhere. The slow ones (POINTOPS_SLOW_TESTS=1; CI runs them) build a
CPU-only wheel from a clean copy of the checkout, install it into a folder and use it from
elsewhere, then check that rebuilding that copy (in place and editable) compiles nothing.
"""

import glob
import importlib.machinery
import os
import re
import shutil
import subprocess
import sys

import pytest

import pointops

PACKAGE = os.path.dirname(os.path.abspath(pointops.__file__))
ROOT = os.path.dirname(PACKAGE)
IN_CHECKOUT = os.path.isfile(os.path.join(ROOT, "setup.py"))
needs_checkout = pytest.mark.skipif(not IN_CHECKOUT, reason="needs the source checkout (setup.py)")


def run_python(args, cwd, env_update=None, timeout=600, drop=("PYTHONPATH",)):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_update or {})
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def source_files(root=ROOT):
    """The checkout's files as a fresh clone has them: git's tracked and unignored ones, or a walk
    without build outputs when git is missing."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.split("\n")
        return [f for f in listed if f and os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "build", "__pycache__", ".pytest_cache"}
        found = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
            found += [
                os.path.relpath(os.path.join(folder, f), root)
                for f in files
                if not f.startswith("_C.") and not f.endswith(".pyc")
            ]
        return found


# An editable install (pip install -e) of some checkout adds a finder that resolves pointops' submodules,
# _C included, in that checkout whichever pointops folder was imported; the subprocesses that stand
# for another layout drop it, as that layout's environment would not have it.
WITHOUT_EDITABLE = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]; "
)


def copy_package(destination):
    """pointops' Python files (no compiled extension) into destination/pointops."""
    shutil.copytree(
        PACKAGE, os.path.join(destination, "pointops"), ignore=shutil.ignore_patterns("_C.*", "__pycache__", "configs")
    )


# ---- version -------------------------------------------------------------------------------------


def test_version_has_one_source():
    with open(os.path.join(PACKAGE, "_version.py")) as f:
        written = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    assert pointops.__version__ == written
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc|\.dev|\.post)?\d*", written), written


@needs_checkout
def test_setup_reads_the_version_file():
    result = run_python(["setup.py", "--version"], ROOT, {"POINTOPS_NO_CUDA": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == pointops.__version__


# ---- clear errors ------------------------------------------------------------------------------


def test_missing_extension_says_how_to_build(tmp_path):
    copy_package(tmp_path)
    result = run_python(["-c", WITHOUT_EDITABLE + "import pointops"], tmp_path)
    assert result.returncode != 0
    assert "has no compiled extension" in result.stderr, result.stderr[-2000:]
    assert "tools/install.sh" in result.stderr and "--no-build-isolation" in result.stderr
    assert "circular import" not in result.stderr.splitlines()[-1]


def test_checkout_shadowing_an_installed_package_is_named(tmp_path):
    """A source checkout in the current directory hides the pointops installed with pip."""
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    copy_package(checkout)
    copy_package(site)
    info = site / "pointops-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pointops\nVersion: 0.0.0\n")
    (info / "RECORD").write_text("pointops/__init__.py,,\npointops-0.0.0.dist-info/METADATA,,\n")
    result = run_python(["-c", WITHOUT_EDITABLE + "import pointops"], checkout, {"PYTHONPATH": str(site)}, drop=())
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert "source checkout without its compiled extension" in message, result.stderr[-2000:]
    assert str(site / "pointops") in message and "another directory" in message


def test_broken_extension_says_rebuild(tmp_path):
    copy_package(tmp_path)
    (tmp_path / "pointops" / ("_C" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not a library")
    result = run_python(["-c", WITHOUT_EDITABLE + "import pointops"], tmp_path)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert "did not load" in message and "rebuild" in message, result.stderr[-2000:]


@needs_checkout
def test_build_without_torch_says_no_build_isolation():
    """What pip shows when it builds in an isolated environment (or torch is not installed)."""
    code = (
        "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['setup.py', '--version']; "
        "runpy.run_path('setup.py', run_name='__main__')"
    )
    result = run_python(["-c", code], ROOT)
    assert result.returncode != 0
    assert "pip install --no-build-isolation ." in result.stderr, result.stderr[-2000:]
    assert "Install torch first" in result.stderr


@needs_checkout
def test_cuda_build_without_gpu_targets_hopper():
    """Without a visible GPU and without TORCH_CUDA_ARCH_LIST, torch's own default fails
    (IndexError in _get_cuda_arch_flags); setup.py picks Hopper."""
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if not os.path.isfile(os.path.join(cuda_home, "bin", "nvcc")):
        pytest.skip("no CUDA toolkit")
    code = (
        "import os, runpy, sys; sys.argv = ['setup.py', '--version']; "
        "runpy.run_path('setup.py', run_name='__main__'); "
        "print('ARCH', os.environ['TORCH_CUDA_ARCH_LIST'])"
    )
    result = run_python(
        ["-c", code],
        ROOT,
        {"FORCE_CUDA": "1", "CUDA_VISIBLE_DEVICES": ""},
        drop=("PYTHONPATH", "TORCH_CUDA_ARCH_LIST", "POINTOPS_NO_CUDA"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ARCH 9.0+PTX" in result.stdout
    assert "TORCH_CUDA_ARCH_LIST=9.0+PTX" in result.stderr


# ---- what an installed package holds ----------------------------------------------------------


@needs_checkout
def test_built_package_ships_configs(tmp_path):
    """setup.py's build_py lays out the package as a wheel has it: the top-level configs/*.yaml
    become pointops/configs, where importlib.resources finds them once installed."""
    configs = sorted(os.path.basename(f) for f in glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
    if not configs:
        pytest.skip("no configs/*.yaml in this checkout")
    extension = glob.glob(os.path.join(PACKAGE, "_C.*"))
    if not extension:
        pytest.skip("the extension is not built in place")
    lib = tmp_path / "lib"
    result = run_python(["setup.py", "-q", "build_py", "--build-lib", str(lib)], ROOT, {"POINTOPS_NO_CUDA": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in (lib / "pointops" / "configs").glob("*.yaml")) == configs
    shutil.copy(extension[0], lib / "pointops")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_python(["-c", WITHOUT_EDITABLE + USE_INSTALLED], elsewhere, {"PYTHONPATH": str(lib)}, drop=())
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"FILE {lib / 'pointops' / '__init__.py'}" in result.stdout
    assert f"CONFIGS {configs}" in result.stdout


# What a user of an installed pointops does: import it, find the YAML presets, run an op.
USE_INSTALLED = """
import importlib.resources, torch, pointops
print("FILE", pointops.__file__)
print("VERSION", pointops.__version__)
print("CONFIGS", sorted(p.name for p in importlib.resources.files("pointops").joinpath("configs").iterdir()
                        if p.name.endswith(".yaml")))
print("OP", torch.ops.pointops.fps(torch.rand(1, 50, 3), None, None, 4)[0].shape)
"""


# ---- slow: a wheel from a clean copy, and rebuilds ---------------------------------------------


@pytest.fixture(scope="module")
def clean_build(tmp_path_factory):
    """A clean copy of the checkout with a CPU-only wheel built from it (every source compiled)."""
    if not IN_CHECKOUT:
        pytest.skip("needs the source checkout")
    base = tmp_path_factory.mktemp("clean")
    copy = base / "pointops-src"
    for name in source_files():
        os.makedirs(copy / os.path.dirname(name), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, name), copy / name)
    env = {"POINTOPS_NO_CUDA": "1", "MAX_JOBS": os.environ.get("MAX_JOBS", "2")}
    result = run_python(
        ["-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w", str(base / "dist"), str(copy)],
        base,
        env,
        timeout=3600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    wheels = glob.glob(str(base / "dist" / "pointops-*.whl"))
    assert len(wheels) == 1, wheels
    return base, copy, wheels[0], env


@pytest.mark.slow
def test_wheel_installs_and_imports_elsewhere(clean_build, tmp_path):
    base, copy, wheel, env = clean_build
    assert os.path.basename(wheel).startswith(f"pointops-{pointops.__version__}-")
    site = tmp_path / "site"
    result = run_python(["-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    result = run_python(["-c", WITHOUT_EDITABLE + USE_INSTALLED], tmp_path, {"PYTHONPATH": str(site)}, drop=())
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"FILE {site / 'pointops' / '__init__.py'}" in result.stdout
    assert f"VERSION {pointops.__version__}" in result.stdout
    configs = sorted(os.path.basename(f) for f in glob.glob(str(copy / "configs" / "*.yaml")))
    assert f"CONFIGS {configs}" in result.stdout
    assert "OP torch.Size([1, 4])" in result.stdout
    # Python run from the (unbuilt) checkout finds its pointops folder first: a clear message.
    result = run_python(["-c", WITHOUT_EDITABLE + "import pointops"], copy, {"PYTHONPATH": str(site)}, drop=())
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert "source checkout without its compiled extension" in message and str(site / "pointops") in message


@pytest.mark.slow
def test_rebuilds_compile_nothing(clean_build):
    """After the wheel, an in-place build and an editable build (what pip install -e runs) of the
    same copy reuse every object: ninja has no work."""
    base, copy, wheel, env = clean_build
    result = run_python(["setup.py", "build_ext", "--inplace"], copy, env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ninja: no work to do." in result.stdout, result.stdout[-3000:]
    assert glob.glob(str(copy / "pointops" / "_C.*"))
    code = "from setuptools import build_meta; print('EDITABLE', build_meta.build_editable(%r))" % str(
        base / "editable"
    )
    result = run_python(["-c", code], copy, env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ninja: no work to do." in result.stdout, result.stdout[-3000:]
    assert "EDITABLE pointops-" in result.stdout
