"""Suite "reorder": what ``pyg_fast.transforms.Reorder`` costs and what it buys.

One training iteration = forward and backward of a two-layer GCN-style model (the depth of PyG's
GCN example): ``h = relu(A (x W1)); out = A (h W2)``, A the weighted aggregation (SpMM)
``pyg_fast.index_weight_segment_reduce(h, src, dst, w, V, "sum")``, W1 and W2 [F, F] with
gradients, for F = 64 (hidden layers) and F = 256 (wide features). Each iteration thus makes
two aggregations forward and two backward; the dense products do not depend on the numbering
and dilute the relative gain, not the absolute one. Case keys: graph, F. Methods:

- ``no_reorder``: an iteration on the graph as given;
- ``pyg_fast``: an iteration on the reordered graph plus Reorder's cost divided by 20 (its
  preprocessing amortised over 20 iterations). Extra fields: ``reorder_ms`` (the transform,
  once: the median of 3 calls after a warm-up call, 1 call in quick mode), ``iteration_ms`` (an
  iteration on the reordered graph), ``layers`` (aggregations per iteration), ``break_even_iterations`` (iterations after which Reorder
  has paid for itself; None where it never does), and what ``Reorder(when="auto")`` would do:
  ``selector_reorders`` (its two-stage decision for 20 iterations of ``LAYERS`` aggregation passes,
  ``Reorder.plan``; its time is
  ``selector_ms``), ``predicted_saving_ms`` (per iteration), ``predicted_reorder_ms`` and
  ``predicted_break_even_iterations`` (None: never).

Both are checked against a float64 reference (renumbered with ``node_perm`` for the reordered
graph, so mapping results back is not timed) and timed in ``ROUNDS`` alternating rounds.

Graphs: those of suite "schedule_select" (cora, pubmed, arxiv_like, reddit2_like, sbm_1000) and
``sbm_large``, a stochastic block model whose x (512 MB at F = 64) is ten times an H100's L2.
"""
import math
import statistics
import time
from functools import lru_cache

import torch
from torch_geometric.data import Data

import pyg_fast
from benchmarks.common import REL_TOL, Recorder, bench_methods, synchronize
from benchmarks.graphs import selected
from benchmarks.suites import schedule_select
from benchmarks.suites.spmm import reference_spmm
from pyg_fast.transforms import Reorder

SUITE = "reorder"
FEATURES = (64, 256)
QUICK_FEATURES = (64,)
AMORTISED_OVER = 20
LAYERS = 2  # aggregations per training iteration (Reorder's `iterations` counts aggregation passes)
BUDGET = (25, 200)
ROUNDS = 5  # alternating timing rounds of the two numberings (benchmarks.common.time_interleaved)
QUICK_BUDGET = (0, 0)
REORDER_REPEATS = 3  # timed calls of Reorder per graph (after one warm-up call), 1 in quick mode
# name: (nodes, edges, blocks, share of edges inside a block, seed), as schedule_select.SBM.
LARGE_SBM = {"sbm_large": (2_000_000, 32_000_000, 2_000, 0.9, 13)}


@lru_cache(maxsize=None)
def _large_sbm_edges(name: str) -> torch.Tensor:
    """The edges on the CPU, generated once per process (about 12 s on 2 cores)."""
    return schedule_select.sbm_graph(*LARGE_SBM[name])


def large_sbm(name: str, device) -> Data:
    """A fresh Data each call (``Data.to`` moves a cached one in place: x and weights attached
    to it by a suite would stay on the device)."""
    return Data(edge_index=_large_sbm_edges(name).to(device), num_nodes=LARGE_SBM[name][0])


def suite_graphs(rec, device, quick: bool):
    """(name, data) for each graph: schedule_select's, then (not in quick mode) ``LARGE_SBM``'s."""
    yield from schedule_select.suite_graphs(rec, SUITE, device, quick)
    if not quick:
        for name in selected(LARGE_SBM):
            yield name, large_sbm(name, device)


def time_call(fn, device, repeats: int):
    """(``fn()``'s result, median ms of ``repeats`` calls); with repeats > 1 an untimed call first."""
    times = []
    for _ in range(repeats + (repeats > 1)):
        synchronize(device)
        start = time.perf_counter()
        result = fn()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return result, statistics.median(times[-repeats:])


