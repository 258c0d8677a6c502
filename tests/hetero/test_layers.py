"""pyg_fast.hetero layers against PyG 2.8's layers with the same parameters."""
import itertools

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.datasets import FakeHeteroDataset
from torch_geometric.utils import to_torch_csc_tensor

import pyg_fast.hetero as fast
from pyg_fast.hetero.rgcn_conv import relation_slice
from pyg_fast.ops.segment_matmul import segment_matmul
from pyg_fast.testing import DEVICES, assert_close, rel_err


def pair(pyg_cls, fast_cls, *args, device="cpu", **kwargs):
    ref = pyg_cls(*args, **kwargs).to(device)
    mine = fast_cls(*args, **kwargs).to(device)
    mine.load_state_dict(ref.state_dict())
    assert list(mine.state_dict()) == list(ref.state_dict())
    assert str(mine) == str(ref)
    return ref, mine


def assert_same_forward_backward(ref, mine, run, tensors=()):
    """Same outputs and same gradients for every parameter and every tensor in ``tensors``."""
    out_ref, out_mine = run(ref), run(mine)
    if isinstance(out_ref, dict):
        assert out_ref.keys() == out_mine.keys()
        out_ref, out_mine = torch.cat(list(out_ref.values())), torch.cat(list(out_mine.values()))
    assert_close(out_mine, out_ref, torch.float32, scale=10)
    grad = torch.randn_like(out_ref)
    wrt_ref = list(ref.parameters()) + list(tensors)
    wrt_mine = list(mine.parameters()) + list(tensors)
    g_ref = torch.autograd.grad(out_ref, wrt_ref, grad, allow_unused=True)
    g_mine = torch.autograd.grad(out_mine, wrt_mine, grad, allow_unused=True)
    # A gradient that is a sum of cancelling terms (HGT's p_rel: one entry of 1e-4 from terms of 1)
    # differs between two float32 summation orders by more than 1e-4 of itself: errors are taken
    # relative to the norm the tensor would have with the layer's typical gradient entry (RMS).
    present = [b.detach().double().flatten() for b in g_ref if b is not None]
    typical = torch.cat(present).norm().item() / max(sum(b.numel() for b in present), 1) ** 0.5 if present else 0.0
    for a, b in zip(g_mine, g_ref):
        assert (a is None) == (b is None)
        if a is not None:
            assert_close(a, b, torch.float32, scale=10, floor=typical * b.numel() ** 0.5)


def relational_graph(device, N=60, E=500, R=7, in_channels=16):
    edge_index = torch.randint(0, N, (2, E), device=device)
    edge_type = torch.randint(0, R, (E,), device=device)
    edge_type[edge_type == 3] = 4  # one relation without edges
    x = torch.randn(N, in_channels, device=device, requires_grad=True)
    return x, edge_index, edge_type


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ["RGCNConv", "FastRGCNConv"])
@pytest.mark.parametrize("aggr,decomposition", itertools.product(["mean", "add"],
                                                                 [{}, {"num_bases": 3}, {"num_blocks": 4}]))
def test_rgcn_matches_pyg(cls, aggr, decomposition, device):
    x, edge_index, edge_type = relational_graph(device)
    ref, mine = pair(getattr(pyg_nn, cls), getattr(fast, cls), 16, 8, 7, aggr=aggr, device=device, **decomposition)
    assert_same_forward_backward(ref, mine, lambda conv: conv(x, edge_index, edge_type), [x])


@pytest.mark.parametrize("device", DEVICES)
def test_rgcn_bipartite_and_featureless(device):
    x, edge_index, edge_type = relational_graph(device)
    x_dst = torch.randn(30, 16, device=device)
    edge_index[1] %= 30
    ref, mine = pair(pyg_nn.RGCNConv, fast.RGCNConv, 16, 8, 7, device=device)
    assert_same_forward_backward(ref, mine, lambda conv: conv((x, x_dst), edge_index, edge_type), [x])
    for kwargs in ({}, {"num_bases": 3}):  # featureless (x=None or node indices): a gather of weight rows
        ref, mine = pair(pyg_nn.RGCNConv, fast.RGCNConv, 60, 8, 7, device=device, **kwargs)
        assert_same_forward_backward(ref, mine, lambda conv: conv(None, edge_index, edge_type))
        index = torch.randperm(60, device=device)
        assert_same_forward_backward(ref, mine, lambda conv: conv(index, edge_index, edge_type))


