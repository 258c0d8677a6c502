import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch_geometric import EdgeIndex

import pyg_fast
import pyg_fast.nn as fast_nn
from pyg_fast.nn import _graph
from pyg_fast.testing import DEVICES, PygFastOps
from tests.nn._helpers import compare, random_graph

OPS = {"index_segment_reduce", "edge_softmax", "edge_softmax_backward", "sddmm"}
# A new graph's first uses: no grouping (scores, softmax and sums with atomics)
COO_OPS = {"sddmm", "edge_softmax_coo", "edge_softmax_coo_backward", "gather_scatter"}


def pair(device, in_channels=16, out_channels=8, **kwargs):
    ref = pyg_nn.GATConv(in_channels, out_channels, **kwargs).to(device)
    fast = fast_nn.GATConv(in_channels, out_channels, **kwargs).to(device)
    fast.load_state_dict(ref.state_dict())
    return ref, fast


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{}, {"heads": 4}, {"heads": 3, "concat": False}, {"add_self_loops": False},
                                     {"heads": 2, "residual": True}, {"bias": False, "negative_slope": 0.1},
                                     {"flow": "target_to_source"}])
def test_matches_pyg(device, options, route):
    ref, fast = pair(device, **options)
    assert str(fast) == str(ref) and list(fast.state_dict()) == list(ref.state_dict())
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 16, device=device, requires_grad=True)
    for _ in range(2):
        compare(ref, fast, (x, ei), (x,), expect_ops=COO_OPS if route == "coo" else OPS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("edge_dim", [1, 4])
@pytest.mark.parametrize("fill_value", [0.5, "mean"])
def test_edge_attr(device, edge_dim, fill_value, route):
    ref, fast = pair(device, heads=2, edge_dim=edge_dim, fill_value=fill_value)
    ei = random_graph(30, 200, device)
    x = torch.randn(30, 16, device=device, requires_grad=True)
    attr = torch.randn(200, edge_dim, device=device, requires_grad=True)
    compare(ref, fast, (x, ei, attr.squeeze(-1) if edge_dim == 1 else attr), (x, attr),
            expect_ops=COO_OPS if route == "coo" else OPS)


@pytest.mark.parametrize("device", DEVICES)
def test_bipartite(device, route):
    ref, fast = pair(device, in_channels=(16, 8), heads=2)
    ei = random_graph(30, 200, device, num_dst=12)
    x1 = torch.randn(30, 16, device=device, requires_grad=True)
    x2 = torch.randn(12, 8, device=device, requires_grad=True)
    compare(ref, fast, ((x1, x2), ei), (x1, x2), expect_ops=COO_OPS if route == "coo" else OPS)
    ref, fast = pair(device, in_channels=(16, 8), heads=2, add_self_loops=False)
    compare(ref, fast, ((x1, None), ei, None, (30, 12)), (x1,), expect_ops={"edge_softmax"})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{}, {"add_self_loops": False}, {"concat": False}, {"bias": False}])
