import pytest
import torch
import torch_geometric.nn.aggr as pyg_aggr
from torch_geometric.nn import SAGEConv

import pyg_fast.aggr
from pyg_fast.testing import DEVICES, assert_close

NAMES = ["sum", "mean", "max", "min"]
PYG = {"sum": pyg_aggr.SumAggregation, "mean": pyg_aggr.MeanAggregation,
       "max": pyg_aggr.MaxAggregation, "min": pyg_aggr.MinAggregation}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sort", [True, False])
def test_matches_pyg(device, name, sort):
    ours, theirs = pyg_fast.aggr.resolve(name), PYG[name]()
    assert isinstance(ours, PYG[name]) and str(ours) == str(theirs)
    index = torch.randint(0, 20, (200,), device=device)
    if sort:
        index = index.sort().values
    x = torch.randn(200, 16, device=device, requires_grad=True)
    out = ours(x, index, dim_size=25)
    ref = theirs(x, index, dim_size=25)
    assert_close(out, ref, torch.float32)
    grad = torch.randn_like(out)
    (g1,) = torch.autograd.grad(out, x, grad)
    (g2,) = torch.autograd.grad(ref, x, grad)
    assert_close(g1, g2, torch.float32)


@pytest.mark.parametrize("name", NAMES)
def test_ptr_and_dim(name):
    ours, theirs = pyg_fast.aggr.resolve(name), PYG[name]()
    ptr = torch.tensor([0, 3, 3, 7, 10])
    index = torch.tensor([0, 0, 0, 2, 2, 2, 2, 3, 3, 3])
    x = torch.randn(2, 10, 5)
    ref = theirs(x, index, dim=1, dim_size=4)  # PyG needs torch_scatter for ptr along dim 1
    assert_close(ours(x, ptr=ptr, dim=1), ref, torch.float32)
    assert_close(ours(x, index, dim=1, dim_size=4), ref, torch.float32)
    assert_close(ours(x[0], ptr=ptr), theirs(x[0], ptr=ptr), torch.float32)


def test_invalid_dim_size_becomes_pyg_value_error():
    index = torch.tensor([0, 1, 5])
    with pytest.raises(ValueError, match="dim_size"):
        pyg_fast.aggr.SumAggregation()(torch.randn(3, 2), index, dim_size=2)
    with pytest.raises(ValueError, match="dim_size"):
        pyg_fast.aggr.SumAggregation()(torch.randn(3, 2), ptr=torch.tensor([0, 1, 3]), dim_size=5)
    with pytest.raises(ValueError, match="no fast aggregation"):
        pyg_fast.aggr.resolve("median")


@pytest.mark.parametrize("name", ["mean", "max"])
def test_inside_message_passing(name):
    edge_index = torch.randint(0, 30, (2, 150))
    x = torch.randn(30, 8)
    ref = SAGEConv(8, 4, aggr=name)
    conv = SAGEConv(8, 4, aggr=pyg_fast.aggr.resolve(name))
    conv.load_state_dict(ref.state_dict())
    assert_close(conv(x, edge_index), ref(x, edge_index), torch.float32)


@pytest.mark.parametrize("aggr", ["SumAggregation", "MeanAggregation", "MaxAggregation", "MinAggregation"])
def test_layer_with_a_fast_aggregation_scripts(aggr):
    """TorchScript gets PyG's aggregation class (same state); the eager layer keeps ours."""
    conv = SAGEConv(16, 8, aggr=getattr(pyg_fast.aggr, aggr)())
    x, edge_index = torch.randn(30, 16), torch.randint(0, 30, (2, 200))
    scripted = torch.jit.script(conv)
    torch.testing.assert_close(scripted(x, edge_index), conv(x, edge_index), rtol=1e-5, atol=1e-5)
    assert type(conv.aggr_module) is getattr(pyg_fast.aggr, aggr)


def test_scripted_model_under_the_switch():
    conv = SAGEConv(16, 8, aggr="max")
    x, edge_index = torch.randn(30, 16), torch.randint(0, 30, (2, 200))
    with pyg_fast.patch():
        scripted = torch.jit.script(conv)
        torch.testing.assert_close(scripted(x, edge_index), conv(x, edge_index), rtol=1e-5, atol=1e-5)