def test_rgcn_slice_is_cached_and_follows_edge_type_changes():
    x, edge_index, edge_type = relational_graph("cpu")
    ref, mine = pair(pyg_nn.RGCNConv, fast.RGCNConv, 16, 8, 7)
    first = relation_slice(edge_index, edge_type, 7, 60)
    assert relation_slice(edge_index, edge_type, 7, 60) is first
    assert_close(mine(x, edge_index, edge_type, tensor_slice=first), ref(x, edge_index, edge_type), torch.float32)
    edge_type[:100] = (edge_type[:100] + 1) % 7  # in place: the cache must not be reused
    assert relation_slice(edge_index, edge_type, 7, 60) is not first
    assert_close(mine(x, edge_index, edge_type), ref(x, edge_index, edge_type), torch.float32)
    with pytest.raises(ValueError, match="does not describe this graph"):
        mine((x, x[:10]), edge_index % 10, edge_type, tensor_slice=first)
    with pytest.raises(IndexError, match="'edge_type' holds values outside"):
        mine(x, edge_index, edge_type + 7)


RGAT_GRID = list(itertools.product([None, "additive", "scaled", "f-additive", "f-scaled"],
                                   ["across-relation", "within-relation"],
                                   ["additive-self-attention", "multiplicative-self-attention"]))


@pytest.mark.parametrize("mod,mechanism,mode", RGAT_GRID)
def test_rgat_matches_pyg(mod, mechanism, mode):
    """Against PyG in float64; some modes (e.g. 'scaled') reach 1e20 and are ill-conditioned, so
    the bound is the larger of 1e-4 and 10x PyG's own float32 error."""
    x, edge_index, edge_type = relational_graph("cpu", N=30, E=200, R=5, in_channels=8)
    x = (0.1 * x).detach().requires_grad_()  # modes like "scaled" reach 1e37 in float32 otherwise (1e29 now)
    edge_attr = 0.1 * torch.randn(edge_index.size(1), 3)
    kwargs = dict(mod=mod, attention_mechanism=mechanism, attention_mode=mode, heads=2, edge_dim=3,
                  dim=1 if mode == "additive-self-attention" else 2)
    ref, mine = pair(pyg_nn.RGATConv, fast.RGATConv, 8, 4, 5, **kwargs)
    ref64 = pyg_nn.RGATConv(8, 4, 5, **kwargs).double()
    ref64.load_state_dict(ref.state_dict())
    x64 = x.detach().double().requires_grad_()
    # The 'scaled' modes leave float32's normal range (outputs from 1e-44 to 1e13 here), where
    # float32 results depend on rounding order (NaN was seen in one CI run): there ours runs in
    # float64 too and must match PyG's float64 closely.
    wild = mod in ("scaled", "f-scaled")
    if wild:
        mine = mine.double()
    runs = {}
    fast_inputs = (x64, edge_attr.double()) if wild else (x, edge_attr)
    for name, conv, inputs in (("pyg", ref, (x, edge_attr)), ("fast", mine, fast_inputs),
                               ("pyg64", ref64, (x64, edge_attr.double()))):
        out = conv(inputs[0], edge_index, edge_type, inputs[1])
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        grads = torch.autograd.grad(out, list(conv.parameters()) + [inputs[0]], grad.to(out.dtype), allow_unused=True)
        runs[name] = [out] + [g for g in grads if g is not None]
    for ours, pyg32, exact in zip(runs["fast"], runs["pyg"], runs["pyg64"]):
        if wild:  # even float64 overflows to NaN there for some draws (torch 2.11's on the H100 machine)
            nan = torch.isnan(exact)
            assert torch.equal(torch.isnan(ours), nan), "NaN where PyG's float64 result has none, or the reverse"
            ours, exact = ours[~nan], exact[~nan]
        assert rel_err(ours, exact) <= (1e-9 if wild else max(1e-4, 10 * rel_err(pyg32, exact)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("decomposition", [{}, {"num_bases": 2}, {"num_blocks": 2}])
def test_rgat_decompositions_and_attention_weights(decomposition, device):
    x, edge_index, edge_type = relational_graph(device, N=30, E=200, R=5, in_channels=8)
    ref, mine = pair(pyg_nn.RGATConv, fast.RGATConv, 8, 4, 5, heads=2, concat=False, device=device, **decomposition)
    assert_same_forward_backward(ref, mine, lambda conv: conv(x, edge_index, edge_type), [x])
    _, (_, alpha_ref) = ref(x, edge_index, edge_type, return_attention_weights=True)
    _, (returned_index, alpha) = mine(x, edge_index, edge_type, return_attention_weights=True,
                                      tensor_slice=fast.TensorSlice(None, edge_type, 5))
    assert torch.equal(returned_index, edge_index)  # the edges given, in their order
    assert_close(alpha, alpha_ref, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", [1, 4])
def test_hgt_matches_pyg(heads, device):
    data = FakeHeteroDataset(num_node_types=3, num_edge_types=6, avg_num_nodes=40, avg_num_channels=16)[0]
    data = data.to(device)
    x_dict = {key: torch.randn(store.num_nodes, 16, device=device, requires_grad=True)
              for key, store in data.node_items()}
    ref, mine = pair(pyg_nn.HGTConv, fast.HGTConv, 16, 32, data.metadata(), heads=heads, device=device)
    assert_same_forward_backward(ref, mine, lambda conv: conv(x_dict, data.edge_index_dict), list(x_dict.values()))


def test_hgt_follows_edge_changes_and_hooks():
    data = FakeHeteroDataset(num_node_types=2, num_edge_types=3, avg_num_nodes=30, avg_num_channels=8)[0]
    x_dict = {key: torch.randn(store.num_nodes, 8) for key, store in data.node_items()}
    ref, mine = pair(pyg_nn.HGTConv, fast.HGTConv, 8, 8, data.metadata(), heads=2)
    edges = data.edge_index_dict
    for _ in range(2):  # the second call reuses the cached bipartite edges
        assert_same_forward_backward(ref, mine, lambda conv: conv(x_dict, edges))
    first = next(iter(edges.values()))
    first[0] = first[0].flip(0)  # in place: the cache must not be reused
    assert_same_forward_backward(ref, mine, lambda conv: conv(x_dict, edges))
    sparse = {et: to_torch_csc_tensor(ei, size=(data[et[0]].num_nodes, data[et[2]].num_nodes)).t()
              for et, ei in edges.items()}  # torch.sparse inputs run PyG's path
    assert_same_forward_backward(ref, mine, lambda conv: conv(x_dict, sparse))
    seen = []
    mine.register_message_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]["k_j"].shape))
    assert_same_forward_backward(ref, mine, lambda conv: conv(x_dict, edges))
    assert seen  # PyG's message passing ran, with its hooks


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_hetero_linear_matches_pyg(bias, device):
    x = torch.randn(300, 12, device=device, requires_grad=True)
    type_vec = torch.randint(0, 5, (300,), device=device)
    ref, mine = pair(pyg_nn.HeteroLinear, fast.HeteroLinear, 12, 20, 5, bias=bias, device=device)
    assert_same_forward_backward(ref, mine, lambda lin: lin(x, type_vec), [x])
    sorted_types = type_vec.sort().values
    ref_s, mine_s = pair(pyg_nn.HeteroLinear, fast.HeteroLinear, 12, 20, 5, is_sorted=True, bias=bias, device=device)
    assert_same_forward_backward(ref_s, mine_s, lambda lin: lin(x, sorted_types), [x])


