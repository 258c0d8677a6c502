"""Runs the benchmark suites and writes DIR/results.json and DIR/summary.md.

    python -m benchmarks.run --device cuda --out DIR [--suites a,b] [--quick]

Writing a suite: add ``benchmarks/suites/<name>.py`` exporting

    def run(rec: benchmarks.common.Recorder, device: torch.device, quick: bool) -> None

It is found automatically. For each case it builds the inputs, a float64 (or
otherwise independent) reference and a dict of methods (zero-argument callables,
``"pyg_fast"`` for ours, the baselines named ``torch_*`` / ``torch_scatter_*`` /
``pyg_*``), then calls ``benchmarks.common.bench_methods(rec, suite, case,
methods, ref, device, rel_tol, budget_for(quick), nbytes=...)``, which checks every method
against the reference and times only those that are right (or calls
``rec.add(suite, case, method, ms, **extra)`` itself). ``case`` is a flat dict
of JSON values, the same for every method timed on that case. ``quick=True``
must finish in seconds on a CPU (small graphs, few sizes): the smoke test runs
every suite that way. Graphs come from ``benchmarks.graphs.load_graph``.

A suite that raises is reported in the summary and the others still run; results
are rewritten after each suite (and every 20 s), so a run cut short keeps them.
"""
import argparse
import importlib
import pkgutil
import time
import traceback
from pathlib import Path
from typing import List, Optional

import torch

import benchmarks.suites
from benchmarks.common import Recorder, warm_up


def available_suites() -> List[str]:
    return sorted(m.name for m in pkgutil.iter_modules(benchmarks.suites.__path__) if not m.name.startswith("_"))


def run_suites(rec: Recorder, device: torch.device, names: List[str], quick: bool,
               paths: Optional[tuple] = None) -> None:
    """Runs each named suite, recording a failure (with its traceback) for any that raises."""
    for name in names:
        start = time.perf_counter()
        print(f"== suite {name} ==", flush=True)
        try:
            importlib.import_module(f"benchmarks.suites.{name}").run(rec, device, quick)
        except Exception:  # one broken suite must not lose the others' results
            rec.add_failure(name, traceback.format_exc())
        print(f"== suite {name}: {time.perf_counter() - start:.1f} s ==", flush=True)
        if paths:
            rec.write(*paths)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", required=True, help="folder for results.json and summary.md")
    parser.add_argument("--suites", default="", help="comma-separated suite names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small graphs and few sizes (smoke run)")
    args = parser.parse_args(argv)

    known = available_suites()
    names = [s for s in args.suites.split(",") if s] or known
    unknown = [s for s in names if s not in known]
    if unknown:
        parser.error(f"unknown suites {unknown}; available: {known}")
    device = torch.device(args.device)
    out = Path(args.out)
    paths = (out / "results.json", out / "summary.md")
    rec = Recorder(device, autosave=paths)
    print("env:", rec.env, flush=True)
    warm_up(device)
    try:
        run_suites(rec, device, names, args.quick, paths)
    except KeyboardInterrupt:  # a time limit (SIGINT from `timeout -s INT`): keep what was measured
        rec.add_failure("run", "interrupted before all suites finished")
    rec.write(*paths)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
