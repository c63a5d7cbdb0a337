"""Build and package pointops (the Python package and its compiled extension pointops._C).

Install with the torch you already have (docs/install.md):
    pip install --no-build-isolation .          # or -e . for a development install
    FORCE_CUDA=1 pip install --no-build-isolation .   # CUDA kernels too, with no GPU in sight
CPU sources are always compiled. CUDA sources are added when a GPU is visible to the build (and
torch is a CUDA build and a CUDA toolkit is found), or whenever FORCE_CUDA=1; POINTOPS_NO_CUDA=1
forces a CPU-only build. So a machine without a GPU compiles the C++ sources only (a few
minutes on 2 cores), and a build machine that ships or checks the CUDA kernels without a GPU (CI,
Docker) sets FORCE_CUDA=1, as torch_cluster, mmcv and pytorch3d ask too. Without a GPU the CUDA
kernels are built for Hopper (TORCH_CUDA_ARCH_LIST=9.0+PTX) unless TORCH_CUDA_ARCH_LIST says
otherwise; with GPUs, for the visible ones. The build prints one line saying which it does and why.

Objects are kept in build/temp.* for every way of building (setup.py build_ext --inplace,
pip install ., pip install -e .), and ninja recompiles only the sources whose text, headers
or flags changed, so a rebuild after a small change takes seconds, not minutes.
"""

import glob
import os
import re
import sys
import sysconfig

ROOT = os.path.dirname(os.path.abspath(__file__))

try:
    import torch
except ImportError:
    isolated = any("pip-build-env-" in entry for entry in sys.path)
    sys.exit(
        "pointops compiles its extension against the torch of the environment that builds it, and "
        "that environment has no torch"
        + (" (pip builds in an isolated environment, which hides an installed torch)" if isolated else "")
        + ".\n  1. Install torch first (pip install torch), unless it is installed already.\n"
        "  2. Build against it, without pip's build isolation:\n"
        "       pip install --no-build-isolation .       (or -e . for an editable install)\n"
        "See docs/install.md."
    )

# torch.utils.cpp_extension guesses CUDA_HOME from `which nvcc`; on machines where nvcc is a
# symlink in /usr/local/bin that guess is /usr/local, which has no CUDA headers.
if "CUDA_HOME" not in os.environ and os.path.isdir("/usr/local/cuda/include"):
    os.environ["CUDA_HOME"] = "/usr/local/cuda"

from setuptools import find_packages, setup  # noqa: E402  (with the torch import below, after CUDA_HOME is set)
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402  (after CUDA_HOME is set, which it reads)

# The GPU architecture built for when no GPU is visible and TORCH_CUDA_ARCH_LIST is unset: Hopper
# (H100/H200), the target the CUDA kernels are tuned for, plus its PTX so that newer GPUs can
# compile the kernels when they load them.
DEFAULT_CUDA_ARCH = "9.0+PTX"


