"""Sweeps the CUDA segment-reduction configurations over many graphs and feature sizes on
the GPU and writes the rule table that pyg_fast.tuning reads (pyg_fast/tuning/rules.json).

    python -m benchmarks.tune_segment --out DIR    # writes DIR/rules.json and DIR/sweep.jsonl
    python -m benchmarks.tune_segment --out DIR --from-jsonl sweep.jsonl   # rules from a (partial) sweep
    python -m benchmarks.tune_segment --out DIR --features 1,4,16 --merge old.jsonl   # re-sweep some F only
    python -m benchmarks.tune_segment --out DIR --from-jsonl new.jsonl --merge old.jsonl --changed edges
        # rules from a re-sweep after one schedule's kernel changed (the others keep their lower timing)
    python -m benchmarks.tune_segment --out DIR --graphs cora,pubmed --merge sweep.jsonl --changed '' \
        --merged-jsonl again.jsonl   # small graphs swept again, each timing the lower of the two
    python -m benchmarks.tune_segment --out DIR --zoo   # the zoo's graphs (benchmarks.graphs), F up to 256

Every configuration's output is checked against torch before it is timed. The table keeps,
for each input measured, its features and the configurations that did best over it and its
nearest inputs, best first (``ranked``); at run time the selector takes the nearest entry (its
first configuration where a per-graph layout may be used, else the input's best GeoT schedule),
and a reused graph's calls time all of them (``tuning.TRIAL_CANDIDATES``). Graph-aware schedules
are timed with their layout already built (it is built once per graph and reused). Configurations are timed by their device time
(``benchmarks.common.device_ms``: L2 flushed before each call, the host's share left out), so that
the host's pace never picks a schedule on a small graph. The graphs are generated power-law
graphs of four sizes and the benchmarks' graphs (Cora, PubMed, arxiv_like, reddit2_like, an SBM).
The script also reports how far the selector's pick is from the best on each graph when that
graph's own entries are left out of the table, so the rule's quality on unseen graphs is
measured, not assumed.
"""
import argparse
import functools
import itertools
import json
import math
import os
from typing import Optional

import torch

import benchmarks.graphs
import pyg_fast
from benchmarks.common import device_ms, time_ms
from pyg_fast import tuning

ROW_PARAMS = [dict(schedule="row", max_lanes=m, threads=t, chunk=256) for m in (8, 32) for t in (128, 256)]
ROW_PARALLEL_PARAMS = [dict(schedule="row_parallel", max_lanes=m, threads=256, chunk=256) for m in (4, 8, 32)]
CHUNK_PARAMS = [dict(schedule="chunk", max_lanes=m, threads=128, chunk=c) for m in (8, 32) for c in (32, 128, 512)]
EDGES_PARAMS = [dict(schedule="edges", max_lanes=32, threads=256, chunk=c) for c in (256, 1024, 4096)]
# Neighbour groups: GNNAdvisor's model (0 = group size near the mean degree, lanes near F / 3)
# and fixed alternatives around it.
GROUPS_PARAMS = [dict(schedule="groups", max_lanes=0, threads=256, chunk=0),
                 dict(schedule="groups", max_lanes=32, threads=128, chunk=0),
                 dict(schedule="groups", max_lanes=32, threads=256, chunk=8),
                 dict(schedule="groups", max_lanes=32, threads=256, chunk=32)]
BALANCED_PARAMS = [dict(schedule="balanced", max_lanes=32, threads=t, chunk=0) for t in (128, 256)]


def candidate_params(num_features: int) -> list:
    """Every configuration the sweep (and the schedule_select benchmark's exhaustive search) tries."""
    small = ROW_PARALLEL_PARAMS + EDGES_PARAMS if num_features <= 16 else []
    return ROW_PARAMS + small + CHUNK_PARAMS + GROUPS_PARAMS + BALANCED_PARAMS


def power_law_graph(num_nodes: int, num_edges: int, exponent: float, gen: torch.Generator, device):
    """Destinations drawn with weight rank^-exponent (0 = uniform), sorted; sources uniform."""
    weights = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow(-exponent)
    dst = torch.multinomial(weights, num_edges, replacement=True, generator=gen)
    dst = torch.randperm(num_nodes, generator=gen)[dst].sort().values
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    return src.to(device), dst.to(device)


