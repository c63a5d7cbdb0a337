"""The scripts in tools/ and what they share (run it to list the scripts and what each measures).

What they share imports nothing heavy: `--help` must answer at once, so a
script builds its parser and parses before it imports torch or pointops; long runs print one
progress line per item with an estimate of the time left; results end in a plain text table.

    parser = cli.parser(__doc__)          # description: the docstring's first paragraph
    args = parser.parse_args()            # --help answers here, before the heavy imports
    progress = cli.Progress(len(items), "scenes")
    for item in items:
        ...
        progress.step(f"scene {item}: recall {r:.2f}")   # [3/50] scene 2: recall 1.00 | 4.1 s, about 3 min left
    print(cli.table(rows, [("layout", "layout", ""), ("recall", "recall", ".3f")]))
"""

import argparse
import os
import sys
import time

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)


def parser(doc, **options):
    """An ArgumentParser whose description is the docstring's first paragraph, and whose epilog is
    the rest (usage examples, what each column means), laid out as written."""
    head, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(
        description=head, epilog=rest or None, formatter_class=argparse.RawDescriptionHelpFormatter, **options
    )


def default_device(name=None):
    """name, or "cuda" when torch sees a GPU, else "cpu" (imports torch: call it after parsing)."""
    if name:
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def duration(seconds):
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """One line per finished item on stderr (stdout stays for results):
    ``[3/50] what | 12 s, about 3 min left``; the estimate is the mean time per item so far times
    the items left."""

    def __init__(self, total, label="items", stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()

    def step(self, what=""):
        self.done += 1
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * (self.total - self.done)
        tail = (
            f"{duration(elapsed)}, about {duration(left)} left"
            if self.done < self.total
            else f"done in {duration(elapsed)}"
        )
        width = len(str(self.total))
        print(f"[{self.done:>{width}}/{self.total}] {what}{' | ' if what else ''}{tail}", file=self.stream, flush=True)


def _cell(value, fmt):
    if value is None or value == "":
        return "-"
    if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, fmt)
    return str(value)


