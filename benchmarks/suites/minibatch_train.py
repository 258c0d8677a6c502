"""Suite "minibatch_train": a training step on a new sampled graph every step, as PyG's reddit
example runs it (fanout [25, 10], 1,024 seeds, 602 input features, hidden 256, two layers).

Case keys: model (sage, gcn, gat), graph (reddit2_like, and arxiv_like for another degree
distribution). Methods: ``pyg_fast`` (the converted model), ``pyg_fast_compiled`` (the
converted model under ``torch.compile(dynamic=True)``), ``pyg`` (stock eager), ``pyg_compiled``
(stock, ``torch.compile(dynamic=True)``), ``pyg_patched`` (stock eager under the global switch
``pyg_fast.patch()``, switched on around each timing round). Batches are sampled once on the
device before timing (uniform neighbours with replacement, edges grouped by destination hop by
hop, seeds first: the sampler's order), and every timed step takes the next batch's
``edge_index`` as a fresh tensor, so no per-graph cache can be reused. Each method records
``host_ms`` (host time of a step without waiting for the device), ``device_ms`` (device time of
the step's kernels, profiled) and ``syncs`` (host synchronisations per step, from torch's sync
debug mode) beside its median step time.
"""
import contextlib
import copy
import warnings
from typing import List, NamedTuple

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

import pyg_fast.nn
from benchmarks.suites.e2e import patched
from benchmarks.common import (TIMING_ROUNDS, Recorder, budget_for, compiled_apart, host_ms, synchronize,
                               time_interleaved)
from benchmarks.graphs import load_graph, selected

SUITE = "minibatch_train"
GRAPHS = ("reddit2_like", "arxiv_like")
QUICK_GRAPHS = ("quick_powerlaw",)
MODELS = ("sage", "gcn", "gat")
FANOUTS, SEEDS, IN_FEATURES, HIDDEN, CLASSES = (25, 10), 1024, 602, 256, 41
QUICK = dict(seeds=64, in_features=32, hidden=32)
BATCHES = 16


class Batch(NamedTuple):
    x: torch.Tensor
    edge_index: torch.Tensor
    y: torch.Tensor  # labels of the seeds, the first len(y) nodes


def sample(colptr: torch.Tensor, row: torch.Tensor, seeds: torch.Tensor, fanouts, features, labels) -> Batch:
    """A neighbour sample of ``seeds``: per hop, up to ``fanout`` in-neighbours of each frontier
    node (all of them where it has fewer), drawn uniformly with replacement; local node ids in
    order of discovery (seeds first); edges grouped by destination, hop after hop."""
    num_nodes = colptr.numel() - 1
    local = torch.full((num_nodes,), -1, dtype=torch.long, device=seeds.device)
    local[seeds] = torch.arange(seeds.numel(), device=seeds.device)
    nodes, frontier, srcs, dsts = [seeds], seeds, [], []
    for fanout in fanouts:
        degree = colptr[frontier + 1] - colptr[frontier]
        count = degree.clamp(max=fanout)
        owner = torch.repeat_interleave(torch.arange(frontier.numel(), device=seeds.device), count)
        rank = torch.arange(owner.numel(), device=seeds.device) - torch.repeat_interleave(count.cumsum(0) - count, count)
        pick = torch.where(degree[owner] > fanout, (torch.rand(owner.numel(), device=seeds.device)
                                                    * degree[owner]).long(), rank)
        src = row[colptr[frontier][owner] + pick]
        new = src[local[src] < 0].unique()
        local[new] = torch.arange(sum(n.numel() for n in nodes), sum(n.numel() for n in nodes) + new.numel(),
                                  device=seeds.device)
        srcs.append(local[src])
        dsts.append(local[frontier][owner])
        nodes.append(new)
        frontier = new
    n_id = torch.cat(nodes)
    return Batch(features[n_id], torch.stack([torch.cat(srcs), torch.cat(dsts)]), labels[seeds])


