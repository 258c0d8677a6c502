import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj, OptPairTensor, Size

from pyg_fast.nn import _graph
from pyg_fast.nn._fused import FusedLayer
from pyg_fast.ops.index_segment_reduce import index_weight_segment_reduce


class GINConv(FusedLayer, pyg_nn.GINConv):
    r"""PyG's :class:`torch_geometric.nn.GINConv` on pyg_fast kernels.

    .. math::
        \mathbf{x}^{\prime}_i = h_{\mathbf{\Theta}} \left( (1 + \epsilon) \cdot
        \mathbf{x}_i + \sum_{j \in \mathcal{N}(i)} \mathbf{x}_j \right)

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. The
    neighbour sum is one gather-fused segment reduction over edges grouped by target
    (cached per graph), without materialising the messages. Falls back to PyG's path
    where :class:`pyg_fast.nn.GCNConv` does.
    """
    propagate_type = {"x": "OptPairTensor"}

    def forward(self, x, edge_index: Adj, size: Size = None) -> Tensor:
        pair: OptPairTensor = (x, x) if isinstance(x, Tensor) else x
        reduce, edges = self._reduce(), None
        if reduce is not None and pair[0].dim() == 2 and not self._pyg_path_required():
            edges = _graph.unpack(edge_index, self.flow)
        if edges is None:
            return super().forward(x, edge_index, size)
        num_src, num_dst = _graph.num_nodes(pair[0], pair[1], edges.sizes, size)
        graph = _graph.by_destination(edges.edge_index, num_src, num_dst, self.flow)
        out = index_weight_segment_reduce(pair[0], graph.src, None, _graph.in_edge_order(edges.value, graph),
                                          reduce=reduce, ptr=graph.ptr)
        if pair[1] is not None:
            out = out + (1 + self.eps) * pair[1]
        return self.nn(out)
