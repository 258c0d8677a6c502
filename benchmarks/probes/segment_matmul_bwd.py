# backward: ordered (deterministic) vs atomic weight-gradient reduction, per dataset and K (bf16, fp32)
import torch
from benchmarks.common import time_ms
from benchmarks.suites.segment_matmul import segment_sizes
from pyg_fast.triton import segment_matmul as tk
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True
sizes = segment_sizes()
for ds in ("AM", "BGS", "Freebase", "ACM", "MUTAG", "AIFB"):
    segs = sizes[ds]; ptr = torch.tensor([0] + segs).cumsum(0); M, T = int(ptr[-1]), len(segs)
    plan = tk.SegmentPlan(ptr, dev)
    for K in (32, 64, 128):
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(M, K, device=dev).to(dtype); w = (torch.randn(T, K, K, device=dev) / K ** 0.5).to(dtype)
            g = torch.randn(M, K, device=dev).to(dtype)
            launch = plan.launch(("bwd", K, K, dtype, True), lambda: tk._bwd_launch(plan, tk._bwd_config(plan, K, K, dtype, True), K, K))
            det = time_ms(lambda: tk.backward(x, plan, g, w, False, True), 10, 60)
            old = tk.ATOMIC_MIN_ITEMS
            tk.ATOMIC_MIN_ITEMS = 0
            atom = time_ms(lambda: tk.backward(x, plan, g, w, False, False), 10, 60)
            tk.ATOMIC_MIN_ITEMS = old
            print(f"{ds:9s} K={K:3d} {str(dtype)[6:]:8s} max_items {launch.routing.max_items_per_type:4d} items {launch.grid[0]:5d} "
                  f"ordered {det:.4f} atomic {atom:.4f} ratio {det / atom:.2f}", flush=True)
