"""Per-call host cost where Python and dispatch overhead dominate, stock PyG against pyg_fast,
on the CPU with one thread.

    python -m benchmarks.layer_overhead [--steps 2000] [--blocks 9] [--fresh] [--profile GAT]
    python -m benchmarks.layer_overhead --models [--nodes 2708 --edges 10556] [--steps 100] [--blocks 9]

Default: one layer on a tiny graph (50 nodes), a training step's layer work (forward +
backward) of GCN, GIN, SAGE and GAT; ``--fresh`` hands every step a new edge_index (a copy of
the next of 64 random graphs), as a mini-batch loop does, so that the graph's preparation is paid
every step. ``--models``: the end-to-end models of
``benchmarks/suites/e2e.py`` (3 layers) with tiny features (8 channels, GAT 4 heads x 2, so
kernels cost little) on a Cora-sized graph (2,708 nodes, 10,556 power-law edges; ``--nodes``
and ``--edges`` change it: on a tiny one what is left is host time): a training step (forward,
cross-entropy, backward, Adam) and an inference step, with the number of kernel-launching ops
per step (torch.profiler on the CPU: leaf ATen/pyg_fast ops that are not views or
allocations; on the GPU each is a launch).

Both models of a pair hold the same parameters and their outputs (and, per layer, gradients)
are checked against each other first. Steps run in blocks that alternate between the two
backends (so load from other processes hits both alike); the median block gives the
microseconds per step. ``--profile LAYER`` prints cProfile's top functions of pyg_fast's
layer step instead.
"""
import argparse
import copy
import cProfile
import functools
import itertools
import pstats
import time
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch.profiler import ProfilerActivity, profile

import pyg_fast.nn as fast_nn
from benchmarks.graphs import power_law_graph
from benchmarks.suites import e2e

NUM_NODES, NUM_EDGES, CHANNELS = 50, 200, 16
# --models: tiny features, by default on a graph of Cora's size
MODEL_NODES, MODEL_EDGES, MODEL_CHANNELS, MODEL_CLASSES, MODEL_LAYERS = 2708, 10556, 8, 4, 3
# ATen ops that launch no kernel (views, metadata, allocation, dtype no-ops)
NOT_KERNELS = {"view", "reshape", "_reshape_alias", "t", "transpose", "permute", "select", "slice", "squeeze",
               "unsqueeze", "expand", "expand_as", "detach", "as_strided", "alias", "_unsafe_view", "empty",
               "empty_like", "empty_strided", "new_empty", "new_empty_strided", "to", "_to_copy", "contiguous",
               "lift_fresh", "resize_", "view_as", "result_type", "item", "_local_scalar_dense", "unflatten",
               "flatten", "resolve_conj", "resolve_neg"}


