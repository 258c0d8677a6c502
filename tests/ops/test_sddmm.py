import pytest
import torch

from pyg_fast.ops import sddmm
from pyg_fast.testing import DEVICES, DTYPES, assert_close
from tests._zoo import ZOO_TEST_GRAPHS, zoo_graph

OPS = {
    "dot": lambda x, y: (x * y).sum(-1),
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
}


def random_operands(Na, Nb, shape, dtype, device, op):
    a = torch.randn((Na,) + shape, device=device, dtype=torch.float64)
    b = torch.randn((Nb,) + shape, device=device, dtype=torch.float64)
    if op == "div":  # keep the divisor away from 0
        b = b.sign() * (b.abs() + 0.5)
    return a.to(dtype).requires_grad_(), b.to(dtype).requires_grad_()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("shape", [(1,), (3,), (64,), (4, 16), (2, 7), (1, 130), (1, 384), (1, 528)])
@pytest.mark.parametrize("b_sorted", [False, True])
def test_matches_gather_reference(device, dtype, op, shape, b_sorted):
    Na, Nb, E = 20, 15, 150
    a, b = random_operands(Na, Nb, shape, dtype, device, op)
    a_index = torch.randint(0, Na, (E,), device=device)  # repeats = multi-edges
    b_index = torch.randint(0, Nb - 3, (E,), device=device)  # the last rows of b are isolated
    if b_sorted:  # runs of equal destinations, as message passing hands them over
        b_index = b_index.sort().values
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ref = OPS[op](a64[a_index], b64[b_index])
    grad = torch.randn_like(ref)
    ref.backward(grad)
    scale = max(1.0, shape[-1] ** 0.5 / 4) if dtype in (torch.float16, torch.bfloat16) else 1.0
    for _ in range(2):  # the backward's sums take another route once the indices are reused
        a.grad = b.grad = None
        out = sddmm(a, b, a_index, b_index, op)
        assert_close(out, ref, dtype, scale=4 * scale)
        out.backward(grad.to(dtype))
        assert_close(a.grad, a64.grad, dtype, scale=8 * scale)
        assert_close(b.grad, b64.grad, dtype, scale=8 * scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(16,), (64,), (4, 16), (128,), (2, 200), (256,)])
def test_dot_on_a_graph_with_hubs(device, dtype, shape):
    """Enough edges that the CUDA dot kernel gives every group its longest run (16 edges, several
    rows of b kept across its steps), skewed sources (hubs) and destinations sorted in runs, as
    message passing hands them over; a few edges out of order break the runs."""
    N, E = 3_000, 200_000
    generator = torch.Generator().manual_seed(5)
    a_index = (torch.rand(E, generator=generator) ** 3 * N).long()
    b_index = torch.randint(0, N, (E,), generator=generator).sort().values
    b_index[::997] = torch.randint(0, N, (b_index[::997].numel(),), generator=generator)
    a = torch.randn((N,) + shape, generator=generator, dtype=torch.float64)
    b = torch.randn((N,) + shape, generator=generator, dtype=torch.float64)
    ref = (a[a_index] * b[b_index]).sum(-1)
    a_index, b_index = a_index.to(device), b_index.to(device)
    out = sddmm(a.to(device, dtype), b.to(device, dtype), a_index, b_index, "dot")
    assert_close(out, ref.to(device), dtype, scale=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("graph", ZOO_TEST_GRAPHS)
def test_dot_on_zoo_graphs(device, graph):
    edge_index, N = zoo_graph(graph)
    a = torch.randn(N, 2, 32, dtype=torch.float64)
    b = torch.randn(N, 2, 32, dtype=torch.float64)
    src, dst = edge_index
    ref = (a[src] * b[dst]).sum(-1)
    out = sddmm(a.float().to(device), b.float().to(device), src.to(device), dst.to(device), "dot")
    assert_close(out, ref.to(device), torch.float32, scale=4)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.mem_get_info()[0] < 6 * 2 ** 30,
                    reason="needs CUDA and 6 GiB free")
