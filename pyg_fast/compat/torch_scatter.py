"""torch_scatter 2.1.2's public API on pyg_fast's kernels.

Every name of ``torch_scatter`` with its signature, defaults (``dim=-1`` for the scatter
family), return tuples and conventions: ``index``/``indptr`` broadcast against ``src``; empty
slots give 0 (1 for ``mul``) and, for min/max, the argument ``src.size(dim)``; ``out`` is
accumulated into by the scatter and COO families (sum, mul, min, max include its values; mean
divides ``out + sum`` by the count) and overwritten by the CSR family; the gradient of min/max
goes to the arg element alone.

Over an index that is one 1-D index along ``dim`` (the usual case, and how PyG calls it), or a 1-D
``indptr``, the reductions run pyg_fast's kernels: floating-point sum and mean, and min/max without
their argument, the segment kernels; min/max with their argument, integer min/max and ``mul`` (where
no gradient is needed) ``segment_arg_reduce``. ``out=`` (but for the CSR family, which only copies
into it), indices that differ along other dimensions, integer sums and the gradient of ``mul`` take
torch's ``scatter_reduce``/``scatter_add``; the composites (std, logsumexp, softmax, log_softmax)
are built from these functions.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import reduce_rows
from pyg_fast.ops.edge_softmax import edge_softmax
from pyg_fast.ops.segment_arg_reduce import segment_arg_reduce
from pyg_fast.ops.segment_reduce import segment_reduce

_TORCH_NAMES = {"max": "amax", "min": "amin"}


def broadcast(src: Tensor, other: Tensor, dim: int) -> Tensor:
    """``src`` (an index) expanded to ``other``'s shape: a 1-D index lies along ``dim``, a shorter
    one gains trailing dimensions."""
    if dim < 0:
        dim = other.dim() + dim
    if src.dim() == 1:
        for _ in range(dim):
            src = src.unsqueeze(0)
    for _ in range(src.dim(), other.dim()):
        src = src.unsqueeze(-1)
    return src.expand(other.size())


def _one_index(index: Tensor, src: Tensor, dim: int) -> Optional[Tensor]:
    """The 1-D index along ``dim`` that ``index`` broadcasts from (other dimensions of size 1, or
    expanded: stride 0, as ``broadcast`` makes them), or None when it differs along another
    dimension."""
    if index.dim() == 1:
        return index
    if index.dim() > dim and all(index.size(i) == 1 or index.stride(i) == 0
                                 for i in range(index.dim()) if i != dim):
        return index.as_strided((index.size(dim),), (index.stride(dim),))
    return None


def _size(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int]) -> list:
    if out is not None:
        return list(out.size())
    size = list(src.size())
    size[dim] = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() > 0 else 0)
    return size


def _positions(src: Tensor, dim: int) -> Tensor:
    """Each element's position along ``dim``, shaped like ``src``."""
    shape = [1] * src.dim()
    shape[dim] = src.size(dim)
    return torch.arange(src.size(dim), device=src.device).view(shape).expand_as(src)


