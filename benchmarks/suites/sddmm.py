"""Suite "sddmm": per-edge x_src[src] op x_dst[dst] on [N, heads, F / heads] features.
Methods: pyg_fast, torch (PyG's gather path), torch_sampled_addmm (cuSPARSE, dot, CUDA)."""
import torch

from benchmarks.common import Recorder, time_ms
from benchmarks.graphs import load_graph, selected
from pyg_fast.ops import sddmm

GRAPHS = ("cora", "arxiv_like", "reddit2_like")
SHAPES = ((16, 1), (64, 1), (64, 4), (128, 1))  # (F, heads)
OPS = ("dot", "add", "mul")


def _gather(a, b, src, dst, op):
    if op == "dot":
        return (a.index_select(0, src) * b.index_select(0, dst)).sum(-1)
    return getattr(torch, op)(a.index_select(0, src), b.index_select(0, dst))


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    for graph_name in selected(("cora",) if quick else GRAPHS):
        data = load_graph(graph_name)
        src, dst = data.edge_index.to(device)
        N = data.num_nodes
        for F, heads in SHAPES:
            a = torch.randn(N, heads, F // heads, device=device)
            b = torch.randn(N, heads, F // heads, device=device)
            for op in OPS:
                if op != "dot" and (graph_name == "reddit2_like" and F > 16):
                    continue  # an [E, F] output of 23 M edges x F > 16 floats is beyond the point
                case = {"graph": graph_name, "F": F, "heads": heads, "op": op}
                ref = _gather(a, b, src, dst, op)
                torch.testing.assert_close(sddmm(a, b, src, dst, op), ref, rtol=1e-4, atol=1e-4)
                rec.add("sddmm", case, "pyg_fast", time_ms(lambda: sddmm(a, b, src, dst, op)))
                rec.add("sddmm", case, "torch", time_ms(lambda: _gather(a, b, src, dst, op)))
                if op == "dot" and heads == 1 and device.type == "cuda":
                    mask = torch.sparse_coo_tensor(torch.stack([src, dst]), torch.zeros(src.numel(), device=device),
                                                   (N, N)).coalesce().to_sparse_csr()
                    a2, b2 = a.view(N, F), b.view(N, F).t()

                    def sampled():
                        return torch.sparse.sampled_addmm(mask, a2, b2, beta=0.0)

                    rec.add("sddmm", case, "torch_sampled_addmm", time_ms(sampled))
                del ref
