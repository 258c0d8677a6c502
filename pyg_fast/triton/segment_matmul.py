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
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.triton.launcher import Launcher
from pyg_fast.triton.segment_matmul_config import (
    TUNER,
    Routing,
    SegmmConfig,
    build_routing,
    hardware,
    size_stats,
    wgrad_config,
)

# Triton's CPU interpreter computes tl.dot on bfloat16 tiles wrongly (seen with triton 3.9), so
# there the tiles are widened to fp32 first; bf16 products are exact in fp32, as on tensor cores.
_WIDEN_BF16 = os.getenv("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _segmm_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, prog_ptr, items_ptr, K, N,
                      stride_xm, stride_wt, stride_wk, stride_wn, stride_om,
                      HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr, WHOLE_K: tl.constexpr,
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
        if WHOLE_K:  # K fits one tile: the weight tile is loaded once for all of the item's row tiles,
            # and the row-tile loop is the innermost one, which Triton software-pipelines
            w = tl.load(w_base + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                        mask=(offs_k[:, None] < K) & mask_n[None, :], other=0.0)
            if WIDEN:
                w = w.to(tl.float32)
        if HAS_BIAS:
            bias = tl.load(b_ptr + t * N + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        for m0 in range(start, end, BLOCK_M):
            offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
            mask_m = offs_m < end
            acc = tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=tl.float32)
            if WHOLE_K:
                a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                            mask=mask_m[:, None] & (offs_k[None, :] < K), other=0.0)
                if WIDEN:
                    a = a.to(tl.float32)
                acc = tl.dot(a, w, acc, input_precision=PRECISION)
            else:
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
                acc += bias[None, :]
            tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _add(a, b):  # tl.sum is itself jitted, which the interpreter cannot call once Triton was imported without it
    return a + b


@triton.jit
def _segmm_wgrad_kernel(x_ptr, g_ptr, dst_ptr, items_ptr, K, N, stride_xm, stride_gm, stride_dt,
                        ATOMIC: tl.constexpr, BIAS_GRAD: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    it = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_k = offs_k < K
    mask_n = offs_n < N
    t = tl.load(items_ptr + 3 * it).to(tl.int64)
    start = tl.load(items_ptr + 3 * it + 1)
    end = tl.load(items_ptr + 3 * it + 2)
    acc = tl.full((BLOCK_K, BLOCK_N), 0.0, dtype=tl.float32)
    col_sum = tl.full((BLOCK_N, ), 0.0, dtype=tl.float32)
    for m0 in range(start, end, BLOCK_M):
        offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask_m = offs_m < end
        xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None],
                     mask=mask_k[:, None] & mask_m[None, :], other=0.0)
        g = tl.load(g_ptr + offs_m[:, None] * stride_gm + offs_n[None, :],
                    mask=mask_m[:, None] & mask_n[None, :], other=0.0)
        if BIAS_GRAD:
            col_sum += tl.reduce(g.to(tl.float32), 0, _add)
        if WIDEN:
            xt = xt.to(tl.float32)
            g = g.to(tl.float32)
        acc = tl.dot(xt, g, acc, input_precision=PRECISION)
    # dst: the fp32 [T, K (+1), N] result (ATOMIC) or the [items, K (+1), N] partials; row K holds
    # the bias gradient (the column sums of the gradient), written by the first K tile
    mask = mask_k[:, None] & mask_n[None, :]
    bias_row = BIAS_GRAD and pid_k == 0
    if ATOMIC:
        base = dst_ptr + t * stride_dt
        tile = base + offs_k[:, None] * N + offs_n[None, :]
        tl.atomic_add(tile, acc, mask=mask)
        if bias_row:
            tl.atomic_add(base + K * N + offs_n, col_sum, mask=mask_n)
    else:
        base = dst_ptr + it.to(tl.int64) * stride_dt
        tile = base + offs_k[:, None] * N + offs_n[None, :]
        tl.store(tile, acc, mask=mask)
        if bias_row:
            tl.store(base + K * N + offs_n, col_sum, mask=mask_n)


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


_fwd = Launcher(_segmm_fwd_kernel)
_wgrad = Launcher(_segmm_wgrad_kernel)
_wgrad_reduce = Launcher(_segmm_wgrad_reduce_kernel)
_REDUCE_BLOCK = 256


class SegmentPlan:
    """What the kernels derive from one ``ptr`` (the op layer caches it on the ptr tensor, per
    device): segment sizes on the host, and per launch shape its configuration, routing
    tables on the device and grid. Holds no reference to ``ptr`` itself (the cache entry keyed
    on it would otherwise keep it alive)."""

    def __init__(self, ptr: Tensor, device: torch.device):
        self.host_ptr = ptr.to("cpu", torch.long, copy=True)
        self.bounds = self.host_ptr.tolist()  # the float64 path's per-segment loop
        self.counts = self.host_ptr.diff()
        self.num_types = self.counts.numel()
        self.device = device
        self._launches = {}
        self._routings = {}
        self._device_counts = None

    def routing(self, rows_per_item: int, block_m: int, pack: bool) -> Routing:
        key = (rows_per_item, block_m, pack)
        if key not in self._routings:
            tables = build_routing(self.host_ptr, rows_per_item, block_m, pack)
            self._routings[key] = Routing(*(t.to(self.device) for t in tables))
        return self._routings[key]

    def device_counts(self) -> Tensor:
        if self._device_counts is None:
            self._device_counts = self.counts.to(self.device)
        return self._device_counts

    def launch(self, key: tuple, make):
        """``make()``, memoised under ``key`` (configuration, routing and grid of one launch shape)."""
        hit = self._launches.get(key)
        if hit is None:
            hit = self._launches[key] = make()
        return hit


