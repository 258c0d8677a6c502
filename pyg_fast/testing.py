"""Helpers for pyg_fast's tests and benchmarks: devices, dtypes and error bounds."""
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# Bounds on ||out - ref|| / ||ref|| against a float64 reference, per dtype.
REL_TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of ``out`` against ``ref``, compared in float64; NaN fails."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    assert out.shape == ref.shape, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(out).any(), "NaN in output"
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    """Asserts ``out`` is within the dtype's relative error bound (times ``scale``) of ``ref``."""
    err = rel_err(out, ref)
    bound = REL_TOL[dtype] * scale
    assert err <= bound, f"relative error {err:.3g} > {bound:.3g} ({dtype})"
