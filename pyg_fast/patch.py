"""``pyg_fast.patch()``: a reversible, global switch that routes PyG's own aggregation
(``torch_geometric.nn.aggr.Aggregation.reduce``, reached by every MessagePassing layer with
a basic aggregation) through :func:`pyg_fast.aggr.reduce`, pyg_fast's segment kernels."""
from torch_geometric.nn.aggr import Aggregation

from pyg_fast.aggr import reduce

_ORIGINAL_REDUCE = Aggregation.reduce


class PatchHandle:
    """Undoes :func:`patch`; also a context manager (``with pyg_fast.patch(): ...``)."""

    def __init__(self):
        self.active = True

    def undo(self) -> None:
        if self.active:
            Aggregation.reduce = _ORIGINAL_REDUCE
            self.active = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def patch() -> PatchHandle:
    """Routes ``Aggregation.reduce`` (sum, mean, max, min) through pyg_fast kernels until the
    returned handle's ``undo()``; other reductions and non-float inputs keep PyG's path.
    Raises if already patched, so two handles never fight over the original."""
    if Aggregation.reduce is not _ORIGINAL_REDUCE:
        raise RuntimeError("pyg_fast.patch() is already active; undo() the existing handle first")
    Aggregation.reduce = reduce
    return PatchHandle()