def test_dot_beyond_int32_counts_cuda():
    """E * H = 2 ** 30 takes the CUDA dot kernel's 64-bit counters, with int64 or int32 edge
    indices alike; spot-checked edges."""
    E, H, N = 2 ** 19, 2 ** 11, 64
    a = torch.randn(N, H, 1, device="cuda", dtype=torch.float16)
    b = torch.randn(N, H, 1, device="cuda", dtype=torch.float16)
    a_index = torch.randint(0, N, (E,), device="cuda")
    b_index = torch.randint(0, N, (E,), device="cuda").sort().values
    out = sddmm(a, b, a_index, b_index, "dot")
    picked = torch.cat([torch.arange(64, device="cuda"), torch.randint(0, E, (4096,), device="cuda"),
                        torch.arange(E - 64, E, device="cuda")])
    ref = (a.double()[a_index[picked]] * b.double()[b_index[picked]]).sum(-1)
    assert_close(out[picked], ref, torch.float16)
    narrow = torch.ops.pyg_fast.sddmm(a, b, a_index.int(), b_index.int(), "dot")
    assert torch.equal(narrow, out)
    del out, narrow


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("shape", [(1,), (16,), (64,), (4, 16), (2, 130), (288,)])
def test_int32_indices_cuda(op, shape):
    """The CUDA kernels read int32 edge indices as int64 ones; the public op reads a reused graph's
    through int32 copies (from its second call on) with the same result."""
    Na, Nb, E = 300, 200, 5000
    a, b = (t.detach() for t in random_operands(Na, Nb, shape, torch.float32, "cuda", op))
    a_index = torch.randint(0, Na, (E,), device="cuda")
    b_index = torch.randint(0, Nb, (E,), device="cuda").sort().values
    a3, b3 = (t if t.dim() == 3 else t.unsqueeze(1) for t in (a, b))
    wide = torch.ops.pyg_fast.sddmm(a3, b3, a_index, b_index, op)
    narrow = torch.ops.pyg_fast.sddmm(a3, b3, a_index.int(), b_index.int(), op)
    assert torch.equal(narrow, wide)
    ref = OPS[op](a.double()[a_index], b.double()[b_index])
    for _ in range(3):
        assert_close(sddmm(a, b, a_index, b_index, op), ref, torch.float32, scale=4)
    with pytest.raises(TypeError, match="differ in dtype"):
        torch.ops.pyg_fast.sddmm(a3, b3, a_index.int(), b_index, op)


def test_int32_indices_cpu_raise():
    a = torch.randn(4, 1, 8)
    idx = torch.tensor([0, 1, 3], dtype=torch.int32)
    with pytest.raises(TypeError, match="must be int64"):
        torch.ops.pyg_fast.sddmm(a, a, idx, idx, "dot")


@pytest.mark.parametrize("device", DEVICES)
def test_empty_edges(device):
    a = torch.randn(4, 2, 8, device=device)
    idx = torch.empty(0, dtype=torch.long, device=device)
    assert sddmm(a, a, idx, idx, "dot").shape == (0, 2)
    assert sddmm(a, a, idx, idx, "mul").shape == (0, 2, 8)


def test_bad_input():
    a = torch.randn(4, 8)
    idx = torch.tensor([0, 1, 3])
    with pytest.raises(ValueError, match="op must be one of"):
        sddmm(a, a, idx, idx, "pow")
    with pytest.raises(TypeError, match="differ in dtype"):
        sddmm(a, a.double(), idx, idx)
    with pytest.raises(IndexError, match="'b_index' holds values"):
        sddmm(a, a[:3], idx, idx)
    with pytest.raises(ValueError, match="'b_index' has 2 entries"):
        sddmm(a, a, idx, idx[:2])
    with pytest.raises(ValueError, match="expects 'a'"):
        sddmm(a, torch.randn(4, 9), idx, idx)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["dot", "add", "mul"])
