"""Suite "spmm": weighted sum aggregation out[dst] += w[e] * x[src], i.e.
SpMM of the [V, V] adjacency with edge weights w [E] and features x [V, F].

Case keys: graph, F, dtype. Methods: ``pyg_fast``
(``pyg_fast.index_weight_segment_reduce(x, src, dst, w, V, "sum")``),
``torch_sparse_csr`` (``torch.sparse.mm`` on a CSR matrix; cuSPARSE on GPU) and
the gather-then-reduce baselines, which materialise the messages
``x[src] * w`` and reduce them with the segment_reduce suite's methods:
``torch_gather_index_add``, ``torch_scatter_reduce``, ``torch_segment_reduce``
and ``torch_scatter_<fn>`` when torch_scatter is importable. The reference is
float64 torch on the same device.
"""
import torch
from torch import Tensor

import pyg_fast
from benchmarks.common import REL_TOL, bench_methods
from benchmarks.graphs import load_graph
from benchmarks.suites.segment_reduce import (
    REFERENCE_CHUNK_ELEMENTS,
    cases,
    csr_matrix,
    csr_pointer,
    dtype_name,
    run_on_graphs,
    torch_reducers,
)

SUITE = "spmm"
GATHER_NAMES = {"torch_index_add": "torch_gather_index_add"}


def spmm_bytes(num_edges: int, num_nodes: int, num_features: int, dtype: torch.dtype) -> int:
    """Bytes SpMM must move: the gathered x rows, the int64 source index, the weights, the output."""
    size = torch.finfo(dtype).bits // 8
    return num_edges * num_features * size + num_edges * (8 + size) + num_nodes * num_features * size


def reference_spmm(x: Tensor, src_index: Tensor, dst_index: Tensor, weight: Tensor, num_nodes: int) -> Tensor:
    """Float64 gather, scale and ``index_add_``, a few columns at a time."""
    out = torch.zeros(num_nodes, x.size(1), dtype=torch.float64, device=x.device)
    step = max(1, REFERENCE_CHUNK_ELEMENTS // max(src_index.numel(), 1))
    w = weight.double().unsqueeze(1)
    for start in range(0, x.size(1), step):
        messages = x[:, start:start + step].double().index_select(0, src_index).mul_(w)
        out[:, start:start + step].index_add_(0, dst_index, messages)
    return out


def bench_graph(rec, device, graph: str, case_list, budget) -> None:
    """Benchmarks every (F, dtype, _) of ``case_list`` (segment_reduce's cases) on ``graph``."""
    data = load_graph(graph, device)
    src_index, dst_index = data.edge_index
    num_nodes, num_edges = data.num_nodes, dst_index.numel()
    ptr = csr_pointer(dst_index, num_nodes)
    for num_features, dtype, _ in case_list:
        x = torch.randn(num_nodes, num_features, device=device, dtype=dtype)
        weight = torch.randn(num_edges, device=device, dtype=dtype)
        case = {"graph": graph, "F": num_features, "dtype": dtype_name(dtype)}
        matrix = csr_matrix(ptr, src_index, weight, (num_nodes, num_nodes))

        def messages() -> Tensor:
            return x.index_select(0, src_index).mul_(weight.unsqueeze(1))
        methods = {
            "pyg_fast": lambda: pyg_fast.index_weight_segment_reduce(x, src_index, dst_index, weight,
                                                                     num_nodes, "sum"),
            "torch_sparse_csr": lambda: torch.sparse.mm(matrix, x),
        }
        methods.update({GATHER_NAMES.get(name, name): (lambda fn=fn: fn(messages()))
                        for name, fn in torch_reducers(dst_index, ptr, "sum", dtype, sparse=False).items()})
        ref = reference_spmm(x, src_index, dst_index, weight, num_nodes)
        bench_methods(rec, SUITE, case, methods, ref, device, REL_TOL[dtype], budget,
                      nbytes=spmm_bytes(num_edges, num_nodes, num_features, dtype))
        del methods, matrix, ref, x, weight


def run(rec, device, quick: bool = False) -> None:
    run_on_graphs(rec, SUITE, bench_graph, device, quick)
