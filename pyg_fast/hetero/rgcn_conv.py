"""Drop-in RGCNConv and FastRGCNConv: aggregate per (relation, destination), then one
segmented matmul over all relations, then a sum per destination."""
from typing import Optional, Tuple, Union

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor

from pyg_fast._dropin import DropIn
from pyg_fast.hetero.tensor_slice import TensorSlice
from pyg_fast.ops import _layout
from pyg_fast.ops.index_segment_reduce import index_segment_reduce
from pyg_fast.ops.segment_reduce import segment_reduce

_HOOK_DICTS = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
               "_message_forward_hooks", "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks")


def needs_message_passing(conv: pyg_nn.MessagePassing) -> bool:
    """Whether the conv must run PyG's message/aggregate steps (explain masks, decomposed layers
    or user hooks on them), which a fused path would skip."""
    return bool(conv.explain) or conv.decomposed_layers > 1 or any(getattr(conv, name) for name in _HOOK_DICTS)


class RelationSlice(TensorSlice):
    r"""The edges of a relational graph grouped by (relation, destination) pairs.

    ``src`` ``[E]`` and ``edge_rel`` ``[E]``: source and relation of every edge in that order;
    ``pair_ptr`` ``[U + 1]``: the edges of each pair; ``pair_dst`` ``[U]``: each pair's destination. As a :class:`TensorSlice` its rows
    are the ``U`` pairs, typed by relation.
    """

    def __init__(self, edge_index: Tensor, edge_type: Tensor, num_relations: int, num_dst: int):
        src, dst = _layout.as_long(edge_index[0]), _layout.as_long(edge_index[1])
        edge_type = _layout.as_long(edge_type)
        if edge_type.numel() != src.numel():
            raise ValueError(f"pyg_fast: 'edge_type' has {edge_type.numel()} entries but there are "
                             f"{src.numel()} edges")
        edge_type, dst = _layout.checked_indices(
            (edge_type, _layout.rows_of(num_relations, dst.device), 0, "edge_type", "num_relations"),
            (dst, _layout.rows_of(num_dst, dst.device), 0, "edge_index[1]", "the number of target nodes"))
        key = edge_type * num_dst + dst
        sorted_key, perm = torch.sort(key, stable=True)
        pairs, counts = torch.unique_consecutive(sorted_key, return_counts=True)
        self.src = src.index_select(0, perm)
        self.edge_rel = torch.div(sorted_key, num_dst, rounding_mode="floor")
        self.pair_ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        self.pair_dst = pairs % num_dst
        self.num_dst = num_dst
        super().__init__(None, pairs // num_dst, num_relations, is_sorted=True)
        self.ptr = self.ptr.cpu()  # host pointer: the segmented matmul reads it without a sync


def relation_slice(edge_index: Tensor, edge_type: Tensor, num_relations: int, num_dst: int) -> RelationSlice:
    """The :class:`RelationSlice` of a graph, cached while ``edge_type`` and ``edge_index`` are
    alive and unchanged (in eager mode)."""
    return _layout.cached_with(edge_type, edge_index, ("relation_slice", num_relations, num_dst),
                               lambda: RelationSlice(edge_index, edge_type, num_relations, num_dst))


def relation_weights(conv: pyg_nn.RGCNConv) -> Tensor:
    """The dense ``[R, in, out]`` weights of a conv with or without bases/blocks."""
    weight = conv.weight
    if conv.num_bases is not None:
        weight = (conv.comp @ weight.view(conv.num_bases, -1)).view(conv.num_relations, conv.in_channels_l,
                                                                     conv.out_channels)
    if conv.num_blocks is not None:
        weight = block_diagonal(weight)
    return weight


def block_diagonal(blocks: Tensor) -> Tensor:
    """``[R, nb, in/nb, out/nb]`` diagonal blocks as dense ``[R, in, out]`` matrices."""
    R, nb, bi, bo = blocks.shape
    eye = torch.eye(nb, dtype=blocks.dtype, device=blocks.device)
    return torch.einsum("rbio,bc->rbico", blocks, eye).reshape(R, nb * bi, nb * bo)


def rgcn_forward(conv: pyg_nn.RGCNConv, x: Union[Optional[Tensor], Tuple[Optional[Tensor], Tensor]],
                 edge_index: Tensor, edge_type: Optional[Tensor],
                 tensor_slice: Optional[RelationSlice]) -> Optional[Tensor]:
    r""":math:`\mathbf{x}'_i = \mathbf{\Theta}_{root} \mathbf{x}_i + \sum_r \mathrm{aggr}_{j \in
    \mathcal{N}_r(i)} \mathbf{x}_j \mathbf{\Theta}_r + \mathbf{b}`, aggregating before the
    transform as PyG's loop path does (so ``aggr='mean'`` averages per relation). Featureless
    inputs (``x`` None or node indices) gather rows of the weights instead. None when the inputs
    need PyG's own path (SparseTensor inputs, other aggregations, hooks)."""
    x_l, x_r = x if isinstance(x, tuple) else (x, None)
    if x_l is None:  # featureless: node i's input is the one-hot vector e_i
        x_l = torch.arange(conv.in_channels_l, device=conv.weight.device)
    if not isinstance(x, tuple):
        x_r = x_l
    if (torch.jit.is_scripting() or x_r is None or x_l.is_floating_point() != x_r.is_floating_point()
            or not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided or edge_type is None
            or conv.aggr not in ("mean", "add", "sum") or needs_message_passing(conv)
            or (conv.num_blocks is not None and not x_l.is_floating_point())):
        return None
    num_dst = x_r.size(0)
    rs = tensor_slice if tensor_slice is not None else relation_slice(edge_index, edge_type, conv.num_relations,
                                                                      num_dst)
    if rs.num_dst != num_dst or rs.num_types != conv.num_relations:
        raise ValueError("pyg_fast: the 'tensor_slice' passed does not describe this graph")
    weight = relation_weights(conv)
    if x_l.is_floating_point():
        h = index_segment_reduce(x_l, rs.src, ptr=rs.pair_ptr, reduce=conv.aggr)
        messages = rs.matmul(h, weight)
    else:  # the message of edge j -> i of relation r is row x_l[j] of weight[r]: a gather-reduce
        rows = rs.edge_rel * weight.size(1) + x_l.index_select(0, rs.src)
        messages = index_segment_reduce(weight.reshape(-1, weight.size(2)), rows, ptr=rs.pair_ptr, reduce=conv.aggr)
    out = segment_reduce(messages, index=rs.pair_dst, dim_size=num_dst, reduce="sum")
    if conv.root is not None:
        out = out + (x_r @ conv.root if x_r.is_floating_point() else conv.root.index_select(0, x_r))
    if conv.bias is not None:
        out = out + conv.bias
    return out


class RGCNConv(DropIn, pyg_nn.RGCNConv):
    r"""PyG's :class:`~torch_geometric.nn.RGCNConv` (same arguments, state and results, the
    default ``aggr='mean'`` averaging per relation as PyG's loop path does), computed as one
    gather-reduce per (relation, destination), one segmented matmul and one scatter. The
    grouping is cached with ``edge_type``; ``tensor_slice`` may pass a prebuilt
    :class:`RelationSlice`."""
    propagate_type = {"x": "Tensor", "edge_type_ptr": "OptTensor"}
    # PyG's eager forward stores its segment-matmul heuristic's answer, which its scripted forward
    # then assigns (a bool); the first call of PyG's class would have set it.
    _script_defaults = {"_use_segment_matmul_heuristic_output": False}

    def forward(self, x: Union[Optional[Tensor], Tuple[Optional[Tensor], Tensor]], edge_index,
                edge_type: Optional[Tensor] = None, tensor_slice: Optional[RelationSlice] = None):
        out = rgcn_forward(self, x, edge_index, edge_type, tensor_slice)
        return out if out is not None else super().forward(x, edge_index, edge_type)


class FastRGCNConv(DropIn, pyg_nn.FastRGCNConv):
    r"""PyG's :class:`~torch_geometric.nn.FastRGCNConv` (same results), without its per-edge
    weight gather: the computation of :class:`RGCNConv` above."""
    propagate_type = {"x": "Tensor", "edge_type": "OptTensor"}

    def forward(self, x: Union[Optional[Tensor], Tuple[Optional[Tensor], Tensor]], edge_index,
                edge_type: Optional[Tensor] = None, tensor_slice: Optional[RelationSlice] = None):
        out = rgcn_forward(self, x, edge_index, edge_type, tensor_slice)
        return out if out is not None else super().forward(x, edge_index, edge_type)