def test_wide_sources_into_few_targets_project_their_sums(device, options, route):
    """One head, 64 sources of 64 features into 32 channels, 16 edges into 4 targets: the layer
    sums the sources' own features under the attention and projects the sums (fewer multiply-adds
    at the CPU's and CUDA's gather costs), as PyG's numbers."""
    ref, fast = pair(device, in_channels=(64, 8), out_channels=32, **options)
    ei = random_graph(64, 16, device, num_dst=4)
    x1 = torch.randn(64, 64, device=device, requires_grad=True)
    x2 = torch.randn(4, 8, device=device, requires_grad=True)
    assert fast._projects_after(fast.lin_src, x1, x2, _graph.unpack(ei, fast.flow), None)
    compare(ref, fast, ((x1, x2), ei), (x1, x2), rtol=1e-4, atol=1e-5)
    out, (ei_ref, alpha_ref) = ref((x1, x2), ei, return_attention_weights=True)
    got, (ei_got, alpha_got) = fast((x1, x2), ei, return_attention_weights=True)
    torch.testing.assert_close(got, out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(alpha_got, alpha_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_attention_weights_in_pyg_order(device):
    ref, fast = pair(device, heads=2)
    ei = random_graph(30, 200, device)
    x = torch.randn(30, 16, device=device)
    out, (ei_out, alpha) = fast(x, ei, return_attention_weights=True)
    ref_out, (ref_ei, ref_alpha) = ref(x, ei, return_attention_weights=True)
    assert torch.equal(ei_out, ref_ei)
    torch.testing.assert_close(alpha, ref_alpha, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    # PyG tests the flag's truth: False gives the output alone
    torch.testing.assert_close(fast(x, ei, return_attention_weights=False), ref(x, ei, return_attention_weights=False),
                               rtol=1e-5, atol=1e-5)


def test_output_with_and_without_attention_weights_is_the_same_cpu(monkeypatch):
    """PyG computes both calls alike, and its tests compare them with torch.allclose's default
    tolerance: the first call of a new graph (the COO route, no grouping) and the call that
    returns the attention (grouped, PyG's edge list) round the softmax alike on the CPU, so the
    outputs are equal. Random inputs over a graph with an existing loop: a COO softmax that divided
    where the grouped one multiplies by the reciprocal gave unequal outputs on 179 of these 200."""
    from pyg_fast import tuning
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": 2 ** 62, "cuda": 2 ** 62})  # tests default to grouped
    for seed in range(200):
        torch.manual_seed(seed)
        edge_index = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]])  # a new graph every time
        conv = fast_nn.GATConv(8, 32, heads=2, residual=True)
        x = torch.randn(4, 8)
        with PygFastOps() as log:
            out = conv(x, edge_index)
        assert "edge_softmax_coo" in log.ops
        assert torch.equal(conv(x, edge_index, return_attention_weights=True)[0], out), seed


@pytest.mark.parametrize("device", DEVICES)
def test_empty_graph_and_edge_index(device):
    ref, fast = pair(device, heads=2)
    x = torch.randn(0, 16, device=device)
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    assert fast(x, empty).shape == (0, 16)
    ei = random_graph(30, 200, device)
    x = torch.randn(30, 16, device=device)
    torch.testing.assert_close(fast(x, EdgeIndex(ei, sparse_size=(30, 30))), ref(x, ei), rtol=1e-5, atol=1e-5)


def test_dropout_only_in_training():
    ref, fast = pair("cpu", heads=2, dropout=0.5)
    x, ei = torch.randn(30, 16), random_graph(30, 200)
    fast.eval()
    ref.eval()
    torch.testing.assert_close(fast(x, ei), ref(x, ei), rtol=1e-5, atol=1e-5)
    fast.train()
    _, (_, alpha) = fast(x, ei, return_attention_weights=True)
    assert (alpha == 0).any() and alpha.max() > 1.0  # dropped and rescaled by 1 / (1 - p)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("end", [0, 1])
def test_out_of_range_edges_are_reported(device, end, route):
    """An edge end outside the nodes raises IndexError naming it, on both routes, also where two
    layers share the graph (the COO route reports a graph once, through its aggregation)."""
    x = torch.randn(10, 16, device=device)
    ei = random_graph(10, 40, device)
    ei[end, 5] = 10
    first, second = fast_nn.GATConv(16, 8).to(device), fast_nn.GATConv(8, 8).to(device)
    with pytest.raises(IndexError, match=rf"'edge_index\[{end}\]' holds values outside \[0, 10\)"):
        second(first(x, ei), ei)
        pyg_fast.check_errors()


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_as_pyg(device, route):
    """Under autocast the projections are half and the scores float; PyG's messages, and its
    output, are float."""
    ref, fast = pair(device, heads=2)
    ei = random_graph(40, 300, device)
    x = torch.randn(40, 16, device=device)
    half = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device_type=torch.device(device).type, dtype=half):
        want = ref(x, ei)
        for _ in range(2):
            got = fast(x, ei)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
