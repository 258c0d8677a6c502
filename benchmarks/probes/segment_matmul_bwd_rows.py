# backward: rows per item (1x, 2x, 4x, 8x the default) x ordered / atomic weight-gradient reduction,
# per dataset and K (bf16, fp32): is the default item size (about four waves of items) too small
# where K x N partials are large?
import torch
from benchmarks.common import time_ms
from benchmarks.suites.segment_matmul import segment_sizes
from pyg_fast.triton import segment_matmul as tk
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True
sizes = segment_sizes()
for ds in ("MUTAG", "ACM", "Freebase", "AM", "BGS", "AIFB", "IMDB", "DBLP"):
    segs = sizes[ds]; ptr = torch.tensor([0] + segs).cumsum(0); M, T = int(ptr[-1]), len(segs)
    plan = tk.SegmentPlan(ptr, dev)
    for K in (64, 128):
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(M, K, device=dev).to(dtype); w = (torch.randn(T, K, K, device=dev) / K ** 0.5).to(dtype)
            g = torch.randn(M, K, device=dev).to(dtype)
            base = tk._bwd_config(plan, K, K, dtype, True)
            cells = []
            for mult in (1, 2, 4, 8):
                cfg = base._replace(rows_per_prog=base.rows_per_prog * mult)
                items = tk._bwd_launch(plan, cfg, K, K).routing.max_items_per_type
                det = time_ms(lambda: tk.backward(x, plan, g, w, False, True, config=cfg), 10, 60)
                old, tk.ATOMIC_MIN_ITEMS = tk.ATOMIC_MIN_ITEMS, 0
                atom = time_ms(lambda: tk.backward(x, plan, g, w, False, False, config=cfg), 10, 60)
                tk.ATOMIC_MIN_ITEMS = old
                cells.append(f"x{mult} rows {cfg.rows_per_prog:5d} max_items {items:4d} ord {det:.4f} atom {atom:.4f}")
            print(f"{ds:9s} K={K:3d} {str(dtype)[6:]:8s} | " + " | ".join(cells), flush=True)