# Graphs of the benchmarks (real and synthetic, suites segment_reduce, spmm and schedule_select)
# join the generated ones, so the table covers the shapes users meet.
BENCHMARK_GRAPHS = ("cora", "pubmed", "arxiv_like", "reddit2_like", "sbm_1000")
# Warm-up and measurement budgets (ms) of do_bench, where a configuration's device time cannot be
# read apart from the host's (``sweep_ms``).
SWEEP_BUDGET = (5, 20)


def sweep_ms(fn, device) -> float:
    """Milliseconds of one call of ``fn`` on the device, the host's share left out where it can be
    (``device_ms``); do_bench's reading otherwise. Timed by do_bench, calls of small graphs read the
    host's pace: PubMed's sum at F = 32 read 27.4 us for the row schedule and more for every groups
    configuration in one sweep, 15.9 us for the best groups one in another (H100)."""
    ms = device_ms(fn, device)
    return ms if ms is not None else time_ms(fn, *SWEEP_BUDGET)


def sweep_graphs(device: str, quick: bool, only=None, zoo: bool = False):
    """(name, src, dst, num_nodes) of every graph swept (those named in ``only``, if given),
    destinations sorted: generated power laws and the benchmarks' graphs, or with ``zoo`` the
    zoo's graphs that are not among those."""
    if zoo:
        for name in zoo_graph_names():
            if only is None or name in only:
                data = benchmarks.graphs.load_graph(name)
                yield name, data.edge_index[0].to(device), data.edge_index[1].to(device), data.num_nodes
        return
    gen = torch.Generator().manual_seed(0)
    shapes = [(2_700, 10_500), (20_000, 200_000), (170_000, 1_200_000), (230_000, 23_000_000)]
    exponents = [0.0, 0.8]
    names = BENCHMARK_GRAPHS
    if quick:
        shapes, exponents, names = [(300, 2_000)], [0.0, 1.1], ("quick_powerlaw", "sbm_quick")
    for (num_nodes, num_edges), exponent in itertools.product(shapes, exponents):
        src, dst = power_law_graph(num_nodes, num_edges, exponent, gen, device)  # drawn in order: same graphs
        name = f"powerlaw_{num_nodes}_{num_edges}_{exponent}"
        if only is None or name in only:
            yield name, src, dst, num_nodes
    from benchmarks.suites.schedule_select import graph as load_sweep_graph
    for name in names:
        if only is not None and name not in only:
            continue
        data = load_sweep_graph(name, "cpu")
        yield name, data.edge_index[0].to(device), data.edge_index[1].to(device), data.num_nodes


def zoo_graph_names() -> tuple:
    """The zoo's graphs beyond the sweep's own (``BENCHMARK_GRAPHS``)."""
    return tuple(name for name in benchmarks.graphs.ZOO if name not in BENCHMARK_GRAPHS)


FEATURE_SIZES = (1, 4, 16, 32, 64, 128)
ZOO_FEATURE_SIZES = FEATURE_SIZES + (256,)


def feature_sizes_of(graph: str, feature_sizes) -> tuple:
    """The zoo's largest graphs are swept at the feature sizes their benchmarks measure."""
    if graph in benchmarks.graphs.ZOO_LARGE:
        return tuple(f for f in feature_sizes if f >= 16)
    return tuple(feature_sizes)


