"""Graph inputs of the fused layers: accepted formats and per-graph layouts.

The layers run every edge-wise kernel on edges grouped by destination (CSR). ``by_destination``
builds that grouping on the graph's device without a host synchronisation (a stable sort, or
none for an ``EdgeIndex`` sorted by destination) and, in eager mode, caches it with the
``edge_index`` tensor (``pyg_fast.ops._layout.cached``), so layers and steps that share a graph
prepare it once, and a new graph every step costs only the preparation kernels.
"""
from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.utils import is_torch_sparse_tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import gather_rows, reduce_csr, reduce_rows, sum_by_source
from pyg_fast.ops._python_ops import python_op


class Edges(NamedTuple):
    """A graph input as PyG orients it: ``edge_index`` [2, E] (plain Tensor), optional per-edge
    ``value`` (torch.sparse inputs), size hints ``(num_rows, num_cols)`` and whether the edges
    are known sorted by destination (an ``EdgeIndex`` says so; None: unknown)."""
    edge_index: Tensor
    value: Optional[Tensor]
    sizes: Tuple[Optional[int], Optional[int]]
    sorted_by_destination: Optional[bool] = None


def unpack(edge_index, flow: str) -> Optional[Edges]:
    """The input as :class:`Edges`, or None when the layer should let PyG handle it
    (SparseTensor, torch.sparse CSC, sparse values that need a gradient)."""
    if type(edge_index) is Tensor and edge_index.layout == torch.strided:  # the usual input, checked first
        return Edges(edge_index, None, (None, None)) if _is_edge_index(edge_index) else None
    if isinstance(edge_index, EdgeIndex):
        by_dst = edge_index.is_sorted_by_col if flow == "source_to_target" else edge_index.is_sorted_by_row
        return Edges(edge_index.as_tensor(), None, (edge_index.num_rows, edge_index.num_cols), by_dst or None)
    if is_torch_sparse_tensor(edge_index):
        # adj_t: rows are targets, columns are sources; PyG rejects other flows here.
        if flow != "source_to_target" or edge_index.layout not in (torch.sparse_coo, torch.sparse_csr):
            return None
        if edge_index.requires_grad:
            return None
        if edge_index.layout == torch.sparse_coo:
            adj = edge_index.coalesce()
            dst, src = adj.indices()
            value = adj.values()
        else:
            dst = torch._convert_indices_from_csr_to_coo(edge_index.crow_indices(), edge_index.col_indices())[0]
            src, value = edge_index.col_indices(), edge_index.values()
        num_dst, num_src = edge_index.shape[:2]
        return Edges(torch.stack([src, dst]), value, (num_src, num_dst), True)
    if isinstance(edge_index, Tensor) and edge_index.layout == torch.strided and _is_edge_index(edge_index):
        return Edges(edge_index, None, (None, None))
    return None


def _is_edge_index(edge_index: Tensor) -> bool:
    """Whether a strided tensor has the form of an edge index: [2, E], integer."""
    return edge_index.dim() == 2 and edge_index.size(0) == 2 and not edge_index.is_floating_point()


class Graph(NamedTuple):
    """Edges grouped by destination: ``src`` [E] the sources in destination order (int64), ``ptr``
    [num_dst + 1] the CSR pointer, ``perm`` [E] the input position of every edge in that order
    (None when the input was sorted by destination)."""
    src: Tensor
    ptr: Tensor
    perm: Optional[Tensor]


def _endpoints(flow: str) -> Tuple[int, int]:
    """(row of the sources, row of the destinations) of an edge_index for ``flow``."""
    return (0, 1) if flow == "source_to_target" else (1, 0)


def endpoints(edge_index: Tensor, flow: str) -> Tuple[Tensor, Tensor, str]:
    """(sources, destinations) of ``edge_index`` as int64 and their names for
    ``_kernels.gather_scatter``'s range report."""
    j, i = _endpoints(flow)
    return (_layout.as_long(edge_index[j]), _layout.as_long(edge_index[i]),
            f"edge_index[{j}]|the number of source nodes|edge_index[{i}]|the number of target nodes")


def by_destination(edge_index: Tensor, num_src: int, num_dst: int, flow: str,
                   is_sorted: Optional[bool] = None, with_perm: bool = True) -> Graph:
    """The destination-grouped layout of ``edge_index`` (validated, cached with the tensor). A
    caller that never reads ``perm`` passes ``with_perm=False``: where the graph is recorded it
    then comes empty rather than copied (``pyg_fast::csr_layout``)."""
    return _layout.cached(edge_index, ("by_destination", num_src, num_dst, flow, is_sorted),
                          lambda: _grouped(edge_index, num_src, num_dst, flow, is_sorted, with_perm))


