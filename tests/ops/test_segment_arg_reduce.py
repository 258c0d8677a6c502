import pytest
import torch

from pyg_fast.ops.segment_arg_reduce import segment_arg_reduce
from pyg_fast.testing import DEVICES


def reference(src, index, dim_size, reduce):
    """float64 (or int64) torch: the extremum or product per segment along dim 0, and the first row
    holding the extremum (src.size(0) where empty)."""
    E = src.size(0)
    wide = src.double() if src.is_floating_point() else src.long()
    index_b = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    shape = (dim_size,) + tuple(src.shape[1:])
    if reduce == "mul":
        return wide.new_ones(shape).scatter_reduce_(0, index_b, wide, "prod"), None
    name = "amax" if reduce == "max" else "amin"
    values = wide.new_zeros(shape).scatter_reduce_(0, index_b, wide, name, include_self=False)
    hit = wide == values.gather(0, index_b)
    if src.is_floating_point():
        hit |= torch.isnan(wide) & torch.isnan(values.gather(0, index_b))
    rows = torch.arange(E, device=src.device).view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    arg = torch.full(shape, E, dtype=torch.long, device=src.device).scatter_reduce_(
        0, index_b, torch.where(hit, rows, E), "amin")
    return values, arg


def values_of(dtype, shape, device):
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    return torch.randint(-4, 5, shape, device=device, dtype=dtype)  # many ties: the first must win


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32])
@pytest.mark.parametrize("reduce", ["max", "min", "mul"])
@pytest.mark.parametrize("num_features", [1, 5, 64])
def test_matches_torch_on_an_unsorted_index(device, dtype, reduce, num_features):
    E, V = 300, 40
    index = torch.randint(0, V - 3, (E,), device=device)  # the last segments stay empty
    src = values_of(dtype, (E, num_features), device)
    if reduce == "mul" and dtype.is_floating_point:
        src = torch.rand(E, num_features, device=device).add_(0.5).to(dtype)
    out, arg = segment_arg_reduce(src, index, dim_size=V, reduce=reduce)
    want, want_arg = reference(src, index, V, reduce)
    assert out.dtype == dtype and out.shape == (V, num_features)
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(out.double() if dtype.is_floating_point else out.long(),
                               want if dtype.is_floating_point else want.long(), rtol=tol, atol=tol)
    if reduce == "mul":
        assert arg is None
    else:
        assert torch.equal(arg, want_arg)


