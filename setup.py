"""Build pointops._C.

CPU sources are always compiled. CUDA sources are added when the build can compile them
(a CUDA build of torch and a CUDA toolkit) or FORCE_CUDA=1; POINTOPS_NO_CUDA=1 forces a
CPU-only build. The decision never looks at torch.cuda.is_available(): a build machine
without a GPU (CI, Docker) still compiles and links the CUDA kernels.
"""
import glob
import os
import sys

# torch.utils.cpp_extension guesses CUDA_HOME from `which nvcc`; on machines where nvcc is
# a symlink in /usr/local/bin that guess is /usr/local, which has no CUDA headers.
if "CUDA_HOME" not in os.environ and os.path.isdir("/usr/local/cuda/include"):
    os.environ["CUDA_HOME"] = "/usr/local/cuda"

import torch  # noqa: E402
from setuptools import find_packages, setup  # noqa: E402
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))

# pointops.io's file-format libraries (pip install '.[io]'): exact versions, the ones the tests ran
# with. tools/install.sh installs the same list; tests/test_io.py checks that the two agree.
IO_REQUIRES = ["plyfile==1.1.5", "pypcd4==1.5.1", "laspy==2.7.0", "lazrs==0.8.2", "trimesh==5.2.0"]


def _env_flag(name):
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


def _with_cuda():
    if _env_flag("POINTOPS_NO_CUDA"):
        return False
    if _env_flag("FORCE_CUDA"):
        return True
    return torch.version.cuda is not None and CUDA_HOME is not None


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


def _extension():
    debug = _env_flag("DEBUG")
    cpp_sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True))
    cuda_sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cu"), recursive=True))
    cxx_flags = ["-O0", "-g"] if debug else ["-O3"]
    # Host arithmetic must round like the device's (csrc/common/portable_math.h): never let g++
    # fuse a * b + c on its own, even when CFLAGS enable FMA instructions.
    cxx_flags += ["-fdiagnostics-color=always", "-ffp-contract=off"]
    include_dirs = [os.path.join(ROOT, "csrc")]
    if not _with_cuda():
        return CppExtension(
            "pointops._C", cpp_sources, include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags},
        )
    nvcc_flags = ["-O0", "-g", "-G"] if debug else ["-O3", "-lineinfo"]
    # No --use_fast_math: kernels must round exactly like the CPU twins (explicit fmaf).
    nvcc_flags += ["--expt-relaxed-constexpr"]
    for folder in _library_header_dirs():
        cxx_flags += ["-isystem", folder]
        nvcc_flags += ["-isystem", folder]
    return CUDAExtension(
        "pointops._C", cpp_sources + cuda_sources, include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )


setup(
    name="pointops",
    version="0.1.0",
    description="Batched, exact GPU point-cloud operators for PyTorch (torch.ops.pointops.*)",
    packages=find_packages(include=["pointops", "pointops.*"]),
    package_data={"pointops": ["configs/*.yaml"]},
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.9",
    install_requires=["torch", "numpy"],
    extras_require={"io": IO_REQUIRES},
)
