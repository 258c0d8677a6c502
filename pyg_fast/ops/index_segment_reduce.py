"""Gather-fused segment reduction and weighted SpMM (torch.ops.pyg_fast.index_segment_reduce)."""
import math
import weakref
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._autograd import differentiable
from pyg_fast.ops._checks import check_float, check_index_tensor, check_reduce
from pyg_fast.ops.sddmm import sddmm_op
from pyg_fast import tuning
from pyg_fast.tuning import segment_launch


def index_segment_reduce(x: Tensor, src_index: Tensor, dst_index: Optional[Tensor] = None,
                         dim_size: Optional[int] = None, reduce: str = "sum", *,
                         ptr: Optional[Tensor] = None, sorted: Optional[bool] = None) -> Tensor:
    r"""Gathers rows of ``x`` along the edges and reduces them per destination.

    .. math::
        \mathrm{out}_i = \bigoplus_{e \,:\, \mathrm{dst}_e = i} x_{\mathrm{src}_e}

    without materialising ``x[src_index]``. Destinations come from ``dst_index``
    (COO, ideally sorted; an unsorted one is sorted once and cached) or a CSR
    ``ptr`` over the edges. ``x`` is ``[N, *]``; the result is ``[dim_size, *]``.
    """
    return index_weight_segment_reduce(x, src_index, dst_index, None, dim_size, reduce, ptr=ptr,
                                       sorted=sorted)


def index_weight_segment_reduce(x: Tensor, src_index: Tensor, dst_index: Optional[Tensor] = None,
                                weight: Optional[Tensor] = None, dim_size: Optional[int] = None,
                                reduce: str = "sum", *, ptr: Optional[Tensor] = None,
                                sorted: Optional[bool] = None) -> Tensor:
    r"""Weighted gather-reduce; with ``reduce="sum"`` this is SpMM.

    .. math::
        \mathrm{out}_{i,h} = \bigoplus_{e \,:\, \mathrm{dst}_e = i} w_{e,h} \, x_{\mathrm{src}_e,h}

    ``weight`` is ``[E]`` (one scalar per edge) or ``[E, H]`` (one per edge and
    head, ``x`` being ``[N, H, D]`` or ``[N, H * D]``); None means 1. Gradients
    flow to ``x`` and ``weight`` (the weight gradient is an SDDMM).
    """
    segments = dst_index if ptr is None else ptr
    plans = None if tuning.overridden() else _layout.plans(segments, x)
    if plans is not None and isinstance(src_index, Tensor) and (weight is None or isinstance(weight, Tensor)):
        key = (x.shape, x.dtype, x.device, _layout.values_key(src_index),
               None if weight is None else (weight.shape, weight.dtype, weight.device), dst_index is None,
               dim_size, reduce, sorted)
        plan = plans.get(key)
        if plan is not None and plan[1]() is _layout.storage_owner(src_index):
            return plan[0](x, src_index, weight, segments)
    run, final = _plan(x, src_index, dst_index, weight, dim_size, reduce, ptr, sorted)
    if final and plans is not None:
        _layout.keep(plans, key, (run, weakref.ref(_layout.storage_owner(src_index))))
    return run(x, src_index, weight, segments)


GatherPlan = Callable[[Tensor, Tensor, Optional[Tensor], Tensor], Tensor]


