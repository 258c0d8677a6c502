"""torch.compile(fullgraph=True) of every converted layer and every op: no graph break, one
graph for graphs of three sizes with ``dynamic=True`` (at most one recompile without it), and
the numbers of PyG (layers) or float64 references (ops), gradients included."""
import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch._dynamo.utils import counters

import pyg_fast
import pyg_fast.nn
from pyg_fast.testing import DEVICES, assert_close, scatter_reference
from tests.nn._helpers import grads, random_graph

GRAPHS = [(40, 300), (57, 500), (90, 1000)]  # (nodes, edges), edges in random order


def make_layer(kind: str) -> torch.nn.Module:
    return {"gcn": lambda: pyg_nn.GCNConv(16, 16),
            "gcn_no_loops": lambda: pyg_nn.GCNConv(16, 16, add_self_loops=False),
            "gin": lambda: pyg_nn.GINConv(torch.nn.Linear(16, 16), train_eps=True),
            "sage": lambda: pyg_nn.SAGEConv(16, 16),
            "sage_max": lambda: pyg_nn.SAGEConv(16, 16, aggr="max"),
            "gat": lambda: pyg_nn.GATConv(16, 4, heads=4),
            "gat_bipartite": lambda: pyg_nn.GATConv((16, 16), 4, heads=4),  # the target projection folded
            "gat_edge_attr": lambda: pyg_nn.GATConv(16, 4, heads=4, edge_dim=3, fill_value="mean")}[kind]()


