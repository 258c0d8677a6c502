"""``convert(model)``: swap PyG layers for pyg_fast's, sharing their parameters."""
import logging
from typing import Dict, List, Type

import torch

from pyg_fast.nn._fused import FusedLayer
from pyg_fast.nn.gat_conv import GATConv
from pyg_fast.nn.gcn_conv import GCNConv
from pyg_fast.nn.gin_conv import GINConv
from pyg_fast.nn.sage_conv import SAGEConv

logger = logging.getLogger("pyg_fast")

# PyG class -> pyg_fast class that replaces it.
FUSED_LAYERS: Dict[Type[torch.nn.Module], Type[FusedLayer]] = {
    cls._pyg_class(): cls for cls in (GCNConv, GINConv, SAGEConv, GATConv)
}


def convert(model: torch.nn.Module, verbose: bool = False) -> torch.nn.Module:
    r"""Replaces, in place, every PyG layer of ``model`` that pyg_fast implements by the
    pyg_fast layer holding the very same parameters and buffers (nothing is copied, so
    optimisers built before the call keep working), and returns the model.

    Only exact PyG classes are replaced (user subclasses may override methods the
    fused path skips). The replaced module names are logged to the ``pyg_fast`` logger
    (and printed with ``verbose=True``) and stored as ``model.pyg_fast_converted``.
    """
    if type(model) in FUSED_LAYERS:
        fused = FUSED_LAYERS[type(model)].from_pyg(model)
        _report(fused, ["<model>"], verbose)
        return fused
    replaced: List[str] = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) in FUSED_LAYERS:
                setattr(module, child_name, FUSED_LAYERS[type(child)].from_pyg(child))
                replaced.append(f"{name}.{child_name}" if name else child_name)
    _report(model, replaced, verbose)
    return model


def _report(model: torch.nn.Module, replaced: List[str], verbose: bool) -> None:
    model.pyg_fast_converted = replaced
    message = (f"pyg_fast.nn.convert: replaced {len(replaced)} layer(s)"
               + (": " + ", ".join(replaced) if replaced else " (no supported PyG layers found)"))
    logger.info(message)
    if verbose:
        print(message)
