"""``pyg_fast.patch()``: a reversible, global switch that routes PyG's own aggregation
(``torch_geometric.nn.aggr.Aggregation.reduce``, reached by every MessagePassing layer with
a basic aggregation) through pyg_fast's segment kernels."""
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.nn.aggr import Aggregation
from torch_geometric.nn.aggr.base import expand_left
from torch_geometric.utils import scatter, segment

from pyg_fast.ops.segment_reduce import segment_reduce

_ORIGINAL_REDUCE = Aggregation.reduce
_KERNEL_REDUCES = ("sum", "add", "mean", "max", "min")


def reduce(self, x: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
           dim_size: Optional[int] = None, dim: int = -2, reduce: str = 'sum') -> Tensor:
    if torch.jit.is_scripting():  # PyG's own body: scripted modules cannot call Python kernels
        if ptr is not None and (index is None or self._deterministic):
            ptr = expand_left(ptr, dim, dims=x.dim())
            return segment(x, ptr, reduce=reduce)
        if index is None:
            raise RuntimeError("Aggregation requires 'index' to be specified")
        return scatter(x, index, dim, dim_size, reduce)
    if reduce not in _KERNEL_REDUCES or not x.is_floating_point() or (index is None and ptr is None):
        return _ORIGINAL_REDUCE(self, x, index, ptr, dim_size, dim, reduce)
    if ptr is not None and ptr.dim() == 1:
        return segment_reduce(x, ptr=ptr, dim_size=dim_size, reduce=reduce, dim=dim)
    return segment_reduce(x, index=index, dim_size=dim_size, reduce=reduce, dim=dim)


class PatchHandle:
    """Undoes :func:`patch`; also a context manager (``with pyg_fast.patch(): ...``)."""

    def __init__(self):
        self.active = True

    def undo(self) -> None:
        if self.active:
            Aggregation.reduce = _ORIGINAL_REDUCE
            self.active = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def patch() -> PatchHandle:
    """Routes ``Aggregation.reduce`` (sum, mean, max, min) through pyg_fast kernels until the
    returned handle's ``undo()``; other reductions and non-float inputs keep PyG's path.
    Raises if already patched, so two handles never fight over the original."""
    if Aggregation.reduce is not _ORIGINAL_REDUCE:
        raise RuntimeError("pyg_fast.patch() is already active; undo() the existing handle first")
    Aggregation.reduce = reduce
    return PatchHandle()
