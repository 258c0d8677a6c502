import importlib.util
import json
import os
import warnings

import pytest
import torch

import pyg_fast
from pyg_fast.ops.segment_matmul import gather_segment_matmul, segment_matmul
from pyg_fast.testing import DEVICES, DTYPES, assert_close
from pyg_fast.tuning import segment_matmul as config

# name -> segment sizes
SIZES = {
    "empty_types": [0, 5, 0, 0, 17, 1, 0],
    "one_giant_type": [1000],
    "giant_and_tiny": [1, 700, 2, 0, 3],
    "many_types": [int(v) for v in torch.randint(0, 6, (300,), generator=torch.Generator().manual_seed(0))],
}


def ptr_of(sizes):
    return torch.tensor([0] + sizes).cumsum(0)


def reference(x, ptr, w, b=None):
    """float64 loop of matmuls."""
    out = []
    for t in range(w.size(0)):
        rows = x[ptr[t]:ptr[t + 1]].double() @ w[t].double()
        out.append(rows + (b[t].double() if b is not None else 0))
    return torch.cat(out) if out else x.new_zeros(0, w.size(2), dtype=torch.float64)


def make(sizes, K, N, dtype, device, bias=True):
    M, T = sum(sizes), len(sizes)
    x = torch.randn(M, K, dtype=dtype, device=device, requires_grad=True)
    w = torch.randn(T, K, N, dtype=dtype, device=device, requires_grad=True)
    b = torch.randn(T, N, dtype=dtype, device=device, requires_grad=True) if bias else None
    return x, ptr_of(sizes), w, b


