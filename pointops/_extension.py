"""Loads the compiled operators (pointops/_C.*.so), or says plainly why they cannot be loaded.

The library holds no Python module: it is loaded with torch.ops.load_library, as torchvision loads
its own, and registers every torch.ops.pointops operator; the same sources build libpointops for
C++ programs (CMakeLists.txt, docs/deploy.md).

Without this, a missing extension surfaces as Python's "cannot import name '_C' from partially
initialized module 'pointops' (most likely due to a circular import)", which points nowhere near
the cause: most often a source checkout that was never built, or a checkout in the current
directory that hides the pointops installed with pip.
"""

import glob
import importlib.machinery
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD_HINT = (
    "build it in place from {root}: bash tools/install.sh (a .venv with torch), or "
    "pip install --no-build-isolation -e . (the torch you have), or "
    "python setup.py build_ext --inplace; docs/install.md has the details"
)


def load():
    """Load pointops/_C.*.so, which registers every torch.ops.pointops operator; its path."""
    files = extension_files()
    if not files:
        raise ImportError(missing_extension_message("no pointops/_C library"))
    import torch

    try:
        torch.ops.load_library(files[0])
    except OSError as error:
        raise ImportError(missing_extension_message(error)) from error
    return files[0]


def extension_files(folder=HERE):
    """The compiled extension's files in folder (pointops/_C.cpython-311-x86_64-linux-gnu.so, ...)."""
    return sorted(
        f for suffix in importlib.machinery.EXTENSION_SUFFIXES for f in glob.glob(os.path.join(folder, "_C" + suffix))
    )


def installed_copies():
    """Folders of pointops packages installed by pip other than this one (none for an editable
    install of this checkout)."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return []
    found = []
    for dist in metadata.distributions():
        if (dist.metadata["Name"] or "").lower() != "pointops":
            continue
        for f in dist.files or []:
            if str(f).replace("\\", "/") == "pointops/__init__.py":
                folder = os.path.dirname(os.path.abspath(str(dist.locate_file(f))))
                if os.path.realpath(folder) != os.path.realpath(HERE) and folder not in found:
                    found.append(folder)
    return found


def missing_extension_message(error):
    files = extension_files()
    hint = BUILD_HINT.format(root=ROOT)
    if files:
        import torch

        return (
            f"pointops' compiled extension {files[0]} did not load ({error}). It was most likely "
            f"built against another torch or Python than this one (torch {torch.__version__}); "
            f"rebuild it: {hint}."
        )
    others = installed_copies()
    if others:
        return (
            f"pointops was imported from {HERE}, a source checkout without its compiled extension "
            f"(pointops/_C), instead of the pointops installed at {others[0]}: Python finds the "
            "pointops folder of the current directory (or of sys.path's first entries) first. Run "
            f"Python from another directory to use the installed package, or {hint}."
        )
    return (
        f"pointops was imported from {HERE}, which has no compiled extension (pointops/_C, the "
        f"operators' C++/CUDA code): {hint}."
    )


_C = load()
