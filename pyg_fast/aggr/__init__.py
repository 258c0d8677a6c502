"""Drop-in replacements for PyG's basic aggregations, running on pyg_fast's segment kernels,
and :func:`reduce`, the one reduction entry they and :func:`pyg_fast.patch` share.

Each class subclasses PyG's class of the same name (so ``isinstance``, ``repr``
and the ``Aggregation`` contract hold) and replaces only ``reduce``: indices in any
order and CSR pointers go to the kernels (an index is grouped on its device, once per
index tensor in eager mode). Use them as ``aggr=`` in any ``MessagePassing`` layer::

    conv = SAGEConv(16, 32, aggr=pyg_fast.aggr.MeanAggregation())

Under ``torch.jit.script`` they script as themselves with PyG's body of ``reduce`` (the
kernels are reached from Python), and under ``torch.jit.trace`` the reduction takes PyG's
path: both record PyG's operations, whose sizes follow the inputs.
"""
from typing import Optional

import torch
import torch_geometric.nn.aggr as pyg_aggr
from torch import Tensor
from torch_geometric.nn.aggr.base import expand_left
from torch_geometric.utils import scatter, segment

from pyg_fast import tuning
from pyg_fast._dropin import DropIn
from pyg_fast.ops import _layout
from pyg_fast.ops.segment_reduce import segment_reduce

_KERNEL_REDUCES = ("sum", "add", "mean", "max", "min")


def reduce(self, x: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
           dim_size: Optional[int] = None, dim: int = -2, reduce: str = "sum") -> Tensor:
    """PyG's ``Aggregation.reduce`` (same signature and results) on pyg_fast's segment kernels
    for sum, mean, max and min of floating-point values; PyG's own body otherwise, while
    scripting and while tracing."""
    if not torch.jit.is_scripting():  # TorchScript compiles only PyG's body below
        if _on_kernels(x, index, ptr, reduce, switched=not isinstance(self, _SegmentReduce)):
            return segment_reduce(x, index=index if ptr is None else None, ptr=ptr, dim_size=dim_size,
                                  reduce=reduce, dim=dim)
    if ptr is not None and (index is None or self._deterministic):
        ptr = expand_left(ptr, dim, dims=x.dim())
        return segment(x, ptr, reduce=reduce)
    if index is None:
        raise RuntimeError("Aggregation requires 'index' to be specified")
    return scatter(x, index, dim, dim_size, reduce)


def _on_kernels(x: Tensor, index: Optional[Tensor], ptr: Optional[Tensor], reduce: str, switched: bool) -> bool:
    """Whether :func:`reduce` runs pyg_fast's kernels: a basic reduction of floating-point values
    by a 1-D pointer or an index that needs no preparation of its own on this call, not traced (a
    trace would hold the example's sizes where they reach the kernels; PyG's path records them as
    they flow). Under the global switch (``switched``: a PyG class, not one of the classes below
    that a user chose) a reduction of fewer values than ``tuning.PATCH_MIN_ELEMENTS`` keeps PyG's
    path in eager mode: there the kernels' host time costs more than they save.

    An index in unknown order must be grouped before the kernels run; a scatter needs no such
    step, so on an index used a few times PyG's path is the faster one, and the kernels take over
    from an index's ``_layout.REUSED_FROM_USE``-th use, prepared once then. An index known sorted
    (``torch_geometric.Index``) and ``torch.compile`` go to the kernels at once."""
    # first the switch's size test on a plain eager tensor, the common case it answers: PyG's path,
    # at the least host time (the switch added 4-7 us to PyG's 13 us scatter of a small input, CPU host)
    if (switched and type(x) is Tensor and not torch.compiler.is_compiling()
            and x.numel() < tuning.PATCH_MIN_ELEMENTS.get(x.device.type, 0)):
        return False
    if (reduce not in _KERNEL_REDUCES or not x.is_floating_point() or (index is None and ptr is None)
            or (ptr is not None and ptr.dim() != 1) or torch.jit.is_tracing()):
        return False
    if not _layout.eager(x):
        return True
    if ptr is not None or getattr(index, "is_sorted", False):
        return True
    return _layout.use_count(index, ("aggregation",)) >= _layout.REUSED_FROM_USE


class _SegmentReduce(DropIn):
    """Mixin: ``reduce`` above. Scripts as itself (TorchScript compiles PyG's body of ``reduce``),
    so scripting a layer that holds one leaves the layer as it is."""
    reduce = reduce

    def __prepare_scriptable__(self):
        return self


class SumAggregation(_SegmentReduce, pyg_aggr.SumAggregation):
    r"""Sum of the features of each group: :math:`\sum_{i \in \mathcal{X}} \mathbf{x}_i`."""


class MeanAggregation(_SegmentReduce, pyg_aggr.MeanAggregation):
    r"""Mean of each group: :math:`\frac{1}{|\mathcal{X}|} \sum_{i \in \mathcal{X}} \mathbf{x}_i` (0 if empty)."""


class MaxAggregation(_SegmentReduce, pyg_aggr.MaxAggregation):
    r"""Feature-wise maximum of each group: :math:`\max_{i \in \mathcal{X}} \mathbf{x}_i` (0 if empty)."""


class MinAggregation(_SegmentReduce, pyg_aggr.MinAggregation):
    r"""Feature-wise minimum of each group: :math:`\min_{i \in \mathcal{X}} \mathbf{x}_i` (0 if empty)."""


_BY_NAME = {"sum": SumAggregation, "add": SumAggregation, "mean": MeanAggregation,
            "max": MaxAggregation, "min": MinAggregation}


def resolve(name: str) -> pyg_aggr.Aggregation:
    """``resolve("mean")`` returns a new ``MeanAggregation`` (also "sum"/"add", "max", "min")."""
    key = name.lower().replace("aggregation", "") if isinstance(name, str) else name
    if key not in _BY_NAME:
        raise ValueError(f"pyg_fast: no fast aggregation named {name!r}; choose from {sorted(_BY_NAME)}")
    return _BY_NAME[key]()


__all__ = ["SumAggregation", "MeanAggregation", "MaxAggregation", "MinAggregation", "reduce", "resolve"]
