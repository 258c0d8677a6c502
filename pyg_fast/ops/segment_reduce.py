"""Segment reduction over an index or CSR pointer (torch.ops.pyg_fast.segment_reduce)."""
import math
from typing import Optional

import torch
from torch import Tensor

from pyg_fast import tuning
from pyg_fast.ops import _layout
from pyg_fast.ops._checks import check_dim, check_float, check_index_tensor, check_reduce
from pyg_fast.ops._kernels import (COO_REDUCES, coo_reported, coo_route, gather_scatter, keep_rows, kept_key,
                                   reduce_rows, reduce_rows_2d)


def segment_reduce(src: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
                   dim_size: Optional[int] = None, reduce: str = "sum", dim: int = 0,
                   sorted: Optional[bool] = None) -> Tensor:
    r"""Reduces the slices of ``src`` along ``dim`` that share a segment.

    .. math::
        \mathrm{out}_{\ldots, i, \ldots} = \bigoplus_{j \,:\, \mathrm{index}_j = i}
        \mathrm{src}_{\ldots, j, \ldots}

    with :math:`\bigoplus` one of ``"sum"``, ``"mean"``, ``"max"``, ``"min"``.
    Segments are given by a COO ``index`` (one entry per slice, in any order) or by a
    CSR pointer ``ptr`` (segment ``i`` is ``ptr[i]:ptr[i+1]``, running from 0 to the
    number of slices). Empty segments give 0, as in PyG. Max and min split the gradient
    evenly among tied extrema, like :meth:`torch.Tensor.scatter_reduce`.

    An ``index`` is grouped by a stable sort on its device (skipped where ``sorted=True``
    promises order, or on the CPU where it is found sorted); in eager mode the grouping is
    cached with the index tensor, and the first reductions over an index (with
    ``dim_size`` given; the extrema in eager mode, over rows narrower or fewer than
    ``tuning.EXTREMUM_GROUPED_FROM``) use atomics instead, without a grouping. Index values are checked
    without a host synchronisation (see ``pyg_fast.config``); pass ``dim_size``, else it is read
    from the index (one).

    Args:
        src: values, any shape, floating point.
        index: segment of each slice along ``dim``, 1-D with ``src.size(dim)`` entries.
        ptr: CSR pointer, 1-D, used instead of ``index``.
        dim_size: number of segments; taken from ``ptr`` or ``index.max() + 1`` if missing.
        reduce: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        dim: the dimension to reduce.
        sorted: whether ``index`` is sorted, if known.
    """
    check_float(src, "src")
    reduce = check_reduce(reduce)
    dim = check_dim(src, dim, "src")
    if (index is None) == (ptr is None):
        raise ValueError("pyg_fast: pass exactly one of 'index' and 'ptr'")
    shape = list(src.shape)
    num_rows, batch, features = shape[dim], math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    # a [E, F] src reduced over its rows, PyG's case, takes no view in or out (each view costs
    # 2.6 us here, CPU host; four of them were a sixth of a reused index's call)
    whole = dim == 0 and src.dim() == 2
    # a reused index's kept call skips the COO route's use count too: once kept, it is grouped; a
    # pointer that disagrees with dim_size takes the checked path below, which says so
    key, kept_with = None, index if ptr is None else ptr
    if batch == 1:
        if ptr is None:
            key = kept_key(src, num_rows, features, index, dim_size, sorted)
        elif ptr.dim() == 1 and dim_size in (None, ptr.numel() - 1):
            key = kept_key(src, num_rows, features, ptr, ptr.numel() - 1, None, "ptr")
    kept = _layout.peek(kept_with, key) if key is not None else None
    if kept is not None:
        shape[dim] = key[2]
        layout = kept[0] if kept[0] is not None else _layout.SegmentLayout(ptr, None)
        out = reduce_rows_2d(src if whole else src.reshape(num_rows, features), layout, reduce, kept[1])
        return out if whole else out.view(shape)
    # An index declared sorted keeps the grouping: no sort to save, and the claim is checked there
    if (ptr is None and dim_size is not None and batch == 1 and reduce in COO_REDUCES + ("max", "min")
            and dim_size >= 0 and not sorted):
        check_index_tensor(index, "index", num_rows, src.device)
        index = _layout.as_long(index)
        # the extrema's COO route reports in eager mode only; recorded, they keep the grouping
        if (reduce in COO_REDUCES or (_layout.eager(index) and not tuning.extremum_grouped(
                index.device.type, num_rows, features))) and coo_route(index, ("segment_reduce", dim_size),
                                                                       num_rows * features):
            rows = src if whole else src.reshape(num_rows, features)
            if reduce in COO_REDUCES:
                out = gather_scatter(rows, None, index, None, dim_size, reduce,
                                     "src|src.size(dim)|index|dim_size")
            else:
                out = coo_reported(torch.ops.pyg_fast.scatter_extremum, rows, index, dim_size, "index", "dim_size",
                                   reduce == "max")
            if whole:
                return out
            shape[dim] = dim_size
            return out.view(shape)
    src3 = src.reshape(batch, num_rows, features)
    layout, dim_size = _layout.segments(index, ptr, src, dim, dim_size, is_sorted=sorted)
    shape[dim] = dim_size
    launch = keep_rows(key, kept_with, src3, layout, dim_size, sorted)
    return reduce_rows(src3, layout, reduce, launch).view(shape)
