import torch
import torch_geometric.nn as pyg_nn

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
    assert model.pyg_fast_converted == ["gin", "convs.0", "convs.1", "convs.2"]
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
