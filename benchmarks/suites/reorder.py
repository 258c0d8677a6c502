"""Suite "reorder" (issue 5): what ``pyg_fast.transforms.Reorder`` costs and what it buys.

One training iteration = forward and backward of the weighted aggregation (SpMM)
``pyg_fast.index_weight_segment_reduce(x, src, dst, w, V, "sum")`` with F = 64 and a gradient
for x. Case key: graph. Methods:

- ``no_reorder``: an iteration on the graph as given;
- ``pyg_fast``: an iteration on the reordered graph plus Reorder's cost divided by 20 (its
  preprocessing amortised over 20 iterations). Extra fields: ``reorder_ms`` (the transform,
  once), ``iteration_ms`` (an iteration on the reordered graph) and ``break_even_iterations``
  (iterations after which Reorder has paid for itself; None where it never does).

Both are checked against a float64 reference (renumbered with ``node_perm`` for the reordered
graph, so mapping results back is not timed).
"""
import time

import torch

import pyg_fast
from benchmarks.common import REL_TOL, Recorder, bench_methods
from benchmarks.suites.schedule_select import suite_graphs
from benchmarks.suites.spmm import reference_spmm
from pyg_fast.transforms import Reorder

SUITE = "reorder"
NUM_FEATURES = 64
AMORTISED_OVER = 20
BUDGET = (25, 100)
QUICK_BUDGET = (0, 0)


def _synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def iteration(x: torch.Tensor, edge_index: torch.Tensor, weight: torch.Tensor, num_nodes: int):
    """One forward and backward of the weighted sum aggregation; returns the output."""
    x = x.detach().requires_grad_()
    out = pyg_fast.index_weight_segment_reduce(x, edge_index[0], edge_index[1], weight, num_nodes, "sum")
    out.backward(torch.ones_like(out))
    return out.detach()


def run(rec, device, quick: bool = False) -> None:
    torch.manual_seed(0)
    budget = QUICK_BUDGET if quick else BUDGET
    for name, data in suite_graphs(rec, SUITE, device, quick):
        num_nodes = data.num_nodes
        data.x = torch.randn(num_nodes, NUM_FEATURES, device=device)
        data.edge_weight = torch.rand(data.edge_index.size(1), device=device) + 0.5
        _synchronize(device)
        start = time.perf_counter()
        reordered = Reorder()(data)
        _synchronize(device)
        reorder_ms = (time.perf_counter() - start) * 1e3
        case = {"graph": name}
        ref = reference_spmm(data.x, data.edge_index[0], data.edge_index[1], data.edge_weight, num_nodes)
        timings = Recorder(device, env={}, verbose=False)
        bench_methods(timings, SUITE, case,
                      {"no_reorder": lambda: iteration(data.x, data.edge_index, data.edge_weight, num_nodes)},
                      ref, device, REL_TOL[torch.float32], budget)
        # The reordered graph's output, in its own numbering, against the reference renumbered.
        bench_methods(timings, SUITE, case,
                      {"reordered": lambda: iteration(reordered.x, reordered.edge_index, reordered.edge_weight,
                                                      num_nodes)},
                      ref.index_select(0, reordered.node_perm), device, REL_TOL[torch.float32], budget)
        plain, ours = timings.records
        rec.add(SUITE, case, "no_reorder", plain["ms"], **{k: plain[k] for k in ("rel_err", "error") if k in plain})
        if ours["ms"] is None:
            rec.add(SUITE, case, "pyg_fast", None, error=ours.get("error"))
            continue
        saving = plain["ms"] - ours["ms"] if plain["ms"] is not None else None
        rec.add(SUITE, case, "pyg_fast", ours["ms"] + reorder_ms / AMORTISED_OVER, rel_err=ours.get("rel_err"),
                reorder_ms=reorder_ms, iteration_ms=ours["ms"],
                break_even_iterations=reorder_ms / saving if saving and saving > 0 else None)
        del data, reordered, ref
