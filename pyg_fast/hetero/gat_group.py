"""The attention convolutions of a ``to_hetero`` model (one ``GATConv`` per relation, each called
once a layer) run as one: the relations' scores, softmax and weighted sum in one call of each
kernel over all their edges, a relation's destinations being segments of their own. Host-bound
steps pay per op: a converted layer of 8 relations issued 8 sets of them."""
from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import UninitializedParameter

from pyg_fast.hetero.linear import grouped_linear
from pyg_fast.hetero.tensor_slice import host_ptr
from pyg_fast.hetero.typed_calls import features, finish, group, keys_of, order_problem, typed_calls
from pyg_fast.nn import _graph
from pyg_fast.nn.gat_conv import GATConv, folded_scores, folded_weight, foldable, softmax_sum
from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import run
from pyg_fast.ops.segment_matmul import segment_matmul

# Where the relations run as one (device types). On the H100 the grouped 2-layer to_hetero GAT
# training step took 16.5 ms on HGB IMDB and 15.9 ms on ACM against 20.9 and 21.3 ms one call per
# relation (stock 20.5, 22.1). On the CPU one call per relation was faster: ACM 260-263 ms grouped
# against 231 ms (2 cores), the combined gathers spanning every relation's rows out of L2.
GROUPED_DEVICES: Tuple[str, ...] = ("cuda",)
# What must agree between the relations' layers for one call to serve them all (checked when the
# model is converted; the training flag, which a user may set per layer, at every call).
_SHARED = ("heads", "out_channels", "concat", "negative_slope", "dropout", "flow")


def grouped_gat(convs: Sequence[GATConv], pairs: Sequence[bool], x_src: Sequence[Tensor],
                x_dst: Sequence[Tensor], edge_index: Sequence[Tensor]) -> List[Tensor]:
    """``[conv((xs, xd) if pair else xs, ei)]`` over the relations, as one computation where the
    layers and inputs allow it (see :func:`group_typed_gats`), else each layer on its own."""
    first = convs[0]
    if (x_src[0].device.type not in GROUPED_DEVICES or any(conv._pyg_path_required() for conv in convs)
            or any(conv.training != first.training for conv in convs)
            or any(type(e) is not Tensor or e.layout != torch.strided for e in edge_index)
            or len({(x.dtype, x.device, x.dim()) for x in list(x_src) + list(x_dst)}) != 1):
        return [conv((xs, xd) if pair else xs, e)
                for conv, pair, xs, xd, e in zip(convs, pairs, x_src, x_dst, edge_index)]
    alone = [conv._projects_after(conv.lin_src, xs, xd, _graph.unpack(e, conv.flow), None)
             for conv, xs, xd, e in zip(convs, x_src, x_dst, edge_index)]
    if any(alone):  # their sum of the sources' own features is as wide as those: each on its own
        rest = [i for i, a in enumerate(alone) if not a]
        outs = [conv((xs, xd) if pair else xs, e) if a else None
                for conv, pair, xs, xd, e, a in zip(convs, pairs, x_src, x_dst, edge_index, alone)]
        if rest:
            for i, out in zip(rest, grouped_gat(*([seq[i] for i in rest]
                                                  for seq in (convs, pairs, x_src, x_dst, edge_index)))):
                outs[i] = out
        return outs
    H, C = first.heads, first.out_channels
    h_src = grouped_linear([conv.lin_src for conv in convs], list(x_src))
    num_src, num_dst = [h.size(0) for h in h_src], [x.size(0) for x in x_dst]
    graph, dst, src = _combined(edge_index, num_src, num_dst, first.flow)
    h_src = torch.cat(h_src)
    alpha_src = _scores(h_src, num_src, [conv.att_src for conv in convs], H, C)
    alpha_dst = _dst_scores(convs, x_dst, num_dst, H, C)
    if graph.src.numel() > 0:
        alpha = run(torch.ops.pyg_fast.sddmm, alpha_src.unsqueeze(-1), alpha_dst.unsqueeze(-1), src, dst,
                    "add").squeeze(-1)
        out = softmax_sum(F.leaky_relu(alpha, first.negative_slope), h_src, graph.src, graph.ptr, first.dropout,
                          first.training)[0]
    else:
        out = alpha_src.new_zeros(sum(num_dst), H * C)
    if not first.concat:
        out = out.view(-1, H, C).mean(dim=1)
    outs = out.split(num_dst)
    if first.bias is None:
        return list(outs)
    return [o + conv.bias for o, conv in zip(outs, convs)]


def _scores(h: Tensor, sizes: List[int], att: List[Tensor], H: int, C: int) -> Tensor:
    """Each relation's attention scores of its rows of ``h`` [sum(sizes), H * C], ``(h.view(H, C)
    * att_r).sum(-1)``, as one segmented matmul with the block-diagonal [H * C, H] of every
    relation's ``att_r``: one op a side, where expanding the vectors to every row took a gather, a
    product and a sum, and an index_add in the backward."""
    att = torch.stack([a.view(H, C) for a in att])
    dtype = torch.promote_types(h.dtype, att.dtype)  # as the layer's product promotes (autocast's half rows)
    blocks = (att.unsqueeze(-1) * torch.eye(H, dtype=att.dtype, device=att.device).unsqueeze(1)).reshape(-1, H * C, H)
    return segment_matmul(h.to(dtype), host_ptr(tuple(sizes)), blocks.to(dtype))


