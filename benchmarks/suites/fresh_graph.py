"""Suite "fresh_graph": each op on a graph it has never seen, as in mini-batch training, where
every step brings a new edge_index.

Case keys: op (segment_sum, segment_mean, segment_max, spmm, sddmm, edge_softmax), graph, F.
Methods: ``pyg_fast`` (a new index tensor on every call: a copy of the graph's, made inside the
timed call, so every per-graph preparation is paid), ``pyg_fast_reused`` (the same index tensor
every call), and baselines that take the fresh index too: ``torch_scatter_reduce`` /
``torch_index_add`` (segment ops and SpMM as gather then scatter), ``torch_sparse_csr`` (SpMM:
building the CSR matrix of the new graph, then ``torch.sparse.mm``), ``pyg_softmax``
(``torch_geometric.utils.softmax``) and ``torch_gather`` (SDDMM as two gathers and a sum). The
edges come in a random order, as a sampler with no global sort emits them. Every method's output
is checked against a float64 reference first.
"""
import torch
import torch_geometric.utils as pyg_utils

import pyg_fast
from benchmarks.common import REL_TOL, Recorder, bench_methods, budget_for
from benchmarks.graphs import load_graph, selected

SUITE = "fresh_graph"
GRAPHS = ("cora", "arxiv_like")
QUICK_GRAPHS = ("quick_powerlaw",)
FEATURES = (16, 64)
QUICK_FEATURES = (16,)


def cases(src, dst, num_nodes, num_features, device):
    """(op, {method: fn}, float64 reference) of one graph and feature size."""
    E, V = dst.numel(), num_nodes
    rows = torch.randn(E, num_features, device=device)
    x = torch.randn(V, num_features, device=device)
    w = torch.rand(E, device=device) + 0.1
    heads = torch.randn(E, 4, device=device)
    fresh = lambda t: t.clone()  # noqa: E731
    out = []
    for reduce in ("sum", "mean", "max"):
        name = {"sum": "sum", "mean": "mean", "max": "amax"}[reduce]
        ref = torch.zeros(V, num_features, dtype=torch.float64, device=device).scatter_reduce_(
            0, dst.view(-1, 1).expand(-1, num_features), rows.double(), name, include_self=False)
        out.append((f"segment_{reduce}", {
            "pyg_fast": lambda r=reduce: pyg_fast.segment_reduce(rows, fresh(dst), dim_size=V, reduce=r),
            "pyg_fast_reused": lambda r=reduce: pyg_fast.segment_reduce(rows, dst, dim_size=V, reduce=r),
            "torch_scatter_reduce": lambda n=name: torch.zeros(V, num_features, device=device).scatter_reduce_(
                0, fresh(dst).view(-1, 1).expand(-1, num_features), rows, n, include_self=False),
        }, ref))

    def csr_spmm():
        d = fresh(dst)
        perm = d.argsort(stable=True)
        crow = torch._convert_indices_from_coo_to_csr(d[perm], V)
        matrix = torch.sparse_csr_tensor(crow, src[perm], w[perm], (V, V))
        return torch.sparse.mm(matrix, x)
    ref = torch.zeros(V, num_features, dtype=torch.float64, device=device).index_add_(
        0, dst, x.double()[src] * w.double()[:, None])
    out.append(("spmm", {
        "pyg_fast": lambda: pyg_fast.index_weight_segment_reduce(x, src, fresh(dst), w, V),
        "pyg_fast_reused": lambda: pyg_fast.index_weight_segment_reduce(x, src, dst, w, V),
        "torch_index_add": lambda: torch.zeros(V, num_features, device=device).index_add_(
            0, fresh(dst), x[src] * w[:, None]),
        "torch_sparse_csr": csr_spmm,
    }, ref))
    out.append(("sddmm", {
        "pyg_fast": lambda: pyg_fast.sddmm(x, x, fresh(src), dst, "dot"),
        "pyg_fast_reused": lambda: pyg_fast.sddmm(x, x, src, dst, "dot"),
        "torch_gather": lambda: (x[fresh(src)] * x[dst]).sum(-1),
    }, (x.double()[src] * x.double()[dst]).sum(-1)))
    out.append(("edge_softmax", {
        "pyg_fast": lambda: pyg_fast.edge_softmax(heads, fresh(dst), num_nodes=V),
        "pyg_fast_reused": lambda: pyg_fast.edge_softmax(heads, dst, num_nodes=V),
        "pyg_softmax": lambda: pyg_utils.softmax(heads, fresh(dst), num_nodes=V),
    }, pyg_utils.softmax(heads.double(), dst, num_nodes=V)))
    return out


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    for graph_name in selected(QUICK_GRAPHS if quick else GRAPHS):
        data = load_graph(graph_name, device)
        order = torch.randperm(data.edge_index.size(1), generator=torch.Generator().manual_seed(0)).to(device)
        src, dst = data.edge_index[:, order]
        for num_features in QUICK_FEATURES if quick else FEATURES:
            for op, methods, ref in cases(src, dst, data.num_nodes, num_features, device):
                bench_methods(rec, SUITE, {"op": op, "graph": graph_name, "F": num_features}, methods, ref, device,
                              REL_TOL[torch.float32], budget_for(quick))
