import sys

import pytest
import torch
from torch._inductor.compile_fx import compile_fx
from torch.utils._python_dispatch import TorchDispatchMode

import pyg_fast
from pyg_fast import tuning
from pyg_fast.testing import DEVICES, DTYPES, assert_close, poison_allocator, scatter_reference
from tests._zoo import ZOO_TEST_GRAPHS, zoo_graph

REDUCES = ["sum", "mean", "max", "min"]


def random_graph(num_nodes: int, num_edges: int, num_dst: int, device):
    """Edges sorted by destination with multi-edges, isolated destinations and a hub."""
    src = torch.randint(0, num_nodes, (num_edges,))
    dst = torch.randint(0, num_dst, (num_edges,))
    dst[dst % 7 == 3] = 0  # isolated destinations and one hub
    dst, perm = dst.sort()
    return src[perm].to(device), dst.to(device)


def reference(x, src, dst, weight, dim_size, reduce):
    """float64 messages x[src] * w, reduced with scatter_reduce (PyG semantics)."""
    x64 = x.double()
    msg = x64.index_select(0, src).view(src.numel(), -1)
    if weight is not None:
        heads = weight.view(src.numel(), -1).size(1)
        msg = (msg.view(src.numel(), heads, -1) * weight.double().view(src.numel(), heads, 1)).view(src.numel(), -1)
    return scatter_reference(msg, dst, dim_size, reduce).view((dim_size,) + tuple(x.shape[1:]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("weight_shape", [None, "E", "EH"])
def test_forward_matches_float64(device, dtype, reduce, weight_shape):
    num_nodes, num_edges, num_dst, heads, head_dim = 70, 500, 50, 4, 16
    src, dst = random_graph(num_nodes, num_edges, num_dst, device)
    x = torch.randn(num_nodes, heads, head_dim, device=device).to(dtype)
    weight = {None: None, "E": torch.rand(num_edges, device=device) + 0.5,
              "EH": torch.rand(num_edges, heads, device=device) + 0.5}[weight_shape]
    weight = weight.to(dtype) if weight is not None else None
    poison_allocator(num_dst * heads * head_dim * 2, device)
    out = pyg_fast.index_weight_segment_reduce(x, src, dst, weight, num_dst, reduce)
    assert out.shape == (num_dst, heads, head_dim) and out.dtype == dtype
    assert_close(out, reference(x, src, dst, weight, num_dst, reduce), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [1, 2, 3, 4, 8, 16, 17, 64])
@pytest.mark.parametrize("weight_shape", [None, "E", "EH"])
def test_feature_counts_match_float64(device, dtype, reduce, num_features, weight_shape):
    """Every code path of the CPU kernel: feature counts compiled as constants (1, 2, 4, 8, 16;
    max/min up to 4) and the runtime loop around them, rows prefetched (>= 64 bytes) or not,
    one weight per edge or per head; empty segments and a hub."""
    num_nodes, num_edges, num_dst = 90, 700, 60
    heads = 2 if num_features % 2 == 0 else 1
    src, dst = random_graph(num_nodes, num_edges, num_dst, device)
    x = torch.randn(num_nodes, num_features, device=device).to(dtype)
    weight = {None: None, "E": torch.rand(num_edges, device=device) + 0.5,
              "EH": torch.rand(num_edges, heads, device=device) + 0.5}[weight_shape]
    weight = weight.to(dtype) if weight is not None else None
    poison_allocator(num_dst * num_features * 2, device)
    out = pyg_fast.index_weight_segment_reduce(x, src, dst, weight, num_dst, reduce)
    assert out.shape == (num_dst, num_features) and out.dtype == dtype
    assert_close(out, reference(x, src, dst, weight, num_dst, reduce), dtype)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [2, 5, 64])
def test_cpu_threads_split_rows(threads, reduce, num_features):
    """Rows split over threads in ranges of equal work, on a graph with a hub and empty segments."""
    src, dst, num_nodes = schedule_test_graph("power_law", "cpu")
    x = torch.randn(num_nodes, num_features)
    weight = torch.rand(src.numel()) + 0.5
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = pyg_fast.index_weight_segment_reduce(x, src, dst, weight, num_nodes, reduce)
    finally:
        torch.set_num_threads(previous)
    assert_close(out, reference(x, src, dst, weight, num_nodes, reduce), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_features", [1, 3, 300])
def test_feature_sizes_unsorted_and_ptr(device, num_features):
    src, dst = random_graph(40, 300, 30, device)
    x = torch.randn(40, num_features, device=device)
    ref = reference(x, src, dst, None, 30, "sum")
    assert_close(pyg_fast.index_segment_reduce(x, src, dst, 30, "sum"), ref, torch.float32)
    perm = torch.randperm(300, device=device)
    assert_close(pyg_fast.index_segment_reduce(x, src[perm], dst[perm], 30, "sum"), ref, torch.float32)
    ptr = torch._convert_indices_from_coo_to_csr(dst, 30)
    assert_close(pyg_fast.index_segment_reduce(x, src, ptr=ptr), ref, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("weighted", [False, True])
def test_backward_matches_float64(device, dtype, reduce, weighted):
    num_edges, heads = 400, 2
    src, dst = random_graph(60, num_edges, 45, device)
    x0 = torch.randn(60, heads * 8, device=device).to(dtype)
    w0 = (torch.rand(num_edges, heads, device=device) + 0.5).to(dtype) if weighted else None
    grad = torch.randn(45, heads * 8, device=device).to(dtype)
    x = x0.clone().requires_grad_()
    w = w0.clone().requires_grad_() if weighted else None
    pyg_fast.index_weight_segment_reduce(x, src, dst, w, 45, reduce).backward(grad)
    rx = x0.double().requires_grad_()
    rw = w0.double().requires_grad_() if weighted else None
    reference(rx, src, dst, rw, 45, reduce).backward(grad.double())
    assert_close(x.grad, rx.grad, dtype, scale=2)
    if weighted:
        assert_close(w.grad, rw.grad, dtype, scale=2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("weighted", [False, True])
def test_feature_slices_match_float64(monkeypatch, device, reduce, weighted):
    """The sliced route (forced here; on CUDA tuning.feature_slices takes it for large, dense
    graphs): forward and backward equal the whole-row float64 reference."""
    sliced = []

    def four_slices(x, num_edges, heads=1):
        sliced.append(x.size(1) == 128)
        return 4 if x.size(1) == 128 else 1
    monkeypatch.setattr(tuning, "feature_slices", four_slices)
    num_edges = 600
    src, dst = random_graph(50, num_edges, 40, device)
    x0 = torch.randn(50, 128, device=device)
    w0 = torch.rand(num_edges, device=device) + 0.5 if weighted else None
    grad = torch.randn(40, 128, device=device)
    x = x0.clone().requires_grad_()
    w = w0.clone().requires_grad_() if weighted else None
    out = pyg_fast.index_weight_segment_reduce(x, src, dst, w, 40, reduce)
    out.backward(grad)
    rx = x0.double().requires_grad_()
    rw = w0.double().requires_grad_() if weighted else None
    ref = reference(rx, src, dst, rw, 40, reduce)
    ref.backward(grad.double())
    assert any(sliced)
    assert_close(out, ref, torch.float32)
    assert_close(x.grad, rx.grad, torch.float32, scale=2)
    if weighted:
        assert_close(w.grad, rw.grad, torch.float32, scale=2)


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_cpu(reduce):
    src, dst = random_graph(6, 14, 7, "cpu")
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(14, 2, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w: pyg_fast.index_weight_segment_reduce(x, src, dst, w, 7, reduce), (x, w))


def test_compile_fullgraph_cpu():
    src, dst = random_graph(30, 120, 25, "cpu")
    x = torch.randn(30, 8, requires_grad=True)
    w = torch.rand(120, requires_grad=True)

    def f(x, w):
        return pyg_fast.index_weight_segment_reduce(x, src, dst, w, 25, "sum", sorted=True).square().sum()

    compiled = torch.compile(f, fullgraph=True)
    assert torch.allclose(compiled(x, w), f(x, w))
    g1 = torch.autograd.grad(compiled(x, w), (x, w))
    g2 = torch.autograd.grad(f(x, w), (x, w))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g1, g2))


def test_feature_slices_compile_fullgraph_cpu():
    """A graph large and dense enough for the CPU's feature slices (40 edges a row, 26 MB of rows):
    the slicing decision traces without a graph break, and compiled forward and backward equal
    the float64 reference."""
    num_nodes, num_edges = 50_000, 2_000_000
    src, dst = random_graph(num_nodes, num_edges, num_nodes, "cpu")
    x = torch.randn(num_nodes, 128, requires_grad=True)
    w = torch.rand(num_edges) + 0.5
    assert tuning.feature_slices(x, num_edges) == 8

    def f(x):
        return pyg_fast.index_weight_segment_reduce(x, src, dst, w, num_nodes, "sum", sorted=True)

    calls = []

    def inductor_counting_calls(gm, example_inputs):
        calls.extend(n for n in gm.graph.nodes if str(n.target).startswith("pyg_fast.index_segment_reduce"))
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=inductor_counting_calls)
    out = compiled(x)
    assert len(calls) == 8  # one gather-reduce a slice
    rx = x.detach().double().requires_grad_()
    ref = reference(rx, src, dst, w, num_nodes, "sum")
    assert_close(out, ref, torch.float32)
    grad = torch.randn_like(out)
    ref.backward(grad.double())
    assert_close(torch.autograd.grad(out, x, grad)[0], rx.grad, torch.float32, scale=2)


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(5, 4)
    src, dst = torch.tensor([0, 1, 4, 2]), torch.tensor([0, 0, 1, 2])
    with pytest.raises(IndexError, match="src_index"):
        pyg_fast.index_segment_reduce(x, src + 1, dst, 3)
    with pytest.raises(ValueError, match="entries"):
        pyg_fast.index_segment_reduce(x, src, dst[:3], 3)
    with pytest.raises(ValueError, match="weight"):
        pyg_fast.index_weight_segment_reduce(x, src, dst, torch.rand(4, 3), 3)
    with pytest.raises(ValueError, match="weight"):
        pyg_fast.index_weight_segment_reduce(x, src, dst, torch.rand(3), 3)
    with pytest.raises(TypeError, match="floating"):
        pyg_fast.index_weight_segment_reduce(x, src, dst, torch.ones(4, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="from 0 to 4"):
        pyg_fast.index_segment_reduce(x, src, ptr=torch.tensor([0, 2, 3]))
    with pytest.raises(IndexError, match="src_index"):
        torch.ops.pyg_fast.index_segment_reduce(x, src + 1, torch.tensor([0, 2, 3, 4]), None, "sum", [])
    with pytest.raises(TypeError, match="int64"):  # int32 sources: the CUDA kernels' only
        torch.ops.pyg_fast.index_segment_reduce(x, src.int(), torch.tensor([0, 2, 3, 4]), None, "sum", [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_a_reused_pair_of_indices_skips_their_checks_until_one_changes(monkeypatch, device, reduce):
    """Once a reused pair's layout and launch are kept, a call goes straight to the kernel; a new
    source tensor, one changed in place or a new weight still get the full path's checks."""
    module = sys.modules["pyg_fast.ops.index_segment_reduce"]  # the package exports the function under its name
    src, dst = random_graph(40, 300, 30, device)
    x = torch.randn(40, 2, 8, device=device)
    w = torch.rand(300, 2, device=device)
    for _ in range(8):  # past the COO route's first uses, the launch's statistics and its trial
        pyg_fast.index_weight_segment_reduce(x, src, dst, w, 30, reduce)
        if device == "cuda":  # the trial settles once its events are in
            torch.cuda.synchronize()
    checked = []
    monkeypatch.setattr(module, "check_index_tensor", lambda *args, **kwargs: checked.append(args[1]))
    w2 = torch.rand(300, 2, device=device)
    out = pyg_fast.index_weight_segment_reduce(x, src, dst, w2, 30, reduce)
    assert checked == []
    assert_close(out, reference(x, src, dst, w2, 30, reduce), torch.float32)
    other = src.flip(0).clone()  # another source tensor over the same destinations
    out = pyg_fast.index_weight_segment_reduce(x, other, dst, w2, 30, reduce)
    assert checked == ["src_index", "dst_index"]
    assert_close(out, reference(x, other, dst, w2, 30, reduce), torch.float32)
    src[0] = 39  # changed in place: its version moves on, so the kept call is not taken
    out = pyg_fast.index_weight_segment_reduce(x, src, dst, w2, 30, reduce)
    assert checked[2:] == ["src_index", "dst_index"]
    assert_close(out, reference(x, src, dst, w2, 30, reduce), torch.float32)
    with pytest.raises(ValueError, match="weight"):  # the weight is checked on every call
        pyg_fast.index_weight_segment_reduce(x, other, dst, torch.rand(299, 2, device=device), 30, reduce)
    with pytest.raises(ValueError, match="exactly one"):  # as is the choice of destinations
        pyg_fast.index_weight_segment_reduce(x, other, dst, w2, 30, reduce, ptr=torch.zeros(31, dtype=torch.long))


def test_compile_fullgraph_backward_traced_cpu():
    """The backward is traced with fake tensors too: no data-dependent checks may run there."""
    src, dst = random_graph(30, 120, 25, "cpu")
    x = torch.randn(30, 2, 4, requires_grad=True)
    w = torch.rand(120, 2, requires_grad=True)

    def loss(x, w):
        return pyg_fast.index_weight_segment_reduce(x, src, dst, w, 25, "mean").square().sum()

    expected = torch.autograd.grad(loss(x, w), (x, w))
    got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x, w), (x, w))
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, atol=1e-5)


def test_zero_source_rows():
    out = pyg_fast.index_weight_segment_reduce(torch.randn(0, 3, 4), torch.zeros(0, dtype=torch.long),
                                               torch.zeros(0, dtype=torch.long), None, 5, "max")
    assert out.shape == (5, 3, 4) and (out == 0).all()


def schedule_test_graph(kind: str, device):
    """(src, dst, num_nodes): a power-law graph, one with isolated nodes, one with a node of
    in-degree > 100,000; edges sorted by destination."""
    gen = torch.Generator().manual_seed(7)
    if kind == "power_law":
        num_nodes, num_edges = 3000, 40_000
        weights = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow(-0.9)
        dst = torch.randperm(num_nodes, generator=gen)[torch.multinomial(weights, num_edges, True, generator=gen)]
    elif kind == "isolated":
        num_nodes, num_edges = 2000, 6000
        dst = torch.randint(0, num_nodes // 4, (num_edges,), generator=gen) * 4  # 3 of 4 nodes isolated
    else:
        num_nodes, num_edges = 500, 101_000 + 3000
        dst = torch.cat([torch.full((101_000,), 17), torch.randint(0, num_nodes, (3000,), generator=gen)])
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst, perm = dst.sort()
    return src[perm].to(device), dst.to(device), num_nodes


SCHEDULES_ON_GRAPHS = [dict(schedule="row", max_lanes=32, threads=128, chunk=256),
                       dict(schedule="row_parallel", max_lanes=8, threads=256, chunk=256),
                       dict(schedule="chunk", max_lanes=32, threads=128, chunk=64),
                       dict(schedule="edges", max_lanes=32, threads=256, chunk=1024),
                       dict(schedule="groups", max_lanes=0, threads=256, chunk=0),
                       dict(schedule="groups", max_lanes=32, threads=128, chunk=16),
                       dict(schedule="balanced", max_lanes=32, threads=256, chunk=0)]


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", SCHEDULES_ON_GRAPHS, ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("kind", ["power_law", "isolated", "hub"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_every_cuda_schedule_on_graphs(params, kind, reduce):
    """Every schedule (GeoT's and the graph-aware ones) gives the reference's results and
    gradients (x and weight) on skewed graphs, forward and backward under the same schedule."""
    src, dst, num_nodes = schedule_test_graph(kind, "cuda")
    x = torch.randn(num_nodes, 2, 8, device="cuda")
    weight = torch.rand(src.numel(), 2, device="cuda") + 0.5
    grad = torch.randn(num_nodes, 2, 8, device="cuda")
    xs, ws = x.clone().requires_grad_(), weight.clone().requires_grad_()
    tuning.set_override(params)
    try:
        poison_allocator(num_nodes * 16 * 2, "cuda")
        out = pyg_fast.index_weight_segment_reduce(xs, src, dst, ws, num_nodes, reduce)
        out.backward(grad)
    finally:
        tuning.set_override(None)
    x64, w64 = x.double().requires_grad_(), weight.double().requires_grad_()
    ref = reference(x64, src, dst, w64, num_nodes, reduce)
    ref.backward(grad.double())
    assert_close(out, ref, torch.float32, scale=3)
    assert_close(xs.grad, x64.grad, torch.float32, scale=3)
    assert_close(ws.grad, w64.grad, torch.float32, scale=3)


NARROW_ON_GRAPHS = [p for p in SCHEDULES_ON_GRAPHS if p["schedule"] in ("edges", "groups")] + [
    dict(schedule="edges", max_lanes=1, threads=64, chunk=100), dict(schedule="edges", max_lanes=4, threads=128, chunk=37)]


class SourceDtypes(TorchDispatchMode):
    """Records the dtypes of the source indices that reach the gather-reduce op."""

    def __init__(self):
        super().__init__()
        self.dtypes = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith("pyg_fast.index_segment_reduce"):
            self.dtypes.add(args[1].dtype)
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", NARROW_ON_GRAPHS, ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("kind", ["power_law", "isolated", "hub"])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [1, 4, 12])
def test_cuda_edges_and_groups_schedules_read_int32_sources_without_gradients(params, kind, reduce, num_features):
    """Without gradients the edges and groups schedules read an int32 copy of the source index
    (kept with it): the reference's results with single- and multi-head weights."""
    src, dst, num_nodes = schedule_test_graph(kind, "cuda")
    x = torch.randn(num_nodes, num_features, device="cuda")
    weights = [torch.rand(src.numel(), device="cuda") + 0.5]
    if num_features % 2 == 0:  # two heads
        weights.append(torch.rand(src.numel(), 2, device="cuda") + 0.5)
    tuning.set_override(params)
    try:
        with torch.no_grad(), SourceDtypes() as seen:
            poison_allocator(num_nodes * num_features * 2, "cuda")
            outs = [pyg_fast.index_weight_segment_reduce(x, src, dst, w, num_nodes, reduce) for w in weights]
    finally:
        tuning.set_override(None)
    for out, w in zip(outs, weights):
        assert_close(out, reference(x, src, dst, w, num_nodes, reduce), torch.float32, scale=3)
    assert seen.dtypes == {torch.int32}  # the int32 copy was read


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", SCHEDULES_ON_GRAPHS, ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("kind", ["power_law", "hub"])
@pytest.mark.parametrize("reduce", REDUCES)
def test_every_cuda_schedule_reads_int32_sources(params, kind, reduce):
    """The raw op reads int32 source indices (a layout's on CUDA) under every schedule, with
    two-head weights: the reference's results."""
    src, dst, num_nodes = schedule_test_graph(kind, "cuda")
    ptr = torch._convert_indices_from_coo_to_csr(dst, num_nodes)
    x = torch.randn(num_nodes, 12, device="cuda")
    weight = torch.rand(src.numel(), 2, device="cuda") + 0.5
    tuning.set_override(params)
    try:
        launch = tuning.segment_launch(x, ptr, src.numel(), gather=True, heads=2)
    finally:
        tuning.set_override(None)
    assert launch.config[0] == tuning.SCHEDULES[params["schedule"]]
    poison_allocator(num_nodes * 12 * 2, "cuda")
    out = torch.ops.pyg_fast.index_segment_reduce(x, src.int(), ptr, weight, reduce, launch.config, launch.data)
    assert_close(out, reference(x.double(), src, dst, weight.double(), num_nodes, reduce), torch.float32, scale=3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 4, 64])
def test_gather_rows_is_index_select(device, dtype, width):
    """gather_rows (the layers' gather of per-edge rows) returns exactly index_select's rows, and
    its gradient sums the incoming rows per source row."""
    from pyg_fast.ops._kernels import gather_rows
    values = torch.randn(300, width, dtype=torch.float64, device=device).to(dtype).requires_grad_()
    index = torch.randint(0, 300, (5000,), device=device)
    index[:50] = 7  # a repeated row
    out = gather_rows(values, index)
    assert torch.equal(out, values.detach().index_select(0, index))
    grad = torch.randn(5000, width, dtype=torch.float64, device=device)
    (got,) = torch.autograd.grad(out, values, grad.to(dtype))
    want = torch.zeros(300, width, dtype=torch.float64, device=device).index_add_(0, index, grad)
    assert_close(got, want, dtype, scale=8)


@pytest.mark.parametrize("device", DEVICES)
def test_unsorted_sources_follow_in_place_changes(device):
    """The sources and weights put in destination order are kept with the graph: changing
    src_index, the destinations or the weight in place between calls must give the new result."""
    src = torch.randint(0, 40, (300,), device=device)
    dst = torch.randint(0, 30, (300,), device=device)  # unsorted
    x = torch.randn(40, 8, dtype=torch.float64, device=device)
    w = torch.rand(300, dtype=torch.float64, device=device)
    for _ in range(3):
        got = pyg_fast.index_weight_segment_reduce(x, src, dst, w, 30, "sum")
        assert_close(got, reference(x, src, dst, w, 30, "sum"), torch.float64)
        src.copy_(torch.randint(0, 40, (300,), device=device))
        dst[:5] = torch.tensor([29, 0, 3, 3, 7], device=device)
        got = pyg_fast.index_weight_segment_reduce(x, src, dst, w, 30, "sum")
        assert_close(got, reference(x, src, dst, w, 30, "sum"), torch.float64)
        w.mul_(torch.rand(300, dtype=torch.float64, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sorted_dst", [True, False])
def test_repeated_calls_follow_sources_weights_and_shapes(device, sorted_dst):
    """A call is checked and resolved once per graph and kind of inputs, then reused: other source
    indices with the same destinations, other weight shapes and dtypes, and other x shapes must
    still give the reference's numbers."""
    dst = torch.randint(0, 30, (300,), device=device)
    if sorted_dst:
        dst = dst.sort().values
    x = torch.randn(40, 2, 6, dtype=torch.float64, device=device)
    sources = [torch.randint(0, 40, (300,), device=device) for _ in range(2)]
    weights = [None, torch.rand(300, dtype=torch.float64, device=device),
               torch.rand(300, 2, dtype=torch.float64, device=device), torch.rand(300, device=device)]
    for _ in range(3):  # planned on the device's second call, reused from the third
        for src in sources + [sources[0].int()]:
            for weight in weights:
                for xs in (x, x.flatten(1), x[:, 0]):  # 2 heads divide 12 and 6 features
                    got = pyg_fast.index_weight_segment_reduce(xs, src, dst, weight, 30, "sum")
                    want = reference(xs, src.long(), dst, weight, 30, "sum")
                    assert_close(got, want, torch.float64)


def test_new_weights_replace_the_kept_one():
    """A weight used without a gradient is kept in destination order with the graph; a new weight
    every call (70 calls, more than the cache's per-tensor limit of 64) replaces it, so one
    gathered weight stays alive, and every result is the new weight's."""
    from pyg_fast.ops import _layout
    src, dst = torch.randint(0, 40, (300,)), torch.randint(0, 30, (300,))  # unsorted: reordered weights
    x = torch.randn(40, 8, dtype=torch.float64)
    for _ in range(70):
        w = torch.rand(300, dtype=torch.float64)
        got = pyg_fast.index_weight_segment_reduce(x, src, dst, w, 30, "sum")
        assert_close(got, reference(x, src, dst, w, 30, "sum"), torch.float64)
    from pyg_fast.ops.index_segment_reduce import _gathered
    perm = _gathered(dst, 30, src, x, None)[0].perm  # the grouping the calls above kept
    entries = _layout._CACHE[id(_layout.storage_owner(perm))][1]
    kept = [value for key, value in entries.items() if key[0][0] == "weight_in_order"]
    assert len(kept) == 1 and kept[0][0]() is w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("graph", ZOO_TEST_GRAPHS)
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_on_zoo_graphs(device, graph, reduce):
    """The schedules the selector picks for the zoo's graphs (on CUDA: the first call's choice
    from the sizes, then the reused graph's with its measured skew and layouts) against float64."""
    edge_index, N = zoo_graph(graph)
    src, dst = edge_index.to(device)
    x = torch.randn(N, 32, device=device)
    weight = torch.randn(src.numel(), device=device) if reduce == "sum" else None
    ref = reference(x, src, dst, weight, N, reduce)
    for _ in range(3):
        out = pyg_fast.index_weight_segment_reduce(x, src, dst, weight, N, reduce)
        assert_close(out, ref, torch.float32, scale=4)


@pytest.mark.parametrize("device", DEVICES)
def test_new_views_of_one_graph_are_grouped_once(monkeypatch, device):
    """``edge_index[0]`` and ``edge_index[1]`` sliced anew on every call (as a model's forward
    does) find the grouping of the first call; a change of the graph's values regroups it."""
    from pyg_fast.ops import _layout
    torch.manual_seed(0)
    N, E = 40, 300
    edge_index = torch.randint(0, N, (2, E), device=device)
    x = torch.randn(N, 8, device=device, dtype=torch.float64)
    groupings = []
    csr_layout = _layout.csr_layout
    monkeypatch.setattr(_layout, "csr_layout", lambda *args: groupings.append(1) or csr_layout(*args))
    ref = torch.full((N, 8), float("-inf"), device=device, dtype=torch.float64).scatter_reduce(
        0, edge_index[1].view(-1, 1).expand(-1, 8), x[edge_index[0]], "amax")
    ref = torch.where(ref.isinf(), torch.zeros_like(ref), ref)
    for _ in range(5):
        torch.testing.assert_close(pyg_fast.index_segment_reduce(x, edge_index[0], edge_index[1], N, "max"), ref)
    assert len(groupings) == 1
    edge_index[0, 0] = (edge_index[0, 0] + 1) % N  # in place: the sources in destination order change
    pyg_fast.index_segment_reduce(x, edge_index[0], edge_index[1], N, "max")
    assert len(groupings) == 2
