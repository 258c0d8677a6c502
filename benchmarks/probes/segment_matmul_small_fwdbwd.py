# AIFB bf16 fwd+bwd (K = 64, 128), ours against _grouped_mm: three do_bench readings and the host
# time of each, then the device time per kernel (profiler, 20 calls of each): is a reading below
# _grouped_mm's the device or the host?
import torch, functools
from benchmarks.common import time_ms, host_ms
from benchmarks.suites.segment_matmul import segment_sizes, methods, forward_backward
torch.backends.cuda.matmul.allow_tf32 = True
segs = segment_sizes()["AIFB"]; ptr = torch.tensor([0] + segs).cumsum(0); M, T = int(ptr[-1]), len(segs)
print("AIFB M", M, "T", T)
for K in (64, 128):
    x = torch.randn(M, K, device="cuda").bfloat16().requires_grad_(); w = (torch.randn(T, K, K, device="cuda") / K**0.5).bfloat16().requires_grad_()
    g = torch.randn(M, K, device="cuda").bfloat16()
    fns = {n: functools.partial(forward_backward, f, x, w, g) for n, f in methods(ptr, "cuda").items() if n != "torch_loop"}
    for n, f in fns.items(): f()
    for r in range(3):
        print(K, r, {n: round(time_ms(f, 25, 100), 4) for n, f in fns.items()}, {n: round(host_ms(f, "cuda"), 4) for n, f in fns.items()}, flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            for f in fns.values(): f()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
