"""PyG features that need the unfused path keep working after convert, whatever the order in
which stock and pyg_fast layers were built: explainer masks equal stock PyG's, and
decomposed_layers > 1 gives PyG's results."""
import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.explain import Explainer, GNNExplainer

import pyg_fast
from tests.nn._helpers import random_graph

LAYERS = {"gcn": lambda a, b: pyg_nn.GCNConv(a, b), "sage": lambda a, b: pyg_nn.SAGEConv(a, b),
          "gin": lambda a, b: pyg_nn.GINConv(torch.nn.Linear(a, b)), "gat": lambda a, b: pyg_nn.GATConv(a, b)}


class Net(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.conv1, self.conv2 = make(8, 16), make(16, 4)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def explain(model, x, edge_index):
    torch.manual_seed(1)
    explainer = Explainer(model, GNNExplainer(epochs=20), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    return explainer(x, edge_index, index=3)


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("order", ["stock_first", "fast_first"])
def test_explainer_masks_match_stock(kind, order):
    torch.manual_seed(0)
    if order == "fast_first":  # a pyg_fast layer of the class built before the stock ones
        pyg_fast.convert(LAYERS[kind](2, 2), verbose=False)
    stock = Net(LAYERS[kind])
    fast = pyg_fast.convert(copy.deepcopy(stock), verbose=False)
    x, edge_index = torch.randn(30, 8), random_graph(30, 120)
    expected, got = explain(stock, x, edge_index), explain(fast, x, edge_index)
    torch.testing.assert_close(got.edge_mask, expected.edge_mask, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.node_mask, expected.node_mask, rtol=1e-4, atol=1e-5)
    assert type(fast.conv1).__module__.startswith("pyg_fast") and not fast.conv1.explain


def test_decomposed_layers_give_pyg_results():
    stock = pyg_nn.GCNConv(16, 32, decomposed_layers=2)
    fast = pyg_fast.convert(copy.deepcopy(stock), verbose=False)
    x, edge_index = torch.randn(20, 16), random_graph(20, 80)
    torch.testing.assert_close(fast(x, edge_index), stock(x, edge_index), rtol=1e-5, atol=1e-5)
