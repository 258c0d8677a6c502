"""Launching compiled Triton kernels with little host time.

``kernel[grid](*args)`` binds every argument to the signature, works out Triton's specialisation
of each (dtype, 16-byte alignment, small-integer properties) and hashes it, on every call: about
40 us of host time on the project's H100 machine, which is most of a small heterogeneous layer's
step. :class:`Launcher` goes through ``kernel[grid]`` once per key and keeps the compiled kernel;
later calls with the same key call its launcher directly. The key holds the scalar arguments
themselves (not only the properties Triton specialises on) and each tensor's dtype and 16-byte
alignment, so it is at least as fine as Triton's own cache key: a hit always finds the kernel
that ``kernel[grid]`` would have run.
"""
from typing import Sequence, Tuple

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

    def __call__(self, grid: Tuple[int, int, int], tensors: Sequence[Tensor], scalars: tuple, num_warps: int,
                 num_stages: int) -> None:
        if not self.compiles:
            self.fn[grid](*tensors, *scalars, num_warps=num_warps, num_stages=num_stages)
            return
        device = torch.cuda.current_device()  # what kernel[grid] compiles and launches for
        key = (device, num_warps, num_stages, scalars, *[(t.dtype, t.data_ptr() % 16 == 0) for t in tensors])
        kernel = self._kernels.get(key)
        if kernel is None:
            compiled = self.fn[grid](*tensors, *scalars, num_warps=num_warps, num_stages=num_stages)
            if isinstance(compiled, CompiledKernel):  # not a future (Triton's asynchronous compile mode)
                self._kernels[key] = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
            return
        run, function, packed_metadata, compiled = kernel
        stream = torch._C._cuda_getCurrentRawStream(device)
        args = (*tensors, *scalars)
        # the same call as the end of JITFunction.run (profiling hooks included)
        run(grid[0], grid[1], grid[2], stream, function, packed_metadata, compiled.launch_metadata(grid, stream, *args),
            knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *args)
