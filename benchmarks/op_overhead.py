"""Host time of one call, where the host sets the pace: pyg_fast's raw ops, its public wrappers
and the torch_scatter stand-in against torch's ops and torch_scatter itself (where importable),
on a Cora-sized graph, the same index every call, no synchronisation in the timed loop.

    python -m benchmarks.op_overhead [--device cuda] [--calls 3000] [--rounds 3]

Prints a table: microseconds of host time a call (the best of ``--rounds`` rounds), for
comparing what each layer of the op stack adds to the kernel's launch; on the CPU the host time is
the whole call, kernel included. Every call's result is checked against a float64 reference
first. On an H200 host the raw op took 9.5 us, the stand-in's ``segment_csr`` 25 and
torch_scatter's 10.7: the gap is the Python layer above the op, not the op.
"""
import argparse
import time
from typing import Callable, Dict, List, Tuple

import torch

import pyg_fast
from pyg_fast.compat import torch_scatter as stand_in

NUM_NODES, NUM_EDGES, FEATURES = 2708, 10556, 16


def host_us(fn: Callable[[], object], device: torch.device, calls: int, rounds: int) -> float:
    """Best microseconds of host time per call over ``rounds`` rounds of ``calls`` calls."""
    for _ in range(max(1, calls // 10)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return best


def calls_to_time(device: torch.device) -> List[Tuple[str, str, Callable[[], torch.Tensor], torch.Tensor]]:
    """(group, name, call, float64 reference of its result) for every row of the table."""
    gen = torch.Generator().manual_seed(0)
    index = torch.randint(0, NUM_NODES, (NUM_EDGES,), generator=gen).sort().values.to(device)
    ptr = torch._convert_indices_from_coo_to_csr(index, NUM_NODES)
    rows = torch.randn(NUM_EDGES, FEATURES, generator=gen).to(device)
    rows3 = rows.view(1, NUM_EDGES, FEATURES)
    wide = rows.double()
    sums = torch.zeros(NUM_NODES, FEATURES, dtype=torch.float64, device=device).index_add_(0, index, wide)
    maxima = torch.zeros(NUM_NODES, FEATURES, dtype=torch.float64, device=device).scatter_reduce_(
        0, index.view(-1, 1).expand_as(wide), wide, "amax", include_self=False)
    raw = torch.ops.pyg_fast.segment_reduce.default
    table = [
        ("torch", "index_add_ into zeros", lambda: torch.zeros(NUM_NODES, FEATURES, device=device).index_add_(
            0, index, rows), sums),
        ("torch", "segment_reduce (sum, offsets)", lambda: torch.segment_reduce(rows, "sum", offsets=ptr, axis=0),
         sums),
        ("pyg_fast", "raw op segment_reduce (sum)", lambda: raw(rows3, ptr, "sum", [], None)[0], sums),
        ("pyg_fast", "segment_reduce(ptr=) (sum)", lambda: pyg_fast.segment_reduce(rows, ptr=ptr, reduce="sum"), sums),
        ("pyg_fast", "segment_reduce(index) (sum)",
         lambda: pyg_fast.segment_reduce(rows, index, dim_size=NUM_NODES, reduce="sum"), sums),
        ("stand-in", "segment_csr (sum)", lambda: stand_in.segment_csr(rows, ptr, reduce="sum"), sums),
        ("stand-in", "segment_csr (max)", lambda: stand_in.segment_csr(rows, ptr, reduce="max"), maxima),
        ("stand-in", "scatter (sum)", lambda: stand_in.scatter(rows, index, 0, dim_size=NUM_NODES), sums),
        ("stand-in", "scatter_max", lambda: stand_in.scatter_max(rows, index, 0, dim_size=NUM_NODES)[0], maxima),
    ]
    try:
        import torch_scatter
    except ImportError:
        return table
    return table + [
        ("torch_scatter", "segment_csr (sum)", lambda: torch_scatter.segment_csr(rows, ptr, reduce="sum"), sums),
        ("torch_scatter", "segment_csr (max)", lambda: torch_scatter.segment_csr(rows, ptr, reduce="max"), maxima),
        ("torch_scatter", "scatter (sum)", lambda: torch_scatter.scatter(rows, index, 0, dim_size=NUM_NODES), sums),
        ("torch_scatter", "scatter_max",
         lambda: torch_scatter.scatter_max(rows, index, 0, dim_size=NUM_NODES)[0], maxima),
    ]


def measure(device: torch.device, calls: int, rounds: int) -> Dict[Tuple[str, str], float]:
    """Host microseconds a call of every row, each checked against its reference first."""
    results = {}
    for group, name, fn, reference in calls_to_time(device):
        torch.testing.assert_close(fn().double(), reference, rtol=1e-4, atol=1e-4)
        results[(group, name)] = host_us(fn, device, calls, rounds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=3000, help="calls per timed round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (the best is taken)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    results = measure(device, args.calls, args.rounds)
    print(f"{NUM_NODES} segments, {NUM_EDGES} rows x {FEATURES}, {device}, host us a call (best of {args.rounds} "
          f"rounds of {args.calls} calls)")
    print("| group | call | host us |")
    print("| --- | --- | --- |")
    for (group, name), us in results.items():
        print(f"| {group} | {name} | {us:.1f} |")


if __name__ == "__main__":
    main()
