import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_fast
import pyg_fast.nn as fast_nn
from tests.nn._helpers import PygFastOps, random_graph


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
