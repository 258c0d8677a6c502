"""Suite "sddmm": per-edge x_src[src] op x_dst[dst] on [N, heads, F / heads] features.
Methods: pyg_fast, torch (PyG's gather path), torch_sampled_addmm (dot; cuSPARSE on CUDA).
Graphs: ``graph_names`` (the default four, or the zoo with ``$PYG_FAST_BENCH_ZOO=1``, where
graphs beyond the default four take the dot only)."""
import torch

from benchmarks.common import REL_TOL, Recorder, bench_methods, budget_for
from benchmarks.graphs import BENCH_GRAPHS, graph_names, load_graph
from pyg_fast.ops import sddmm

SHAPES = ((16, 1), (32, 1), (64, 1), (64, 4), (128, 1), (256, 1))  # (F, heads)
OPS = ("dot", "add", "mul")
GATHER_LIMIT = 2 ** 32  # elements of one gathered [E, F] operand the torch baseline may build


def _gather(a, b, src, dst, op):
    if op == "dot":
        return (a.index_select(0, src) * b.index_select(0, dst)).sum(-1)
    return getattr(torch, op)(a.index_select(0, src), b.index_select(0, dst))


def _reference_dot(a, b, src, dst):
    """Float64 dots, a chunk of edges at a time (reddit2_like at F = 256 gathers 24 G elements)."""
    step = max(1, 2 ** 27 // a[0].numel())
    return torch.cat([(a.double()[src[i:i + step]] * b.double()[dst[i:i + step]]).sum(-1).float()
                      for i in range(0, src.numel(), step)])


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    budget = budget_for(quick)
    for graph_name in ("cora",) if quick else graph_names(False):
        data = load_graph(graph_name)
        src, dst = data.edge_index.to(device)
        N = data.num_nodes
        # torch.sparse.sampled_addmm's pattern (cuSPARSE on CUDA): duplicate edges merged, rows = sources
        mask = torch.sparse_coo_tensor(torch.stack([src, dst]), torch.zeros(src.numel(), device=device),
                                       (N, N)).coalesce().to_sparse_csr()
        mask_rows = torch._convert_indices_from_csr_to_coo(mask.crow_indices(), mask.col_indices())[0]
        for F, heads in SHAPES:
            a = torch.randn(N, heads, F // heads, device=device)
            b = torch.randn(N, heads, F // heads, device=device)
            for op in OPS if graph_name in BENCH_GRAPHS else ("dot",):
                if op != "dot" and (graph_name == "reddit2_like" and F > 16 or F > 128):
                    continue  # an [E, F] output of 23 M edges x F > 16 floats is beyond the point
                case = {"graph": graph_name, "F": F, "heads": heads, "op": op}
                ref = _gather(a, b, src, dst, op) if op != "dot" else _reference_dot(a, b, src, dst)
                methods = {"pyg_fast": lambda: sddmm(a, b, src, dst, op)}
                refs = {"pyg_fast": ref}
                if src.numel() * F <= GATHER_LIMIT:
                    methods["torch"], refs["torch"] = (lambda: _gather(a, b, src, dst, op)), ref
                if op == "dot" and heads == 1:
                    a2, b2 = a.view(N, F), b.view(N, F).t()
                    methods["torch_sampled_addmm"] = lambda: torch.sparse.sampled_addmm(mask, a2, b2, beta=0.0).values()
                    refs["torch_sampled_addmm"] = _reference_dot(a, b, mask_rows, mask.col_indices()).view(-1)
                bench_methods(rec, "sddmm", case, methods, refs, device, REL_TOL[torch.float32], budget)
                del ref, refs, methods
