"""Drop-in RGATConv: the per-edge relation transforms of both endpoints as segmented matmuls
over edges grouped by relation, instead of gathering one weight matrix per edge."""
from typing import Optional

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from pyg_fast._dropin import DropIn
from pyg_fast.hetero.rgcn_conv import block_diagonal
from pyg_fast.hetero.tensor_slice import TensorSlice, slice_for
from pyg_fast.ops import _layout
from pyg_fast.ops.edge_softmax import edge_softmax
from pyg_fast.ops.segment_matmul import segment_matmul


class RGATConv(DropIn, pyg_nn.RGATConv):
    r"""PyG's :class:`~torch_geometric.nn.RGATConv` (same arguments, state and results).
    ``tensor_slice`` may pass a prebuilt :class:`TensorSlice` of ``edge_type``; otherwise the
    grouping of edges by relation is cached with ``edge_type``. Messages are computed and
    aggregated on the edges grouped by relation (sums in another order than PyG's: equal up to
    rounding); returned attention weights are in the order of the edges given."""
    propagate_type = {"x": "Tensor", "edge_type": "OptTensor", "edge_attr": "Optional[Tensor]"}

    def forward(self, x, edge_index, edge_type=None, edge_attr=None, size=None, return_attention_weights=None,
                tensor_slice: Optional[TensorSlice] = None):
        ts = None
        if (isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and edge_type is not None
                and x.is_floating_point()):
            ts = slice_for(edge_type, self.num_relations, x.device, tensor_slice)
        if ts is None or ts.perm is None:
            return self._propagate(x, edge_index, edge_type, edge_attr, size, return_attention_weights, ts)
        # A message depends on its edge alone and the aggregation over edges not on their order: on
        # edges grouped by relation (cached), the relation transforms run without gathering rows
        # into that order and back.
        sorted_index, sorted_slice = _layout.cached_with(
            edge_type, edge_index, ("rgat_edges_by_relation", self.num_relations, str(x.device)),
            lambda: (edge_index.index_select(1, ts.perm),
                     TensorSlice(None, ts.sort(edge_type), self.num_relations, is_sorted=True, device=x.device)))
        out = self._propagate(x, sorted_index, sorted_slice.types, None if edge_attr is None else ts.sort(edge_attr),
                              size, return_attention_weights, sorted_slice)
        if isinstance(out, tuple):  # the attention weights in the order of the edges given
            out, (_, alpha) = out
            return out, (edge_index, ts.unsort(alpha))
        return out

    def _propagate(self, x, edge_index, edge_type, edge_attr, size, return_attention_weights,
                   ts: Optional[TensorSlice]):
        self._given_slice = ts
        try:
            return super().forward(x, edge_index, edge_type, edge_attr, size, return_attention_weights)
        finally:
            self._given_slice = None

    def relation_weights(self) -> Tensor:
        """Dense ``[R, in, heads * out]`` weights (bases and blocks expanded)."""
        if self.num_bases is not None:
            return (self.att @ self.basis.view(self.num_bases, -1)).view(
                self.num_relations, self.in_channels, self.heads * self.out_channels)
        if self.num_blocks is not None:
            return block_diagonal(self.weight)
        return self.weight

    def message(self, x_i: Tensor, x_j: Tensor, edge_type: Tensor, edge_attr: Optional[Tensor], index: Tensor,
                ptr: Optional[Tensor], size_i: Optional[int]) -> Tensor:
        if not x_i.is_floating_point():
            return super().message(x_i, x_j, edge_type, edge_attr, index, ptr, size_i)
        ts = slice_for(edge_type, self.num_relations, x_i.device, getattr(self, "_given_slice", None))
        w = self.relation_weights()
        if ts.perm is None:  # edges grouped by relation: both endpoints' rows in one segmented matmul
            pair_ptr = _layout.cached(ts.ptr, ("rgat_endpoint_pairs", ), lambda: 2 * ts.ptr)
            both = segment_matmul(torch.stack([x_i, x_j], 1).view(-1, x_i.size(-1)), pair_ptr, w)
            outi, outj = both.view(x_i.size(0), 2, -1).unbind(1)
        else:
            outi, outj = ts.gather_matmul(x_i, w), ts.gather_matmul(x_j, w)
        return self.attend(outi, outj, edge_type, edge_attr, index, ptr, size_i)

    def attend(self, outi: Tensor, outj: Tensor, edge_type: Tensor, edge_attr: Optional[Tensor], index: Tensor,
               ptr: Optional[Tensor], size_i: Optional[int]) -> Tensor:
        """PyG's RGAT attention on the transformed endpoints ``outi``, ``outj`` [E, heads * out]."""
        H, C = self.heads, self.out_channels
        additive = self.attention_mode == "additive-self-attention"
        a_shape = (-1, H, 1) if additive else (-1, H, self.dim, 1)  # attention coefficients
        o_shape = (-1, H, C) if additive else (-1, H, 1, C)  # messages
        qi, kj = outi @ self.q, outj @ self.k
        alpha_edge = None
        if edge_attr is not None:
            edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            if self.lin_edge is None:
                raise ValueError("Please set 'edge_dim = edge_attr.size(-1)' while calling the RGATConv layer")
            edge_attributes = self.lin_edge(edge_attr).view(-1, H * C)
            alpha_edge = edge_attributes @ self.e
        if additive:
            alpha = qi + kj if alpha_edge is None else torch.add(qi, kj) + alpha_edge
            alpha = F.leaky_relu(alpha, self.negative_slope)
        else:
            alpha = qi * kj if alpha_edge is None else (qi * kj) * alpha_edge
        if self.attention_mechanism == "within-relation":
            across_out = torch.zeros_like(alpha)
            for r in range(self.num_relations):
                mask = edge_type == r
                across_out[mask] = softmax(alpha[mask], index[mask])
            alpha = across_out
        elif self.attention_mechanism == "across-relation":
            alpha = edge_softmax(alpha, index, ptr, size_i)
        self._alpha = alpha

        if self.mod in ("scaled", "f-scaled"):
            degree = scatter(alpha.new_ones(index.size()), index, dim_size=size_i, reduce="sum")[index].unsqueeze(-1)
        if self.mod == "additive":
            h = torch.mul(self.w, outj.view(o_shape) * torch.ones_like(alpha).view(a_shape))
            return outj.view(o_shape) * alpha.view(a_shape) + h
        if self.mod == "scaled":
            degree = self.activation(degree @ self.l1 + self.b1) @ self.l2 + self.b2
            return torch.mul(outj.view(o_shape) * alpha.view(a_shape), degree.view((-1, ) + (1, ) * (len(o_shape) - 2)
                                                                                    + (C, )))
        if self.mod == "f-additive":
            alpha = torch.where(alpha > 0, alpha + 1, alpha)
        elif self.mod == "f-scaled":
            alpha = alpha * degree
        elif self.training and self.dropout > 0:
            alpha = F.dropout(alpha, p=self.dropout, training=True)
        return alpha.view(a_shape) * outj.view(o_shape)
