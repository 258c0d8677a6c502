import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_fast
import pyg_fast.nn as fast_nn
from pyg_fast.testing import PygFastOps
from tests.nn._helpers import random_graph


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList([pyg_nn.GCNConv(16, 32), pyg_nn.SAGEConv(32, 32),
                                          pyg_nn.GATConv(32, 8, heads=4), pyg_nn.GraphConv(32, 16)])
        self.gin = pyg_nn.GINConv(torch.nn.Linear(16, 4))

    def forward(self, x, ei):
        for conv in self.convs:
            x = conv(x, ei).relu()
        return self.gin(x, ei)


def test_convert_shares_parameters_and_outputs():
    model = Net()
    x, ei = torch.randn(40, 16), random_graph(40, 300)
    expected = model(x, ei)
    params = [id(p) for p in model.parameters()]
    keys = list(model.state_dict())
    assert fast_nn.convert(model) is model
    assert model.pyg_fast_converted == ["convs.0", "convs.1", "convs.2", "gin"]
    assert type(model.convs[0]) is fast_nn.GCNConv and type(model.convs[3]) is pyg_nn.GraphConv
    assert [id(p) for p in model.parameters()] == params and list(model.state_dict()) == keys
    with PygFastOps() as mode:
        torch.testing.assert_close(model(x, ei), expected, rtol=1e-5, atol=1e-5)
    assert {"index_segment_reduce", "edge_softmax", "sddmm"} <= mode.ops


def test_convert_single_layer():
    conv = pyg_nn.GCNConv(16, 8)
    fast = fast_nn.convert(conv)
    x, ei = torch.randn(10, 16), random_graph(10, 30)
    assert type(fast) is fast_nn.GCNConv and fast.lin.weight is conv.lin.weight
    torch.testing.assert_close(fast(x, ei), conv(x, ei))


def test_convert_reports_what_it_replaced_and_left(capsys):
    model = Net()
    pyg_fast.convert(model)
    printed = capsys.readouterr().out
    assert "replaced 4 PyG module(s), left 1" in printed and "GraphConv" in printed
    assert model.pyg_fast_report.left == [("convs.3", "GraphConv", "no pyg_fast implementation: PyG's own")]


def test_convert_warns_when_it_replaces_nothing():
    with pytest.warns(UserWarning, match="replaced nothing"):
        pyg_fast.convert(pyg_nn.GraphConv(4, 4), verbose=False)


def test_convert_leaves_subclasses_and_filtered_modules():
    class MyGCN(pyg_nn.GCNConv):
        pass
    model = torch.nn.ModuleDict({"mine": MyGCN(4, 4), "kept": pyg_nn.SAGEConv(4, 4), "fast": pyg_nn.SAGEConv(4, 4)})
    pyg_fast.convert(model, filter_fn=lambda module, name: name != "kept", verbose=False)
    assert type(model["fast"]) is fast_nn.SAGEConv and type(model["kept"]) is pyg_nn.SAGEConv
    assert dict((n, why) for n, _, why in model.pyg_fast_report.left) == {
        "mine": "a subclass of a PyG layer: its own methods may differ", "kept": "excluded by filter_fn"}


