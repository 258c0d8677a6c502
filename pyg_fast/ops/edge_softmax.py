"""Softmax over the edges that share a destination (torch.ops.pyg_fast.edge_softmax)."""
from typing import Optional

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._checks import check_dim, check_float, check_index_tensor
from pyg_fast.ops._kernels import coo_reported, coo_route, gather_rows, run


def edge_softmax(src: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
                 num_nodes: Optional[int] = None, dim: int = 0) -> Tensor:
    r"""Sparse softmax of ``src`` over the groups of edges given by ``index`` or ``ptr``.

    .. math::
        \mathrm{out}_e = \frac{\exp(\mathrm{src}_e - m_i)}
        {\sum_{f \,:\, \mathrm{index}_f = i} \exp(\mathrm{src}_f - m_i) + 10^{-16}},
        \qquad m_i = \max_{f \,:\, \mathrm{index}_f = i} \mathrm{src}_f

    for every edge :math:`e` with :math:`\mathrm{index}_e = i`, separately for every
    trailing column (e.g. attention head). Same signature, numerics (the max is
    detached, the ``1e-16``) and gradients as :func:`torch_geometric.utils.softmax`,
    computed by one fused kernel per pass. Groups come from ``index`` or a CSR ``ptr`` over
    ``dim``. An index in any order, on its first uses with ``num_nodes`` given (a sampled
    graph's), takes no grouping: maxima and sums per destination with atomics; from its
    ``_layout.REUSED_FROM_USE``-th use it is sorted once and cached with the tensor.
    """
    check_float(src, "src")
    dim = check_dim(src, dim, "src")
    num_edges = src.size(dim)
    # [E, H] scores over dim 0, GAT's case, take no view in or out (2.6 us each, CPU host)
    whole = dim == 0 and src.dim() == 2
    moved = src if dim == 0 else src.movedim(dim, 0)
    src2 = src if whole else moved.reshape(num_edges, -1)
    if ptr is None and index is not None and num_nodes is not None and num_nodes >= 0:
        check_index_tensor(index, "index", num_edges, src.device)
        index = _layout.as_long(index)
        if _layout.eager(index) and coo_route(index, ("edge_softmax", num_nodes), src2.numel()):
            out2 = coo_reported(torch.ops.pyg_fast.edge_softmax_coo, src2, index, num_nodes, "index", "num_nodes")
            return out2 if whole else out2.view(moved.shape).movedim(0, dim)
    layout, _ = _layout.segments(index, ptr, src, dim, num_nodes, size_name="num_nodes")
    if layout.perm is None:
        out2 = run(torch.ops.pyg_fast.edge_softmax, src2.contiguous(), layout.ptr, 0)
    else:
        out_sorted = run(torch.ops.pyg_fast.edge_softmax, gather_rows(src2, layout.perm).contiguous(), layout.ptr, 0)
        out2 = torch.empty_like(src2).index_copy(0, layout.perm, out_sorted)  # perm covers every edge
    return out2 if whole else out2.view(moved.shape).movedim(0, dim)
