from typing import NamedTuple

import torch

import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import Adj, OptTensor

from pyg_fast.nn import _graph
from pyg_fast.nn._fused import FusedLayer
from pyg_fast.ops import _layout
from pyg_fast.ops.index_segment_reduce import gather_reduce_csr


class GCNConv(FusedLayer, pyg_nn.GCNConv):
    r"""PyG's :class:`torch_geometric.nn.GCNConv` on pyg_fast kernels.

    .. math::
        \mathbf{X}' = \hat{\mathbf{D}}^{-1/2} \hat{\mathbf{A}} \hat{\mathbf{D}}^{-1/2}
        \mathbf{X} \mathbf{\Theta} + \mathbf{b}

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. The
    normalised graph (self loops, :math:`\hat{d}^{-1/2}` weights, edges grouped by
    target) is computed once per ``edge_index`` tensor and reused while that tensor is
    unchanged; propagation is one weighted SpMM (forward and backward on pyg_fast
    kernels). Explain mode, ``decomposed_layers > 1``, message passing hooks,
    ``SparseTensor``, static (3-D) node features and sparse values that require a
    gradient run PyG's own path.
    """
    propagate_type = {"x": "Tensor", "edge_weight": "OptTensor"}

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        fused = (isinstance(x, Tensor) and x.dim() == 2 and not x.is_sparse and not self._pyg_path_required()
                 and _graph.unpack(edge_index, self.flow) is not None)
        if not fused:
            return super().forward(x, edge_index, edge_weight)
        num_nodes = x.size(0)
        if self.normalize:
            if self._cached_edge_index is not None:
                edge_index, edge_weight = self._cached_edge_index
            elif edge_weight is None and edge_index.layout == torch.strided:
                # The usual call: one cache lookup gives the normalised graph grouped by target.
                norm = self._normalized_graph(edge_index, num_nodes, x.dtype)
                if self.cached:
                    self._cached_edge_index = (norm.edge_index, norm.edge_weight)
                return self._propagate(x, norm.graph, norm.weight)
            else:
                edge_index, edge_weight = gcn_norm(edge_index, edge_weight, num_nodes, self.improved,
                                                   self.add_self_loops, self.flow, x.dtype)
                if self.cached:
                    self._cached_edge_index = (edge_index, edge_weight)
        graph, weight = self._by_destination(edge_index, edge_weight, num_nodes)
        return self._propagate(x, graph, weight)

    def _by_destination(self, edge_index: Adj, edge_weight: OptTensor, num_nodes: int):
        """The graph grouped by target and the edge weights in that order (a torch.sparse input
        carries its weights)."""
        edges = _graph.unpack(edge_index, self.flow)
        if edges.value is not None:
            edge_weight = edges.value
        graph = _graph.by_destination(edges.edge_index, num_nodes, num_nodes, self.flow)
        return graph, _graph.in_edge_order(edge_weight, graph)

    def _propagate(self, x: Tensor, graph: _graph.Graph, weight: OptTensor) -> Tensor:
        out = gather_reduce_csr(self.lin(x), graph.src, graph.ptr, weight, "sum", graph.max_segment)
        return out if self.bias is None else out + self.bias

    def _normalized_graph(self, edge_index: Tensor, num_nodes: int, dtype: torch.dtype) -> "_NormalizedGraph":
        """PyG's ``gcn_norm`` of an unweighted ``edge_index`` and its grouping by target, memoised
        on ``edge_index``."""
        def compute():
            # detach(): an alias without a reference to edge_index, which the cache must not keep alive
            # (gcn_norm returns edge_index itself when it adds no self loops)
            norm_index, norm_weight = gcn_norm(edge_index.detach(), None, num_nodes, self.improved,
                                               self.add_self_loops, self.flow, dtype)
            graph, weight = self._by_destination(norm_index, norm_weight, num_nodes)
            return _NormalizedGraph(norm_index, norm_weight, graph, weight.unsqueeze(1))
        return _layout.cached(edge_index, ("gcn_norm", num_nodes, self.improved, self.add_self_loops, self.flow,
                                           dtype), compute)


class _NormalizedGraph(NamedTuple):
    """``gcn_norm``'s output (``edge_index``, ``edge_weight``, input order) and the same graph
    grouped by target with the weights in that order as [E, 1], the kernel's layout."""
    edge_index: Tensor
    edge_weight: Tensor
    graph: _graph.Graph
    weight: Tensor
