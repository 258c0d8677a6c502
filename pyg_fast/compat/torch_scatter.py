"""torch_scatter-compatible ``scatter``, ``segment_coo`` and ``segment_csr`` on pyg_fast kernels.

Same signatures, defaults (``scatter``'s ``dim=-1``) and results as torch_scatter 2.1
for a 1-D index / indptr along the reduced dimension, which is how PyG calls them.
Multi-dimensional indices (one index per batch entry) raise NotImplementedError
instead of silently taking a slow path. ``out`` is supported for ``reduce="sum"``,
where torch_scatter accumulates into it.
"""
from typing import Optional

import torch
from torch import Tensor

from pyg_fast.ops.segment_reduce import segment_reduce


def _one_dim(index: Tensor, name: str) -> None:
    if index.dim() != 1:
        raise NotImplementedError(f"pyg_fast.compat.torch_scatter: only a 1-D '{name}' is supported, got shape "
                                  f"{tuple(index.shape)}")


def _into(result: Tensor, out: Optional[Tensor], reduce: str) -> Tensor:
    if out is None:
        return result
    if reduce not in ("sum", "add"):
        raise NotImplementedError("pyg_fast.compat.torch_scatter: 'out' is supported for reduce='sum' only")
    return out.add_(result)


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """``torch_scatter.scatter``: reduces ``src`` along ``dim`` into the slots given by ``index``."""
    _one_dim(index, "index")
    if dim_size is None and out is not None:
        dim_size = out.size(dim)
    return _into(segment_reduce(src, index=index, dim_size=dim_size, reduce=reduce, dim=dim), out, reduce)


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    """``torch_scatter.segment_coo``: like ``scatter`` along ``index.dim() - 1`` for a sorted index."""
    _one_dim(index, "index")
    if dim_size is None and out is not None:
        dim_size = out.size(0)
    return _into(segment_reduce(src, index=index, dim_size=dim_size, reduce=reduce, dim=0, sorted=True), out,
                 reduce)


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """``torch_scatter.segment_csr``: reduces ``src[indptr[i]:indptr[i+1]]`` along ``indptr.dim() - 1``."""
    _one_dim(indptr, "indptr")
    return _into(segment_reduce(src, ptr=indptr, reduce=reduce, dim=0), out, reduce)


__all__ = ["scatter", "segment_coo", "segment_csr"]
