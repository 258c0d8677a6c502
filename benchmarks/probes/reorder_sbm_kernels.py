# Per-kernel device time of one training iteration of suite "reorder" (two weighted SpMM layers,
# forward and backward) on sbm_1000 at F = 64, original and reordered, with the schedules picked:
# where does the reordered graph's time go?
import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.suites import reorder as suite
from benchmarks.suites.schedule_select import graph
from pyg_fast import tuning
from pyg_fast.transforms import Reorder

dev = torch.device("cuda")
torch.manual_seed(0)
data = graph("sbm_1000", dev)
data.edge_weight = torch.rand(data.edge_index.size(1), device=dev) + 0.5
F = 64
data.x = torch.randn(data.num_nodes, F, device=dev)
layers = [(torch.randn(F, F, device=dev) / F ** 0.5).requires_grad_() for _ in range(2)]
reordered = Reorder()(data)
for name, d in (("original", data), ("reordered", reordered)):
    run = lambda: suite.iteration(d.x, d.edge_index, d.edge_weight, d.num_nodes, layers)
    for _ in range(5):
        run()
    _, ms = suite.time_call(run, dev, 20)
    print(f"{name}: iteration {ms:.3f} ms (host-timed, synchronised)", flush=True)
    dst_sorted = bool((d.edge_index[1][1:] >= d.edge_index[1][:-1]).all())
    print(f"  dst sorted: {dst_sorted}", flush=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            run()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70), flush=True)
