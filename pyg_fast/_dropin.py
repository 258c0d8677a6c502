"""What every pyg_fast drop-in class shares: it subclasses the PyG class of the same name (so
``isinstance``, ``repr`` and ``state_dict`` keys hold), is made from a PyG module without copying
parameters, and hands TorchScript that PyG class holding the same state (its own forward needs
Python: graph caches, EdgeIndex, the kernels' Python wrappers; PyG's forward scripts)."""
import copy

import torch
from torch_geometric.nn import MessagePassing


class DropIn:
    """Mixin: ``class Ours(DropIn, PyGClass)``."""

    @classmethod
    def _pyg_class(cls) -> type:
        return cls.__mro__[cls.__mro__.index(DropIn) + 1]

    # Attributes PyG's forward sets in eager mode and its scripted forward needs (a pyg_fast layer's
    # forward never set them): name -> the value a twin starts with.
    _script_defaults: dict = {}

    def __prepare_scriptable__(self) -> torch.nn.Module:
        twin = retyped(self, self._pyg_class())
        for name, value in self._script_defaults.items():
            if name not in twin.__dict__:
                setattr(twin, name, value)
        return twin

    def _set_jittable_templates(self, raise_on_error: bool = False) -> None:
        """MessagePassing's generated ``propagate``, with ``_orig_propagate`` (what explain mode and
        ``decomposed_layers > 1`` switch to) kept as PyG's Python ``propagate``: once a PyG layer of
        the parent class exists, the parent's ``propagate`` is already the generated one, which
        PyG's method would record."""
        super()._set_jittable_templates(raise_on_error)
        cls = type(self)
        if "propagate" not in cls.__dict__ or cls.__dict__.get("_jinja_propagate") is cls.__dict__["propagate"]:
            cls._orig_propagate = MessagePassing.propagate

    @classmethod
    def from_pyg(cls, module: torch.nn.Module) -> torch.nn.Module:
        """A module of this class sharing ``module``'s parameters, buffers and settings."""
        if type(module) is not cls._pyg_class():
            raise TypeError(f"pyg_fast: {cls.__name__}.from_pyg expects a "
                            f"{cls._pyg_class().__module__}.{cls.__name__}, got {type(module).__name__}")
        return retyped(module, cls)


def retyped(module: torch.nn.Module, cls: type) -> torch.nn.Module:
    """A shallow copy of ``module`` of class ``cls``: the same parameters, buffers and
    submodules, in a submodule dict of its own (TorchScript's preparation rewrites the dict of the
    module it is given, which must not be the user's)."""
    twin = copy.copy(module)
    twin.__dict__["_modules"] = dict(module._modules)
    twin.__class__ = cls
    if isinstance(twin, MessagePassing):  # PyG's generated propagate
        twin._set_jittable_templates()
    return twin