def _plan(x: Tensor, src_index: Tensor, dst_index: Optional[Tensor], weight: Optional[Tensor],
          dim_size: Optional[int], reduce: str, ptr: Optional[Tensor], sorted: Optional[bool]
          ) -> Tuple[GatherPlan, bool]:
    """Checks a call of :func:`index_weight_segment_reduce` and resolves it: the function of (x,
    src_index, weight, the call's dst_index or ptr) that computes it, and whether that is final (see
    ``tuning.Launch``), so the next call with the same indices and the same kinds of x and weight
    may skip the checks and the selection."""
    check_float(x, "x")
    reduce = check_reduce(reduce)
    if x.dim() == 0:
        raise ValueError("pyg_fast: 'x' must have at least one dimension")
    num_edges = src_index.numel() if isinstance(src_index, Tensor) else None
    check_index_tensor(src_index, "src_index", None, x.device)
    src_long = _layout.as_long(src_index)
    _layout.check_index_range(src_long, x.size(0), "src_index")
    if (dst_index is None) == (ptr is None):
        raise ValueError("pyg_fast: pass exactly one of 'dst_index' and 'ptr'")
    layout, dim_size = _layout.segments(dst_index, ptr, num_edges, dim_size, x.device, index_name="dst_index",
                                        covers_all=True, is_sorted=sorted)
    flat = x.dim() == 2  # the usual case: no reshapes (about 1 us each)
    x_shape2 = (x.size(0), math.prod(x.shape[1:]))
    out_shape = (dim_size,) + tuple(x.shape[1:])
    heads = _check_edge_weight(weight, num_edges, x_shape2[1], x.device)
    perm = layout.perm
    if perm is not None:  # the sources in destination order, once per graph
        src_long = _layout.cached_with(src_long, perm, ("in_order",), lambda: src_long.index_select(0, perm))
    launch = segment_launch(x if flat else x.reshape(x_shape2), layout.ptr, num_edges, gather=True, heads=heads,
                            max_segment=layout.max_segment)
    # A plan is cached on dst_index or ptr and must not hold it, nor src_index (often a view of the
    # same edge_index): those come with each call.
    own_ptr = layout.ptr is (dst_index if ptr is None else ptr)
    held_ptr = None if own_ptr else layout.ptr
    own_src = src_long is src_index
    held_src = None if own_src else src_long
    narrow_src = _narrow_index(src_long, launch, x.size(0))

    def run(x: Tensor, src_index: Tensor, weight: Optional[Tensor], segments: Tensor) -> Tensor:
        w2 = None
        if weight is not None:
            w2 = _weight_as(weight, x.dtype)
            w2 = (w2 if perm is None else gather_rows(w2, perm)).contiguous()
        src = src_index if own_src else held_src
        if narrow_src is not None and not (torch.is_grad_enabled() and (
                x.requires_grad or (weight is not None and weight.requires_grad))):
            src = narrow_src  # the backward's kernels read int64
        out = index_segment_reduce_op((x if flat else x.reshape(x_shape2)).contiguous(), src,
                                      segments if own_ptr else held_ptr, w2, reduce, launch.config, launch.data)
        return out if flat else out.reshape(out_shape)
    return run, launch.final


# Largest source index an int32 copy can hold.
INT32_MAX = 2 ** 31 - 1
# The schedules whose kernels read int32 source indices.
_NARROW_SCHEDULES = (tuning.SCHEDULES["edges"], tuning.SCHEDULES["groups"])


def _narrow_index(src_index: Tensor, launch: tuning.Launch, num_src: int) -> Optional[Tensor]:
    """An int32 copy of the int64 ``src_index`` (kept with it) where the launch is the edges or
    groups schedule's, which read one: at small F the index is a large share of the bytes a
    weighted gather moves. None elsewhere."""
    if not launch.config or launch.config[0] not in _NARROW_SCHEDULES or num_src > INT32_MAX:
        return None
    return _layout.cached(src_index, ("as_int32",), lambda: src_index.int())