def run_compiled(fn, inputs_per_graph, dynamic):
    """Calls torch.compile(fn, fullgraph=True, dynamic=dynamic) on each input tuple; returns the
    outputs and (graph breaks, graphs compiled)."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
    outs = [compiled(*inputs) for inputs in inputs_per_graph]
    return outs, sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["gcn", "gcn_no_loops", "gin", "sage", "sage_max", "gat", "gat_bipartite",
                                  "gat_edge_attr"])
@pytest.mark.parametrize("dynamic", [True, None])
def test_layer_compiles_without_breaks_and_matches_pyg(device, kind, dynamic, route):
    torch.manual_seed(0)
    ref = make_layer(kind).to(device)
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))
    inputs = []
    for num_nodes, num_edges in GRAPHS:
        x = torch.randn(num_nodes, 16, device=device, requires_grad=True)
        edge_index = random_graph(num_nodes, num_edges, device)
        extra = (torch.randn(num_edges, 3, device=device),) if kind == "gat_edge_attr" else ()
        inputs.append((x, edge_index) + extra)
    outs, breaks, graphs = run_compiled(fast, inputs, dynamic)
    assert breaks == 0
    assert graphs == (1 if dynamic else graphs) and graphs <= 2  # dynamic: one graph; else one recompile at most
    for out, args in zip(outs, inputs):
        seed = torch.randn_like(out)
        (out * seed).sum().backward()
        got = grads(fast, args[0])
        fast.zero_grad()
        args[0].grad = None
        expected = ref(*args)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        (expected * seed).sum().backward()
        for g, r in zip(got, grads(ref, args[0])):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
        ref.zero_grad()
        args[0].grad = None


def op_cases(device):
    """(name, fn, inputs per graph, float64 reference fn): each op on graphs of three sizes."""
    cases = []
    for num_nodes, num_edges in GRAPHS:
        src, dst = random_graph(num_nodes, num_edges, device)
        cases.append((num_nodes, src, dst))

    def inputs(make):
        return [make(n, s, d) for n, s, d in cases]

    # dim_size comes from the node features' shape, as in a layer
    return [
        ("segment_reduce", lambda e, dst, x: pyg_fast.segment_reduce(e, dst, dim_size=x.size(0), reduce="mean"),
         inputs(lambda n, s, d: (torch.randn(s.numel(), 8, device=device, requires_grad=True), d,
                                 torch.empty(n, 0, device=device))),
         lambda e, dst, x: scatter_reference(e, dst, x.size(0), "mean")),
        ("segment_reduce_ptr", lambda e, ptr: pyg_fast.segment_reduce(e, ptr=ptr, reduce="max"),
         inputs(lambda n, s, d: (torch.randn(s.numel(), 8, device=device, requires_grad=True),
                                 torch._convert_indices_from_coo_to_csr(d.sort().values, n))),
         lambda e, ptr: scatter_reference(e, torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=ptr.device),
                                                                     ptr.diff()), ptr.numel() - 1, "max")),
        ("spmm", lambda x, src, dst, w: pyg_fast.index_weight_segment_reduce(x, src, dst, w, x.size(0)),
         inputs(lambda n, s, d: (torch.randn(n, 8, device=device, requires_grad=True), s, d,
                                 torch.rand(s.numel(), device=device, requires_grad=True))),
         lambda x, src, dst, w: torch.zeros(x.size(0), 8, dtype=torch.float64, device=x.device).index_add(
             0, dst, x.double()[src] * w.double()[:, None])),
        ("sddmm", lambda a, b, src, dst: pyg_fast.sddmm(a, b, src, dst, "dot"),
         inputs(lambda n, s, d: (torch.randn(n, 2, 8, device=device, requires_grad=True),
                                 torch.randn(n, 2, 8, device=device, requires_grad=True), s, d)),
         lambda a, b, src, dst: (a.double()[src] * b.double()[dst]).sum(-1)),
        ("edge_softmax", lambda e, dst, x: pyg_fast.edge_softmax(e, dst, num_nodes=x.size(0)),
         inputs(lambda n, s, d: (torch.randn(s.numel(), 3, device=device, requires_grad=True), d,
                                 torch.empty(n, 0, device=device))),
         lambda e, dst, x: __import__("torch_geometric").utils.softmax(e.double(), dst, num_nodes=x.size(0))),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(5))
def test_op_compiles_without_breaks_and_matches_float64(device, case, route):
    torch.manual_seed(0)
    name, fn, inputs, reference = op_cases(device)[case]
    outs, breaks, graphs = run_compiled(fn, inputs, dynamic=True)
    assert breaks == 0 and graphs == 1, name
    for out, args in zip(outs, inputs):
        assert_close(out, reference(*args), torch.float32)
        diff = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        seed = torch.randn_like(out)
        got = torch.autograd.grad(out, diff, seed)
        expected = torch.autograd.grad(fn(*args), diff, seed)  # eager pyg_fast, checked against float64 above
        for g, e in zip(got, expected):
            assert_close(g, e, torch.float32)


def hetero_cases():
    """(name, module, inputs of a graph with n nodes) of every heterogeneous layer."""
    import pyg_fast.hetero as fast

    def relational(n):
        return (torch.randn(n, 16, requires_grad=True), torch.randint(0, n, (2, 6 * n)),
                torch.randint(0, 3, (6 * n,)))

    def hgt(n):
        x = {"a": torch.randn(n, 16, requires_grad=True), "b": torch.randn(n + 3, 16, requires_grad=True)}
        e = {("a", "to", "b"): torch.stack([torch.randint(0, n, (5 * n,)), torch.randint(0, n + 3, (5 * n,))]),
             ("b", "to", "a"): torch.stack([torch.randint(0, n + 3, (5 * n,)), torch.randint(0, n, (5 * n,))]),
             ("a", "self", "a"): torch.randint(0, n, (2, 3 * n))}
        return x, e
    meta = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a")])
    hetero_edges = [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a"), ("b", "self", "b")]

    def hetero_sage(n):  # four edge types: the grouped path
        x, e = hgt(n)
        e[("b", "self", "b")] = torch.randint(0, n + 3, (2, 2 * n))
        return x, e
    return [("rgcn", lambda: fast.RGCNConv(16, 8, 3), relational),
            ("fast_rgcn", lambda: fast.FastRGCNConv(16, 8, 3, num_bases=2), relational),
            ("rgat", lambda: fast.RGATConv(16, 8, 3), relational),
            ("hetero_linear", lambda: fast.HeteroLinear(16, 8, 3),
             lambda n: (torch.randn(n, 16, requires_grad=True), torch.randint(0, 3, (n,)))),
            ("hetero_dict_linear", lambda: fast.HeteroDictLinear(16, 8, types=list("abcd")),
             lambda n: ({k: torch.randn(n, 16, requires_grad=True) for k in "abcd"},)),
            ("hgt", lambda: fast.HGTConv(16, 16, meta, heads=2), hgt),
            ("hetero_conv", lambda: pyg_fast.convert(pyg_nn.HeteroConv(
                {et: pyg_nn.SAGEConv((16, 16), 8) for et in hetero_edges}), verbose=False), hetero_sage)]


def flat(out):
    return torch.cat([v for _, v in sorted(out.items())]) if isinstance(out, dict) else out


@pytest.mark.parametrize("case", range(7))
def test_hetero_layer_compiles_without_breaks(case, monkeypatch):
    """The heterogeneous layers (CPU, their grouped paths taken here as on CUDA): one graph for
    graphs of three sizes, eager's outputs and parameter gradients."""
    monkeypatch.setattr(pyg_fast.hetero.HeteroDictLinear, "grouped_devices", ("cpu", "cuda"))
    monkeypatch.setattr(pyg_fast.hetero.HeteroDictLinear, "grouped_features", (1, 1 << 20))
    name, make, inputs = hetero_cases()[case]
    torch.manual_seed(0)
    module = make()
    args = [inputs(n) for n in (40, 57, 90)]
    outs, breaks, graphs = run_compiled(module, args, dynamic=True)
    assert breaks == 0 and graphs == 1, name
    for out, a in zip(outs, args):
        got = torch.autograd.grad(flat(out).square().sum(), list(module.parameters()), allow_unused=True)
        expected_out = module(*a)
        torch.testing.assert_close(flat(out), flat(expected_out), rtol=1e-4, atol=1e-4)
        expected = torch.autograd.grad(flat(expected_out).square().sum(), list(module.parameters()), allow_unused=True)
        for g, e in zip(got, expected):
            if e is not None:
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["gcn", "sage", "gat"])
def test_compiled_layer_groups_a_reused_graph_once(device, kind, monkeypatch):
    """The compiled graph keeps the grouping of the caller's edge_index from step to step (the
    sort runs once per graph), regroups a new graph and one changed in place, and stays exact."""
    from pyg_fast.ops import _layout
    calls = []
    prepare = _layout._prepare
    monkeypatch.setattr(_layout, "_prepare", lambda *a: calls.append(1) or prepare(*a))
    torch.manual_seed(0)
    ref = make_layer(kind).to(device)
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))
    torch._dynamo.reset()
    compiled = torch.compile(fast, fullgraph=True, dynamic=True)
    x = torch.randn(57, 16, device=device)
    edge_index = random_graph(57, 500, device)
    other = random_graph(57, 400, device)

    def step(ei):
        out = compiled(x, ei)
        torch.testing.assert_close(out, ref(x, ei), rtol=1e-4, atol=1e-5)
        out.sum().backward()  # the backward regroups nothing
        return len(calls)

    first = step(edge_index)
    assert first >= 1
    assert step(edge_index) == first and step(edge_index) == first
    assert step(other) > first
    settled = step(other)
    edge_index[0, :5] = edge_index[0, 5:10].clone()  # changed in place: grouped again
    assert step(edge_index) > settled


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_gat_layers_sharing_an_edge_index_run_one_grouping_op(device, monkeypatch):
    """Three compiled GAT layers over one edge_index call the grouping op with the same arguments, and
    the compiler merges the calls: one csr_layout op a training step, not one a layer (each call
    hands out copies of the memoised layout), and the result stays PyG's."""
    from torch.profiler import ProfilerActivity, profile
    from pyg_fast import tuning
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": 0, "cuda": 0})  # the grouped route

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(make_layer("gat") for _ in range(3))

        def forward(self, x, edge_index):
            for conv in self.convs:
                x = conv(x, edge_index).relu()
            return x

    torch.manual_seed(0)
    ref = Stack().to(device)
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))
    torch._dynamo.reset()
    compiled = torch.compile(fast, fullgraph=True)
    x = torch.randn(57, 16, device=device)
    edge_index = random_graph(57, 500, device)
    compiled(x, edge_index).sum().backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = compiled(x, edge_index)
        out.sum().backward()
    ops = {e.key: e.count for e in prof.key_averages() if e.key.startswith("pyg_fast::")}
    assert ops.get("pyg_fast::csr_layout") == 1, ops
    torch.testing.assert_close(out, ref(x, edge_index), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cached", [False, True])
def test_compiled_gcn_normalises_a_reused_graph_once(device, cached, monkeypatch):
    """Compiled GCN layers keep the normalised graph of the caller's edge_index from step to step
    (layers sharing it normalise it once), normalise a new graph and one changed in place again,
    and match PyG's outputs and gradients."""
    from pyg_fast.nn import _graph
    calls = []
    normalize = _graph.gcn_normalized
    monkeypatch.setattr(_graph, "gcn_normalized", lambda *a: calls.append(1) or normalize(*a))
    torch.manual_seed(0)
    ref = torch.nn.ModuleList([pyg_nn.GCNConv(16, 16, cached=cached), pyg_nn.GCNConv(16, 16, cached=cached)]).to(device)
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))
    torch._dynamo.reset()
    compiled = [torch.compile(layer, fullgraph=True, dynamic=True) for layer in fast]
    x = torch.randn(57, 16, device=device)
    edge_index = random_graph(57, 500, device)

    def step(ei, ei_ref=None):
        x_fast, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
        out = compiled[1](compiled[0](x_fast, ei).relu(), ei)
        expected = ref[1](ref[0](x_ref, ei_ref if ei_ref is not None else ei).relu(), ei_ref if ei_ref is not None else ei)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
        out.square().sum().backward()
        expected.square().sum().backward()
        torch.testing.assert_close(x_fast.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
        return len(calls)

    first = step(edge_index)
    assert first == 1
    assert step(edge_index) == 1 and step(edge_index) == 1
    if cached:  # cached layers keep their first graph, as PyG's do
        return
    assert step(random_graph(57, 400, device)) == 2
    edge_index[0, :5] = edge_index[0, 5:10].clone()  # changed in place: normalised again
    assert step(edge_index) == 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["sage", "gin", "gcn", "gcn_no_loops"])
