"""to_hetero GAT models after convert: the relations' attention layers run as one
(pyg_fast.hetero.gat_group), against the stock model's outputs and gradients."""
import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_fast
import pyg_fast.hetero.gat_group
from pyg_fast.testing import DEVICES, PygFastOps
from tests.nn.test_convert import assert_same_outputs_and_gradients, hetero_graph

TYPES = ["a", "b", "c"]


@pytest.fixture(autouse=True)
def grouped_on_cpu(monkeypatch):
    """The grouped path on every device (by default on none: see GROUPED_DEVICES)."""
    monkeypatch.setattr(pyg_fast.hetero.gat_group, "GROUPED_DEVICES", ("cpu", "cuda"))
RELATIONS = [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a"), ("c", "to", "a"), ("b", "to", "c")]


class TwoLayers(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.conv1, self.conv2 = make(), make()

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def models(make, device="cpu", relations=RELATIONS, num_features=8):
    torch.manual_seed(0)
    stock = pyg_nn.to_hetero(TwoLayers(make), (TYPES, relations), aggr="sum").to(device)
    x, edges = hetero_graph(TYPES, relations, num_features)
    x, edges = ({k: v.to(device) for k, v in d.items()} for d in (x, edges))
    stock(x, edges)  # initialises the lazy layers
    return stock, pyg_fast.convert(copy.deepcopy(stock)), x, edges


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads,concat", [(1, True), (3, True), (2, False)])
def test_grouped_attention_as_stock(heads, concat, device):
    stock, fast, x, edges = models(lambda: pyg_nn.GATConv((-1, -1), 4, heads=heads, concat=concat,
                                                          add_self_loops=False), device)
    names = [f"{s}__{r}__{d}" for s, r, d in RELATIONS]
    assert [(name, kind, rels) for name, kind, rels in fast.pyg_fast_report.grouped] == [
        ("conv1", "GATConv per relation", names), ("conv2", "GATConv per relation", names)]
    assert list(fast.state_dict()) == list(stock.state_dict())
    for _ in range(2):  # the second call reads the combined graph from the cache
        with PygFastOps() as mode:
            assert_same_outputs_and_gradients(stock, fast, x, edges)
        assert {"sddmm", "edge_softmax", "index_segment_reduce"} <= mode.ops
        stock.zero_grad()
        fast.zero_grad()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grouped", [True, False])
def test_attention_over_types_of_different_widths(device, grouped, monkeypatch):
    """Targets of 3, 8 and 17 features: the grouped layer folds each relation's target projection
    into its scores on its own, the per-relation layers each theirs."""
    if not grouped:
        monkeypatch.setattr(pyg_fast.hetero.gat_group, "GROUPED_DEVICES", ())
    torch.manual_seed(0)
    stock = pyg_nn.to_hetero(TwoLayers(lambda: pyg_nn.GATConv((-1, -1), 4, heads=2, add_self_loops=False)),
                             (TYPES, RELATIONS), aggr="sum").to(device)
    x, edges = hetero_graph(TYPES, RELATIONS)
    x = {t: torch.randn(v.size(0), width, device=device) for (t, v), width in zip(x.items(), (3, 8, 17))}
    edges = {k: v.to(device) for k, v in edges.items()}
    stock(x, edges)
    fast = pyg_fast.convert(copy.deepcopy(stock))
    assert_same_outputs_and_gradients(stock, fast, x, edges)


@pytest.mark.parametrize("device", DEVICES)
def test_a_wide_source_into_few_targets_runs_apart(device):
    """"a" has 64 nodes of 64 features and sends 16 edges into the 4 nodes of "z": that relation
    sums the sources' own features and projects the sums, on its own; the others run as one."""
    types, relations = ["a", "b", "z"], [("a", "to", "z"), ("b", "to", "a"), ("a", "to", "b"), ("z", "to", "b")]
    torch.manual_seed(0)
    stock = pyg_nn.to_hetero(TwoLayers(lambda: pyg_nn.GATConv((-1, -1), 32, add_self_loops=False)),
                             (types, relations), aggr="sum").to(device)
    sizes, widths = {"a": 64, "b": 12, "z": 4}, {"a": 64, "b": 8, "z": 8}
    x = {t: torch.randn(sizes[t], widths[t], device=device) for t in types}
    edges = {(s, r, d): torch.stack([torch.randint(0, sizes[s], (16,)), torch.randint(0, sizes[d], (16,))]).to(device)
             for s, r, d in relations}
    stock(x, edges)
    fast = pyg_fast.convert(copy.deepcopy(stock))
    conv = fast.conv1["a__to__z"]
    assert conv._projects_after(conv.lin_src, x["a"], x["z"], pyg_fast.nn._graph.unpack(edges[("a", "to", "z")],
                                                                                         "source_to_target"), None)
    assert_same_outputs_and_gradients(stock, fast, x, edges)


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_attention_with_a_relation_without_edges(device):
    stock, fast, x, edges = models(lambda: pyg_nn.GATConv((-1, -1), 4, heads=2, add_self_loops=False), device)
    edges[("c", "to", "a")] = edges[("c", "to", "a")][:, :0]
    assert_same_outputs_and_gradients(stock, fast, x, edges)


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_attention_dropout_in_training(device):
    stock, fast, x, edges = models(lambda: pyg_nn.GATConv((-1, -1), 4, heads=2, dropout=0.5, add_self_loops=False),
                                   device)
    fast.eval()
    stock.eval()
    assert_same_outputs_and_gradients(stock, fast, x, edges)
    evaluated = fast(x, edges)
    fast.train()
    torch.manual_seed(1)
    trained = fast(x, edges)
    torch.manual_seed(1)
    again = fast(x, edges)
    # the attention is dropped in training (another output), under the same seed the same way
    assert all(not torch.allclose(trained[t], evaluated[t]) for t in trained)
    assert all(torch.equal(trained[t], again[t]) for t in trained)


def test_layers_with_self_loops_are_left_with_the_reason():
    types, relations = ["a", "b"], [("a", "self", "a"), ("b", "self", "b")]  # PyG allows loops there only
    torch.manual_seed(0)
    stock = pyg_nn.to_hetero(TwoLayers(lambda: pyg_nn.GATConv(-1, 4)), (types, relations), aggr="sum")
    x, edges = hetero_graph(types, relations)
    stock(x, edges)
    fast = pyg_fast.convert(copy.deepcopy(stock))
    assert fast.pyg_fast_report.grouped == []
    assert ("conv1", "GATConv per relation",
            "layers with a shared projection, self loops, edge features or a residual") in fast.pyg_fast_report.left
    assert_same_outputs_and_gradients(stock, fast, x, edges)


@pytest.mark.parametrize("device", DEVICES)
def test_explain_and_hooks_take_each_layer_as_pyg_does(device):
    stock, fast, x, edges = models(lambda: pyg_nn.GATConv((-1, -1), 4, heads=2, add_self_loops=False), device)
    seen = []
    for conv in fast.conv1.values():
        conv.register_message_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    for conv in stock.conv1.values():
        conv.register_message_forward_hook(lambda module, inputs, output: None)
    assert_same_outputs_and_gradients(stock, fast, x, edges)
    assert len(seen) == len(RELATIONS)


@pytest.mark.parametrize("device", DEVICES)
def test_a_source_out_of_its_relations_range_raises(device):
    stock, fast, x, edges = models(lambda: pyg_nn.GATConv((-1, -1), 4, add_self_loops=False), device)
    bad = dict(edges)
    # in range of the stacked sources of all relations, not of its own source type ('c': 18 rows)
    bad[("c", "to", "a")] = bad[("c", "to", "a")].clone()
    bad[("c", "to", "a")][0, 3] = x["c"].size(0) + 2
    with pytest.raises((IndexError, ValueError), match="edge_index"):
        fast(x, bad)
        pyg_fast.check_errors()  # on CUDA the kernels report at the next check


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_attention_under_autocast_as_stock(device):
    stock, fast, x, edges = models(lambda: pyg_nn.GATConv((-1, -1), 4, heads=2, add_self_loops=False), device)
    with torch.autocast(device, dtype=torch.bfloat16 if device == "cpu" else torch.float16):
        want, got = stock(x, edges), fast(x, edges)
    for t in want:
        assert got[t].dtype == want[t].dtype
        torch.testing.assert_close(got[t], want[t], rtol=1e-5, atol=1e-5)
