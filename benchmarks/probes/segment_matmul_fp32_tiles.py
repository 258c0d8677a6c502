# Forward segment_matmul, fp32 (TF32) K = N = 128 on BGS and AM: the model's pick against tiles
# that candidates() never offers (two stages, so that two 32-row programs share an SM and one's
# weight load overlaps the other's rows; 16-row tiles), each at programs of 256-2048 rows.
import torch
from benchmarks.common import time_ms
from benchmarks.suites.segment_matmul import segment_sizes
from pyg_fast.triton import segment_matmul as tk
from pyg_fast.triton.segment_matmul_config import SegmmConfig
torch.backends.cuda.matmul.allow_tf32 = True
for ds in ("BGS", "AM"):
    segs = segment_sizes()[ds]; ptr = torch.tensor([0] + segs).cumsum(0); M, T = int(ptr[-1]), len(segs)
    plan = tk.SegmentPlan(ptr, "cuda"); K = 128
    x = torch.randn(M, K, device="cuda"); w = torch.randn(T, K, K, device="cuda") / K**0.5
    floor = 4 * (2 * M * K + T * K * K) / 3020e9 * 1e3
    ref = tk.forward(x, plan, w)
    res = [f"pick {time_ms(lambda: tk.forward(x, plan, w), 10, 100):.4f}"]
    for bm, st, warps in ((32, 2, 4), (32, 2, 8), (64, 2, 8), (32, 3, 4), (16, 3, 4), (16, 2, 4)):
        for rows in (256, 512, 1024, 2048):
            if rows < bm: continue
            cfg = SegmmConfig(bm, 128, 128, rows, warps, st)
            try:
                out = tk.forward(x, plan, w, config=cfg)
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                ms = time_ms(lambda: tk.forward(x, plan, w, config=cfg), 10, 100)
                res.append(f"bm{bm} st{st} w{warps} r{rows} {ms:.4f} ({100*floor/ms:.1f}%){'' if err < 1e-2 else ' ERR'}")
            except Exception as e:
                res.append(f"bm{bm} st{st} w{warps} r{rows} fail {type(e).__name__}")
    print(ds, f"floor {floor:.4f}", " | ".join(res), flush=True)
