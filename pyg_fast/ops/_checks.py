"""Python-side argument checks: clear exceptions before anything reaches a kernel."""
from typing import Optional

import torch
from torch import Tensor

REDUCE_ALIASES = {"sum": "sum", "add": "sum", "mean": "mean", "max": "max", "amax": "max",
                  "min": "min", "amin": "min"}


def check_reduce(reduce: str) -> str:
    """Canonical name of a reduction ('sum', 'mean', 'max' or 'min')."""
    if reduce not in REDUCE_ALIASES:
        raise ValueError(f"pyg_fast: reduce must be one of 'sum', 'mean', 'max', 'min', got {reduce!r}")
    return REDUCE_ALIASES[reduce]


def check_float(t: Tensor, name: str) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"pyg_fast: '{name}' must be a Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"pyg_fast: '{name}' must be a floating point tensor, got {t.dtype}")


def check_index_tensor(index: Tensor, name: str, length: Optional[int], device: torch.device,
                       mismatch: Optional[str] = None) -> None:
    """Type, shape and device of an index argument; ``mismatch`` words a wrong length (with
    ``{got}`` and ``{expected}``; formatted only when raising: formatting a size while compiling
    would specialise the graph to it)."""
    if not isinstance(index, Tensor):
        raise TypeError(f"pyg_fast: '{name}' must be a Tensor, got {type(index).__name__}")
    dtype = index.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"pyg_fast: '{name}' must be an integer tensor, got {index.dtype}")
    if index.dim() != 1:
        raise ValueError(f"pyg_fast: '{name}' must be 1-D, got shape {tuple(index.shape)}")
    if length is not None and index.numel() != length:
        text = (mismatch or f"'{name}' has {{got}} entries but {{expected}} are expected").format(
            got=index.numel(), expected=length)
        raise ValueError(f"pyg_fast: {text}")
    if index.device != device:
        raise ValueError(f"pyg_fast: '{name}' is on {index.device} but the data is on {device}")


def check_dim(t: Tensor, dim: int, name: str) -> int:
    """``dim`` of ``t`` as a non-negative dimension; ``t`` must have at least one."""
    if t.dim() == 0:
        raise ValueError(f"pyg_fast: '{name}' must have at least one dimension")
    normalized = dim + t.dim() if dim < 0 else dim
    if not 0 <= normalized < t.dim():
        raise IndexError(f"pyg_fast: dim {dim} is out of range for '{name}' of shape {tuple(t.shape)}")
    return normalized