def test_compiled_layers_aggregate_a_reused_graph_inside_one_op(device, kind, monkeypatch):
    """Above the atomics' size, compiled SAGE, GIN and GCN layers aggregate through one op a
    direction (pyg_fast::kept_aggregate, forward and backward), whose body is the eager route: a
    reused graph is grouped (and normalised) once, no layout is copied out of a memo, and
    outputs and gradients stay PyG's over steps."""
    from torch.profiler import ProfilerActivity, profile
    from pyg_fast.nn import _graph
    from pyg_fast.ops import _layout
    groupings, normalised, copies = [], [], []
    prepare, normalize, issue = _layout._prepare, _graph.gcn_normalized, _layout._issue
    monkeypatch.setattr(_layout, "_prepare", lambda *a: groupings.append(1) or prepare(*a))
    monkeypatch.setattr(_graph, "gcn_normalized", lambda *a: normalised.append(1) or normalize(*a))
    monkeypatch.setattr(_layout, "_issue", lambda *a, **k: copies.append(1) or issue(*a, **k))
    torch.manual_seed(0)
    ref = torch.nn.ModuleList(make_layer(kind) for _ in range(2)).to(device)
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, ei: fast[1](fast[0](x, ei).relu(), ei), fullgraph=True)
    edge_index = random_graph(57, 500, device)
    for step in range(3):
        x = torch.randn(57, 16, device=device, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = compiled(x, edge_index)
            out.square().sum().backward()
        expected = ref[1](ref[0](x_ref, edge_index).relu(), edge_index)
        expected.square().sum().backward()
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
        for got, want in zip(grads(fast, x), grads(ref, x_ref)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        fast.zero_grad()
        ref.zero_grad()
        ops = {e.key: e.count for e in prof.key_averages() if e.key.startswith("pyg_fast::")}
        assert step == 0 or ops.get("pyg_fast::kept_aggregate") == 4, ops  # 2 layers, forward and backward
    assert len(groupings) == 1 and copies == []
    assert len(normalised) == (1 if kind.startswith("gcn") else 0)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_op_on_a_slice_of_an_input_sees_in_place_changes(device):
    """A slice of a compiled function's input reaches the op as a view with its own version
    counter: nothing is kept for it, so an in-place change of the input is seen."""
    torch._dynamo.reset()
    fn = torch.compile(lambda rows, ei: pyg_fast.segment_reduce(rows, ei[1], dim_size=30), fullgraph=True)
    rows = torch.randn(200, 4, device=device)
    ei = torch.randint(0, 30, (2, 200), device=device)
    for _ in range(2):
        assert_close(fn(rows, ei), scatter_reference(rows.double(), ei[1], 30, "sum"), torch.float32)
        ei[1] = torch.randint(0, 30, (200,), device=device)


def test_derived_layouts_follow_the_copies_they_come_from(monkeypatch):
    """A layout derived from the copies a memo issued is memoised with their owner, handed out
    as a new copy every call, and recomputed once a copy is changed in place."""
    from pyg_fast.ops import _layout
    calls = []
    destinations = _layout._DERIVED["destinations"]
    monkeypatch.setitem(_layout._DERIVED, "destinations", lambda *a: calls.append(1) or destinations(*a))
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 0, 1, 2]])
    ptr, _, _ = _layout._csr_layout(edge_index[1], 3, False, edge_index[0], None, "a|b|c|d", edge_index)
    assert ptr.tolist() == [0, 1, 3, 4]
    first = _layout._derived_layout("destinations", [ptr], [4], [])[0]
    again = _layout._derived_layout("destinations", [ptr], [4], [])[0]
    assert first.tolist() == again.tolist() == [0, 1, 1, 2] and len(calls) == 1
    assert again.data_ptr() != first.data_ptr()
    ptr[1] = 2
    assert _layout._derived_layout("destinations", [ptr], [4], [])[0].tolist() == [0, 0, 1, 2] and len(calls) == 2
