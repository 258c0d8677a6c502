# How close can any stream of a forward's bytes get to the roofline (bytes / 3.02 TB/s) under
# do_bench, by size? BGS K = 32 bf16 moves 131 MB (rows read and written); its forward reads
# 82% of the roofline and 98% of out.copy_(x). Here: out.copy_(x) and a Triton streaming copy
# (one tile per program, 4-64 KB tiles, 4-8 warps; and one program per SM slot looping over tiles)
# at the byte counts of the BGS forwards (K = 32 bf16 up to K = 128 fp32), with an empty launch.
# Needs no pyg_fast build. Run: python benchmarks/probes/stream_ceiling.py (GPU).
import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from segment_matmul_fwd_bubbles import cfgmod, segment_sizes  # run from this folder, or with it on sys.path

GBPS = cfgmod.HARDWARE["H100"]["gbps"]


@triton.jit
def copy_tiles(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@triton.jit
def copy_persistent(src, dst, n, num_tiles, BLOCK: tl.constexpr):
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), num_stages=3):
        offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bgs_rows = sum(segment_sizes()["BGS"])
    tiny = torch.zeros(1, device="cuda")
    print(f"empty op {do_bench(lambda: tiny.add_(1), warmup=10, rep=200, return_mode='median') * 1e3:.1f} us")
    for name, K, dtype in (("BGS K=32 bf16", 32, torch.bfloat16), ("BGS K=64 bf16", 64, torch.bfloat16),
                           ("BGS K=32 fp32", 32, torch.float32), ("BGS K=128 fp32", 128, torch.float32)):
        x = torch.randn(bgs_rows, K, device="cuda").to(dtype)
        out = torch.empty_like(x)
        n = x.numel()
        floor_ms = 2 * x.element_size() * n / (GBPS * 1e9) * 1e3
        rows = [("out.copy_(x)", lambda: out.copy_(x))]
        for block_bytes in (4096, 16384, 65536):
            block = block_bytes // x.element_size()
            for warps in (4, 8):
                rows.append((f"tiles {block_bytes // 1024} KB {warps} warps",
                             lambda block=block, warps=warps: copy_tiles[(triton.cdiv(n, block),)](
                                 x, out, n, block, num_warps=warps)))
        for per_sm in (1, 2, 4):
            block = 16384 // x.element_size()
            rows.append((f"persistent {per_sm}/SM 16 KB", lambda block=block, per_sm=per_sm: copy_persistent[
                (sms * per_sm,)](x, out, n, triton.cdiv(n, block), block, num_warps=8)))
        results = []
        for label, fn in rows:
            out.zero_()
            fn()
            assert torch.equal(out, x), label
            ms = do_bench(fn, warmup=10, rep=200, return_mode="median")
            results.append(f"{label}: {ms:.4f} ms ({100 * floor_ms / ms:.1f}%)")
        print(f"{name}: {2 * x.element_size() * n / 1e6:.0f} MB moved, floor {floor_ms:.4f} ms", *results,
              sep="\n  ", flush=True)


if __name__ == "__main__":
    main()