def _dst_scores(convs: Sequence[GATConv], x_dst: Sequence[Tensor], num_dst: List[int], H: int, C: int) -> Tensor:
    """The relations' target scores, each relation's projection folded into its attention vector
    as :func:`pyg_fast.nn.gat_conv.folded_scores` does: one segmented matmul into ``H`` columns where
    the targets share their feature size, one product each where they do not; the projections
    themselves where :func:`~pyg_fast.nn.gat_conv.foldable` says not, or a layer's has a bias."""
    lins = [conv.lin_dst for conv in convs]
    att = [conv.att_dst for conv in convs]
    if not all(foldable(lin, x) and lin.bias is None for lin, x in zip(lins, x_dst)):
        return _scores(torch.cat(grouped_linear(lins, list(x_dst))), num_dst, att, H, C)
    if len({x.size(1) for x in x_dst}) != 1:
        return torch.cat([folded_scores(lin, a, x) for lin, a, x in zip(lins, att, x_dst)])
    folded = torch.stack([folded_weight(lin, a)[0] for lin, a in zip(lins, att)]).transpose(1, 2)  # [R, in, H]
    return segment_matmul(torch.cat(list(x_dst)), host_ptr(tuple(num_dst)), folded)


def _combined(edge_index: Sequence[Tensor], num_src: List[int], num_dst: List[int],
              flow: str) -> Tuple[_graph.Graph, Tensor, Tensor]:
    """The relations' edges grouped by destination as one graph (cached with their edge indices):
    relation r's sources and destinations offset by the rows of the relations before it, each
    relation's edges validated against its own sizes; a source out of its relation's range points
    past every row, where no kernel reads. With the destination of every edge in that order and
    the sources as int64 (the graph's are int32 on CUDA)."""
    def compute():
        parts = [_graph.by_destination(e, ns, nd, flow) for e, ns, nd in zip(edge_index, num_src, num_dst)]
        total = sum(num_src)
        like = parts[0].ptr
        dtype = _layout.gather_index_dtype(like, total + 1)
        src, ptr, src_at, edge_at = [], [], 0, 0
        for part, ns in zip(parts, num_src):
            s = part.src.to(dtype)
            src.append(torch.where(s < ns, s + src_at, total))
            ptr.append(part.ptr[:-1] + edge_at)
            src_at, edge_at = src_at + ns, edge_at + part.src.numel()
        ptr.append(parts[-1].ptr[-1:] + (edge_at - parts[-1].src.numel()))
        graph = _graph.Graph(torch.cat(src), torch.cat(ptr), None)
        # the SDDMM (and its backward's scatters) take both ends as int64; the SpMM the narrow sources
        return graph, _layout.ptr_to_index(graph.ptr, edge_at), graph.src.long()
    return _layout.cached_with_all(edge_index[0], edge_index[1:], ("gat_group", tuple(num_src), tuple(num_dst), flow),
                                   compute)


def _run_grouped(convs: torch.nn.ModuleDict, keys: Tuple[str, ...], pairs: Tuple[bool, ...], *inputs: Tensor
                 ) -> Tuple[Tensor, ...]:
    """The call a grouping puts into a traced model; ``inputs``: each relation's source features,
    target features and edge_index, in turn."""
    return tuple(grouped_gat([convs[key] for key in keys], pairs, inputs[0::3], inputs[1::3], inputs[2::3]))


def group_typed_gats(model: torch.fx.GraphModule) -> List[Tuple[str, List[str], str]]:
    """Rewrites the per-relation calls of a traced model's converted ``GATConv`` layers into one
    call (:func:`grouped_gat`). Returns (ModuleDict name, the relations grouped, '' or why they
    were left) per candidate."""
    done = []
    for parent, members in typed_calls(model).items():
        owner = model.get_submodule(parent)
        keys = keys_of(members)
        layers = [owner[key] for key in keys]
        if len(members) < 2 or not all(type(conv) is GATConv for conv in layers):
            continue
        first, why = layers[0], ""
        if any(isinstance(p, UninitializedParameter) for conv in layers for p in conv.parameters()):
            why = "lazily initialised layers (run the model once before convert)"
        elif any(conv.lin is not None or conv.add_self_loops or conv.lin_edge is not None or conv.res is not None
                 for conv in layers):
            why = "layers with a shared projection, self loops, edge features or a residual"
        elif any(getattr(conv, name) != getattr(first, name) for conv in layers for name in _SHARED) or len(
                {conv.bias is None for conv in layers}) != 1:
            why = "the layers differ in heads, channels or attention settings"
        elif any(len(node.args) != 2 or node.kwargs or not isinstance(node.args[1], torch.fx.Node)
                 or not features(node.args[0]) for node in members):
            why = "a call with other arguments than features and an edge_index"
        inputs = [] if why else [n for node in members for n in features(node.args[0]) + [node.args[1]]]
        why = why or order_problem(model, members, inputs)
        done.append((parent, keys, why))
        if not why:
            pairs = tuple(isinstance(node.args[0], tuple) for node in members)
            group(model, parent, members, _run_grouped, (pairs,), inputs)
    if any(not why for _, _, why in done):
        finish(model)
    return done

