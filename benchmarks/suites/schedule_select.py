"""Suite "schedule_select": how good is the one schedule selector?

Gather-fused aggregation ``pyg_fast.index_segment_reduce(x, src, dst, V, reduce)`` (messages
x[src] reduced per destination, edges sorted by destination) on each graph, F in {16, 32, 64,
128}. Case keys: graph, F, reduce. Methods:

- ``selector``: the public call with the selector's pick, end to end (selection and layout
  lookups included; a reused graph gets its measured launch once its statistics reach the host,
  so the timed calls reuse it, as full-graph training does). ``pyg_fast`` records the same measurement (the name
  the harness reads as ours).
- ``geot_sr``, ``geot_pr``, ``geot_chunk``, ``advisor_groups``, ``gsparse_balanced``: each
  schedule alone, the fastest of its configurations in ``benchmarks.tune_segment``'s grid
  (forced with ``pyg_fast.tuning.set_override``); ``config`` says which.
- ``exhaustive_best``: the fastest configuration of the whole grid.

Graphs: cora, pubmed, arxiv_like, reddit2_like and ``sbm_1000``, a stochastic block model with
1,000 blocks (strong community structure, nodes numbered at random), generated with a fixed seed.
On the CPU the schedules collapse to its one kernel: only ``selector``/``pyg_fast`` are timed and
the per-schedule methods are recorded as not applicable.
"""
from functools import lru_cache

import torch
from torch import Tensor
from torch_geometric.data import Data

import pyg_fast
from benchmarks.common import REL_TOL, Recorder, bench_methods
from benchmarks.graphs import load_graph, selected, sort_by_destination
from benchmarks.suites.segment_reduce import REFERENCE_CHUNK_ELEMENTS, SCATTER_REDUCE_NAMES

# Method name of each schedule.
METHOD_NAMES = {"row": "geot_sr", "row_parallel": "geot_pr", "chunk": "geot_chunk", "edges": "geot_edges",
                "groups": "advisor_groups", "balanced": "gsparse_balanced"}
from benchmarks.tune_segment import candidate_params
from pyg_fast import tuning

SUITE = "schedule_select"
GRAPHS = ("cora", "pubmed", "arxiv_like", "reddit2_like", "sbm_1000")
QUICK_GRAPHS = ("quick_powerlaw", "quick_sparse", "sbm_quick")
FEATURES = (16, 32, 64, 128)
QUICK_FEATURES = (16,)
REDUCES = ("sum", "max")
QUICK_REDUCES = ("sum",)
BUDGET = (10, 40)  # warm-up and measurement ms per configuration: the grid has ~20 of them
QUICK_BUDGET = (0, 0)
# name: (nodes, edges, blocks, share of edges inside a block, seed)
SBM = {"sbm_1000": (200_000, 4_000_000, 1_000, 0.9, 11), "sbm_quick": (2_000, 20_000, 20, 0.9, 12)}


@lru_cache(maxsize=None)
def _sbm_cpu(name: str) -> Data:
    num_nodes, num_edges, num_blocks, inside, seed = SBM[name]
    return Data(edge_index=sbm_graph(num_nodes, num_edges, num_blocks, inside, seed), num_nodes=num_nodes)


def sbm_graph(num_nodes: int, num_edges: int, num_blocks: int, inside: float, seed: int) -> Tensor:
    """A stochastic block model: nodes in random blocks (so ids say nothing about blocks),
    sources uniform, a share ``inside`` of the destinations uniform within the source's block,
    the rest uniform. Sorted by destination."""
    gen = torch.Generator().manual_seed(seed)
    block = torch.randint(0, num_blocks, (num_nodes,), generator=gen)
    members = torch.argsort(block)  # node ids grouped by block
    size = torch.bincount(block, minlength=num_blocks)
    first = size.cumsum(0) - size
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    b = block[src]
    same_block = members[first[b] + (torch.rand(num_edges, generator=gen) * size[b]).long().clamp_(max=size[b] - 1)]
    dst = torch.where(torch.rand(num_edges, generator=gen) < inside, same_block,
                      torch.randint(0, num_nodes, (num_edges,), generator=gen))
    return sort_by_destination(torch.stack([src, dst]), num_nodes)