def sweep_graph(graph: str, src, dst, num_nodes: int, device, feature_sizes):
    """Every configuration of the grid timed on one graph, per F, direct rows and gathered: one
    result (dict) per input, as ``sweep.jsonl`` holds them."""
    num_edges = src.numel()
    ptr = torch._convert_indices_from_coo_to_csr(dst, num_nodes)
    max_degree = int(ptr.diff().max())
    for num_features, gather in itertools.product(feature_sizes_of(graph, feature_sizes), (False, True)):
        rows = torch.randn(num_nodes if gather else num_edges, num_features, device=device)
        if gather:
            ref = torch.zeros(num_nodes, num_features, device=device).index_add_(0, dst, rows[src])
            run = lambda: pyg_fast.index_segment_reduce(rows, src, dst, num_nodes, "sum")
        else:
            ref = torch.zeros(num_nodes, num_features, device=device).index_add_(0, dst, rows)
            run = lambda: pyg_fast.segment_reduce(rows, dst, dim_size=num_nodes, reduce="sum")
        timings = []
        for i, params in enumerate(candidate_params(num_features)):
            tuning.set_override(params)
            try:
                out = run()
                err = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                if err < 1e-4:
                    if i == 0:  # warm-up: an input's first timing read up to 3.2x its aliases' (kernel_ms)
                        sweep_ms(run, device)
                    timings.append((sweep_ms(run, device), params))
                else:  # never time (or pick) a configuration that computes something else
                    print(f"WRONG RESULT (relative error {err:.3g}) with {params}: not timed", flush=True)
            finally:
                tuning.set_override(None)
        baseline = sweep_ms(lambda: torch.zeros(num_nodes, num_features, device=device).index_add_(
            0, dst, rows[src] if gather else rows), device)
        feats = tuning.features(num_edges, num_nodes, num_features, 4, gather, max_degree)
        r = dict(graph=graph, num_nodes=num_nodes, num_edges=num_edges, max_degree=max_degree, F=num_features,
                 gather=gather, features=feats, **_bests(timings), index_add_ms=baseline,
                 all=[dict(ms=ms, **p) for ms, p in timings])
        print(f"{graph} V={num_nodes} E={num_edges} maxdeg={max_degree} F={num_features} "
              f"gather={gather}: best {r['best_ms']:.4f} ms {r['best']} | best GeoT {r['geot_best_ms']:.4f} ms | "
              f"index_add {baseline:.4f} ms", flush=True)
        del rows, ref
        yield r


def sweep(device: str, quick: bool, out_dir: str, feature_sizes=FEATURE_SIZES, graphs=None, zoo: bool = False):
    feature_sizes = [1, 16] if quick else feature_sizes
    results = []
    for graph, src, dst, num_nodes in sweep_graphs(device, quick, graphs, zoo):
        for r in sweep_graph(graph, src, dst, num_nodes, device, feature_sizes):
            results.append(r)
            with open(os.path.join(out_dir, "sweep.jsonl"), "a") as f:
                f.write(json.dumps(r) + "\n")
    return results


def nearest(table, features, weights):
    """The entry of ``table`` (sweep results) nearest ``features`` under the weighted squared
    distance, as the C++ selector takes it."""
    return min(table, key=lambda o: _distance(weights, features, o["features"]))


def _distance(weights, a, b) -> float:
    return sum(w * (x - y) ** 2 for w, x, y in zip(weights, a, b))


# An entry's configuration is the one with the lowest summed log time over each entry's best among
# it and its NEIGHBOURS - 1 nearest entries, not its own best alone: one input's best is often a
# near-tie that the next graph does not share (held-out zoo graphs, H200 sweep: 79.6% of picks
# within 10% of the best and the worst at 3.88x with an entry's own best; 83.0% and 1.94x with three).
NEIGHBOURS = 3


def consensus(entry, table, weights, neighbours: int = NEIGHBOURS) -> dict:
    """The configuration ``entry`` (a sweep result) stands for in a rule table built from
    ``table``: the first of :func:`ranked`."""
    return ranked(entry, table, weights, 1, neighbours)[0]


def ranked(entry, table, weights, count: int, neighbours: int = NEIGHBOURS) -> list:
    """The ``count`` configurations of lowest summed log(time / best) over ``entry``'s
    ``neighbours`` nearest entries of ``table`` (``entry`` itself where it is one), among
    configurations swept on all of them, best first (the nearest one's best alone where none is):
    the candidates a reused graph's calls time (``tuning.TRIAL_CANDIDATES``)."""
    near = sorted(table, key=lambda o: _distance(weights, entry["features"], o["features"]))[:neighbours]
    costs = {}
    for o in near:
        for t in o["all"]:
            costs.setdefault(_config_key(t), []).append(math.log(t["ms"] / o["best_ms"]))
    swept = {key: sum(c) for key, c in costs.items() if len(c) == len(near)}
    if not swept:  # grids with nothing in common (other feature sizes sweep other configurations)
        return [near[0]["best"]]
    return [dict(key) for key in sorted(swept, key=swept.get)[:count]]


