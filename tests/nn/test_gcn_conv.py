import copy
import gc
import weakref

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric import EdgeIndex
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor

import pyg_fast.nn as fast_nn
from pyg_fast.testing import DEVICES, PygFastOps
from tests.nn._helpers import compare, random_graph


def pair(device, **kwargs):
    ref = pyg_nn.GCNConv(16, 32, **kwargs).to(device)
    fast = fast_nn.GCNConv(16, 32, **kwargs).to(device)
    fast.load_state_dict(ref.state_dict())
    return ref, fast


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{}, {"improved": True}, {"add_self_loops": False}, {"bias": False},
                                     {"normalize": False}, {"cached": True}])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
def test_matches_pyg(device, options, weighted, flow, route):
    ref, fast = pair(device, flow=flow, **options)
    ei = random_graph(40, 300, device)
    if weighted and device == "cuda":  # PyG's pick among a node's several weighted self loops is unspecified on CUDA
        ei = ei[:, ei[0] != ei[1]]
    x = torch.randn(40, 16, device=device, requires_grad=True)
    args = (x, ei, torch.rand(ei.size(1), device=device) + 0.1) if weighted else (x, ei)
    # the COO route: an unweighted graph normalised per call
    coo = route == "coo" and not weighted and options.get("normalize", True) and not options.get("cached")
    for _ in range(2):  # the second call runs on cached layouts (the grouped route)
        compare(ref, fast, args, (x,), expect_ops={"gather_scatter" if coo else "index_segment_reduce"})
    if options.get("cached"):
        assert fast._cached_edge_index is not None


@pytest.mark.parametrize("device", DEVICES)
def test_propagates_the_inputs_where_they_move_fewer_values(device, route, monkeypatch):
    """48 -> 32: PyG's order (the products X W propagated) where x needs a gradient or nothing
    does; X propagated before W in a first layer, where the products' propagation would be
    differentiated for W's gradient and X's is not (2 x 32 > 48). 16 -> 32: X first. Outputs and
    gradients as PyG's on both routes."""
    import pyg_fast.nn.gcn_conv as gcn_module
    widths = []

    def recorded(op):
        def call(x2, *args):
            if x2.size(1) > 1:  # not the degree count of the COO route's normalisation
                widths.append(x2.size(1))
            return op(x2, *args)
        return call
    for name in ("reduce_csr", "gather_scatter"):
        monkeypatch.setattr(gcn_module, name, recorded(getattr(gcn_module, name)))
    ref = pyg_nn.GCNConv(48, 32).to(device, torch.float64)
    fast = fast_nn.GCNConv(48, 32).to(device, torch.float64)
    fast.load_state_dict(ref.state_dict())
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 48, device=device, dtype=torch.float64)
    compare(ref, fast, (x, ei))  # the weight's gradient only
    x_grad = x.clone().requires_grad_()
    compare(ref, fast, (x_grad, ei), (x_grad,))
    with torch.no_grad():
        torch.testing.assert_close(fast(x, ei), ref(x, ei))
    ref, fast = pair(device)
    x16 = torch.randn(40, 16, device=device, requires_grad=True)
    compare(ref, fast, (x16, ei), (x16,))
    assert widths == [48, 32, 32, 16]


@pytest.mark.parametrize("device", DEVICES)
def test_edge_index_and_sparse_inputs(device):
    ref, fast = pair(device)
    ei = random_graph(30, 200, device)
    x = torch.randn(30, 16, device=device)
    for graph in (EdgeIndex(ei, sparse_size=(30, 30)),
                  EdgeIndex(ei[:, ei[1].argsort()], sparse_size=(30, 30), sort_order="col"),
                  to_torch_csc_tensor(ei, size=(30, 30)).t(),
                  to_torch_coo_tensor(ei, size=(30, 30)).t().coalesce()):
        with PygFastOps() as mode:
            # PyG adds self loops to sparse inputs even where one exists, so compare per input
            torch.testing.assert_close(fast(x, graph), ref(x, graph), rtol=1e-5, atol=1e-5)
        assert "index_segment_reduce" in mode.ops


def test_graph_change_is_seen():
    ref, fast = pair("cpu")
    x = torch.randn(30, 16)
    ei = random_graph(30, 200)
    fast(x, ei)
    ei[0, :50] = torch.randint(0, 30, (50,))  # in-place change bumps the version
    torch.testing.assert_close(fast(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)


def test_fallbacks_and_state():
    ref, fast = pair("cpu")
    assert str(fast) == "GCNConv(16, 32)" and isinstance(fast, pyg_nn.GCNConv)
    assert list(fast.state_dict()) == list(ref.state_dict())
    ref.load_state_dict(fast.state_dict())
    x, ei = torch.randn(10, 16), random_graph(10, 40)
    seen = []
    fast.register_message_forward_pre_hook(lambda m, inputs: seen.append(inputs[0]["x_j"].shape))
    torch.testing.assert_close(fast(x, ei), ref(x, ei))
    assert len(seen) == 1 and seen[0][1] == 32  # the hook made PyG's message path run
    scripted = torch.jit.script(copy.deepcopy(ref))
    fast2 = fast_nn.GCNConv(16, 32)
    fast2.load_state_dict(ref.state_dict())
    torch.testing.assert_close(torch.jit.script(fast2)(x, ei), scripted(x, ei))
    with pytest.raises(ValueError, match="bipartite"):
        fast((x, x), ei)
    with pytest.raises(IndexError, match="outside"):
        fast_nn.GCNConv(16, 32, normalize=False)(x, torch.tensor([[0, 1], [2, 11]]))


def test_compile():
    ref, fast = pair("cpu", add_self_loops=False)
    x, ei = torch.randn(20, 16), random_graph(20, 80)
    compiled = torch.compile(fast, backend="aot_eager")
    torch.testing.assert_close(compiled(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make_layer", [lambda: fast_nn.GCNConv(4, 4),
                                        lambda: fast_nn.GCNConv(4, 4, add_self_loops=False),
                                        lambda: fast_nn.GINConv(torch.nn.Identity())])
@pytest.mark.parametrize("as_edge_index", [False, True])
def test_graph_caches_release_edge_index(make_layer, as_edge_index):
    """The per-graph caches die with the graph, also for inputs already sorted by target (whose
    grouped endpoints are views of edge_index) and for gcn_norm without self loops."""
    ei = torch.stack([torch.arange(10).roll(1), torch.arange(10)])  # sorted by target
    ei = EdgeIndex(ei, sparse_size=(10, 10)) if as_edge_index else ei
    alive = weakref.ref(ei)
    layer, x = make_layer(), torch.randn(10, 4)
    layer(x, ei)
    del ei
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weighted", [False, True])
def test_autocast_as_pyg(device, weighted, route):
    """Under autocast the projection is half; PyG normalises in the inputs' dtype and its messages
    promote. Node 0 has 400 in-edges: a degree counted in bfloat16 would be off."""
    ref = pyg_nn.GCNConv(32, 8).to(device)  # projected before propagating (8 < 32)
    fast = fast_nn.GCNConv(32, 8).to(device)
    fast.load_state_dict(ref.state_dict())
    ei = torch.cat([random_graph(60, 300, device),
                    torch.stack([torch.randint(0, 60, (400,), device=device), torch.zeros(400, dtype=torch.long,
                                                                                          device=device)])], 1)
    x = torch.randn(60, 32, device=device)
    w = torch.rand(ei.size(1), device=device) if weighted else None
    half = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device_type=torch.device(device).type, dtype=half):
        want = ref(x, ei, w)
        for _ in range(2):
            got = fast(x, ei, w)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