class _ArgReduce(torch.autograd.Function):
    """min/max with their arguments; the gradient goes to the arg element alone, as torch_scatter's.
    ``segments`` (a 1-D index or indptr along ``dim``, and whether the index is known sorted) runs
    the kernel; without it (``out`` given, an index that differs along other dimensions) torch's
    scatter_reduce runs, then a second scatter for the argument."""

    @staticmethod
    def forward(ctx, src, index, dim, out, size, reduce, segments):
        E = src.size(dim)
        if out is None and segments is not None:
            values, arg = _arg_kernel(src, dim, size, reduce, segments)
        else:
            index_b = broadcast(index, src, dim)
            if out is None:
                values = src.new_zeros(size).scatter_reduce_(dim, index_b, src, _TORCH_NAMES[reduce],
                                                             include_self=False)
                hit = src == values.gather(dim, index_b)
            else:
                initial = out.gather(dim, index_b)
                values = out.scatter_reduce_(dim, index_b, src, _TORCH_NAMES[reduce], include_self=True)
                ctx.mark_dirty(out)
                hit = (src == values.gather(dim, index_b)) & (src > initial if reduce == "max" else src < initial)
            candidates = torch.where(hit, _positions(src, dim), E)
            arg = torch.full(size, E, dtype=torch.long, device=src.device).scatter_reduce_(
                dim, index_b, candidates, "amin", include_self=True)
        ctx.mark_non_differentiable(arg)
        ctx.save_for_backward(arg)
        ctx.dim, ctx.src_shape = dim, src.shape
        return values, arg

    @staticmethod
    def backward(ctx, grad_values, grad_arg):
        (arg,) = ctx.saved_tensors
        shape = list(ctx.src_shape)
        shape[ctx.dim] += 1  # a slot for the empty ones' argument src.size(dim)
        grad = grad_values.new_zeros(shape).scatter_(ctx.dim, arg, grad_values)
        return grad.narrow(ctx.dim, 0, ctx.src_shape[ctx.dim]), None, None, None, None, None, None


def _arg_kernel(src: Tensor, dim: int, size: list, reduce: str, segments: Tuple) -> Tuple[Tensor, Tensor]:
    """min/max and their argument on ``segment_arg_reduce`` over ``segments`` (a 1-D index or
    indptr along ``dim``, and whether the index is known sorted)."""
    one, indptr, is_sorted = segments
    return segment_arg_reduce(src, one, indptr, None if indptr is not None else size[dim], reduce, dim,
                              sorted=is_sorted)


def _extremum(src: Tensor, index: Optional[Tensor], dim: int, size: list, reduce: str,
              segments: Tuple) -> Tuple[Tensor, Tensor]:
    """``_arg_kernel``, through ``_ArgReduce`` only where a gradient is needed (the
    autograd.Function costs 10 us a call)."""
    if torch.is_grad_enabled() and src.requires_grad:
        return _ArgReduce.apply(src, index, dim, None, size, reduce, segments)
    return _arg_kernel(src, dim, size, reduce, segments)


def _scatter(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str, need_arg: bool = True, is_sorted: Optional[bool] = None
             ) -> Tuple[Tensor, Optional[Tensor]]:
    """(result, arg or None) of a scatter reduction along ``dim``, torch_scatter's semantics.
    Without ``need_arg`` (the value-only functions), min and max skip their argument where no
    gradient needs it. ``is_sorted``: the index is known sorted (the COO family's contract)."""
    if reduce not in ("sum", "add", "mul", "mean", "min", "max"):
        raise ValueError(f"pyg_fast.compat.torch_scatter: reduce must be sum, add, mul, mean, min or max, got "
                         f"{reduce!r}")
    dim = dim + src.dim() if dim < 0 else dim
    size = _size(src, index, dim, out, dim_size)
    one = _one_index(index, src, dim)
    needs_grad = torch.is_grad_enabled() and src.requires_grad
    if reduce in ("min", "max"):
        if out is not None or one is None:
            return _ArgReduce.apply(src, index, dim, out, size, reduce, None)
        if not need_arg and not needs_grad and src.is_floating_point():
            return segment_reduce(src, one, dim_size=size[dim], reduce=reduce, dim=dim, sorted=is_sorted), None
        values, arg = _extremum(src, index, dim, size, reduce, (one, None, is_sorted))
        return values, arg if need_arg else None
    if out is None and one is not None:
        if reduce in ("sum", "add", "mean") and src.is_floating_point():
            return segment_reduce(src, one, dim_size=size[dim], reduce="mean" if reduce == "mean" else "sum",
                                  dim=dim, sorted=is_sorted), None
        if reduce == "mul" and not needs_grad:
            return segment_arg_reduce(src, one, None, size[dim], "mul", dim, sorted=is_sorted)[0], None
    index_b = broadcast(index, src, dim)
    if reduce == "mul":
        base = out if out is not None else src.new_ones(size)
        return base.scatter_reduce_(dim, index_b, src, "prod", include_self=True), None
    base = out if out is not None else src.new_zeros(size)
    total = base.scatter_add_(dim, index_b, src)
    if reduce != "mean":
        return total, None
    index_dim = dim if index.dim() > dim else index.dim() - 1
    count = src.new_zeros(_counts_shape(index, index_dim, size[dim])).scatter_add_(
        index_dim, index, torch.ones_like(index, dtype=src.dtype)).clamp_(min=1)
    count = broadcast(count, total, dim)
    return (total.true_divide_(count) if total.is_floating_point() else total.div_(count, rounding_mode="floor")), None


