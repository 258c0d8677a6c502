"""Per-call cost of one layer on a tiny graph (50 nodes), where Python and dispatch
overhead dominate: a training step (forward + backward) of GCN, GIN, SAGE and GAT,
stock PyG against pyg_fast, on the CPU with one thread.

    python -m benchmarks.layer_overhead [--steps 2000] [--blocks 9] [--profile gat]

Both layers of a pair hold the same parameters and their outputs and gradients are
checked against each other first. Steps run in blocks that alternate between the two
backends (so load from other processes hits both alike); the median block gives the
microseconds per step. ``--profile LAYER`` prints cProfile's top functions of
pyg_fast's step instead.
"""
import argparse
import cProfile
import pstats
import time
from typing import Callable, Dict, Tuple

import torch
import torch_geometric.nn as pyg_nn

import pyg_fast.nn as fast_nn

NUM_NODES, NUM_EDGES, CHANNELS = 50, 200, 16


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


def us_per_step(layer: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step(layer, x, edge_index)
    return (time.perf_counter() - start) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per timed block")
    parser.add_argument("--blocks", type=int, default=9, help="timed blocks per backend (median taken)")
    parser.add_argument("--profile", choices=["GCN", "GIN", "SAGE", "GAT"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(NUM_NODES, CHANNELS, requires_grad=True)
    edge_index = torch.randint(0, NUM_NODES, (2, NUM_EDGES))
    pairs = make_layers()
    if args.profile:
        fast = pairs[args.profile][1]
        us_per_step(fast, x, edge_index, 100)
        profiler = cProfile.Profile()
        profiler.runcall(us_per_step, fast, x, edge_index, args.steps)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return
    print(f"{NUM_NODES} nodes, {NUM_EDGES} edges, {CHANNELS} channels, forward + backward, 1 thread, "
          f"median of {args.blocks} blocks of {args.steps} steps")
    print("| layer | PyG (us/step) | pyg_fast (us/step) | pyg_fast / PyG |")
    print("| --- | --- | --- | --- |")
    for name, (ref, fast) in pairs.items():
        check(ref, fast, x, edge_index)
        times = {"pyg": [], "pyg_fast": []}
        for layer in (ref, fast):
            us_per_step(layer, x, edge_index, args.steps // 10)  # warm-up
        for _ in range(args.blocks):
            times["pyg"].append(us_per_step(ref, x, edge_index, args.steps))
            times["pyg_fast"].append(us_per_step(fast, x, edge_index, args.steps))
        pyg, ours = (sorted(t)[len(t) // 2] for t in (times["pyg"], times["pyg_fast"]))
        print(f"| {name} | {pyg:.1f} | {ours:.1f} | {ours / pyg:.2f} |")


if __name__ == "__main__":
    main()
