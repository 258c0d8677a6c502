"""Drop-in HeteroConv: the linear layers of its SAGE convolutions as segmented matmuls."""
from typing import Dict, List, Optional

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn.conv.hetero_conv import group

from pyg_fast._dropin import DropIn
from pyg_fast.hetero.linear import HeteroDictLinear, grouped_linear


class HeteroConv(DropIn, pyg_nn.HeteroConv):
    r"""PyG's :class:`~torch_geometric.nn.HeteroConv` (same arguments, state and results). Where
    its convolutions are pyg_fast :class:`~pyg_fast.nn.SAGEConv` layers of one shape (at least
    four edge types, a root weight, no projection or normalisation) and it is called with node
    features and edges alone, each edge type's neighbours are aggregated by the kernels and the
    edge types' linear layers run through ``grouped_linear`` (two segmented matmuls, neighbours
    and roots, on a device of ``HeteroDictLinear.grouped_devices``); otherwise PyG's forward
    calls each convolution.
    """

    def forward(self, *args_dict, **kwargs_dict) -> Dict[str, Tensor]:
        parts = None if kwargs_dict or len(args_dict) != 2 or torch.jit.is_scripting() else self._sage_parts(
            *args_dict)
        if parts is None:
            return super().forward(*args_dict, **kwargs_dict)
        convs = [conv for _, conv, _, _ in parts]
        neighbours = grouped_linear([conv.lin_l for conv in convs], [aggregated for _, _, aggregated, _ in parts])
        roots = grouped_linear([conv.lin_r for conv in convs], [x_dst for _, _, _, x_dst in parts])
        out_dict: Dict[str, List[Tensor]] = {}
        for (dst, _, _, _), left, right in zip(parts, neighbours, roots):
            out_dict.setdefault(dst, []).append(left + right)  # SAGEConv's own order of the sum
        return {dst: group(outs, self.aggr) for dst, outs in out_dict.items()}

    def _sage_parts(self, x_dict, edge_index_dict) -> Optional[List]:
        """(destination type, conv, aggregated neighbours, destination features) per edge type
        present, in PyG's order, or None where the grouped path does not apply."""
        from pyg_fast.nn import SAGEConv
        convs = list(self.convs.items())
        if len(convs) < HeteroDictLinear.min_types or not all(
                type(conv) is SAGEConv and conv.root_weight and not conv.project and not conv.normalize
                for _, conv in convs):
            return None
        lins = [lin for _, conv in convs for lin in (conv.lin_l, conv.lin_r)]
        if any(isinstance(lin.weight, UninitializedParameter) for lin in lins) or len(
                {(conv.lin_l.weight.shape, conv.lin_r.weight.shape) for _, conv in convs}) != 1:
            return None
        parts = []
        for (src, rel, dst), conv in convs:
            if (src, rel, dst) not in edge_index_dict:
                continue
            x = x_dict[src] if src == dst and src in x_dict else (x_dict.get(src), x_dict.get(dst))
            if not isinstance(x, Tensor) and (x[0] is None or x[1] is None):
                return None
            fused = conv._fused_input(x, edge_index_dict[(src, rel, dst)])
            if fused is None or fused[1] is None:
                return None
            x_src, x_dst, edges = fused
            parts.append((dst, conv, conv._aggregate_neighbours(x_src, x_dst, edges, None), x_dst))
        return parts or None
