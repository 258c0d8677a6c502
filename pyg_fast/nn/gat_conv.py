import functools
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.typing import Adj, OptTensor, Size
from torch_geometric.utils import add_self_loops, remove_self_loops

from pyg_fast import tuning
from pyg_fast.nn import _graph
from pyg_fast.nn._fused import FusedLayer, plain_linear, promoted
from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import coo_route, gather_rows, gather_scatter, reduce_csr, run
from pyg_fast.ops.segment_reduce import segment_reduce

# fill_value reductions of PyG's add_self_loops that run without the loops' count on the host
_SYNC_FREE_FILLS = ("mean", "add", "sum")


def _looped(src: Tensor, dst: Tensor, num_loops: int) -> Tuple[Tensor, Tensor]:
    """The edge ends with the loops ``i -> i`` for ``i < num_loops`` appended."""
    loops = torch.arange(num_loops, device=src.device)
    return torch.cat([src, loops]), torch.cat([dst, loops])


def softmax_sum(alpha: Tensor, h_src: Tensor, src: Tensor, ptr: Tensor, dropout: float,
                training: bool) -> Tuple[Tensor, Tensor]:
    """(the sum over each destination's edges of ``alpha`` * ``h_src[src]``, ``alpha``) after the
    softmax of the scores ``alpha`` [E, H] over the segments of ``ptr`` and the dropout, the edges
    grouped by destination and validated."""
    alpha = run(torch.ops.pyg_fast.edge_softmax, alpha.contiguous(), ptr, 0)
    alpha = F.dropout(alpha, p=dropout, training=training)
    return reduce_csr(promoted(h_src, alpha.dtype), src, ptr, alpha, "sum"), alpha


def foldable(lin: torch.nn.Module, x: Optional[Tensor]) -> bool:
    """Whether :func:`folded_scores` may stand for ``lin``'s projection of ``x`` in the scores: a
    plain linear layer (``plain_linear``), outside autocast, where PyG's half projection rounds each
    value before the scores read it (the folded product differs from it by the half type's
    rounding)."""
    return x is not None and plain_linear(lin) and not torch.is_autocast_enabled(x.device.type)


def folded_scores(lin: torch.nn.Module, att: Tensor, x: Tensor) -> Tensor:
    """Attention scores ``(lin(x).view(-1, H, C) * att).sum(-1)`` [N, H] as one product of ``x``
    with the weight folded into ``att`` [1, H, C] ([H, in]): where nothing else reads the
    projection (the targets', or the sources' that :meth:`GATConv._projects_after` sums first) it
    costs ``N x in x H`` multiplications instead of ``N x in x H x C`` (HGB DBLP's to_hetero GAT: 3
    of its 6 first-layer relations project 4,231 paper features into 64)."""
    return F.linear(x, *folded_weight(lin, att))


