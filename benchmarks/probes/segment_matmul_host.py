# Host-time probe of segment_matmul on the device: where the Python time of a fwd+bwd goes.
import cProfile, io, pstats
import torch
from benchmarks.suites.segment_matmul import segment_sizes
from benchmarks.common import time_ms, host_ms
import importlib; sm = importlib.import_module("pyg_fast.ops.segment_matmul")
from pyg_fast.ops.segment_matmul import segment_matmul
from pyg_fast.triton import segment_matmul as tk
dev = "cuda"

def per_call_us(fn, n=2000):
    fn()  # warm-up
    return 1e3 * host_ms(fn, dev, calls=n, sync_every=200)

sizes = segment_sizes()
for ds in ("AIFB", "IMDB"):
    segs = sizes[ds]; ptr = torch.tensor([0] + segs).cumsum(0); M, T = int(ptr[-1]), len(segs)
    K = 64
    x = torch.randn(M, K, device=dev).bfloat16().requires_grad_(); w = (torch.randn(T, K, K, device=dev) / 8).bfloat16().requires_grad_()
    g = torch.randn(M, K, device=dev).bfloat16(); offs = ptr[1:].to(torch.int32).to(dev)
    f_ours = lambda: torch.autograd.grad(segment_matmul(x, ptr, w), (x, w), g)
    f_gmm = lambda: torch.autograd.grad(torch._grouped_mm(x, w, offs=offs), (x, w), g)
    f_fwd = lambda: segment_matmul(x, ptr, w)
    f_gfwd = lambda: torch._grouped_mm(x, w, offs=offs)
    for r in range(1):
        print(ds, M, T, "round", r, " ".join("%s %.4f/%.4f" % (n, time_ms(f), host_ms(f, dev)) for n, f in
              (("ours_fwdbwd", f_ours), ("gmm_fwdbwd", f_gmm), ("ours_fwd", f_fwd), ("gmm_fwd", f_gfwd))), flush=True)
    plan = sm._cuda_plan(ptr, M, x.device)
    xd, wd = x.detach(), w.detach()
    acc = torch.zeros(T, K + 1, K, device=dev)
    comps = {
        "torch.empty(M,N)": lambda: torch.empty(M, K, dtype=torch.bfloat16, device=dev),
        "torch.zeros(T,K+1,N,f32)": lambda: torch.zeros(T, K + 1, K, device=dev),
        "acc.to(bf16)": lambda: acc.to(torch.bfloat16),
        "w.transpose(1,2)": lambda: wd.transpose(1, 2),
        "tk.forward (empty+launch)": lambda: tk.forward(xd, plan, wd),
        "tk.backward wgrad atomic": lambda: tk.backward(xd, plan, g, None, True, False),
        "tk.backward wgrad determ": lambda: tk.backward(xd, plan, g, None, True, True),
        "tk.backward fused": lambda: tk.backward(xd, plan, g, wd, False, False),
        "segment_matmul no_grad": lambda: (torch.no_grad().__enter__(), segment_matmul(xd, ptr, wd)),
        "segment_matmul grad (apply)": f_fwd,
        "gmm fwd": f_gfwd,
        "ours fwdbwd": f_ours,
        "gmm fwdbwd": f_gmm,
        "torch.cuda.current_device": torch.cuda.current_device,
        "sm._cuda_plan lookup": lambda: sm._cuda_plan(ptr, M, x.device),
    }
    torch.set_grad_enabled(True)
    for name, fn in comps.items():
        us = per_call_us(fn)
        torch.set_grad_enabled(True)
        print(f"  {ds} {name:32s} {us:8.1f} us", flush=True)
    for mt in (True, False):
        torch.autograd.set_multithreading_enabled(mt)
        print(f"  {ds} ours fwdbwd multithreading={mt}: {per_call_us(f_ours):.1f} us; gmm {per_call_us(f_gmm):.1f} us", flush=True)
    torch.autograd.set_multithreading_enabled(False)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(300): f_ours()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:4000])
    torch.autograd.set_multithreading_enabled(True)
