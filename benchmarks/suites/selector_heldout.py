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
on after timing them once), ``measured_run`` (on CUDA: the configuration the op's own calls settled
on, each graph run against a rule table built without it, timed as the sweep timed it; ``pyg_fast``
records it, else ``measured``), ``exhaustive_best`` (the grid's fastest, ``config``). On the CPU the configurations
share one kernel: the suite runs, its ratios say nothing. ``$PYG_FAST_SWEEP_JSONL``, when set, receives the sweep's rows
(``benchmarks.tune_segment --from-jsonl`` refits the rules from them).
"""
import contextlib
import json
import os
import tempfile
from pathlib import Path

import torch

import pyg_fast
from benchmarks.common import Recorder
from benchmarks.graphs import QUICK_GRAPHS, load_graph, selected
from benchmarks.tune_segment import (PARAM_KEYS, ZOO_FEATURE_SIZES, feature_sizes_of, input_key, kernel_ms, merged,
                                     nearest, picked_ms, ranked, read_jsonl, resolved, rule_table, sweep_graph,
                                     zoo_graph_names)
from pyg_fast import tuning
from pyg_fast.ops import _kernels

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


# Calls of a reused graph's input until its trial has settled (each followed by a synchronisation):
# grouping from the 4th use, statistics from the layout's 2nd use, the trial once they are in, its
# winner at the call after; a sorted index is read directly once the probe of its order is in,
# which starts the launch's choice again.
SETTLE_CALLS = 20


def settled_picks(results: list, shipped: list, weights, device) -> dict:
    """input key -> (ms, params) of the configuration the op's own calls settle on for each input
    of ``results`` (CUDA), each graph run with a rule table built from the other graphs' inputs
    (the shipped table is loaded back after); its time is the sweep's for those parameters."""
    pool = merged(shipped, results)
    default = tuning.rules()["default"]
    picks = {}
    try:
        for name in sorted({r["graph"] for r in results}):
            table = [o for o in pool if o["graph"] != name]
            held = dict(source=f"held out: {name}", weights=weights, default=default, table=rule_table(table, weights))
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "rules.json")
                with open(path, "w") as f:
                    json.dump(held, f)
                tuning.load_rules(path)
            data = load_graph(name)
            src, dst = data.edge_index.to(device)
            for r in results:
                if r["graph"] == name:
                    picks[input_key(r)] = _settled(r, src, dst, data.num_nodes, device)
    finally:
        tuning.load_rules()
    return picks


def _settled(r: dict, src, dst, num_nodes: int, device):
    """(sweep ms, params) of the launch a reused graph's calls settle on for input ``r`` (the sweep's
    own call): the sweep's lowest reading of that launch under any of its names (``kernel_ms``);
    None where it did not settle or matches none of the grid's."""
    num_edges, num_features = src.numel(), r["F"]
    rows = torch.randn(num_nodes if r["gather"] else num_edges, num_features, device=device)
    if r["gather"]:
        call = lambda: pyg_fast.index_segment_reduce(rows, src, dst, num_nodes, "sum")
    else:
        call = lambda: pyg_fast.segment_reduce(rows, dst, dim_size=num_nodes, reduce="sum")
    for _ in range(SETTLE_CALLS):
        call()
        torch.cuda.synchronize()
    with _launch_configs() as configs:
        call()
    if not configs or not configs[-1]:
        return None
    ms = kernel_ms(r, configs[-1])
    if ms is None:
        return None
    return ms, next({k: t[k] for k in PARAM_KEYS} for t in r["all"]
                    if t["ms"] == ms and resolved(r, t) == tuple(configs[-1]))


@contextlib.contextmanager
def _launch_configs():
    """The configs the segment ops receive inside the block (the op layer's ``run``, watched)."""
    configs, original = [], _kernels.run
    segment_ops = (torch.ops.pyg_fast.index_segment_reduce, torch.ops.pyg_fast.segment_reduce)

    def watched(op, *args):
        if op in segment_ops:
            configs.append(list(args[-2]))
        return original(op, *args)
    _kernels.run = watched
    try:
        yield configs
    finally:
        _kernels.run = original


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
    weights = tuning.rules()["weights"]
    settled = settled_picks(results, shipped, weights, device) if torch.device(device).type == "cuda" else {}
    for r, (case, candidates, times, best_ms, best) in zip(results, heldout_records(results, shipped, weights)):
        swept = [(ms, c) for ms, c in zip(times, candidates) if ms is not None]
        picks = {"selector": (times[0], candidates[0]),
                 "measured": min(swept, key=lambda t: t[0]) if swept else (None, candidates[0])}
        if input_key(r) in settled:
            picks["measured_run"] = settled[input_key(r)] or (None, None)
        picks["pyg_fast"] = picks.get("measured_run", picks["measured"])
        for method, (ms, config) in picks.items():
            fields = dict(config=config, ratio_to_best=ms / best_ms) if ms is not None else \
                dict(config=config, error="no pick in this input's grid (or the calls did not settle)")
            same = "measured_run" if "measured_run" in picks else "measured"
            rec.add(SUITE, case, method, ms, **fields, **(dict(same_as=same) if method == "pyg_fast" else {}))
        rec.add(SUITE, case, "exhaustive_best", best_ms, config=best)
