"""CPU benchmark: segment reduce (sum, mean, max) and weighted SpMM on
arxiv_like, F = 1..128, pyg_fast's C++ kernels against torch's CPU ops
(``index_add_``, ``scatter_reduce_``, ``torch.segment_reduce``, ``torch.sparse.mm``), and the
e2e suites (3-layer GCN, GIN, SAGE, GAT: converted, stock, stock under ``pyg_fast.patch()``) on
cora and arxiv_like (``--no-e2e`` skips them: about 12 minutes on 2 cores).

    python -m benchmarks.cpu_bench [--out benchmarks/results/cpu_results.json] [--features 1,4,...] [--no-e2e]

Writes the records (same format as ``benchmarks.run``) with a ``geomean_speedup``
section: per suite and reduce, the geometric mean over F of each baseline's time
over pyg_fast's (> 1: pyg_fast is faster), and of the fastest baseline's.
"""
import argparse
import math
from pathlib import Path
from typing import Dict, List

import torch

from benchmarks.common import Recorder
from benchmarks.suites import e2e, segment_reduce, spmm

GRAPH = "arxiv_like"
E2E_GRAPHS = ("cora", "arxiv_like")  # reddit2_like's 23 M edges take minutes a step on 2 cores
REDUCES = ("sum", "mean", "max")
# Milliseconds of warm-up and of measurement per method and case: calls at large F
# take ~0.1-0.5 s on 2 cores, so they get ~5 repetitions, small F get hundreds.
CPU_BUDGET = (200, 1500)
FASTEST = "fastest baseline"


def geomean_speedups(records: List[dict]) -> Dict[str, Dict[str, float]]:
    """{"<suite> <reduce>": {baseline or "fastest baseline": geometric mean over F of baseline ms / pyg_fast ms}}."""
    groups: Dict[str, Dict[int, Dict[str, float]]] = {}
    for r in records:
        if r["ms"] is None or r["suite"] not in ("segment_reduce", "spmm"):
            continue
        key = f"{r['suite']} {r['case'].get('reduce', 'sum')}"
        groups.setdefault(key, {}).setdefault(r["case"]["F"], {})[r["method"]] = r["ms"]
    result = {}
    for key, by_features in groups.items():
        ratios: Dict[str, List[float]] = {}
        for times in by_features.values():
            ours = times.pop("pyg_fast", None)
            if ours is None or not times:
                continue
            for method, ms in times.items():
                ratios.setdefault(method, []).append(ms / ours)
            ratios.setdefault(FASTEST, []).append(min(times.values()) / ours)
        result[key] = {m: math.exp(sum(map(math.log, v)) / len(v)) for m, v in ratios.items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cpu_results.json"))
    parser.add_argument("--features", default=",".join(map(str, segment_reduce.FEATURES)))
    parser.add_argument("--no-e2e", action="store_true", help="skip the e2e suites")
    args = parser.parse_args()
    features = [int(f) for f in args.features.split(",")]
    out_json = Path(args.out)
    out_md = out_json.with_suffix(".md")

    device = torch.device("cpu")
    rec = Recorder(device, autosave=(out_json, out_md))
    print(f"CPU benchmark on {GRAPH}, {torch.get_num_threads()} threads", flush=True)
    torch.manual_seed(0)
    case_list = [(f, torch.float32, REDUCES) for f in features]
    segment_reduce.bench_graph(rec, device, GRAPH, case_list, CPU_BUDGET)
    spmm.bench_graph(rec, device, GRAPH, case_list, CPU_BUDGET)
    if not args.no_e2e:
        e2e.run(rec, device, graphs=E2E_GRAPHS)

    speedups = geomean_speedups(rec.records)
    rec.write(out_json, out_md, geomean_speedup=speedups)
    print(out_md.read_text())
    print(f"Geometric mean over F = {args.features} of baseline ms / pyg_fast ms (> 1: pyg_fast faster):")
    for key, ratios in speedups.items():
        print(f"  {key:20s} " + ", ".join(f"{m} {v:.2f}x" for m, v in ratios.items()))
    print(f"wrote {out_json} and {out_md}")


if __name__ == "__main__":
    main()
