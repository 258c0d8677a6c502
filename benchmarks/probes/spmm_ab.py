# SpMM of chosen cases, ours against cuSPARSE in the same process, to compare two builds of the
# extension on one machine: run it once per build (PYTHONPATH picks the build), alternating, e.g.
#   PYTHONPATH=A:. python3 benchmarks/probes/spmm_ab.py A; PYTHONPATH=B:. ... B; (A again, B again)
# Prints one JSON line per case: label, graph, F, ms of each method (median of interleaved rounds).
# SPMM_AB_CASES="arxiv_like:64,128;reddit2_like:1" picks the cases; SPMM_AB_NVTX=1 instead runs each
# case once inside an NVTX range "probe" (for ncu --nvtx --nvtx-include "probe/").
import json
import os
import sys

import torch

import pyg_fast
from benchmarks.common import REL_TOL, check, time_interleaved
from benchmarks.graphs import load_graph
from benchmarks.suites.segment_reduce import csr_matrix, csr_pointer
from benchmarks.suites.spmm import reference_spmm

CASES = {"reddit2_like": (1, 4, 16, 128), "arxiv_like": (16, 32, 64, 128)}
if os.environ.get("SPMM_AB_CASES"):
    CASES = {graph: tuple(int(f) for f in fs.split(",")) for graph, fs in
             (item.split(":") for item in os.environ["SPMM_AB_CASES"].split(";"))}
label = sys.argv[1] if len(sys.argv) > 1 else pyg_fast.__file__
for graph, features in CASES.items():
    data = load_graph(graph, "cuda")
    src_index, dst_index = data.edge_index
    V, E = data.num_nodes, dst_index.numel()
    ptr = csr_pointer(dst_index, V)
    weight = torch.randn(E, device="cuda")
    matrix = csr_matrix(ptr, src_index, weight, (V, V))
    for F in features:
        x = torch.randn(V, F, device="cuda")
        fns = {"pyg_fast": lambda: pyg_fast.index_weight_segment_reduce(x, src_index, dst_index, weight, V, "sum"),
               "torch_sparse_csr": lambda: torch.sparse.mm(matrix, x)}
        if os.environ.get("SPMM_AB_NVTX"):
            for _ in range(5):  # past the first calls' provisional launches
                fns["pyg_fast"]()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("probe")
            torch.cuda.nvtx.range_push(f"{graph}_F{F}")
            fns["pyg_fast"]()
            torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            continue
        ref = reference_spmm(x, src_index, dst_index, weight, V)
        ok = all(check(fn(), ref, REL_TOL[torch.float32]) for fn in fns.values())
        ms = time_interleaved(fns, 25.0, 300.0, "cuda", rounds=3)
        print(json.dumps({"label": label, "graph": graph, "F": F, "ok": ok, **ms,
                          "ratio": ms["torch_sparse_csr"] / ms["pyg_fast"]}), flush=True)
        del x, ref, fns