def make_layers() -> Dict[str, Tuple[torch.nn.Module, torch.nn.Module]]:
    """layer name -> (PyG layer, pyg_fast layer with the same parameters)."""
    builders: Dict[str, Callable[[type], torch.nn.Module]] = {
        "GCN": lambda cls: cls(CHANNELS, CHANNELS),
        "GIN": lambda cls: cls(torch.nn.Linear(CHANNELS, CHANNELS), train_eps=True),
        "SAGE": lambda cls: cls(CHANNELS, CHANNELS),
        "GAT": lambda cls: cls(CHANNELS, CHANNELS // 2, heads=2),
    }
    pairs = {}
    for name, build in builders.items():
        pyg_cls = getattr(pyg_nn, f"{name}Conv")
        ref = build(pyg_cls)
        fast = fast_nn.convert(build(pyg_cls))
        fast.load_state_dict(ref.state_dict())
        assert type(fast) is getattr(fast_nn, f"{name}Conv")
        pairs[name] = (ref, fast)
    return pairs


def step(layer: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """One training step's layer work: forward, backward into the parameters and x."""
    out = layer(x, edge_index)
    out.sum().backward()
    return out


def check(ref: torch.nn.Module, fast: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> None:
    grads = []
    for layer in (ref, fast):
        layer.zero_grad()
        x.grad = None
        out = step(layer, x, edge_index)
        grads.append([out.detach()] + [p.grad.clone() for p in layer.parameters()] + [x.grad.clone()])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def us_per_step(layer: torch.nn.Module, x: torch.Tensor, edges: Callable[[], torch.Tensor], steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step(layer, x, edges())
    return (time.perf_counter() - start) / steps * 1e6


def edge_source(fresh: bool, num_nodes: int, num_edges: int) -> Callable[[], torch.Tensor]:
    """The edge_index of each step: one tensor throughout, or (``fresh``) a new copy of the next of
    64 random graphs every step (a copy: a graph seen again must not find what was kept for it)."""
    graphs = [torch.randint(0, num_nodes, (2, num_edges)) for _ in range(64 if fresh else 1)]
    if not fresh:
        return lambda: graphs[0]
    cycle = itertools.cycle(graphs)
    return lambda: next(cycle).clone()


def median_us(fns: Dict[str, Callable[[], object]], steps: int, blocks: int) -> Dict[str, float]:
    """Median microseconds per call of each function, blocks alternating between them."""
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        for _ in range(max(1, steps // 10)):
            fn()
    for _ in range(blocks):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def kernel_ops(fn: Callable[[], object]) -> int:
    """Kernel-launching ops of one call: leaf ATen/pyg_fast ops (an op that calls others counts as
    those) other than views and allocations."""
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()

    def count(event) -> int:
        below = sum(count(child) for child in event.cpu_children)
        if below:
            return below
        namespace, _, name = event.name.partition("::")
        return int(namespace in ("aten", "pyg_fast") and name not in NOT_KERNELS)
    return sum(count(event) for event in prof.events() if event.cpu_parent is None)


class Net(e2e.Net):
    """benchmarks/suites/e2e.py's model (its forward) with the given widths."""

    def __init__(self, model: str, dims: List[int]):
        torch.nn.Module.__init__(self)  # not e2e.Net's: it builds the suite's widths
        self.convs = torch.nn.ModuleList(e2e.make_layer(model, a, b) for a, b in zip(dims[:-1], dims[1:]))


def train_step(net: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               edge_index: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(net(x, edge_index), y).backward()
    optimizer.step()


@torch.no_grad()
def infer_step(net: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> None:
    net(x, edge_index)


def model_steps(model: str, x: torch.Tensor, y: torch.Tensor, edge_index: torch.Tensor):
    """{"train": {backend: step}, "infer": {backend: step}} for PyG's model and its conversion."""
    torch.manual_seed(0)
    stock = Net(model, [MODEL_CHANNELS] * MODEL_LAYERS + [MODEL_CLASSES])
    fast = fast_nn.convert(copy.deepcopy(stock))
    with torch.no_grad():
        torch.testing.assert_close(fast(x, edge_index), stock(x, edge_index), rtol=1e-4, atol=1e-4)
    steps: Dict[str, Dict[str, Callable[[], None]]] = {"train": {}, "infer": {}}
    for backend, net in (("pyg", stock), ("pyg_fast", fast)):
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        steps["train"][backend] = functools.partial(train_step, net, optimizer, x, y, edge_index)
        steps["infer"][backend] = functools.partial(infer_step, net, x, edge_index)
    return steps


def run_models(num_nodes: int, num_edges: int, steps: int, blocks: int) -> None:
    edge_index = power_law_graph(num_nodes, num_edges, seed=0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(num_nodes, MODEL_CHANNELS, generator=generator)
    y = torch.randint(0, MODEL_CLASSES, (num_nodes,), generator=generator)
    print(f"{MODEL_LAYERS}-layer models, {num_nodes} nodes, {num_edges} edges, {MODEL_CHANNELS} channels "
          f"(GAT 4 heads), 1 thread, median of {blocks} blocks of {steps} steps")
    print("| model | step | PyG (us) | pyg_fast (us) | pyg_fast / PyG | PyG kernels | pyg_fast kernels |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model in e2e.MODELS:
        for mode, fns in model_steps(model, x, y, edge_index).items():
            us = median_us(fns, steps, blocks)
            kernels = {backend: kernel_ops(fn) for backend, fn in fns.items()}
            print(f"| {model} | {mode} | {us['pyg']:.0f} | {us['pyg_fast']:.0f} | {us['pyg_fast'] / us['pyg']:.2f} "
                  f"| {kernels['pyg']} | {kernels['pyg_fast']} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per timed block (default 2000 per layer, 100 with --models)")
    parser.add_argument("--blocks", type=int, default=9, help="timed blocks per backend (median taken)")
    parser.add_argument("--profile", choices=["GCN", "GIN", "SAGE", "GAT"], default=None)
    parser.add_argument("--fresh", action="store_true", help="layers: a new edge_index every step")
    parser.add_argument("--models", action="store_true", help="3-layer models, training and inference steps")
    parser.add_argument("--nodes", type=int, default=MODEL_NODES, help="--models: nodes of the graph")
    parser.add_argument("--edges", type=int, default=MODEL_EDGES, help="--models: edges of the graph")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.models:
        run_models(args.nodes, args.edges, args.steps or 100, args.blocks)
        return
    steps = args.steps or 2000
    torch.manual_seed(0)
    x = torch.randn(NUM_NODES, CHANNELS, requires_grad=True)
    edges = edge_source(args.fresh, NUM_NODES, NUM_EDGES)
    pairs = make_layers()
    if args.profile:
        fast = pairs[args.profile][1]
        us_per_step(fast, x, edges, 100)
        profiler = cProfile.Profile()
        profiler.runcall(us_per_step, fast, x, edges, steps)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return
    graph = "a new edge_index every step" if args.fresh else "one edge_index"
    print(f"{NUM_NODES} nodes, {NUM_EDGES} edges ({graph}), {CHANNELS} channels, forward + backward, 1 thread, "
          f"median of {args.blocks} blocks of {steps} steps")
    print("| layer | PyG (us/step) | pyg_fast (us/step) | pyg_fast / PyG |")
    print("| --- | --- | --- | --- |")
    for name, (ref, fast) in pairs.items():
        check(ref, fast, x, edges())
        us = median_us({"pyg": lambda ref=ref: step(ref, x, edges()),
                        "pyg_fast": lambda fast=fast: step(fast, x, edges())}, steps, args.blocks)
        print(f"| {name} | {us['pyg']:.1f} | {us['pyg_fast']:.1f} | {us['pyg_fast'] / us['pyg']:.2f} |")


if __name__ == "__main__":
    main()
