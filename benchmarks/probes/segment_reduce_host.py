# Host-time probe of the small segment_reduce / SpMM cases (Cora, PubMed) on the device: host time per
# call of the public ops, of the op alone (what the Python layer adds is the difference) and of the
# baselines; then do_bench repeated, to see how often a timing window of each method reads slow.
import statistics
import sys

import torch
from triton.testing import do_bench

import pyg_fast
from benchmarks.common import host_ms
from benchmarks.graphs import load_graph
from benchmarks.suites.segment_reduce import csr_pointer

dev = "cuda"
try:
    import torch_scatter
except ImportError:
    torch_scatter = None


def us(fn) -> float:
    fn()
    return 1e3 * host_ms(fn, dev, calls=400, sync_every=20)


for name in ("cora", "pubmed"):
    graph = load_graph(name)
    src_index, dst_index = (t.to(dev) for t in graph.edge_index)
    V, E = graph.num_nodes, dst_index.numel()
    ptr = csr_pointer(dst_index, V)
    for F in (1, 16):
        src = torch.rand(E, F, device=dev) + 0.5
        x, w = torch.rand(V, F, device=dev) + 0.5, torch.rand(E, device=dev) + 0.5
        for _ in range(3):  # the launch is final from the second call on: kept from then
            pyg_fast.segment_reduce(src, dst_index, dim_size=V)
            pyg_fast.index_weight_segment_reduce(x, src_index, dst_index, w, V)
        launch = pyg_fast.tuning.segment_launch(src.unsqueeze(0), ptr, E)
        src3 = src.unsqueeze(0)
        methods = {
            "pyg_fast.segment_reduce": lambda: pyg_fast.segment_reduce(src, dst_index, dim_size=V),
            "op segment_reduce": lambda: torch.ops.pyg_fast.segment_reduce.default(src3, ptr, "sum", launch.config,
                                                                                  launch.data),
            "pyg_fast.spmm": lambda: pyg_fast.index_weight_segment_reduce(x, src_index, dst_index, w, V),
            "torch index_add": lambda: src.new_zeros(V, F).index_add_(0, dst_index, src),
            "torch.empty": lambda: torch.empty(V, F, device=dev),
        }
        if torch_scatter is not None:
            methods["torch_scatter segment_csr"] = lambda: torch_scatter.segment_csr(src, ptr, reduce="sum")
        print(f"{name} F={F} E={E} V={V} launch={list(launch.config)}", flush=True)
        for method, fn in methods.items():
            host = us(fn)
            reads = [do_bench(fn, warmup=5, rep=20, return_mode="median") for _ in range(15)]
            print(f"  {method:28s} host {host:6.1f} us | do_bench x15 (ms): min {min(reads):.4f} "
                  f"median {statistics.median(reads):.4f} max {max(reads):.4f}", flush=True)
print("python", sys.version.split()[0], "torch", torch.__version__)
