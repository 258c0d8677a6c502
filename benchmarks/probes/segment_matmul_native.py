# Host time of segment_matmul fwd+bwd launched from C++ (the program path) against the Python
# launch path and torch._grouped_mm, on the small hetero_types inputs where steps are host-bound.
import torch
from benchmarks.suites.segment_matmul import segment_sizes
from benchmarks.common import host_ms, time_ms
import importlib; sm = importlib.import_module("pyg_fast.ops.segment_matmul")
from pyg_fast.ops.segment_matmul import segment_matmul
dev = "cuda"

def per_call_us(fn, n=1000):
    fn()  # warm-up
    return 1e3 * host_ms(fn, dev, calls=n, sync_every=100)

native = sm._native_program
python_path = lambda *a, **k: None
sizes = segment_sizes()
for ds in ("AIFB", "IMDB", "MUTAG", "DBLP"):
    segs = sizes[ds]; ptr = torch.tensor([0] + segs).cumsum(0); M, T = int(ptr[-1]), len(segs)
    for K in (32, 128):
        x = torch.randn(M, K, device=dev).bfloat16().requires_grad_(); w = (torch.randn(T, K, K, device=dev) / K ** .5).bfloat16().requires_grad_()
        g = torch.randn(M, K, device=dev).bfloat16(); offs = ptr[1:].to(torch.int32).to(dev)
        # one ptr per path: a call's path is resolved once per ptr and kept with it (session 16's plans)
        ptr_py = ptr.clone()
        fns = {"native": lambda: torch.autograd.grad(segment_matmul(x, ptr, w, deterministic=True), (x, w), g),
               "python": lambda: torch.autograd.grad(segment_matmul(x, ptr_py, w, deterministic=True), (x, w), g),
               "gmm": lambda: torch.autograd.grad(torch._grouped_mm(x, w, offs=offs), (x, w), g)}
        a = fns["native"](); sm._native_program = python_path; b = fns["python"](); sm._native_program = native
        assert all(torch.equal(u, v) for u, v in zip(a, b)), "native and python paths differ"
        row = []
        for name, fn in fns.items():
            sm._native_program = python_path if name == "python" else native
            res = []
            for mt in (True, False):
                torch.autograd.set_multithreading_enabled(mt)
                res.append(per_call_us(fn))
            torch.autograd.set_multithreading_enabled(True)
            row.append(f"{name} {time_ms(fn, 20, 200):.4f} ms host {res[0]:.0f}/{res[1]:.0f} us")
        sm._native_program = native
        print(f"{ds} K={K} bf16 fwd+bwd: " + " | ".join(row), flush=True)
        xd, wd = x.detach(), w.detach()
        fwd = {"native": lambda: segment_matmul(xd, ptr, wd), "gmm": lambda: torch._grouped_mm(xd, wd, offs=offs)}
        with torch.no_grad():
            print(f"{ds} K={K} bf16 fwd no_grad host: " + " | ".join(f"{n} {per_call_us(f):.1f} us" for n, f in fwd.items()), flush=True)
