"""Where ``pyg_fast.transforms.Reorder``'s time goes: each stage timed alone (device synchronised
around it, median of a few calls after a warm-up), the work it did (label propagation rounds,
Cuthill-McKee passes), and torch.profiler's busiest ops and host syncs over one whole call.

    python -m benchmarks.profile_reorder --device cuda --graphs sbm_1000,sbm_large --out DIR

Writes ``DIR/profile_reorder.md``. The graphs are those of suite "reorder".
"""
import argparse
from pathlib import Path

import torch

from benchmarks.common import synchronize
from benchmarks.suites import reorder as reorder_suite
from benchmarks.suites import schedule_select
from pyg_fast.transforms import reorder

REPEATS = 5


def load(name: str, device):
    if name in reorder_suite.LARGE_SBM:
        return reorder_suite.large_sbm(name, device)
    return schedule_select.graph(name, device)


def timed(fn, device):
    """(result, median ms) of ``REPEATS`` calls after one untimed call (the suite's timer)."""
    return reorder_suite.time_call(fn, device, REPEATS)


class Counter:
    """Counts calls of a module-level function of ``pyg_fast.transforms.reorder`` while active."""

    def __init__(self, name: str):
        self.name, self.calls = name, 0

    def __enter__(self):
        self.original = getattr(reorder, self.name)

        def counted(*args, **kwargs):
            self.calls += 1
            return self.original(*args, **kwargs)
        setattr(reorder, self.name, counted)
        return self

    def __exit__(self, *exc):
        setattr(reorder, self.name, self.original)


def profile_graph(name: str, device) -> list:
    data = load(name, device)
    ei, V = data.edge_index, data.num_nodes
    data.x = torch.randn(V, 64, device=device)
    lines = [f"## {name}: {V:,} nodes, {ei.size(1):,} edges", ""]
    adj, adj_ms = timed(lambda: reorder.undirected_adjacency(ei, V), device)
    labels, lp_ms = timed(lambda: reorder.label_propagation(ei, V, adjacency=adj), device)
    perm, cm_ms = timed(lambda: reorder.community_rcm_order(ei, V, labels, adj), device)
    with Counter("_next_level") as levels:
        reorder.community_rcm_order(ei, V, labels, adj)
    _, permute_ms = timed(lambda: reorder.permute(data, perm), device)
    _, total_ms = timed(lambda: reorder.Reorder()(data), device)
    lines += ["| stage | ms | work |", "|---|---|---|",
              f"| undirected_adjacency | {adj_ms:.2f} | |",
              f"| label_propagation | {lp_ms:.2f} | {int(labels.max()) + 1} communities |",
              f"| community_rcm_order | {cm_ms:.2f} | largest community {int(torch.bincount(labels).max()):,} nodes, "
              f"{levels.calls} level-synchronous BFS levels |",
              f"| permute (x: F = 64) | {permute_ms:.2f} | |",
              f"| Reorder() whole | {total_ms:.2f} | |", ""]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        reorder.Reorder()(data)
        synchronize(device)
    events = prof.key_averages()
    rounds = sum(e.count for e in events if e.key == "pyg_fast::label_propagation_round")
    syncs = sum(e.count for e in events if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize"))
    copies = sum(e.count for e in events if e.key == "cudaMemcpyAsync")
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    lines += [f"Label propagation rounds {rounds}, host syncs {syncs}, cudaMemcpyAsync {copies}, kernel launches {launches}.", "", "```",
              events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=48), "```", ""]
    if torch.device(device).type == "cuda":
        lines += ["```", events.table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=48),
                  "```", ""]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--graphs", default="sbm_1000,sbm_large")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lines = ["# Reorder profile", ""]
    for name in args.graphs.split(","):
        lines += profile_graph(name, torch.device(args.device))
        print("\n".join(lines[-12:]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile_reorder.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
