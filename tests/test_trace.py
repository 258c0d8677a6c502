"""torch.jit.trace never bakes in a property of its example: traced on a graph whose edges are
sorted by target, every op, layer and the global switch give the reference's numbers on graphs
that differ in order, size and degrees."""
import copy
import warnings

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_fast
import pyg_fast.aggr
import pyg_fast.nn
from pyg_fast.testing import DEVICES, assert_close, scatter_reference
from tests.nn._helpers import random_graph


def sorted_graph(num_nodes, num_edges, device):
    edge_index = random_graph(num_nodes, num_edges, device)
    return edge_index[:, edge_index[1].argsort(stable=True)]


def trace(fn, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return torch.jit.trace(fn, example, check_trace=False)


LAYERS = {"gcn": lambda: pyg_nn.GCNConv(16, 16), "gin": lambda: pyg_nn.GINConv(torch.nn.Linear(16, 16)),
          "sage": lambda: pyg_nn.SAGEConv(16, 16), "sage_max": lambda: pyg_nn.SAGEConv(16, 16, aggr="max"),
          "gat": lambda: pyg_nn.GATConv(16, 4, heads=4),
          "sage_fast_aggr": lambda: pyg_nn.SAGEConv(16, 16, aggr=pyg_fast.aggr.MeanAggregation())}
OTHER_GRAPHS = [(40, 300, False), (57, 500, False), (25, 600, True)]  # nodes, edges, sorted


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(LAYERS))
def test_traced_layer_matches_pyg_on_other_graphs(device, kind):
    ref = LAYERS[kind]().to(device)
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))
    traced = trace(fast, (torch.randn(40, 16, device=device), sorted_graph(40, 300, device)))
    for num_nodes, num_edges, is_sorted in OTHER_GRAPHS:
        x = torch.randn(num_nodes, 16, device=device)
        edge_index = (sorted_graph if is_sorted else random_graph)(num_nodes, num_edges, device)
        torch.testing.assert_close(traced(x, edge_index), ref(x, edge_index), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_traced_model_under_the_switch_matches_pyg(device, aggr):
    conv = pyg_nn.SAGEConv(16, 16, aggr=aggr).to(device)
    with pyg_fast.patch():
        traced = trace(conv, (torch.randn(40, 16, device=device), sorted_graph(40, 300, device)))
        for num_nodes, num_edges, is_sorted in OTHER_GRAPHS:
            x = torch.randn(num_nodes, 16, device=device)
            edge_index = (sorted_graph if is_sorted else random_graph)(num_nodes, num_edges, device)
            torch.testing.assert_close(traced(x, edge_index), conv(x, edge_index), rtol=1e-5, atol=1e-5)


def op_traces(device):
    """(op, fn, example, graphs to run on (differing in order and degrees, same node count), float64
    reference). Node counts are the ops' dim_size arguments, constants of the trace by design."""
    N = 30

    def edges(num_edges, is_sorted):
        return (sorted_graph if is_sorted else random_graph)(N, num_edges, device)

    def graphs(make):
        return [make(*edges(e, s)) for e, s in ((200, False), (350, False), (90, True))]

    return [
        ("segment_reduce", lambda e, dst: pyg_fast.segment_reduce(e, dst, dim_size=N, reduce="max"),
         lambda s, d: (torch.randn(s.numel(), 4, device=device), d),
         lambda e, dst: scatter_reference(e, dst, N, "max")),
        ("segment_reduce_ptr", lambda e, ptr: pyg_fast.segment_reduce(e, ptr=ptr, reduce="mean"),
         lambda s, d: (torch.randn(s.numel(), 4, device=device),
                       torch._convert_indices_from_coo_to_csr(d.sort().values, N)),
         lambda e, ptr: scatter_reference(e, torch.repeat_interleave(torch.arange(N, device=ptr.device), ptr.diff()),
                                          N, "mean")),
        ("spmm", lambda x, src, dst, w: pyg_fast.index_weight_segment_reduce(x, src, dst, w, N),
         lambda s, d: (torch.randn(N, 4, device=device), s, d, torch.rand(s.numel(), device=device)),
         lambda x, src, dst, w: torch.zeros(N, 4, dtype=torch.float64, device=x.device).index_add(
             0, dst, x.double()[src] * w.double()[:, None])),
        ("sddmm", lambda a, b, src, dst: pyg_fast.sddmm(a, b, src, dst, "dot"),
         lambda s, d: (torch.randn(N, 8, device=device), torch.randn(N, 8, device=device), s, d),
         lambda a, b, src, dst: (a.double()[src] * b.double()[dst]).sum(-1)),
        ("edge_softmax", lambda e, dst: pyg_fast.edge_softmax(e, dst, num_nodes=N),
         lambda s, d: (torch.randn(s.numel(), 2, device=device), d),
         lambda e, dst: __import__("torch_geometric").utils.softmax(e.double(), dst, num_nodes=N)),
    ], graphs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(5))
def test_traced_op_matches_float64_on_other_graphs(device, case):
    cases, graphs = op_traces(device)
    name, fn, make, reference = cases[case]
    traced = trace(fn, make(*sorted_graph(30, 120, device)))
    for args in graphs(make):
        assert_close(traced(*args), reference(*args), torch.float32)
