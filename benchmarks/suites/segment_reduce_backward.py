"""Suite "segment_reduce_backward": a segment reduction's forward and backward, the step a layer
with that aggregation takes in training.

Case keys: graph, F, reduce (sum, mean, max), order (``sorted``: the rows grouped by segment, a
reused graph's index passed with ``sorted=True``; ``fresh``: the edges in random order and a new
index tensor every call, as a sampled mini-batch brings them). Methods: ``pyg_fast``
(``pyg_fast.segment_reduce``) and ``torch_scatter_reduce`` (``scatter_reduce`` without the zero
start, the op PyG's scatter runs), both taking the same index. Each call runs the forward and the
backward of a fixed output gradient into rows that require one; the gradient of the rows is
checked against float64 torch first.
"""
import torch
from torch import Tensor

import pyg_fast
from benchmarks.common import REL_TOL, Recorder, bench_methods, budget_for
from benchmarks.graphs import load_graph, selected

SUITE = "segment_reduce_backward"
GRAPHS = ("arxiv_like", "reddit2_like")
QUICK_GRAPHS = ("quick_powerlaw",)
FEATURES = (16, 64)
QUICK_FEATURES = (16,)
REDUCES = ("sum", "mean", "max")
SCATTER_REDUCE_NAMES = {"sum": "sum", "mean": "mean", "max": "amax"}


def scatter_reduce(rows: Tensor, index: Tensor, num_segments: int, reduce: str) -> Tensor:
    """torch's scatter_reduce of ``rows`` [E, F] into [num_segments, F], empty segments 0."""
    out = rows.new_zeros(num_segments, rows.size(1))
    return out.scatter_reduce(0, index.view(-1, 1).expand_as(rows), rows, SCATTER_REDUCE_NAMES[reduce],
                              include_self=False)


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(0)
    for graph in selected(QUICK_GRAPHS if quick else GRAPHS):
        data = load_graph(graph, device)  # sorted by destination
        V, E = data.num_nodes, data.edge_index.size(1)
        orders = {"sorted": data.edge_index[1].contiguous(),
                  "fresh": data.edge_index[1][torch.randperm(E, device=device, generator=gen)].contiguous()}
        for F in QUICK_FEATURES if quick else FEATURES:
            rows = torch.randn(E, F, device=device, generator=gen)
            grad = torch.randn(V, F, device=device, generator=gen)
            for reduce in REDUCES:
                for order, index in orders.items():
                    ref_rows = rows.double().requires_grad_()
                    scatter_reduce(ref_rows, index, V, reduce).backward(grad.double())
                    ref = ref_rows.grad
                    del ref_rows
                    x = rows.clone().requires_grad_()

                    def step(reduction):
                        x.grad = None
                        reduction().backward(grad)
                        return x.grad

                    fresh = order == "fresh"
                    methods = {
                        "pyg_fast": lambda: step(lambda: pyg_fast.segment_reduce(
                            x, index.clone() if fresh else index, dim_size=V, reduce=reduce, sorted=not fresh or None)),
                        "torch_scatter_reduce": lambda: step(lambda: scatter_reduce(
                            x, index.clone() if fresh else index, V, reduce)),
                    }
                    bench_methods(rec, SUITE, {"graph": graph, "F": F, "reduce": reduce, "order": order}, methods,
                                  ref, device, REL_TOL[torch.float32] * 10, budget_for(quick))
                    del ref, x
