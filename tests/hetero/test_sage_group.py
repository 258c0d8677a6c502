"""to_hetero SAGE models after convert: the relations into one node type share one product of its
features with their summed root weights (pyg_fast.hetero.sage_group), against the stock model's
outputs and gradients."""
import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch._dynamo.utils import counters

import pyg_fast
from pyg_fast.testing import DEVICES, PygFastOps
from tests.hetero.test_gat_group import RELATIONS, TYPES, TwoLayers
from tests.nn.test_convert import assert_same_outputs_and_gradients, hetero_graph

INTO_A = ["b__to__a", "a__self__a", "c__to__a"]  # the relations into "a"; "b" and "c" have one each


def models(make, device="cpu", aggr="sum", widths=(8, 8, 8)):
    torch.manual_seed(0)
    stock = pyg_nn.to_hetero(TwoLayers(make), (TYPES, RELATIONS), aggr=aggr).to(device)
    x, edges = hetero_graph(TYPES, RELATIONS)
    x = {t: torch.randn(v.size(0), width, device=device) for (t, v), width in zip(x.items(), widths)}
    edges = {k: v.to(device) for k, v in edges.items()}
    stock(x, edges)  # initialises the lazy layers
    return stock, pyg_fast.convert(copy.deepcopy(stock)), x, edges


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggr,widths,over_relations", [("mean", (8, 8, 8), "sum"), ("sum", (3, 8, 17), "sum"),
                                                        ("mean", (5, 5, 1), "sum"), ("sum", (8, 8, 8), "mean")])
def test_summed_roots_as_stock(device, aggr, widths, over_relations):
    """``aggr``: each layer's over its neighbours; ``over_relations``: to_hetero's over the
    relations into a type (a mean divides their sum)."""
    stock, fast, x, edges = models(lambda: pyg_nn.SAGEConv((-1, -1), 6, aggr=aggr), device, over_relations,
                                   widths)
    assert [(name, kind, rels) for name, kind, rels in fast.pyg_fast_report.grouped] == [
        ("conv1", "SAGEConv per relation", INTO_A), ("conv2", "SAGEConv per relation", INTO_A)]
    assert list(fast.state_dict()) == list(stock.state_dict())
    for _ in range(2):
        with PygFastOps() as mode:
            assert_same_outputs_and_gradients(stock, fast, x, edges)
        assert "index_segment_reduce" in mode.ops or "gather_scatter" in mode.ops
        stock.zero_grad()
        fast.zero_grad()


def test_relations_read_apart_from_their_sum_are_left_with_the_reason():
    stock, fast, x, edges = models(lambda: pyg_nn.SAGEConv((-1, -1), 6), aggr="max")
    assert fast.pyg_fast_report.grouped == []
    assert ("conv1", "SAGEConv per relation", "the relations' outputs are read other than through their sum") in \
        fast.pyg_fast_report.left
    assert_same_outputs_and_gradients(stock, fast, x, edges)


def test_normalised_layers_are_left_with_the_reason():
    stock, fast, x, edges = models(lambda: pyg_nn.SAGEConv((-1, -1), 6, normalize=True))
    assert fast.pyg_fast_report.grouped == []
    assert ("conv1", "SAGEConv per relation", "layers without a root weight or with a normalised output") in \
        fast.pyg_fast_report.left
    assert_same_outputs_and_gradients(stock, fast, x, edges)


@pytest.mark.parametrize("device", DEVICES)
def test_hooks_take_each_layer_as_pyg_does(device):
    stock, fast, x, edges = models(lambda: pyg_nn.SAGEConv((-1, -1), 6), device)
    seen = []
    for conv in fast.conv1.values():
        conv.register_message_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    assert_same_outputs_and_gradients(stock, fast, x, edges)
    assert len(seen) == len(RELATIONS)


def test_grouped_model_compiles_without_breaks():
    stock, fast, x, edges = models(lambda: pyg_nn.SAGEConv((-1, -1), 6))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fast, fullgraph=True)
    got, want = compiled(x, edges), stock(x, edges)
    assert sum(counters["graph_break"].values()) == 0
    for t in want:
        torch.testing.assert_close(got[t], want[t], rtol=1e-5, atol=1e-5)
