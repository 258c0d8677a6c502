import pytest
import torch

import pyg_fast
from pyg_fast.testing import DEVICES, DTYPES, REL_TOL, assert_close, poison_allocator, rel_err, scatter_reference

REDUCES = ["sum", "mean", "max", "min"]


def random_index(num_rows: int, dim_size: int, device, huge_segment: bool = False) -> torch.Tensor:
    """A sorted index with empty segments (and optionally one segment holding most rows)."""
    if huge_segment:
        index = torch.full((num_rows,), dim_size // 2, dtype=torch.long)
        index[: num_rows // 10] = torch.randint(0, dim_size // 2, (num_rows // 10,))
    else:
        index = torch.randint(0, dim_size, (num_rows,))
        index[index % 5 == 1] = 0  # leaves segments 1, 6, 11, ... empty
    return index.sort().values.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [1, 2, 3, 4, 8, 16, 17, 64, 300])
def test_forward_matches_float64(device, dtype, reduce, num_features):
    num_rows, dim_size = 400, 60
    index = random_index(num_rows, dim_size, device)
    src = torch.randn(num_rows, num_features, device=device).to(dtype)
    poison_allocator(dim_size * num_features * 2, device)
    out = pyg_fast.segment_reduce(src, index, dim_size=dim_size, reduce=reduce)
    assert out.dtype == dtype and out.shape == (dim_size, num_features)
    assert_close(out, scatter_reference(src, index, dim_size, reduce), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_huge_segment_and_unsorted_and_ptr(device, reduce):
    num_rows, dim_size = 5000, 40
    index = random_index(num_rows, dim_size, device, huge_segment=True)
    src = torch.randn(num_rows, 16, device=device)
    ref = scatter_reference(src, index, dim_size, reduce)
    assert_close(pyg_fast.segment_reduce(src, index, dim_size=dim_size, reduce=reduce), ref, torch.float32)
    perm = torch.randperm(num_rows, device=device)
    unsorted = pyg_fast.segment_reduce(src[perm], index[perm], dim_size=dim_size, reduce=reduce)
    assert_close(unsorted, ref, torch.float32)
    ptr = torch._convert_indices_from_coo_to_csr(index, dim_size)
    assert_close(pyg_fast.segment_reduce(src, ptr=ptr, reduce=reduce), ref, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_dim_and_non_contiguous(device, reduce):
    index = random_index(50, 12, device)
    base = torch.randn(16, 3, 50, device=device)
    src = base.transpose(0, 2)[:, :, ::2].transpose(0, 1)  # [3, 50, 8], non-contiguous
    assert not src.is_contiguous()
    out = pyg_fast.segment_reduce(src, index, dim_size=12, reduce=reduce, dim=1)
    assert_close(out, scatter_reference(src, index, 12, reduce, dim=1), torch.float32)
    out = pyg_fast.segment_reduce(src, index[torch.randperm(50, device=device)], dim_size=12, reduce=reduce, dim=-2)
    assert out.shape == (3, 12, 8)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [2, 5])
def test_cpu_threads_split_batched_rows(threads, reduce, num_features):
    """Rows of every batch split over threads in ranges of equal work: a range may start or end
    inside a batch, next to a segment holding most rows or an empty one."""
    index = random_index(20_000, 500, "cpu", huge_segment=True)
    src = torch.randn(3, 20_000, num_features)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = pyg_fast.segment_reduce(src, index, dim_size=500, reduce=reduce, dim=1)
    finally:
        torch.set_num_threads(previous)
    assert_close(out, scatter_reference(src, index, 500, reduce, dim=1), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduce", REDUCES)
def test_backward_matches_float64(device, dtype, reduce):
    index = random_index(300, 40, device)
    src = torch.randn(300, 24, device=device).to(dtype)
    src[5] = src[4]  # ties inside a segment
    grad = torch.randn(40, 24, device=device).to(dtype)
    x = src.clone().requires_grad_()
    pyg_fast.segment_reduce(x, index, dim_size=40, reduce=reduce).backward(grad)
    ref_x = src.double().requires_grad_()
    scatter_reference(ref_x, index, 40, reduce).backward(grad.double())
    assert_close(x.grad, ref_x.grad, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_backward_on_a_hub_segment(device, reduce):
    """Gradients where one segment holds most rows, on every route: a CSR pointer, an index in order,
    an unsorted index on its first use (atomics; max/min: scatter_extremum) and reused (grouped),
    and the weighted gather-reduce; ties inside the hub and in small segments."""
    from pyg_fast.ops import _layout
    num_rows, dim_size = 30_000, 64
    index = random_index(num_rows, dim_size, device, huge_segment=True)
    src = torch.randint(-3, 4, (num_rows, 8), device=device).float()  # few values: many ties
    grad = torch.randn(dim_size, 8, device=device)
    ref_x = src.double().requires_grad_()
    scatter_reference(ref_x, index, dim_size, reduce).backward(grad.double())
    perm = torch.randperm(num_rows, device=device)
    ptr = torch._convert_indices_from_coo_to_csr(index, dim_size)
    unsorted_index = index[perm]
    routes = {  # route: (the call on rows x, calls made before the one checked)
        "ptr": (lambda x: pyg_fast.segment_reduce(x, ptr=ptr, reduce=reduce), 0),
        "sorted": (lambda x: pyg_fast.segment_reduce(x, index, dim_size=dim_size, reduce=reduce, sorted=True), 0),
        "unsorted": (lambda x: pyg_fast.segment_reduce(x[perm], unsorted_index, dim_size=dim_size, reduce=reduce),
                     _layout.REUSED_FROM_USE - 1)}
    for use in (1, _layout.REUSED_FROM_USE):  # an unsorted index on its first use, then reused
        for name, (call, before) in routes.items():
            for _ in range(1 + (before if use > 1 else 0)):
                x = src.clone().requires_grad_()
                call(x).backward(grad)
            err = rel_err(x.grad, ref_x.grad)
            assert err <= REL_TOL[torch.float32], f"{name}, use {use}: relative error {err:.3g}"
    # the weighted gather-reduce: rows x[src_index] * weight
    x = torch.randint(-3, 4, (500, 8), device=device).float().requires_grad_()
    src_index = torch.randint(0, 500, (num_rows,), device=device)
    weight = torch.randint(1, 3, (num_rows,), device=device).float()
    pyg_fast.index_weight_segment_reduce(x, src_index, index, weight, dim_size, reduce=reduce).backward(grad)
    ref_x = x.detach().double().requires_grad_()
    scatter_reference(ref_x[src_index] * weight.double()[:, None], index, dim_size, reduce).backward(grad.double())
    assert_close(x.grad, ref_x.grad, torch.float32)


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_cpu(reduce):
    index = torch.tensor([0, 0, 1, 1, 1, 3, 3, 5, 5, 5])
    src = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: pyg_fast.segment_reduce(s, index, dim_size=7, reduce=reduce), (src,))
    ptr = torch.tensor([0, 2, 5, 5, 7, 7, 10, 10])
    assert torch.autograd.gradcheck(lambda s: pyg_fast.segment_reduce(s, ptr=ptr, reduce=reduce), (src,))


def test_compile_fullgraph_cpu():
    index = random_index(100, 20, "cpu")
    src = torch.randn(100, 8, requires_grad=True)

    def f(s):
        return pyg_fast.segment_reduce(s, index, dim_size=20, reduce="mean", sorted=True).sum()

    compiled = torch.compile(f, fullgraph=True)
    assert torch.allclose(compiled(src), f(src))
    (g1,) = torch.autograd.grad(compiled(src), src)
    (g2,) = torch.autograd.grad(f(src), src)
    assert torch.allclose(g1, g2)


def test_empty_inputs():
    out = pyg_fast.segment_reduce(torch.randn(0, 4), torch.zeros(0, dtype=torch.long), dim_size=3, reduce="max")
    assert out.shape == (3, 4) and (out == 0).all()
    out = pyg_fast.segment_reduce(torch.randn(5, 0), torch.zeros(5, dtype=torch.long), dim_size=2)
    assert out.shape == (2, 0)


def test_bad_inputs_raise_clear_errors():
    src, index = torch.randn(6, 2), torch.tensor([0, 0, 1, 2, 2, 3])
    with pytest.raises(TypeError, match="floating point"):
        pyg_fast.segment_reduce(src.long(), index, dim_size=4)
    with pytest.raises(TypeError, match="integer"):
        pyg_fast.segment_reduce(src, index.float(), dim_size=4)
    with pytest.raises(IndexError, match="outside"):
        pyg_fast.segment_reduce(src, index, dim_size=3)
    with pytest.raises(IndexError, match="outside"):
        pyg_fast.segment_reduce(src, index - 1, dim_size=4)
    with pytest.raises(ValueError, match="entries"):
        pyg_fast.segment_reduce(src, index[:5], dim_size=4)
    with pytest.raises(ValueError, match="reduce"):
        pyg_fast.segment_reduce(src, index, dim_size=4, reduce="median")
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing from 0 to 6"):
        pyg_fast.segment_reduce(src, ptr=torch.tensor([0, 3, 2, 6]))
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing from 0 to 6"):  # the last row left out
        pyg_fast.segment_reduce(src, ptr=torch.tensor([0, 2, 4, 5]))
    with pytest.raises(ValueError, match="dim_size"):
        pyg_fast.segment_reduce(src, ptr=torch.tensor([0, 3, 6]), dim_size=5)
    with pytest.raises(ValueError, match="declared sorted"):
        pyg_fast.segment_reduce(src, index.flip(0), dim_size=4, sorted=True)
    with pytest.raises(ValueError, match="exactly one"):
        pyg_fast.segment_reduce(src)
    with pytest.raises(IndexError, match="dim"):
        pyg_fast.segment_reduce(src, index, dim_size=4, dim=2)
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing"):
        torch.ops.pyg_fast.segment_reduce(src.view(1, 6, 2), torch.tensor([0, 4, 9]), "sum", [])


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
def test_device_mismatch_raises():
    with pytest.raises(ValueError, match="cuda"):
        pyg_fast.segment_reduce(torch.randn(4, 2, device="cuda"), torch.tensor([0, 0, 1, 1]), dim_size=2)


SCHEDULE_PARAMS = [dict(schedule="row", max_lanes=32, threads=128, chunk=256),
                   dict(schedule="row", max_lanes=2, threads=64, chunk=256),
                   dict(schedule="row_parallel", max_lanes=8, threads=256, chunk=256),
                   dict(schedule="row_parallel", max_lanes=32, threads=128, chunk=256),
                   dict(schedule="chunk", max_lanes=32, threads=128, chunk=7),
                   dict(schedule="chunk", max_lanes=4, threads=256, chunk=64),
                   dict(schedule="edges", max_lanes=32, threads=256, chunk=64),
                   dict(schedule="edges", max_lanes=1, threads=64, chunk=100),  # chunks not of whole steps
                   dict(schedule="edges", max_lanes=4, threads=128, chunk=37),  # runs of 4 feature lanes
                   dict(schedule="groups", max_lanes=32, threads=128, chunk=4),
                   dict(schedule="groups", max_lanes=0, threads=256, chunk=0),  # GNNAdvisor's model
                   dict(schedule="groups", max_lanes=2, threads=64, chunk=64),
                   dict(schedule="balanced", max_lanes=32, threads=128, chunk=0),
                   dict(schedule="balanced", max_lanes=2, threads=256, chunk=0)]


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", SCHEDULE_PARAMS, ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("num_features", [1, 4, 36])
def test_every_cuda_schedule(params, reduce, dtype, num_features):
    """Each schedule computes the same function, whatever the selector would pick."""
    from pyg_fast import tuning
    index = random_index(3000, 200, "cuda", huge_segment=True)
    src = torch.randn(3000, num_features, device="cuda").to(dtype)
    x = torch.randn(150, num_features, device="cuda").to(dtype)
    src_index = torch.randint(0, 150, (3000,), device="cuda")
    weight = (torch.rand(3000, device="cuda") + 0.5).to(dtype)
    gathered = x.double()[src_index] * weight.double()[:, None]
    tuning.set_override(params)
    try:
        poison_allocator(200 * num_features * 2, "cuda")
        out = pyg_fast.segment_reduce(src, index, dim_size=200, reduce=reduce)
        spmm = pyg_fast.index_weight_segment_reduce(x, src_index, index, weight, 200, reduce)
    finally:
        tuning.set_override(None)
    assert_close(out, scatter_reference(src, index, 200, reduce), dtype)
    assert_close(spmm, scatter_reference(gathered, index, 200, reduce), dtype, scale=2)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", SCHEDULE_PARAMS, ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("reduce", REDUCES)
def test_every_cuda_schedule_on_a_mini_batch(params, reduce):
    """A sampled mini-batch's edges end at its first nodes: every segment after them is empty
    (here 19 k of 20 k), and each schedule writes them as empty while it reduces the others."""
    from pyg_fast import tuning
    num_targets, dim_size = 1000, 20000
    index = torch.randint(0, num_targets, (5000,)).sort().values.cuda()
    src = torch.randn(5000, 4, device="cuda")
    x = torch.randn(dim_size, 4, device="cuda")
    src_index = torch.randint(0, dim_size, (5000,), device="cuda")
    tuning.set_override(params)
    try:
        poison_allocator(dim_size * 4 * 2, "cuda")
        out = pyg_fast.segment_reduce(src, index, dim_size=dim_size, reduce=reduce)
        spmm = pyg_fast.index_segment_reduce(x, src_index, index, dim_size, reduce)
    finally:
        tuning.set_override(None)
    assert_close(out, scatter_reference(src, index, dim_size, reduce), torch.float32)
    assert_close(spmm, scatter_reference(x.double()[src_index], index, dim_size, reduce), torch.float32)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("max_lanes", [32, 4])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [1000, 1002])
def test_row_schedule_splits_the_features_of_few_segments(max_lanes, reduce, num_features):
    """Five segments cannot fill the GPU, so the row schedule spreads slices of the features over
    the grid (the last slice partial); batched rows too."""
    from pyg_fast import tuning
    index = random_index(600, 5, "cuda", huge_segment=True)
    src = torch.randn(2, 600, num_features, device="cuda")
    x = torch.randn(40, num_features, device="cuda")
    src_index = torch.randint(0, 40, (600,), device="cuda")
    tuning.set_override(dict(schedule="row", max_lanes=max_lanes, threads=128, chunk=256))
    try:
        out = pyg_fast.segment_reduce(src, index, dim_size=5, reduce=reduce, dim=1)
        gathered = pyg_fast.index_segment_reduce(x, src_index, index, 5, reduce)
    finally:
        tuning.set_override(None)
    assert_close(out, scatter_reference(src, index, 5, reduce, dim=1), torch.float32)
    assert_close(gathered, scatter_reference(x.double()[src_index], index, 5, reduce), torch.float32)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", [p for p in SCHEDULE_PARAMS if p["schedule"] in ("groups", "balanced", "edges")],
                         ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("reduce", REDUCES)
def test_layout_and_edge_schedules_batched_and_ptr(params, reduce):
    """The graph-aware and edge-parallel schedules over a batch (src [3, E, F], reduced along dim
    1), with gradients, and the raw op over a ptr that does not start at row 0 (the public call
    rejects it; the kernels ignore the rows outside every segment)."""
    from pyg_fast import tuning
    index = random_index(2000, 90, "cuda", huge_segment=True)
    src = torch.randn(3, 2000, 12, device="cuda")
    ptr = torch._convert_indices_from_coo_to_csr(index, 90)
    ptr[0] = ptr[1]  # segment 0 empty, its rows outside every segment
    start = int(ptr[0])
    ref_inner = scatter_reference(src[:, start:], index[start:], 90, reduce, dim=1)
    tuning.set_override(params)
    try:
        x = src.clone().requires_grad_()
        out = pyg_fast.segment_reduce(x, index, dim_size=90, reduce=reduce, dim=1)
        out.backward(torch.ones_like(out))
        launch = tuning.segment_launch(src, ptr, 2000)
        shifted = torch.ops.pyg_fast.segment_reduce(src, ptr, reduce, launch.config, launch.data)
    finally:
        tuning.set_override(None)
    assert_close(out, scatter_reference(src, index, 90, reduce, dim=1), torch.float32)
    assert_close(shifted, ref_inner, torch.float32)
    ref_x = src.double().requires_grad_()
    scatter_reference(ref_x, index, 90, reduce, dim=1).backward(torch.ones(3, 90, 12, dtype=torch.float64, device="cuda"))
    assert_close(x.grad, ref_x.grad, torch.float32)


GROUPS_SPANNING = dict(schedule="groups", max_lanes=4, threads=64, chunk=2)  # 16 groups of 2 rows a block


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_groups_schedule_counters_across_calls_streams_and_graphs(reduce):
    """The groups schedule combines a segment that spans blocks in the block that arrives last,
    through per-stream counters each launch leaves zeroed: repeated calls, two streams at once and
    a captured CUDA graph replayed on new data all give the reference."""
    from pyg_fast import tuning
    index = random_index(200_000, 3000, "cuda", huge_segment=True)  # segment 1500 spans many blocks
    srcs = [torch.randn(200_000, 8, device="cuda") for _ in range(3)]
    refs = [scatter_reference(s, index, 3000, reduce) for s in srcs]
    reduce_fn = lambda s: pyg_fast.segment_reduce(s, index, dim_size=3000, reduce=reduce)
    tuning.set_override(GROUPS_SPANNING)
    try:
        for _ in range(3):
            for s, ref in zip(srcs, refs):
                assert_close(reduce_fn(s), ref, torch.float32)
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        torch.cuda.synchronize()
        outs = []
        for stream, s in zip(streams, srcs):
            with torch.cuda.stream(stream):
                outs.append([reduce_fn(s) for _ in range(5)])
        torch.cuda.synchronize()
        for runs, ref in zip(outs, refs):
            for out in runs:
                assert_close(out, ref, torch.float32)
        static = srcs[0].clone()
        reduce_fn(static)  # builds the launch outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = reduce_fn(static)
        for s, ref in zip(srcs[::-1], refs[::-1]):
            static.copy_(s)
            graph.replay()
            assert_close(captured, ref, torch.float32)
    finally:
        tuning.set_override(None)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("params", SCHEDULE_PARAMS, ids=lambda p: f"{p['schedule']}-{p['max_lanes']}-{p['chunk']}")
@pytest.mark.parametrize("reduce", REDUCES)
def test_every_cuda_schedule_writes_leading_and_trailing_empty_segments(params, reduce):
    """Segments before the first row and after the last (and runs of empty ones between) are written
    (as 0) into a poisoned output, batched, by every schedule."""
    from pyg_fast import tuning
    index = torch.cat([torch.full((700,), 40), torch.full((5,), 41), torch.randint(45, 150, (2000,))])
    index = index.sort().values.cuda()  # segments 0-39, 42-44, the unused ones below 150 and 150-179: empty
    src = torch.randn(2, 2705, 4, device="cuda")
    tuning.set_override(params)
    try:
        poison_allocator(2 * 180 * 4 * 2, "cuda")
        out = pyg_fast.segment_reduce(src, index, dim_size=180, reduce=reduce, dim=1)
    finally:
        tuning.set_override(None)
    assert_close(out, scatter_reference(src, index, 180, reduce, dim=1), torch.float32)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("num_features", [16, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_traced_launch_builds_the_groups_layout(reduce, num_features, dtype):
    """A traced call's launch (tuning.TRACED) takes the groups schedule at these sizes and builds its
    layout inside the op, padded past the true group count: with empty segments, one segment that
    spans many blocks, rows after the last segment (a pointer that does not cover them) and a batch,
    every output against float64, for a direct and a gathered, weighted source."""
    from pyg_fast import tuning
    E, V = 300_000, 30_000
    for gather in (False, True):
        assert tuning.choose(E, V, num_features, torch.finfo(dtype).bits // 8, gather, num_features, None,
                             True)["schedule"] == "groups"
    index = random_index(E, V, "cuda", huge_segment=True).sort().values
    index[index == 7] = 8  # an empty segment
    index[-2000:] = V - 5
    ptr = torch._convert_indices_from_coo_to_csr(index, V)
    covered = ptr.clone()
    covered[-10:] = covered[-10]  # the last 9 segments empty, the 2000 rows of segment V - 5 in none
    src = torch.randn(2, E, num_features, device="cuda", dtype=dtype)
    out = torch.ops.pyg_fast.segment_reduce(src, covered, reduce, list(tuning.TRACED.config))
    assert_close(out, torch.stack([_csr_reference(s, covered, reduce) for s in src]), dtype)
    x = torch.randn(5000, num_features, device="cuda", dtype=dtype)
    src_index = torch.randint(0, 5000, (E,), device="cuda")
    weight = torch.rand(E, 1, device="cuda", dtype=dtype)
    out = torch.ops.pyg_fast.index_segment_reduce(x, src_index, ptr, weight, reduce, list(tuning.TRACED.config))
    assert_close(out, _csr_reference(x.double()[src_index] * weight.double(), ptr, reduce), dtype)


def _csr_reference(rows, ptr, reduce):
    """The float64 reduction of ``rows`` over the segments of ``ptr``; rows past ptr[-1] in none."""
    covered = int(ptr[-1])
    index = torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=ptr.device), ptr.diff())
    return scatter_reference(rows[:covered], index, ptr.numel() - 1, reduce)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
def test_groups_layout_without_a_group_per_segment_raises():
    src, ptr = torch.randn(1, 6, 2, device="cuda"), torch.tensor([0, 4, 4, 6], device="cuda")
    # group_ptr, group_start, group_segment of two groups: segment 1 (empty) has none.
    table = torch.tensor([0, 1, 1, 2, 0, 4, 6, 0, 2], device="cuda")
    with pytest.raises(ValueError, match="one group per segment"):
        torch.ops.pyg_fast.segment_reduce(src, ptr, "sum", [3, 2, 1, 64, 4], table)


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
def test_edges_schedule_with_too_many_threads_raises():
    src, ptr = torch.randn(1, 6, 2, device="cuda"), torch.tensor([0, 4, 6], device="cuda")
    with pytest.raises(ValueError, match="at most 256 threads"):
        torch.ops.pyg_fast.segment_reduce(src, ptr, "sum", [5, 1, 1, 512, 64])


@pytest.mark.skipif("cuda" not in DEVICES, reason="schedules are CUDA-only")
def test_graph_aware_schedule_without_layout_raises():
    src = torch.randn(1, 6, 2, device="cuda")
    ptr = torch.tensor([0, 4, 6], device="cuda")
    with pytest.raises(ValueError, match="schedule_data"):
        torch.ops.pyg_fast.segment_reduce(src, ptr, "sum", [3, 2, 1, 64, 4])
    with pytest.raises(ValueError, match="one entry per segment"):
        torch.ops.pyg_fast.segment_reduce(src, ptr, "sum", [4, 2, 1, 64, 0], torch.zeros(5, dtype=torch.long, device="cuda"))


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
def test_reused_graph_gets_the_measured_launch():
    """A graph reused on CUDA is reduced with the size-only choice until its statistics reach the
    host (computed from a size's second use on, no synchronisation), then with the table's choice
    for its skew and layout, kept with the pointer; every call gives the reference's numbers."""
    from pyg_fast import tuning
    index = random_index(5000, 300, "cuda", huge_segment=True)
    ptr = torch._convert_indices_from_coo_to_csr(index, 300)
    src = torch.randn(5000, 16, device="cuda")
    ref = scatter_reference(src, index, 300, "sum")

    def stats_started():
        return any(slot[0] == ("stats",) for slot in pyg_fast.ops._layout._CACHE[id(ptr)][1])

    assert tuning.segment_launch(src.view(1, 5000, 16), ptr, 5000) == tuning.AUTO
    assert tuning.segment_launch(src[:, :8].reshape(1, 5000, 8), ptr, 5000) == tuning.AUTO
    assert not stats_started()  # each size seen once (a sampled graph's layers): no statistics
    # A size repeated: they start without waiting, and serve this call only if their copy has
    # already landed (an idle H100 finished it before the host asked).
    repeated = tuning.segment_launch(src.view(1, 5000, 16), ptr, 5000)
    assert stats_started()
    torch.cuda.synchronize()
    measured = tuning.segment_launch(src.view(1, 5000, 16), ptr, 5000)
    assert repeated == tuning.AUTO or repeated is measured
    stats = pyg_fast.ops._layout.segment_stats(ptr)
    assert stats is not None and stats.max_segment == int(ptr.diff().max())
    expected = tuning.choose(5000, 300, 16, 4, False, 16, stats.max_segment, graph_aware=True)
    assert list(measured.config) == [tuning.SCHEDULES[expected["schedule"]], expected["lanes"], expected["vec"],
                                     expected["threads"], expected["chunk"]]
    assert tuning.segment_launch(src.view(1, 5000, 16), ptr, 5000) is measured
    # the first call times the candidates (the selector's pick serves it); once their timings are
    # in, the fastest is kept
    assert measured.trial is not None and measured.trial.launches[0].config == measured.config
    for _ in range(tuning.Trial.TRIES):  # one run, or one for each time the host outpaced its sleep
        assert_close(pyg_fast.segment_reduce(src, ptr=ptr), ref, torch.float32)
        torch.cuda.synchronize()
    settled = tuning.segment_launch(src.view(1, 5000, 16), ptr, 5000)
    assert settled.trial is None and any(settled is launch for launch in measured.trial.launches)
    assert tuning.segment_launch(src.view(1, 5000, 16), ptr, 5000) is settled
    assert_close(pyg_fast.segment_reduce(src, ptr=ptr), ref, torch.float32)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
@pytest.mark.parametrize("gather", [False, True])
def test_a_reused_graph_times_its_candidates_once_unless_deterministic(gather, monkeypatch):
    """A reused graph's reduction times its candidate launches once, in the call that starts the
    trial, and every call returns the reference's numbers; under deterministic algorithms it keeps
    the table's pick untimed."""
    from pyg_fast import tuning
    runs = []
    original = tuning.Trial.run
    monkeypatch.setattr(tuning.Trial, "run", lambda self, call: runs.append(self) or original(self, call))
    num_rows, num_segments = 20000, 700
    index = random_index(num_rows, num_segments, "cuda", huge_segment=True).sort().values
    src = torch.randn(num_rows, 32, device="cuda")
    x, gathered = torch.randn(900, 32, device="cuda"), torch.randint(0, 900, (num_rows,), device="cuda")
    rows = x[gathered] if gather else src
    ref = scatter_reference(rows, index, num_segments, "sum")

    def call():
        if gather:
            return pyg_fast.ops.index_segment_reduce(x, gathered, index, num_segments, "sum")
        return pyg_fast.segment_reduce(src, index=index, dim_size=num_segments, sorted=True)
    for _ in range(12):
        assert_close(call(), ref, torch.float32)
        torch.cuda.synchronize()
    # one trial, run again only where the host outpaced its holding sleep
    assert len({id(trial) for trial in runs}) == 1 and len(runs) <= tuning.Trial.TRIES
    assert len(runs[0].launches) > 1 and runs[0].settled() is not None
    runs.clear()
    index = index.clone()  # a new graph
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for _ in range(12):
            assert_close(call(), ref, torch.float32)
            torch.cuda.synchronize()
    finally:
        torch.use_deterministic_algorithms(False)
    assert runs == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["sorted", "unsorted", "ptr", "int32_ptr"])
def test_repeated_calls_follow_src_and_index_changes(device, kind):
    """A call is checked and resolved once per index and kind of src, then reused (see
    ``segment_reduce``'s kept calls): later calls with other shapes, dtypes, dims or dim sizes, and calls
    after the index changed in place, must still give the reference's numbers."""
    index = random_index(200, 30, device)
    if kind == "unsorted":
        index = index[torch.randperm(200, device=device)]
    ptr = torch._convert_indices_from_coo_to_csr(index, 30)
    if kind == "int32_ptr":
        ptr = ptr.int()

    def check(src, dim=0, dim_size=30, reduce="max"):
        for _ in range(3):  # kept once the route and launch are final, reused after
            if kind.endswith("ptr"):
                out = pyg_fast.segment_reduce(src, ptr=ptr, reduce=reduce, dim=dim)
            else:
                out = pyg_fast.segment_reduce(src, index, dim_size=dim_size, reduce=reduce, dim=dim)
            assert_close(out, scatter_reference(src, index, dim_size, reduce, dim=dim), src.dtype)

    check(torch.randn(200, 5, device=device))
    check(torch.randn(200, 5, device=device), reduce="mean")
    check(torch.randn(200, 3, dtype=torch.float64, device=device))
    check(torch.randn(4, 200, 2, device=device), dim=1)
    check(torch.randn(6, 200, device=device).t())  # non-contiguous
    if not kind.endswith("ptr"):
        check(torch.randn(200, 5, device=device), dim_size=31)
    # In place: the last rows move to the last segment (the index stays sorted where it was).
    index[-3:] = 29
    ptr.copy_(torch._convert_indices_from_coo_to_csr(index, 30))
    check(torch.randn(200, 5, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.long, torch.int32])
def test_a_reused_ptr_keeps_its_call_and_its_checks(device, dtype, monkeypatch):
    """Once a pointer's launch is final (its third call on the CPU; on CUDA once the graph's
    statistics have reached the host), its layout and launch come from one lookup (no new layout),
    with the same values as the float64 reference; a dim_size that disagrees with it, a change in
    place and other rows still meet the checks."""
    from pyg_fast.config import config
    from pyg_fast.ops import _layout
    monkeypatch.setattr(config, "measure_launches", False)  # no trial: the table's pick is final
    index = torch.randint(0, 30, (200,)).sort().values
    ptr = torch._convert_indices_from_coo_to_csr(index, 30).to(dtype).to(device)
    src = torch.randn(200, 5, device=device)
    built = []
    segments = _layout.segments
    monkeypatch.setattr(_layout, "segments", lambda *a, **k: built.append(1) or segments(*a, **k))
    for _ in range(8):
        out = pyg_fast.segment_reduce(src, ptr=ptr, reduce="sum", dim_size=30)
        assert_close(out, scatter_reference(src, index.to(device), 30, "sum"), torch.float32)
        if device == "cuda":
            torch.cuda.synchronize()
    settled = len(built)
    for _ in range(3):
        pyg_fast.segment_reduce(src, ptr=ptr, reduce="sum", dim_size=30)
    assert len(built) == settled and (device != "cpu" or settled == 2)
    with pytest.raises(ValueError, match="dim_size=29 does not match 'ptr'"):
        pyg_fast.segment_reduce(src, ptr=ptr, dim_size=29)
    with pytest.raises(ValueError, match="non-decreasing from 0 to 199"):
        pyg_fast.segment_reduce(src[:199], ptr=ptr)
        pyg_fast.check_errors()
    ptr[5] = 300
    with pytest.raises(ValueError, match="non-decreasing from 0 to 200"):
        pyg_fast.segment_reduce(src, ptr=ptr)
        pyg_fast.check_errors()


def test_kept_calls_do_not_keep_their_index_alive():
    """Kept calls and layouts are cached on the index (or ptr) they were made for: they must not
    hold it, nor the edge_index it is a row of."""
    import gc
    import weakref
    edge_index = torch.stack([torch.randint(0, 20, (100,)), torch.randint(0, 20, (100,)).sort().values])
    ptr = torch._convert_indices_from_coo_to_csr(edge_index[1], 20)
    x, src, weight = torch.randn(20, 4), torch.randn(100, 4), torch.rand(100)
    for _ in range(2):
        pyg_fast.segment_reduce(src, edge_index[1], dim_size=20)
        pyg_fast.segment_reduce(src, ptr=ptr)
        pyg_fast.index_weight_segment_reduce(x, edge_index[0], edge_index[1], weight, 20)
        pyg_fast.index_weight_segment_reduce(x, edge_index[0], ptr=ptr)
    refs = [weakref.ref(edge_index), weakref.ref(ptr)]
    del edge_index, ptr
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


@pytest.mark.skipif("cuda" not in DEVICES, reason="overrides are CUDA-only")
def test_override_applies_to_a_graph_with_kept_calls():
    from pyg_fast import tuning
    index = random_index(300, 40, "cuda")
    src = torch.randn(300, 4, device="cuda")
    for _ in range(3):  # the launch is final (and the call kept) from the second call on
        pyg_fast.segment_reduce(src, index, dim_size=40)
    tuning.set_override(dict(schedule="edges", max_lanes=1, threads=512, chunk=64))
    try:
        with pytest.raises(ValueError, match="at most 256 threads"):
            pyg_fast.segment_reduce(src, index, dim_size=40)
    finally:
        tuning.set_override(None)


@pytest.mark.parametrize("device", DEVICES)
def test_reused_index_keeps_its_call(device):
    """A reused index's grouped call is kept with it once its layout and launch are final; the
    kept call gives the reference's values and gradients for every reduce, and segment_arg_reduce
    shares it (its extremum through the kept call, its row the first holding it)."""
    from pyg_fast.ops._kernels import kept_key
    from pyg_fast.ops.segment_arg_reduce import segment_arg_reduce
    index = torch.randint(0, 30, (200,), device=device)
    src = torch.randn(200, 8, device=device)
    for _ in range(8):  # past the atomic route's first uses; on CUDA the statistics land meanwhile
        for reduce in REDUCES:
            out = pyg_fast.segment_reduce(src, index, dim_size=30, reduce=reduce)
            assert_close(out, scatter_reference(src, index, 30, reduce), torch.float32)
        if device == "cuda":
            torch.cuda.synchronize()
    assert pyg_fast.ops._layout.peek(index, kept_key(src, 200, 8, index, 30, None)) is not None
    src = torch.randn(200, 8, device=device, requires_grad=True)
    grad = torch.randn(30, 8, device=device)
    pyg_fast.segment_reduce(src, index, dim_size=30, reduce="sum").backward(grad)
    assert_close(src.grad, grad.double()[index], torch.float32)
    values, arg = segment_arg_reduce(src.detach(), index, dim_size=30, reduce="max")
    assert_close(values, scatter_reference(src.detach(), index, 30, "max"), torch.float32)
    held = arg < 200
    rows = arg.clamp(max=199)
    assert bool((index[rows][held] == torch.arange(30, device=device).unsqueeze(1).expand_as(arg)[held]).all())
    assert bool((src.detach().gather(0, rows)[held] == values[held]).all())
