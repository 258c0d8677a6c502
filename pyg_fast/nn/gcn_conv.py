from typing import Optional

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
            else:
                edge_index, edge_weight = self._normalized(edge_index, edge_weight, num_nodes, x.dtype)
                if self.cached:
                    self._cached_edge_index = (edge_index, edge_weight)
        edges = _graph.unpack(edge_index, self.flow)  # a normalised torch.sparse input carries its weights
        if edges.value is not None:
            edge_weight = edges.value
        graph = _graph.by_destination(edges.edge_index, num_nodes, num_nodes, self.flow)
        out = gather_reduce_csr(self.lin(x), graph.src, graph.ptr, _graph.in_edge_order(edge_weight, graph), "sum",
                                graph.max_segment)
        if self.bias is not None:
            out = out + self.bias
        return out

    def _normalized(self, edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int, dtype):
        """PyG's ``gcn_norm``, memoised on ``edge_index`` when there are no edge weights."""
        def compute():
            return gcn_norm(edge_index, edge_weight, num_nodes, self.improved, self.add_self_loops,
                            self.flow, dtype)
        if edge_weight is not None or edge_index.layout != torch.strided:
            return compute()
        return _layout.cached(edge_index, ("gcn_norm", num_nodes, self.improved, self.add_self_loops,
                                           self.flow, dtype), compute)
