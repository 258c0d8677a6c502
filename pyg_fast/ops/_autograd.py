"""Autograd of the ops: registered with torch.library, called eagerly through a plain
``autograd.Function``.

``torch.library.register_autograd`` makes an op differentiable wherever it is called
(``torch.ops.pyg_fast.*`` directly, torch.compile), but its Python wrapper re-reads the
op's schema on every differentiable call (about 60 us on the CPU, more than a small
graph's kernel). :func:`differentiable` registers the formula and returns the function
the Python wrappers call: the same ``setup_context`` and ``backward`` in an
``autograd.Function``, the kernel reached directly when no gradient is recorded, and the
registered op while tracing.
"""
from typing import Callable

import torch

from pyg_fast.ops import _layout


def differentiable(name: str, backward: Callable, setup_context: Callable) -> Callable:
    """Registers ``backward``/``setup_context`` as the autograd of ``torch.ops.pyg_fast.<name>``
    and returns a function with the op's positional arguments (all of them passed) that
    computes the op, recording ``backward`` when an input requires a gradient."""
    op = getattr(torch.ops.pyg_fast, name).default
    torch.library.register_autograd(f"pyg_fast::{name}", backward, setup_context=setup_context)

    def forward(ctx, *inputs):
        with torch._C._AutoDispatchBelowAutograd():
            output = op(*inputs)
        setup_context(ctx, inputs, output)
        return output

    function = type(f"{name}_autograd", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    # The C++ apply that Function.apply ends in: skips its Python prologue (about 2.5 us), which only
    # matters under functorch transforms (routed through Function.apply below) or for tensors that
    # leaked out of one.
    apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, function)

    def call(*inputs):
        if _layout._compiling(inputs[0]):
            return op(*inputs)
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*inputs):
            if torch._C._are_functorch_transforms_active():
                return function.apply(*inputs)
            return apply(*inputs)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*inputs)

    call.__name__ = call.__qualname__ = name
    return call
