"""One SpMM call of suite "spmm" per method, bracketed for a kernel profiler: run under
``ncu --profile-from-start off`` (or nsys), only the bracketed call is profiled.

    ncu --profile-from-start off --section SpeedOfLight ... python -m benchmarks.profile_spmm --graph arxiv_like --F 64

Methods: ``pyg_fast`` (``index_weight_segment_reduce``, the schedule its selector picks for a
reused graph, as in the suite) and ``torch_sparse_csr`` (cuSPARSE). Inputs as in the suite.
"""
import argparse

import torch

import pyg_fast
from benchmarks.graphs import load_graph
from benchmarks.suites.segment_reduce import csr_matrix, csr_pointer
from pyg_fast import tuning

WARMUP = 3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="arxiv_like")
    parser.add_argument("--F", type=int, default=64)
    parser.add_argument("--methods", default="pyg_fast,torch_sparse_csr")
    args = parser.parse_args()
    device = torch.device("cuda")
    data = load_graph(args.graph, device)
    src, dst = data.edge_index
    V, E = data.num_nodes, dst.numel()
    x = torch.randn(V, args.F, device=device)
    weight = torch.randn(E, device=device)
    matrix = csr_matrix(csr_pointer(dst, V), src, weight, (V, V))
    methods = {
        "pyg_fast": lambda: pyg_fast.index_weight_segment_reduce(x, src, dst, weight, V, "sum"),
        "torch_sparse_csr": lambda: torch.sparse.mm(matrix, x),
    }
    degree = torch.bincount(dst, minlength=V)
    print("selector:", tuning.explain(E, V, args.F, 4, True, int(degree.max()), graph_aware=True))
    for name in args.methods.split(","):
        for _ in range(WARMUP):
            methods[name]()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        methods[name]()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"profiled {name}", flush=True)


if __name__ == "__main__":
    main()