class ScriptableNet(torch.nn.Module):
    """Net without GATConv, whose PyG forward scripts only behind a typed wrapper."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList([pyg_nn.GCNConv(16, 32), pyg_nn.SAGEConv(32, 32), pyg_nn.GraphConv(32, 16)])
        self.gin = pyg_nn.GINConv(torch.nn.Linear(16, 4))

    def forward(self, x, ei):
        for conv in self.convs:
            x = conv(x, ei).relu()
        return self.gin(x, ei)


def test_scripting_keeps_the_eager_model_and_matches_it():
    model = ScriptableNet()
    pyg_fast.convert(model, verbose=False)
    before = [type(m) for m in model.modules()]
    scripted = torch.jit.script(model)
    assert [type(m) for m in model.modules()] == before  # still pyg_fast's layers
    x, ei = torch.randn(40, 16), random_graph(40, 300)
    torch.testing.assert_close(scripted(x, ei), model(x, ei), rtol=1e-5, atol=1e-5)


def hetero_graph(types, edge_types, num_features=8):
    x = {t: torch.randn(12 + 3 * i, num_features) for i, t in enumerate(types)}
    edges = {et: torch.stack([torch.randint(0, x[et[0]].size(0), (40,)), torch.randint(0, x[et[2]].size(0), (40,))])
             for et in edge_types}
    return x, edges


class Homogeneous(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv
        self.lin = pyg_nn.Linear(16, 3)

    def forward(self, x, edge_index):
        return self.lin(self.conv(x, edge_index).relu())


def assert_same_outputs_and_gradients(stock, fast, x, edges):
    x_fast = {t: v.clone().requires_grad_() for t, v in x.items()}
    x_stock = {t: v.clone().requires_grad_() for t, v in x.items()}
    out_stock, out_fast = stock(x_stock, edges), fast(x_fast, edges)
    assert out_stock.keys() == out_fast.keys()
    seed = {t: torch.randn_like(v) for t, v in out_stock.items()}
    sum((out_stock[t] * seed[t]).sum() for t in seed).backward()
    sum((out_fast[t] * seed[t]).sum() for t in seed).backward()
    for t in seed:
        torch.testing.assert_close(out_fast[t], out_stock[t], rtol=1e-5, atol=1e-5)
    for t in x:
        torch.testing.assert_close(x_fast[t].grad, x_stock[t].grad, rtol=1e-5, atol=1e-5)
    stock_grads = dict(stock.named_parameters())
    for name, p in fast.named_parameters():
        torch.testing.assert_close(p.grad, stock_grads[name].grad, rtol=1e-5, atol=1e-5)


@pytest.fixture
def grouped_on_cpu(monkeypatch):
    """The grouped path on the CPU too and for the tests' small layers (by default CUDA's alone, for
    32-128 features: see HeteroDictLinear)."""
    monkeypatch.setattr(pyg_fast.hetero.HeteroDictLinear, "grouped_devices", ("cpu", "cuda"))
    monkeypatch.setattr(pyg_fast.hetero.HeteroDictLinear, "grouped_features", (1, 1 << 20))


@pytest.mark.parametrize("conv", ["sage", "gat"])
def test_convert_to_hetero_groups_the_per_type_linears(conv, grouped_on_cpu):
    types = ["a", "b", "c", "d"]
    edge_types = [("a", "to", "b"), ("b", "to", "a"), ("c", "to", "d"), ("d", "to", "c"), ("a", "to", "c"),
                  ("b", "to", "d"), ("d", "to", "a"), ("c", "to", "b")]
    layer = pyg_nn.SAGEConv((-1, -1), 16) if conv == "sage" else pyg_nn.GATConv((-1, -1), 16, add_self_loops=False)
    stock = pyg_nn.to_hetero(Homogeneous(layer), (types, edge_types), aggr="sum")
    x, edges = hetero_graph(types, edge_types)
    stock(x, edges)  # initialises the lazy layers
    fast = pyg_fast.convert(copy.deepcopy(stock))
    relations = [f"{s}__{r}__{d}" for s, r, d in edge_types]
    into = {}  # the relations into each type, in the order the model calls them
    for (s, r, d), name in zip(edge_types, relations):
        into.setdefault(d, []).append(name)
    assert fast.pyg_fast_report.grouped == [("lin", "Linear per type", types)] + (
        [("conv", "GATConv per relation", relations)] if conv == "gat" else
        [("conv", "SAGEConv per relation", names) for names in into.values()])
    assert len(fast.pyg_fast_report.replaced) == len(edge_types)
    assert list(fast.state_dict()) == list(stock.state_dict())
    with PygFastOps() as mode:
        assert_same_outputs_and_gradients(stock, fast, x, edges)
    assert "segment_matmul" in mode.ops
    twin = copy.deepcopy(fast)  # a copy runs its own layers
    with torch.no_grad():
        twin.lin["a"].weight.add_(1.0)
    assert not torch.allclose(twin(x, edges)["a"], fast(x, edges)["a"])


def test_convert_to_hetero_leaves_fewer_than_four_types_ungrouped():
    types, edge_types = ["a", "b"], [("a", "to", "b"), ("b", "to", "a")]
    stock = pyg_nn.to_hetero(Homogeneous(pyg_nn.SAGEConv((-1, -1), 16)), (types, edge_types), aggr="sum")
    x, edges = hetero_graph(types, edge_types)
    stock(x, edges)
    fast = pyg_fast.convert(copy.deepcopy(stock))
    assert fast.pyg_fast_report.grouped == []
    assert ("lin", "Linear per type", "2 types: one GEMM per type is as fast below 4") in fast.pyg_fast_report.left
    assert_same_outputs_and_gradients(stock, fast, x, edges)


@pytest.mark.parametrize("num_edge_types,on_cpu,aggr", [(4, True, "sum"), (4, False, "sum"), (3, True, "sum"),
                                                          (4, True, "mean"), (3, True, "mean"), (4, True, "max"),
                                                          (3, True, "max")])
def test_convert_hetero_conv_model(num_edge_types, on_cpu, aggr, monkeypatch):
    """HeteroConv of SAGE convolutions: with four edge types on a grouping device their linear
    layers run as segmented matmuls, else each convolution runs as PyG's HeteroConv calls it; under
    a sum or mean the relations into one node type ("a") share their root term; all as stock."""
    monkeypatch.setattr(pyg_fast.hetero.HeteroDictLinear, "grouped_features", (1, 1 << 20))
    if on_cpu:
        monkeypatch.setattr(pyg_fast.hetero.HeteroDictLinear, "grouped_devices", ("cpu", "cuda"))
    types = ["a", "b", "c"]
    edge_types = [("a", "to", "b"), ("b", "to", "a"), ("c", "to", "a"), ("b", "to", "c")][:num_edge_types]

    class HeteroSAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = pyg_nn.HeteroConv({et: pyg_nn.SAGEConv((-1, -1), 16) for et in edge_types}, aggr=aggr)
            self.lin = torch.nn.ModuleDict({t: pyg_nn.Linear(16, 3) for t in types})

        def forward(self, x, edges):
            return {t: self.lin[t](h.relu()) for t, h in self.conv(x, edges).items()}

    stock = HeteroSAGE()
    x, edges = hetero_graph(types, edge_types)
    stock(x, edges)
    fast = pyg_fast.convert(copy.deepcopy(stock))
    assert [name for name, _ in fast.pyg_fast_report.replaced] == ["conv"] + [f"conv.convs.{key}"
                                                                              for key in stock.conv.convs]
    assert type(fast.conv) is pyg_fast.hetero.HeteroConv and list(fast.state_dict()) == list(stock.state_dict())
    with PygFastOps() as mode:
        assert_same_outputs_and_gradients(stock, fast, x, edges)
    assert "index_segment_reduce" in mode.ops
    assert ("segment_matmul" in mode.ops) == (num_edge_types >= 4 and on_cpu)
