"""Stand-ins for other libraries' APIs, backed by pyg_fast's kernels.

:func:`use_as_torch_scatter` makes code that says ``import torch_scatter`` (and PyG's own calls
of torch_scatter) run on :mod:`pyg_fast.compat.torch_scatter`, without editing imports::

    import pyg_fast.compat
    pyg_fast.compat.use_as_torch_scatter()
    import torch_scatter  # pyg_fast's stand-in
"""
import sys


def use_as_torch_scatter() -> None:
    """Registers :mod:`pyg_fast.compat.torch_scatter` as ``torch_scatter`` for later imports and
    in PyG's modules that bound the name when they were imported (``torch_geometric.typing``,
    ``utils._scatter``, ``utils._segment``), with ``torch_geometric.typing.WITH_TORCH_SCATTER``
    set; works whether torch_geometric was imported before or after. A module that imported the
    real torch_scatter before this call keeps it."""
    import torch_geometric.typing
    import torch_geometric.utils._scatter
    import torch_geometric.utils._segment

    from pyg_fast.compat import torch_scatter as stand_in
    sys.modules["torch_scatter"] = stand_in
    torch_geometric.typing.WITH_TORCH_SCATTER = True
    for module in (torch_geometric.typing, torch_geometric.utils._scatter, torch_geometric.utils._segment):
        module.torch_scatter = stand_in