def test_hetero_linear_autocast_and_lazy():
    x = torch.randn(100, 12)
    type_vec = torch.randint(0, 3, (100,))
    ref, mine = pair(pyg_nn.HeteroLinear, fast.HeteroLinear, 12, 8, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mine(x, type_vec)
    assert out.dtype == torch.bfloat16
    assert_close(out, ref(x, type_vec), torch.bfloat16, scale=2)
    lazy = fast.HeteroLinear(-1, 8, 3)
    assert lazy(x, type_vec).shape == (100, 8) and lazy.weight.shape == (3, 12, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_hetero_dict_linear_matches_pyg(device):
    types = ["a", "b", "c", "d", "e"]
    x_dict = {t: torch.randn(10 * i + 3, 32, device=device, requires_grad=True) for i, t in enumerate(types)}
    del x_dict["c"]  # a type without input
    ref, mine = pair(pyg_nn.HeteroDictLinear, fast.HeteroDictLinear, 32, 40, types=types, device=device)
    assert_same_forward_backward(ref, mine, lambda lin: lin(x_dict), list(x_dict.values()))
    mixed = {"a": 12, "b": 5, "c": 12, "d": 12}  # different input sizes: one GEMM per type
    x_mixed = {t: torch.randn(9, c, device=device) for t, c in mixed.items()}
    ref, mine = pair(pyg_nn.HeteroDictLinear, fast.HeteroDictLinear, mixed, 7, device=device)
    assert_same_forward_backward(ref, mine, lambda lin: lin(x_mixed))


@pytest.mark.skipif("cuda" not in DEVICES, reason="the dtype rule of the grouped path is CUDA's")
@pytest.mark.parametrize("dtype,tf32,grouped", [(torch.float32, False, False), (torch.float32, True, True),
                                                (torch.bfloat16, False, True)])
def test_hetero_dict_linear_groups_where_tensor_cores_compute(dtype, tf32, grouped, monkeypatch):
    """One segmented matmul in 16-bit types and TF32 float32, one GEMM per type in exact float32;
    the same results either way."""
    import pyg_fast.hetero.linear as linear
    calls = []
    monkeypatch.setattr(linear, "segment_matmul", lambda *a, **k: calls.append(1) or segment_matmul(*a, **k))
    types = list("abcd")
    lin = fast.HeteroDictLinear(32, 40, types=types).to("cuda", dtype)
    x = {t: torch.randn(20 + 7 * i, 32, device="cuda").to(dtype) for i, t in enumerate(types)}
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        out = lin(x)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    assert bool(calls) == grouped
    for t in types:
        ref = x[t].double() @ lin.lins[t].weight.double().t() + lin.lins[t].bias.double()
        assert_close(out[t], ref, torch.bfloat16 if tf32 else dtype)


def test_module_wrapper_wraps_pyg_modules():
    x, edge_index, edge_type = relational_graph("cpu")
    conv = pyg_nn.RGCNConv(16, 8, 7, num_bases=2)
    wrapped = fast.HeteroModuleWrapper(conv)
    assert type(conv) is pyg_nn.RGCNConv  # the user's module is unchanged
    assert list(wrapped.state_dict()) == list(conv.state_dict())
    assert_close(wrapped(x, edge_index, edge_type), conv(x, edge_index, edge_type), torch.float32)
    wrapped(x, edge_index, edge_type).sum().backward()
    assert conv.weight.grad is not None  # parameters are shared
    state = {k: torch.randn_like(v) for k, v in conv.state_dict().items()}
    wrapped.load_state_dict(state)
    assert torch.equal(conv.comp, state["comp"])
    explicit = fast.RelationSlice(edge_index, edge_type, 7, 60)
    assert_close(wrapped(x, edge_index, edge_type, tensor_slice=explicit), conv(x, edge_index, edge_type),
                 torch.float32)

    data = FakeHeteroDataset(num_node_types=2, num_edge_types=4, avg_num_nodes=30, avg_num_channels=8)[0]
    x_dict = {key: torch.randn(store.num_nodes, 8) for key, store in data.node_items()}
    hgt = pyg_nn.HGTConv(8, 8, data.metadata(), heads=2)
    out_ref, out = hgt(x_dict, data.edge_index_dict), fast.HeteroModuleWrapper(hgt)(x_dict, data.edge_index_dict)
    assert type(hgt.k_rel) is pyg_nn.HeteroLinear
    for key in out_ref:
        assert_close(out[key], out_ref[key], torch.float32)

    lin = pyg_nn.HeteroLinear(8, 4, 3)
    type_vec = torch.randint(0, 3, (50,))
    x8 = torch.randn(50, 8)
    ts = fast.TensorSlice(x8, type_vec, 3)
    assert_close(fast.HeteroModuleWrapper(lin)(x8, type_vec, tensor_slice=ts), lin(x8, type_vec), torch.float32)
    with pytest.raises(ValueError, match="built from other types"):
        fast.HeteroModuleWrapper(lin)(x8, type_vec.clone(), tensor_slice=ts)
    assert fast.FastenModule is fast.HeteroModuleWrapper  # the design's name stays an alias
    with pytest.raises(TypeError, match="HeteroModuleWrapper supports"):
        fast.HeteroModuleWrapper(torch.nn.Linear(2, 2))


def test_tensor_slice_groups_rows_by_type():
    types = torch.tensor([2, 0, 2, 1, 0, 2])
    data = torch.arange(6.0).view(-1, 1)
    ts = fast.TensorSlice(data, types, num_types=4)
    assert ts.ptr.tolist() == [0, 2, 3, 6, 6]
    assert ts.data.view(-1).tolist() == [1.0, 4.0, 3.0, 0.0, 2.0, 5.0]
    assert torch.equal(ts.unsort(ts.data), data)
    w = torch.randn(4, 1, 3)
    assert_close(ts.gather_matmul(data, w), torch.bmm(data.unsqueeze(1), w[types]).squeeze(1), torch.float32)
    with pytest.raises(ValueError, match="'data' has 5 rows"):
        fast.TensorSlice(data[:5], types)


def test_scripting_gives_pyg_classes_with_the_same_numbers():
    """Where PyG's class scripts, ours scripts as PyG's class holding the same state (RGCNConv and
    RGATConv do not script in PyG 2.8 either)."""
    torch.manual_seed(0)
    x, edge_index = torch.randn(40, 16), torch.randint(0, 40, (2, 300))
    edge_type, type_vec = torch.randint(0, 3, (300,)), torch.randint(0, 3, (40,))
    xs = {key: torch.randn(5, 16) for key in "abcd"}
    cases = [(fast.FastRGCNConv(16, 8, num_relations=3, num_bases=2), (x, edge_index, edge_type)),
             (fast.HeteroLinear(16, 8, num_types=3), (x, type_vec)),
             (fast.HeteroDictLinear(16, 8, types=list("abcd")), (xs,))]
    for module, args in cases:
        scripted = torch.jit.script(module)
        expected, got = module(*args), scripted(*args)
        if isinstance(expected, dict):
            expected, got = torch.cat([expected[k] for k in "abcd"]), torch.cat([got[k] for k in "abcd"])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert type(module).__module__.startswith("pyg_fast")