class _FwdLaunch(NamedTuple):
    cfg: SegmmConfig
    routing: Routing
    grid: tuple


def _fwd_launch(p: SegmentPlan, cfg: SegmmConfig, N: int) -> _FwdLaunch:
    routing = p.routing(cfg.rows_per_prog, cfg.block_m, True)
    return _FwdLaunch(cfg, routing, (routing.prog_ptr.numel() - 1, triton.cdiv(N, cfg.block_n), 1))


def _launch_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], out: Tensor, launch: _FwdLaunch,
                    precision: str) -> None:
    cfg, routing, grid = launch
    K, N = w.size(1), w.size(2)
    if grid[0] == 0 or N == 0:
        return
    widen = _WIDEN_BF16 and x.dtype == torch.bfloat16
    _fwd(grid, (x, w, bias if bias is not None else w, out, routing.prog_ptr, routing.items),
         (K, N, x.stride(0), w.stride(0), w.stride(1), w.stride(2), out.stride(0), bias is not None, precision, widen,
          K <= cfg.block_k, cfg.block_m, cfg.block_n, cfg.block_k), cfg.num_warps, cfg.num_stages)


def forward(x: Tensor, p: SegmentPlan, w: Tensor, bias: Optional[Tensor] = None,
            config: Optional[SegmmConfig] = None) -> Tensor:
    """``out[ptr[t]:ptr[t+1]] = x[ptr[t]:ptr[t+1]] @ w[t] (+ bias[t])`` for the ptr of plan ``p``.
    ``x`` [M, K] has unit column stride; ``w`` [T, K, N] may be any strided view (the input
    gradient passes ``w.transpose(1, 2)``). ``config`` overrides the tuner."""
    M, K, N = x.size(0), w.size(1), w.size(2)
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    if K == 0:
        out.zero_()
        if bias is not None:
            out += bias.repeat_interleave(p.device_counts(), dim=0, output_size=M)
        return out
    precision = _precision(x.dtype)
    if config is not None:
        launch = _fwd_launch(p, config, N)
    else:  # chosen once per (ptr, shapes, dtype): no per-call model cost
        def make():
            def bench(cfg):
                trial = _fwd_launch(p, cfg, N)
                return triton.testing.do_bench(lambda: _launch_forward(x, w, bias, out, trial, precision))
            return _fwd_launch(p, TUNER.choose("fwd", p.counts, K, N, x.dtype, x.device, bench), N)
        launch = p.launch(("fwd", K, N, x.dtype, precision), make)
    _launch_forward(x, w, bias, out, launch, precision)
    return out


def _wgrad_config(p: SegmentPlan, K: int, N: int, dtype: torch.dtype) -> SegmmConfig:
    ceil, num_sms = hardware(p.device)
    return wgrad_config(K, N, dtype, size_stats(p.counts), num_sms, ceil)


def _wgrad_launch(p: SegmentPlan, cfg: SegmmConfig, K: int, N: int):
    routing = p.routing(cfg.rows_per_prog, cfg.block_m, False)
    return cfg, routing, (routing.items.size(0), triton.cdiv(K, cfg.block_k), triton.cdiv(N, cfg.block_n))


def weight_grad(x: Tensor, p: SegmentPlan, g: Tensor, deterministic: bool, bias_grad: bool = False,
                config: Optional[SegmmConfig] = None) -> Tensor:
    """``out[t] = x[ptr[t]:ptr[t+1]]^T @ g[ptr[t]:ptr[t+1]]`` as [T, K, N] in x's dtype; with
    ``bias_grad`` [T, K + 1, N], whose row K holds the column sums of ``g`` per segment (the
    gradient of a bias). ``config`` overrides the default tiles."""
    T, K, N = p.num_types, x.size(1), g.size(1)
    rows = K + bias_grad
    if config is not None:
        cfg, routing, grid = _wgrad_launch(p, config, K, N)
    else:
        cfg, routing, grid = p.launch(("wgrad", K, N, x.dtype),
                                      lambda: _wgrad_launch(p, _wgrad_config(p, K, N, x.dtype), K, N))
    if grid[0] == 0 or N == 0 or rows == 0:
        return torch.zeros(T, rows, N, dtype=x.dtype, device=x.device)
    if K == 0:  # no weight tiles: one program per item for the bias row
        grid = (grid[0], 1, grid[2])
    widen = _WIDEN_BF16 and x.dtype == torch.bfloat16
    scalars = (K, N, x.stride(0), g.stride(0), rows * N)
    consts = (bias_grad, _precision(x.dtype), widen, cfg.block_m, cfg.block_n, cfg.block_k)
    if not deterministic:
        acc = torch.zeros(T, rows, N, dtype=torch.float32, device=x.device)
        _wgrad(grid, (x, g, acc, routing.items), (*scalars, True, *consts), cfg.num_warps, cfg.num_stages)
        return acc.to(x.dtype)
    partial = torch.empty(grid[0], rows, N, dtype=torch.float32, device=x.device)
    _wgrad(grid, (x, g, partial, routing.items), (*scalars, False, *consts), cfg.num_warps, cfg.num_stages)
    out = torch.empty(T, rows, N, dtype=x.dtype, device=x.device)
    _wgrad_reduce((T, triton.cdiv(rows * N, _REDUCE_BLOCK), 1), (partial, routing.type_items, out),
                  (rows * N, _REDUCE_BLOCK), 4, 1)
    return out