def _counts_shape(index: Tensor, dim: int, size: int) -> list:
    shape = list(index.size())
    shape[dim] = size
    return shape


# TorchScript compiles the public functions below (torch_scatter's tests script each of them) and
# calls back into Python for their bodies: the kernels' wrappers are Python.
@torch.jit.ignore
def _reduced(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str) -> Tensor:
    return _scatter(src, index, dim, out, dim_size, reduce, need_arg=False)[0]


@torch.jit.ignore
def _with_arg(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
              reduce: str) -> Tuple[Tensor, Tensor]:
    values, arg = _scatter(src, index, dim, out, dim_size, reduce)
    return values, arg


@torch.jit.ignore
def _csr_reduced(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str) -> Tensor:
    return _segment_csr(src, indptr, out, reduce, need_arg=False)[0]


@torch.jit.ignore
def _csr_with_arg(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str) -> Tuple[Tensor, Tensor]:
    values, arg = _segment_csr(src, indptr, out, reduce)
    return values, arg


@torch.jit.ignore
def _coo_reduced(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int], reduce: str) -> Tensor:
    return _coo(src, index, out, dim_size, reduce, need_arg=False)[0]


@torch.jit.ignore
def _coo_with_arg(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                  reduce: str) -> Tuple[Tensor, Tensor]:
    values, arg = _coo(src, index, out, dim_size, reduce)
    return values, arg


