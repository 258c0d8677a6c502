"""Triton kernels of the segmented matmul (the CUDA implementation of
``torch.ops.pyg_fast.segment_matmul`` and ``segment_matmul_weight_grad``).

Forward: a table of blocks gives every program its rows, all of one type (type, first row; the
program ends where the next one starts); a program loops over its rows in ``BLOCK_M``-row tiles
and multiplies each tile by its type's weight with ``tl.dot`` (tensor cores: TF32 when
``torch.backends.cuda.matmul.allow_tf32``, bf16/fp16 natively, always fp32 accumulation), adding
the bias in the epilogue. The input gradient is the same kernel with the transposed weights.

Backward (FASTEN's 3-D parallelisation of the weight gradient): each segment's rows are split
into items and a program computes one item's partial ``X_item^T G_item`` for one (K, N) tile;
where K and N fit one tile the same program also writes the item's input-gradient rows
``G_item W_t^T``, so each row tile of the gradient is read once. The partials of a type are
summed in item order by the type's last program to finish (an arrival counter per type: one
launch, bitwise reproducible), or, where many items share a type and determinism is not asked
for, added atomically into an fp32 buffer.

With ``TRITON_INTERPRET=1`` set before this module is imported, the kernels run on CPU tensors
(that is how CI tests them). The kernels use only builtins of ``triton.language`` (``tl.full``,
not the jitted ``tl.zeros``), so they also interpret when Triton itself was imported earlier.
"""
import os
from typing import NamedTuple, Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

# native_launch_allowed is re-exported: the op layer reaches the Triton side through this module only
from pyg_fast.triton.launcher import KernelCall, Launcher, Role, native_kernel, native_launch_allowed  # noqa: F401
from pyg_fast.tuning.segment_matmul import (
    ATOMIC_MIN_ITEMS,
    TUNER,
    Routing,
    SegmmConfig,
    build_blocks,
    build_routing,
    bwd_config,
    hardware,
    size_stats,
    tail_rows,
    tensor_cores,
)

