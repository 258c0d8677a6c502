"""Segment max/min with the row of the extremum, and segment products: torch_scatter's semantics,
which the stand-in (``pyg_fast.compat.torch_scatter``) needs and ``segment_reduce`` does not have.
Floating max/min over an index take the extremum from ``segment_reduce``'s kernels and its row
from ``torch.ops.pyg_fast.scatter_arg`` on CUDA; the rest, and every call on the CPU, run
``torch.ops.pyg_fast.segment_arg_reduce`` (on CUDA max/min split the rows across threads, ``mul``
and the CPU walk each segment)."""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._checks import check_dim
from pyg_fast.ops._kernels import keep_rows, kept_key, reduce_rows, run

ARG_REDUCES = ("max", "min", "mul")


@torch.library.register_fake("pyg_fast::segment_arg_reduce")
def _(src, ptr, perm, reduce):
    B, F = src.size(0), src.size(2)
    V = ptr.size(0) - 1
    arg_shape = (0,) if reduce == "mul" else (B, V, F)
    return src.new_empty(B, V, F), ptr.new_empty(arg_shape)


@torch.library.register_fake("pyg_fast::scatter_arg")
def _(src, index, out):
    return index.new_empty(out.shape)


def segment_arg_reduce(src: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
                       dim_size: Optional[int] = None, reduce: str = "max", dim: int = 0,
                       sorted: Optional[bool] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """(out, arg) of the slices of ``src`` along ``dim`` grouped by a COO ``index`` or a CSR
    ``ptr``, any real dtype, no gradient (an input that requires one raises). ``reduce="max"``/``"min"``: the extremum of every segment
    (0 where empty) and ``arg``, the position along ``dim`` of its first occurrence
    (``src.size(dim)`` where empty); ``"mul"``: the product (1 where empty) and ``arg`` None. A
    ``ptr`` may cover part of the slices (it must be non-decreasing within [0, src.size(dim)]):
    slices outside every segment are skipped. ``sorted``: whether ``index`` is sorted, if known
    (as for ``segment_reduce``)."""
    if reduce not in ARG_REDUCES:
        raise ValueError(f"pyg_fast: segment_arg_reduce's reduce must be one of {ARG_REDUCES}, got {reduce!r}")
    if (index is None) == (ptr is None):
        raise ValueError("pyg_fast: pass exactly one of 'index' and 'ptr'")
    if src.is_complex() or src.dtype == torch.bool:
        raise TypeError(f"pyg_fast: segment_arg_reduce takes real values, got {src.dtype}")
    if torch.is_grad_enabled() and src.requires_grad:
        raise RuntimeError("pyg_fast: segment_arg_reduce has no gradient; segment_reduce's max/min split it among "
                           "tied extrema, pyg_fast.compat.torch_scatter's scatter_max/min send it to the argument")
    dim = check_dim(src, dim, "src")
    shape = list(src.shape)
    src3 = src.reshape(math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:]))
    # The CPU walks each segment once for the value and its row: through segment_reduce then
    # scatter_arg, the max of 1.17 M rows into 169 k segments took 326 ms at F = 16 against 56
    # walked (torch_scatter 406; 2 cores)
    two_pass = index is not None and reduce != "mul" and src.is_floating_point() and src.is_cuda
    key = None
    if two_pass and src3.size(0) == 1:
        key = kept_key(src3, src3.size(1), src3.size(2), index, dim_size, sorted)
    kept = _layout.peek(index, key) if key is not None else None
    if kept is not None:
        layout, launch = kept
    else:
        layout, dim_size = _layout.segments(index, ptr, src, dim, dim_size, is_sorted=sorted, ptr_covers_all=False)
        launch = keep_rows(key, index, src3, layout, dim_size, sorted)
    if two_pass:
        # The extremum by segment_reduce's schedules, then the first row holding it in one pass
        # over the rows (arxiv_like, F = 16, H100: 0.19 ms; a walk per segment took 0.80, torch_scatter
        # 0.28)
        src3 = src3.contiguous()
        out = reduce_rows(src3, layout, reduce, launch)
        arg = run(torch.ops.pyg_fast.scatter_arg, src3, _layout.as_long(index), out)
    else:
        out, arg = run(torch.ops.pyg_fast.segment_arg_reduce, src3.contiguous(), layout.ptr, layout.perm, reduce)
    shape[dim] = dim_size
    return out.view(shape), None if reduce == "mul" else arg.view(shape)