def _grouped(edge_index: Tensor, num_src: int, num_dst: int, flow: str, is_sorted: Optional[bool],
             with_perm: bool = True) -> Graph:
    """``by_destination`` without the cache."""
    j, i = _endpoints(flow)
    names = f"edge_index[{i}]|the number of target nodes|edge_index[{j}]|the number of source nodes"
    ptr, perm, src = _layout.grouped_edges(edge_index[i], num_dst, edge_index[j],
                                           _layout.rows_of(num_src, edge_index.device), names, is_sorted, edge_index,
                                           with_perm)
    return Graph(src, ptr, perm)


def by_destination_looped(edge_index: Tensor, num_src: int, num_dst: int, num_loops: int, flow: str) -> Graph:
    """``by_destination`` of ``with_self_loops(edge_index, num_loops)``, derived from the
    grouping of ``edge_index`` itself rather than sorted again (``_layout.looped_layout``): under
    compile and trace the grouping of the caller's ``edge_index`` is kept from step to step (that
    of a graph with loops appended, a new tensor every step, could not be)."""
    def compute() -> Graph:
        src, ptr, perm = _grouped(edge_index, num_src, num_dst, flow, None)
        order = torch.arange(src.numel(), device=ptr.device) if perm is None else perm
        return Graph(*_layout.looped_layout(src, ptr, order, num_loops))

    return _layout.cached(edge_index, ("by_destination_looped", num_src, num_dst, num_loops, flow), compute)


def destinations(graph: Graph) -> Tensor:
    """The destination of every edge of ``graph``, in its order (cached with the pointer)."""
    return _layout.ptr_to_index(graph.ptr, graph.src.numel())


def in_edge_order(values: Optional[Tensor], graph: Graph) -> Optional[Tensor]:
    """Per-edge ``values`` given in input order, reordered to destination order."""
    if values is None or graph.perm is None:
        return values
    return gather_rows(values, graph.perm)


def in_input_order(values: Tensor, graph: Graph) -> Tensor:
    """Per-edge ``values`` in destination order, put back in the input's edge order."""
    if graph.perm is None:
        return values
    return torch.zeros_like(values).index_copy(0, graph.perm, values)


def num_nodes(x_src: Tensor, x_dst: Optional[Tensor], sizes: Tuple[Optional[int], Optional[int]],
              size: Optional[Tuple[Optional[int], Optional[int]]]) -> Tuple[int, int]:
    """(num_src, num_dst) as PyG's ``propagate`` infers them: explicit ``size``, then the
    graph's own size, then the node features; a missing target size means square."""
    num_src = size[0] if size is not None and size[0] is not None else sizes[0]
    num_dst = size[1] if size is not None and size[1] is not None else sizes[1]
    num_src = x_src.size(0) if num_src is None else num_src
    if num_dst is None:
        num_dst = x_dst.size(0) if x_dst is not None else num_src
    return num_src, num_dst


def loop_flags(edge_index: Tensor, num_nodes: int) -> Tensor:
    """[E + num_nodes] booleans: which edges of ``edge_index`` with the loops ``i -> i`` for ``i <
    num_nodes`` appended are loops it had already (the layers weight them 0 or mask them rather
    than remove them, which needs their count on the host); cached."""
    return _layout.cached(edge_index, ("loop_flags", num_nodes), lambda: torch.cat(
        [edge_index[0] == edge_index[1], edge_index.new_zeros(num_nodes, dtype=torch.bool)]))


def with_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """``edge_index`` with the loops ``i -> i`` for ``i < num_nodes`` appended: [2, E + num_nodes]."""
    loops = torch.arange(num_nodes, device=edge_index.device, dtype=edge_index.dtype)
    return torch.cat([edge_index, loops.expand(2, -1)], dim=1)


