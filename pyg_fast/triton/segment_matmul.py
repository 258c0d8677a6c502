"""Triton kernels of the segmented matmul (the CUDA implementation of
``torch.ops.pyg_fast.segment_matmul`` and ``segment_matmul_weight_grad``).

Forward: a routing table maps every program to a run of items (type, row start, row end); a
program loops over its items in ``BLOCK_M``-row tiles and multiplies each tile by its type's
weight with ``tl.dot`` (tensor cores: TF32 when ``torch.backends.cuda.matmul.allow_tf32``,
bf16/fp16 natively, always fp32 accumulation), adding the bias in the epilogue. The input
gradient is the same kernel with the transposed weights.

Weight gradient (FASTEN's 3-D parallelisation): each segment's rows are split into items and a
program computes one item's partial ``X_item^T G_item`` for one (K, N) tile. The partials are
either added atomically into an fp32 buffer, or (deterministic) written out and summed per
type in a fixed order by a second kernel.

With ``TRITON_INTERPRET=1`` set before this module is imported, the kernels run on CPU tensors
(that is how CI tests them). The kernels use only builtins of ``triton.language`` (``tl.full``,
not the jitted ``tl.zeros``), so they also interpret when Triton itself was imported earlier.
"""
import os
from typing import Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.triton.segment_matmul_config import (
    TUNER,
    Routing,
    SegmmConfig,
    build_routing,
    hardware,
    size_stats,
    wgrad_rows_per_item,
)