def iteration(x: torch.Tensor, edge_index: torch.Tensor, weight: torch.Tensor, num_nodes: int,
              layers: list) -> torch.Tensor:
    """One forward and backward of the two-layer model (``layers``: its [F, F] weights, which
    get gradients); returns the output."""
    h = x
    for i, lin in enumerate(layers):
        h = pyg_fast.index_weight_segment_reduce(h @ lin, edge_index[0], edge_index[1], weight, num_nodes, "sum")
        if i < len(layers) - 1:
            h = h.relu()
    h.backward(torch.ones_like(h))
    return h.detach()


def reference_model(x: torch.Tensor, edge_index: torch.Tensor, weight: torch.Tensor, num_nodes: int,
                    layers: list) -> torch.Tensor:
    """The model's output in float64 (without autograd: the reference's gathered messages, E x F
    doubles per layer, would be kept for a backward pass; 48 GB on reddit2_like at F = 256)."""
    with torch.no_grad():
        h = x.double()
        for i, lin in enumerate(layers):
            h = reference_spmm(h @ lin.double(), edge_index[0], edge_index[1], weight, num_nodes)
            if i < len(layers) - 1:
                h = h.relu()
    return h


def _finite(value: float):
    return value if math.isfinite(value) else None


def run(rec, device, quick: bool = False) -> None:
    torch.manual_seed(0)
    budget = QUICK_BUDGET if quick else BUDGET
    repeats = 1 if quick else REORDER_REPEATS
    for name, data in suite_graphs(rec, device, quick):
        num_nodes = data.num_nodes
        data.edge_weight = torch.rand(data.edge_index.size(1), device=device) + 0.5
        for num_features in QUICK_FEATURES if quick else FEATURES:
            data.x = torch.randn(num_nodes, num_features, device=device)
            case = {"graph": name, "F": num_features}
            layers = [(torch.randn(num_features, num_features, device=device) / num_features ** 0.5).requires_grad_()
                      for _ in range(LAYERS)]
            selector = Reorder(when="auto", iterations=AMORTISED_OVER * LAYERS)
            (decision, _, _), selector_ms = time_call(lambda: selector.plan(data), device, repeats)
            reordered, reorder_ms = time_call(lambda: Reorder()(data), device, repeats)
            ref = reference_model(data.x, data.edge_index, data.edge_weight, num_nodes, layers)
            timings = Recorder(device, env={}, verbose=False)
            # The reordered graph's output is in its own numbering: checked against the reference
            # renumbered. Timed in alternating rounds: on the small graphs an iteration is
            # host-bound and the host's speed drifts by more than Reorder's gain there.
            bench_methods(timings, SUITE, case,
                          {"no_reorder": lambda: iteration(data.x, data.edge_index, data.edge_weight, num_nodes, layers),
                           "reordered": lambda: iteration(reordered.x, reordered.edge_index, reordered.edge_weight,
                                                          num_nodes, layers)},
                          {"no_reorder": ref, "reordered": ref.index_select(0, reordered.node_perm)},
                          device, REL_TOL[torch.float32], budget, rounds=ROUNDS)
            plain, ours = timings.records
            rec.add(SUITE, case, "no_reorder", plain["ms"],
                    **{k: plain[k] for k in ("rel_err", "error") if k in plain})
            if ours["ms"] is None:
                rec.add(SUITE, case, "pyg_fast", None, error=ours.get("error"))
                continue
            saving = plain["ms"] - ours["ms"] if plain["ms"] is not None else None
            rec.add(SUITE, case, "pyg_fast", ours["ms"] + reorder_ms / AMORTISED_OVER, rel_err=ours.get("rel_err"),
                    reorder_ms=reorder_ms, iteration_ms=ours["ms"], layers=LAYERS,
                    break_even_iterations=reorder_ms / saving if saving and saving > 0 else None,
                    selector_reorders=decision.reorder, selector_ms=selector_ms,
                    predicted_saving_ms=decision.saving_ms, predicted_reorder_ms=decision.reorder_ms,
                    predicted_break_even_iterations=_finite(decision.break_even_iterations))
            del reordered, ref
        del data
