"""Segmented matrix multiplication for heterogeneous GNNs (torch.ops.pyg_fast.segment_matmul).

CPU: C++ kernel (csrc/cpu/segment_matmul.cpp). CUDA: Triton kernels (pyg_fast/triton/
segment_matmul.py), registered here as the op's CUDA implementation.
"""
import functools
import warnings
import weakref
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from pyg_fast.ops import _layout
from pyg_fast.ops._checks import check_float, check_index_tensor
from pyg_fast.ops._kernels import reduce_rows, run


def segment_matmul(inputs: Tensor, ptr: Tensor, other: Tensor, bias: Optional[Tensor] = None, *,
                   deterministic: Optional[bool] = None) -> Tensor:
    r"""Multiplies each segment of rows by the weight matrix of its type (pyg-lib's signature).

    .. math::
        \mathrm{out}_{\mathrm{ptr}_t:\mathrm{ptr}_{t+1}} =
        \mathrm{inputs}_{\mathrm{ptr}_t:\mathrm{ptr}_{t+1}} \, \mathrm{other}_t + \mathrm{bias}_t

    ``inputs`` is ``[M, K]`` with its rows grouped by type, ``ptr`` ``[T + 1]`` runs from 0 to
    ``M`` (it may be a CPU tensor for CUDA inputs, as pyg-lib recommends: no host sync),
    ``other`` is ``[T, K, N]`` and ``bias`` ``[T, N]``. Gradients flow to ``inputs``, ``other``
    and ``bias``. The weight gradient on CUDA is bitwise reproducible when ``deterministic`` is
    True, or when it is None and ``torch.are_deterministic_algorithms_enabled()`` (read when the
    forward runs).
    """
    plans = _layout.cached(ptr, ("segmm_plans",), dict) if isinstance(ptr, Tensor) and \
        _layout.eager(ptr, inputs) else None
    key = _plan_key(inputs, other, bias, deterministic) if plans is not None else None
    if key is not None:
        run = plans.get(key)
        if run is not None:
            return run(inputs, ptr, other, bias)
    run, final = _plan(inputs, ptr, other, bias, deterministic)
    if final and key is not None:
        if len(plans) >= 64:
            plans.clear()
        plans[key] = run
    return run(inputs, ptr, other, bias)


Plan = Callable[[Tensor, Tensor, Tensor, Optional[Tensor]], Tensor]


def _plan_key(inputs: Tensor, other: Tensor, bias: Optional[Tensor], deterministic: Optional[bool]) -> Optional[Tuple]:
    """What a resolved call depends on besides ``ptr`` (on which plans are cached): the kinds of
    the tensors, which gradients flow, the weight-gradient mode and the TF32 switch. None where
    ``other`` or ``bias`` is not a tensor (:func:`_plan` names the problem)."""
    grad = torch.is_grad_enabled()
    try:
        return (inputs.shape, inputs.dtype, inputs.device, grad and inputs.requires_grad,
                other.shape, other.dtype, other.device, grad and other.requires_grad,
                None if bias is None else (bias.shape, bias.dtype, bias.device, grad and bias.requires_grad),
                _use_deterministic(deterministic), torch._C._get_cublas_allow_tf32())
    except AttributeError:
        return None


def _plan(inputs: Tensor, ptr: Tensor, other: Tensor, bias: Optional[Tensor],
          deterministic: Optional[bool]) -> Tuple[Plan, bool]:
    """Checks a call of :func:`segment_matmul` and resolves it: the function of (inputs, ptr,
    other, bias) that computes it, and whether it may be kept for the next call with the same ptr
    and a :func:`_plan_key`-equal call (which then skips the checks and lookups)."""
    _check_args(inputs, ptr, other, bias)
    deterministic = _use_deterministic(deterministic)
    if inputs.is_cuda and _layout.eager(inputs, other):
        return _cuda_call(inputs, ptr, other, bias, deterministic)
    ptr_long = _layout.ptr_layout(ptr, inputs, 0).ptr
    # A plan is cached on the ptr it was made for: it must not hold that tensor.
    held_ptr = None if ptr_long is ptr else ptr_long

    def run(inputs: Tensor, ptr: Tensor, other: Tensor, bias: Optional[Tensor]) -> Tensor:
        return segment_matmul_op(inputs.contiguous(), ptr if held_ptr is None else held_ptr, other.contiguous(),
                                 _contiguous(bias), deterministic)
    return run, True


