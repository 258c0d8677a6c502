# Kernel probe of reddit2_like SpMM at F = 1 (ours 0.92x cuSPARSE): run under ncu, which profiles the
# kernels inside the NVTX range "probe" (ours weighted and unweighted, cuSPARSE, our F = 4), e.g.
#   ncu --clock-control none --nvtx --nvtx-include "probe/" --section SpeedOfLight ... python3 <this>
import torch

import pyg_fast
from benchmarks.graphs import load_graph
from benchmarks.suites.segment_reduce import csr_matrix, csr_pointer

data = load_graph("reddit2_like", "cuda")
src_index, dst_index = data.edge_index
V, E = data.num_nodes, dst_index.numel()
ptr = csr_pointer(dst_index, V)
weight = torch.rand(E, device="cuda") + 0.5
matrix = csr_matrix(ptr, src_index, weight, (V, V))
inputs = {F: torch.rand(V, F, device="cuda") + 0.5 for F in (1, 4)}
calls = {
    "ours_weighted_f1": lambda: pyg_fast.index_weight_segment_reduce(inputs[1], src_index, dst_index, weight, V),
    "ours_unweighted_f1": lambda: pyg_fast.index_segment_reduce(inputs[1], src_index, dst_index, V),
    "cusparse_f1": lambda: torch.sparse.mm(matrix, inputs[1]),
    "ours_weighted_f4": lambda: pyg_fast.index_weight_segment_reduce(inputs[4], src_index, dst_index, weight, V),
}
for fn in calls.values():  # launches final (graph-aware allowed from the second call)
    for _ in range(3):
        fn()
torch.cuda.synchronize()
for name, fn in calls.items():
    torch.cuda.nvtx.range_push("probe")
    torch.cuda.nvtx.range_push(name)
    fn()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("launch F=1:", list(pyg_fast.tuning.segment_launch(inputs[1], ptr, E, gather=True).config))