def test_raw_op_gives_zeros_for_indices_out_of_range(device, op):
    """Without a flag slot the raw op checks nothing (its callers check and report the indices): an
    edge with an end out of range gets zeros on every device, the other edges their float64 values."""
    a, b = random_operands(5, 4, (2, 8), torch.float32, device, op)
    ai = torch.tensor([0, 5, 4, -1, 2], device=device)
    bi = torch.tensor([3, 0, 4, 1, 1], device=device)
    out = torch.ops.pyg_fast.sddmm(a.detach(), b.detach(), ai, bi, op)
    valid = torch.tensor([True, False, False, False, True], device=device)
    ref = OPS[op](a.detach().double()[ai[valid]], b.detach().double()[bi[valid]])
    assert_close(out[valid], ref, torch.float32)
    assert bool((out[~valid] == 0).all())


def test_compile_fullgraph():
    # Forward only: the backward's index validation (ops/_layout.py) guards on data under AOT
    # tracing, reported to the owner of _layout.
    a = torch.randn(10, 2, 8)
    b = torch.randn(6, 2, 8)
    ai, bi = torch.randint(0, 10, (30,)), torch.randint(0, 6, (30,))

    def fn(x, y):
        return torch.ops.pyg_fast.sddmm(x, y, ai, bi, "dot")

    out = torch.compile(fn, fullgraph=True, backend="aot_eager")(a, b)
    assert_close(out, fn(a, b), torch.float32)


def test_deterministic_mode_groups_narrow_rows(monkeypatch):
    """Under torch.use_deterministic_algorithms the backward's sums of narrow rows take the
    grouped route (no atomics) on an index's first use too, with the reference's gradients."""
    from pyg_fast.ops import _layout
    grouped = []
    coo_layout = _layout.coo_layout
    monkeypatch.setattr(_layout, "coo_layout", lambda *args, **kwargs: grouped.append(1) or coo_layout(*args, **kwargs))
    a, b = random_operands(20, 15, (3,), torch.float32, "cpu", "add")
    a_index, b_index = torch.randint(0, 20, (100,)), torch.randint(0, 15, (100,))
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        sddmm(a, b, a_index, b_index, "add").sum().backward()
    finally:
        torch.use_deterministic_algorithms(previous)
    assert len(grouped) == 2
    assert_close(a.grad, torch.zeros(20, 3, dtype=torch.float64).index_add_(0, a_index, torch.ones(100, 3,
                 dtype=torch.float64)), torch.float32)
    assert_close(b.grad, torch.zeros(15, 3, dtype=torch.float64).index_add_(0, b_index, torch.ones(100, 3,
                 dtype=torch.float64)), torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("op", ["dot", "add"])
def test_the_kernel_checks_a_new_index_itself(op):
    """On CUDA the range check of a new index rides on the sddmm kernel (its flags in a slot of the
    host ring): one launch a call, right values, and a bad index still reported by its name."""
    from torch.profiler import ProfilerActivity, profile

    import pyg_fast
    torch.manual_seed(0)
    a, b = torch.randn(30, 8, device="cuda"), torch.randn(20, 8, device="cuda")
    ai, bi = torch.randint(0, 30, (100,), device="cuda"), torch.randint(0, 20, (100,), device="cuda")
    sddmm(a, b, ai.clone(), bi.clone(), op)  # the ring's and the kernel's first use
    fresh_a, fresh_b = ai.clone(), bi.clone()
    pyg_fast.check_errors()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = sddmm(a, b, fresh_a, fresh_b, op)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    assert len(kernels) == 1 and "sddmm" in kernels[0], kernels
    assert_close(out, OPS[op](a.double()[ai], b.double()[bi]), torch.float32)
    bad = ai.clone()
    bad[7] = 30
    with pytest.raises(IndexError, match="'a_index' holds values outside \\[0, 30\\)"):
        sddmm(a, b, bad, bi.clone(), op)
        pyg_fast.check_errors()
