# Forward segment_matmul with TMA (Hopper's tensor memory accelerator): do bulk asynchronous
# copies of the row tiles move the rows faster than the library's pointer loads and stores?
# At BGS K = 32 bf16 the library's kernel takes 98% of the time of out.copy_(x) on the same rows,
# which itself reaches only 84% of the roofline (a 50 us launch): only a stream that beats the copy
# can reach 85%. Variants of one kernel (the library's forward loop, the short-tail routing):
#   plain: pointer loads and masked stores (as the library);
#   tma_load: the row tiles of x through a TMA descriptor (rows past a segment's end are read,
#             computed and not stored; past the tensor's end TMA fills zeros);
#   tma_both: also the output tiles that lie wholly inside their segment stored through TMA
#             (a partial last tile of a segment keeps the masked store: TMA clips only at the
#             tensor's end, and the rows after the segment belong to another program).
# Needs no pyg_fast build. Run: python benchmarks/probes/segment_matmul_fwd_tma.py (GPU), or
# TRITON_INTERPRET=1 python benchmarks/probes/segment_matmul_fwd_tma.py check (CPU, correctness).
import importlib.util
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from packed_routing import packed_routing  # noqa: E402
from segment_matmul_fwd_bubbles import segment_sizes, weight_tile  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("cfg", os.path.join(ROOT, "pyg_fast/triton/segment_matmul_config.py"))
cfgmod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cfgmod)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
VARIANTS = {"plain": (False, False), "tma_load": (True, False), "tma_both": (True, True)}


@triton.jit
def fwd(x_ptr, x_desc, w_ptr, out_ptr, out_desc, prog_ptr, items_ptr, K, N, stride_xm, stride_wt, stride_wk,
        stride_wn, stride_om, LOAD_TMA: tl.constexpr, STORE_TMA: tl.constexpr, PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n, offs_k, mask_n, w_offs, w_mask = weight_tile(K, N, stride_wk, stride_wn, pid_n, BLOCK_N, BLOCK_K)
    for it in range(tl.load(prog_ptr + pid), tl.load(prog_ptr + pid + 1)):
        t = tl.load(items_ptr + 3 * it).to(tl.int64)
        start = tl.load(items_ptr + 3 * it + 1)
        end = tl.load(items_ptr + 3 * it + 2)
        w = tl.load(w_ptr + t * stride_wt + w_offs, mask=w_mask, other=0.0)
        for m0 in range(start, end, BLOCK_M):
            offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
            mask_m = offs_m < end
            if LOAD_TMA:
                a = x_desc.load([m0, 0])
            else:
                a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                            mask=mask_m[:, None] & (offs_k[None, :] < K), other=0.0)
            acc = tl.dot(a, w, input_precision=PRECISION).to(out_ptr.dtype.element_ty)
            if STORE_TMA and m0 + BLOCK_M <= end:
                out_desc.store([m0, pid_n * BLOCK_N], acc)
            else:
                tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc,
                         mask=mask_m[:, None] & mask_n[None, :])


def launcher(x, w, ptr, cfg, variant):
    """A callable running ``variant`` of the forward with the library's routing of session 18 for ``cfg``."""
    M, K = x.shape
    N = w.size(2)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 132
    short_tail = cfgmod.tail_rows(M, cfg.rows_per_prog, num_sms)
    items, prog_ptr = (t.to(DEV) for t in packed_routing(ptr, cfg.rows_per_prog, cfg.block_m, short_tail))
    out = torch.empty(M, N, dtype=x.dtype, device=DEV)
    x_desc = TensorDescriptor.from_tensor(x, [cfg.block_m, cfg.block_k])
    out_desc = TensorDescriptor.from_tensor(out, [cfg.block_m, cfg.block_n])
    grid = (prog_ptr.numel() - 1, triton.cdiv(N, cfg.block_n))
    load_tma, store_tma = VARIANTS[variant]
    precision = "tf32" if x.dtype == torch.float32 else "ieee"

    def call():
        fwd[grid](x, x_desc, w, out, out_desc, prog_ptr, items, K, N, x.stride(0), w.stride(0), w.stride(1),
                  w.stride(2), out.stride(0), load_tma, store_tma, precision, cfg.block_m, cfg.block_n, cfg.block_k,
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        return out
    return call


def reference(x, ptr, w):
    return torch.cat([x[a:b].double() @ w[t].double() for t, (a, b) in enumerate(zip(ptr[:-1], ptr[1:]))])


def check():
    """Every variant against float64 on segments that end inside and on tile boundaries."""
    torch.manual_seed(0)
    ptr = torch.tensor([0, 70, 70, 75, 76, 128, 200])
    x = torch.randn(200, 32, device=DEV)
    w = torch.randn(6, 32, 32, device=DEV) / 32 ** 0.5
    cfg = cfgmod.SegmmConfig(32, 32, 32, 64, 4, 2)
    for variant in VARIANTS:
        err = (launcher(x, w, ptr, cfg, variant)().double() - reference(x, ptr, w)).abs().max().item()
        print(variant, "max abs error", err)
        assert err < 1e-3, variant


def main():
    torch.backends.cuda.matmul.allow_tf32 = True
    sizes = segment_sizes()
    ceil, num_sms = cfgmod.hardware(torch.device(DEV))
    for ds, K, dtype in (("BGS", 32, torch.bfloat16), ("Freebase", 32, torch.bfloat16), ("BGS", 64, torch.float32),
                         ("BGS", 128, torch.float32), ("AM", 128, torch.float32), ("AM", 32, torch.bfloat16)):
        ptr = torch.tensor([0] + sizes[ds]).cumsum(0)
        M, T = int(ptr[-1]), len(sizes[ds])
        x = torch.randn(M, K, device=DEV).to(dtype)
        w = (torch.randn(T, K, K, device=DEV) / K ** 0.5).to(dtype)
        floor = x.element_size() * (2 * M * K + T * K * K) / (ceil["gbps"] * 1e9) * 1e3
        dst = torch.empty_like(x)
        copy = triton.testing.do_bench(lambda: dst.copy_(x), warmup=10, rep=200, return_mode="median")
        pick = cfgmod.model_config(ptr.diff(), K, K, dtype, torch.device(DEV))
        res = [f"copy {copy:.4f} ({100 * floor / copy:.1f}%)"]
        for cfg in (pick, pick._replace(num_stages=2)):
            for variant in VARIANTS:
                call = launcher(x, w, ptr, cfg, variant)
                want = reference(x[:20000], ptr.clamp(max=20000), w) if variant == "plain" else want
                got = call()[:20000].double()
                assert (got - want).abs().max().item() < 0.05 * want.abs().max().item(), variant
                ms = triton.testing.do_bench(call, warmup=10, rep=200, return_mode="median")
                res.append(f"{variant} stages {cfg.num_stages} {ms:.4f} ({100 * floor / ms:.1f}%)")
        print(f"{ds} K={K} {str(dtype)[6:]} {tuple(pick)} floor {floor:.4f}", *res, sep="\n  ", flush=True)


if __name__ == "__main__":
    check() if sys.argv[1:] == ["check"] else main()
