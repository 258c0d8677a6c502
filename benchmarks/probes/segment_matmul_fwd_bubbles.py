# Forward segment_matmul, fp32 (TF32), BGS and AM: where does the time between the roofline and
# the pick go? With K = N = 128 one 32- or 64-row program holds 115-196 KB of shared memory, so one
# program runs per SM and each item's weight load and pipeline prologue are bubbles nothing hides.
# Variants of the forward kernel (a copy, so this runs without building pyg_fast._C):
#   split: BLOCK_N = N / 2 with the N tile as the fastest grid axis (the two halves of a row
#          tile run at the same time, so the second read of the rows hits L2): half the weight
#          tile, two programs per SM;
#   prefetch: the next item's weight is loaded while this item's rows stream;
#   flat: one loop over row tiles (a table of (type, row start, segment end) per tile), so the
#         pipeline runs on across segments, the weight tile loaded (from L2) with every row tile.
# "copy" is out.copy_(x) of the same rows: what do_bench lets a pure stream reach here.
# Run: python benchmarks/probes/segment_matmul_fwd_bubbles.py (needs torch, triton and a GPU).
import importlib.util
import os
import sys

import torch
import triton
import triton.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("cfg", os.path.join(ROOT, "pyg_fast/triton/segment_matmul_config.py"))
cfgmod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cfgmod)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from packed_routing import packed_routing  # noqa: E402


def segment_sizes():  # benchmarks.suites.segment_matmul's, whose module imports pyg_fast
    import csv
    import glob
    out = {}
    for path in glob.glob(os.path.join(ROOT, "benchmarks/data/hetero_types/*.csv")):
        with open(path) as f:
            out[os.path.basename(path)[:-4]] = [int(r["End"]) - int(r["Start"]) for r in csv.DictReader(f)]
    return out


DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a check under TRITON_INTERPRET=1