# Triton's CPU interpreter computes tl.dot on bfloat16 tiles wrongly (seen with triton 3.9), so
# there the tiles are widened to fp32 first; bf16 products are exact in fp32, as on tensor cores.
_WIDEN_BF16 = os.getenv("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _segmm_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, blocks_ptr, K, N,
                      stride_xm, stride_wt, stride_wk, stride_wn, stride_om,
                      HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr, WHOLE_K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    # three independent loads, all the program reads before its weight and first row tiles
    t = tl.load(blocks_ptr + 2 * pid).to(tl.int64)
    start = tl.load(blocks_ptr + 2 * pid + 1)
    end = tl.load(blocks_ptr + 2 * pid + 3)
    w_base = w_ptr + t * stride_wt
    if WHOLE_K:  # K fits one tile: the weight tile is loaded once for all row tiles, and the
        # row-tile loop is the innermost one, which Triton software-pipelines
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
def _finish_weight_grad(acc, col_sum, bias_row, it, t, gw_ptr, part_ptr, count_ptr, type_items_ptr,
                        offs_k, offs_n, K, N, stride_gwt, ATOMIC: tl.constexpr):
    """Adds one item's tile of x^T g (and, in ``bias_row``, its column sums of g) into the type's
    gradient. ATOMIC: atomically into an fp32 buffer. Else in a fixed order, in this launch: an
    item alone in its type writes the result; otherwise each item leaves its fp32 partial, and the
    type's last item to arrive sums the partials in item order (bitwise reproducible), writes the
    result in the output's dtype and resets the type's counter for the next launch."""
    mask_n = offs_n < N
    mask = (offs_k < K)[:, None] & mask_n[None, :]
    tile = offs_k[:, None] * N + offs_n[None, :]
    if ATOMIC:
        base = gw_ptr + t * stride_gwt
        tl.atomic_add(base + tile, acc, mask=mask)
        if bias_row:
            tl.atomic_add(base + K * N + offs_n, col_sum, mask=mask_n)
    else:
        first = tl.load(type_items_ptr + t)
        items = tl.load(type_items_ptr + t + 1) - first
        write = items == 1
        if items > 1:
            part = part_ptr + it.to(tl.int64) * stride_gwt
            tl.store(part + tile, acc, mask=mask)
            if bias_row:
                tl.store(part + K * N + offs_n, col_sum, mask=mask_n)
            tl.debug_barrier()  # every thread's partial is written before the counter says so
            counter = count_ptr + (t * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2) + tl.program_id(2)
            write = tl.atomic_add(counter, 1, sem="acq_rel") == items - 1
            if write:  # the type's other items are done: sum all partials in item order
                acc = tl.full(acc.shape, 0.0, dtype=tl.float32)
                col_sum = tl.full(col_sum.shape, 0.0, dtype=tl.float32)
                part = part_ptr + first.to(tl.int64) * stride_gwt
                for _ in range(0, items):  # .cg: read the other programs' partials from L2, not L1
                    acc += tl.load(part + tile, mask=mask, other=0.0, cache_modifier=".cg")
                    if bias_row:
                        col_sum += tl.load(part + K * N + offs_n, mask=mask_n, other=0.0, cache_modifier=".cg")
                    part += stride_gwt
                tl.atomic_xchg(counter, 0)
        if write:
            base = gw_ptr + t * stride_gwt
            tl.store(base + tile, acc.to(gw_ptr.dtype.element_ty), mask=mask)
            if bias_row:
                tl.store(base + K * N + offs_n, col_sum.to(gw_ptr.dtype.element_ty), mask=mask_n)


@triton.jit
def _segmm_bwd_kernel(x_ptr, w_ptr, g_ptr, gx_ptr, gw_ptr, part_ptr, count_ptr, items_ptr, type_items_ptr,
                      K, N, stride_xm, stride_wt, stride_wk, stride_wn, stride_gm, stride_gxm, stride_gwt,
                      INPUT_GRAD: tl.constexpr, BIAS_GRAD: tl.constexpr, ATOMIC: tl.constexpr,
                      PRECISION: tl.constexpr, WIDEN: tl.constexpr,
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
    if INPUT_GRAD:  # the whole of K and N in this program: w[t]^T stays loaded for the input gradient
        wt = tl.load(w_ptr + t * stride_wt + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                     mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        if WIDEN:
            wt = wt.to(tl.float32)
    acc = tl.full((BLOCK_K, BLOCK_N), 0.0, dtype=tl.float32)
    col_sum = tl.full((BLOCK_N, ), 0.0, dtype=tl.float32)
    for m0 in range(start, end, BLOCK_M):
        offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask_m = offs_m < end
        g = tl.load(g_ptr + offs_m[:, None] * stride_gm + offs_n[None, :],
                    mask=mask_m[:, None] & mask_n[None, :], other=0.0)
        xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + offs_k[:, None],
                     mask=mask_k[:, None] & mask_m[None, :], other=0.0)
        if BIAS_GRAD:
            col_sum += tl.reduce(g.to(tl.float32), 0, _add)
        if WIDEN:
            xt = xt.to(tl.float32)
            g = g.to(tl.float32)
        if INPUT_GRAD:  # the gradient's row tile is read once for both gradients
            gx = tl.dot(g, wt, input_precision=PRECISION)
            tl.store(gx_ptr + offs_m[:, None] * stride_gxm + offs_k[None, :], gx.to(gx_ptr.dtype.element_ty),
                     mask=mask_m[:, None] & mask_k[None, :])
        acc = tl.dot(xt, g, acc, input_precision=PRECISION)
    # row K of the weight gradient holds the bias gradient (the column sums of g): the first K tile writes it
    _finish_weight_grad(acc, col_sum, BIAS_GRAD and pid_k == 0, it, t, gw_ptr, part_ptr, count_ptr, type_items_ptr,
                        offs_k, offs_n, K, N, stride_gwt, ATOMIC)


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: full fp32 unless TF32 is allowed (``tuning.segment_matmul.tensor_cores``);
    16-bit types ignore it."""
    return "ieee" if dtype == torch.float32 and not tensor_cores(dtype) else "tf32"


_fwd = Launcher(_segmm_fwd_kernel)
_bwd = Launcher(_segmm_bwd_kernel)
_MISSING = object()


class SegmentPlan:
    """What the kernels derive from one ``ptr`` (the op layer caches it on the ptr tensor, per
    device): segment sizes on the host, and per launch shape its configuration, block or item
    tables on the device and grid. Holds no reference to ``ptr`` itself (the cache entry keyed
    on it would otherwise keep it alive)."""

    def __init__(self, ptr: Tensor, device: torch.device):
        self.host_ptr = ptr.to("cpu", torch.long, copy=True)
        self.bounds = self.host_ptr.tolist()  # the float64 path's per-segment loop
        self.counts = self.host_ptr.diff()
        self.num_types = self.counts.numel()
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # streams and counters are per device index
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self._launches = {}
        self._tables = {}
        self._device_counts = None
        self._counters = {}

    def blocks(self, rows_per_prog: int, block_m: int) -> Tensor:
        """The forward's block table (see :func:`build_blocks`) on the device."""
        key = ("blocks", rows_per_prog, block_m)
        if key not in self._tables:
            short_tail = tail_rows(int(self.host_ptr[-1]), rows_per_prog, hardware(self.device)[1])
            self._tables[key] = build_blocks(self.host_ptr, rows_per_prog, block_m, short_tail).to(self.device)
        return self._tables[key]

    def routing(self, rows_per_item: int) -> Routing:
        """The backward's items (see :func:`build_routing`) on the device."""
        key = ("items", rows_per_item)
        if key not in self._tables:
            items, type_items, max_items_per_type = build_routing(self.host_ptr, rows_per_item)
            self._tables[key] = Routing(items.to(self.device), type_items.to(self.device), max_items_per_type)
        return self._tables[key]

    def counters(self, size: int) -> Tensor:
        """At least ``size`` int32 arrival counters of the ordered weight-gradient reduction, zero
        between launches (the kernel resets them): one set per stream, so that launches on
        different streams never share a counter."""
        stream = torch._C._cuda_getCurrentRawStream(self.device.index) if self.device.type == "cuda" else 0
        found = self._counters.get(stream)
        if found is None or found.numel() < size:
            found = self._counters[stream] = torch.zeros(size, dtype=torch.int32, device=self.device)
        return found

    def device_counts(self) -> Tensor:
        if self._device_counts is None:
            self._device_counts = self.counts.to(self.device)
        return self._device_counts

    def launch(self, key: tuple, make):
        """``make()``, memoised under ``key`` (configuration, tables and grid of one launch shape,
        or a C++ program)."""
        hit = self._launches.get(key, _MISSING)
        if hit is _MISSING:
            hit = self._launches[key] = make()
        return hit


class _FwdLaunch(NamedTuple):
    """One forward launch shape: its configuration, block table and grid."""
    cfg: SegmmConfig
    blocks: Tensor
    grid: tuple


class _BwdLaunch(NamedTuple):
    """One backward launch shape: its configuration, items and grid."""
    cfg: SegmmConfig
    routing: Routing
    grid: tuple


def _fwd_launch(p: SegmentPlan, cfg: SegmmConfig, N: int) -> _FwdLaunch:
    blocks = p.blocks(cfg.rows_per_prog, cfg.block_m)
    return _FwdLaunch(cfg, blocks, (blocks.size(0) - 1, triton.cdiv(N, cfg.block_n), 1))


def _forward_launch(p: SegmentPlan, x: Tensor, w: Tensor, bias: Optional[Tensor], out: Tensor, precision: str,
                    config: Optional[SegmmConfig]) -> _FwdLaunch:
    K, N = w.size(1), w.size(2)
    if config is not None:
        return _fwd_launch(p, config, N)

    def make():  # chosen once per (ptr, shapes, dtype): no per-call model cost
        def bench(cfg):
            call = _fwd_call(x, w, bias, out, _fwd_launch(p, cfg, N), precision)
            return triton.testing.do_bench(call.run) if call is not None else 0.0
        return _fwd_launch(p, TUNER.choose("fwd", p.counts, K, N, x.dtype, x.device, bench), N)
    return p.launch(("fwd", K, N, x.dtype, precision), make)


def _fwd_call(x: Tensor, w: Tensor, bias: Optional[Tensor], out: Tensor, launch: _FwdLaunch,
              precision: str) -> Optional[KernelCall]:
    """The forward kernel's launch, None where there is nothing to compute."""
    cfg, blocks, grid = launch
    K, N = w.size(1), w.size(2)
    if grid[0] == 0 or N == 0:
        return None
    widen = _WIDEN_BF16 and x.dtype == torch.bfloat16
    return KernelCall(_fwd, grid, (x, w, bias if bias is not None else w, out, blocks),
                      (K, N, x.stride(0), w.stride(0), w.stride(1), w.stride(2), out.stride(0), bias is not None,
                       precision, widen, K <= cfg.block_k, cfg.block_m, cfg.block_n, cfg.block_k),
                      cfg.num_warps, cfg.num_stages)


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
    precision = dot_precision(x.dtype)
    call = _fwd_call(x, w, bias, out, _forward_launch(p, x, w, bias, out, precision, config), precision)
    if call is not None:
        call.run()
    return out


def _bwd_launch(p: SegmentPlan, cfg: SegmmConfig, K: int, N: int) -> _BwdLaunch:
    routing = p.routing(cfg.rows_per_prog)
    return _BwdLaunch(cfg, routing, (routing.items.size(0), max(1, triton.cdiv(K, cfg.block_k)),
                                     triton.cdiv(N, cfg.block_n)))


def _backward_launch(p: SegmentPlan, K: int, N: int, dtype: torch.dtype, input_grad: bool,
                     config: Optional[SegmmConfig]) -> _BwdLaunch:
    if config is not None:
        return _bwd_launch(p, config, K, N)
    return p.launch(("bwd", K, N, dtype, input_grad),
                    lambda: _bwd_launch(p, _bwd_config(p, K, N, dtype, input_grad), K, N))


def _fuses_input_grad(launch: _BwdLaunch, K: int) -> bool:
    """Whether the weight-gradient kernel also writes the input gradient (K and N in one tile)."""
    return K > 0 and launch.grid[1] == launch.grid[2] == 1


def _is_atomic(launch: _BwdLaunch, deterministic: bool) -> bool:
    return not deterministic and launch.routing.max_items_per_type > ATOMIC_MIN_ITEMS


def _weight_grad_buffers(p: SegmentPlan, launch: _BwdLaunch, x: Tensor, rows: int, N: int,
                         atomic: bool) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """(the weight gradient's output, fp32 for atomics; the ordered reduction's fp32 partials and
    arrival counters, None where each type has one item or the sums are atomic)."""
    T, grid = p.num_types, launch.grid
    if atomic:
        return torch.zeros(T, rows, N, dtype=torch.float32, device=x.device), None, None
    grad_w = torch.empty(T, rows, N, dtype=x.dtype, device=x.device)
    if launch.routing.max_items_per_type <= 1:
        return grad_w, None, None
    return (grad_w, torch.empty(grid[0], rows, N, dtype=torch.float32, device=x.device),
            p.counters(T * grid[1] * grid[2]))


def _bwd_call(x: Tensor, w: Optional[Tensor], g: Tensor, grad_x: Optional[Tensor], grad_w: Tensor,
              part: Optional[Tensor], counters: Optional[Tensor], launch: _BwdLaunch, bias_grad: bool,
              atomic: bool) -> KernelCall:
    """The weight-gradient kernel's launch; with ``w`` and ``grad_x`` it writes the input gradient too."""
    cfg, routing, grid = launch
    K, N = x.size(1), g.size(1)
    # a tensor the kernel's branches leave unused is stood in for by another of the same dtype
    wt, gx = (w, grad_x) if grad_x is not None else (x, x)
    part = grad_w if part is None else part
    counters = routing.type_items if counters is None else counters
    return KernelCall(_bwd, grid, (x, wt, g, gx, grad_w, part, counters, routing.items, routing.type_items),
                      (K, N, x.stride(0), wt.stride(0), wt.stride(1), wt.stride(-1), g.stride(0), gx.stride(0),
                       grad_w.size(1) * N, grad_x is not None, bias_grad, atomic, dot_precision(x.dtype),
                       _WIDEN_BF16 and x.dtype == torch.bfloat16, cfg.block_m, cfg.block_n, cfg.block_k),
                      cfg.num_warps, cfg.num_stages)


def backward(x: Tensor, p: SegmentPlan, g: Tensor, w: Optional[Tensor] = None, bias_grad: bool = False,
             deterministic: bool = True, config: Optional[SegmmConfig] = None) -> Tuple[Optional[Tensor], Tensor]:
    """Gradients of ``out = segment_matmul(x, ptr, w)`` from ``g = d out``: (``g @ w[t]^T`` per
    segment if ``w`` is given, else None; ``grad_w`` [T, K, N], or [T, K + 1, N] with
    ``bias_grad``, whose row K holds the column sums of ``g`` per segment).

    Where K and N fit one tile, one launch reads every row tile of ``x`` and ``g`` once for both
    gradients; else the input gradient is the forward kernel on the transposed weights. The
    weight gradient's partial sums over a segment's items are added in item order (bitwise
    reproducible, in the same launch), or, with ``deterministic=False`` where more than
    ``ATOMIC_MIN_ITEMS`` items share a type, atomically into an fp32 buffer. ``config``
    overrides the default tiles."""
    T, K, N = p.num_types, x.size(1), g.size(1)
    launch = _backward_launch(p, K, N, x.dtype, w is not None, config)
    fused = w is not None and _fuses_input_grad(launch, K)
    grad_x = torch.empty_like(x) if fused else None if w is None else forward(g, p, w.transpose(1, 2))
    rows = K + bias_grad
    if N == 0 or rows == 0 or launch.grid[0] == 0:  # nothing to compute, or no types
        return grad_x, torch.zeros(T, rows, N, dtype=x.dtype, device=x.device)
    atomic = _is_atomic(launch, deterministic)
    grad_w, part, counters = _weight_grad_buffers(p, launch, x, rows, N, atomic)
    _bwd_call(x, w, g, grad_x if fused else None, grad_w, part, counters, launch, bias_grad, atomic).run()
    return grad_x, grad_w.to(x.dtype) if atomic else grad_w


def _bwd_config(p: SegmentPlan, K: int, N: int, dtype: torch.dtype, input_grad: bool) -> SegmmConfig:
    ceil, num_sms = hardware(p.device)
    return bwd_config(K, N, dtype, size_stats(p.counts), num_sms, ceil, input_grad)


def native_program(x: Tensor, p: SegmentPlan, w: Tensor, bias: Optional[Tensor], input_grad: bool,
                   weight_grad: bool, bias_grad: bool, deterministic: bool):
    """Forward and backward of one call shape as a ``torch.classes.pyg_fast.SegmmProgram``, which
    ``torch.ops.pyg_fast.segment_matmul_program`` runs from C++: the same kernels, launches and
    buffers as :func:`forward` and :func:`backward`, for 16-byte aligned contiguous ``x``, ``w``
    and ``bias``. None where there is nothing to launch (empty sizes). Raises NotImplementedError
    where a kernel cannot be launched from C++ (see :func:`native_kernel`)."""
    M, K, N = x.size(0), w.size(1), w.size(2)
    if not _fwd.compiles or M == 0 or K == 0 or N == 0:
        return None
    precision = dot_precision(x.dtype)
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)  # placeholders, to describe the launches
    roles = {Role.INPUT: x, Role.WEIGHT: w, Role.BIAS: bias, Role.OUT: out}
    call = _fwd_call(x, w, bias, out, _forward_launch(p, x, w, bias, out, precision, None), precision)
    if call is None:
        return None
    program = torch.classes.pyg_fast.SegmmProgram(native_kernel(call, roles), M, K, N, p.num_types)
    if not (input_grad or weight_grad or bias_grad):
        return program
    g = roles[Role.GRAD] = torch.empty_like(out)
    grad_x = roles[Role.GRAD_INPUT] = torch.empty_like(x) if input_grad else None
    fused = False
    if weight_grad or bias_grad:
        launch = _backward_launch(p, K, N, x.dtype, input_grad, None)
        if launch.grid[0] == 0:
            return None
        fused = input_grad and _fuses_input_grad(launch, K)
        atomic = _is_atomic(launch, deterministic)
        grad_w, part, counters = _weight_grad_buffers(p, launch, x, K + bias_grad, N, atomic)
        roles.update({Role.GRAD_WEIGHT: grad_w, Role.PARTIALS: part, Role.COUNTERS: counters})
        call = _bwd_call(x, w, g, grad_x if fused else None, grad_w, part, counters, launch, bias_grad, atomic)
        program.set_weight_grad(native_kernel(call, roles), weight_grad, bias_grad, atomic,
                                0 if part is None else part.size(0), 0 if counters is None else counters.numel(), fused)
    if input_grad and not fused:  # the forward kernel on the transposed weights
        wt = w.transpose(1, 2)
        call = _fwd_call(g, wt, None, grad_x, _forward_launch(p, g, wt, None, grad_x, precision, None), precision)
        program.set_input_grad(native_kernel(call, roles))
    return program
