"""Sample inputs for every registered pointops operator and every public wrapper: the registration
harness' tables.

Each family keeps its entries in tests/samples_<family>.py (dicts OP_SAMPLES, op name without the
namespace -> sample argument tuples for a device, and WRAPPER_CASES, public function -> positional
arguments on a device); they are merged here. test_operators.py runs them all through opcheck,
compile, script, export and the stream/device tests, and fails if an operator has no samples.
"""

import glob
import importlib
import os
from typing import Callable, Dict, List, NamedTuple

OP_SAMPLES: Dict[str, Callable[[str], List[tuple]]] = {}


class WrapperCase(NamedTuple):
    fn: Callable
    make_args: Callable[[str], tuple]  # positional arguments on a device


WRAPPER_CASES: Dict[str, WrapperCase] = {}


def _merge_family_samples() -> None:
    for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "samples_*.py"))):
        module = importlib.import_module("tests." + os.path.splitext(os.path.basename(path))[0])
        for table, extra in ((OP_SAMPLES, module.OP_SAMPLES), (WRAPPER_CASES, module.WRAPPER_CASES)):
            clash = set(table) & set(extra)
            assert not clash, f"{path} repeats sample names {sorted(clash)}"
            table.update(extra)


_merge_family_samples()
