# Host-time probe of the RGAT e2e step (MUTAG sizes) on the device: pyg vs pyg_fast.
import cProfile, io, pstats, statistics, time
import torch, torch.nn.functional as F
import torch_geometric.nn as pyg_nn
import pyg_fast.hetero as fast
from benchmarks.common import time_ms
from benchmarks.suites.e2e_hetero import Relational, relational_graph, labels
from benchmarks.suites.segment_matmul import segment_sizes
dev = "cuda"
gen = torch.Generator().manual_seed(0)
inputs, R = relational_graph(segment_sizes()["MUTAG"], 23_644, dev, gen)
idx, y = labels(inputs[0].size(0), dev, gen)
for name, cls in (("pyg", pyg_nn.RGATConv), ("pyg_fast", fast.RGATConv)):
    torch.manual_seed(0)
    model = Relational(cls, R).to(dev); opt = torch.optim.Adam(model.parameters(), lr=0.01)
    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(*inputs)[idx], y).backward()
        opt.step()
    for _ in range(5): step()
    torch.cuda.synchronize()
    hs = []
    for _ in range(50):
        t = time.perf_counter(); step(); hs.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    print(f"{name}: step {time_ms(step):.3f} ms, host per step {1e3 * statistics.median(hs):.3f} ms", flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        step(); torch.cuda.synchronize()
    ev = prof.key_averages()
    launches = sum(e.count for e in ev if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"))
    dev_us = sum(e.self_device_time_total for e in ev if e.device_type == torch.autograd.DeviceType.CUDA)
    print(f"{name}: launches {launches}, device busy {dev_us / 1e3:.3f} ms, aten ops {sum(e.count for e in ev if e.key.startswith('aten::'))}")
    print(ev.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(20): step()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue()[:7000], flush=True)
