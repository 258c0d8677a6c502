"""Gather-fused segment reduction and weighted SpMM (torch.ops.pyg_fast.index_segment_reduce)."""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._checks import check_float, check_index_tensor, check_reduce
from pyg_fast.ops._kernels import (COO_REDUCES, coo_route, csr_launch, final_launch, gather_scatter, keeps,
                                   reduce_csr, weight_as, weight_in_order)


def index_segment_reduce(x: Tensor, src_index: Tensor, dst_index: Optional[Tensor] = None,
                         dim_size: Optional[int] = None, reduce: str = "sum", *,
                         ptr: Optional[Tensor] = None, sorted: Optional[bool] = None) -> Tensor:
    r"""Gathers rows of ``x`` along the edges and reduces them per destination.

    .. math::
        \mathrm{out}_i = \bigoplus_{e \,:\, \mathrm{dst}_e = i} x_{\mathrm{src}_e}

    without materialising ``x[src_index]``. Destinations come from ``dst_index``
    (COO, in any order; grouped by a stable sort, cached with the tensor in eager mode, or
    for the first sums and means over it, reduced with atomics without a grouping) or a CSR
    ``ptr`` over the edges. ``x`` is ``[N, *]``; the result is ``[dim_size, *]``.
    """
    return index_weight_segment_reduce(x, src_index, dst_index, None, dim_size, reduce, ptr=ptr, sorted=sorted)


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
    check_float(x, "x")
    reduce = check_reduce(reduce)
    if x.dim() == 0:
        raise ValueError("pyg_fast: 'x' must have at least one dimension")
    x2 = x if x.dim() == 2 else x.reshape(x.size(0), math.prod(x.shape[1:]))  # a view costs 2.6 us (CPU host)
    heads = 1 if weight is None or weight.dim() != 2 else weight.size(1)
    # a reused pair of indices' kept call: no checks of the indices (the kept ones were checked) and
    # no COO route, layout or launch lookups (see _kept_key)
    key = _kept_key(x2, src_index, dst_index, dim_size, sorted, heads) if ptr is None else None
    kept = _layout.peek_with(dst_index, src_index, key) if key is not None else None
    if kept is not None:
        _check_edge_weight(weight, src_index.numel(), x2.size(1), x.device)
        layout, src, launch = kept
        w2 = None if weight is None else weight_in_order(weight, x.dtype, layout.perm)
        out = reduce_csr(x2, src, layout.ptr, w2, reduce, launch)
        return out if x.dim() == 2 else out.view((dim_size,) + tuple(x.shape[1:]))
    check_index_tensor(src_index, "src_index", None, x.device)
    num_edges = src_index.numel()
    if (dst_index is None) == (ptr is None):
        raise ValueError("pyg_fast: pass exactly one of 'dst_index' and 'ptr'")
    if dst_index is not None:
        check_index_tensor(dst_index, "dst_index", num_edges, x.device,
                           mismatch="'dst_index' has {got} entries but 'src_index' has {expected}")
    _check_edge_weight(weight, num_edges, x2.size(1), x.device)
    if ptr is not None:
        layout, dim_size = _layout.segments(None, ptr, src_index, 0, dim_size)
        src = _layout.checked_index(src_index, x, 0, "src_index", "x.size(0)")
        perm = None
    else:
        if dim_size is None:
            dim_size = int(dst_index.max()) + 1 if num_edges > 0 else 0
        if dim_size < 0:
            raise ValueError(f"pyg_fast: dim_size must be non-negative, got {dim_size}")
        if reduce in COO_REDUCES and not sorted and coo_route(dst_index, ("gathered", dim_size),
                                                              num_edges * x2.size(1)):
            out = gather_scatter(x2, _layout.as_long(src_index), _layout.as_long(dst_index),
                                 None if weight is None else weight_as(weight, x.dtype), dim_size, reduce,
                                 "src_index|x.size(0)|dst_index|dim_size")
            return out if x.dim() == 2 else out.view((dim_size,) + tuple(x.shape[1:]))
        is_sorted = sorted if sorted is not None else (getattr(dst_index, "is_sorted", None) or None)
        layout, src = _gathered(dst_index, dim_size, src_index, x, is_sorted)
        perm = layout.perm
    w2 = None
    if weight is not None:
        w2 = weight_in_order(weight, x.dtype, perm)
    launch = None
    if key is not None:  # kept once the launch is final: chosen from the graph's statistics (CUDA)
        launch = csr_launch(x2, layout.ptr, num_edges, heads)
        if final_launch(launch, x2):
            _layout.cached_with(dst_index, src_index, key, lambda: (layout, src, launch))
    out = reduce_csr(x2, src, layout.ptr, w2, reduce, launch)
    return out if x.dim() == 2 else out.view((dim_size,) + tuple(x.shape[1:]))


def _kept_key(x2: Tensor, src_index: Tensor, dst_index: Optional[Tensor], dim_size: Optional[int],
              is_sorted: Optional[bool], heads: int) -> Optional[Tuple]:
    """The key under which ``dst_index`` keeps, for ``src_index`` (``_layout.cached_with``: a
    kept call reads the sources that were checked), the layout, the sources in order and the
    launch of a call over ``x2`` [N, F] with ``heads`` weight heads; None where nothing is kept
    (``keeps``). One lookup a call where the layout's, the COO route's and the launch's took one
    each with the indices' checks (SpMM on Cora, H200 host: 42-48 us a call against 14-16 for
    torch's index_add_)."""
    if dst_index is None or type(src_index) is not Tensor or not keeps(dst_index, x2, dim_size):
        return None
    return "kept_gathered", dim_size, is_sorted, x2.size(0), x2.size(1), heads, x2.dtype, x2.device


def _gathered(dst_index: Tensor, dim_size: int, src_index: Tensor, x: Tensor, is_sorted: Optional[bool]):
    """(layout of dst_index, the sources in destination order), prepared once per pair of index
    tensors in eager mode."""
    def compute():
        ptr, perm, src = _layout.grouped_edges(dst_index, dim_size, src_index, x,
                                               "dst_index|dim_size|src_index|x.size(0)", is_sorted)
        return _layout.SegmentLayout(ptr, perm), src
    return _layout.cached_with(dst_index, src_index, ("gathered", dim_size, x.size(0), is_sorted), compute)


def _check_edge_weight(weight: Optional[Tensor], num_edges: int, num_features: int, device: torch.device) -> None:
    """Checks an edge weight: [E] or [E, H] with H dividing F."""
    if weight is None:
        return
    check_float(weight, "weight")
    if weight.device != device:
        raise ValueError(f"pyg_fast: 'weight' is on {weight.device} but 'x' is on {device}")
    heads = weight.size(1) if weight.dim() == 2 else 1
    if weight.dim() not in (1, 2) or weight.size(0) != num_edges or num_features % heads != 0:
        raise ValueError(f"pyg_fast: 'weight' must be [E] or [E, H] with E={num_edges} edges and H "
                         f"dividing the feature size {num_features}, got {tuple(weight.shape)}")