def rule_table(results, weights) -> list:
    """The entries of a rule table built from the sweep ``results``: each input's features, its
    candidates (``ranked``) and its best GeoT schedule."""
    return [dict(features=r["features"], candidates=ranked(r, results, weights, tuning.TRIAL_CANDIDATES),
                 geot_params=r["geot_best"]) for r in results]


def select(table, features, weights) -> dict:
    """The configuration a rule table built from ``table`` picks for an input of ``features``."""
    return consensus(nearest(table, features, weights), table, weights)


PARAM_KEYS = ("schedule", "max_lanes", "threads", "chunk")


def picked_ms(result, params):
    """The time ``result``'s sweep measured for the kernel that ``params`` run on its input: the
    lowest over the grid's parameters that resolve to the same launch (:func:`kernel_ms`); None
    where ``params`` was not swept."""
    if not any(all(t[k] == params[k] for k in PARAM_KEYS) for t in result["all"]):
        return None
    return kernel_ms(result, resolved(result, params))


def resolved(result, params) -> tuple:
    """The launch config that ``params`` resolve to on ``result``'s input (the op's own resolution)."""
    return _resolve(params["schedule"], params["max_lanes"], params["threads"], params["chunk"], result["num_edges"],
                    result["num_nodes"], result["F"])


@functools.lru_cache(maxsize=None)
def _resolve(schedule: str, max_lanes: int, threads: int, chunk: int, num_rows: int, num_segments: int,
             num_features: int) -> tuple:
    return tuple(torch.ops.pyg_fast.segment_schedule_resolve(tuning.SCHEDULES[schedule], max_lanes, threads, chunk,
                                                             num_rows, num_segments, num_features, 4, num_features))


def kernel_ms(result, config) -> Optional[float]:
    """The sweep's time of launch ``config`` on ``result``'s input: the lowest reading over the grid's
    parameters that resolve to it (one kernel timed several times, as ``exhaustive_best`` is the
    lowest reading of all). In the H100 zoo sweep the first configuration of an input read up to
    3.16x the same kernel under another name (median 1.00x), the others at most 1.09x."""
    times = [t["ms"] for t in result["all"] if resolved(result, t) == tuple(config)]
    return min(times) if times else None


def leave_one_out(results, weights):
    """Time of the configuration the rule picks (``select``) relative to the best, for every
    input, where the entries of the input's own graph are left out (the rule must generalise to
    unseen graphs)."""
    ratios, picks = [], {}
    for r in results:
        graph = r.get("graph", id(r))
        others = [o for o in results if o.get("graph", id(o)) != graph]
        if not others:
            continue
        neighbour = nearest(others, r["features"], weights)
        if (graph, id(neighbour)) not in picks:
            picks[graph, id(neighbour)] = consensus(neighbour, others, weights)
        picked = picked_ms(r, picks[graph, id(neighbour)])
        if picked is not None:  # None: the neighbour's pick was not swept for this input
            ratios.append(picked / r["best_ms"])
    return ratios


# Feature weights of the nearest-neighbour rule are chosen from this grid by leave-one-graph-out
# quality (element size weighs 0: the sweep is float32; gather 4: it changes the kernel's work).
WEIGHT_CHOICES = (0.5, 1.0, 2.0)
GATHER_WEIGHT = 4.0


def quality(ratios) -> tuple:
    """(picks within 10% of the best, geometric mean of pick / best): higher, then lower, is better."""
    within = sum(r <= 1.1 for r in ratios)
    return within, math.exp(sum(math.log(r) for r in ratios) / max(len(ratios), 1))


def fit_weights(results) -> list:
    """The feature weights (features: log E, log mean segment, log F, element size, gather, log skew)
    whose nearest-neighbour picks are best on graphs left out of the table."""
    best = None
    for w_rows, w_mean, w_features, w_skew in itertools.product(WEIGHT_CHOICES, repeat=4):
        weights = [w_rows, w_mean, w_features, 0.0, GATHER_WEIGHT, w_skew]
        within, geo = quality(leave_one_out(results, weights))
        if best is None or (within, -geo) > (best[0], -best[1]):
            best = (within, geo, weights)
    return best[2]


def input_key(result) -> tuple:
    """What identifies an input of a sweep: its graph, F, and direct or gathered rows."""
    return result["graph"], result["F"], result["gather"]


