import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj, Size

from pyg_fast.nn._fused import FusedLayer


class SAGEConv(FusedLayer, pyg_nn.SAGEConv):
    r"""PyG's :class:`torch_geometric.nn.SAGEConv` on pyg_fast kernels.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \mathbf{W}_2 \cdot
        \mathrm{aggr}_{j \in \mathcal{N}(i)} \mathbf{x}_j

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. For
    ``aggr`` in sum, mean, max and min the aggregation is one gather-fused segment
    reduction over edges grouped by target (cached per graph). Other aggregations
    (lists, LSTM, learnable ones) and the cases listed in
    :class:`pyg_fast.nn.GCNConv` run PyG's path.
    """
    propagate_type = {"x": "OptPairTensor"}

    def forward(self, x, edge_index: Adj, size: Size = None) -> Tensor:
        fused = self._fused_input(x, edge_index)
        if fused is None:
            return super().forward(x, edge_index, size)
        x_src, x_dst, edges = fused
        if self.project and hasattr(self, "lin"):
            x_src = self.lin(x_src).relu()
        out = self.lin_l(self._aggregate_neighbours(x_src, x_dst, edges, size))
        if self.root_weight and x_dst is not None:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out