def _check_args(inputs: Tensor, ptr: Tensor, other: Tensor, bias: Optional[Tensor]) -> None:
    check_float(inputs, "inputs")
    check_float(other, "other")
    if inputs.dim() != 2 or other.dim() != 3 or inputs.size(1) != other.size(1):
        raise ValueError(f"pyg_fast: segment_matmul expects 'inputs' [M, K] and 'other' [T, K, N], got "
                         f"{tuple(inputs.shape)} and {tuple(other.shape)}")
    if other.dtype != inputs.dtype:
        raise TypeError(f"pyg_fast: 'other' is {other.dtype} but 'inputs' is {inputs.dtype}")
    if other.device != inputs.device:
        raise ValueError(f"pyg_fast: 'other' is on {other.device} but 'inputs' is on {inputs.device}")
    if bias is not None:
        check_float(bias, "bias")
        if bias.shape != (other.size(0), other.size(2)) or bias.dtype != inputs.dtype or bias.device != inputs.device:
            raise ValueError(f"pyg_fast: 'bias' must be [T, N] = [{other.size(0)}, {other.size(2)}] of "
                             f"{inputs.dtype} on {inputs.device}, got {tuple(bias.shape)} {bias.dtype} on {bias.device}")
    check_index_tensor(ptr, "ptr", other.size(0) + 1, ptr.device)
    if ptr.device.type != "cpu" and ptr.device != inputs.device:
        raise ValueError(f"pyg_fast: 'ptr' must be on the CPU or on {inputs.device}, got {ptr.device}")


def _contiguous(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.contiguous()


def gather_segment_matmul(inputs: Tensor, types: Tensor, other: Tensor, bias: Optional[Tensor] = None, *,
                          deterministic: Optional[bool] = None) -> Tensor:
    r"""Multiplies every row by the weight of its type, for rows in any order.

    .. math::
        \mathrm{out}_i = \mathrm{inputs}_i \, \mathrm{other}_{\mathrm{types}_i} + \mathrm{bias}_{\mathrm{types}_i}

    ``types`` ``[M]`` holds values in ``[0, T)``; it may be on the CPU. Rows are sorted by type
    (the permutation and pointer are computed once per ``types`` tensor and cached), multiplied
    with :func:`segment_matmul` and put back in their original order.
    """
    check_float(inputs, "inputs")
    if other.dim() != 3:
        raise ValueError(f"pyg_fast: 'other' must be [T, K, N], got {tuple(other.shape)}")
    check_index_tensor(types, "types", inputs.size(0), types.device)
    if types.device.type != "cpu" and types.device != inputs.device:
        raise ValueError(f"pyg_fast: 'types' must be on the CPU or on {inputs.device}, got {types.device}")
    ptr, perm, inverse = type_layout(types, other.size(0), inputs.device)
    if perm is None:
        return segment_matmul(inputs, ptr, other, bias, deterministic=deterministic)
    out = segment_matmul(inputs.index_select(0, perm), ptr, other, bias, deterministic=deterministic)
    return out.index_select(0, inverse)


def type_layout(types: Tensor, num_types: int, device: torch.device) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """(ptr on ``types``' device, perm and inverse perm on ``device`` or None if already sorted),
    cached on ``types``."""
    types = _layout.as_long(types)

    def compute():
        layout = _layout.coo_layout(types, num_types, name="types", size_name="the number of types")
        if layout.perm is None:
            return layout.ptr, None, None
        perm = layout.perm.to(device)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel(), device=device)
        return layout.ptr, perm, inverse

    return _layout.cached(types, ("type_layout", num_types, str(device)), compute)


@torch.library.register_fake("pyg_fast::segment_matmul")
def _(inputs, ptr, other, bias=None, deterministic=None):
    return inputs.new_empty(inputs.size(0), other.size(2))


@torch.library.register_fake("pyg_fast::segment_matmul_weight_grad")
def _(inputs, ptr, grad_out, deterministic):
    return inputs.new_empty(ptr.size(0) - 1, inputs.size(1), grad_out.size(1))


def _use_deterministic(flag: Optional[bool]) -> bool:
    return torch.are_deterministic_algorithms_enabled() if flag is None else flag


def _setup_context(ctx, inputs, output):
    x, ptr, other, bias, deterministic = inputs
    ctx.save_for_backward(x, ptr, other)
    ctx.deterministic = deterministic


def _backward(ctx, grad: Tensor):
    """Gradients of the registered op w.r.t. (inputs, ptr, other, bias, deterministic)."""
    x, ptr, other = ctx.saved_tensors
    grad = grad.contiguous()
    grad_x = grad_other = grad_bias = None
    needs = ctx.needs_input_grad  # the registered op leaves out trailing defaulted arguments
    if needs[0]:
        grad_x = run(torch.ops.pyg_fast.segment_matmul, grad, ptr, other.transpose(1, 2).contiguous(), None, None)
    if needs[2]:
        grad_other = torch.ops.pyg_fast.segment_matmul_weight_grad(x, ptr, grad, _use_deterministic(ctx.deterministic))
    if len(needs) > 3 and needs[3]:
        device_ptr = ptr if ptr.device == grad.device else _layout.cached(ptr, ("on", str(grad.device)),
                                                                           lambda: ptr.to(grad.device))
        grad_bias = reduce_rows(grad.unsqueeze(0), _layout.SegmentLayout(device_ptr, None), "sum")[0]
    return (grad_x, None, grad_other, grad_bias, None)[:len(needs)]


