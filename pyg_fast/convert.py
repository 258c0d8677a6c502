"""``pyg_fast.convert(model)``: puts a PyG model on pyg_fast's layers, in place.

One registry maps each PyG class to the pyg_fast class that replaces it (homogeneous and
heterogeneous layers alike); every replacement holds the very same parameters and buffers.
"""
import logging
import warnings
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch_geometric.nn as pyg_nn

from pyg_fast._dropin import retyped

logger = logging.getLogger("pyg_fast")


def registry() -> Dict[type, type]:
    """PyG class -> the pyg_fast class that replaces it."""
    from pyg_fast import hetero, nn
    classes = (nn.GCNConv, nn.GINConv, nn.SAGEConv, nn.GATConv, hetero.RGCNConv, hetero.FastRGCNConv,
               hetero.RGATConv, hetero.HGTConv, hetero.HeteroLinear, hetero.HeteroDictLinear, hetero.HeteroConv)
    return {cls._pyg_class(): cls for cls in classes}


_GROUPED = {"Linear per type": "grouped into one segmented matmul on CUDA",
            "GATConv per relation": "one attention over the relations where gat_group.GROUPED_DEVICES lists the "
                                    "device (none by default)",
            "SAGEConv per relation": "one product of the target features with the summed root weights"}


class Report(NamedTuple):
    """What :func:`convert` did: ``replaced`` (module name, PyG class), ``left`` (module name,
    class, why it kept PyG's implementation) and ``grouped`` (the name of a traced model's
    ModuleDict of per-type layers run as one call, their kind, and the types)."""
    replaced: List[Tuple[str, str]]
    left: List[Tuple[str, str, str]]
    grouped: List[Tuple[str, str, List[str]]]

    def __str__(self) -> str:
        rows = [(name or "<model>", cls, "replaced by pyg_fast's") for name, cls in self.replaced]
        rows += [(name, kind, f"{_GROUPED[kind]} ({', '.join(types)})") for name, kind, types in self.grouped]
        rows += [(name or "<model>", cls, why) for name, cls, why in self.left]
        if not rows:
            return "pyg_fast.convert: the model holds no PyG layer"
        width = [max(len(r[i]) for r in rows) for i in range(2)]
        grouped = f"grouped {len(self.grouped)}, " if self.grouped else ""
        lines = [f"pyg_fast.convert: replaced {len(self.replaced)} PyG module(s), {grouped}left {len(self.left)}"]
        lines += [f"  {name:<{width[0]}}  {cls:<{width[1]}}  {what}" for name, cls, what in rows]
        return "\n".join(lines)


def convert(model: torch.nn.Module, filter_fn: Optional[Callable[[torch.nn.Module, str], bool]] = None,
            verbose: bool = True) -> torch.nn.Module:
    r"""Replaces, in place, every PyG module of ``model`` that pyg_fast implements by the pyg_fast
    module holding the very same parameters and buffers (nothing is copied, so optimisers built
    before the call keep working), and returns the model (or the replacement, when ``model``
    itself is such a module).

    Only exact PyG classes are replaced (a user subclass may override methods the fast path
    skips). In a traced model (``torch_geometric.nn.to_hetero``'s), the per-type linear layers
    that a ModuleDict holds are run as one segmented matmul where there are at least four of the
    same shape, its GAT layers as one attention over the relations where
    ``pyg_fast.hetero.gat_group.GROUPED_DEVICES`` says so, and the SAGE layers of
    the relations into one node type with one product of its features by their summed root
    weights, the layers and state dict unchanged. ``filter_fn(module, name)`` may exclude modules.
    What was replaced and what was left,
    with the reason, is printed (``verbose=False``: logged to the ``pyg_fast`` logger at INFO
    only) and kept as ``model.pyg_fast_report``; ``model.pyg_fast_converted`` lists the
    replaced names. A warning says so when nothing was replaced.

    ``torch.jit.script`` of the converted model scripts PyG's classes holding the same state
    (pyg_fast's forward needs Python) and leaves the eager model as it is.
    """
    classes = registry()
    replaced, left = [], []

    def visit(module: torch.nn.Module, name: str) -> torch.nn.Module:
        cls = type(module)
        if cls in classes.values():
            return module
        if cls in classes:
            if filter_fn is not None and not filter_fn(module, name):
                left.append((name, cls.__name__, "excluded by filter_fn"))
            else:
                replaced.append((name, cls.__name__))
                module = classes[cls].from_pyg(module)
        elif cls.__module__.startswith("torch_geometric.nn") and isinstance(module, pyg_nn.MessagePassing):
            left.append((name, cls.__name__, "no pyg_fast implementation: PyG's own"))
        elif any(issubclass(cls, pyg_cls) for pyg_cls in classes):
            left.append((name, cls.__name__, "a subclass of a PyG layer: its own methods may differ"))
        for child_name, child in list(module._modules.items()):
            if child is None:
                continue
            new = visit(child, f"{name}.{child_name}" if name else child_name)
            if new is not child:
                module._modules[child_name] = new
        return module

    result = visit(model, "")
    grouped = []
    if isinstance(result, torch.fx.GraphModule):  # to_hetero's models: per-type layers
        from pyg_fast.hetero.gat_group import group_typed_gats
        from pyg_fast.hetero.linear import group_typed_linears
        from pyg_fast.hetero.sage_group import group_typed_sages
        for kind, grouper in zip(_GROUPED, (group_typed_linears, group_typed_gats, group_typed_sages)):
            for name, types, why in grouper(result):
                if why:
                    left.append((name, kind, why))
                else:
                    grouped.append((name, kind, types))
    report = Report(replaced, left, grouped)
    if replaced and result is model:
        _keep_eager_model_when_scripted(model, [name for name, _ in replaced])
    result.pyg_fast_report = report
    result.pyg_fast_converted = [name or "<model>" for name, _ in replaced]
    (print if verbose else logger.info)(str(report))
    if not replaced and not grouped:
        warnings.warn("pyg_fast.convert replaced nothing: the model holds no PyG layer that pyg_fast implements "
                      "(see model.pyg_fast_report)", stacklevel=2)
    return result


class _ScriptCopy:
    """A module's ``__prepare_scriptable__``: TorchScript then works on a copy with a submodule
    dict of its own. torch's preparation writes each submodule's scriptable form (for pyg_fast
    layers, the PyG class) back into the dict of the module it walks, which would otherwise be
    the user's eager model."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def __call__(self) -> torch.nn.Module:
        twin = retyped(self.module, type(self.module))
        twin.__dict__.pop("__prepare_scriptable__", None)
        return twin


def _keep_eager_model_when_scripted(model: torch.nn.Module, names: List[str]) -> None:
    """Gives every module above a replaced one a :class:`_ScriptCopy` (unless its class defines
    its own ``__prepare_scriptable__``)."""
    ancestors = {""} | {".".join(name.split(".")[:i]) for name in names for i in range(1, name.count(".") + 1)}
    for name in ancestors:
        module = model.get_submodule(name) if name else model
        if not hasattr(type(module), "__prepare_scriptable__"):
            module.__dict__["__prepare_scriptable__"] = _ScriptCopy(module)