def merged(old, new, changed=None):
    """The ``old`` sweep results with every input that ``new`` measured again replaced by ``new``'s.

    With ``changed`` (schedule names whose kernels changed between the sweeps), a configuration of
    any other schedule keeps the lower of its two timings: the same kernel measured twice, where a
    host stall or another tenant can only add time (small inputs, where a window may catch the
    host, move by up to 30x between sweeps)."""
    fresh = {input_key(r) for r in new}
    results = [r for r in old if input_key(r) not in fresh]
    if changed is None:
        return results + list(new)
    earlier = {input_key(r): r for r in old}
    for r in new:
        before = {_config_key(t): t["ms"] for t in earlier.get(input_key(r), {}).get("all", [])}
        timings = [(t["ms"] if t["schedule"] in changed else min(t["ms"], before.get(_config_key(t), t["ms"])),
                    {k: v for k, v in t.items() if k != "ms"}) for t in r["all"]]
        results.append(dict(r, **_bests(timings), all=[dict(ms=ms, **p) for ms, p in timings]))
    return results


def _config_key(timing) -> tuple:
    """A configuration of a sweep's timing (its parameters without ``ms``), hashable."""
    return tuple(sorted((k, v) for k, v in timing.items() if k != "ms"))


def _bests(timings) -> dict:
    """The fastest configuration overall and the fastest of GeoT's, from (ms, params) pairs."""
    best_ms, best = min(timings, key=lambda t: t[0])
    geot_ms, geot_best = min((t for t in timings if t[1]["schedule"] not in tuning.GRAPH_AWARE), key=lambda t: t[0])
    return dict(best=best, best_ms=best_ms, geot_best=geot_best, geot_best_ms=geot_ms)


def write_rules(results, out_dir: str, device_name: str) -> None:
    """The rule table (rules.json) from sweep results, with its measured leave-one-graph-out quality."""
    weights = fit_weights(results)
    ratios = leave_one_out(results, weights)
    within, geo = quality(ratios)
    source = (f"{device_name} sweep by benchmarks/tune_segment.py over {len(results)} inputs (cold-L2 timing); "
              f"leave-one-graph-out: {within}/{len(ratios)} picks within 10% of the best, geometric mean {geo:.3f}x the best")
    print(source)
    table = rule_table(results, weights)
    rules = dict(source=source, weights=weights, default=table[0]["geot_params"] if table else {}, table=table)
    with open(os.path.join(out_dir, "rules.json"), "w") as f:
        json.dump(rules, f, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--from-jsonl", help="build the rules from this sweep.jsonl instead of sweeping")
    parser.add_argument("--device-name", default=None, help="recorded in the rules' source (with --from-jsonl)")
    parser.add_argument("--features", default=None, help="comma-separated feature sizes to sweep (default: all)")
    parser.add_argument("--graphs", default=None, help="comma-separated graph names to sweep (default: all)")
    parser.add_argument("--zoo", action="store_true", help="sweep the zoo's graphs (benchmarks.graphs.ZOO) beyond "
                                                        "the benchmarks' own, F up to 256")
    parser.add_argument("--merge", help="an earlier sweep.jsonl whose inputs not swept again join the rules")
    parser.add_argument("--changed", default=None,
                        help="with --merge: comma-separated schedules whose kernels changed since that sweep; "
                             "the other schedules keep the lower of their two timings ('' : none changed, a "
                             "second sweep of the same kernels)")
    parser.add_argument("--merged-jsonl", default=None, help="with --merge: also write the merged sweep here")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.from_jsonl:
        results = read_jsonl(args.from_jsonl)
        device_name = args.device_name or "GPU"
    else:
        default_sizes = ZOO_FEATURE_SIZES if args.zoo else FEATURE_SIZES
        sizes = tuple(int(f) for f in args.features.split(",")) if args.features else default_sizes
        graphs = set(args.graphs.split(",")) if args.graphs else None
        results = sweep("cuda", args.quick, args.out, sizes, graphs, args.zoo)
        device_name = torch.cuda.get_device_name()
    if args.merge:
        changed = None if args.changed is None else {name for name in args.changed.split(",") if name}
        results = merged(read_jsonl(args.merge), results, changed)
        if args.merged_jsonl:
            with open(args.merged_jsonl, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in results)
    write_rules(results, args.out, device_name)


def read_jsonl(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


if __name__ == "__main__":
    main()