torch.library.register_autograd("pyg_fast::segment_matmul", _backward, setup_context=_setup_context)
segment_matmul_op = torch.ops.pyg_fast.segment_matmul.default


class _EagerCUDA(torch.autograd.Function):
    """The registered op's CUDA kernels and gradients launched from Python, where the C++ program
    does not run (see :func:`_native_program`); called without the dispatcher and the custom-op
    autograd wrappers, which cost tens of microseconds per call in eager mode. Everything derived
    from ptr comes with the plan; the bias gradient comes out of the weight-gradient kernel.
    ``torch.compile`` traces the registered op."""

    @staticmethod
    def forward(ctx, inputs, other, bias, deterministic, plan):
        ctx.save_for_backward(inputs, other)
        ctx.deterministic, ctx.plan = deterministic, plan
        return _cuda_forward(inputs, plan, other, bias)

    @staticmethod
    def backward(ctx, grad):
        x, other = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_other = grad_bias = None
        need_x, need_other, need_bias = ctx.needs_input_grad[:3]
        if need_other or need_bias:  # one pass for all gradients where K and N fit one tile
            K = x.size(1)
            grad_x, fused = _cuda_backward(x, ctx.plan, grad, other if need_x else None,
                                           _use_deterministic(ctx.deterministic), need_bias)
            grad_other = fused[:, :K] if need_bias else fused
            grad_bias = fused[:, K] if need_bias else None
        elif need_x:  # Triton reads the transposed weights through their strides: no copy
            grad_x = _cuda_forward(grad, ctx.plan, other.transpose(1, 2))
        return grad_x, grad_other, grad_bias, None, None


# CUDA implementation (Triton) -------------------------------------------------------------------
def _triton_kernels():
    try:
        from pyg_fast.triton import segment_matmul as kernels
    except ImportError as e:
        raise RuntimeError("pyg_fast: segment_matmul on CUDA runs Triton kernels, but Triton could not be "
                           f"imported ({e}). Install it with `pip install triton`.") from e
    return kernels


def _cuda_plan(ptr: Tensor, num_rows: int, device: torch.device):
    """The kernels' SegmentPlan of ``ptr``: validated and built once per ptr tensor, row count
    and device (one host synchronisation), then found with one cache lookup per call."""
    def compute():
        _layout.ptr_layout(ptr, _layout.rows_of(num_rows, ptr.device), 0)  # reports an invalid ptr
        return _triton_kernels().SegmentPlan(ptr, device)
    return _layout.cached(ptr, ("segmm_plan", num_rows, device), compute)


@functools.lru_cache(maxsize=None)
def _program_op():
    """torch.ops.pyg_fast.segment_matmul_program's C++ callable, without the Python wrapper's
    per-call checks (this path is eager only)."""
    overload = torch.ops.pyg_fast.segment_matmul_program.default
    return getattr(overload, "_op", overload)


def _cuda_call(inputs: Tensor, ptr: Tensor, other: Tensor, bias: Optional[Tensor],
               deterministic: bool) -> Tuple[Plan, bool]:
    """:func:`_plan` for eager CUDA calls. The kernels run from C++ through the program of the call's
    shape (:func:`_native_program`) while the tensors are 16-byte aligned and no Triton launch hook
    (a profiler, which only Triton's own launcher calls) is set, both checked per call; else from
    Python (:class:`_EagerCUDA`, or the forward alone where no gradient flows), as always for
    float64 (cuBLAS loop). The plan is not kept where one of those passing conditions kept the
    program from being built."""
    plan = _cuda_plan(ptr, inputs.size(0), inputs.device)
    grad = torch.is_grad_enabled()
    needs = (grad and inputs.requires_grad, grad and other.requires_grad,
             grad and bias is not None and bias.requires_grad)
    handle = None
    native_allowed = _triton_kernels().native_launch_allowed
    x, w, b = inputs.contiguous(), other.contiguous(), _contiguous(bias)
    ready = _aligned(x, w, b) and native_allowed()
    if inputs.dtype != torch.float64 and ready:
        handle = _native_program(x, plan, w, b, needs, deterministic)
    program_op = _program_op()

    def run(inputs: Tensor, ptr: Tensor, other: Tensor, bias: Optional[Tensor]) -> Tensor:
        inputs, other, bias = inputs.contiguous(), other.contiguous(), _contiguous(bias)
        if handle is not None and _aligned(inputs, other, bias) and native_allowed():
            return program_op(inputs, other, bias, handle)
        if any(needs):
            return _EagerCUDA.apply(inputs, other, bias, deterministic, plan)
        return _cuda_forward(inputs, plan, other, bias)  # inference: no autograd node to build
    return run, ready or inputs.dtype == torch.float64


