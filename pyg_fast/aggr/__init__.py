"""Drop-in replacements for PyG's basic aggregations, running on pyg_fast's segment kernels.

Each class subclasses PyG's class of the same name (so ``isinstance``, ``repr``
and the ``Aggregation`` contract hold) and replaces only ``reduce``: sorted
indices and CSR pointers go straight to the kernels, unsorted ones are sorted
once per index tensor. Use them as ``aggr=`` in any ``MessagePassing`` layer::

    conv = SAGEConv(16, 32, aggr=pyg_fast.aggr.MeanAggregation())
"""
from typing import Optional

import torch_geometric.nn.aggr as pyg_aggr
from torch import Tensor

from pyg_fast.ops.segment_reduce import segment_reduce


class _SegmentReduce:
    """Mixin: PyG's ``Aggregation.reduce`` through ``pyg_fast.segment_reduce``."""

    def reduce(self, x: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
               dim_size: Optional[int] = None, dim: int = -2, reduce: str = "sum") -> Tensor:
        if ptr is not None:
            if ptr.dim() != 1:
                raise ValueError(f"pyg_fast: aggregation takes a 1-D 'ptr', got shape {tuple(ptr.shape)}")
            return segment_reduce(x, ptr=ptr, dim_size=dim_size, reduce=reduce, dim=dim)
        if index is None:
            raise ValueError("pyg_fast: aggregation needs 'index' or 'ptr'")
        return segment_reduce(x, index=index, dim_size=dim_size, reduce=reduce, dim=dim)


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


__all__ = ["SumAggregation", "MeanAggregation", "MaxAggregation", "MinAggregation", "resolve"]