# Triton's CPU interpreter computes tl.dot on bfloat16 tiles wrongly (seen with triton 3.9), so
# there the tiles are widened to fp32 first; bf16 products are exact in fp32, as on tensor cores.
_WIDEN_BF16 = os.getenv("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _segmm_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, prog_ptr, items_ptr, K, N,
                      stride_xm, stride_wt, stride_wk, stride_wn, stride_om,
                      HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    first = tl.load(prog_ptr + pid)
    last = tl.load(prog_ptr + pid + 1)
    for it in range(first, last):
        t = tl.load(items_ptr + 3 * it).to(tl.int64)
        start = tl.load(items_ptr + 3 * it + 1)
        end = tl.load(items_ptr + 3 * it + 2)
        w_base = w_ptr + t * stride_wt
        for m0 in range(start, end, BLOCK_M):
            offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
            mask_m = offs_m < end
            acc = tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + offs_k
                a = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                            mask=mask_m[:, None] & (kk[None, :] < K), other=0.0)
                b = tl.load(w_base + kk[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                            mask=(kk[:, None] < K) & mask_n[None, :], other=0.0)
                if WIDEN:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
            if HAS_BIAS:
                acc += tl.load(b_ptr + t * N + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
            tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _segmm_wgrad_kernel(x_ptr, g_ptr, dst_ptr, items_ptr, K, N, stride_xm, stride_gm,
                        ATOMIC: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    it = tl.program_id(0)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_k = offs_k < K
    mask_n = offs_n < N
    t = tl.load(items_ptr + 3 * it).to(tl.int64)
    start = tl.load(items_ptr + 3 * it + 1)
    end = tl.load(items_ptr + 3 * it + 2)
    acc = tl.full((BLOCK_K, BLOCK_N), 0.0, dtype=tl.float32)
    for m0 in range(start, end, BLOCK_M):
        offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask_m = offs_m < end
        xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None],
                     mask=mask_k[:, None] & mask_m[None, :], other=0.0)
        g = tl.load(g_ptr + offs_m[:, None] * stride_gm + offs_n[None, :],
                    mask=mask_m[:, None] & mask_n[None, :], other=0.0)
        if WIDEN:
            xt = xt.to(tl.float32)
            g = g.to(tl.float32)
        acc = tl.dot(xt, g, acc, input_precision=PRECISION)
    mask = mask_k[:, None] & mask_n[None, :]
    tile = offs_k[:, None] * N + offs_n[None, :]
    if ATOMIC:  # dst: the fp32 [T, K, N] result
        tl.atomic_add(dst_ptr + t * K * N + tile, acc, mask=mask)
    else:  # dst: the [items, K, N] partials
        tl.store(dst_ptr + it.to(tl.int64) * K * N + tile, acc, mask=mask)


@triton.jit
def _segmm_wgrad_reduce_kernel(part_ptr, type_items_ptr, out_ptr, KN, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < KN
    first = tl.load(type_items_ptr + t)
    last = tl.load(type_items_ptr + t + 1)
    src = part_ptr + first.to(tl.int64) * KN + offs
    acc = tl.full((BLOCK,), 0.0, dtype=tl.float32)
    for _ in range(first, last):  # the type's items in a fixed order: bitwise reproducible
        acc += tl.load(src, mask=mask, other=0.0)
        src += KN
    tl.store(out_ptr + t.to(tl.int64) * KN + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: full fp32 unless TF32 is allowed; 16-bit types ignore it."""
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def _widen(dtype: torch.dtype) -> bool:
    return _WIDEN_BF16 and dtype == torch.bfloat16


def _ptr_on_host(ptr: Tensor) -> Tensor:
    """ptr as a CPU int64 tensor (one device-to-host copy per ptr tensor, cached)."""
    if ptr.device.type == "cpu":
        return _layout.as_long(ptr)
    return _layout.cached(ptr, ("segmm_host",), lambda: ptr.long().cpu())


def _routing(ptr: Tensor, rows_per_item: int, block_m: int, pack: bool, device: torch.device) -> Routing:
    """Routing tables on ``device``, cached on the ptr tensor."""
    def compute():
        tables = build_routing(_ptr_on_host(ptr), rows_per_item, block_m, pack)
        return Routing(*(t.to(device) for t in tables))
    return _layout.cached(ptr, ("segmm_routing", rows_per_item, block_m, pack, str(device)), compute)


def _counts(ptr: Tensor) -> Tensor:
    return _layout.cached(ptr, ("segmm_counts",), lambda: _ptr_on_host(ptr).diff())


def _launch_forward(x: Tensor, ptr: Tensor, w: Tensor, bias: Optional[Tensor], out: Tensor,
                    cfg: SegmmConfig) -> None:
    K, N = w.size(1), w.size(2)
    routing = _routing(ptr, cfg.rows_per_prog, cfg.block_m, True, x.device)
    programs = routing.prog_ptr.numel() - 1
    if programs == 0 or N == 0:
        return
    grid = (programs, triton.cdiv(N, cfg.block_n))
    _segmm_fwd_kernel[grid](
        x, w, bias if bias is not None else w, out, routing.prog_ptr, routing.items, K, N,
        x.stride(0), w.stride(0), w.stride(1), w.stride(2), out.stride(0),
        HAS_BIAS=bias is not None, PRECISION=_precision(x.dtype), WIDEN=_widen(x.dtype),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def forward(x: Tensor, ptr: Tensor, w: Tensor, bias: Optional[Tensor] = None,
            config: Optional[SegmmConfig] = None) -> Tensor:
    """``out[ptr[t]:ptr[t+1]] = x[ptr[t]:ptr[t+1]] @ w[t] (+ bias[t])``. ``x`` [M, K] has unit
    column stride; ``w`` [T, K, N] may be any strided view (the input gradient passes
    ``w.transpose(1, 2)``); ``ptr`` may be on the CPU. ``config`` overrides the tuner."""
    M, K, N = x.size(0), w.size(1), w.size(2)
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    if K == 0:
        out.zero_()
        if bias is not None:
            out += bias.repeat_interleave(_counts(ptr).to(x.device), dim=0, output_size=M)
        return out
    if config is None:  # chosen once per (ptr tensor, shapes, dtype): no per-call model cost
        def bench(cfg):
            return triton.testing.do_bench(lambda: _launch_forward(x, ptr, w, bias, out, cfg))
        config = _layout.cached(ptr, ("segmm_config", K, N, x.dtype, _precision(x.dtype), str(x.device)),
                                lambda: TUNER.choose("fwd", _counts(ptr), K, N, x.dtype, x.device, bench))
    _launch_forward(x, ptr, w, bias, out, config)
    return out


def _wgrad_config(x: Tensor, g: Tensor, ptr: Tensor) -> SegmmConfig:
    """Tiles of the weight gradient: the reduction runs over rows, so tiles are K x N."""
    K, N = x.size(1), g.size(1)
    _, num_sms = hardware(x.device)
    block_k = max(16, min(64, 1 << max(0, (K - 1).bit_length())))
    block_n = max(16, min(64, 1 << max(0, (N - 1).bit_length())))
    stats = size_stats(_counts(ptr))
    block_m = 32 if stats.mean < 256 else 64
    return SegmmConfig(block_m, block_n, block_k, wgrad_rows_per_item(stats, num_sms, block_m), 4, 2)


def weight_grad(x: Tensor, ptr: Tensor, g: Tensor, deterministic: bool) -> Tensor:
    """``out[t] = x[ptr[t]:ptr[t+1]]^T @ g[ptr[t]:ptr[t+1]]`` as [T, K, N] in x's dtype."""
    T = ptr.numel() - 1
    K, N = x.size(1), g.size(1)
    cfg = _layout.cached(ptr, ("segmm_wgrad_config", K, N, str(x.device)), lambda: _wgrad_config(x, g, ptr))
    routing = _routing(ptr, cfg.rows_per_prog, cfg.block_m, False, x.device)
    items = routing.items.size(0)
    if items == 0 or K == 0 or N == 0:
        return torch.zeros(T, K, N, dtype=x.dtype, device=x.device)
    grid = (items, triton.cdiv(K, cfg.block_k), triton.cdiv(N, cfg.block_n))
    common = dict(PRECISION=_precision(x.dtype), WIDEN=_widen(x.dtype), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                  BLOCK_K=cfg.block_k, num_warps=cfg.num_warps)
    if not deterministic:
        acc = torch.zeros(T, K, N, dtype=torch.float32, device=x.device)
        _segmm_wgrad_kernel[grid](x, g, acc, routing.items, K, N, x.stride(0), g.stride(0), ATOMIC=True, **common)
        return acc.to(x.dtype)
    partial = torch.empty(items, K, N, dtype=torch.float32, device=x.device)
    _segmm_wgrad_kernel[grid](x, g, partial, routing.items, K, N, x.stride(0), g.stride(0), ATOMIC=False, **common)
    out = torch.empty(T, K, N, dtype=x.dtype, device=x.device)
    block = 256
    _segmm_wgrad_reduce_kernel[(T, triton.cdiv(K * N, block))](partial, routing.type_items, out, K * N, BLOCK=block)
    return out
