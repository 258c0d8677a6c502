"""HeteroModuleWrapper: runs an existing PyG heterogeneous module on pyg_fast's segmented matmul,
leaving the module itself as it is (``pyg_fast.convert`` replaces modules in place instead)."""
import copy

import torch

from pyg_fast.convert import registry
from pyg_fast.hetero.hgt_conv import HGTConv, convert_submodules


def fast_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of ``module`` as its pyg_fast class, sharing its parameters and buffers;
    ``module`` itself is left unchanged."""
    cls = type(module)
    fast_classes = {pyg: fast for pyg, fast in registry().items() if fast.__module__.startswith("pyg_fast.hetero")}
    if cls in fast_classes.values():
        return module
    if cls not in fast_classes:
        supported = ", ".join(c.__name__ for c in fast_classes)
        raise TypeError(f"pyg_fast: HeteroModuleWrapper supports {supported}; got {cls.__name__}")
    fast = copy.copy(module)
    fast.__class__ = fast_classes[cls]
    fast._modules = {name: copy.copy(sub) for name, sub in module._modules.items()}
    if isinstance(fast, HGTConv):
        convert_submodules(fast)
    return fast


class HeteroModuleWrapper(torch.nn.Module):
    r"""Wraps a PyG ``RGCNConv``, ``FastRGCNConv``, ``RGATConv``, ``HGTConv``, ``HeteroLinear``
    or ``HeteroDictLinear`` so that it runs on pyg_fast's kernels with the same results.

    The forward signature is the wrapped module's, plus an optional ``tensor_slice=`` keyword
    (a :class:`TensorSlice` of the types, or a :class:`RelationSlice` for RGCN). Without it the
    slice is built on first use and cached while the ``edge_type`` / ``type_vec`` tensor is
    alive and unchanged. Parameters are shared with the wrapped module, and ``state_dict`` keys
    are the wrapped module's own (no ``module.`` prefix), so checkpoints are interchangeable.
    """

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = fast_copy(module)
        self._register_state_dict_hook(_drop_prefix)
        self._register_load_state_dict_pre_hook(_add_prefix, with_module=False)

    def reset_parameters(self):
        self.module.reset_parameters()

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def __repr__(self) -> str:
        return f"HeteroModuleWrapper({self.module!r})"


FastenModule = HeteroModuleWrapper  # the name the design (FASTEN) gives it


def _drop_prefix(module, state_dict, prefix, local_metadata):
    inner = prefix + "module."
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)
    return state_dict


def _add_prefix(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "module.")]:
        state_dict[prefix + "module." + key[len(prefix):]] = state_dict.pop(key)
