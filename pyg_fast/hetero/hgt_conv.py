"""Drop-in HGTConv: per-node-type projections through pyg_fast's HeteroDictLinear and the
per-(head, edge type) key/value transforms as one segmented matmul without sorting."""
from typing import Dict, List, Tuple

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj, EdgeType

from pyg_fast.hetero.linear import HeteroDictLinear, HeteroLinear, autocast_operands
from pyg_fast.ops.segment_matmul import segment_matmul


class HGTConv(pyg_nn.HGTConv):
    r"""PyG's :class:`~torch_geometric.nn.HGTConv` (same arguments, state and results).

    PyG flattens keys and values head-major into rows typed ``head * |edge types| + edge type``
    and sorts them for a HeteroLinear. Those rows already come in contiguous runs (one per head
    and edge type present), so here the runs' weights are gathered instead and keys and values
    go through one segmented matmul with a host-side pointer: no sort and no sync.
    """
    propagate_type = {"k": "Tensor", "q": "Tensor", "v": "Tensor", "edge_attr": "Tensor"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        convert_submodules(self)

    def _construct_src_node_feat(self, k_dict: Dict[str, Tensor], v_dict: Dict[str, Tensor],
                                 edge_index_dict: Dict[EdgeType, Adj]) -> Tuple[Tensor, Tensor, Dict[EdgeType, int]]:
        H, D = self.heads, self.out_channels // self.heads
        num_edge_types = len(self.edge_types)
        offset: Dict[EdgeType, int] = {}
        ks: List[Tensor] = []
        vs: List[Tensor] = []
        cumsum = 0
        for edge_type in edge_index_dict.keys():
            offset[edge_type] = cumsum
            cumsum += k_dict[edge_type[0]].size(0)
            ks.append(k_dict[edge_type[0]])
            vs.append(v_dict[edge_type[0]])
        sizes = [k.size(0) for k in ks] * H
        run_types = [h * num_edge_types + self.edge_types_map[et] for h in range(H) for et in edge_index_dict.keys()]
        ks_rows = torch.cat(ks, dim=0).transpose(0, 1).reshape(-1, D)  # head-major runs, as PyG
        vs_rows = torch.cat(vs, dim=0).transpose(0, 1).reshape(-1, D)
        index = torch.tensor(run_types, device=ks_rows.device)
        weight = torch.cat([self.k_rel.weight.index_select(0, index), self.v_rel.weight.index_select(0, index)])
        bias = None
        if self.k_rel.bias is not None:
            bias = torch.cat([self.k_rel.bias.index_select(0, index), self.v_rel.bias.index_select(0, index)])
        ptr = torch.tensor([0] + sizes * 2).cumsum(0)
        rows, weight, bias = autocast_operands(torch.cat([ks_rows, vs_rows]), weight, bias)
        k, v = segment_matmul(rows, ptr, weight, bias).chunk(2)
        return k.view(H, -1, D).transpose(0, 1), v.view(H, -1, D).transpose(0, 1), offset


def convert_submodules(conv: pyg_nn.HGTConv) -> None:
    """Swaps an HGTConv's linear submodules for pyg_fast's (same parameters and state keys)."""
    conv.kqv_lin.__class__ = HeteroDictLinear
    conv.out_lin.__class__ = HeteroDictLinear
    conv.k_rel.__class__ = HeteroLinear
    conv.v_rel.__class__ = HeteroLinear