@pytest.mark.parametrize("device", DEVICES)
def test_ptr_covering_part_of_the_rows_and_another_dim(device):
    src = torch.randn(3, 20, 4, device=device)
    ptr = torch.tensor([2, 5, 5, 11, 18], device=device)  # rows 0-1 and 18-19 belong to no segment
    out, arg = segment_arg_reduce(src, ptr=ptr, reduce="max", dim=1)
    index = torch.repeat_interleave(torch.arange(4, device=device), ptr.diff())
    want, want_arg = reference(src[:, 2:18].transpose(0, 1), index, 4, "max")
    torch.testing.assert_close(out, want.transpose(0, 1).float())
    assert torch.equal(arg, torch.where(want_arg == 16, 20, want_arg + 2).transpose(0, 1))
    prod, _ = segment_arg_reduce(src, ptr=ptr, reduce="mul", dim=1)
    torch.testing.assert_close(prod[:, 2], src[:, 5:11].double().prod(1).float())
    assert torch.equal(prod[:, 1], torch.ones_like(prod[:, 1]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                                   torch.int32, torch.uint8])
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("num_features", [1, 5, 40])
@pytest.mark.parametrize("given", ["ptr", "index"])
def test_a_long_segment_ties_and_nan(device, dtype, reduce, num_features, given):
    """A segment longer than many threads' runs of rows (their keys meet in one output), short and
    empty ones, values rounded to force ties, a few NaN and infinities; given as a pointer (with rows outside
    every segment) or as a shuffled index (grouped through a permutation)."""
    gen = torch.Generator().manual_seed(7)
    lengths = torch.randint(0, 12, (60,), generator=gen)
    lengths[17], lengths[40] = 5000, 0
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]) + 3
    E = int(ptr[-1]) + 2
    src = torch.randn(E, num_features, generator=gen).mul(2).round()
    if dtype.is_floating_point:
        src[torch.rand(E, num_features, generator=gen) < 0.002] = float("nan")
        src[torch.rand(E, num_features, generator=gen) < 0.002] = float("inf")
        src[torch.rand(E, num_features, generator=gen) < 0.002] = float("-inf")
    elif dtype == torch.uint8:
        src = src.add(3).clamp(min=0)
    src = src.to(device=device, dtype=dtype)
    index = torch.repeat_interleave(torch.arange(60), lengths)
    if given == "ptr":
        out, arg = segment_arg_reduce(src, ptr=ptr.to(device), reduce=reduce)
        want, want_arg = reference(src[3:E - 2], index.to(device), 60, reduce)
        want_arg = torch.where(want_arg == E - 5, E, want_arg + 3)
    else:
        shuffle = torch.randperm(E - 5, generator=gen)
        rows, index = src[3:E - 2][shuffle.to(device)], index[shuffle].to(device)
        out, arg = segment_arg_reduce(rows, index, dim_size=60, reduce=reduce)
        want, want_arg = reference(rows, index, 60, reduce)
    wide = out.double() if dtype.is_floating_point else out.long()
    torch.testing.assert_close(wide, want, equal_nan=True)
    assert torch.equal(arg, want_arg)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_long_short_and_empty_segments_over_a_batch(device, dtype, reduce):
    """Segments of 1 to 700 rows (longer than several threads' runs on CUDA: their keys meet in one
    output) and empty ones, over three leading slices, values rounded to force ties: each slice's
    values and rows match its own reference."""
    gen = torch.Generator().manual_seed(3)
    lengths = torch.tensor([128, 129, 0, 700, 5, 127, 0, 300, 1])
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(device)
    E, V = int(lengths.sum()), lengths.numel()
    src = torch.randn(3, E, 8, generator=gen).mul(3).round().to(device=device, dtype=dtype)  # ties
    out, arg = segment_arg_reduce(src, ptr=ptr, reduce=reduce, dim=1)
    index = torch.repeat_interleave(torch.arange(V), lengths).to(device)
    for b in range(3):
        want, want_arg = reference(src[b], index, V, reduce)
        torch.testing.assert_close(out[b].double(), want)
        assert torch.equal(arg[b], want_arg)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_propagates_and_its_row_is_the_arg(device):
    src = torch.tensor([[1.0], [float("nan")], [3.0], [2.0]], device=device)
    index = torch.tensor([0, 0, 0, 1], device=device)
    for reduce in ("max", "min"):
        out, arg = segment_arg_reduce(src, index, dim_size=2, reduce=reduce)
        assert torch.isnan(out[0, 0]) and arg[0, 0] == 1 and out[1, 0] == 2 and arg[1, 0] == 3


def test_bad_inputs_raise_clear_errors():
    src = torch.randn(6, 2)
    with pytest.raises(ValueError, match="reduce"):
        segment_arg_reduce(src, torch.zeros(6, dtype=torch.long), dim_size=1, reduce="sum")
    with pytest.raises(ValueError, match="exactly one"):
        segment_arg_reduce(src)
    with pytest.raises(TypeError, match="real values"):
        segment_arg_reduce(torch.zeros(6, dtype=torch.bool), torch.zeros(6, dtype=torch.long), dim_size=1)
    with pytest.raises(IndexError, match="outside"):
        segment_arg_reduce(src, torch.tensor([0, 1, 2, 3, 4, 9]), dim_size=5)
    with pytest.raises(ValueError, match=r"non-decreasing within \[0, 6\]"):
        segment_arg_reduce(src, ptr=torch.tensor([0, 7]))
    with pytest.raises(ValueError, match=r"non-decreasing within \[0, 6\]"):
        segment_arg_reduce(src, ptr=torch.tensor([0, 4, 2]))
    with pytest.raises(RuntimeError, match="no gradient"):
        segment_arg_reduce(src.requires_grad_(), ptr=torch.tensor([0, 6]))


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_without_breaks(device):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    src = torch.randn(50, 3, device=device)
    index = torch.randint(0, 9, (50,), device=device)
    fn = torch.compile(lambda s, i: segment_arg_reduce(s, i, dim_size=10, reduce="min"), fullgraph=True)
    out, arg = fn(src, index)
    want, want_arg = reference(src, index, 10, "min")
    torch.testing.assert_close(out, want.float())
    assert torch.equal(arg, want_arg)
    assert not torch._dynamo.utils.counters["graph_break"]
