"""Sampled dense-dense edge ops (torch.ops.pyg_fast.sddmm)."""
import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._checks import check_float, check_index_tensor
from pyg_fast.ops._kernels import run

EDGE_OPS = ("dot", "add", "sub", "mul", "div")


def sddmm(a: Tensor, b: Tensor, a_index: Tensor, b_index: Tensor, op: str = "dot") -> Tensor:
    r"""Computes an op between the rows of ``a`` and ``b`` joined by each edge.

    .. math::
        \mathrm{out}_e = a_{\mathrm{a\_index}_e} \circ b_{\mathrm{b\_index}_e}

    ``a`` is ``[Na, D]`` or ``[Na, H, D]``, ``b`` the same with ``Nb`` rows.
    ``op="dot"`` sums the products over ``D`` and gives ``[E]`` or ``[E, H]``;
    ``"add"``, ``"sub"``, ``"mul"``, ``"div"`` give ``[E, D]`` or ``[E, H, D]``.
    In GNN terms ``a_index``/``b_index`` are the source/target of every edge.
    """
    check_float(a, "a")
    check_float(b, "b")
    if op not in EDGE_OPS:
        raise ValueError(f"pyg_fast: sddmm op must be one of {EDGE_OPS}, got {op!r}")
    if a.dtype != b.dtype:
        raise TypeError(f"pyg_fast: sddmm operands differ in dtype ({a.dtype} and {b.dtype})")
    if a.dim() not in (2, 3) or a.shape[1:] != b.shape[1:]:
        raise ValueError(f"pyg_fast: sddmm expects 'a' [Na, (H,) D] and 'b' [Nb, (H,) D], got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if b.device != a.device:
        raise ValueError(f"pyg_fast: 'b' is on {b.device} but 'a' is on {a.device}")
    check_index_tensor(a_index, "a_index", None, a.device)
    check_index_tensor(b_index, "b_index", a_index.numel(), a.device,
                       mismatch="'b_index' has {got} entries but 'a_index' has {expected}")
    checks = (a_index, a, 0, "a_index", "a.size(0)"), (b_index, b, 0, "b_index", "b.size(0)")
    heads = a.dim() == 3
    a3 = a if heads else a.unsqueeze(1)
    b3 = b if heads else b.unsqueeze(1)
    if a_index.numel() > 0 and a3.size(1) > 0 and a3.size(2) > 0:  # the kernel runs: it may check
        (a_index, b_index), slot, seen = _layout.kernel_checked_indices(*checks)
    else:
        (a_index, b_index), slot, seen = _layout.checked_indices(*checks), -1, False
    if seen and op == "dot":  # int32 copies for a graph seen before, not for one used once
        a_index, b_index = _layout.narrow_gather_index(a_index, a3), _layout.narrow_gather_index(b_index, b3)
    out = run(torch.ops.pyg_fast.sddmm, a3.contiguous(), b3.contiguous(), a_index, b_index, op, slot)
    return out if heads else out.squeeze(1)
