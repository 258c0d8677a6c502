"""Launching compiled Triton kernels with little host time.

``kernel[grid](*args)`` binds every argument to the signature, works out Triton's specialisation
of each (dtype, 16-byte alignment, small-integer properties) and hashes it, on every call: about
40 us of host time on the project's H100 machine, which is most of a small heterogeneous layer's
step. :class:`Launcher` goes through ``kernel[grid]`` once per key and keeps the compiled kernel;
later calls with the same key call its launcher directly. The key holds the scalar arguments
themselves (not only the properties Triton specialises on) and each tensor's dtype and 16-byte
alignment, so it is at least as fine as Triton's own cache key: a hit always finds the kernel
that ``kernel[grid]`` would have run.

:func:`native_kernel` goes one step further: it describes one launch to the C++ extension
(``torch.classes.pyg_fast.TritonKernel``), which then launches it with no Python at all, the
tensors' data pointers filled in per call by their role (:class:`Role`).
"""
import enum
from typing import Dict, NamedTuple, Sequence, Tuple

import torch
from torch import Tensor
from triton import knobs
from triton.compiler import CompiledKernel
from triton.runtime.jit import JITFunction


class Launcher:
    """``Launcher(jit_fn)(grid, tensors, scalars, num_warps, num_stages)`` runs
    ``jit_fn[grid](*tensors, *scalars, num_warps=..., num_stages=...)``: the kernel's parameters
    must be its tensors first, then its scalars and constexprs (all hashable)."""

    def __init__(self, fn):
        self.fn = fn
        self.compiles = isinstance(fn, JITFunction)  # else Triton's interpreter runs the Python function
        self._kernels = {}

    @staticmethod
    def _key(tensors: Sequence[Tensor], scalars: tuple, num_warps: int, num_stages: int) -> tuple:
        device = torch.cuda.current_device()  # what kernel[grid] compiles and launches for
        return (device, num_warps, num_stages, scalars, *[(t.dtype, t.data_ptr() % 16 == 0) for t in tensors])

    def __call__(self, grid: Tuple[int, int, int], tensors: Sequence[Tensor], scalars: tuple, num_warps: int,
                 num_stages: int) -> None:
        if not self.compiles:
            self.fn[grid](*tensors, *scalars, num_warps=num_warps, num_stages=num_stages)
            return
        key = self._key(tensors, scalars, num_warps, num_stages)
        kernel = self._kernels.get(key)
        if kernel is None:
            compiled = self.fn[grid](*tensors, *scalars, num_warps=num_warps, num_stages=num_stages)
            if isinstance(compiled, CompiledKernel):  # not a future (Triton's asynchronous compile mode)
                self._kernels[key] = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
            return
        run, function, packed_metadata, compiled = kernel
        stream = torch._C._cuda_getCurrentRawStream(key[0])
        args = (*tensors, *scalars)
        # the same call as the end of JITFunction.run, profiling hooks included where any is set
        enter, exit_ = _active_hook(knobs.runtime.launch_enter_hook), _active_hook(knobs.runtime.launch_exit_hook)
        metadata = compiled.launch_metadata(grid, stream, *args) if enter is not None or exit_ is not None else None
        run(grid[0], grid[1], grid[2], stream, function, packed_metadata, metadata, enter, exit_, *args)

    def compile(self, grid: Tuple[int, int, int], tensors: Sequence[Tensor], scalars: tuple, num_warps: int,
                num_stages: int) -> CompiledKernel:
        """The kernel ``self(...)`` launches with these arguments, compiled and loaded, not run."""
        key = self._key(tensors, scalars, num_warps, num_stages)
        if key not in self._kernels:
            compiled = self.fn.warmup(*tensors, *scalars, grid=grid, num_warps=num_warps, num_stages=num_stages)
            compiled._init_handles()  # loads the module: sets compiled.function
            self._kernels[key] = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
        return self._kernels[key][3]


class KernelCall(NamedTuple):
    """One launch: ``launcher(grid, tensors, scalars, num_warps, num_stages)``."""
    launcher: Launcher
    grid: Tuple[int, int, int]
    tensors: tuple
    scalars: tuple
    num_warps: int
    num_stages: int

    def run(self) -> None:
        self.launcher(self.grid, self.tensors, self.scalars, self.num_warps, self.num_stages)


class Role(enum.IntEnum):
    """The tensors of one call of a C++ program (csrc/triton/kernel_launch.h has the same numbers)."""
    INPUT = 0
    WEIGHT = 1
    BIAS = 2
    OUT = 3
    GRAD = 4
    GRAD_INPUT = 5
    GRAD_WEIGHT = 6
    PARTIALS = 7
    COUNTERS = 8


_PARAM_BYTES = {"i32": 4, "u32": 4, "i64": 8, "u64": 8}


def _active_hook(hook):
    """``hook``, or None where no hook is set (Triton 3.6+ keeps an empty HookChain by default)."""
    return None if hook is None or not getattr(hook, "calls", True) else hook


def native_launch_allowed() -> bool:
    """False while a Triton launch hook is set (a profiler): only Triton's own launcher calls it."""
    return _active_hook(knobs.runtime.launch_enter_hook) is None and _active_hook(knobs.runtime.launch_exit_hook) is None


def native_kernel(call: KernelCall, roles: Dict[Role, Tensor]):
    """``call`` as a ``torch.classes.pyg_fast.TritonKernel``: every argument fixed except the tensors
    of ``roles`` (found by data pointer), whose pointers the C++ caller passes per launch. Other
    tensors (routing tables) are fixed and kept alive by the kernel object. Raises
    NotImplementedError for a kernel the C++ launcher cannot run as Triton would."""
    compiled = call.launcher.compile(call.grid, call.tensors, call.scalars, call.num_warps, call.num_stages)
    meta = compiled.metadata
    if (getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_cooperative_grid", False)
            or getattr(meta, "launch_pdl", False) or getattr(meta, "global_scratch_size", 0)
            or getattr(meta, "profile_scratch_size", 0)):
        raise NotImplementedError(f"pyg_fast: {meta.name} needs clusters, scratch memory or a special launch")
    role_of = {t.data_ptr(): role for role, t in roles.items() if t is not None}
    if len(role_of) != sum(t is not None for t in roles.values()):
        raise NotImplementedError("pyg_fast: two roles share a data pointer")
    args = (*call.tensors, *call.scalars)
    types = list(compiled.src.signature.values())
    if len(types) != len(args):
        raise NotImplementedError(f"pyg_fast: {meta.name} has {len(types)} parameters, called with {len(args)}")
    bits, sizes, param_roles, keep_alive = [], [], [], []
    for arg, ty in zip(args, types):
        if ty == "constexpr":  # compiled in
            continue
        if ty.startswith("*"):
            role = role_of.get(arg.data_ptr(), -1)
            if role < 0:
                keep_alive.append(arg)
            bits.append(arg.data_ptr() if role < 0 else 0)
            sizes.append(8)
            param_roles.append(int(role))
        elif ty in _PARAM_BYTES:
            bits.append(int(arg))
            sizes.append(_PARAM_BYTES[ty])
            param_roles.append(-1)
        else:
            raise NotImplementedError(f"pyg_fast: {meta.name} has a parameter of type {ty}")
    return torch.classes.pyg_fast.TritonKernel(compiled.function, call.tensors[0].device.index, list(call.grid),
                                               meta.num_warps * getattr(meta, "warp_size", 32), meta.shared, bits, sizes, param_roles,
                                               keep_alive)
