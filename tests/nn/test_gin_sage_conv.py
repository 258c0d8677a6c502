import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric import EdgeIndex
from torch_geometric.utils import to_torch_csc_tensor

import pyg_fast.nn as fast_nn
from pyg_fast import tuning
from pyg_fast.nn._fused import FusedLayer
from pyg_fast.testing import DEVICES
from tests.nn._helpers import compare, random_graph

OPS = {"index_segment_reduce"}


def ops(route, aggr="sum"):
    """The ops a layer's first call runs: a sum or mean over a new graph takes the COO route there."""
    return {"gather_scatter"} if route == "coo" and aggr in ("sum", "mean") else OPS


def gin_pair(device, in_channels=16, out_channels=32, dtype=torch.float32, **kwargs):
    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(in_channels, out_channels), torch.nn.ReLU(),
                                   torch.nn.Linear(out_channels, out_channels))

    ref = pyg_nn.GINConv(mlp(), **kwargs).to(device, dtype)
    fast = fast_nn.GINConv(mlp(), **kwargs).to(device, dtype)
    fast.load_state_dict(ref.state_dict())
    if kwargs.get("train_eps"):
        with torch.no_grad():
            ref.eps.fill_(0.3)
            fast.eps.fill_(0.3)
    return ref, fast


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{}, {"eps": 0.5}, {"train_eps": True}])
def test_gin_matches_pyg(device, options, route):
    ref, fast = gin_pair(device, **options)
    assert str(fast) == str(ref) and list(fast.state_dict()) == list(ref.state_dict())
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 16, device=device, requires_grad=True)
    compare(ref, fast, (x, ei), (x,), expect_ops=ops(route))
    compare(ref, fast, (x, EdgeIndex(ei, sparse_size=(40, 40))), (x,), expect_ops=ops(route))
    compare(ref, fast, (x, to_torch_csc_tensor(ei, size=(40, 40)).t()), (x,), expect_ops=ops(route))


@pytest.mark.parametrize("device", DEVICES)
def test_gin_eps_changed_in_place(device):
    """The default eps (a constant 0 buffer) is read once per value: loading another eps
    afterwards (in place, as load_state_dict does) must change the output as in PyG."""
    ref, fast = gin_pair(device)
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 16, device=device, requires_grad=True)
    compare(ref, fast, (x, ei), (x,), expect_ops=OPS)
    state = ref.state_dict()
    state["eps"] = torch.tensor([0.25], device=device)
    ref.load_state_dict(state)
    fast.load_state_dict(state)
    compare(ref, fast, (x, ei), (x,), expect_ops=OPS)
    assert not torch.allclose(fast(x, ei), ref.nn(ref.propagate(ei, x=(x, x)) + x))  # eps is used


@pytest.mark.parametrize("device", DEVICES)
def test_gin_bipartite(device, route):
    ref, fast = gin_pair(device)
    ei = random_graph(30, 200, device, num_dst=12)
    x1 = torch.randn(30, 16, device=device, requires_grad=True)
    x2 = torch.randn(12, 16, device=device, requires_grad=True)
    compare(ref, fast, ((x1, x2), ei), (x1, x2), expect_ops=ops(route))
    compare(ref, fast, ((x1, None), ei, (30, 12)), (x1,), expect_ops=ops(route))


def aggregated_widths(monkeypatch) -> list:
    """The feature width of every neighbour aggregation the fast layers run from now on."""
    widths, aggregate = [], FusedLayer._aggregate_neighbours

    def recorded(self, x_src, *args):
        widths.append(x_src.size(1))
        return aggregate(self, x_src, *args)

    monkeypatch.setattr(FusedLayer, "_aggregate_neighbours", recorded)
    return widths


def narrowing_inputs(device):
    """48-wide float64 inputs: a bipartite graph (300 sources, 12 targets, 30 edges: 8 products
    of a source row cost more than the 40 values saved on each edge at either device's
    GATHER_COST) with both sides' features, and a square graph of 40 nodes with theirs."""
    def features(n):
        return torch.randn(n, 48, device=device, dtype=torch.float64, requires_grad=True)

    return random_graph(300, 30, device, num_dst=12), features(300), features(12), random_graph(40, 300, device), \
        features(40)


def narrowing_gin_pair(device, **kwargs):
    """GIN layers whose MLP starts with Linear(48, 8), in float64."""
    return gin_pair(device, 48, 8, torch.float64, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{}, {"eps": 0.5}, {"train_eps": True}])