def folded_weight(lin: torch.nn.Module, att: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
    """(``lin.weight`` [H * C, in] folded into ``att`` [1, H, C]: [H, in]; its bias so: [H] or
    None), what :func:`folded_scores` multiplies by."""
    H, C = att.shape[-2:]
    att = att.reshape(H, C, 1)
    bias = None if lin.bias is None else (lin.bias.view(H, C, 1) * att).sum((1, 2))
    return (lin.weight.view(H, C, -1) * att).sum(1), bias


class GATConv(FusedLayer, pyg_nn.GATConv):
    r"""PyG's :class:`torch_geometric.nn.GATConv` on pyg_fast kernels.

    .. math::
        \mathbf{x}^{\prime}_i = \alpha_{i,i}\mathbf{\Theta}_{t}\mathbf{x}_{i} +
        \sum_{j \in \mathcal{N}(i)} \alpha_{i,j}\mathbf{\Theta}_{s}\mathbf{x}_{j},
        \qquad \alpha_{i,j} = \mathrm{softmax}_j\big(\mathrm{LeakyReLU}(
        \mathbf{a}^{\top}_{s}\mathbf{\Theta}_{s}\mathbf{x}_j +
        \mathbf{a}^{\top}_{t}\mathbf{\Theta}_{t}\mathbf{x}_i
        [+ \mathbf{a}^{\top}_{e}\mathbf{\Theta}_{e}\mathbf{e}_{i,j}])\big)

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. Per graph
    (built without a host synchronisation, cached with ``edge_index`` in eager mode): self
    loops (existing ones kept but masked out of the softmax; with
    ``return_attention_weights`` removed as PyG does, one synchronisation) and the
    grouping of edges by target. Per
    call: node projections, one SDDMM for the per-edge scores, one edge softmax kernel
    and one multi-head weighted SpMM; no ``[E, heads, C]`` message tensor is built.
    ``return_attention_weights`` gives the edges and coefficients in PyG's order.
    Attention dropout draws its mask over edges grouped by target, so with
    ``dropout > 0`` in training the random mask differs from PyG's (same distribution).
    torch.sparse and ``SparseTensor`` inputs, attention weights for an ``EdgeIndex``
    input, and the cases listed in :class:`pyg_fast.nn.GCNConv` run PyG's path.
    """
    propagate_type = {"x": "OptPairTensor", "alpha": "Tensor"}
    edge_updater_type = {"alpha": "OptPairTensor", "edge_attr": "OptTensor"}

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Adj,
                edge_attr: OptTensor = None, size: Size = None, return_attention_weights: Optional[bool] = None):
        edges = None
        if (isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and not self._pyg_path_required()
                and not (return_attention_weights and isinstance(edge_index, EdgeIndex))):
            edges = _graph.unpack(edge_index, self.flow)
        if edges is None:
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        H, C = self.heads, self.out_channels
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        assert x_src.dim() == 2, "Static graphs not supported in 'GATConv'"
        res_layer, lin = self.res, self.lin
        res = res_layer(x_dst) if res_layer is not None and x_dst is not None else None
        # Projections stay [N, H * C]: the aggregation takes them as they are, [N, H, C] views
        # only for the scores.
        alpha_src = project_after = None
        if lin is not None and isinstance(x, Tensor):
            h_src = h_dst = lin(x)
            alpha_dst = None
        else:
            lin_src, lin_dst = (lin, lin) if lin is not None else (self.lin_src, self.lin_dst)
            # the targets' projection serves their scores alone: folded into them where it may be
            alpha_dst = folded_scores(lin_dst, self.att_dst, x_dst) if foldable(lin_dst, x_dst) else None
            h_dst = x_dst if alpha_dst is not None else lin_dst(x_dst) if x_dst is not None else None
            if self._projects_after(lin_src, x_src, x_dst, edges, size):
                project_after = lin_src.weight
                h_src, alpha_src = x_src, folded_scores(lin_src, self.att_src, x_src)
            else:
                h_src = lin_src(x_src)
        if alpha_src is None:
            alpha_src = (h_src.view(-1, H, C) * self.att_src).sum(dim=-1)
        if alpha_dst is None and h_dst is not None:
            alpha_dst = (h_dst.view(-1, H, C) * self.att_dst).sum(-1)

        edge_index, is_loop, loops_of, num_loops = edges.edge_index, None, None, 0
        sorted_by_destination = edges.sorted_by_destination
        if self.lin_edge is None:
            edge_attr = None  # PyG carries it along but never reads it
        if self.add_self_loops:
            num_loops = h_src.size(0) if h_dst is None else min(h_src.size(0), h_dst.size(0))
            num_loops = min(size) if size is not None else num_loops
            if return_attention_weights or (isinstance(self.fill_value, str) and edge_attr is not None
                                            and self.fill_value not in _SYNC_FREE_FILLS):
                # PyG's exact edge list: the existing loops removed (one synchronisation)
                ei, attr = remove_self_loops(edge_index, edge_attr)
                edge_index, edge_attr = add_self_loops(ei, attr, fill_value=self.fill_value, num_nodes=num_loops)
            else:  # existing loops stay, masked out of the softmax
                is_loop = _graph.loop_flags(edge_index, num_loops)
                edge_attr = self._with_loop_attr(edge_index, edge_attr, is_loop, num_loops)
                loops_of = edge_index
            sorted_by_destination = None
        num_src, num_dst = _graph.num_nodes(h_src, h_dst, edges.sizes, size)
        if (alpha_dst is not None and not return_attention_weights and (is_loop is not None or not self.add_self_loops)
                and _layout.eager(edge_index)
                and coo_route(edge_index, ("gat", num_src, num_dst, self.flow), edge_index.size(1) * h_src.size(1))):
            out = self._propagate_coo(h_src, alpha_src, alpha_dst, edge_index, edge_attr, is_loop, num_dst)
        else:
            out = self._propagate_grouped(h_src, alpha_src, alpha_dst, edge_index, edge_attr, is_loop, loops_of,
                                          num_loops, num_src, num_dst, sorted_by_destination, return_attention_weights)
            if return_attention_weights:
                out, alpha = out
        if project_after is not None:
            out = F.linear(out, project_after)
        if not self.concat:
            out = out.view(-1, H, C).mean(dim=1)
        if res is not None:
            out = out + res
        bias = self.bias
        if bias is not None:
            out = out + bias
        if return_attention_weights:  # as PyG's: False returns the output alone
            return out, (edge_index, alpha)
        return out

    def _projects_after(self, lin_src: torch.nn.Module, x_src: Tensor, x_dst: Optional[Tensor], edges, size) -> bool:
        """Whether to sum the sources' own features under the attention and project the sums,
        ``W (sum_j alpha_ij x_j)``, rather than sum their projections: for one head, a plain
        bias-free projection (:func:`foldable`; dropped attention sums to less than 1, which a
        bias would see), eager, where that costs less at ``tuning.GATHER_COST`` multiply-adds a
        gathered value (a wide source type into few targets: HGB DBLP's papers into venues)."""
        if self.heads != 1 or lin_src.bias is not None or not foldable(lin_src, x_src) or not _layout.eager(x_src):
            return False
        num_src, num_dst = _graph.num_nodes(x_src, x_dst, edges.sizes, size)
        num_edges = edges.edge_index.size(1) + (min(num_src, num_dst) if self.add_self_loops else 0)
        width, out = x_src.size(1), self.out_channels
        k = tuning.GATHER_COST.get(x_src.device.type, math.inf)
        return k * num_edges * width + (num_dst + 1) * width * out < num_src * width * out + k * num_edges * out

    def _propagate_coo(self, h_src: Tensor, alpha_src: Tensor, alpha_dst: Tensor, edge_index: Tensor,
                       edge_attr: OptTensor, is_loop: Optional[Tensor], num_dst: int) -> Tensor:
        """The attention and aggregation of a graph's first uses, with no grouping (``coo_route``):
        the edges in input order, the loops appended, the softmax and the weighted sum with atomics.
        Indices out of range are read by no kernel and reported by the aggregation (at once on the
        CPU); an edge whose source alone is out of range scores 0 in its destination's softmax, so
        that destination's output in the call that reports it is off (the grouped route leaves it
        out)."""
        H, C = self.heads, self.out_channels
        src, dst, names = _graph.endpoints(edge_index, self.flow)
        if is_loop is not None:  # kept with edge_index: the next layer's reports of it are skipped
            src, dst = _layout.cached(edge_index, ("coo_looped", is_loop.numel(), self.flow),
                                      functools.partial(_looped, src, dst, is_loop.numel() - src.numel()))
        if src.numel() == 0:
            return alpha_src.new_zeros(num_dst, h_src.size(1))
        alpha = run(torch.ops.pyg_fast.sddmm, alpha_src.unsqueeze(-1), alpha_dst.unsqueeze(-1), src, dst,
                    "add").squeeze(-1)
        if edge_attr is not None and self.lin_edge is not None:
            edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            alpha = alpha + (self.lin_edge(edge_attr).view(-1, H, C) * self.att_edge).sum(dim=-1)
        alpha = F.leaky_relu(alpha, self.negative_slope)
        if is_loop is not None:
            alpha = alpha.masked_fill(is_loop.unsqueeze(1), torch.finfo(alpha.dtype).min)
        # The softmax's flags are not reported: gather_scatter below reports these destinations
        # against the same size (a report: ~30 us of host time, H100 host)
        alpha = run(torch.ops.pyg_fast.edge_softmax_coo, alpha.contiguous(), dst, num_dst)[0]
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        return gather_scatter(promoted(h_src, alpha.dtype), src, dst, alpha, num_dst, "sum", names)

    def _propagate_grouped(self, h_src, alpha_src, alpha_dst, edge_index, edge_attr, is_loop, loops_of, num_loops,
                           num_src, num_dst, sorted_by_destination, return_attention_weights):
        """The attention and aggregation over the graph grouped by destination (cached with
        ``edge_index``): the output, with the attention in input order where asked for."""
        H, C = self.heads, self.out_channels
        if is_loop is not None:
            graph = _graph.by_destination_looped(loops_of, num_src, num_dst, num_loops, self.flow)
        else:
            graph = _graph.by_destination(edge_index, num_src, num_dst, self.flow, sorted_by_destination)
        has_edges = graph.src.numel() > 0

        # The ops are called on the validated graph directly, without their wrappers' per-call checks.
        if alpha_dst is None:
            alpha = gather_rows(alpha_src, graph.src)
        else:  # the scores are fresh contiguous [N, H]: [N, H, 1] views are what sddmm takes
            alpha = run(torch.ops.pyg_fast.sddmm, alpha_src.unsqueeze(-1), alpha_dst.unsqueeze(-1), graph.src,
                        _graph.destinations(graph), "add").squeeze(-1)
        if has_edges:  # PyG leaves the scores of an empty graph as they are
            lin_edge = self.lin_edge
            if edge_attr is not None and lin_edge is not None:
                edge_attr = _graph.in_edge_order(edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr,
                                                 graph)
                alpha = alpha + (lin_edge(edge_attr).view(-1, H, C) * self.att_edge).sum(dim=-1)
            alpha = F.leaky_relu(alpha, self.negative_slope)
            if is_loop is not None:  # the lowest finite value: the CUDA softmax's running maximum starts at -inf
                alpha = alpha.masked_fill(_graph.in_edge_order(is_loop, graph).unsqueeze(1),
                                          torch.finfo(alpha.dtype).min)
            out, alpha = softmax_sum(alpha, h_src, graph.src, graph.ptr, self.dropout, self.training)
        else:  # no edges (and maybe no nodes): nothing to aggregate
            out = alpha_src.new_zeros(num_dst, h_src.size(1))
        if return_attention_weights:
            return out, _graph.in_input_order(alpha, graph)
        return out

    def _with_loop_attr(self, edge_index: Tensor, edge_attr: OptTensor, is_loop: Tensor, num_loops: int) -> OptTensor:
        """``edge_attr`` with the attributes of the appended loops: ``fill_value``, or the sum or mean
        of each node's incoming attributes over the edges that are not loops (PyG's ``add_self_loops``
        after ``remove_self_loops``)."""
        if edge_attr is None:
            return None
        E, fill = edge_attr.size(0), self.fill_value
        if not isinstance(fill, str):
            loop_attr = edge_attr.new_full((num_loops,) + edge_attr.shape[1:], fill) if not isinstance(fill, Tensor) \
                else fill.to(edge_attr).expand((num_loops,) + edge_attr.shape[1:])
            return torch.cat([edge_attr, loop_attr])
        keep = (~is_loop[:E]).to(edge_attr.dtype).view((E,) + (1,) * (edge_attr.dim() - 1))
        loop_attr = segment_reduce(edge_attr * keep, edge_index[1], dim_size=num_loops, reduce="sum")
        if fill == "mean":
            count = segment_reduce(keep.view(E, 1), edge_index[1], dim_size=num_loops, reduce="sum")
            loop_attr = loop_attr / count.clamp(min=1).view((num_loops,) + (1,) * (edge_attr.dim() - 1))
        return torch.cat([edge_attr, loop_attr])
