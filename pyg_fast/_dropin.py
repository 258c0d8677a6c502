"""What every pyg_fast drop-in class shares: it subclasses the PyG class of the same name (so
``isinstance``, ``repr`` and ``state_dict`` keys hold), is made from a PyG module without copying
parameters, and hands TorchScript that PyG class holding the same state (its own forward needs
Python: graph caches, EdgeIndex, the kernels' Python wrappers; PyG's forward scripts)."""
import copy

import torch


class DropIn:
    """Mixin: ``class Ours(DropIn, PyGClass)``."""

    @classmethod
    def _pyg_class(cls) -> type:
        return cls.__mro__[cls.__mro__.index(DropIn) + 1]

    def __prepare_scriptable__(self) -> torch.nn.Module:
        return retyped(self, self._pyg_class())

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
    if hasattr(twin, "_set_jittable_templates"):  # MessagePassing: PyG's generated propagate
        twin._set_jittable_templates()
    return twin
