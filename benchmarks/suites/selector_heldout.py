"""Suite "selector_heldout": the schedule selector on graphs it was not fitted on.

On each graph of the zoo beyond the sweep's own (``benchmarks.tune_segment.zoo_graph_names``; with
``--quick`` the quick graphs), every configuration of the tuning grid
is timed per F, for the direct reduction (op ``segment_reduce``) and the gathered one (op ``spmm``,
``index_segment_reduce``): ``benchmarks.tune_segment.sweep_graph``. The selector's pick for an
input is what a rule table without that graph's inputs selects (``tune_segment.select``): the shipped sweeps
(``SHIPPED_SWEEPS``, the rules' source) and this run's other graphs, under the shipped rules'
weights, as a reused graph's eager call picks (graph-aware schedules allowed, its measured skew).

Case keys: graph, F, op. Methods: ``selector`` (the table's pick: what compiled calls and a
graph's first calls get; its time and ``config``), ``measured`` (the fastest of the nearest entry's
``tuning.TRIAL_CANDIDATES`` candidates, by this sweep's timings: what a reused graph's calls settle
on after timing them once; ``pyg_fast`` records the same), ``exhaustive_best`` (the grid's
fastest, ``config``). On the CPU the configurations
share one kernel: the suite runs, its ratios say nothing. ``$PYG_FAST_SWEEP_JSONL``, when set, receives the sweep's rows
(``benchmarks.tune_segment --from-jsonl`` refits the rules from them).
"""
import json
import os
from pathlib import Path

from benchmarks.common import Recorder
from benchmarks.graphs import QUICK_GRAPHS, load_graph, selected
from benchmarks.tune_segment import (ZOO_FEATURE_SIZES, feature_sizes_of, input_key, merged, nearest, picked_ms,
                                     ranked, read_jsonl, sweep_graph, zoo_graph_names)
from pyg_fast import tuning

SUITE = "selector_heldout"
SHIPPED_SWEEPS = tuple(Path(__file__).resolve().parents[1] / "data" / "sweeps" / name
                       for name in ("segment_h100.jsonl", "segment_zoo_h100.jsonl"))
QUICK_FEATURE_SIZES = (1, 16)


def held_out_graphs(quick: bool) -> tuple:
    return selected(QUICK_GRAPHS if quick else zoo_graph_names())


def heldout_records(results: list, shipped: list, weights) -> list:
    """(case, candidates, their ms (None: not in this input's grid), best ms, best config) for every
    input of ``results``, its candidates (the table's pick first) taken from the other graphs' inputs
    of ``shipped`` and ``results`` (this run's rows replacing shipped ones of the same input)."""
    pool = merged(shipped, results)
    out = []
    for r in results:
        table = [o for o in pool if o["graph"] != r["graph"]]
        candidates = ranked(nearest(table, r["features"], weights), table, weights, tuning.TRIAL_CANDIDATES)
        case = {"graph": r["graph"], "F": r["F"], "op": "spmm" if r["gather"] else "segment_reduce"}
        out.append((case, candidates, [picked_ms(r, c) for c in candidates], r["best_ms"], r["best"]))
    return out


def run(rec: Recorder, device, quick: bool = False) -> None:
    shipped = [r for path in SHIPPED_SWEEPS for r in read_jsonl(path)]
    sink = os.environ.get("PYG_FAST_SWEEP_JSONL")
    earlier = {input_key(r): r for r in read_jsonl(sink)} if sink and os.path.exists(sink) else {}
    sizes = QUICK_FEATURE_SIZES if quick else ZOO_FEATURE_SIZES
    results = []
    for name in held_out_graphs(quick):
        swept = [r for key, r in earlier.items() if key[0] == name]
        if len(swept) == 2 * len(feature_sizes_of(name, sizes)):  # complete: F x (direct, gathered)
            results += swept
            continue
        data = load_graph(name)
        src, dst = data.edge_index.to(device)
        for r in sweep_graph(name, src, dst, data.num_nodes, device, sizes):
            results.append(r)
            if sink:
                with open(sink, "a") as f:
                    f.write(json.dumps(r) + "\n")
    for case, candidates, times, best_ms, best in heldout_records(results, shipped, tuning.rules()["weights"]):
        swept = [(ms, c) for ms, c in zip(times, candidates) if ms is not None]
        measured = min(swept, key=lambda t: t[0]) if swept else (None, candidates[0])
        for method, (ms, config) in (("selector", (times[0], candidates[0])), ("measured", measured),
                                     ("pyg_fast", measured)):
            fields = dict(config=config, ratio_to_best=ms / best_ms) if ms is not None else \
                dict(config=config, error="no candidate is in this input's grid")
            rec.add(SUITE, case, method, ms, **fields, **(dict(same_as="measured") if method == "pyg_fast" else {}))
        rec.add(SUITE, case, "exhaustive_best", best_ms, config=best)
