"""Ops with a Python body (``torch.ops.pyg_fast.<name>``): the preparation and report steps that a
recorded graph (``torch.compile``, ``torch.jit.trace``) must keep as calls.

Registered straight with the dispatcher as one kernel for every backend, where
``torch.library.custom_op`` wraps the body in its own autograd and backend layers: the call of a
range report once a compiled training step cost 44 us against 12 us so (CPU host).
Their outputs are integer tensors or take no gradient, so autograd has nothing to record; the fake
kernel comes from ``torch.library.register_fake`` as for the C++ ops.
"""
from typing import Callable

import torch
from torch.library import Library, infer_schema

_LIBRARY = Library("pyg_fast", "FRAGMENT")


def python_op(name: str) -> Callable[[Callable], torch._ops.OpOverload]:
    """Decorator: registers the function as ``pyg_fast::<name>`` with the schema of its annotations
    (no argument mutated) and returns the op."""
    def register(body: Callable) -> torch._ops.OpOverload:
        _LIBRARY.define(name + infer_schema(body, mutates_args=()))
        _LIBRARY.impl(name, body, "CompositeExplicitAutograd")
        return getattr(torch.ops.pyg_fast, name).default
    return register
