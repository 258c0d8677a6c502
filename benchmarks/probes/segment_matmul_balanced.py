# Forward segment_matmul with balanced routing: the rows' tiles cut into P programs of equal
# tile counts (items split at program boundaries, so one program may run several types and a large
# type spans several programs), P = SMs x programs per SM x waves. Against the model's pick (whose
# programs are items packed up to rows_per_prog): do fewer, equal programs close the gap to the
# roofline where one 192 KB program fills an SM (BGS fp32 K = 128 at 79%)?
# It calls the library's forward kernel of its time (programs reading prog_ptr -> items, replaced
# by block tables in session 19): re-run it at commit 339ff9a.
import torch
import triton

from benchmarks.common import time_ms
from benchmarks.suites.segment_matmul import segment_sizes
from pyg_fast.triton import segment_matmul as tk
from pyg_fast.triton.segment_matmul_config import Routing, candidates, fwd_smem_bytes, hardware


def balanced_routing(ptr: torch.Tensor, block_m: int, programs: int, device) -> Routing:
    counts = ptr.diff()
    seg = torch.nonzero(counts > 0).flatten()
    tiles = torch.div(counts[seg] + block_m - 1, block_m, rounding_mode="floor")
    seg_end = tiles.cumsum(0)
    seg_first = seg_end - tiles
    total = int(seg_end[-1])
    per_prog = -(-total // programs)
    cuts = torch.unique(torch.cat([seg_first, torch.arange(0, total, per_prog)]))
    stops = torch.cat([cuts[1:], torch.tensor([total])])
    owner = torch.searchsorted(seg_end, cuts, right=True)
    t = seg[owner]
    start = ptr[t] + (cuts - seg_first[owner]) * block_m
    end = torch.minimum(ptr[t] + (stops - seg_first[owner]) * block_m, ptr[t + 1])
    items = torch.stack([t, start, end], 1).to(torch.int32)
    prog = torch.div(cuts, per_prog, rounding_mode="floor")
    prog_ptr = torch.searchsorted(prog, torch.arange(int(prog[-1]) + 2)).to(torch.int32)
    return Routing(items.to(device), prog_ptr.to(device), None, 0)


dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True
ceil, num_sms = hardware(dev)
sizes = segment_sizes()
for ds in ("BGS", "AM", "MUTAG", "Freebase"):
    segs = sizes[ds]
    ptr = torch.tensor([0] + segs).cumsum(0)
    M, T = int(ptr[-1]), len(segs)
    plan = tk.SegmentPlan(ptr, dev)
    for K in (64, 128):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(M, K, device=dev).to(dtype)
            w = (torch.randn(T, K, K, device=dev) / K ** 0.5).to(dtype)
            out = torch.empty(M, K, device=dev, dtype=dtype)
            elt = x.element_size()
            floor_ms = elt * (2 * M * K + T * K * K) / (ceil["gbps"] * 1e9) * 1e3
            ref = tk.forward(x, plan, w)
            pick = tk._forward_launch(plan, x, w, None, out, tk.dot_precision(dtype), None).cfg
            base = time_ms(lambda: tk.forward(x, plan, w), 10, 100)
            cells = [f"pick bm={pick.block_m} rows={pick.rows_per_prog} st={pick.num_stages} {base:.4f} "
                     f"({100 * floor_ms / base:.1f}%)"]
            for cfg in candidates(K, K, dtype, ceil):
                if cfg.rows_per_prog != cfg.block_m:  # one per tile shape
                    continue
                per_sm = max(1, min(8, ceil["smem_kb"] * 1024 // fwd_smem_bytes(cfg, elt)))
                for waves in (1, 2, 4):
                    programs = num_sms * per_sm * waves
                    routing = balanced_routing(ptr, cfg.block_m, programs, dev)
                    launch = tk._Launch(cfg, routing, (routing.prog_ptr.numel() - 1, triton.cdiv(K, cfg.block_n), 1))
                    call = tk._fwd_call(x, w, None, out, launch, tk.dot_precision(dtype))
                    out.fill_(float("nan"))
                    call.run()
                    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                    ms = time_ms(call.run, 10, 100)
                    cells.append(f"bm={cfg.block_m} st={cfg.num_stages} x{per_sm} w{waves} {ms:.4f} "
                                 f"({100 * floor_ms / ms:.1f}%){'' if err < 1e-2 else f' ERR {err:.2e}'}")
            print(f"{ds:9s} K={K:3d} {str(dtype)[6:]:8s} | " + " | ".join(cells), flush=True)
            del x, w, out, ref
