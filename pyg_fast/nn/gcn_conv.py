from typing import Tuple

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import Adj, OptTensor

from pyg_fast.nn import _graph
from pyg_fast.nn._fused import FusedLayer, edge_values, plain_linear, promoted
from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import coo_route, gather_scatter, reduce_csr, weight_as


class GCNConv(FusedLayer, pyg_nn.GCNConv):
    r"""PyG's :class:`torch_geometric.nn.GCNConv` on pyg_fast kernels.

    .. math::
        \mathbf{X}' = \hat{\mathbf{D}}^{-1/2} \hat{\mathbf{A}} \hat{\mathbf{D}}^{-1/2}
        \mathbf{X} \mathbf{\Theta} + \mathbf{b}

    Same constructor, parameters, ``state_dict`` and outputs as PyG's class. The
    normalised graph (self loops, :math:`\hat{d}^{-1/2}` weights, edges grouped by
    target) is built on the graph's device without a host synchronisation, once per
    ``edge_index`` tensor in eager mode; propagation is one weighted SpMM (forward and
    backward on pyg_fast kernels), of :math:`\mathbf{X} \mathbf{\Theta}` as in PyG or of
    :math:`\mathbf{X}` before :math:`\mathbf{\Theta}` where that moves fewer values over the
    edges forward and backward (a first layer no wider than twice its input, say:
    ``pyg_fast.nn._fused.edge_values``). Explain mode, ``decomposed_layers > 1``, message
    passing hooks, ``SparseTensor``, static (3-D) node features and sparse values that
    require a gradient run PyG's own path; torch.sparse inputs are normalised by PyG's
    ``gcn_norm``.
    """
    propagate_type = {"x": "Tensor", "edge_weight": "OptTensor"}

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None) -> Tensor:
        edges = None
        if isinstance(x, Tensor) and x.dim() == 2 and not x.is_sparse and not self._pyg_path_required():
            edges = _graph.unpack(edge_index, self.flow)
        if edges is None:
            return super().forward(x, edge_index, edge_weight)
        num_nodes = x.size(0)
        if edges.value is not None:  # torch.sparse: weights come with the matrix
            edge_weight = edges.value
        if not self.normalize:
            graph = _graph.by_destination(edges.edge_index, num_nodes, num_nodes, self.flow,
                                          edges.sorted_by_destination)
            return self._propagate(x, graph, _graph.in_edge_order(edge_weight, graph))
        if self._cached_edge_index is not None:
            cached_index, cached_weight = self._cached_edge_index
            graph = _graph.by_destination(cached_index, num_nodes, num_nodes, self.flow)
            return self._propagate(x, graph, _graph.in_edge_order(cached_weight, graph))
        if edges.value is not None:  # PyG's own normalisation of a sparse matrix (it synchronises)
            norm_index, norm_weight = gcn_norm(edge_index, None, num_nodes, self.improved, self.add_self_loops,
                                               self.flow, x.dtype)
            norm_edges = _graph.unpack(norm_index, self.flow)
            graph = _graph.by_destination(norm_edges.edge_index, num_nodes, num_nodes, self.flow)
            weight = _graph.in_edge_order(norm_edges.value, graph)
            if self.cached:
                self._cached_edge_index = (norm_edges.edge_index, norm_edges.value)
            return self._propagate(x, graph, weight)
        if edge_weight is None and not self.cached and coo_route(
                edges.edge_index, ("gcn", num_nodes, self.flow), edges.edge_index.size(1) * self.out_channels):
            return self._propagate_coo(x, edges.edge_index, num_nodes)
        if edge_weight is None and not self.cached and not _layout.eager(x, edges.edge_index):
            h, inputs_first = self._unweighted_input(x)
            out = _graph.kept_aggregate(h, edges, num_nodes, num_nodes, self.flow, "sum",
                                        "gcn_looped" if self.add_self_loops else "gcn")
            return self._finish(out, inputs_first)
        graph, weight = self._normalized(edges.edge_index, edge_weight, num_nodes, x.dtype)
        if self.cached:
            norm_index = (_graph.with_self_loops(edges.edge_index, num_nodes) if self.add_self_loops
                          else edges.edge_index)
            self._cached_edge_index = (norm_index, _graph.in_input_order(weight.squeeze(1), graph))
        return self._propagate(x, graph, weight)

    def _normalized(self, edge_index: Tensor, edge_weight: OptTensor, num_nodes: int, dtype: torch.dtype):
        """:func:`_graph.gcn_normalized` with this layer's settings, memoised on ``edge_index``
        (and the weight tensor, if any)."""
        def compute():
            return _graph.gcn_normalized(edge_index, edge_weight, num_nodes, self.improved, self.add_self_loops,
                                         self.flow, dtype)
        if edge_weight is None:
            if not _layout.eager(edge_index):
                return _graph.recorded_gcn_normalized(edge_index, num_nodes, self.improved, self.add_self_loops,
                                                      self.flow, dtype, self.cached)
            return _graph.gcn_graph(edge_index, num_nodes, self.add_self_loops, self.flow, dtype)
        if edge_weight.requires_grad and torch.is_grad_enabled():  # a fresh graph of the autograd tape
            return compute()
        return _layout.cached_with(edge_index, edge_weight,
                                   ("gcn_norm", num_nodes, self.improved, self.add_self_loops, self.flow, dtype), compute)

    def _propagate_coo(self, x: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The layer on an unweighted graph's first uses, without grouping it: with d the
        degrees (loops included) and h' = d^-1/2 h, out = d^-1/2 (sum over j -> i of h'_j + h'_i),
        PyG's normalisation factored so that no per-edge weight is built. PyG replaces existing
        loops by one per node: here they weigh 0 and the loop term adds h'_i once."""
        h, inputs_first = self._unweighted_input(x)
        src, dst, names = _graph.endpoints(edge_index, self.flow)

        def normalisation():
            weight = (src != dst).to(h.dtype).unsqueeze(1) if self.add_self_loops else None
            degree = gather_scatter(h.new_ones(num_nodes, 1), src, dst, weight, num_nodes, "sum", names)
            if self.add_self_loops:
                return weight, degree.add_(1).rsqrt_()
            scale = degree.pow_(-0.5)
            return weight, scale.masked_fill_(scale == float("inf"), 0)  # degree 0, as PyG

        # shared by the layers of one step (a 2-layer step on a sampled graph: 7 of its 226 ops)
        weight, scale = _layout.cached(edge_index, ("gcn_coo_norm", num_nodes, self.flow, self.add_self_loops,
                                                    h.dtype), normalisation)
        h = h * scale
        out = gather_scatter(h, src, dst, weight, num_nodes, "sum", None)  # reported above
        out = (out + h if self.add_self_loops else out) * scale
        return self._finish(out, inputs_first)

    def _propagate(self, x: Tensor, graph: _graph.Graph, weight: OptTensor) -> Tensor:
        inputs_first = self._inputs_first(x)
        h = x if inputs_first else self.lin(x)
        if weight is not None:
            h = promoted(h, weight.dtype)
        out = reduce_csr(h, graph.src, graph.ptr, None if weight is None else weight_as(weight, h.dtype), "sum")
        return self._finish(out, inputs_first)

    def _unweighted_input(self, x: Tensor) -> Tuple[Tensor, bool]:
        """(what an unweighted graph propagates: ``x``, or ``lin(x)`` in ``x``'s dtype, in which PyG
        normalises (a half degree count is off past 256); whether ``lin`` comes after)."""
        inputs_first = self._inputs_first(x)
        return (x if inputs_first else promoted(self.lin(x), x.dtype)), inputs_first

    def _inputs_first(self, x: Tensor) -> bool:
        """Whether to propagate ``x`` and apply ``lin`` after (the same linear map; PyG applies it
        first): where that moves fewer values over the edges, forward and backward
        (``edge_values``), and ``lin``'s forward is its weight alone (``plain_linear``)."""
        if not plain_linear(self.lin):
            return False
        products, inputs = edge_values(self.lin.weight, x)
        return inputs < products

    def _finish(self, out: Tensor, inputs_first: bool) -> Tensor:
        """The propagation's ``out`` through ``lin`` where it propagated the inputs, plus the bias."""
        if inputs_first:
            out = self.lin(out)
        return out if self.bias is None else out + self.bias

