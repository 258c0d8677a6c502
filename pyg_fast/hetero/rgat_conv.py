"""Drop-in RGATConv: the per-edge relation transforms of both endpoints as segmented matmuls
over edges grouped by relation, instead of gathering one weight matrix per edge."""
from typing import Optional

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from pyg_fast.hetero.rgcn_conv import block_diagonal
from pyg_fast.hetero.tensor_slice import TensorSlice, slice_for
from pyg_fast.ops.edge_softmax import edge_softmax


class RGATConv(pyg_nn.RGATConv):
    r"""PyG's :class:`~torch_geometric.nn.RGATConv` (same arguments, state and results).
    ``tensor_slice`` may pass a prebuilt :class:`TensorSlice` of ``edge_type``; otherwise the
    grouping of edges by relation is cached with ``edge_type``."""
    propagate_type = {"x": "Tensor", "edge_type": "OptTensor", "edge_attr": "Optional[Tensor]"}

    def forward(self, x, edge_index, edge_type=None, edge_attr=None, size=None, return_attention_weights=None,
                tensor_slice: Optional[TensorSlice] = None):
        self._given_slice = tensor_slice
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
        return self.attend(ts.gather_matmul(x_i, w), ts.gather_matmul(x_j, w), edge_type, edge_attr, index, ptr,
                           size_i)

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
