"""Suite "sampler": one mini-batch of neighbour sampling (seeds drawn at random, fanouts [25, 10]).

Case keys: graph, fanout, batch_size. Methods: ``pyg_fast`` (``pyg_fast.sampler.sample`` with the
graph's CSC on the benchmark device, its hops replayed from a CUDA graph as ``NeighborSampler``
does), ``pyg_fast_cpu`` (the same on the CPU) and ``torch_sparse``
(torch-sparse's CPU sampler, ``torch.ops.torch_sparse.neighbor_sample``, where it is installed).
Each record carries ``edges_per_s``, sampled edges per second. Before timing, every method's
batch is checked: each sampled edge exists in the graph and each target got min(in-degree,
fanout) edges at the first hop.
"""
import torch

import pyg_fast.sampler
from benchmarks.common import Recorder, budget_for, time_ms
from benchmarks.graphs import load_graph, selected

SUITE = "sampler"
GRAPHS = ("arxiv_like", "reddit2_like")
QUICK_GRAPHS = ("quick_powerlaw",)
FANOUTS = [25, 10]
BATCH_SIZES = (1024,)


def csc(edge_index, num_nodes):
    """(colptr, row) over the targets, and the CSC's edge of every input edge."""
    perm = torch.argsort(edge_index[1], stable=True)
    colptr = torch._convert_indices_from_coo_to_csr(edge_index[1, perm], num_nodes)
    return colptr, edge_index[0, perm]


def check(colptr, row, seeds, node, src, dst, edge):
    """The batch's edges exist and hop 1 took min(in-degree, fanout) edges per seed."""
    assert torch.equal(row[edge.long()], node[src.long()]), "a sampled edge is not in the graph"
    assert bool((edge.long() >= colptr[node[dst.long()]]).all() & (edge.long() < colptr[node[dst.long()] + 1]).all())
    deg = (colptr[1:] - colptr[:-1])[seeds]
    first_hop = dst < seeds.numel()
    got = torch.bincount(dst[first_hop].long(), minlength=seeds.numel())
    assert torch.equal(got, deg.clamp(max=FANOUTS[0])), "hop 1 did not take min(in-degree, fanout) edges"


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    try:
        import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)
    except ImportError:
        pass
    for graph_name in selected(QUICK_GRAPHS if quick else GRAPHS):
        data = load_graph(graph_name, "cpu")
        colptr, row = csc(data.edge_index, data.num_nodes)
        for batch_size in BATCH_SIZES:
            gen = torch.Generator().manual_seed(0)
            seeds = torch.randperm(data.num_nodes, generator=gen)[:batch_size]
            case = {"graph": graph_name, "fanout": "25,10", "batch_size": batch_size}
            places = {"pyg_fast": device, "pyg_fast_cpu": torch.device("cpu")}
            methods = {}
            for name, place in places.items():
                c, r, s = colptr.to(place), row.to(place), seeds.to(place)
                methods[name] = (lambda c=c, r=r, s=s, g={}: pyg_fast.sampler.sample(c, r, s, FANOUTS, graphs=g)), place
            if hasattr(torch.ops, "torch_sparse") and hasattr(torch.ops.torch_sparse, "neighbor_sample"):
                methods["torch_sparse"] = (lambda: torch.ops.torch_sparse.neighbor_sample(
                    colptr, row, seeds, FANOUTS, False, True)), torch.device("cpu")
            for name, (fn, place) in methods.items():
                out = fn()
                if name == "torch_sparse":
                    node, src, dst, edge = out
                else:
                    node, src, dst, edge = out[0], out[1], out[2], out[3]
                check(colptr, row, seeds, node.cpu(), src.cpu(), dst.cpu(), edge.cpu())
                ms = time_ms(fn, *budget_for(quick), device=place)
                rec.add(SUITE, case, name, ms, edges_per_s=edge.numel() / (ms / 1e3))