def graph(name: str, device) -> Data:
    return _sbm_cpu(name).to(device) if name in SBM else load_graph(name, device)


def reference_gather_reduce(x: Tensor, src: Tensor, dst: Tensor, num_nodes: int, reduce: str) -> Tensor:
    """Float64 gather and ``scatter_reduce`` (PyG semantics), a few columns at a time."""
    out = torch.zeros(num_nodes, x.size(1), dtype=torch.float64, device=x.device)
    step = max(1, REFERENCE_CHUNK_ELEMENTS // max(src.numel(), 1))
    for start in range(0, x.size(1), step):
        messages = x[:, start:start + step].double().index_select(0, src)
        out[:, start:start + step] = torch.zeros_like(out[:, start:start + step]).scatter_reduce_(
            0, dst.view(-1, 1).expand_as(messages), messages, SCATTER_REDUCE_NAMES[reduce], include_self=False)
    return out


def _forced(params: dict, fn):
    def run():
        tuning.set_override(params)
        try:
            return fn()
        finally:
            tuning.set_override(None)
    return run


def bench_case(rec: Recorder, device, case: dict, fn, ref: Tensor, budget) -> None:
    """Times the selector's pick and, on CUDA, every configuration of the grid, in the same
    alternating rounds (a stall of the machine then reaches them alike)."""
    rel_tol = REL_TOL[torch.float32]
    cuda = torch.device(device).type == "cuda"
    params = candidate_params(case["F"]) if cuda else []
    timings = Recorder(device, env={}, verbose=False)
    bench_methods(timings, SUITE, case, {"selector": fn, **{str(i): _forced(p, fn) for i, p in enumerate(params)}},
                  ref, device, rel_tol, budget)
    by_method = {r["method"]: r for r in timings.records}
    selector = by_method.pop("selector")
    kept = {k: v for k, v in selector.items() if k in ("rel_err", "error")}
    rec.add(SUITE, case, "selector", selector["ms"], **kept)
    rec.add(SUITE, case, "pyg_fast", selector["ms"], same_as="selector", **kept)
    if not cuda:
        for method in list(METHOD_NAMES.values()) + ["exhaustive_best"]:
            rec.add(SUITE, case, method, None, error="not applicable: the schedules are CUDA-only")
        return
    grid = [(params[int(method)], r) for method, r in by_method.items()]
    timed = [(r["ms"], p) for p, r in grid if r["ms"] is not None]
    for schedule, method in METHOD_NAMES.items():
        mine = [t for t in timed if t[1]["schedule"] == schedule]
        if mine:
            ms, p = min(mine, key=lambda t: t[0])
            rec.add(SUITE, case, method, ms, config=p)
        else:
            failed = [r.get("error") for p, r in grid if p["schedule"] == schedule]
            rec.add(SUITE, case, method, None, error=failed[0] if failed else "not in the grid for this F")
    if timed:
        ms, p = min(timed, key=lambda t: t[0])
        rec.add(SUITE, case, "exhaustive_best", ms, config=p,
                selector_ratio=selector["ms"] / ms if selector["ms"] else None)


def suite_graphs(rec: Recorder, suite: str, device, quick: bool):
    """(name, data) for each graph of these suites; a graph whose files are missing is reported."""
    for name in selected(QUICK_GRAPHS if quick else GRAPHS):
        try:
            yield name, graph(name, device)
        except FileNotFoundError as exc:
            rec.add_failure(suite, f"graph {name}: {exc}")


def run(rec, device, quick: bool = False) -> None:
    torch.manual_seed(0)
    budget = QUICK_BUDGET if quick else BUDGET
    for name, data in suite_graphs(rec, SUITE, device, quick):
        src, dst = data.edge_index
        num_nodes = data.num_nodes
        for num_features in QUICK_FEATURES if quick else FEATURES:
            x = torch.randn(num_nodes, num_features, device=device)
            for reduce in QUICK_REDUCES if quick else REDUCES:
                case = {"graph": name, "F": num_features, "reduce": reduce}
                ref = reference_gather_reduce(x, src, dst, num_nodes, reduce)
                fn = lambda: pyg_fast.index_segment_reduce(x, src, dst, num_nodes, reduce)
                bench_case(rec, device, case, fn, ref, budget)
                del ref
            del x
