"""Drop-in HGTConv: per-node-type projections through pyg_fast's HeteroDictLinear, the
per-(head, edge type) key/value transforms as one segmented matmul without sorting, and the
attention as SDDMM + edge softmax + weighted gather-reduce (no per-edge copies of q, k, v)."""
import math
import weakref
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.typing import Adj, EdgeType, NodeType

from pyg_fast._dropin import DropIn
from pyg_fast.ops import _layout
from pyg_fast.hetero.linear import HeteroDictLinear, HeteroLinear, autocast_operands
from pyg_fast.hetero.rgcn_conv import needs_message_passing
from pyg_fast.hetero.tensor_slice import host_ptr, index_on
from pyg_fast.ops.edge_softmax import edge_softmax
from pyg_fast.ops.index_segment_reduce import index_weight_segment_reduce
from pyg_fast.ops.sddmm import sddmm
from pyg_fast.ops.segment_matmul import segment_matmul

# conv -> (key, weak references to the edge tensors, src, dst); outside the module so that it
# stays out of pickles and state dicts
_BIPARTITE_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class HGTConv(DropIn, pyg_nn.HGTConv):
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

    def forward(self, x_dict: Dict[NodeType, Tensor],
                edge_index_dict: Dict[EdgeType, Adj]) -> Dict[NodeType, Optional[Tensor]]:
        if (torch.jit.is_scripting() or needs_message_passing(self)
                or not all(isinstance(e, Tensor) and e.layout == torch.strided for e in edge_index_dict.values())):
            return super().forward(x_dict, edge_index_dict)
        H, D = self.heads, self.out_channels // self.heads
        k_dict, q_dict, v_dict = {}, {}, {}
        for key, val in self.kqv_lin(x_dict).items():
            k, q, v = torch.tensor_split(val, 3, dim=1)
            k_dict[key], q_dict[key], v_dict[key] = k.view(-1, H, D), q.view(-1, H, D), v.view(-1, H, D)
        q, dst_offset = self._cat(q_dict)
        k, v, src_offset = self._construct_src_node_feat(k_dict, v_dict, edge_index_dict)
        src, dst = self._bipartite_edges(edge_index_dict, src_offset, dst_offset)
        p_rel = torch.cat([self.p_rel["__".join(et)].expand(edge_index_dict[et].size(1), -1) for et in src_offset])
        # alpha_e = softmax_dst((q_dst . k_src) * p_rel / sqrt(D)); out_i = sum_e alpha_e v_src
        alpha = sddmm(q, k, dst, src, "dot") * p_rel / math.sqrt(D)
        alpha = edge_softmax(alpha, dst, num_nodes=q.size(0))
        out = index_weight_segment_reduce(v, src, dst, alpha, q.size(0), "sum").view(-1, self.out_channels)

        out_dict: Dict[NodeType, Tensor] = {}
        for node_type, start in dst_offset.items():
            if node_type in self.dst_node_types:
                out_dict[node_type] = out[start:start + q_dict[node_type].size(0)]
        a_dict = self.out_lin({key: F.gelu(val) for key, val in out_dict.items()})
        for node_type in out_dict:
            out = a_dict[node_type]
            if out.size(-1) == x_dict[node_type].size(-1):
                alpha = self.skip[node_type].sigmoid()
                out = alpha * out + (1 - alpha) * x_dict[node_type]
            out_dict[node_type] = out
        return out_dict

    def _bipartite_edges(self, edge_index_dict: Dict[EdgeType, Tensor], src_offset: Dict[EdgeType, int],
                         dst_offset: Dict[NodeType, int]) -> Tuple[Tensor, Tensor]:
        """Sources and destinations of all edge types in the concatenated node numbering (PyG's
        construct_bipartite_edge_index). Reused while the same, unmodified edge tensors come in,
        so that the kernels' per-index caches (sorting, validation) hit."""
        tensors = [edge_index_dict[et] for et in src_offset]
        if not _layout.eager(*tensors):  # traced: no identity of a tensor may enter the graph
            return self._concatenated(edge_index_dict, src_offset, dst_offset)
        key = tuple((et, src_offset[et], dst_offset[et[-1]], id(edge_index_dict[et]), edge_index_dict[et]._version)
                    for et in src_offset)
        cached = _BIPARTITE_CACHE.get(self)
        if cached is not None and cached[0] == key and all(ref() is edge_index_dict[et]
                                                           for ref, et in zip(cached[1], src_offset)):
            return cached[2], cached[3]
        src, dst = self._concatenated(edge_index_dict, src_offset, dst_offset)
        _BIPARTITE_CACHE[self] = (key, [weakref.ref(t) for t in tensors], src, dst)
        return src, dst

    @staticmethod
    def _concatenated(edge_index_dict: Dict[EdgeType, Tensor], src_offset: Dict[EdgeType, int],
                      dst_offset: Dict[NodeType, int]) -> Tuple[Tensor, Tensor]:
        edge_index = torch.cat([torch.stack([edge_index_dict[et][0] + src_offset[et],
                                             edge_index_dict[et][1] + dst_offset[et[-1]]])
                                for et in src_offset], dim=1)
        return edge_index[0].contiguous(), edge_index[1].contiguous()

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
        index = index_on(tuple(run_types), ks_rows.device)
        weight = torch.cat([self.k_rel.weight.index_select(0, index), self.v_rel.weight.index_select(0, index)])
        bias = None
        if self.k_rel.bias is not None:
            bias = torch.cat([self.k_rel.bias.index_select(0, index), self.v_rel.bias.index_select(0, index)])
        ptr = host_ptr(tuple(sizes * 2))
        rows, weight, bias = autocast_operands(torch.cat([ks_rows, vs_rows]), weight, bias)
        k, v = segment_matmul(rows, ptr, weight, bias).chunk(2)
        return k.view(H, -1, D).transpose(0, 1), v.view(H, -1, D).transpose(0, 1), offset


def convert_submodules(conv: pyg_nn.HGTConv) -> None:
    """Swaps an HGTConv's linear submodules for pyg_fast's (same parameters and state keys)."""
    conv.kqv_lin.__class__ = HeteroDictLinear
    conv.out_lin.__class__ = HeteroDictLinear
    conv.k_rel.__class__ = HeteroLinear
    conv.v_rel.__class__ = HeteroLinear