def gather_reduce_csr(x: Tensor, src_index: Tensor, ptr: Tensor, weight: Optional[Tensor], reduce: str,
                      max_segment: Optional[int]) -> Tensor:
    """:func:`index_weight_segment_reduce` over edges already in destination order with a CSR
    ``ptr`` over all of them, both built and validated by ``_layout`` (``src_index`` int64 and in
    range for ``x``), as the fused layers hold them: no index checks or cache lookups per call.
    ``reduce`` is a canonical name (see ``_checks.check_reduce``)."""
    if x.dim() == 2:  # the layers' usual case: no reshapes (about 1.5 us each)
        w2 = _edge_weight(weight, src_index.numel(), x)
        return _index_segment_reduce_csr(x, src_index, ptr, w2, reduce, max_segment)
    x2 = x.reshape(x.size(0), -1)
    w2 = _edge_weight(weight, src_index.numel(), x2)
    out = _index_segment_reduce_csr(x2, src_index, ptr, w2, reduce, max_segment)
    return out.reshape((ptr.numel() - 1,) + tuple(x.shape[1:]))


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values.index_select(0, index)`` for an int64 ``index`` in range (validated by the
    caller), differentiable. Floating ``values`` go through the gather kernel, each row a
    segment of one edge: torch's CUDA index_select (and gather with an expanded index)
    launches one block per index, so with millions of narrow rows it is bound by the block
    launch rate (23 M rows of 16 bytes: 14 ms against 0.34 ms here)."""
    if not values.is_floating_point() or values.dim() == 0:
        return values.index_select(0, index)
    unit_ptr = _layout.cached(index, ("unit_ptr",), lambda: torch.arange(index.numel() + 1, device=index.device))
    out = _index_segment_reduce_csr(values.reshape(values.size(0), -1), index, unit_ptr, None, "sum", 1)
    return out.view((index.numel(),) + tuple(values.shape[1:]))


def _edge_weight(weight: Optional[Tensor], num_edges: int, x2: Tensor) -> Optional[Tensor]:
    """The edge weight as [E, H] in the dtype of ``x2`` [N, F], checked."""
    if weight is None:
        return None
    _check_edge_weight(weight, num_edges, x2.size(1), x2.device)
    return _weight_as(weight, x2.dtype)


def _check_edge_weight(weight: Optional[Tensor], num_edges: int, num_features: int, device: torch.device) -> int:
    """Checks an edge weight ([E] or [E, H] with H dividing F) and returns H (1 without a weight)."""
    if weight is None:
        return 1
    check_float(weight, "weight")
    if weight.device != device:
        raise ValueError(f"pyg_fast: 'weight' is on {weight.device} but 'x' is on {device}")
    heads = weight.size(1) if weight.dim() == 2 else 1
    if weight.dim() not in (1, 2) or weight.size(0) != num_edges or num_features % heads != 0:
        raise ValueError(f"pyg_fast: 'weight' must be [E] or [E, H] with E={num_edges} edges and H "
                         f"dividing the feature size {num_features}, got {tuple(weight.shape)}")
    return heads


def _weight_as(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """A checked edge weight as [E, H] in ``dtype``."""
    w2 = weight.unsqueeze(1) if weight.dim() == 1 else weight
    return w2 if w2.dtype == dtype else w2.to(dtype)


def _index_segment_reduce_csr(x2: Tensor, src_index: Tensor, ptr: Tensor, weight: Optional[Tensor],
                              reduce: str, max_segment: Optional[int]) -> Tensor:
    launch = segment_launch(x2, ptr, src_index.numel(), gather=True,
                            heads=weight.size(1) if weight is not None else 1, max_segment=max_segment)
    return index_segment_reduce_op(
        x2.contiguous(), src_index, ptr, weight.contiguous() if weight is not None else None, reduce,
        launch.config, launch.data)


@torch.library.register_fake("pyg_fast::index_segment_reduce")
def _(x, src_index, ptr, weight, reduce, config=(), schedule_data=None):
    return x.new_empty(ptr.size(0) - 1, x.size(1))


@torch.library.register_fake("pyg_fast::index_segment_reduce_extremum_backward")
def _(grad_out, x, src_index, ptr, weight, out):
    return x.new_empty(src_index.size(0), x.size(1))


def _setup_context(ctx, inputs, output):
    x, src_index, ptr, weight, reduce = inputs[:5]
    extremum = reduce in ("max", "min", "amax", "amin")
    # x only where the backward reads it (fewer saved tensors to unpack, x freed sooner)
    ctx.save_for_backward(x if extremum or ctx.needs_input_grad[3] else None, src_index, ptr, weight,
                          output if extremum else None)
    ctx.reduce = reduce
    ctx.num_src = x.size(0)


def _heads(weight: Optional[Tensor]) -> int:
    return weight.size(1) if weight is not None else 1


def _backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
    x, src_index, ptr, weight, out = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[3]
    grad_out = grad_out.contiguous()
    N, F = ctx.num_src, grad_out.size(1)
    E, V, H = src_index.numel(), ptr.numel() - 1, _heads(weight)
    grad_x = grad_w = None
    if ctx.reduce in ("max", "min", "amax", "amin"):
        grad_msg = torch.ops.pyg_fast.index_segment_reduce_extremum_backward(
            grad_out, x, src_index, ptr, weight, out).view(E, H, F // H)
        if need_x:
            msg = grad_msg * weight.unsqueeze(-1) if weight is not None else grad_msg
            grad_x = x.new_zeros(N, F).index_add_(0, src_index, msg.view(E, F))
        if need_w:
            grad_w = (grad_msg * gather_rows(x, src_index).view(E, H, F // H)).sum(-1)
        return grad_x, None, None, grad_w, None, None, None
    if ctx.reduce == "mean":  # divided, as PyG's mean backward does: the same rounding
        grad_out = grad_out / _layout.segment_sizes(ptr, grad_out.dtype)
    if need_x:
        t = _layout.transposed_layout(src_index, ptr, N)
        w_t = gather_rows(weight, t.perm) if weight is not None else None
        grad_x = _index_segment_reduce_csr(grad_out, t.dst_index, t.ptr, w_t, "sum", t.max_segment)
    if need_w:
        dst_index = _layout.ptr_to_index(ptr, E)
        grad_w = sddmm_op(grad_out.view(V, H, F // H), x.view(N, H, F // H), dst_index,
                                          src_index, "dot")
    return grad_x, None, None, grad_w, None, None, None


index_segment_reduce_op = differentiable("index_segment_reduce", _backward, _setup_context)