def test_gin_narrowing_aggregates_products(device, options, route, monkeypatch):
    """A Sequential starting with Linear(48, 8): the layer sums the 8-wide products, with PyG's
    outputs and gradients (eps's and every weight's included)."""
    ref, fast = narrowing_gin_pair(device, **options)
    widths = aggregated_widths(monkeypatch)
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 48, device=device, dtype=torch.float64, requires_grad=True)
    compare(ref, fast, (x, ei), (x,), expect_ops=ops(route))
    assert widths == [8]


@pytest.mark.parametrize("device", DEVICES)
def test_gin_narrowing_keeps_the_order_where_it_must(device, monkeypatch):
    """PyG's order for separate target features, a hook on the first linear layer or on the
    Sequential (which must run), and an nn that is not a Sequential; products for a pair without
    target features and no more sources than targets."""
    widths = aggregated_widths(monkeypatch)
    ei, x1, x2, ei_square, x = narrowing_inputs(device)
    ref, fast = narrowing_gin_pair(device)
    compare(ref, fast, ((x1, x2), ei), (x1, x2))
    compare(ref, fast, ((x1, None), ei, (300, 12)), (x1,))  # sources' products that do not pay
    calls = []
    fast.nn[0].register_forward_hook(lambda module, inputs, output: calls.append("first"))
    compare(ref, fast, (x, ei_square), (x,))
    ref, fast = narrowing_gin_pair(device)
    fast.nn.register_forward_pre_hook(lambda module, inputs: calls.append("nn"))
    compare(ref, fast, (x, ei_square), (x,))
    assert calls == ["first", "nn"] and widths == [48, 48, 48, 48]
    ref, fast = narrowing_gin_pair(device)
    ei_wide = random_graph(12, 100, device, num_dst=30)
    x3 = torch.randn(12, 48, device=device, dtype=torch.float64, requires_grad=True)
    compare(ref, fast, ((x3, None), ei_wide, (12, 30)), (x3,))
    assert widths[-1] == 8
    ref = pyg_nn.GINConv(pyg_nn.MLP([48, 8, 8])).to(device, torch.float64)
    fast = fast_nn.GINConv(pyg_nn.MLP([48, 8, 8])).to(device, torch.float64)
    fast.load_state_dict(ref.state_dict())
    compare(ref, fast, (x, ei_square), (x,))
    assert widths[-1] == 48


def sage_pair(device, in_channels=16, out_channels=32, dtype=torch.float32, **kwargs):
    ref = pyg_nn.SAGEConv(in_channels, out_channels, **kwargs).to(device, dtype)
    fast = fast_nn.SAGEConv(in_channels, out_channels, **kwargs).to(device, dtype)
    fast.load_state_dict(ref.state_dict())
    return ref, fast


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggr", ["mean", "sum", "max", "min"])
@pytest.mark.parametrize("options", [{}, {"normalize": True}, {"root_weight": False}, {"project": True},
                                     {"bias": False}])
def test_sage_matches_pyg(device, aggr, options, route):
    ref, fast = sage_pair(device, aggr=aggr, **options)
    assert str(fast) == str(ref) and list(fast.state_dict()) == list(ref.state_dict())
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 16, device=device, requires_grad=True)
    compare(ref, fast, (x, ei), (x,), expect_ops=ops(route, aggr))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_sage_bipartite_and_sparse(device, aggr, route):
    ref, fast = sage_pair(device, in_channels=(16, 8), aggr=aggr)
    ei = random_graph(30, 200, device, num_dst=12)
    x1 = torch.randn(30, 16, device=device, requires_grad=True)
    x2 = torch.randn(12, 8, device=device, requires_grad=True)
    compare(ref, fast, ((x1, x2), ei), (x1, x2), expect_ops=ops(route, aggr))
    adj_t = to_torch_csc_tensor(ei, size=(30, 12)).t()
    if aggr in ("max", "min") and torch.device(device).type == "cuda":
        # PyG's torch.sparse path has no CUDA max/min: compare with its edge_index result
        torch.testing.assert_close(fast((x1, x2), adj_t), ref((x1, x2), ei), rtol=1e-5, atol=1e-5)
    else:
        compare(ref, fast, ((x1, x2), adj_t), (x1, x2), expect_ops=ops(route, aggr))
    compare(ref, fast, ((x1, None), ei, (30, 12)), (x1,), expect_ops=ops(route, aggr))