def make_model(kind: str, in_features: int, hidden: int) -> torch.nn.Module:
    if kind == "sage":
        convs = [pyg_nn.SAGEConv(in_features, hidden), pyg_nn.SAGEConv(hidden, CLASSES)]
    elif kind == "gcn":
        convs = [pyg_nn.GCNConv(in_features, hidden), pyg_nn.GCNConv(hidden, CLASSES)]
    else:
        convs = [pyg_nn.GATConv(in_features, hidden // 4, heads=4), pyg_nn.GATConv(hidden, CLASSES)]
    return Net(convs)


class Net(torch.nn.Module):
    def __init__(self, convs: List[torch.nn.Module]):
        super().__init__()
        self.convs = torch.nn.ModuleList(convs)

    def forward(self, x, edge_index):
        x = self.convs[0](x, edge_index).relu()
        return self.convs[1](x, edge_index)


def stepper(model: torch.nn.Module, batches: List[Batch]):
    """A train step function that takes the next batch, with a fresh copy of its edge_index."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = {"i": 0}

    def step():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        optimizer.zero_grad(set_to_none=True)
        out = model(batch.x, batch.edge_index.clone())
        F.cross_entropy(out[:batch.y.numel()], batch.y).backward()
        optimizer.step()
    return step


def syncs_per_step(step, device, steps: int = 5) -> float:
    if device.type != "cuda":
        return 0.0
    synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # The sync debug mode's own report; its one-time notice that it is a prototype ("Synchronization
    # debug mode is ...") is not a synchronisation.
    return sum("called a synchronizing CUDA operation" in str(w.message) for w in caught) / steps


def device_ms(step, device, steps: int = 5) -> float:
    """Device time of one step's kernels (CUDA; the wall time on the CPU)."""
    if device.type != "cuda":
        return float("nan")
    synchronize(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    return total_us / 1e3 / steps


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    seeds, in_features, hidden = ((QUICK["seeds"], QUICK["in_features"], QUICK["hidden"]) if quick
                                  else (SEEDS, IN_FEATURES, HIDDEN))
    handle = pyg_fast.patch()
    handle.undo()
    for graph_name in selected(QUICK_GRAPHS if quick else GRAPHS):
        data = load_graph(graph_name, device)  # sorted by destination: CSC
        num_nodes = data.num_nodes
        colptr = torch._convert_indices_from_coo_to_csr(data.edge_index[1], num_nodes)
        gen = torch.Generator(device=device).manual_seed(0)
        features = torch.randn(num_nodes, in_features, device=device, generator=gen)
        labels = torch.randint(0, CLASSES, (num_nodes,), device=device, generator=gen)
        torch.manual_seed(0)
        batches = [sample(colptr, data.edge_index[0], torch.randperm(num_nodes, device=device)[:seeds], FANOUTS,
                          features, labels) for _ in range(BATCHES)]
        for kind in MODELS:
            torch.manual_seed(0)
            stock = make_model(kind, in_features, hidden).to(device)
            fast = pyg_fast.nn.convert(copy.deepcopy(stock))
            torch._dynamo.reset()
            stock_compiled = compiled_apart(copy.deepcopy(stock), dynamic=True)
            fast_compiled = compiled_apart(copy.deepcopy(fast), dynamic=True)
            b = batches[0]
            with torch.no_grad():
                ref = stock(b.x, b.edge_index)
            fns = {"pyg_fast": stepper(fast, batches), "pyg_fast_compiled": stepper(fast_compiled, batches),
                   "pyg": stepper(stock, batches), "pyg_compiled": stepper(stock_compiled, batches),
                   "pyg_patched": stepper(stock, batches)}
            outputs = {"pyg_fast": lambda: fast(b.x, b.edge_index.clone()),
                       "pyg_fast_compiled": lambda: fast_compiled(b.x, b.edge_index.clone()),
                       "pyg_compiled": lambda: stock_compiled(b.x, b.edge_index.clone()),
                       "pyg_patched": patched(handle, lambda: stock(b.x, b.edge_index.clone()))}
            contexts = {"pyg_patched": lambda: handle}
            case = {"model": kind, "graph": graph_name}
            # Every output checked before any step trains a model; then a warm-up of every batch once
            # (compiles, caches of the allocator)
            for stage in ("check", "warm-up"):
                for method, fn in list(fns.items()):
                    try:
                        if stage == "check" and method in outputs:
                            with torch.no_grad():
                                torch.testing.assert_close(outputs[method](), ref, rtol=1e-3, atol=1e-3)
                        elif stage == "warm-up":
                            with contexts.get(method, contextlib.nullcontext)():
                                for _ in range(len(batches)):
                                    fn()
                    except Exception as error:  # noqa: BLE001 - e.g. Inductor failing on stock GAT
                        if isinstance(error, AssertionError) and method != "pyg_compiled":
                            raise  # a wrong output of ours (or of the switch) stops the suite
                        rec.add(SUITE, case, method, None, error=f"{type(error).__name__}: {str(error)[:300]}")
                        del fns[method]
            times = time_interleaved(fns, *budget_for(quick), device, TIMING_ROUNDS, contexts)
            for method, fn in fns.items():
                with contexts.get(method, contextlib.nullcontext)():
                    rec.add(SUITE, case, method, times[method], host_ms=host_ms(fn, device),
                            device_ms=device_ms(fn, device), syncs=syncs_per_step(fn, device),
                            edges_per_batch=sum(b.edge_index.size(1) for b in batches) / len(batches))
            del stock, fast, stock_compiled, fast_compiled, fns
            torch._dynamo.reset()
