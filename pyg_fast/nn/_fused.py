"""What the fused layers share: when to leave a call to PyG."""
import math
from typing import Optional, Tuple

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch.nn.modules import module as torch_module
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn.aggr import MaxAggregation, MeanAggregation, MinAggregation, SumAggregation

from pyg_fast import tuning
from pyg_fast._dropin import DropIn
from pyg_fast.nn import _graph
from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import COO_REDUCES, coo_route, gather_scatter, reduce_csr, weight_as

# MessagePassing's hook registries; a registered hook needs PyG's unfused path to see messages.
_HOOK_DICTS = (
    "_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
    "_message_forward_hooks", "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks",
    "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks",
)

_REDUCES = {SumAggregation: "sum", MeanAggregation: "mean", MaxAggregation: "max", MinAggregation: "min"}


def promoted(h: Tensor, dtype: torch.dtype) -> Tensor:
    """``h`` in its type promotion with ``dtype`` (itself where they agree, as outside autocast).
    Under autocast a layer's projection is half while its attention or edge weights are float, and
    PyG's messages (``x_j * alpha``, ``w * x_j``) promote; the aggregation kernels take one dtype."""
    return h if h.dtype == dtype else h.to(torch.promote_types(h.dtype, dtype))


def plain_linear(linear: torch.nn.Module) -> bool:
    """Whether ``linear`` is torch's or PyG's ``Linear`` whose call is the product with its weight
    (plus bias) and nothing else: initialised (not lazy), no forward hooks of its own or global
    ones, which a layer applying the weight itself would skip."""
    return (type(linear) in (torch.nn.Linear, pyg_nn.Linear) and not isinstance(linear.weight, UninitializedParameter)
            and not (linear._forward_hooks or linear._forward_pre_hooks or torch_module._global_forward_hooks
                     or torch_module._global_forward_pre_hooks))


def edge_values(weight: Tensor, x: Tensor) -> Tuple[int, int]:
    """(products, inputs): the values an edge moves, forward and backward, where a linear
    aggregation (sum, mean, a weighted sum) of ``x``'s rows meets the linear map ``weight``, as
    the aggregation of ``weight``'s products of the rows or as the aggregation of the rows before
    ``weight``. The products' aggregation is differentiated wherever ``weight`` or ``x`` needs a
    gradient, the inputs' only where ``x`` does (the weight's gradient reads the saved
    aggregate), so a first layer (``x`` without a gradient) gains by aggregating its inputs unless
    they are more than twice as wide: SAGE 128 -> 64 on arxiv_like mini-batches, CPU (2 threads),
    forward and backward 11.3 ms aggregating products, 10.1 ms aggregating inputs; GCN 64 -> 64,
    cora, training step 5.64 ms propagating products, 5.00 ms propagating inputs. Callers keep
    PyG's order on a tie (GCN 128 -> 64 on those mini-batches: 14.3 ms a step in PyG's order,
    15.1 ms the other way)."""
    out_channels, in_channels = weight.shape
    grad = torch.is_grad_enabled()
    products = out_channels * (2 if grad and (weight.requires_grad or x.requires_grad) else 1)
    inputs = in_channels * (2 if grad and x.requires_grad else 1)
    return products, inputs


def products_first(weight: Tensor, x: Tensor, num_src: int, num_dst: int, num_edges: int) -> bool:
    """Whether a linear aggregation of ``num_edges`` edges from ``num_src`` rows of ``x`` into
    ``num_dst`` targets costs less as the aggregation of ``weight``'s products of the rows than as
    ``weight``'s product of the aggregated rows: the products move fewer values over the edges
    (``edge_values``) and there are no more source rows to multiply than target rows, or, with
    more (eager: the sizes are read), the values saved on the edges outweigh the extra rows'
    products at ``tuning.GATHER_COST`` multiply-adds a gathered value, forward and backward: HGB
    DBLP's 14,328 papers' 4,231 features into 7,723 terms over 85,810 edges, into 64 outputs
    (the papers into 4,057 authors over 19,645 edges stay inputs first)."""
    products, inputs = edge_values(weight, x)
    if products >= inputs:
        return False
    if num_src <= num_dst:
        return True
    if not _layout.eager(x):
        return False
    grad = torch.is_grad_enabled()
    products_passes = 1 + (grad and weight.requires_grad) + (grad and x.requires_grad)
    extra = (num_src - num_dst) * weight.numel() * products_passes
    return tuning.GATHER_COST.get(x.device.type, math.inf) * num_edges * (inputs - products) > extra


class FusedLayer(DropIn):
    """Mixin for a pyg_fast layer ``Ours(PyGClass)`` that runs fused kernels and defers to
    ``PyGClass.forward`` whenever PyG's message-level machinery must run."""

    def _pyg_path_required(self) -> bool:
        """True under explain, decomposed_layers > 1, with any message passing hook, and under
        torch.jit.trace (whose graph would hold the example's sizes as constants where they reach
        the kernels; PyG's path traces them)."""
        if self.explain or self.decomposed_layers > 1 or torch.jit.is_tracing():
            return True
        for name in _HOOK_DICTS:  # a plain loop: half the time of any() over a generator
            if getattr(self, name):
                return True
        return False

    def _reduce(self):
        """The aggregation as a kernel reduce name, or None if it is not a basic one."""
        # _modules directly: Module.__getattr__ costs about 0.7 us per access
        return _REDUCES.get(type(self._modules.get("aggr_module")))

    def _fused_input(self, x, edge_index) -> Optional[Tuple[Tensor, Optional[Tensor], _graph.Edges]]:
        """``(x_src, x_dst, edges)`` for a tensor or pair ``x`` when the fused neighbour aggregation
        applies, else None (PyG's path)."""
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        if x_src.dim() != 2 or self._reduce() is None or self._pyg_path_required():
            return None
        edges = _graph.unpack(edge_index, self.flow)
        return None if edges is None else (x_src, x_dst, edges)

    def _aggregate_neighbours(self, x_src: Tensor, x_dst: Optional[Tensor], edges, size) -> Tensor:
        """reduce over j -> i of w_ji * x_j: on the by-destination layout cached with the edges, or
        for the first uses of a graph, with atomics (``coo_route``); where recorded, a sum or mean
        above the atomics' size takes the eager route inside one op (``_graph.kept_aggregate``)."""
        num_src, num_dst = _graph.num_nodes(x_src, x_dst, edges.sizes, size)
        reduce = self._reduce()
        edge_index = edges.edge_index
        if reduce in COO_REDUCES and coo_route(edge_index, ("aggregate", num_src, num_dst, self.flow),
                                               edge_index.size(1) * x_src.size(1)):
            src, dst, names = _graph.endpoints(edge_index, self.flow)
            weight = None if edges.value is None else weight_as(edges.value, x_src.dtype)
            return gather_scatter(x_src, src, dst, weight, num_dst, reduce, names)
        if reduce in COO_REDUCES and edges.value is None and not _layout.eager(x_src, edge_index):
            return _graph.kept_aggregate(x_src, edges, num_src, num_dst, self.flow, reduce)
        graph = _graph.by_destination(edges.edge_index, num_src, num_dst, self.flow, edges.sorted_by_destination,
                                      with_perm=edges.value is not None)
        weight = _graph.in_edge_order(edges.value, graph)
        return reduce_csr(x_src, graph.src, graph.ptr, None if weight is None else weight_as(weight, x_src.dtype),
                          reduce)
