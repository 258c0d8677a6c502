"""The COO gather-scatter (pyg_fast::gather_scatter): the route of the first sums and means over
a new index, and the routing itself."""
import pytest
import torch

import pyg_fast
from pyg_fast import tuning
from pyg_fast.ops import _layout
from pyg_fast.ops._kernels import CHECKED_BEFORE, gather_scatter
from pyg_fast.testing import DEVICES, DTYPES, PygFastOps, assert_close, poison_allocator


def edges(num_src, num_edges, num_dst, device):
    """Unsorted edges with multi-edges, a hub and destinations that receive nothing."""
    src = torch.randint(0, num_src, (num_edges,), device=device)
    dst = torch.randint(0, max(1, num_dst - 5), (num_edges,), device=device)
    dst[::7] = 0
    return src, dst


def reference(x, src, dst, weight, num_rows, mean):
    """float64: messages built explicitly, summed by index_add, divided by the clamped count."""
    x64 = x.double()
    rows = x64 if src is None else x64.index_select(0, src)
    if weight is not None:
        heads = weight.size(1)
        rows = (rows.view(rows.size(0), heads, -1) * weight.double().unsqueeze(-1)).view(rows.size(0), -1)
    out = x64.new_zeros(num_rows, x.size(1)).index_add_(0, dst, rows)
    if mean:
        count = torch.zeros(num_rows, dtype=torch.float64, device=x.device).index_add_(
            0, dst, torch.ones(dst.numel(), dtype=torch.float64, device=x.device))
        out = out / count.clamp(min=1).unsqueeze(1)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("weighted", [None, 1, 4])
@pytest.mark.parametrize("features", [1, 6, 64, 100, 300])
def test_matches_float64(device, dtype, mean, weighted, features):
    if weighted and features % weighted:
        pytest.skip("heads must divide the features")
    src, dst = edges(70, 900, 50, device)
    x = torch.randn(70, features, device=device).to(dtype)
    weight = None if weighted is None else (torch.rand(900, weighted, device=device) + 0.5).to(dtype)
    poison_allocator(50 * features, device, dtype)
    out, divisor, flags = torch.ops.pyg_fast.gather_scatter(x, src, dst, weight, 50, mean)
    assert out.dtype == dtype and out.shape == (50, features)
    assert_close(out, reference(x, src, dst, weight, 50, mean), dtype)
    assert flags.tolist() == [0, 0]
    if mean:
        count = torch.bincount(dst, minlength=50).clamp(min=1)
        assert divisor.dtype == dtype and torch.equal(divisor.double().cpu(), count.double().cpu())
    else:
        assert divisor.numel() == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mean", [False, True])
