"""Segmented matmul on the eight real per-type size distributions (hetero_types), forward and
forward+backward: pyg_fast against the loop of matmuls PyG runs without pyg-lib and against
``torch._grouped_mm``.

Suites "segment_matmul_fwd" and "segment_matmul_fwdbwd"; case keys dataset, K, N, dtype;
extra fields tflops and pct_roofline = max(FLOPs / matmul peak, bytes / copy bandwidth) over
the measured time, with the device ceilings of pyg_fast.tuning.segment_matmul.HARDWARE.
The forward's records also hold copy_ms, the time of ``out.copy_(x)`` on the same rows in the
same process, and pct_copy = copy_ms over the method's time: a reference stream, not a ceiling
(a Triton tile copy measured up to 7% faster at 131 MB).
"""
import csv
import functools
import glob
import os
from typing import Dict, List

import torch

from benchmarks.common import bench_methods, budget_for, time_ms
from pyg_fast.ops.segment_matmul import segment_matmul
from pyg_fast.tuning.segment_matmul import HARDWARE

# The harness's dataset folder (PYG_FAST_DATA, see gpu_check.sh) if it holds the tables, else the
# copy kept in the repository.
DATA = os.path.join(os.getenv("PYG_FAST_DATA", ""), "hetero_types")
if not glob.glob(os.path.join(DATA, "*.csv")):
    DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "hetero_types")
DIMS = (32, 64, 128)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # fp32 runs with TF32 allowed
CHECK_TOL = {"fp32": 5e-3, "bf16": 2e-2}


def segment_sizes() -> Dict[str, List[int]]:
    """dataset -> segment sizes, from the hetero_types tables."""
    out = {}
    for path in sorted(glob.glob(os.path.join(DATA, "*.csv"))):
        with open(path) as f:
            out[os.path.splitext(os.path.basename(path))[0]] = [int(r["End"]) - int(r["Start"]) for r in csv.DictReader(f)]
    return out


def ceilings(device: str) -> dict:
    name = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else ""
    return next((v for k, v in HARDWARE.items() if k in name), HARDWARE["default"])


def loop_matmul(x, bounds, w):
    """PyG's HeteroLinear.forward_naive: one GEMM per type."""
    out = x.new_empty(x.size(0), w.size(2))
    for t in range(w.size(0)):
        if bounds[t + 1] > bounds[t]:
            out[bounds[t]:bounds[t + 1]] = x[bounds[t]:bounds[t + 1]] @ w[t]
    return out


def methods(ptr_cpu, device):
    bounds = ptr_cpu.tolist()
    offs = ptr_cpu[1:].to(torch.int32).to(device)
    return {
        "pyg_fast": lambda x, w: segment_matmul(x, ptr_cpu, w),
        "torch_loop": lambda x, w: loop_matmul(x, bounds, w),
        "torch_grouped_mm": lambda x, w: torch._grouped_mm(x, w, offs=offs),
    }


def forward_backward(fn, x, w, grad):
    return torch.autograd.grad(fn(x, w), (x, w), grad)


def run(rec, device, quick):
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True  # "fp32" cases run on TF32 tensor cores
    try:
        run_cases(rec, device, quick)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def run_cases(rec, device, quick):
    peak = ceilings(device)
    sizes = segment_sizes()
    if quick:  # tiny: two distributions scaled down, one size, CPU-friendly
        sizes = {k: [max(0, s // 200) for s in v] for k, v in sizes.items() if k in ("AIFB", "DBLP")}
    dims = (32, ) if quick else DIMS
    gen = torch.Generator(device).manual_seed(0)  # inputs drawn on the device: fast for AM's 3.3 M rows
    for dataset, segs in sizes.items():
        ptr_cpu = torch.tensor([0] + segs).cumsum(0)
        M, T = int(ptr_cpu[-1]), len(segs)
        for dim in dims:
            K = N = dim
            for dname, dtype in DTYPES.items():
                x = torch.randn(M, K, generator=gen, device=device).to(dtype)
                w = (torch.randn(T, K, N, generator=gen, device=device) / K ** 0.5).to(dtype)
                grad = torch.randn(M, N, generator=gen, device=device).to(dtype)
                x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
                ref = segment_matmul(x64, ptr_cpu, w64)
                ref_grads = torch.autograd.grad(ref, (x64, w64), grad.double())
                case = {"dataset": dataset, "K": K, "N": N, "dtype": dname}
                flops = 2.0 * M * K * N
                nbytes = x.element_size() * (M * K + M * N + T * K * N)
                rate = peak["tflops_16"] if dtype == torch.bfloat16 else peak["tflops_tf32"]
                xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
                fns = methods(ptr_cpu, device)
                copy_ms = time_ms(functools.partial(torch.empty_like(x).copy_, x), *budget_for(quick), device=device)
                for suite, work, calls, want, copy in (
                        ("segment_matmul_fwd", 1, {name: functools.partial(fn, x, w) for name, fn in fns.items()}, ref,
                         copy_ms),
                        ("segment_matmul_fwdbwd", 3, {name: functools.partial(forward_backward, fn, xg, wg, grad)
                                                      for name, fn in fns.items()}, ref_grads, None)):
                    bench_methods(rec, suite, case, calls, want, device, CHECK_TOL[dname], budget_for(quick),
                                  fields=functools.partial(roofline_fields, work * flops, work * nbytes, rate, peak,
                                                           copy))
                del x, w, grad, x64, w64, ref, ref_grads, xg, wg


def roofline_fields(flops, nbytes, rate, peak, copy_ms, ms):
    seconds = ms * 1e-3
    roofline = max(flops / (rate * 1e12), nbytes / (peak["gbps"] * 1e9))
    fields = {"tflops": flops / seconds / 1e12, "pct_roofline": 100.0 * roofline / seconds}
    if copy_ms is not None:
        fields.update(copy_ms=copy_ms, pct_copy=100.0 * copy_ms / ms)
    return fields
