import pytest
import torch

import pyg_fast
from pyg_fast.testing import DEVICES, DTYPES, PygFastOps, assert_close, scatter_reference


def tied_rows(num_rows, num_features, device, dtype):
    """Rows of few distinct values, so that segments hold ties; never 0, which the reference's
    zero-filled start would count as a tie of its own."""
    values = torch.randint(1, 4, (num_rows, num_features), device=device)
    return (values * (torch.randint(0, 2, values.shape, device=device) * 2 - 1)).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("num_features", [5, 40])
def test_matches_scatter_reduce_with_ties_and_empty_segments(device, dtype, reduce, num_features):
    """Values against float64, and the gradient split evenly among ties per feature, as torch's
    scatter_reduce; segments with no row give 0 and no gradient. 40 features: the CPU kernels
    split the segments among threads."""
    E, F, V = 3000, num_features, 90
    index = torch.randint(0, 60, (E,), device=device)  # segments 60-89 empty
    src = tied_rows(E, F, device, dtype).requires_grad_()
    out, flags = torch.ops.pyg_fast.scatter_extremum(src, index, V, reduce == "max")
    assert flags.tolist() == [0]
    ref_src = src.detach().double().requires_grad_()
    ref = scatter_reference(ref_src, index, V, reduce)
    assert_close(out, ref, dtype)
    grad = torch.randn(V, F, device=device, dtype=torch.float64)
    out.backward(grad.to(dtype))
    ref.backward(grad)
    assert_close(src.grad, ref_src.grad, dtype, scale=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_segment_reduce_first_uses_take_no_grouping(device, reduce, route):
    """On the COO route an unsorted index's first uses run scatter_extremum, from its
    REUSED_FROM_USE-th use the grouped kernel; the grouped route takes it at once."""
    from pyg_fast.ops import _layout
    E, F, V = 400, 3, 50
    index = torch.randint(0, V, (E,), device=device)
    src = torch.randn(E, F, device=device)
    ref = scatter_reference(src, index, V, reduce)
    for use in range(1, _layout.REUSED_FROM_USE + 1):
        with PygFastOps() as log:
            out = pyg_fast.segment_reduce(src, index, dim_size=V, reduce=reduce)
        coo = route == "coo" and use < _layout.REUSED_FROM_USE
        assert ("scatter_extremum" in log.ops) == coo, (use, log.ops)
        assert_close(out, ref, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_wide_rows_of_a_new_index_are_grouped(device, reduce, monkeypatch):
    """A max or min over a new index groups it where ``tuning.EXTREMUM_GROUPED_FROM`` finds its rows
    wide and its values many enough, and runs scatter_extremum otherwise; both match float64."""
    from pyg_fast import tuning
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": 2 ** 62, "cuda": 2 ** 62})
    monkeypatch.setattr(tuning, "EXTREMUM_GROUPED_FROM", {torch.device(device).type: (4, 1200)})
    V = 50
    for E, F, grouped in ((400, 3, False), (400, 4, True), (200, 6, False)):  # 1200 values: not above
        index = torch.randint(0, V, (E,), device=device)
        src = torch.randn(E, F, device=device)
        with PygFastOps() as log:
            out = pyg_fast.segment_reduce(src, index, dim_size=V, reduce=reduce)
        assert ("scatter_extremum" in log.ops) != grouped, (E, F, log.ops)
        assert_close(out, scatter_reference(src, index, V, reduce), torch.float32)


def test_cpu_threads_split_the_segments_with_the_same_result():
    """On the CPU each thread folds the rows of its own range of segments in row order: forward and
    backward give the same bits on one thread or several (from 2^25 values on: 17 k rows x 2,048
    features), rows out of range skipped and flagged."""
    index = torch.randint(0, 400, (17000,))
    index[[5, 16999]] = 500
    src = tied_rows(17000, 2048, "cpu", torch.float32)
    grad = torch.randn(450, 2048)
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, max(threads, 2)):
            torch.set_num_threads(count)
            out, flags = torch.ops.pyg_fast.scatter_extremum(src, index, 450, True)
            results.append((out, flags, torch.ops.pyg_fast.scatter_extremum_backward(grad, src, index, out)))
    finally:
        torch.set_num_threads(threads)
    (out, flags, grad_src), (out2, flags2, grad_src2) = results
    keep = index < 450
    assert flags.tolist() == flags2.tolist() == [1]
    assert_close(out, scatter_reference(src[keep], index[keep], 450, "max"), torch.float32)
    assert torch.equal(out, out2) and torch.equal(grad_src, grad_src2)
    assert not grad_src[~keep].any()


@pytest.mark.parametrize("device", DEVICES)
def test_index_out_of_range_is_skipped_and_raised(device, route):
    src = torch.randn(5, 2, device=device)
    index = torch.tensor([0, 2, 2, 9, -1], device=device)
    with pytest.raises(IndexError, match="'index' holds values outside \\[0, 3\\)"):
        pyg_fast.segment_reduce(src, index, dim_size=3, reduce="max")
        pyg_fast.check_errors()
    out, flags = torch.ops.pyg_fast.scatter_extremum(src, index, 3, True)
    assert flags.tolist() == [1]
    assert_close(out, scatter_reference(src[:3], index[:3], 3, "max"), torch.float32)


def test_compiles_fullgraph():
    index = torch.tensor([2, 0, 2, 1, 0, 2, 2])
    src = torch.tensor([[1.0, 2.0], [3.0, 3.0], [1.0, 5.0], [0.5, 0.5], [3.0, 1.0], [0.0, 5.0], [1.0, 5.0]],
                       dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 2, dtype=torch.float64)

    def fn(s):
        return (torch.ops.pyg_fast.scatter_extremum(s, index, 4, True)[0] * weight).sum()

    torch.compile(fn, fullgraph=True, backend="aot_eager")(src).backward()
    ref_src = src.detach().clone().requires_grad_()
    (scatter_reference(ref_src, index, 4, "max") * weight).sum().backward()
    assert_close(src.grad, ref_src.grad, torch.float64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_signed_zeros(device, reduce):
    """-0.0 among the values (its bits order like the negative floats' on CUDA): the extrema equal
    torch's, never an infinity."""
    src = torch.tensor([[-0.0], [-0.0], [-1.0], [-0.0], [2.0], [-0.0], [0.0], [-0.0]], device=device)
    index = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3], device=device)
    out, _ = torch.ops.pyg_fast.scatter_extremum(src, index, 4, reduce == "max")
    assert torch.isfinite(out).all()
    assert_close(out, scatter_reference(src, index, 4, reduce), torch.float32)
