"""Helpers for pyg_fast's tests and benchmarks: devices, dtypes and error bounds."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# Bounds on ||out - ref|| / ||ref|| against a float64 reference, per dtype.
REL_TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def rel_err(out: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> float:
    """Relative Frobenius error of ``out`` against ``ref``, compared in float64; NaN fails.
    ``floor`` is a lower bound on the norm the error is taken relative to."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    assert out.shape == ref.shape, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(out).any(), "NaN in output"
    denom = max(ref.norm().item(), floor)
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, scale: float = 1.0,
                 floor: float = 0.0) -> None:
    """Asserts ``out`` is within the dtype's relative error bound (times ``scale``) of ``ref``
    (relative to at least ``floor``, see :func:`rel_err`)."""
    err = rel_err(out, ref, floor)
    bound = REL_TOL[dtype] * scale
    assert err <= bound, f"relative error {err:.3g} > {bound:.3g} ({dtype})"


def poison_allocator(numel: int, device: str, dtype: torch.dtype = torch.float32) -> None:
    """Fills a freed block of the caching allocator with NaN, so an op that leaves part of
    a fresh output unwritten shows NaN instead of a lucky zero (CUDA; best effort on CPU)."""
    block = torch.full((max(int(numel), 1),), float("nan"), device=device, dtype=dtype)
    del block


def scatter_reference(src: torch.Tensor, index: torch.Tensor, dim_size: int, reduce: str, dim: int = 0):
    """PyG semantics in float64 through torch.scatter_reduce: empty segments give 0."""
    src64 = src.double()
    shape = list(src64.shape)
    shape[dim] = dim_size
    idx_shape = [1] * src64.dim()
    idx_shape[dim] = -1
    idx = index.view(idx_shape).expand_as(src64)
    name = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}[reduce]
    return src64.new_zeros(shape).scatter_reduce(dim, idx, src64, name, include_self=False)


class PygFastOps(TorchDispatchMode):
    """Records the pyg_fast ops that run inside it, forward and backward (``ops``: names without
    the namespace, e.g. ``"gather_scatter"``)."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("pyg_fast."):
            self.ops.add(name.split(".")[1])
        return func(*args, **(kwargs or {}))