def _aligned(x: Tensor, w: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether the data is 16-byte aligned, as the kernels the C++ programs launch assume."""
    return not (x.data_ptr() | w.data_ptr() | (0 if bias is None else bias.data_ptr())) & 15


def _native_program(x: Tensor, plan, w: Tensor, bias: Optional[Tensor], needs: Tuple[bool, bool, bool],
                    deterministic: bool) -> Optional[int]:
    """The handle of the C++ program that runs calls of this shape and their backward (kernels
    launched from C++, a C++ autograd node), built once per plan and call shape and released with
    the plan. None for empty sizes, or kernels the C++ launcher cannot describe (warned once)."""
    kernels = _triton_kernels()
    key = ("program", x.size(1), w.size(2), x.dtype, kernels.dot_precision(x.dtype), bias is not None, needs,
           deterministic)

    def build():
        try:
            program = kernels.native_program(x, plan, w, bias, *needs, deterministic)
        except (NotImplementedError, RuntimeError) as e:  # the C++ launcher checks the kernels' parameters
            warnings.warn(f"{e}; segment_matmul launches its kernels from Python instead")
            return None
        if program is None:
            return None
        handle = program.handle()  # an int: far cheaper to pass per call than the object
        weakref.finalize(plan, torch.ops.pyg_fast.segment_matmul_program_release, handle).atexit = False
        return handle
    return plan.launch(key, build)


def _cuda_forward(x: Tensor, plan, w: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    if x.dtype == torch.float64:  # no fp64 tensor cores: cuBLAS per segment
        return _segment_loop(x, plan.bounds, w, bias)
    return _triton_kernels().forward(x, plan, w, bias)


def _cuda_backward(x: Tensor, plan, grad: Tensor, w: Optional[Tensor], deterministic: bool,
                   bias_grad: bool = False) -> Tuple[Optional[Tensor], Tensor]:
    """(the input gradient if ``w`` is given, else None; the weight gradient [T, K, N], or
    [T, K + 1, N] with the bias gradient in row K)."""
    if x.dtype == torch.float64:
        grad_x = _cuda_forward(grad, plan, w.transpose(1, 2)) if w is not None else None
        return grad_x, _segment_loop(x, plan.bounds, grad, None, weight_grad=True, bias_grad=bias_grad)
    return _triton_kernels().backward(x, plan, grad, w, bias_grad, deterministic)


def _cuda_segment_matmul(inputs, ptr, other, bias=None, deterministic=None):
    return _cuda_forward(inputs, _cuda_plan(ptr, inputs.size(0), inputs.device), other, bias)


def _cuda_segment_matmul_weight_grad(inputs, ptr, grad_out, deterministic):
    return _cuda_backward(inputs, _cuda_plan(ptr, inputs.size(0), inputs.device), grad_out, None, deterministic)[1]


def _segment_loop(x: Tensor, bounds, w: Tensor, bias: Optional[Tensor], weight_grad: bool = False,
                  bias_grad: bool = False) -> Tensor:
    """One cuBLAS GEMM per segment (float64 on CUDA); ``bounds`` is ptr as a list."""
    T, K = len(bounds) - 1, x.size(1)
    if weight_grad:
        out = x.new_zeros(T, K + bias_grad, w.size(1))
    else:
        out = x.new_empty(x.size(0), w.size(2))
    for t in range(T):
        lo, hi = bounds[t], bounds[t + 1]
        if hi == lo:
            continue
        if weight_grad:
            torch.mm(x[lo:hi].t(), w[lo:hi], out=out[t, :K])
            if bias_grad:
                torch.sum(w[lo:hi], 0, out=out[t, K])
        elif bias is not None:
            torch.addmm(bias[t], x[lo:hi], w[t], out=out[lo:hi])
        else:
            torch.mm(x[lo:hi], w[t], out=out[lo:hi])
    return out


_LIB = torch.library.Library("pyg_fast", "IMPL")
_LIB.impl("segment_matmul", _cuda_segment_matmul, "CUDA")
_LIB.impl("segment_matmul_weight_grad", _cuda_segment_matmul_weight_grad, "CUDA")