def test_scatter_without_source_index(device, mean):
    dst = edges(1, 300, 40, device)[1]
    x = torch.randn(300, 8, device=device)
    out = torch.ops.pyg_fast.gather_scatter(x, None, dst, None, 40, mean)[0]
    assert_close(out, reference(x, None, dst, None, 40, mean), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_inputs(device):
    x = torch.randn(5, 3, device=device)
    none = torch.empty(0, dtype=torch.long, device=device)
    out, divisor, _ = torch.ops.pyg_fast.gather_scatter(x, none, none, None, 4, True)
    assert torch.equal(out.cpu(), torch.zeros(4, 3)) and torch.equal(divisor.cpu(), torch.ones(4))
    out, divisor, _ = torch.ops.pyg_fast.gather_scatter(x[:, :0], torch.tensor([1, 2], device=device),
                                                         torch.tensor([0, 0], device=device), None, 3, True)
    assert out.shape == (3, 0) and divisor.cpu().tolist() == [2, 1, 1]
    assert torch.ops.pyg_fast.gather_scatter(x, none, none, None, 0, False)[0].shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("heads", [None, 2])
def test_gradients_and_double_backward(device, mean, heads):
    src, dst = edges(12, 60, 9, device)
    x = torch.randn(12, 4, device=device, dtype=torch.float64, requires_grad=True)
    weight = None if heads is None else torch.rand(60, heads, device=device, dtype=torch.float64,
                                                   requires_grad=True)
    inputs = (x,) if weight is None else (x, weight)

    def fn(*args):
        return torch.ops.pyg_fast.gather_scatter(args[0], src, dst, args[1] if len(args) > 1 else None, 9, mean)[0]

    # CUDA adds a row's terms with atomics in no fixed order: two backward runs may differ in the
    # last bits of a float64 sum
    tol = 1e-12 if device == "cuda" else 0.0
    assert torch.autograd.gradcheck(fn, inputs, nondet_tol=tol)
    assert torch.autograd.gradgradcheck(fn, inputs, nondet_tol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mean", [False, True])
def test_out_of_range_edges_are_skipped_and_named(device, mean):
    src, dst = edges(10, 50, 8, device)
    x = torch.randn(10, 4, device=device)
    bad_src, bad_dst = src.clone(), dst.clone()
    bad_src[3], bad_dst[5] = 10, -1
    keep = torch.ones(50, dtype=torch.bool, device=device)
    keep[3] = keep[5] = False
    kept_count = torch.bincount(dst[keep], minlength=8).clamp(min=1).float()
    for features in (4, 0):  # without features only the counts (a mean's divisors) are made
        out, divisor, flags = torch.ops.pyg_fast.gather_scatter(x[:, :features], bad_src, bad_dst, None, 8, mean)
        assert flags.tolist() == [1, 1]
        assert_close(out, reference(x[:, :features], src[keep], dst[keep], None, 8, mean), torch.float32)
        if mean:  # skipped edges are not counted
            assert torch.equal(divisor, kept_count)
        # indices another op checked: the edges are skipped all the same, and no flags are raised
        out, divisor, flags = torch.ops.pyg_fast.gather_scatter(x[:, :features], bad_src, bad_dst, None, 8, mean,
                                                                CHECKED_BEFORE)
        assert flags.numel() == 0
        assert_close(out, reference(x[:, :features], src[keep], dst[keep], None, 8, mean), torch.float32)
        if mean:
            assert torch.equal(divisor, kept_count)
    with pytest.raises(IndexError, match=r"'src_index' holds values outside \[0, 10\) \(x.size\(0\)\)"):
        gather_scatter(x, bad_src, dst, None, 8, "sum", "src_index|x.size(0)|dst_index|dim_size")
        pyg_fast.check_errors()
    with pytest.raises(IndexError, match=r"'dst_index' holds values outside \[0, 8\) \(dim_size\)"):
        gather_scatter(x, src, bad_dst, None, 8, "sum", "src_index|x.size(0)|dst_index|dim_size")
        pyg_fast.check_errors()


@pytest.mark.parametrize("mean", [False, True])
def test_cpu_threads_split_the_rows_with_the_same_result(mean):
    """On the CPU each thread adds the edges of its own range of rows, in edge order: the same bits
    on one thread or several (from 2^25 values on: 17 k edges x 2,048 features), edges with an end
    out of range skipped and flagged whichever thread meets them (an edge bad at both ends raises
    both flags)."""
    src, dst = edges(300, 17000, 500, "cpu")
    x = torch.randn(300, 2048)
    weight = torch.rand(17000, 2) + 0.5
    bad_src, bad_dst = src.clone(), dst.clone()
    bad_src[[11, 9000]], bad_dst[[9000, 16999]] = 300, 500  # edge 9000: both ends
    keep = torch.ones(17000, dtype=torch.bool)
    keep[[11, 9000, 16999]] = False
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.pyg_fast.gather_scatter(x, bad_src, bad_dst, weight, 500, mean)
        torch.set_num_threads(max(threads, 2))
        several = torch.ops.pyg_fast.gather_scatter(x, bad_src, bad_dst, weight, 500, mean)
    finally:
        torch.set_num_threads(threads)
    for out, divisor, flags in (one, several):
        assert flags.tolist() == [1, 1]
    assert_close(one[0], reference(x, src[keep], dst[keep], weight[keep], 500, mean), torch.float32)
    assert torch.equal(one[0], several[0]) and torch.equal(one[1], several[1])
    only_src = bad_src.clone()
    only_src[9000] = src[9000]
    assert torch.ops.pyg_fast.gather_scatter(x, src, bad_dst, weight, 500, mean)[2].tolist() == [0, 1]
    assert torch.ops.pyg_fast.gather_scatter(x, only_src, dst, weight, 500, mean)[2].tolist() == [1, 0]


def test_bad_arguments_raise():
    x, index = torch.randn(5, 3), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="'src_index' has 2 entries but 'dst_index' has 3"):
        torch.ops.pyg_fast.gather_scatter(x, index, torch.tensor([0, 1, 2]), None, 3, False)
    with pytest.raises(ValueError, match="without 'src_index', 'x' must have a row per entry"):
        torch.ops.pyg_fast.gather_scatter(x, None, index, None, 3, False)
    with pytest.raises(TypeError, match="'dst_index' must be int64"):
        torch.ops.pyg_fast.gather_scatter(x, index, index.int(), None, 3, False)
    with pytest.raises(ValueError, match="'weight' must have shape"):
        torch.ops.pyg_fast.gather_scatter(x, index, index, torch.ones(2, 2), 3, False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_public_ops_take_the_coo_route_on_the_first_uses(device, reduce, route):
    """index_weight_segment_reduce and segment_reduce (with dim_size) over a new index: the COO
    route for the first uses, the grouped kernels from _layout.REUSED_FROM_USE on, the same
    values and gradients on both (float64 reference)."""
    src, dst = edges(30, 200, 20, device)
    x = torch.randn(30, 8, device=device, requires_grad=True)
    weight = torch.rand(200, device=device, requires_grad=True)
    expected = reference(x.detach(), src, dst, weight.detach().unsqueeze(1), 20, reduce == "mean")
    for use in range(1, _layout.REUSED_FROM_USE + 1):
        with PygFastOps() as mode:  # the forward (the backward's regrouping counts its own uses)
            out = pyg_fast.ops.index_weight_segment_reduce(x, src, dst, weight, 20, reduce)
        gx, gw = torch.autograd.grad(out.square().sum(), (x, weight))
        coo = route == "coo" and use < _layout.REUSED_FROM_USE
        assert ("gather_scatter" in mode.ops) == coo and ("index_segment_reduce" in mode.ops) != coo
        assert_close(out, expected, torch.float32)
        x64, w64 = x.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
        ref = reference(x64, src, dst, w64.unsqueeze(1), 20, reduce == "mean")
        rx, rw = torch.autograd.grad(ref.square().sum(), (x64, w64))
        assert_close(gx, rx, torch.float32)
        assert_close(gw, rw, torch.float32)
    rows = torch.randn(200, 5, device=device)
    with PygFastOps() as mode:
        out = pyg_fast.ops.segment_reduce(rows, dst, dim_size=20, reduce=reduce)
    assert ("gather_scatter" in mode.ops) == (route == "coo")
    assert_close(out, reference(rows, None, dst, None, 20, reduce == "mean"), torch.float32)


def test_route_rules(monkeypatch):
    """Extrema, deterministic algorithms on CUDA and sizes over tuning.COO_MAX_ELEMENTS (eager and
    under torch.compile) keep the grouped route."""
    from pyg_fast.ops._kernels import coo_route
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": 1000})
    index = torch.zeros(10, dtype=torch.long)
    assert coo_route(index, ("k",), 1000) and not coo_route(index, ("k",), 1001)
    assert not coo_route(index.to("meta"), ("k",), 10)  # a device type without a limit keeps the grouping
    src, dst = edges(30, 200, 20, "cpu")
    with PygFastOps() as mode:
        pyg_fast.ops.index_segment_reduce(torch.randn(30, 4), src, dst, 20, "max")
    assert "index_segment_reduce" in mode.ops and "gather_scatter" not in mode.ops
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    compiled = torch.compile(lambda x: pyg_fast.ops.index_segment_reduce(x, src, dst, 20, "sum"), fullgraph=True,
                             backend=backend)
    for limit in (200 * 4, 200 * 4 - 1):  # 200 edges x 4 features
        monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": limit})
        torch._dynamo.reset()
        compiled(torch.randn(30, 4))
    assert "gather_scatter" in graphs[0] and "index_segment_reduce" not in graphs[0]
    assert "index_segment_reduce" in graphs[1] and "gather_scatter" not in graphs[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA atomics")
def test_deterministic_mode_keeps_the_grouped_route():
    src, dst = edges(30, 200, 20, "cuda")
    torch.use_deterministic_algorithms(True)
    try:
        with PygFastOps() as mode:
            pyg_fast.ops.index_segment_reduce(torch.randn(30, 4, device="cuda"), src, dst, 20, "sum")
    finally:
        torch.use_deterministic_algorithms(False)
    assert "gather_scatter" not in mode.ops


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_coo_route_reports_bad_indices(device, route):
    """Under torch.compile the route is chosen by size; its range report is an op of the graph."""
    import torch_geometric.nn as pyg_nn
    layer = pyg_fast.nn.convert(pyg_nn.SAGEConv(8, 4)).to(device)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    x = torch.randn(20, 8, device=device)
    src, dst = edges(20, 100, 20, device)
    torch.testing.assert_close(compiled(x, torch.stack([src, dst])), layer(x, torch.stack([src, dst])))
    bad = torch.stack([src, dst])
    bad[0, 7] = 20
    with pytest.raises(IndexError, match=r"'edge_index\[0\]' holds values outside \[0, 20\)"):
        compiled(x, bad)
        pyg_fast.check_errors()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("validate", ["async", "sync"])
def test_compiled_layers_check_their_indices_in_their_kernels(device, validate, monkeypatch):
    """Compiled, each layer's kernel checks its own ends of edge_index: the graph holds no range
    check op and no Python op, nothing asks the flag ring for a slot or reports copied flags; a
    value changed in place out of range raises (on CUDA at the next call, at once with
    validate="sync")."""
    import torch_geometric.nn as pyg_nn
    from pyg_fast.ops import _deferred
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": 2 ** 62, "cuda": 2 ** 62})
    monkeypatch.setattr(pyg_fast.config, "validate", validate)
    reports = _edge_index_reports(monkeypatch)
    slots = []
    flag_slot = _deferred.flag_slot
    monkeypatch.setattr(_deferred, "flag_slot", lambda messages, device: slots.append(device) or flag_slot(
        messages, device))

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([pyg_nn.SAGEConv(8, 8) for _ in range(3)])

        def forward(self, x, edge_index):
            for conv in self.convs:
                x = conv(x, edge_index)
            return x

    model = pyg_fast.nn.convert(Stack()).to(device)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x = torch.randn(20, 8, device=device)
    edge_index = torch.stack(edges(20, 100, 20, device))
    outs = [compiled(x, edge_index) for _ in range(3)]
    assert len(graphs) == 1 and graphs[0].count("pyg_fast.gather_scatter") == 3
    assert "checked_range" not in graphs[0] and "index_range_flags" not in graphs[0]
    assert slots == [] and reports == []
    for out in outs:
        torch.testing.assert_close(out, model(x, edge_index))
    message = r"'edge_index\[0\]' holds values outside \[0, 20\)"
    edge_index[0, 7] = 20
    with pytest.raises(IndexError, match=message):
        compiled(x, edge_index)
        torch.cuda.synchronize()
        compiled(x, edge_index)  # on CUDA the flags of the call before are read as it starts
    with pytest.raises(IndexError, match=message):
        compiled(x, edge_index)
        pyg_fast.check_errors()
    edge_index[0, 7] = 3  # each raised once: the flags are lowered
    torch.testing.assert_close(compiled(x, edge_index), model(x, edge_index))
    pyg_fast.check_errors()


@pytest.mark.parametrize("device", DEVICES)
def test_layers_sharing_an_edge_index_report_it_every_call(device, monkeypatch):
    """Each layer slices the ends of edge_index anew, and each layer's call on the COO route checks
    it: on the CPU the kernel raises by itself (no flags copied out and read), on CUDA each layer's
    kernel raises them in a slot of the flag ring; a change in place is reported either way."""
    import torch_geometric.nn as pyg_nn
    from pyg_fast.ops import _deferred
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": 2 ** 62, "cuda": 2 ** 62})
    reports = _edge_index_reports(monkeypatch)
    slots = []  # the ring slots handed to checks of edge_index
    flag_slot = _deferred.flag_slot

    def counted_slot(messages, device):
        slot = flag_slot(messages, device)
        if slot >= 0 and "edge_index" in _deferred.worded(messages)[0][1]:
            slots.append(slot)
        return slot
    monkeypatch.setattr(_deferred, "flag_slot", counted_slot)
    model = pyg_fast.nn.convert(torch.nn.Sequential(*[pyg_nn.SAGEConv(8, 8) for _ in range(3)])).to(device)
    x = torch.randn(20, 8, device=device)
    edge_index = torch.stack(edges(20, 100, 20, device))
    for layer in model:
        layer(x, edge_index)
    assert len(reports) == 0 and len(slots) == (0 if device == "cpu" else 3)
    edge_index[0, 7] = 20
    with pytest.raises(IndexError, match=r"'edge_index\[0\]' holds values outside \[0, 20\)"):
        model[0](x, edge_index)
        pyg_fast.check_errors()
    assert len(reports) == 0


def _edge_index_reports(monkeypatch):
    """The messages of the reports of copied flags that name edge_index, as a list that fills."""
    from pyg_fast.ops import _deferred
    reports = []
    report = _deferred.report
    monkeypatch.setattr(_deferred, "report", lambda flags, messages: (
        reports.append(messages) if "edge_index" in _deferred.worded(messages)[0][1] else None) or report(flags, messages))
    return reports