def grads_of(out, grad, tensors):
    return torch.autograd.grad(out, [t for t in tensors if t is not None], grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(SIZES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_backward_against_loop(case, dtype, device):
    x, ptr, w, b = make(SIZES[case], 19, 33, dtype, device)
    out = segment_matmul(x, ptr.to(device), w, b)
    ref_inputs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref = reference(ref_inputs[0], ptr, ref_inputs[1], ref_inputs[2])
    scale = 4.0 if dtype in (torch.float16, torch.bfloat16) else 1.0
    assert_close(out, ref, dtype, scale)
    grad = torch.randn_like(ref)
    for got, want in zip(grads_of(out, grad.to(dtype), (x, w, b)), grads_of(ref, grad, ref_inputs)):
        assert_close(got, want, dtype, scale)


def test_double_backward_against_float64():
    """A gradient taken with create_graph differentiates again (the backward's own segmented
    matmul keeps its autograd)."""
    x, w = torch.randn(10, 4, requires_grad=True), torch.randn(2, 4, 3, requires_grad=True)
    ptr = torch.tensor([0, 4, 10])
    (g,) = torch.autograd.grad(segment_matmul(x, ptr, w).square().sum(), x, create_graph=True)
    g.sum().backward()
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    out = torch.cat([xd[:4] @ wd[0], xd[4:] @ wd[1]])
    (gd,) = torch.autograd.grad(out.square().sum(), xd, create_graph=True)
    gd.sum().backward()
    assert_close(g, gd, torch.float32)
    assert_close(x.grad, xd.grad, torch.float32)
    assert_close(w.grad, wd.grad, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_ptr_on_cpu_for_device_inputs_and_no_bias(device):
    x, ptr, w, _ = make([3, 0, 40, 7], 16, 8, torch.float32, device, bias=False)
    out = segment_matmul(x, ptr, w)  # ptr stays on the CPU, as pyg-lib allows
    assert out.device == x.device
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = reference(xd, ptr, wd)
    assert_close(out, ref, torch.float32)
    grad = torch.randn_like(ref)
    for got, want in zip(grads_of(out, grad.float(), (x, w)), grads_of(ref, grad, (xd, wd))):
        assert_close(got, want, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_variant_with_unsorted_types(device):
    T, M = 6, 200
    types = torch.randint(0, T, (M,), device=device)
    types[types == 3] = 4  # an empty type
    x = torch.randn(M, 12, device=device, requires_grad=True)
    w = torch.randn(T, 12, 10, device=device, requires_grad=True)
    b = torch.randn(T, 10, device=device, requires_grad=True)
    out = gather_segment_matmul(x, types, w, b)
    ref = torch.bmm(x.double().unsqueeze(1), w.double()[types]).squeeze(1) + b.double()[types]
    assert_close(out, ref, torch.float32)
    grad = torch.randn_like(out)
    gx, gw, gb = torch.autograd.grad(out, (x, w, b), grad)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    rx, rw, rb = torch.autograd.grad(torch.bmm(xd.unsqueeze(1), wd[types]).squeeze(1) + bd[types], (xd, wd, bd),
                                     grad.double())
    for got, want in ((gx, rx), (gw, rw), (gb, rb)):
        assert_close(got, want, torch.float32)
    # the second call reuses the cached sort: same numbers
    assert torch.equal(gather_segment_matmul(x, types, w, b), out)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_weight_grad_is_bitwise_reproducible(device):
    x, ptr, w, b = make([500, 3, 0, 900, 64], 40, 24, torch.float32, device)
    grad = torch.randn(x.size(0), 24, device=device)
    runs = [grads_of(segment_matmul(x, ptr, w, b, deterministic=True), grad, (x, w, b)) for _ in range(3)]
    for run in runs[1:]:
        for a, c in zip(runs[0], run):
            assert torch.equal(a, c)
    torch.use_deterministic_algorithms(True)
    try:
        again = grads_of(segment_matmul(x, ptr, w, b), grad, (x, w, b))
    finally:
        torch.use_deterministic_algorithms(False)
    for a, c in zip(runs[0], again):
        assert torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("deterministic", [True, False])
def test_cuda_weight_grad_of_a_type_split_into_many_items(deterministic, monkeypatch):
    """A type of 20 k rows is split into dozens of items: the ordered reduction by the type's
    last program (deterministic) and the atomic one (more than ATOMIC_MIN_ITEMS items)."""
    from pyg_fast.triton import segment_matmul as kernels
    monkeypatch.setattr(kernels, "ATOMIC_MIN_ITEMS", 1)
    x, ptr, w, b = make([20000, 5, 0, 700], 32, 48, torch.float32, "cuda")
    grad = torch.randn(x.size(0), 48, device="cuda")
    got = grads_of(segment_matmul(x, ptr, w, b, deterministic=deterministic), grad, (x, w, b))
    ref_inputs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    want = grads_of(reference(ref_inputs[0], ptr, ref_inputs[1], ref_inputs[2]), grad.double(), ref_inputs)
    for a, c in zip(got, want):
        assert_close(a, c, torch.float32, scale=4.0)
    if deterministic:  # and again, bitwise (the arrival counters reset themselves)
        again = grads_of(segment_matmul(x, ptr, w, b, deterministic=True), grad, (x, w, b))
        for a, c in zip(got, again):
            assert torch.equal(a, c)


def _check_grads(x, ptr, w, b, out, grad):
    """out and the gradients w.r.t. those of x, w, b that require them, against the float64 loop."""
    tensors = (x, w, b)
    refs = [None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in tensors]
    ref = reference(refs[0], ptr, refs[1], refs[2])
    assert_close(out, ref, torch.float32)
    asked = [i for i, t in enumerate(tensors) if t is not None and t.requires_grad]
    got = torch.autograd.grad(out, [tensors[i] for i in asked], grad)
    want = torch.autograd.grad(ref, [refs[i] for i in asked], grad.double())
    for g, r in zip(got, want):
        assert_close(g, r, torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("K,N", [(24, 40), (200, 72)])  # input gradient fused into the weight gradient's kernel, or not
@pytest.mark.parametrize("needs", [(True, True, True), (True, True, False), (False, True, False),
                                   (False, False, True), (True, False, False)])
def test_cuda_native_program_for_every_set_of_gradients(K, N, needs):
    """On CUDA the kernels are launched from C++ with a C++ autograd node (no fallback warning)."""
    x, ptr, w, b = make([300, 0, 7, 1200], K, N, torch.float32, "cuda")
    for t, need in zip((x, w, b), needs):
        t.requires_grad_(need)
    grad = torch.randn(x.size(0), N, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # the second call finds the program cached
            out = segment_matmul(x, ptr, w, b)
            assert "SegmmFunction" in out.grad_fn.name()
            _check_grads(x, ptr, w, b, out, grad)
        with torch.no_grad():
            assert_close(segment_matmul(x, ptr, w, b), reference(x, ptr, w, b), torch.float32)


def test_unknown_program_handle_raises_a_clear_error():
    x, w = torch.randn(4, 3), torch.randn(1, 3, 2)
    with pytest.raises(RuntimeError, match="no segment_matmul program has handle 123456789"):
        torch.ops.pyg_fast.segment_matmul_program(x, w, None, 123456789)
    torch.ops.pyg_fast.segment_matmul_program_release(123456789)  # releasing an unknown handle is harmless


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_unaligned_inputs_launch_from_python():
    M, K, N, sizes = 40, 12, 8, [10, 30]
    x = torch.randn(M * K + 1, device="cuda")[1:].view(M, K).requires_grad_()  # 4 bytes past an alignment
    w = torch.randn(2, K, N, device="cuda", requires_grad=True)
    ptr = ptr_of(sizes)
    out = segment_matmul(x, ptr, w)
    assert "SegmmFunction" not in out.grad_fn.name()
    _check_grads(x, ptr, w, None, out, torch.randn(M, N, device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_kernels_the_cpp_launcher_refuses_warn_and_launch_from_python(monkeypatch):
    from pyg_fast.triton import segment_matmul as kernels

    def refuse(*args, **kwargs):
        raise NotImplementedError("pyg_fast: refused for the test")
    monkeypatch.setattr(kernels, "native_program", refuse)
    x, ptr, w, b = make([30, 0, 70], 16, 24, torch.float32, "cuda")
    with pytest.warns(UserWarning, match="refused for the test; segment_matmul launches its kernels from Python"):
        out = segment_matmul(x, ptr, w, b)
    assert "SegmmFunction" not in out.grad_fn.name()
    _check_grads(x, ptr, w, b, out, torch.randn(x.size(0), 24, device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_triton_launch_hook_sees_every_launch(monkeypatch):
    """A profiler's Triton launch hook turns the C++ launches off: every launch reaches it."""
    from triton import knobs
    seen = []
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: seen.append(metadata))
    x, ptr, w, b = make([30, 0, 70], 16, 24, torch.float32, "cuda")
    for _ in range(2):  # the second call goes through the cached launcher
        out = segment_matmul(x, ptr, w, b)
        assert "SegmmFunction" not in out.grad_fn.name()
        _check_grads(x, ptr, w, b, out, torch.randn(x.size(0), 24, device="cuda"))
    assert len(seen) >= 4  # a forward and a backward launch per call


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_native_program_on_a_side_stream_is_bitwise_the_same():
    """The ordered reduction's arrival counters are per stream (many items per type here)."""
    x, ptr, w, b = make([20000, 5, 0, 700], 32, 48, torch.float32, "cuda")
    grad = torch.randn(x.size(0), 48, device="cuda")
    want = grads_of(segment_matmul(x, ptr, w, b, deterministic=True), grad, (x, w, b))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = [grads_of(segment_matmul(x, ptr, w, b, deterministic=True), grad, (x, w, b)) for _ in range(2)]
    torch.cuda.current_stream().wait_stream(stream)
    for run in got:
        for a, c in zip(run, want):
            assert torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_plan_of_a_device_without_index():
    from pyg_fast.triton import segment_matmul as kernels
    x, ptr, w, _ = make([300, 0, 1200], 16, 24, torch.float32, "cuda", bias=False)
    plan = kernels.SegmentPlan(ptr, torch.device("cuda"))  # "cuda", not "cuda:0"
    grad = torch.randn(x.size(0), 24, device="cuda")
    grad_x, grad_w = kernels.backward(x.detach(), plan, grad, w.detach())
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want_x, want_w = grads_of(reference(xd, ptr, wd), grad.double(), (xd, wd))
    assert_close(grad_x, want_x, torch.float32)
    assert_close(grad_w, want_w, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ptr_kind", ["cpu", "same_device", "cpu_int32"])
def test_repeated_calls_follow_inputs_grads_and_ptr_changes(device, ptr_kind):
    """A call is checked and resolved once per ptr and kind of call, then reused (see
    ``segment_matmul``'s plans): later calls with other shapes, dtypes, gradients, bias or TF32
    switch, and calls after ptr changed in place, must still give the reference's numbers."""
    sizes = [3, 0, 9, 4]
    ptr = ptr_of(sizes).to(device if ptr_kind == "same_device" else "cpu")
    if ptr_kind == "cpu_int32":  # the plan holds an int64 copy of it
        ptr = ptr.int()

    def check(K, N, dtype=torch.float32, bias=True, grad=True, tf32=False):
        # TF32 keeps fp16's 10-bit mantissa: its products are held to fp16's bound.
        tol_dtype = torch.float16 if tf32 and device == "cuda" else dtype
        for _ in range(3):  # planned on the first call, reused from the second
            x, _, w, b = make(sizes, K, N, dtype, device, bias)
            if not grad:
                x, w, b = x.detach(), w.detach(), None if b is None else b.detach()
            out = segment_matmul(x, ptr, w, b)
            ref = reference(x, ptr.cpu().long(), w, b)
            assert_close(out, ref.to(dtype), tol_dtype)
            if grad:
                g = torch.randn_like(out)
                x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
                b64 = None if b is None else b.detach().double().requires_grad_()
                want = grads_of(reference(x64, ptr.cpu().long(), w64, b64), g.double(), (x64, w64, b64))
                for got, expected in zip(grads_of(out, g, (x, w, b)), want):
                    assert_close(got, expected.to(dtype), tol_dtype)

    check(8, 5)
    check(8, 5, bias=False)
    check(8, 5, grad=False)
    check(6, 16)
    check(8, 5, torch.float64)
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = not previous
        check(8, 5, tf32=not previous)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    check(8, 5, tf32=previous)  # a plan kept from the other setting would miss the bound here
    ptr.copy_(ptr_of([9, 4, 3, 0]))  # in place: other segment sizes, the same total
    sizes[:] = [9, 4, 3, 0]
    check(8, 5)


def test_kept_plans_do_not_keep_their_ptr_alive():
    """Plans are cached on the ptr they were made for: they must not hold it."""
    import gc
    import weakref
    ptr = torch.tensor([0, 3, 3, 7])
    x, w = torch.randn(7, 4), torch.randn(3, 4, 2)
    for _ in range(2):
        segment_matmul(x, ptr, w)
        segment_matmul(x, ptr.int(), w)
    ref = weakref.ref(ptr)
    del ptr
    gc.collect()
    assert ref() is None


def test_bad_inputs_raise_clear_errors():
    x, ptr, w, b = make([2, 3], 4, 5, torch.float32, "cpu")
    with pytest.raises(ValueError, match="'ptr' has 4 entries"):
        segment_matmul(x, torch.tensor([0, 1, 2, 5]), w)
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing from 0 to 5"):
        segment_matmul(x, torch.tensor([0, 4, 3]), w)
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing from 0 to 5"):
        segment_matmul(x, torch.tensor([0, 2, 4]), w)
    with pytest.raises(ValueError, match="'inputs' \\[M, K\\]"):
        segment_matmul(x, ptr, torch.randn(2, 3, 5))
    with pytest.raises(TypeError, match="'other' is torch.float64"):
        segment_matmul(x, ptr, w.double())
    with pytest.raises(TypeError, match="'ptr' must be an integer tensor"):
        segment_matmul(x, ptr.float(), w)
    with pytest.raises(ValueError, match="'bias' must be \\[T, N\\]"):
        segment_matmul(x, ptr, w, torch.randn(2, 4))
    with pytest.raises(IndexError, match="'types' holds values outside \\[0, 2\\)"):
        gather_segment_matmul(x, torch.tensor([0, 1, 7, 0, 1]), w)
    # the raw op checks too (no crash when called directly)
    with pytest.raises(ValueError, match="'ptr' must start at 0"):
        torch.ops.pyg_fast.segment_matmul(x.detach(), torch.tensor([0, 2, 9]), w.detach())


def test_torch_compile_fullgraph():
    x, ptr, w, b = make([7, 0, 12], 8, 6, torch.float32, "cpu")

    def f(x, w, b):
        return segment_matmul(x, ptr, w, b).relu().sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(x, w, b), (x, w, b))
    want = torch.autograd.grad(f(x, w, b), (x, w, b))
    for a, c in zip(got, want):
        assert_close(a, c, torch.float32)


# Triton kernels on the CPU through TRITON_INTERPRET ------------------------------------------
def load_kernels(interpret: bool):
    """A fresh copy of the kernel module, its kernels decorated with TRITON_INTERPRET set or not
    (Triton reads it at decoration time), whatever the environment of the test session."""
    pytest.importorskip("triton")
    previous = os.environ.pop("TRITON_INTERPRET", None)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        path = os.path.join(os.path.dirname(pyg_fast.__file__), "triton", "segment_matmul.py")
        spec = importlib.util.spec_from_file_location(f"pyg_fast_segment_matmul_{interpret}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if previous is not None:
            os.environ["TRITON_INTERPRET"] = previous
    return module


@pytest.fixture(scope="module")
def kernels():
    """The kernels and their device: compiled on a CUDA machine, else in Triton's CPU interpreter
    (the GPU machine's Triton 3.6 interpreter cannot run them, its compiler can)."""
    if torch.cuda.is_available():
        return load_kernels(interpret=False), "cuda"
    return load_kernels(interpret=True), "cpu"


TRITON_CASES = {"empty_types": [0, 5, 0, 0, 17, 1, 0], "giant_and_tiny": [1, 200, 2, 0, 3],
                "many_small": [int(v) for v in torch.randint(0, 4, (40,), generator=torch.Generator().manual_seed(1))]}


def weight_grad_reference(x, ptr, g):
    """(per-type x^T g, per-type column sums of g) in float64."""
    T = ptr.numel() - 1
    return (torch.stack([x[ptr[t]:ptr[t + 1]].double().t() @ g[ptr[t]:ptr[t + 1]].double() for t in range(T)]),
            torch.stack([g[ptr[t]:ptr[t + 1]].double().sum(0) for t in range(T)]))


@pytest.mark.parametrize("case", list(TRITON_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_triton_forward_and_backward(kernels, case, dtype, monkeypatch):
    kernels, device = kernels
    sizes = TRITON_CASES[case]
    x, ptr, w, b = (t.detach() if t is not None else None for t in make(sizes, 20, 33, dtype, device))
    plan = kernels.SegmentPlan(ptr, x.device)
    scale = 4.0 if dtype != torch.float32 else 1.0
    for _ in range(2):  # the second call goes straight to the compiled kernels' launchers
        assert_close(kernels.forward(x, plan, w, b), reference(x, ptr, w, b), dtype, scale)
    # the input gradient through the forward kernel (what K or N beyond one tile use): transposed, strided weights
    g = torch.randn(x.size(0), 33, dtype=dtype, device=device)
    want_x = reference(g, ptr, w.transpose(1, 2))
    assert_close(kernels.forward(g, plan, w.transpose(1, 2)), want_x, dtype, scale)
    want_w, want_bias = weight_grad_reference(x, ptr, g)
    monkeypatch.setattr(kernels, "ATOMIC_MIN_ITEMS", 1)  # the atomic reduction wherever a type has 2+ items
    # default tiles (one item per type here), and 16-row items (several per type: the reductions)
    for cfg in (None, config.SegmmConfig(16, 64, 32, 16)):
        for deterministic in (True, False):
            for weights, bias_grad in ((w, True), (None, False)):
                runs = [kernels.backward(x, plan, g, weights, bias_grad, deterministic, cfg) for _ in range(2)]
                grad_x, grad_w = runs[0]
                assert (grad_x is None) == (weights is None)
                if grad_x is not None:
                    assert_close(grad_x, want_x, dtype, scale)
                assert_close(grad_w[:, :20], want_w, dtype, scale)
                if bias_grad:
                    assert_close(grad_w[:, 20], want_bias, dtype, scale)
                if deterministic:  # and the arrival counters were reset for the second launch
                    assert torch.equal(runs[1][1], grad_w)


def test_triton_backward_beyond_one_tile(kernels):
    """K and N larger than a tile: the weight gradient over a grid of (K, N) tiles, each with its
    own arrival counters; the input gradient from the forward kernel."""
    kernels, device = kernels
    x, ptr, w, _ = (t.detach() if t is not None else None for t in make([0, 40, 3, 21], 150, 140, torch.float32,
                                                                          device, bias=False))
    plan = kernels.SegmentPlan(ptr, x.device)
    g = torch.randn(x.size(0), 140, device=device)
    want_w, want_bias = weight_grad_reference(x, ptr, g)
    for cfg in (None, config.SegmmConfig(16, 64, 64, 16)):
        grad_x, grad_w = kernels.backward(x, plan, g, w, True, True, cfg)
        assert_close(grad_x, reference(g, ptr, w.transpose(1, 2)), torch.float32)
        assert_close(grad_w[:, :150], want_w, torch.float32)
        assert_close(grad_w[:, 150], want_bias, torch.float32)


@pytest.mark.parametrize("cfg", [config.SegmmConfig(16, 16, 16, 16), config.SegmmConfig(32, 64, 32, 128),
                                 config.SegmmConfig(16, 32, 16, 64)])
def test_triton_forward_any_config(kernels, cfg):
    kernels, device = kernels
    x, ptr, w, b = (t.detach() for t in make([0, 70, 5, 1, 33], 37, 40, torch.float32, device))
    plan = kernels.SegmentPlan(ptr, x.device)
    assert_close(kernels.forward(x, plan, w, b, cfg), reference(x, ptr, w, b), torch.float32)


def test_routing_covers_every_row_once():
    """The backward's items: at most rows_per_item rows of one type each, one empty item per
    empty segment (every type's weight gradient is written), counted per type."""
    sizes = [0, 3, 1000, 2, 2, 0, 5, 64]
    ptr = ptr_of(sizes)
    r = config.build_routing(ptr, rows_per_item=128)
    covered = torch.zeros(sum(sizes), dtype=torch.long)
    for t, lo, hi in r.items.tolist():
        assert ptr[t] <= lo <= hi <= ptr[t + 1] and hi - lo <= 128 and (lo < hi or sizes[t] == 0)
        covered[lo:hi] += 1
    assert torch.equal(covered, torch.ones_like(covered))
    assert r.type_items.tolist() == [0, 1, 2, 10, 11, 12, 13, 14, 15]
    assert r.max_items_per_type == 8


def block_rows(blocks):
    """(type, first row, end) of every forward program of a block table."""
    return list(zip(blocks[:-1, 0].tolist(), blocks[:-1, 1].tolist(), blocks[1:, 1].tolist()))


@pytest.mark.parametrize("short_tail", [0, 1200])
def test_blocks_cover_every_row_once_with_one_type_each(short_tail):
    """Forward programs: every row once, each program's rows inside its type's segment, cut at
    the multiples of 256 rows (of 64 in the short tail) and at segment starts only."""
    sizes = [700, 0, 130, 2000, 5, 0, 0, 900, 1]
    ptr = ptr_of(sizes)
    M = sum(sizes)
    blocks = config.build_blocks(ptr, rows_per_prog=256, block_m=16, short_tail=short_tail)
    assert blocks.dtype == torch.int32 and blocks[-1].tolist() == [0, M]
    cut = (M - short_tail) // 256 * 256 if short_tail else M
    covered = torch.zeros(M, dtype=torch.long)
    for t, lo, hi in block_rows(blocks):
        assert ptr[t] <= lo < hi <= ptr[t + 1]
        length = 256 if lo < cut else 64
        assert lo == ptr[t] or (lo - (0 if lo < cut else cut)) % length == 0
        assert hi - lo <= length
        covered[lo:hi] += 1
    assert torch.equal(covered, torch.ones_like(covered))
    lengths = [hi - lo for _, lo, hi in block_rows(blocks)]
    if short_tail:
        assert cut <= M - short_tail and max(lengths[-5:]) <= 64 and max(lengths) == 256
    else:
        assert max(lengths[-5:]) == 256
    assert config.tail_rows(10 ** 6, 512, 132) == 0.5 * 132 * 512  # a long launch gets a tail...
    assert config.tail_rows(50000, 512, 132) == 0  # ...a launch of a few waves none


def test_block_shape_counts_the_blocks():
    """The model's program and padded-row counts (linear in the segments) equal those of the
    block table, for the candidates' block lengths."""
    gen = torch.Generator().manual_seed(0)
    choices = torch.tensor([0, 0, 1, 3, 17, 64, 100, 257, 1000, 5000])
    for _ in range(50):
        counts = choices[torch.randint(0, choices.numel(), (int(torch.randint(1, 30, (1,), generator=gen)),),
                                       generator=gen)]
        if counts.sum() == 0:
            continue
        for block_m, factor, short_tail in ((16, 1, 0), (32, 4, 1000), (64, 16, 4000), (128, 2, 100)):
            blocks = config.build_blocks(ptr_of(counts.tolist()), block_m * factor, block_m, short_tail)
            lengths = blocks[1:, 1].long() - blocks[:-1, 1].long()
            padded = int(((lengths + block_m - 1) // block_m * block_m).sum())
            assert config.block_shape(counts, block_m * factor, block_m, short_tail) == (lengths.numel(), padded)


@pytest.mark.parametrize("num_rows", [5_120, 200_000])
def test_model_drain_is_the_last_blocks_length(num_rows):
    """The model's drain term lasts as long as the launch's last program: a short-tail one in a
    long launch, a full-length one in a launch of a few waves."""
    rows_per_prog, block_m, num_sms = 256, 32, 16
    ptr = ptr_of([num_rows // 2, 0, num_rows - num_rows // 2])
    blocks = config.build_blocks(ptr, rows_per_prog, block_m, config.tail_rows(num_rows, rows_per_prog, num_sms))
    last_rows = int(blocks[-1, 1] - blocks[-2, 1])
    share = config.short_tail_share(num_rows, rows_per_prog, block_m, num_sms)
    assert share == last_rows / rows_per_prog
    assert (share < 1) == (num_rows == 200_000)


@pytest.mark.parametrize("short_tail", [0, 40, 90])
def test_triton_forward_with_short_tail(kernels, short_tail, monkeypatch):
    kernels, device = kernels
    monkeypatch.setattr(kernels, "tail_rows", lambda rows, rows_per_prog, num_sms: short_tail)
    x, ptr, w, b = (t.detach() for t in make([0, 70, 5, 1, 33], 37, 40, torch.float32, device))
    plan = kernels.SegmentPlan(ptr, x.device)
    cfg = config.SegmmConfig(16, 64, 64, 64)
    assert_close(kernels.forward(x, plan, w, b, cfg), reference(x, ptr, w, b), torch.float32)


def test_model_prefers_small_tiles_for_tiny_segments(monkeypatch):
    monkeypatch.setattr(config, "hardware", lambda device: (config.HARDWARE["H100"], 132))  # the tuned device
    tiny = torch.full((300,), 3)
    big = torch.full((4,), 200000)
    assert config.model_config(tiny, 64, 64, torch.bfloat16, torch.device("cpu")).block_m == 16
    # padding costs nothing there: a taller tile (on the H100 32 and 64 rows measure within 5%)
    assert config.model_config(big, 64, 64, torch.bfloat16, torch.device("cpu")).block_m >= 32


def test_backward_items_hold_many_partials_worth_of_rows():
    """Backward items aim at four waves, but never hold fewer rows than PARTIAL_ROWS_FACTOR times
    those whose x and g bytes match one fp32 K x N weight-gradient partial."""
    def rows(counts, K, dtype):
        return config.bwd_config(K, K, dtype, config.size_stats(counts), 132, config.HARDWARE["H100"], True).rows_per_prog
    mutag_like = torch.tensor([22484, 22484, 18634, 18634, 9317] + [1500] * 40)
    elt = {torch.bfloat16: 2, torch.float32: 4}
    for K in (64, 128):
        for dtype in (torch.bfloat16, torch.float32):
            partial_rows = config.PARTIAL_ROWS_FACTOR * K * K * 4 / (2 * K * elt[dtype])
            four_waves = mutag_like.sum().item() / (4 * 132)
            got = rows(mutag_like, K, dtype)
            assert got >= max(partial_rows, four_waves) and got % 64 == 0
            block_m = 64 if K == 128 else 128
            assert got < max(partial_rows, four_waves, 4 * block_m) + block_m  # rounded up to whole row tiles
    am_like = torch.full((266,), 12000)
    assert rows(am_like, 128, torch.bfloat16) >= am_like.sum().item() / (4 * 132)  # waves decide there


def test_tune_key_ignores_small_changes_and_autotuner_caches(tmp_path):
    a = torch.tensor([100, 120, 90, 110])
    b = torch.tensor([101, 119, 92, 108])
    c = torch.tensor([1000, 10, 5, 3000])
    key = config.tune_key("fwd", 64, 64, torch.bfloat16, config.size_stats(a))
    assert key == config.tune_key("fwd", 64, 64, torch.bfloat16, config.size_stats(b))
    assert key != config.tune_key("fwd", 64, 64, torch.bfloat16, config.size_stats(c))
    assert key != config.tune_key("fwd", 64, 32, torch.bfloat16, config.size_stats(a))

    tuner = config.Tuner()
    path = str(tmp_path / "tuned.json")
    tuner.enable(True, cache_file=path)
    calls = []

    def bench(cfg):  # pretend the largest row tile is fastest
        calls.append(cfg)
        return 1.0 / cfg.rows_per_prog

    best = tuner.choose("fwd", a, 64, 64, torch.bfloat16, torch.device("cpu"), bench)
    assert best == max(calls, key=lambda cfg: cfg.rows_per_prog) and len(calls) == tuner.top_k
    assert tuner.choose("fwd", b, 64, 64, torch.bfloat16, torch.device("cpu"), bench) == best
    assert len(calls) == tuner.top_k  # no re-tuning for b
    with open(path) as f:
        assert list(json.load(f)) == [key]
    fresh = config.Tuner()
    fresh.load(path)
    assert fresh.cached(key) == best


def test_cuda_implementation_without_triton_raises_a_clear_error(monkeypatch):
    import sys
    import pyg_fast.triton
    op_module = sys.modules["pyg_fast.ops.segment_matmul"]
    monkeypatch.setitem(sys.modules, "pyg_fast.triton.segment_matmul", None)  # makes the import fail
    monkeypatch.delattr(pyg_fast.triton, "segment_matmul", raising=False)
    with pytest.raises(RuntimeError, match="runs Triton kernels, but Triton could not be imported"):
        op_module._triton_kernels()


@pytest.mark.parametrize("dtype,precision,tensor_cores", [("bf16", "tf32", True), ("fp32", "tf32", True),
                                                          ("fp32", "ieee", False)])
def test_triton_kernels_compile_for_sm90(dtype, precision, tensor_cores):
    """Lowers the kernels to PTX for an H100 without a GPU (Triton ships ptxas), so that GPU-only
    compile errors show up in CI; bf16 and TF32 must use Hopper tensor cores (wgmma)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    kernels = load_kernels(interpret=False)
    target = GPUTarget("cuda", 90, 32)
    blocks = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    ints = lambda *names: {n: "i32" for n in names}  # noqa: E731
    fwd_sig = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
               "blocks_ptr": "*i32",
               **ints("K", "N", "stride_xm", "stride_wt", "stride_wk", "stride_wn", "stride_om")}
    for whole_k in (True, False):
        fwd_consts = dict(HAS_BIAS=True, PRECISION=precision, WIDEN=False, WHOLE_K=whole_k, **blocks)
        ptx = triton.compile(ASTSource(kernels._segmm_fwd_kernel, {**fwd_sig, **{k: "constexpr" for k in fwd_consts}},
                                       fwd_consts), target=target).asm["ptx"]
        assert ("wgmma" in ptx) == tensor_cores
    bwd_sig = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "g_ptr": f"*{dtype}", "gx_ptr": f"*{dtype}",
               "gw_ptr": f"*{dtype}", "part_ptr": "*fp32", "count_ptr": "*i32", "items_ptr": "*i32",
               "type_items_ptr": "*i32", **ints("K", "N", "stride_xm", "stride_wt", "stride_wk", "stride_wn",
                                                "stride_gm", "stride_gxm", "stride_gwt")}
    # x^T g is a BLOCK_K-row product: wgmma needs at least 64 rows
    bwd_blocks = dict(blocks, BLOCK_K=64)
    for input_grad, atomic in ((True, False), (False, False), (False, True)):
        consts = dict(INPUT_GRAD=input_grad, BIAS_GRAD=True, ATOMIC=atomic, PRECISION=precision, WIDEN=False,
                      **bwd_blocks)
        sig = {**bwd_sig, "gw_ptr": "*fp32"} if atomic else bwd_sig
        ptx = triton.compile(ASTSource(kernels._segmm_bwd_kernel, {**sig, **{k: "constexpr" for k in consts}},
                                       consts), target=target).asm["ptx"]
        assert ("wgmma" in ptx) == tensor_cores
