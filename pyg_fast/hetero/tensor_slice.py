"""TensorSlice: rows of a tensor grouped by type, ready for segmented matmuls."""
from functools import lru_cache
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops.segment_matmul import segment_matmul, type_layout


class TensorSlice:
    r"""Groups the rows of ``data`` by ``types`` once, for any number of segmented matmuls.

    ``types`` ``[M]`` holds each row's type in ``[0, num_types)`` in any order (pass
    ``is_sorted=True`` when rows are already grouped); it may live on the CPU while the data is
    on the GPU. The sort permutation, the type pointer (on the host, so kernels read it without
    a sync) and the kernels' routing tables are computed once and cached with ``types``: build
    a new TensorSlice when mini-batch sampling changes the types, reuse it otherwise (across
    layers and iterations).

    Attributes: ``num_types``, ``ptr`` ``[T + 1]``, ``perm`` (rows in type order, or None when
    already sorted), ``data`` (``data`` in type order, or None).
    """

    def __init__(self, data: Optional[Tensor], types: Tensor, num_types: Optional[int] = None,
                 is_sorted: bool = False, device: Optional[torch.device] = None):
        if not isinstance(types, Tensor) or types.dim() != 1 or types.is_floating_point():
            raise TypeError("pyg_fast: TensorSlice 'types' must be a 1-D integer tensor")
        if data is not None and data.size(0) != types.numel():
            raise ValueError(f"pyg_fast: TensorSlice 'data' has {data.size(0)} rows but 'types' has "
                             f"{types.numel()} entries")
        if num_types is None:
            num_types = int(types.max()) + 1 if types.numel() > 0 else 0
        self.types = types
        self.num_types = num_types
        self.device = device if device is not None else (data.device if data is not None else types.device)
        if is_sorted:
            self.ptr = _layout.coo_layout(_layout.as_long(types), num_types, is_sorted=True).ptr
            self.perm = self._inverse = None
        else:
            self.ptr, self.perm, self._inverse = type_layout(types, num_types, self.device)
        self._version = types._version
        self.data = self.sort(data) if data is not None else None

    def __len__(self) -> int:
        return self.num_types

    def __repr__(self) -> str:
        return f"TensorSlice(rows={self.types.numel()}, num_types={self.num_types}, sorted={self.perm is None})"

    def matches(self, types: Tensor) -> bool:
        """Whether this slice was built from exactly ``types`` (same tensor, unmodified)."""
        return types is self.types and types._version == self._version

    def sort(self, x: Tensor) -> Tensor:
        """Rows of ``x`` in type order."""
        return x if self.perm is None else x.index_select(0, self.perm)

    def unsort(self, y: Tensor) -> Tensor:
        """Rows of ``y`` (in type order) back in the original order."""
        return y if self._inverse is None else y.index_select(0, self._inverse)

    def matmul(self, x_sorted: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        """``x_sorted[rows of t] @ weight[t] + bias[t]`` for rows already in type order."""
        return segment_matmul(x_sorted, self.ptr, weight, bias)

    def gather_matmul(self, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        """``x[i] @ weight[types[i]] + bias[types[i]]`` for rows in the original order."""
        return self.unsort(self.matmul(self.sort(x), weight, bias))


def slice_for(types: Tensor, num_types: int, device: torch.device, given: Optional[TensorSlice] = None,
              is_sorted: bool = False) -> TensorSlice:
    """``given`` if it was built from ``types``, else the slice cached with ``types``."""
    if given is not None:
        # (the identity of a traced tensor cannot be checked: a traced call trusts the slice it is given)
        if given.num_types != num_types or (_layout.eager(types) and not given.matches(types)):
            raise ValueError("pyg_fast: the 'tensor_slice' passed was built from other types than the ones "
                             "given to this call")
        return given
    return _layout.cached(types, ("tensor_slice", num_types, str(device), is_sorted),
                          lambda: TensorSlice(None, types, num_types, is_sorted, device))


@lru_cache(maxsize=256)
def host_ptr(sizes: Tuple[int, ...]) -> Tensor:
    """The CPU pointer ``[0, cumsum(sizes)]``, one tensor per distinct ``sizes``: layers that
    rebuild it every call (from tensor shapes) hit the kernels' per-pointer caches (validation,
    routing tables, launch configuration) instead of recomputing them."""
    return torch.tensor((0, ) + sizes).cumsum(0)


@lru_cache(maxsize=256)
def index_on(values: Tuple[int, ...], device: torch.device) -> Tensor:
    """``values`` as an int64 tensor on ``device``, copied there once."""
    return torch.tensor(values, device=device)
