"""Drop-in HeteroConv: the root terms of its SAGE convolutions summed per node type, their
linear layers as segmented matmuls."""
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn.conv.hetero_conv import group

from pyg_fast._dropin import DropIn
from pyg_fast.hetero.linear import HeteroDictLinear, grouped_linear
from pyg_fast.nn.sage_conv import root_sum, summed_roots


class HeteroConv(DropIn, pyg_nn.HeteroConv):
    r"""PyG's :class:`~torch_geometric.nn.HeteroConv` (same arguments, state and results). Where
    its convolutions are pyg_fast :class:`~pyg_fast.nn.SAGEConv` layers and it is called with node
    features and edges alone, each edge type's neighbours are aggregated by the kernels, and:

    - under a sum or mean over edge types, the relations into one node type share one product of
      its features with their summed root weights (``pyg_fast.nn.sage_conv.summed_roots``);
    - where the layers share one shape (at least four edge types, a root weight, no projection or
      normalisation), the edge types' neighbour layers run through ``grouped_linear`` (a segmented
      matmul on a device of ``HeteroDictLinear.grouped_devices``), and so do their root layers
      under the other aggregations.

    Otherwise PyG's forward calls each convolution.
    """

    def forward(self, *args_dict, **kwargs_dict) -> Dict[str, Tensor]:
        summed = self.aggr in ("sum", "mean")
        # the edge types' inputs, prepared only where one of the paths below may take them
        parts = None if kwargs_dict or len(args_dict) != 2 or torch.jit.is_scripting() or not (
            summed or len(self.convs) >= HeteroDictLinear.min_types) else self._sage_parts(*args_dict)
        grouped = parts is not None and self._grouped([conv for _, conv, _ in parts])
        if parts is None or not (summed or grouped):
            return super().forward(*args_dict, **kwargs_dict)
        if grouped:  # the neighbours' aggregates, each through its edge type's lin_l
            convs = [conv for _, conv, _ in parts]
            aggregated = [conv._aggregate_neighbours(x_src, x_dst, edges, None) for _, conv, (x_src, x_dst, edges)
                          in parts]
            neighbours = grouped_linear([conv.lin_l for conv in convs], aggregated)
        out_dict: Dict[str, List[Tensor]] = {}
        if summed:
            by_dst: Dict[str, List[int]] = {}
            for i, (dst, _, _) in enumerate(parts):
                by_dst.setdefault(dst, []).append(i)
            for dst, members in by_dst.items():
                convs_in, parts_in = [parts[i][1] for i in members], [parts[i][2] for i in members]
                x_dst = parts_in[0][1]
                if grouped:
                    outs = [neighbours[i] for i in members]
                    weight = root_sum(convs_in)
                    if weight is None:
                        outs = [out + conv.lin_r(x_dst) for out, conv in zip(outs, convs_in)]
                    else:
                        outs[0] = outs[0] + F.linear(x_dst, weight)
                else:
                    outs = summed_roots(convs_in, x_dst, parts_in) or [
                        conv.fused_forward(x_src, x_dst, edges, None, conv.lin_r if conv.root_weight else None)
                        for conv, (x_src, x_dst, edges) in zip(convs_in, parts_in)]
                out_dict[dst] = outs
        else:
            roots = grouped_linear([conv.lin_r for conv in convs], [x_dst for _, _, (_, x_dst, _) in parts])
            for (dst, _, _), left, right in zip(parts, neighbours, roots):
                out_dict.setdefault(dst, []).append(left + right)  # SAGEConv's own order of the sum
        return {dst: group(outs, self.aggr) for dst, outs in out_dict.items()}

    @staticmethod
    def _grouped(convs: List) -> bool:
        """Whether the edge types' linear layers may run through ``grouped_linear``: at least
        ``HeteroDictLinear.min_types`` of one shape, each with a root weight and no projection or
        normalisation."""
        if len(convs) < HeteroDictLinear.min_types or not all(
                conv.root_weight and not conv.project and not conv.normalize for conv in convs):
            return False
        return len({(conv.lin_l.weight.shape, conv.lin_r.weight.shape) for conv in convs}) == 1

    def _sage_parts(self, x_dict, edge_index_dict) -> Optional[List]:
        """(destination type, conv, its ``_fused_input``) per edge type present, in PyG's order,
        or None where a convolution is not a pyg_fast SAGEConv on its fused path with initialised
        layers and destination features."""
        from pyg_fast.nn import SAGEConv
        convs = list(self.convs.items())
        if not convs or not all(type(conv) is SAGEConv for _, conv in convs):
            return None
        if any(isinstance(p, UninitializedParameter) for _, conv in convs for p in conv.parameters()):
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
            parts.append((dst, conv, fused))
        return parts or None
