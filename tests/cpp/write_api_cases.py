"""Writes the cases tests/cpp/test_api.cpp runs: every op's registration samples (tests/samples_*.py)
with all of the schema's arguments filled in (defaults included) and the outputs torch.ops.pointops
gives for them in Python.

    python tests/cpp/write_api_cases.py OUT.pt [--device cpu cuda]
"""

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import pointops  # noqa: E402, F401  (registers the ops; imported after sys.path names the checkout)
from tests.op_samples import OP_SAMPLES  # noqa: E402


def as_schema_type(value, kind):
    """Python's ints where the schema says float become floats: C++ reads an IValue by its tag."""
    if value is None:
        return None
    if kind in ("float", "Optional[float]"):
        return float(value)
    if kind in ("List[float]", "Optional[List[float]]"):
        return [float(v) for v in value]
    if kind in ("List[int]",):
        return [int(v) for v in value]
    if kind == "List[bool]":
        return [bool(v) for v in value]
    return value


def full_arguments(schema, sample):
    """The sample's positional arguments plus the schema's defaults for the rest, in the schema's types."""
    args = list(sample)
    for arg in schema.arguments[len(args) :]:
        if not arg.has_default_value():
            raise ValueError(f"{schema.name}: sample gives no {arg.name}")
        args.append(arg.default_value)
    return [as_schema_type(value, str(arg.type)) for value, arg in zip(args, schema.arguments)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--device", nargs="+", default=["cpu"], choices=["cpu", "cuda"])
    args = parser.parse_args()
    cases = []
    for device in args.device:
        for name, make in sorted(OP_SAMPLES.items()):
            op = getattr(torch.ops.pointops, name).default
            for sample in make(device):
                full = full_arguments(op._schema, sample)
                out = op(*full)
                outputs = [out] if isinstance(out, torch.Tensor) else list(out)
                cpu = [a.cpu() if isinstance(a, torch.Tensor) else a for a in full]
                cases.append((name, device, cpu, [o.detach().cpu() for o in outputs]))
    torch.save(cases, args.out)
    print(f"{len(cases)} cases of {len({c[0] for c in cases})} ops written to {args.out}")


if __name__ == "__main__":
    main()
