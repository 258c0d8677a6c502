import functools
import operator
from typing import List, Optional, Sequence, Union

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj, Size

from pyg_fast.nn import _graph
from pyg_fast.nn._fused import FusedLayer, plain_linear, products_first


class SAGEConv(FusedLayer, pyg_nn.SAGEConv):
    r"""PyG's :class:`torch_geometric.nn.SAGEConv` on pyg_fast kernels.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \mathbf{W}_2 \cdot
        \mathrm{aggr}_{j \in \mathcal{N}(i)} \mathbf{x}_j

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. For
    ``aggr`` in sum, mean, max and min the aggregation is one gather-fused segment
    reduction over edges grouped by target (cached per graph). Other aggregations
    (lists, LSTM, learnable ones) and the cases listed in
    :class:`pyg_fast.nn.GCNConv` run PyG's path. A sum or mean into fewer channels
    than it reads aggregates :math:`\mathbf{W}_2 \mathbf{x}_j` rather than
    :math:`\mathbf{x}_j` where that costs less, the edges' values against the
    products of the rows (``pyg_fast.nn._fused.products_first``): the same
    linear map, each edge moving ``out_channels`` values instead of ``in_channels``.
    """
    propagate_type = {"x": "OptPairTensor"}

    def forward(self, x, edge_index: Adj, size: Size = None) -> Tensor:
        fused = self._fused_input(x, edge_index)
        if fused is None:
            return super().forward(x, edge_index, size)
        x_src, x_dst, edges = fused
        return self.fused_forward(x_src, x_dst, edges, size, self.lin_r if self.root_weight and x_dst is not None
                                  else None)

    def fused_forward(self, x_src: Tensor, x_dst: Optional[Tensor], edges: _graph.Edges, size: Size,
                      root: Union[torch.nn.Module, Tensor, None]) -> Tensor:
        """The layer on ``_fused_input``'s parts, with ``root`` the map of the targets' own
        features: ``lin_r``, a weight standing for it (:func:`summed_roots`) or None (no root
        term)."""
        if self.project and hasattr(self, "lin"):
            x_src = self.lin(x_src).relu()
        lin_l = self.lin_l
        if self._transform_first(x_src, x_dst, edges, size, root):
            # W (sum_j x_j) = sum_j W x_j, also for the mean (an empty mean is 0 either way); lin_l's
            # bias joins the root's product (lin_r has none)
            out = self._aggregate_neighbours(F.linear(x_src, lin_l.weight), x_dst, edges, size)
            if root is not None:
                out = out + F.linear(x_dst, root if isinstance(root, Tensor) else root.weight, lin_l.bias)
            elif lin_l.bias is not None:
                out = out + lin_l.bias
        else:
            out = lin_l(self._aggregate_neighbours(x_src, x_dst, edges, size))
            if root is not None:
                out = out + (F.linear(x_dst, root) if isinstance(root, Tensor) else root(x_dst))
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out

    def _transform_first(self, x_src: Tensor, x_dst, edges, size: Size, root) -> bool:
        """Whether to aggregate ``lin_l``'s products rather than its inputs: a linear aggregation
        (sum, mean) that costs less so (``products_first``), and linear layers whose forward is
        their weight alone (initialised, no hooks)."""
        lin_l = self.lin_l
        if self._reduce() not in ("sum", "mean") or not plain_linear(lin_l) or (
                isinstance(root, torch.nn.Module) and not plain_linear(root)):
            return False
        return products_first(lin_l.weight, x_src, x_src.size(0),
                              _graph.num_nodes(x_src, x_dst, edges.sizes, size)[1], edges.edge_index.size(1))


def root_sum(convs: Sequence[SAGEConv]) -> Optional[Tensor]:
    """``W_1 + ... + W_R``, the root weights of ``convs`` summed, where one product of the targets'
    features with it may stand for their root terms: each layer with a root weight, a root layer
    that is its weight alone (``plain_linear``, no bias) and an output it does not normalise; else
    None."""
    if any(not conv.root_weight or conv.normalize or not plain_linear(conv.lin_r) or conv.lin_r.bias is not None
           for conv in convs):
        return None
    return functools.reduce(operator.add, [conv.lin_r.weight for conv in convs])


def summed_roots(convs: Sequence[SAGEConv], x_dst: Tensor, parts: Sequence) -> Optional[List[Tensor]]:
    """The outputs of ``convs``, relations into one target type whose own features ``x_dst`` they
    share, for a sum over the relations (what ``to_hetero`` and ``HeteroConv`` do with them): the
    first relation's with the root term of every relation, one product with their summed root
    weights (:func:`root_sum`: ``x W_1 + ... + x W_R = x (W_1 + ... + W_R)``, and each ``W_r``'s
    gradient is the sum's), the others' without theirs; their sum is the relations' sum. HGB
    DBLP's to_hetero SAGE projects its 14,328 papers' 4,231 features for 3 relations: 79% of the
    first layer's multiplications. ``parts``: each relation's ``_fused_input``. None for fewer
    than two relations, another target, or where :func:`root_sum` says no."""
    if len(convs) < 2 or any(part[1] is not x_dst for part in parts):
        return None
    weight = root_sum(convs)
    if weight is None:
        return None
    return [conv.fused_forward(x_src, x_dst, edges, None, weight if i == 0 else None)
            for i, (conv, (x_src, _, edges)) in enumerate(zip(convs, parts))]
