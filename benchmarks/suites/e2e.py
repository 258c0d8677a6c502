"""End-to-end suites "e2e_train" and "e2e_infer": 3-layer GCN, GIN, SAGE, GAT (hidden 64,
GAT 4 heads x 16) built from PyG's layers, run as stock PyG (``pyg``), after
pyg_fast.nn.convert (``pyg_fast``) and as stock PyG under the global switch ``pyg_fast.patch()``
(``pyg_patched``, switched on around each of its timing rounds), in the same process. A train step is
forward + cross-entropy + backward + Adam step."""
import copy
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

import pyg_fast.nn
from pyg_fast.patch import PatchHandle
from benchmarks.common import TIMING_ROUNDS, Recorder, budget_for, time_interleaved
from benchmarks.graphs import load_graph, selected

MODELS = ("gcn", "gin", "sage", "gat")
GRAPHS = ("cora", "arxiv_like", "reddit2_like")
QUICK_GRAPHS = ("cora",)
HIDDEN, LAYERS, CLASSES, IN_FEATURES = 64, 3, 16, 64


def make_layer(model: str, c_in: int, c_out: int) -> torch.nn.Module:
    if model == "gcn":
        return pyg_nn.GCNConv(c_in, c_out)
    if model == "gin":
        return pyg_nn.GINConv(torch.nn.Sequential(torch.nn.Linear(c_in, c_out), torch.nn.ReLU(),
                                                  torch.nn.Linear(c_out, c_out)))
    if model == "sage":
        return pyg_nn.SAGEConv(c_in, c_out)
    return pyg_nn.GATConv(c_in, c_out // 4, heads=4)


class Net(torch.nn.Module):
    def __init__(self, model: str):
        super().__init__()
        dims = [IN_FEATURES] + [HIDDEN] * (LAYERS - 1) + [CLASSES]
        self.convs = torch.nn.ModuleList(make_layer(model, a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def _peak_mb(device, fn) -> float:
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def graph_inputs(graph_name: str, device: torch.device):
    """(x, edge_index, y) of a benchmark graph: random features and labels, fixed seed."""
    data = load_graph(graph_name)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(data.num_nodes, IN_FEATURES, generator=gen).to(device)
    y = torch.randint(0, CLASSES, (data.num_nodes,), generator=gen).to(device)
    return x, data.edge_index.to(device), y


def stock_and_fast(model_name: str, device: torch.device):
    """The stock PyG model and its pyg_fast conversion, with the same parameters."""
    torch.manual_seed(0)
    stock = Net(model_name).to(device)
    return stock, pyg_fast.nn.convert(copy.deepcopy(stock))


def step_functions(net: torch.nn.Module, x, edge_index, y):
    """(train_step, infer): forward + cross-entropy + backward + Adam step; a no-grad forward."""
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net(x, edge_index), y).backward()
        optimizer.step()

    def infer():
        with torch.no_grad():
            net(x, edge_index)

    return train_step, infer


def cases(device: torch.device, quick: bool, graphs: Optional[Sequence[str]] = None):
    """(case, graph inputs (x, edge_index, y), stock model, converted model) of every model on
    every graph (``graphs``, else the suite's); the device's cache is emptied after each."""
    for graph_name in selected(graphs or (QUICK_GRAPHS if quick else GRAPHS)):
        inputs = graph_inputs(graph_name, device)
        for model_name in MODELS:
            stock, fast = stock_and_fast(model_name, device)
            yield {"model": model_name, "graph": graph_name}, inputs, stock, fast
            del stock, fast
            if device.type == "cuda":
                torch.cuda.empty_cache()


def patched(handle: PatchHandle, fn):
    """``fn`` run with ``pyg_fast.patch()``'s switch on (``handle``, entered for each call)."""
    def call():
        with handle:
            return fn()
    return call


def run(rec: Recorder, device, quick: bool = False, graphs: Optional[Sequence[str]] = None) -> None:
    device = torch.device(device)
    handle = pyg_fast.patch()
    handle.undo()
    for case, (x, edge_index, y), stock, fast in cases(device, quick, graphs):
        with torch.no_grad():  # outputs are checked before timing
            ref = stock(x, edge_index)
            torch.testing.assert_close(fast(x, edge_index), ref, rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(patched(handle, lambda: stock(x, edge_index))(), ref, rtol=1e-3, atol=1e-3)
        steps = {method: step_functions(net, x, edge_index, y) for method, net in (("pyg_fast", fast), ("pyg", stock))}
        steps["pyg_patched"] = step_functions(stock, x, edge_index, y)
        for suite, which in (("e2e_train", 0), ("e2e_infer", 1)):
            fns = {method: pair[which] for method, pair in steps.items()}
            # the two models in alternating rounds: a Cora step is host-bound, and the host's speed drifts
            times = time_interleaved(fns, *budget_for(quick), device, TIMING_ROUNDS, {"pyg_patched": lambda: handle})
            for method, fn in fns.items():
                rec.add(suite, case, method, times[method],
                        peak_mb=_peak_mb(device, patched(handle, fn) if method == "pyg_patched" else fn))