def table(rows, columns, title=None):
    """rows: dicts; columns: (key, header, format spec) triples (format applies to numbers; a
    missing value is "-"). Text columns align left, numbers right."""
    cells = [[_cell(row.get(key), fmt) for key, _, fmt in columns] for row in rows]
    headers = [header for _, header, _ in columns]
    numeric = [
        all(isinstance(row.get(key), (int, float)) or row.get(key) is None for row in rows) for key, _, _ in columns
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = ([title] if title else []) + [line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells]
    return "\n".join(out)


# The columns of a benchmark row (tools/bench.py and the bench_<family>.py rows it runs).
BENCH_COLUMNS = [
    ("op", "op", ""),
    ("case", "case", ""),
    ("size", "size", ""),
    ("device", "device", ""),
    ("ms", "ms", ".3f"),
    ("baseline_ms", "baseline ms", ".3f"),
    ("ratio", "baseline / ms", ".2f"),
]
SIZE_KEYS = ("B", "N", "M", "P", "k", "K", "V", "F", "H", "W")


def bench_table(results):
    """The summary table of benchmark rows: op, case, sizes, device, median ms, baseline ms and
    their ratio (how many times faster than the in-repo baseline)."""
    rows = []
    for r in results:
        if "op" not in r:
            continue
        size = " ".join(f"{k}={r[k]}" for k in SIZE_KEYS if isinstance(r.get(k), (int, float)))
        case = r.get("case", r.get("variant", r.get("plan", "")))
        rows.append({**r, "case": case, "size": size})
    return table(rows, BENCH_COLUMNS, title=f"{len(rows)} rows (ms: median time of one call)")


# ---- tools/bench.py and its rows -------------------------------------------------------------


def family_ops():
    """{module name: OPS} of every tools/bench_<family>.py, read from the files (no import)."""
    import ast
    import glob

    found = {}
    for path in sorted(glob.glob(os.path.join(TOOLS, "bench_*.py"))):
        for node in ast.parse(open(path).read()).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["OPS"]:
                found[os.path.splitext(os.path.basename(path))[0]] = ast.literal_eval(node.value)
    return found


def bench_parser(doc, ops=None):
    """tools/bench.py's command line; a bench_<family>.py run alone passes its own OPS as the default."""
    every = [op for family in family_ops().values() for op in family]
    p = parser(doc)
    p.add_argument(
        "--ops",
        nargs="*",
        default=ops or every,
        metavar="OP",
        help=f"the ops to time (default: {' '.join(ops or every)})",
    )
    p.add_argument("--quick", action="store_true", help="the first sizes only")
    p.add_argument("--full", action="store_true", help="the GPU's sizes on the CPU too (where a family has CPU sizes)")
    p.add_argument("--device", help="cuda or cpu (default: cuda when a GPU is visible)")
    p.add_argument("--json", help="also write the JSON lines here")
    p.add_argument("--plot", help="write a PNG of the ratios here")
    return p


def run_bench_rows(doc, ops):
    """A bench_<family>.py run as a script: tools/bench.py's command line with these ops by
    default (parsed before torch loads), then its run."""
    run(bench_parser(doc, ops).parse_args())
    return 0


def size_label(row, separator=" "):
    keys = [k for k in ("B", "N", "P", "k", "V", "K", "F") if k in row]
    grid = f"{row['H']}x{row['W']}" if "H" in row else ""
    return separator.join([" ".join(f"{k}={row[k]}" for k in keys), grid]).strip()


def plot(results, path):
    """A PNG of the rows' ratios to their baselines (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if "ratio" in r]
    if not rows:
        return
    labels = [r["op"] + "\n" + size_label(r, "\n") for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    ax.bar(range(len(rows)), [r["ratio"] for r in rows])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("speed-up over in-repo baseline")
    ax.set_title(f"pointops on {rows[0]['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def family_benches():
    """tools/bench_<family>.py modules with rows for the bench, found by name (family_ops) and
    imported by importlib: each has OPS (the op names it times) and run(device, quick, ops,
    results), which appends its rows to results. They import the timing helpers of
    tools/bench.py; the run below is here so that bench.py and cli.py do not import each other."""
    import importlib

    sys.path.insert(0, TOOLS)
    return [importlib.import_module(name) for name in family_ops()]


def run(args):
    """Time args.ops on args.device (default: cuda when available) and print the rows as JSON lines,
    then as a table (tools/bench.py's run; imports torch through the families)."""
    import inspect
    import json

    device = default_device(args.device)
    results = []
    for module in family_benches():
        if any(op in args.ops for op in module.OPS):
            # the options a family's run takes by name (--full; a family's own, as bench_compat's --openpcdet)
            params = inspect.signature(module.run).parameters
            options = {k: v for k, v in vars(args).items() if k in params and k not in ("device", "quick", "ops")}
            module.run(device, args.quick, args.ops, results, **options)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in results)
    if args.plot:
        plot(results, args.plot)
    print(bench_table(results), flush=True)
    return results


def scripts():
    """(file name, first line of its docstring) of every script in tools/, read without importing."""
    import ast
    import glob

    found = []
    for path in sorted(glob.glob(os.path.join(TOOLS, "*.py")) + sorted(glob.glob(os.path.join(TOOLS, "*.sh")))):
        text = open(path).read()
        if path.endswith(".py"):
            doc = ast.get_docstring(ast.parse(text)) or ""
        else:  # the comment block after the shebang, up to its first full stop
            doc = " ".join(line.lstrip("# ").strip() for line in text.splitlines()[1:4] if line.startswith("#"))
            doc = doc.split(". ")[0].split(": ")[0].rstrip(".")
        found.append((os.path.basename(path), doc.strip().splitlines()[0] if doc.strip() else ""))
    return found


if __name__ == "__main__":
    parser(__doc__).parse_args()
    print(
        table(
            [{"script": f"tools/{name}", "what": what} for name, what in scripts()],
            [("script", "script", ""), ("what", "what it does", "")],
        )
    )
