import itertools

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj, Size

from pyg_fast.nn import _graph
from pyg_fast.nn._fused import FusedLayer, plain_linear, products_first
from pyg_fast.ops import _layout


class GINConv(FusedLayer, pyg_nn.GINConv):
    r"""PyG's :class:`torch_geometric.nn.GINConv` on pyg_fast kernels.

    .. math::
        \mathbf{x}^{\prime}_i = h_{\mathbf{\Theta}} \left( (1 + \epsilon) \cdot
        \mathbf{x}_i + \sum_{j \in \mathcal{N}(i)} \mathbf{x}_j \right)

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. The
    neighbour sum is one gather-fused segment reduction over edges grouped by target
    (cached per graph), without materialising the messages. Where
    :math:`h_{\mathbf{\Theta}}` is a ``torch.nn.Sequential`` that starts with a linear
    layer into fewer channels than it reads, and the sources are the targets' own
    features (or there is no target term), the layer sums that linear layer's products
    :math:`\mathbf{W} \mathbf{x}_j` instead (the same linear map; each edge moves its
    output width) where that costs less, the edges' values against the products of the
    rows (``pyg_fast.nn._fused.products_first``). Falls back
    to PyG's path where :class:`pyg_fast.nn.GCNConv` does.
    """
    propagate_type = {"x": "OptPairTensor"}

    def forward(self, x, edge_index: Adj, size: Size = None) -> Tensor:
        fused = self._fused_input(x, edge_index)
        if fused is None:
            return super().forward(x, edge_index, size)
        x_src, x_dst, edges = fused
        first = self._narrowing_first(x_src, x_dst, edges, size)
        if first is not None:
            # W (sum_j x_j + (1 + eps) x_i) + b = sum_j W x_j + (1 + eps) W x_i + b: one product,
            # aggregated at its width
            h = F.linear(x_src, first.weight)
            out = self._aggregate_neighbours(h, None if x_dst is None else h, edges, size)
            if x_dst is not None:
                out = out + self._self_term(h)
            if first.bias is not None:
                out = out + first.bias
            for module in itertools.islice(self.nn, 1, None):  # the rest of the Sequential
                out = module(out)
            return out
        out = self._aggregate_neighbours(x_src, x_dst, edges, size)
        if x_dst is not None:
            out = out + self._self_term(x_dst)
        return self.nn(out)

    def _narrowing_first(self, x_src: Tensor, x_dst, edges, size: Size):
        """``nn``'s first layer where the neighbour sum may move its products (see the class),
        else None: ``nn`` a Sequential without hooks of its own, starting with a plain linear
        layer (``plain_linear``), one product serving sources and targets (``x_dst`` is ``x_src``,
        or no target term) and products that cost less to aggregate (``products_first``)."""
        mlp = self.nn
        if type(mlp) is not torch.nn.Sequential or len(mlp) == 0 or mlp._forward_hooks or mlp._forward_pre_hooks:
            return None
        first = mlp[0]
        if not plain_linear(first):
            return None
        if (x_dst is x_src or x_dst is None) and products_first(
                first.weight, x_src, x_src.size(0), _graph.num_nodes(x_src, x_dst, edges.sizes, size)[1],
                edges.edge_index.size(1)):
            return first
        return None

    def _self_term(self, x: Tensor) -> Tensor:
        """PyG's ``(1 + eps) * x`` (the same rounding); ``x`` itself where ``eps`` can be read on the
        host and is 0, the default (bitwise the same), which saves a pass over ``x``. A fixed ``eps``
        on CUDA keeps ``1 + eps`` while unchanged: one launch a layer less."""
        eps = self.eps
        if eps.requires_grad:
            return (1 + eps) * x
        # item(), not eps == 0: no comparison tensor to build and read (4.4 -> 1.3 us a call)
        if _layout.readable(eps) and eps.item() == 0:
            return x
        return _layout.cached(eps, ("one_plus",), lambda: 1 + eps) * x