@python_op("gcn_normalized")
def _gcn_normalized_op(edge_index: Tensor, num_nodes: int, improved: bool, add_self_loops: bool, flow: str,
                       dtype: torch.dtype, with_perm: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``gcn_normalized`` of an unweighted ``edge_index`` as (src, ptr, perm (empty unless
    ``with_perm``; ``arange`` for a sorted input), weight), where a graph is recorded: the
    normalisation depends on the graph alone, so it is memoised with ``edge_index`` as the
    grouping is (``_layout.memoised``). Recomputed every step, it cost the compiled 3-layer GCN
    step on reddit2_like (23 M edges) three fused normalisations of 0.5-0.8 ms each (H200)."""
    def compute():
        graph, weight = gcn_normalized(edge_index, None, num_nodes, improved, add_self_loops, flow, dtype)
        perm = edge_index.new_empty(0) if not with_perm else (
            torch.arange(graph.src.numel(), device=edge_index.device) if graph.perm is None else graph.perm)
        # the sources are read by the gather kernels alone: in their narrowest type
        return graph.src.to(_layout.gather_index_dtype(edge_index, num_nodes)), graph.ptr, perm, weight

    if not _layout.eager(edge_index):
        return compute()
    return _layout.memoised(edge_index, ("gcn_normalized", num_nodes, improved, add_self_loops, flow, dtype,
                                         with_perm), compute)


@torch.library.register_fake("pyg_fast::gcn_normalized")
def _(edge_index, num_nodes, improved, add_self_loops, flow, dtype, with_perm):
    E = edge_index.size(1) + (num_nodes if add_self_loops else 0)
    return (edge_index.new_empty(E, dtype=_layout.gather_index_dtype(edge_index, num_nodes)),
            edge_index.new_empty(num_nodes + 1, dtype=torch.long),
            edge_index.new_empty(E if with_perm else 0, dtype=torch.long),
            torch.empty((E, 1), dtype=dtype, device=edge_index.device))


def gcn_graph(edge_index: Tensor, num_nodes: int, add_self_loops: bool, flow: str,
              dtype: torch.dtype) -> Tuple[Graph, Tensor]:
    """``gcn_normalized`` of an unweighted ``edge_index`` (``improved`` weighs only given
    weights), cached with it."""
    return _layout.cached(edge_index, ("gcn_norm", num_nodes, add_self_loops, flow, dtype),
                          lambda: gcn_normalized(edge_index, None, num_nodes, False, add_self_loops, flow, dtype))


def _kept_graph(kind: str, edge_index: Tensor, num_src: int, num_dst: int, flow: str, is_sorted: Optional[bool],
                dtype: torch.dtype) -> Tuple[Graph, Optional[Tensor]]:
    """(graph, its edge weights [E, 1] or None) of ``kind``, cached with ``edge_index`` as eager
    calls cache it: "edges", a layer's edges grouped by destination; "gcn" / "gcn_looped", GCN's
    normalised graph of an unweighted edge_index without / with its self loops."""
    if kind == "edges":
        return by_destination(edge_index, num_src, num_dst, flow, is_sorted, with_perm=False), None
    return gcn_graph(edge_index, num_dst, kind == "gcn_looped", flow, dtype)


@python_op("kept_aggregate")
def _kept_aggregate(x: Tensor, edge_index: Tensor, kind: str, num_src: int, num_dst: int, flow: str,
                    is_sorted: Optional[bool], reduce: str, transposed: bool) -> Tensor:
    """The sum or mean over the edges j -> i of the graph ``kind`` (see ``_kept_graph``) of
    ``x[j]`` (``x`` [num_src, F]: [num_dst, F]), or with ``transposed`` its adjoint, what the
    gradient of ``x`` is (``x`` [num_dst, F]: [num_src, F]), where a graph is recorded. The graph,
    its grouping by source and the launches are kept with the caller's ``edge_index`` when the
    recorded graph runs, as an eager call keeps them, and nothing leaves the op but its result: the
    layouts that the recorded graph itself grouped were copied out of their memo every step (a
    compiled GCN step on reddit2_like, 23 M edges, H100: 5.78 ms against 5.52 ms eager)."""
    graph, weight = _kept_graph(kind, edge_index, num_src, num_dst, flow, is_sorted, x.dtype)
    if not transposed:
        return reduce_csr(x, graph.src, graph.ptr, weight, reduce)
    if reduce == "mean":
        x = x / _layout.segment_sizes(graph.ptr, x.dtype)
    return sum_by_source(x, graph.src, graph.ptr, weight, num_src, weight_is_data=True)


@torch.library.register_fake("pyg_fast::kept_aggregate")
def _(x, edge_index, kind, num_src, num_dst, flow, is_sorted, reduce, transposed):
    return x.new_empty(num_src if transposed else num_dst, x.size(1))


def _kept_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[1])
    ctx.args, ctx.transposed = inputs[2:8], inputs[8]


def _kept_backward(ctx, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
    """The adjoint's adjoint is the aggregation: ``transposed`` flipped (a mean divides by the
    destinations' degrees on either side)."""
    grad_x = torch.ops.pyg_fast.kept_aggregate(grad.contiguous(), ctx.saved_tensors[0], *ctx.args,
                                               not ctx.transposed)
    return (grad_x,) + (None,) * 8


torch.library.register_autograd("pyg_fast::kept_aggregate", _kept_backward, setup_context=_kept_setup)


def kept_aggregate(x: Tensor, edges: Edges, num_src: int, num_dst: int, flow: str, reduce: str,
                   kind: str = "edges") -> Tensor:
    """Where a layer is recorded (torch.compile), its sum or mean of ``x`` over the graph ``kind``
    of an unweighted ``edges`` (see ``_kept_graph``; GCN's weights in ``x``'s dtype), as one op
    (``pyg_fast::kept_aggregate``) whose body is the eager route."""
    return torch.ops.pyg_fast.kept_aggregate(x, edges.edge_index, kind, num_src, num_dst, flow,
                                             edges.sorted_by_destination, reduce, False)


def recorded_gcn_normalized(edge_index: Tensor, num_nodes: int, improved: bool, add_self_loops: bool, flow: str,
                            dtype: torch.dtype, with_perm: bool) -> Tuple[Graph, Tensor]:
    """``gcn_normalized`` of an unweighted graph where it is recorded (compile, trace): one op
    whose result is kept with ``edge_index`` from step to step. Without ``with_perm`` the graph's
    ``perm`` is empty (not None, which would claim the edges sorted)."""
    src, ptr, perm, weight = _gcn_normalized_op(edge_index, num_nodes, improved, add_self_loops, flow, dtype,
                                                with_perm)
    return Graph(src, ptr, perm), weight


def gcn_normalized(edge_index: Tensor, edge_weight: Optional[Tensor], num_nodes: int, improved: bool,
                   add_self_loops: bool, flow: str, dtype: torch.dtype) -> Tuple[Graph, Tensor]:
    """PyG's ``gcn_norm`` without a host synchronisation: (the graph grouped by target, with the
    loops of ``with_self_loops`` where ``add_self_loops``; the weight in that order as [E, 1]).

    PyG removes the existing self loops and appends one per node (weighted by the removed loop's
    weight, else 1, or 2 with ``improved`` and edge weights); here the existing loops stay, weighted 0, and the
    appended ones carry the same weights, so every sum is the same. Degrees are summed per target
    on the grouped graph."""
    E = edge_index.size(1)
    weight = edge_weight.to(dtype) if edge_weight is not None else torch.ones(E, dtype=dtype,
                                                                              device=edge_index.device)
    if add_self_loops:
        is_loop = loop_flags(edge_index, num_nodes)[:E]
        # As PyG 2.8: without edge weights every loop weighs 1 (``improved`` only fills in the loops
        # of a weighted graph); a node's existing loop gives its weight, the last one in edge order
        # where it has several (PyG's assignment on the CPU; on CUDA PyG's pick among them is
        # unspecified).
        fill = 2.0 if improved and edge_weight is not None else 1.0
        loop_weight = torch.full((num_nodes,), fill, dtype=dtype, device=weight.device)
        if edge_weight is not None:  # the other edges go to the spare slot num_nodes
            row = edge_index[0]
            keep = is_loop & (row >= 0) & (row < num_nodes)
            last = torch.full((num_nodes + 1,), -1, dtype=torch.long, device=weight.device).scatter_reduce_(
                0, torch.where(keep, row, num_nodes), torch.arange(E, device=weight.device), "amax")[:num_nodes]
            loop_weight = torch.where(last >= 0, weight[last.clamp(min=0)], loop_weight)
        weight = torch.cat([weight.masked_fill(is_loop, 0), loop_weight])
        graph = by_destination_looped(edge_index, num_nodes, num_nodes, num_nodes, flow)
    else:
        graph = by_destination(edge_index, num_nodes, num_nodes, flow)
    w_sorted = in_edge_order(weight, graph).unsqueeze(1)
    deg = reduce_rows(w_sorted.unsqueeze(0), _layout.SegmentLayout(graph.ptr, None), "sum")[0]
    deg_inv_sqrt = deg.pow(-0.5).masked_fill_(deg == 0, 0)
    w_sorted = gather_rows(deg_inv_sqrt, graph.src) * w_sorted * deg_inv_sqrt.index_select(0, destinations(graph))
    return graph, w_sorted
