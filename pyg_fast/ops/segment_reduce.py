"""Segment reduction over a sorted index or CSR pointer (torch.ops.pyg_fast.segment_reduce)."""
import math
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._autograd import differentiable
from pyg_fast.ops._checks import check_dim, check_float, check_reduce
from pyg_fast import tuning
from pyg_fast.tuning import segment_launch


def segment_reduce(src: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
                   dim_size: Optional[int] = None, reduce: str = "sum", dim: int = 0,
                   sorted: Optional[bool] = None) -> Tensor:
    r"""Reduces the slices of ``src`` along ``dim`` that share a segment.

    .. math::
        \mathrm{out}_{\ldots, i, \ldots} = \bigoplus_{j \,:\, \mathrm{index}_j = i}
        \mathrm{src}_{\ldots, j, \ldots}

    with :math:`\bigoplus` one of ``"sum"``, ``"mean"``, ``"max"``, ``"min"``.
    Segments are given by a COO ``index`` (one entry per slice, ideally sorted)
    or by a CSR pointer ``ptr`` (segment ``i`` is ``ptr[i]:ptr[i+1]``). Empty
    segments give 0, as in PyG. Max and min split the gradient evenly among
    tied extrema, like :meth:`torch.Tensor.scatter_reduce`.

    An unsorted ``index`` is sorted once (the permutation is cached with the
    index tensor) and the reduction then gathers through it, so the result is
    the same; pass ``sorted=True`` to promise sortedness. Index validation
    (range, sortedness) costs one host synchronisation per index tensor and is
    cached with it.

    Args:
        src: values, any shape, floating point.
        index: segment of each slice along ``dim``, 1-D with ``src.size(dim)`` entries.
        ptr: CSR pointer, 1-D, used instead of ``index``.
        dim_size: number of segments; taken from ``ptr`` or ``index.max() + 1`` if missing.
        reduce: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        dim: the dimension to reduce.
        sorted: whether ``index`` is sorted, if known.
    """
    segments = index if ptr is None else ptr
    plans = None if tuning.overridden() else _layout.plans(segments, src)
    if plans is not None:
        key = (src.shape, src.dtype, src.device, index is None, dim_size, reduce, dim, sorted)
        run = plans.get(key)
        if run is not None:
            return run(src, segments)
    run, final = _plan(src, index, ptr, dim_size, reduce, dim, sorted)
    if final and plans is not None:
        _layout.keep(plans, key, run)
    return run(src, segments)


Plan = Callable[[Tensor, Tensor], Tensor]


def _plan(src: Tensor, index: Optional[Tensor], ptr: Optional[Tensor], dim_size: Optional[int], reduce: str,
          dim: int, sorted: Optional[bool]) -> Tuple[Plan, bool]:
    """Checks a call of :func:`segment_reduce` and resolves it: the function of (src, the call's
    index or ptr) that computes it, and whether that is final (see ``tuning.Launch``), so the next
    call with the same index and the same kind of src may skip the checks and the selection."""
    check_float(src, "src")
    reduce = check_reduce(reduce)
    dim = check_dim(src, dim, "src")
    num_rows = src.size(dim)
    if (index is None) == (ptr is None):
        raise ValueError("pyg_fast: pass exactly one of 'index' and 'ptr'")
    layout, dim_size = _layout.segments(index, ptr, num_rows, dim_size, src.device, is_sorted=sorted)
    shape = list(src.shape)
    shape3 = (math.prod(shape[:dim]), num_rows, math.prod(shape[dim + 1:]))
    shape[dim] = dim_size
    reduce3, final = layout_reducer(src.reshape(shape3), layout, reduce)
    # A plan is cached on the index or ptr it was made for: it must not hold that tensor.
    own_ptr = layout.ptr is (index if ptr is None else ptr)
    held_ptr = None if own_ptr else layout.ptr

    def run(src: Tensor, segments: Tensor) -> Tensor:
        return reduce3(src.reshape(shape3), segments if own_ptr else held_ptr).view(shape)
    return run, final


def reduce_by_layout(src3: Tensor, layout: _layout.SegmentLayout, reduce: str) -> Tensor:
    """Reduces ``src3`` [pre, E, F] over dimension 1 into ``layout``'s segments (a layout of
    ``_layout``, validated for E rows); ``reduce`` is a canonical name."""
    return layout_reducer(src3, layout, reduce)[0](src3, layout.ptr)


def layout_reducer(src3: Tensor, layout: _layout.SegmentLayout, reduce: str) -> Tuple[Plan, bool]:
    """The function of (src3 [pre, E, F] like ``src3``, ``layout.ptr``) that reduces src3 into
    ``layout``'s segments, with its launch chosen, and whether that launch is final."""
    perm, covers_all, max_segment = layout.perm, layout.covers_all, layout.max_segment
    if perm is None:
        launch = segment_launch(src3, layout.ptr, src3.size(1), covers_all=covers_all, max_segment=max_segment)
        return (lambda src3, ptr: segment_reduce_op(src3.contiguous(), ptr, reduce, launch.config, launch.data),
                launch.final)
    if src3.size(0) == 1:  # gather the rows in sorted order inside the kernel
        from pyg_fast.ops.index_segment_reduce import index_segment_reduce_op
        launch = segment_launch(src3, layout.ptr, perm.numel(), gather=True, max_segment=max_segment)
        return (lambda src3, ptr: index_segment_reduce_op(src3[0].contiguous(), perm, ptr, None, reduce,
                                                          launch.config, launch.data).unsqueeze(0),
                launch.final)
    launch = segment_launch(src3, layout.ptr, src3.size(1), max_segment=max_segment)
    return (lambda src3, ptr: segment_reduce_op(src3.index_select(1, perm).contiguous(), ptr, reduce,
                                                launch.config, launch.data),
            launch.final)


EXTREMA = ("max", "min", "amax", "amin")


@torch.library.register_fake("pyg_fast::segment_reduce")
def _(src, ptr, reduce, config=(), schedule_data=None):
    return src.new_empty(src.size(0), ptr.size(0) - 1, src.size(2))


@torch.library.register_fake("pyg_fast::segment_reduce_backward")
def _(grad_out, src, out, ptr, reduce, num_rows):
    return grad_out.new_empty(grad_out.size(0), num_rows, grad_out.size(2))


def _setup_context(ctx, inputs, output):
    src, ptr, reduce = inputs[:3]
    extremum = reduce in EXTREMA
    ctx.save_for_backward(src if extremum else None, output if extremum else None, ptr)
    ctx.reduce = reduce
    ctx.num_rows = src.size(1)


def _backward(ctx, grad_out):
    src, out, ptr = ctx.saved_tensors
    grad = torch.ops.pyg_fast.segment_reduce_backward(grad_out.contiguous(), src, out, ptr, ctx.reduce,
                                                      ctx.num_rows)
    return grad, None, None, None, None


segment_reduce_op = differentiable("segment_reduce", _backward, _setup_context)
