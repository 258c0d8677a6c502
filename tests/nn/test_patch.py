import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.nn.aggr import Aggregation

import pyg_fast
from pyg_fast import tuning
from pyg_fast.ops._layout import REUSED_FROM_USE
from pyg_fast.patch import _ORIGINAL_REDUCE, patch
from pyg_fast.testing import PygFastOps
from tests.nn._helpers import random_graph


SHIPPED_MIN_ELEMENTS = dict(tuning.PATCH_MIN_ELEMENTS)


@pytest.fixture(autouse=True)
def small_inputs_on_kernels(monkeypatch):
    """The tests' inputs are small: the switch takes them to the kernels here."""
    monkeypatch.setattr(tuning, "PATCH_MIN_ELEMENTS", {})


def test_patch_leaves_small_reductions_to_pyg(monkeypatch):
    """Under the switch a reduction below PATCH_MIN_ELEMENTS keeps PyG's scatter on every use,
    one above takes the kernels from its REUSED_FROM_USE-th use, and a pyg_fast aggregation a user
    chose takes them whatever the size."""
    monkeypatch.setattr(tuning, "PATCH_MIN_ELEMENTS", SHIPPED_MIN_ELEMENTS)
    limit = tuning.PATCH_MIN_ELEMENTS["cpu"]
    index = torch.randint(0, 50, (1000,))
    small, large = torch.randn(1000, 4), torch.randn(1000, limit // 1000 + 1)
    stock = pyg_nn.aggr.SumAggregation()
    with patch():
        for x, on_kernels in ((small, False), (large, True)):
            for _ in range(REUSED_FROM_USE):
                with PygFastOps() as mode:
                    out = stock(x, index, dim_size=50)
            torch.testing.assert_close(out, torch.zeros(50, x.size(1)).index_add_(0, index, x), rtol=1e-5, atol=1e-5)
            assert bool(mode.ops) == on_kernels
    ours = pyg_fast.aggr.SumAggregation()
    for _ in range(REUSED_FROM_USE):
        with PygFastOps() as mode:
            ours(small, index, dim_size=50)
    assert mode.ops & {"segment_reduce", "index_segment_reduce"}


@pytest.mark.parametrize("conv", [lambda: pyg_nn.SAGEConv(16, 8, aggr="max"), lambda: pyg_nn.GraphConv(16, 8),
                                  lambda: pyg_nn.GATConv(16, 4, heads=2)])
def test_patch_routes_aggregation_and_undoes(conv):
    """An index used a few times takes PyG's scatter (grouping it first would cost more); from its
    REUSED_FROM_USE-th use the kernels run on it, prepared once. GAT's index (with self loops) is
    new every call, used three times in it (softmax's max and sum, then aggregation)."""
    layer = conv()
    x, ei = torch.randn(30, 16, requires_grad=True), random_graph(30, 200)
    expected = layer(x, ei)
    (g_ref,) = torch.autograd.grad(expected.sum(), x)
    with patch() as handle:
        for call in range(REUSED_FROM_USE):
            with PygFastOps() as mode:
                out = layer(x, ei)
                (g,) = torch.autograd.grad(out.sum(), x)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-5)
            if not isinstance(layer, pyg_nn.GATConv):
                assert bool(mode.ops & {"segment_reduce", "index_segment_reduce"}) == (call == REUSED_FROM_USE - 1)
        with pytest.raises(RuntimeError, match="already active"):
            patch()
    assert not handle.active and Aggregation.reduce is _ORIGINAL_REDUCE


def test_handle_reentered_switches_the_same_sites_back_on():
    import sys
    import torch_geometric.utils as pyg_utils
    patch_module = sys.modules["pyg_fast.patch"]
    handle = patch()
    handle.undo()
    holders = [m for m, _ in handle.rebound]
    assert Aggregation.reduce is _ORIGINAL_REDUCE and all(m.scatter is pyg_utils.scatter for m in holders)
    layer, x, ei = pyg_nn.GraphConv(16, 8), torch.randn(30, 16), random_graph(30, 200)
    expected = layer(x, ei)
    for _ in range(2):
        with handle:
            assert handle.active and Aggregation.reduce is not _ORIGINAL_REDUCE
            assert all(m.scatter is patch_module.scatter for m in holders)
            with pytest.raises(RuntimeError, match="already active"):
                patch()
            for _ in range(REUSED_FROM_USE):
                torch.testing.assert_close(layer(x, ei), expected, rtol=1e-5, atol=1e-5)
        assert not handle.active and Aggregation.reduce is _ORIGINAL_REDUCE
        assert all(m.scatter is pyg_utils.scatter for m in holders)


def test_patched_layer_scripts():
    with patch():
        layer = pyg_nn.SAGEConv(16, 8)
        x, ei = torch.randn(10, 16), random_graph(10, 30)
        torch.testing.assert_close(torch.jit.script(layer)(x, ei), layer(x, ei), rtol=1e-5, atol=1e-5)


def test_patch_rebinds_scatter_and_undo_restores_every_site():
    import sys
    import torch_geometric.utils as pyg_utils
    patch_module = sys.modules["pyg_fast.patch"]  # the module (pyg_fast.patch is the function)
    holders = [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("torch_geometric")
               and getattr(m, "scatter", None) is pyg_utils.scatter]
    with patch() as handle:
        assert handle.sites["scatter"] == len(holders) and len(holders) > 10  # PyG's layers import it
        assert all(m.scatter is patch_module.scatter for m in holders)
        src, index = torch.randn(40, 8), torch.randint(0, 10, (40,))
        expected = pyg_utils.scatter(src, index, 0, 10, "max")
        for _ in range(REUSED_FROM_USE):  # PyG's scatter on an index's first uses, the kernel then
            with PygFastOps() as mode:
                torch.testing.assert_close(patch_module.scatter(src, index, 0, 10, "max"), expected)
        assert mode.ops & {"segment_reduce", "index_segment_reduce"}  # rows gathered in index order
    assert all(m.scatter is pyg_utils.scatter for m in holders)


@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
def test_patch_rebinds_segment_with_pygs_results(reduce):
    import sys
    import torch_geometric.utils as pyg_utils
    import torch_geometric.utils._softmax as pyg_softmax
    patch_module = sys.modules["pyg_fast.patch"]
    src = torch.randn(12, 5, dtype=torch.float64)
    ptr = torch.tensor([0, 4, 4, 9, 12])  # an empty segment: 0, as PyG gives
    expected = pyg_utils.segment(src, ptr, reduce)
    with patch() as handle:
        assert handle.sites["segment"] >= 2 and pyg_softmax.segment is patch_module.segment
        with PygFastOps() as mode:
            got = pyg_utils.segment(src, ptr, reduce)
        assert "segment_reduce" in mode.ops
    torch.testing.assert_close(got, expected)
    assert pyg_utils.segment is patch_module._PYG_SEGMENT and pyg_softmax.segment is patch_module._PYG_SEGMENT