def _version():
    with open(os.path.join(ROOT, "pointops", "_version.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _env_flag(name):
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


def _cuda_choice():
    """(compile the CUDA sources?, why); the build prints both (every run of setup.py decides anew)."""
    if _env_flag("POINTOPS_NO_CUDA"):
        return False, "POINTOPS_NO_CUDA is set"
    if _env_flag("FORCE_CUDA"):
        return True, "FORCE_CUDA is set"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU-only build"
    if CUDA_HOME is None:
        return False, "no CUDA toolkit (nvcc) was found; set CUDA_HOME"
    if not torch.cuda.is_available():
        return False, "no GPU is visible; FORCE_CUDA=1 compiles the CUDA kernels anyway"
    return True, "a GPU is visible"


def _set_cuda_arch_list():
    """Without TORCH_CUDA_ARCH_LIST torch builds for the visible GPUs, and fails with an IndexError
    when there is none; build for DEFAULT_CUDA_ARCH then."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return  # torch's default: every visible GPU's architecture, the newest also as PTX
    os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_CUDA_ARCH
    print(
        f"pointops: no GPU visible; building the CUDA kernels for TORCH_CUDA_ARCH_LIST="
        f"{DEFAULT_CUDA_ARCH} (set TORCH_CUDA_ARCH_LIST to choose others, POINTOPS_NO_CUDA=1 to "
        "skip CUDA)",
        file=sys.stderr,
    )


def _library_header_dirs():
    """Header folders of the CUDA library wheels that a pip CUDA build of torch depends on.

    Minimal CUDA toolkits (compiler only) lack cusparse.h / cublas_v2.h, which torch's CUDA headers
    include. They come as -isystem, searched after the toolkit's own -I folder, so the toolkit's
    headers win wherever both have one.
    """
    if os.path.isfile(os.path.join(CUDA_HOME or "", "include", "cusparse.h")):
        return []
    found = []
    for entry in sys.path:
        found += glob.glob(os.path.join(entry, "nvidia", "*", "include"))
        found += glob.glob(os.path.join(entry, "nvidia", "*", "*", "include"))
    return sorted({d for d in found if os.path.isfile(os.path.join(d, "cusparse.h"))})


def _openmp_flags():
    """-fopenmp where torch's intra-op backend is OpenMP (torch's Linux wheels): at::parallel_for
    is inline in torch's headers and runs its body on the threads only when the including source
    is compiled with _OPENMP defined; without the flag every CPU kernel runs on one thread. Only
    the compiler gets the flag: the extension's GOMP calls bind to the libgomp that libtorch_cpu
    already loaded (one OpenMP runtime and one thread pool in the process)."""
    import torch

    if sys.platform == "darwin" or "ATen parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return []
    return ["-fopenmp"]


def _sources(*patterns):
    # Relative paths: setuptools wants them so for sdists, and they keep ninja's commands the same
    # whichever way the build was started.
    return sorted(p for pattern in patterns for p in glob.glob(os.path.join("csrc", "**", pattern), recursive=True))


def _extension():
    debug = _env_flag("DEBUG")
    cpp_sources = _sources("*.cpp")
    cuda_sources = _sources("*.cu")
    headers = _sources("*.h", "*.cuh") + sorted(glob.glob(os.path.join("include", "pointops", "*.h")))
    # Python's own CFLAGS carry -g; debug information is a quarter of a C++ source's compile time
    # and 40 times the object's size, and nobody debugs a release build: -g0 unless DEBUG=1.
    cxx_flags = ["-O0", "-g"] if debug else ["-O3", "-g0"]
    # Host arithmetic must round like the device's (csrc/common/portable_math.h): never let g++
    # fuse a * b + c on its own, even when CFLAGS enable FMA instructions.
    cxx_flags += ["-fdiagnostics-color=always", "-ffp-contract=off"]
    cxx_flags += _openmp_flags()
    include_dirs = [os.path.join(ROOT, "csrc"), os.path.join(ROOT, "include")]
    with_cuda, why = _cuda_choice()
    sources = len(cpp_sources) + (len(cuda_sources) if with_cuda else 0)
    kind = "CPU and CUDA" if with_cuda else "CPU"
    print(f"pointops: compiling the {kind} kernels ({sources} sources): {why}", file=sys.stderr)
    if not with_cuda:
        return CppExtension(
            "pointops._C",
            cpp_sources,
            include_dirs=include_dirs,
            depends=headers,
            extra_compile_args={"cxx": cxx_flags},
        )
    _set_cuda_arch_list()
    nvcc_flags = ["-O0", "-g", "-G"] if debug else ["-O3", "-lineinfo"]
    # No --use_fast_math: kernels must round exactly like the CPU twins (explicit fmaf).
    nvcc_flags += ["--expt-relaxed-constexpr"]
    for folder in _library_header_dirs():
        cxx_flags += ["-isystem", folder]
        nvcc_flags += ["-isystem", folder]
    return CUDAExtension(
        "pointops._C",
        cpp_sources + cuda_sources,
        include_dirs=include_dirs,
        depends=headers,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )


class build_ext(BuildExtension.with_options(use_ninja=True)):  # noqa: N801  (setuptools' command name)
    """torch's BuildExtension (ninja, which already relinks every time and recompiles only what
    changed), with its objects in a folder that outlives the build: pip's editable install builds
    in a fresh temporary folder, which would recompile every source each time."""

    def finalize_options(self):
        super().finalize_options()
        if getattr(self, "editable_mode", False):
            tag = f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
            self.build_temp = os.path.join(ROOT, "build", "temp." + tag)


# Optional dependencies, one extra per line (pip install "pointops[io]"), pinned to the versions
# the tests ran with; tools/install.sh installs io, demo, test and lint from this dict.
EXTRAS = {
    "io": ["plyfile==1.1.5", "pypcd4==1.5.1", "laspy==2.7.0", "lazrs==0.8.2", "trimesh==5.2.0"],
    "demo": ["matplotlib==3.11.2"],
    "test": ["pytest", "hypothesis==6.155.2", "pyyaml==6.0.3", "scikit-image==0.26.0", "scipy==1.17.1"],
    # the linter and formatters .ci/run checks with: ruff (pyproject.toml's [tool.ruff]) and
    # clang-format (.clang-format); the code passes `ruff check`, `ruff format --check` and
    # `clang-format --dry-run` with these versions
    "lint": ["ruff==0.14.14", "clang-format==19.1.7"],
}
EXTRAS["all"] = sorted({package for name, packages in EXTRAS.items() if name != "lint" for package in packages})

# configs/ (YAML presets) lives at the top of the repository; installed, it is pointops/configs,
# where pointops.presets and importlib.resources.files("pointops") find it.
CONFIG_PACKAGE = ["pointops.configs"] if os.path.isdir(os.path.join(ROOT, "configs")) else []

setup(
    name="pointops",
    version=_version(),
    description="Batched, exact point-cloud operators for PyTorch, with CPU and CUDA kernels (torch.ops.pointops.*)",
    long_description=open(os.path.join(ROOT, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    license_files=["LICENSE"],
    python_requires=">=3.9",
    # The extension is compiled against one torch release and only loads with that one.
    install_requires=[f"torch=={'.'.join(torch.__version__.split('+')[0].split('.')[:2])}.*", "numpy"],
    extras_require=EXTRAS,
    packages=find_packages(include=["pointops", "pointops.*"]) + CONFIG_PACKAGE,
    package_dir={package: "configs" for package in CONFIG_PACKAGE},
    package_data={package: ["*.yaml"] for package in CONFIG_PACKAGE},
    ext_modules=[_extension()],
    cmdclass={"build_ext": build_ext},
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C++",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Environment :: GPU :: NVIDIA CUDA",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Scientific/Engineering :: Image Processing",
    ],
)