# The scatter family ------------------------------------------------------------------------------
def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` along ``dim`` into the slots ``index`` names (sum, add, mul, mean, min, max)."""
    return _reduced(src, index, dim, out, dim_size, reduce)


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    return _reduced(src, index, dim, out, dim_size, "sum")


scatter_add = scatter_sum


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    return _reduced(src, index, dim, out, dim_size, "mul")


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None) -> Tensor:
    return _reduced(src, index, dim, out, dim_size, "mean")


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _with_arg(src, index, dim, out, dim_size, "min")


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _with_arg(src, index, dim, out, dim_size, "max")


# The CSR and COO families ------------------------------------------------------------------------
def _rows_of(indptr: Tensor, src: Tensor) -> Tuple[Tensor, int, int]:
    """(the segment of every row of ``src`` along ``indptr.dim() - 1``, as an index shaped like
    ``indptr`` with the rows along its last dimension; the dimension; the number of segments).
    Rows outside every segment get the spare segment number V, dropped afterwards."""
    dim = indptr.dim() - 1
    sizes = list(indptr.size())
    for i in range(dim):
        sizes[i] = src.size(i)
    indptr = indptr.expand(sizes)
    V, E = max(indptr.size(-1) - 1, 0), src.size(dim)  # an empty indptr has no segment
    positions = torch.arange(E, device=src.device).expand(sizes[:-1] + [E]).contiguous()
    rows = torch.searchsorted(indptr.contiguous(), positions, right=True) - 1
    rows = torch.where((rows < 0) | (rows >= V), V, rows)
    return rows, dim, V


def _covering(indptr: Tensor, num_rows: int) -> _layout.SegmentLayout:
    """The layout of ``indptr`` between 0 and ``num_rows``, checked once (cached): a pointer over
    every row, whose first and last segments hold the rows torch_scatter's ``indptr`` may leave out
    (before its first entry, from its last)."""
    def compute():
        covering = torch.cat([indptr.new_zeros(1), _layout.as_long(indptr), indptr.new_full((1,), num_rows)])
        return _layout.ptr_layout(covering, _layout.rows_of(num_rows, indptr.device), 0, "indptr")

    return _layout.cached(indptr, ("covering", num_rows), compute)


def _segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str, need_arg: bool = True):
    one = indptr.dim() == 1 and indptr.numel() > 0
    plain = reduce in ("sum", "add", "mean") or not (need_arg or (torch.is_grad_enabled() and src.requires_grad))
    if one and reduce in ("sum", "add", "mean", "min", "max") and plain and src.is_floating_point():
        # the segment kernels over one pointer, where the reduction over rows and segments would
        # build a row index every call (pubmed, F = 16, H200: 0.39 ms against torch_scatter's 0.017);
        # straight to them, the pointer checked once, not through segment_reduce's checks and
        # lookups (200 rows, CPU host: 38 -> 26 us a call; pubmed on an H100 host: 75 -> 28-40)
        V, shape = indptr.numel() - 1, list(src.shape)
        result = reduce_rows(src.reshape(1, shape[0], -1), _covering(indptr, shape[0]),
                             "sum" if reduce == "add" else reduce)
        result, arg, dim = result.view([V + 2] + shape[1:]).narrow(0, 1, V), None, 0
    elif one and reduce in ("min", "max"):  # the kernel reads the pointer as it is
        size = list(src.size())
        size[0] = indptr.numel() - 1
        dim = 0
        result, arg = _extremum(src, None, dim, size, reduce, (None, indptr, None))
    else:
        rows, dim, V = _rows_of(indptr, src)
        result, arg = _scatter(src, rows, dim, None, V + 1, reduce, need_arg)
        result = result.narrow(dim, 0, V)
        arg = arg.narrow(dim, 0, V) if arg is not None else None
    if out is not None:  # the CSR family writes its result into out
        result = out.copy_(result)
    return result, arg


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src[..., indptr[i]:indptr[i + 1], ...]`` along ``indptr.dim() - 1``."""
    return _csr_reduced(src, indptr, out, reduce)


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    return _csr_reduced(src, indptr, out, "sum")


def segment_add_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    return _csr_reduced(src, indptr, out, "sum")


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    return _csr_reduced(src, indptr, out, "mean")


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return _csr_with_arg(src, indptr, out, "min")


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return _csr_with_arg(src, indptr, out, "max")


@torch.jit.ignore
def _gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor]) -> Tensor:
    dim = indptr.dim() - 1
    E = int(indptr.select(-1, -1).max()) if indptr.numel() > 0 and out is None else None
    size = list(src.size())
    size[dim] = out.size(dim) if out is not None else (E if E is not None else 0)
    template = src.new_empty(size)
    rows, _, V = _rows_of(indptr, template)
    gathered = torch.cat([src, src.new_zeros(src.shape[:dim] + (1,) + src.shape[dim + 1:])], dim)
    result = gathered.gather(dim, broadcast(rows, template, dim))
    return out.copy_(result) if out is not None else result


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Row ``e`` of the result is ``src``'s row of the segment ``e`` lies in (the inverse of
    ``segment_csr``)."""
    return _gather_csr(src, indptr, out)


def _coo(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int], reduce: str,
         need_arg: bool = True):
    sizes = list(index.size())
    for i in range(index.dim()):
        sizes[i] = src.size(i)
    index = index.expand(sizes)
    dim = index.dim() - 1
    if out is None and dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    return _scatter(src, index, dim, out, dim_size, reduce, need_arg, is_sorted=True)


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    """Reduces ``src`` along ``index.dim() - 1`` into the slots of a sorted ``index``."""
    return _coo_reduced(src, index, out, dim_size, reduce)


def segment_sum_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    return _coo_reduced(src, index, out, dim_size, "sum")


def segment_add_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    return _coo_reduced(src, index, out, dim_size, "sum")


def segment_mean_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                     dim_size: Optional[int] = None) -> Tensor:
    return _coo_reduced(src, index, out, dim_size, "mean")


def segment_min_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _coo_with_arg(src, index, out, dim_size, "min")


def segment_max_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    return _coo_with_arg(src, index, out, dim_size, "max")


@torch.jit.ignore
def _gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor]) -> Tensor:
    dim = index.dim() - 1
    sizes = list(index.size())
    for i in range(dim):
        sizes[i] = src.size(i)
    index = index.expand(sizes)
    size = list(src.size())
    size[dim] = index.size(dim)
    result = src.gather(dim, broadcast(index, src.new_empty(size), dim))
    return out.copy_(result) if out is not None else result


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """``src``'s rows named by ``index`` along ``index.dim() - 1`` (the inverse of ``segment_coo``)."""
    return _gather_coo(src, index, out)


# Composites --------------------------------------------------------------------------------------
def _spread(per_segment: Tensor, index: Tensor, one: Optional[Tensor], src: Tensor, dim: int) -> Tensor:
    """``per_segment``'s value of every element of ``src`` (the inverse of a reduction along
    ``dim``): rows selected by the 1-D index ``one`` where there is one (no broadcast views, which
    cost the compositions more host time than their kernels on small graphs), else gathered."""
    if one is not None:
        return per_segment.index_select(dim, one)
    return per_segment.gather(dim, broadcast(index, src, dim))


def _floating(src: Tensor, name: str) -> None:
    if not torch.is_floating_point(src):
        raise ValueError(f"`{name}` can only be computed over tensors with floating point data types.")


@torch.jit.ignore
def _scatter_std(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
                dim_size: Optional[int], unbiased: bool) -> Tensor:
    if out is not None:
        dim_size = out.size(dim)
    dim = dim + src.dim() if dim < 0 else dim
    one = _one_index(index, src, dim) if src.is_floating_point() else None
    if out is None and one is not None:
        # Two segment reductions over one grouping, the counts read from its pointer, where
        # torch_scatter's composition scatters three times (the third for the counts).
        layout, dim_size = _layout.segments(one, None, src, dim, dim_size)
        shape = [1] * src.dim()
        shape[dim] = dim_size
        count = _layout.segment_sizes(layout.ptr, src.dtype).view(shape)
        deviation = src - _spread(segment_reduce(src, one, dim_size=dim_size, reduce="mean", dim=dim), one, one, src,
                                  dim)
        result = segment_reduce(deviation * deviation, one, dim_size=dim_size, dim=dim)
    else:
        count_dim = dim if index.dim() > dim else index.dim() - 1
        count = scatter_sum(torch.ones(index.size(), dtype=src.dtype, device=src.device), index, count_dim,
                            dim_size=dim_size)
        index_b = broadcast(index, src, dim)
        total = scatter_sum(src, index_b, dim, dim_size=dim_size)
        count = broadcast(count, total, dim).clamp(1)
        deviation = src - total.div(count).gather(dim, index_b)
        result = scatter_sum(deviation * deviation, index_b, dim, out, dim_size)
    if unbiased:
        count = count.sub(1).clamp_(1)
    return result.div(count + 1e-6).sqrt()


def scatter_std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    return _scatter_std(src, index, dim, out, dim_size, unbiased)


@torch.jit.ignore
def _scatter_logsumexp(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
                      dim_size: Optional[int], eps: float) -> Tensor:
    _floating(src, "scatter_logsumexp")
    dim = dim + src.dim() if dim < 0 else dim
    if out is not None:
        dim_size = out.size(dim)
    elif dim_size is None:
        dim_size = int(index.max()) + 1
    one = _one_index(index, src, dim)
    if out is None:
        # The maxima need no gradient (the result's derivative in them is 0) and no argument. An
        # empty segment's maximum comes as 0, not torch_scatter's -inf; its sum is 0, as is that
        # of a segment of -inf alone, where torch_scatter's result is 0 too: any other segment
        # holds its maximum's exp(0) = 1. A NaN shift (-inf - -inf) adds nothing, as in
        # torch_scatter; nan_to_num is one kernel where isnan and masked_fill were two (the
        # composition is launch-bound on small graphs), and a 1-D index selects the maxima's rows
        # without the broadcast views a gather needs.
        maxima = _reduced(src.detach(), index, dim, None, dim_size, "max")
        shifted = (src - _spread(maxima, index, one, src, dim)).nan_to_num(nan=float("-inf"))
        total = scatter_sum(shifted.exp(), index, dim, None, dim_size)
        empty = total == 0
        return total.add_(eps).log_().add_(maxima).masked_fill_(empty, 0.0).nan_to_num_(neginf=0.0)
    index_b = broadcast(index, src, dim)
    size = list(src.size())
    size[dim] = dim_size
    maxima = torch.full(size, float("-inf"), dtype=src.dtype, device=src.device)
    scatter_max(src, index_b, dim, maxima, dim_size=dim_size)
    shifted = (src - maxima.gather(dim, index_b)).nan_to_num(nan=float("-inf"))
    out = out.sub_(maxima).exp_()
    total = scatter_sum(shifted.exp(), index_b, dim, out, dim_size)
    return total.add_(eps).log_().add_(maxima).nan_to_num_(neginf=0.0)


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    return _scatter_logsumexp(src, index, dim, out, dim_size, eps)


@torch.jit.ignore
def _scatter_softmax(src: Tensor, index: Tensor, dim: int, dim_size: Optional[int]) -> Tensor:
    _floating(src, "scatter_softmax")
    dim = dim + src.dim() if dim < 0 else dim
    one = _one_index(index, src, dim)
    # On CUDA the fused kernel (its 1e-16 in the sum is below float64's resolution of 1): on
    # arxiv_like it ran 4.5x (a new index) to 12x (a reused one) PyG's composed softmax (H200). On
    # the CPU the composition below: 447 against 705 us (10 k edges x 16, one thread), where the
    # fused path gathers the rows into and out of destination order.
    if one is not None and src.is_cuda:
        return edge_softmax(src, one, num_nodes=dim_size, dim=dim)
    # The shift by the maxima changes nothing mathematically: they need no gradient and no argument.
    maxima = _reduced(src.detach(), index, dim, None, dim_size, "max")
    exp = (src - _spread(maxima, index, one, src, dim)).exp()
    return exp.div(_spread(scatter_sum(exp, index, dim, dim_size=dim_size), index, one, src, dim))


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    return _scatter_softmax(src, index, dim, dim_size)


@torch.jit.ignore
def _scatter_log_softmax(src: Tensor, index: Tensor, dim: int, eps: float,
                        dim_size: Optional[int]) -> Tensor:
    _floating(src, "scatter_log_softmax")
    dim = dim + src.dim() if dim < 0 else dim
    one = _one_index(index, src, dim)
    maxima = _reduced(src.detach(), index, dim, None, dim_size, "max")
    shifted = src - _spread(maxima, index, one, src, dim)
    total = scatter_sum(shifted.exp(), index, dim, dim_size=dim_size)
    return shifted - _spread(total.add_(eps).log_(), index, one, src, dim)


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    return _scatter_log_softmax(src, index, dim, eps, dim_size)


__all__ = ["scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max", "scatter",
           "segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr",
           "segment_csr", "gather_csr", "segment_sum_coo", "segment_add_coo", "segment_mean_coo", "segment_min_coo",
           "segment_max_coo", "segment_coo", "gather_coo", "scatter_std", "scatter_logsumexp", "scatter_softmax",
           "scatter_log_softmax"]