def narrowing_pair(device, aggr="mean", **kwargs):
    """SAGE layers 48 -> 8, in float64."""
    return sage_pair(device, 48, 8, torch.float64, aggr=aggr, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize("options", [{}, {"root_weight": False}, {"bias": False}, {"root_weight": False, "bias": False},
                                     {"project": True}, {"normalize": True}])
def test_sage_narrowing_aggregates_products(device, aggr, options, route, monkeypatch):
    """48 -> 8 channels: the layer aggregates lin_l's 8-wide products, with PyG's outputs and
    gradients (every parameter's included)."""
    ref, fast = narrowing_pair(device, aggr, **options)
    widths = aggregated_widths(monkeypatch)
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 48, device=device, dtype=torch.float64, requires_grad=True)
    compare(ref, fast, (x, ei), (x,), expect_ops=ops(route, aggr))
    weight = torch.rand(ei.size(1), device=device, dtype=torch.float64)
    adj_t = to_torch_csc_tensor(ei, weight, size=(40, 40)).t()  # a weighted aggregation (the sparse values)
    compare(ref, fast, (x, adj_t), (x,))
    assert widths == [8, 8]


@pytest.mark.parametrize("device", DEVICES)
def test_sage_narrowing_keeps_the_order_where_it_must(device, monkeypatch):
    """PyG's order (aggregate, then lin_l) where the sources' products do not pay, a max, a lin_l with a
    forward hook (which must run) and lazy channels (until initialised)."""
    widths = aggregated_widths(monkeypatch)
    ei, x1, x2, ei_square, x = narrowing_inputs(device)
    ref, fast = narrowing_pair(device)
    compare(ref, fast, ((x1, x2), ei), (x1, x2))
    ref, fast = narrowing_pair(device, aggr="max")
    compare(ref, fast, (x, ei_square), (x,))
    ref, fast = narrowing_pair(device)
    calls = []
    fast.lin_l.register_forward_hook(lambda module, inputs, output: calls.append(output.shape))
    compare(ref, fast, (x, ei_square), (x,))
    assert calls == [(40, 8)] and widths == [48, 48, 48]
    lazy = fast_nn.SAGEConv(-1, 8).to(device, torch.float64)
    lazy(x, ei_square)
    assert widths[-1] == 48
    lazy(x, ei_square)
    assert widths[-1] == 8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layer", ["sage", "gin"])
def test_narrowing_follows_the_gradients(device, layer, monkeypatch):
    """48 -> 32 channels: products where they move fewer values forward and backward. Without
    gradients, or with one for x (both orders then differentiate the aggregation), 32 < 48; in a
    first layer (only the weights need a gradient) the products' aggregation is differentiated
    and the inputs' is not, 2 x 32 >= 48: PyG's order. Outputs and gradients as PyG's."""
    widths = aggregated_widths(monkeypatch)
    ref, fast = sage_pair(device, 48, 32, torch.float64) if layer == "sage" else gin_pair(device, 48, 32, torch.float64)
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 48, device=device, dtype=torch.float64)
    compare(ref, fast, (x, ei))  # weights only
    x_grad = x.clone().requires_grad_()
    compare(ref, fast, (x_grad, ei), (x_grad,))
    with torch.no_grad():
        torch.testing.assert_close(fast(x, ei), ref(x, ei))
    assert widths == [48, 32, 32]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layer", ["sage", "gin"])
def test_products_pay_over_many_edges(device, layer, monkeypatch):
    """More sources than targets (30 into 12) over 200 edges, 48 -> 8 channels: 18 more rows of
    products (48 x 8 multiply-adds each, three passes with x's gradient) cost less than the 80
    values saved on each edge at either device's GATHER_COST, so the layer aggregates products,
    as PyG's numbers; with the cost of a gathered value taken as 0, PyG's order."""
    widths = aggregated_widths(monkeypatch)
    ref, fast = narrowing_pair(device) if layer == "sage" else narrowing_gin_pair(device)
    ei = random_graph(30, 200, device, num_dst=12)
    x1 = torch.randn(30, 48, device=device, dtype=torch.float64, requires_grad=True)
    compare(ref, fast, ((x1, None), ei, (30, 12)), (x1,))
    assert widths == [8]
    monkeypatch.setitem(tuning.GATHER_COST, torch.device(device).type, 0.0)
    compare(ref, fast, ((x1, None), ei, (30, 12)), (x1,))
    assert widths == [8, 48]


def test_sage_other_aggregations_use_pyg():
    ref, fast = sage_pair("cpu", aggr=["mean", "max"])
    x, ei = torch.randn(20, 16), random_graph(20, 80)
    _, _, ops = compare(ref, fast, (x, ei))
    assert not ops


def test_sage_compile():
    ref, fast = sage_pair("cpu")
    x, ei = torch.randn(20, 16), random_graph(20, 80)
    fast(x, ei)  # warm the layout cache outside the compiled region
    compiled = torch.compile(fast, fullgraph=True)
    torch.testing.assert_close(compiled(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)


def test_jit_script():
    ref, fast = gin_pair("cpu")
    x, ei = torch.randn(20, 16), random_graph(20, 80)
    torch.testing.assert_close(torch.jit.script(fast)(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)