@triton.jit
def weight_tile(K, N, stride_wk, stride_wn, pid_n, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Column offsets, row offsets, column mask, offsets and mask of the weight tile of N tile pid_n."""
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    return offs_n, offs_k, mask_n, offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn, \
        (offs_k[:, None] < K) & mask_n[None, :]


@triton.jit
def fwd(x_ptr, w_ptr, out_ptr, prog_ptr, items_ptr, K, N, stride_xm, stride_wt, stride_wk, stride_wn, stride_om,
        N_FASTEST: tl.constexpr, PREFETCH: tl.constexpr, EVICT: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    if N_FASTEST:
        pid = tl.program_id(1)
        pid_n = tl.program_id(0)
    else:
        pid = tl.program_id(0)
        pid_n = tl.program_id(1)
    offs_n, offs_k, mask_n, w_offs, w_mask = weight_tile(K, N, stride_wk, stride_wn, pid_n, BLOCK_N, BLOCK_K)
    first = tl.load(prog_ptr + pid)
    last = tl.load(prog_ptr + pid + 1)
    if PREFETCH:
        t0 = tl.load(items_ptr + 3 * tl.maximum(tl.minimum(first, last - 1), 0)).to(tl.int64)
        w_next = tl.load(w_ptr + t0 * stride_wt + w_offs, mask=w_mask, other=0.0)
    for it in range(first, last):
        start = tl.load(items_ptr + 3 * it + 1)
        end = tl.load(items_ptr + 3 * it + 2)
        if PREFETCH:
            w = w_next
            nt = tl.load(items_ptr + 3 * tl.minimum(it + 1, last - 1)).to(tl.int64)  # the last item reloads its own
            w_next = tl.load(w_ptr + nt * stride_wt + w_offs, mask=w_mask, other=0.0)
        else:
            t = tl.load(items_ptr + 3 * it).to(tl.int64)
            w = tl.load(w_ptr + t * stride_wt + w_offs, mask=w_mask, other=0.0)
        for m0 in range(start, end, BLOCK_M):
            offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
            mask_m = offs_m < end
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                        mask=mask_m[:, None] & (offs_k[None, :] < K), other=0.0, eviction_policy=EVICT)
            acc = tl.dot(a, w, input_precision="tf32")
            tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :], eviction_policy=EVICT)


@triton.jit
def fwd_flat(x_ptr, w_ptr, out_ptr, tiles_ptr, tiles_per_prog, num_tiles, K, N, stride_xm, stride_wt, stride_wk,
             stride_wn, stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(1)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    w_offs = offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    w_mask = (offs_k[:, None] < K) & mask_n[None, :]
    first = pid * tiles_per_prog
    last = tl.minimum(first + tiles_per_prog, num_tiles)
    for j in range(first, last):
        t = tl.load(tiles_ptr + 3 * j).to(tl.int64)
        m0 = tl.load(tiles_ptr + 3 * j + 1)
        end = tl.load(tiles_ptr + 3 * j + 2)
        w = tl.load(w_ptr + t * stride_wt + w_offs, mask=w_mask, other=0.0)
        offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask_m = offs_m < end
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=mask_m[:, None] & (offs_k[None, :] < K), other=0.0)
        acc = tl.dot(a, w, input_precision="tf32")
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def tile_table(ptr, block_m):
    """(type, row start, segment end) of every row tile, int32 [tiles, 3]."""
    counts = ptr.diff()
    per = (counts + block_m - 1) // block_m
    t = torch.repeat_interleave(torch.arange(counts.numel()), per)
    first = torch.cumsum(per, 0) - per
    m0 = ptr[:-1][t] + (torch.arange(t.numel()) - first[t]) * block_m
    return torch.stack([t, m0, ptr[1:][t]], 1).to(torch.int32).contiguous()


def run_flat(x, w, ptr, block_m, block_n, stages, warps, tiles_per_prog):
    M, K = x.shape
    N = w.size(2)
    tiles = tile_table(ptr, block_m).to(DEV)
    out = torch.empty(M, N, device=DEV)
    grid = (triton.cdiv(N, block_n), triton.cdiv(tiles.size(0), tiles_per_prog))

    def call():
        return fwd_flat[grid](x, w, out, tiles, tiles_per_prog, tiles.size(0), K, N, x.stride(0), w.stride(0),
                              w.stride(1), w.stride(2), out.stride(0), block_m, block_n, K,
                              num_warps=warps, num_stages=stages)
    return call, out


def tail_routing(ptr, cfg, tail_rows, tail_rows_per_prog):
    """The pick's routing for the rows before ``M - tail_rows``, programs of ``tail_rows_per_prog``
    rows after: the last programs launched are short, so the last wave ends evenly."""
    return packed_routing(ptr, cfg.rows_per_prog, cfg.block_m, tail_rows, tail_rows_per_prog)


def run(x, w, ptr, cfg, n_fastest, prefetch, evict="", pad=0, routing=None):
    M, K = x.shape
    N = w.size(2)
    if routing is None:
        routing = packed_routing(ptr, cfg.rows_per_prog, cfg.block_m)
    items, prog_ptr = (t.to(DEV) for t in routing)
    spacer = torch.empty(pad, dtype=torch.uint8, device=DEV) if pad else None  # moves out's address
    out = torch.empty(M, N, device=DEV)
    del spacer
    progs, ntiles = prog_ptr.numel() - 1, triton.cdiv(N, cfg.block_n)
    grid = (ntiles, progs) if n_fastest else (progs, ntiles)

    def call():
        return fwd[grid](x, w, out, prog_ptr, items, K, N, x.stride(0), w.stride(0), w.stride(1), w.stride(2),
                         out.stride(0), n_fastest, prefetch, evict, cfg.block_m, cfg.block_n, cfg.block_k,
                         num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return call, out


def fp32_case(ds, K):
    """(ptr, x [M, K], w [T, K, K], the roofline floor in ms, the model's pick) of dataset ``ds``."""
    segs = segment_sizes()[ds.rstrip("3")] * (3 if ds.endswith("3") else 1)  # "BGS3": BGS's types three times
    ptr = torch.tensor([0] + segs).cumsum(0)
    M, T = int(ptr[-1]), len(segs)
    x = torch.randn(M, K, device="cuda")
    w = torch.randn(T, K, K, device="cuda") / K ** 0.5
    floor = 4 * (2 * M * K + T * K * K) / 3020e9 * 1e3
    return ptr, x, w, floor, cfgmod.model_config(ptr.diff(), K, K, torch.float32, torch.device("cuda"))


def rows_sweep():
    """The pick's tiles at programs of many lengths: do whole waves matter (one 192 KB program per
    SM at K = 128)? Prints programs, waves (programs / (SMs x programs per SM)) and time."""
    torch.backends.cuda.matmul.allow_tf32 = True
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for ds, K, rows_list in (("BGS", 128, range(384, 1088, 32)), ("BGS", 64, range(64, 704, 32)),
                             ("BGS", 32, range(64, 704, 32)), ("AM", 128, range(448, 640, 32))):
        ptr, x, w, floor, pick = fp32_case(ds, K)
        res = []
        for rows in rows_list:
            if rows % pick.block_m:
                continue
            call, out = run(x, w, ptr, pick._replace(rows_per_prog=rows), False, False)
            kernel = call()
            per_sm = min(8, 228 * 1024 // (kernel.metadata.shared + 1024), 65536 // (kernel.n_regs * 32 * pick.num_warps))
            progs = packed_routing(ptr, rows, pick.block_m)[1].numel() - 1
            ms = triton.testing.do_bench(call, warmup=10, rep=100, return_mode="median")
            res.append(f"r{rows} progs {progs} waves {progs / (sms * per_sm):.2f} {ms:.4f} ({100 * floor / ms:.1f}%)")
        print(f"{ds} K={K} {pick}", *res, sep="\n  ", flush=True)


def hints():
    """The pick with streaming (evict_first) loads and stores of the rows, and with the output
    placed at other distances from the input (DRAM channel clashes between the two streams?)."""
    torch.backends.cuda.matmul.allow_tf32 = True
    for ds, K in (("BGS", 128), ("AM", 128), ("BGS", 64)):
        ptr, x, w, floor, pick = fp32_case(ds, K)
        res = []
        for evict in ("", "evict_first", "evict_last"):
            for pad in (0, 2 << 20, (64 << 20) + 4096):
                call, out = run(x, w, ptr, pick, False, False, evict, pad)
                call()
                ms = triton.testing.do_bench(call, warmup=10, rep=100, return_mode="median")
                res.append(f"evict '{evict}' pad {pad} {ms:.4f} ({100 * floor / ms:.1f}%)")
                del call, out
        print(f"{ds} K={K} {pick}", *res, sep="\n  ", flush=True)


def tails():
    """Is the BGS - AM gap a cost per launch (ramp and last wave)? The pick on BGS, on BGS's types
    repeated three times (AM's row count), and with the last rows in short programs."""
    torch.backends.cuda.matmul.allow_tf32 = True
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for ds, K in (("BGS", 128), ("BGS3", 128), ("BGS", 64), ("AM", 128)):
        ptr, x, w, floor, pick = fp32_case(ds, K)
        M = int(ptr[-1])
        ref = None
        res = []
        for tail_waves in (0, 0.5, 1, 2):
            for short in (64, 128, 256):
                if tail_waves == 0 and short > 64:
                    continue
                routing = tail_routing(ptr, pick, int(tail_waves * sms * pick.rows_per_prog), short)
                call, out = run(x, w, ptr, pick, False, False, routing=routing)
                call()
                if ref is None:
                    ref = out.clone()
                err = ((out - ref).norm() / ref.norm()).item()
                ms = triton.testing.do_bench(call, warmup=10, rep=100, return_mode="median")
                res.append(f"tail {tail_waves} waves of {short}-row programs ({routing[1].numel() - 1} programs) "
                           f"{ms:.4f} ({100 * floor / ms:.1f}%){'' if err < 1e-6 else f' ERR {err:.2g}'}")
        print(f"{ds} K={K} M={M} {pick}", *res, sep="\n  ", flush=True)


def main():
    torch.backends.cuda.matmul.allow_tf32 = True
    C = cfgmod.SegmmConfig
    for ds, K in (("BGS", 128), ("AM", 128), ("BGS", 64), ("BGS", 32)):
        ptr, x, w, floor, pick = fp32_case(ds, K)
        T = w.size(0)
        ref = torch.cat([x[ptr[t]:ptr[t + 1]] @ w[t] for t in range(T)])
        variants = [("pick", pick, False, False)]
        for rows in (128, 256, 512, 1024):
            variants.append(("pick rows", pick._replace(rows_per_prog=max(rows, pick.block_m)), False, False))
            variants.append(("split", C(64, K // 2, K, max(rows, 64), 4, 3 if K < 128 else 2), True, False))
            variants.append(("split+prefetch", C(64, K // 2, K, max(rows, 64), 4, 3), True, True))
        res = []
        dst = torch.empty_like(x)
        ms = triton.testing.do_bench(lambda: dst.copy_(x), warmup=10, rep=100, return_mode="median")
        res.append(f"copy {ms:.4f} ({100 * floor / ms:.1f}%)")
        for bm, bn, st, warps in ((64, K // 2, 2, 4), (64, K // 2, 3, 4), (32, K // 2, 3, 4), (32, K, 2, 4),
                                  (64, K, 2, 8), (128, K // 2, 2, 8)):
            for tpp in (4, 16, 64):
                try:
                    call, out = run_flat(x, w, ptr, bm, bn, st, warps, tpp)
                    kernel = call()
                    err = ((out - ref).norm() / ref.norm()).item()
                    ms = triton.testing.do_bench(call, warmup=10, rep=100, return_mode="median")
                    res.append(f"flat bm{bm} bn{bn} st{st} w{warps} tiles/prog {tpp} smem{kernel.metadata.shared // 1024}K "
                               f"regs{kernel.n_regs} {ms:.4f} ({100 * floor / ms:.1f}%){'' if err < 5e-3 else f' ERR {err:.2g}'}")
                except Exception as e:
                    res.append(f"flat bm{bm} bn{bn} st{st} fail {type(e).__name__}: {str(e)[:80]}")
        for name, cfg, nf, pf in variants:
            try:
                call, out = run(x, w, ptr, cfg, nf, pf)
                kernel = call()
                err = ((out - ref).norm() / ref.norm()).item()
                ms = triton.testing.do_bench(call, warmup=10, rep=100, return_mode="median")
                smem = kernel.metadata.shared // 1024
                res.append(f"{name} bm{cfg.block_m} bn{cfg.block_n} st{cfg.num_stages} w{cfg.num_warps} "
                           f"r{cfg.rows_per_prog} smem{smem}K regs{kernel.n_regs} {ms:.4f} ({100 * floor / ms:.1f}%)"
                           f"{'' if err < 5e-3 else f' ERR {err:.2g}'}")
            except Exception as e:  # a config that does not fit: say so, go on
                res.append(f"{name} bm{cfg.block_m} bn{cfg.block_n} st{cfg.num_stages} r{cfg.rows_per_prog} "
                           f"fail {type(e).__name__}: {str(e)[:80]}")
        print(f"{ds} K={K} floor {floor:.4f} ms", *res, sep="\n  ", flush=True)


if __name__ == "__main__":
    mode = os.sys.argv[1] if len(os.sys.argv) > 1 else "main"
    {"rows": rows_sweep, "hints": hints, "tails": tails, "main": main}[mode]()
