"""``pyg_fast.patch()``: a reversible, global switch that routes PyG's own aggregation through
pyg_fast's kernels: ``torch_geometric.nn.aggr.Aggregation.reduce`` (every MessagePassing layer
with a basic aggregation) becomes :func:`pyg_fast.aggr.reduce`, and the names ``scatter`` and
``segment`` that PyG's modules imported from ``torch_geometric.utils`` are rebound to
:func:`scatter` and :func:`segment` below, in every loaded ``torch_geometric`` module."""
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch_geometric.utils as pyg_utils
from torch import Tensor
from torch_geometric.nn.aggr import Aggregation

from pyg_fast.aggr import _on_kernels, reduce
from pyg_fast.ops.segment_reduce import segment_reduce

_ORIGINAL_REDUCE = Aggregation.reduce
_PYG_SCATTER = pyg_utils.scatter
_PYG_SEGMENT = pyg_utils.segment


def scatter(src: Tensor, index: Tensor, dim: int = 0, dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.scatter`` (same signature and results) on the segment kernels where
    :func:`pyg_fast.aggr.reduce` would use them, PyG's own otherwise."""
    if not torch.jit.is_scripting():  # TorchScript compiles only PyG's call below
        if index.dim() == 1 and _on_kernels(src, index, None, reduce, switched=True):
            return segment_reduce(src, index, dim_size=dim_size, reduce=reduce, dim=dim)
    return _PYG_SCATTER(src, index, dim, dim_size, reduce)


def segment(src: Tensor, ptr: Tensor, reduce: str = "sum") -> Tensor:
    """``torch_geometric.utils.segment`` (same signature and results: empty segments give 0) on the
    segment kernels for a 1-D pointer over floating-point rows, PyG's own otherwise."""
    if not torch.jit.is_scripting():
        if _on_kernels(src, None, ptr, reduce, switched=True):
            return segment_reduce(src, ptr=ptr, reduce=reduce)
    return _PYG_SEGMENT(src, ptr, reduce)


# PyG's softmax stays its own: its tests compare paths (dense and sparse inputs) that one and the
# same call of the edge softmax kernel would not reproduce bitwise, and it raises where PyG does.
_REPLACEMENTS = {"scatter": (_PYG_SCATTER, scatter), "segment": (_PYG_SEGMENT, segment)}


def _call_sites() -> List[Tuple[object, str]]:
    """(module, name) of every loaded torch_geometric module that holds PyG's scatter or segment."""
    return [(module, name) for module in list(sys.modules.values())
            if getattr(module, "__name__", "").startswith("torch_geometric")
            for name, (original, _) in _REPLACEMENTS.items() if getattr(module, name, None) is original]


class PatchHandle:
    """Undoes :func:`patch`; also a context manager (``with pyg_fast.patch(): ...``) that, entered
    again after ``undo()``, switches the same call sites back on until it exits (a cheap toggle:
    no search of the loaded modules). ``sites`` counts the rebound names per function."""

    def __init__(self, rebound: List[Tuple[object, str]]):
        self.active = True
        self.rebound = rebound
        self.sites: Dict[str, int] = {name: sum(n == name for _, n in rebound) for name in _REPLACEMENTS}

    def undo(self) -> None:
        if self.active:
            Aggregation.reduce = _ORIGINAL_REDUCE
            for module, name in self.rebound:
                setattr(module, name, _REPLACEMENTS[name][0])
            self.active = False

    def __enter__(self):
        if not self.active:
            _apply(self.rebound)
            self.active = True
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def _apply(rebound: List[Tuple[object, str]]) -> None:
    if Aggregation.reduce is not _ORIGINAL_REDUCE:
        raise RuntimeError("pyg_fast.patch() is already active; undo() the existing handle first")
    Aggregation.reduce = reduce
    for module, name in rebound:
        setattr(module, name, _REPLACEMENTS[name][1])


def patch() -> PatchHandle:
    """Routes PyG's aggregation (``Aggregation.reduce``: sum, mean, max, min), its ``scatter`` and
    ``segment`` through pyg_fast's kernels until the returned handle's ``undo()``; other
    reductions, non-float inputs and traced calls keep PyG's path. Raises if already patched,
    so two handles never fight over the originals."""
    rebound = _call_sites()
    _apply(rebound)
    return PatchHandle(rebound)
