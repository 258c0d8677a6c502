import pytest
import torch
from torch_geometric.utils import softmax as pyg_softmax

from pyg_fast.ops import edge_softmax
from pyg_fast.testing import DEVICES, DTYPES, PygFastOps, assert_close


def random_groups(num_nodes, num_edges, device, sort=True):
    """Destinations with isolated nodes (only the first 3/4 receive edges) and repeats."""
    index = torch.randint(0, max(1, 3 * num_nodes // 4), (num_edges,), device=device)
    return index.sort().values if sort else index


def reference(src, index, num_nodes):
    """PyG's softmax in float64."""
    return pyg_softmax(src.double(), index, num_nodes=num_nodes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads", [(), (1,), (3,), (8,), (40,), (2, 5)])
def test_forward_backward_match_pyg(device, dtype, heads):
    N, E = 50, 400
    index = random_groups(N, E, device)
    src = (torch.randn((E,) + heads, device=device, dtype=torch.float64) * 4).to(dtype).requires_grad_()
    out = edge_softmax(src, index, num_nodes=N)
    ref_src = src.detach().double().requires_grad_()
    ref = reference(ref_src, index, N)
    assert_close(out, ref, dtype)
    grad = torch.randn_like(ref)
    out.backward(grad.to(dtype))
    ref.backward(grad)
    assert_close(src.grad, ref_src.grad, dtype, scale=4)


@pytest.mark.parametrize("device", DEVICES)
def test_ptr_unsorted_index_and_dim(device):
    N, E, H = 30, 200, 4
    index = random_groups(N, E, device, sort=False)
    src = torch.randn(E, H, device=device, dtype=torch.float64)
    ref = reference(src, index, N)
    assert_close(edge_softmax(src, index, num_nodes=N), ref, torch.float64)
    sorted_index, perm = index.sort(stable=True)
    ptr = torch._convert_indices_from_coo_to_csr(sorted_index, N)
    assert_close(edge_softmax(src[perm], ptr=ptr), ref[perm], torch.float64)
    # groups along dim 1 of a [H, E] input
    assert_close(edge_softmax(src.t().contiguous(), index, num_nodes=N, dim=1), ref.t(), torch.float64)


def check_rows(counts, heads, device, softmax):
    """``softmax(src, index, ptr)`` in float32 on rows of ``counts`` edges against PyG in float64,
    forward and gradient."""
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]).to(device)
    index = torch.repeat_interleave(torch.arange(counts.numel()), counts).to(device)
    src = torch.randn(index.numel(), heads, device=device, dtype=torch.float64).mul_(3).requires_grad_()
    out = softmax(src.float(), index, ptr)
    ref = reference(src, index, counts.numel())
    assert_close(out, ref, torch.float32)
    grad = torch.randn_like(ref)
    (got,) = torch.autograd.grad(out, src, grad.float())
    (want,) = torch.autograd.grad(ref, src, grad)
    assert_close(got, want, torch.float32, scale=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", [1, 3, 8, 32])
@pytest.mark.parametrize("mean_degree", [1, 3, 20, 200])
def test_skewed_rows(device, heads, mean_degree):
    """Short rows sharing a warp, mean degrees that pick each lane count, and rows long enough
    for the CUDA block-per-row path (thousands of values), next to empty rows."""
    counts = torch.randint(0, 2 * mean_degree + 1, (300,))
    counts[7], counts[100], counts[101] = 5000, 1500, 0
    check_rows(counts, heads, device, lambda src, index, ptr: edge_softmax(src, index, num_nodes=300))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("lanes", [0, 4, 8, 16, 32])
def test_every_lane_count(device, heads, lanes):
    """The op's ``lanes`` override: each lane count on rows short enough for one group, medium
    rows (one warp each on CUDA) and long ones (a whole block), ptr given directly."""
    counts = torch.randint(0, 6, (400,))
    counts[3], counts[50:60], counts[200] = 3000, torch.randint(40, 300, (10,)), 900
    check_rows(counts, heads, device, lambda src, index, ptr: torch.ops.pyg_fast.edge_softmax(src, ptr, lanes))


@pytest.mark.parametrize("device", DEVICES)
def test_large_values_are_stable(device):
    index = torch.tensor([0, 0, 1, 1, 1], device=device)
    src = torch.tensor([1000.0, 999.0, -1e4, -1e4 + 1, -1e4 + 2], device=device)
    out = edge_softmax(src, index, num_nodes=3)
    assert torch.isfinite(out).all()
    assert_close(out, reference(src, index, 3), torch.float32)


def test_gradcheck_cpu():
    index = torch.tensor([0, 0, 2, 2, 2, 3])
    src = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: edge_softmax(s, index, num_nodes=5), (src,))


def test_bad_input():
    src = torch.randn(4, 2)
    with pytest.raises(TypeError, match="floating point"):
        edge_softmax(torch.ones(4, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="'index' has 3 entries"):
        edge_softmax(src, torch.zeros(3, dtype=torch.long))
    with pytest.raises(IndexError, match="'index' holds values"):
        edge_softmax(src, torch.tensor([0, 1, 2, 5]), num_nodes=3)
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing"):
        edge_softmax(src, ptr=torch.tensor([0, 3, 2]))
    with pytest.raises(ValueError, match="pass 'index' or 'ptr'"):
        edge_softmax(src)
    with pytest.raises(ValueError, match="'lanes' must be 0 or a power of two from H"):
        torch.ops.pyg_fast.edge_softmax(src, torch.tensor([0, 4]), 1)  # fewer lanes than heads


def test_compile_fullgraph():
    index = torch.tensor([0, 0, 1, 3, 3, 3])
    ptr = torch._convert_indices_from_coo_to_csr(index, 4)
    src = torch.randn(6, 3, requires_grad=True)

    def fn(s):
        return torch.ops.pyg_fast.edge_softmax(s, ptr).sum(0)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out = compiled(src)
    assert_close(out, fn(src), torch.float32)
    out.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_minus_infinity_entries_weigh_nothing(device):
    """-inf scores (masked edges), first in their rows too, give 0 and leave the other edges'
    softmax as PyG computes it."""
    inf = float("inf")
    src = torch.tensor([[-inf, 0.3], [-inf, -inf], [1.0, 2.0], [2.0, -inf], [-inf, 0.5], [0.5, 1.0]], device=device)
    index = torch.tensor([0, 0, 0, 0, 1, 1], device=device)
    out = edge_softmax(src, index, num_nodes=2)
    torch.testing.assert_close(out, pyg_softmax(src, index, num_nodes=2))
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_first_uses_take_no_grouping_then_the_grouped_kernel(device, dtype, route):
    """On the COO route an unsorted index's first uses run pyg_fast::edge_softmax_coo (atomics, no
    grouping), from its REUSED_FROM_USE-th use the grouped kernel, which the grouped route takes
    at once: both against PyG's softmax in float64, forward and backward, with destinations that
    receive no edge."""
    from pyg_fast.ops import _layout
    N, E, H = 60, 500, 4
    index = random_groups(N, E, device, sort=False)
    src = (torch.randn(E, H, device=device, dtype=torch.float64) * 4).to(dtype)
    ref_src = src.double().requires_grad_()
    ref = reference(ref_src, index, N)
    grad = torch.randn_like(ref)
    ref.backward(grad)
    for use in range(1, _layout.REUSED_FROM_USE + 1):
        s = src.detach().clone().requires_grad_()
        with PygFastOps() as log:
            out = edge_softmax(s, index, num_nodes=N)
            out.backward(grad.to(dtype))
        coo = route == "coo" and use < _layout.REUSED_FROM_USE
        assert ("edge_softmax_coo" in log.ops) == coo and ("edge_softmax" in log.ops) != coo
        assert_close(out, ref, dtype)
        assert_close(s.grad, ref_src.grad, dtype, scale=4)


@pytest.mark.parametrize("device", DEVICES)
def test_first_use_out_of_range_index_raises_and_reads_nothing(device, route):
    """Both routes report a destination out of range; the atomic one skips its edge (output 0),
    and the other edges' softmax is PyG's."""
    from pyg_fast import check_errors
    src = torch.randn(5, 2, device=device)
    index = torch.tensor([0, 1, 1, 7, -1], device=device)
    with pytest.raises(IndexError, match="'index' holds values outside \\[0, 3\\)"):
        out = edge_softmax(src, index, num_nodes=3)
        check_errors()
    out, flags = torch.ops.pyg_fast.edge_softmax_coo(src, index, 3)
    assert flags.tolist() == [1]
    assert (out[3:] == 0).all()
    assert_close(out[:3], reference(src[:3], index[:3], 3), torch.float32)


def test_coo_op_compiles_fullgraph():
    """pyg_fast::edge_softmax_coo and its backward under torch.compile: outputs and gradients as
    eager ones, against float64."""
    index = torch.tensor([2, 0, 2, 1, 0, 2, 2])
    src = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 3, dtype=torch.float64)

    def fn(s):
        return (torch.ops.pyg_fast.edge_softmax_coo(s, index, 4)[0] * weight).sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    compiled(src).backward()
    ref_src = src.detach().clone().requires_grad_()
    (reference(ref_src, index, 4) * weight).sum().backward()
    assert_close(src.grad, ref_src.grad, torch.float64)


@pytest.mark.parametrize("device", DEVICES)
def test_coo_softmax_of_signed_zeros(device):
    """Scores of -0.0 (a group's only score, and beside negative ones): PyG's softmax, no NaN."""
    src = torch.tensor([[-0.0], [-0.0], [-1.0], [0.0], [-0.0]], device=device)
    index = torch.tensor([0, 1, 1, 2, 2], device=device)
    out, _ = torch.ops.pyg_fast.edge_softmax_coo(src, index, 3)
    assert not torch.isnan(out).any()
    assert_close(out, reference(src, index, 3), torch.float32)
