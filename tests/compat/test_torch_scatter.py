import pytest
import torch

from pyg_fast.compat import torch_scatter as compat
from pyg_fast.testing import DEVICES, assert_close, scatter_reference

REDUCES = ["sum", "mean", "max", "min"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_against_float64(device, reduce):
    index = torch.randint(0, 12, (80,), device=device).sort().values
    src = torch.randn(80, 6, device=device)
    ref = scatter_reference(src, index, 15, reduce)
    assert_close(compat.segment_coo(src, index, dim_size=15, reduce=reduce), ref, torch.float32)
    ptr = torch._convert_indices_from_coo_to_csr(index, 15)
    assert_close(compat.segment_csr(src, ptr, reduce=reduce), ref, torch.float32)
    # scatter's default dim is -1 as in torch_scatter
    assert_close(compat.scatter(src.t(), index, dim_size=15, reduce=reduce), ref.t(), torch.float32)
    perm = torch.randperm(80, device=device)
    assert_close(compat.scatter(src[perm], index[perm], dim=0, dim_size=15, reduce=reduce), ref, torch.float32)


def loop_reference(src, index, dim_size, reduce, out=None):
    """torch_scatter's semantics along dim 0 with Python loops, in float64: an empty slot gives 0
    (1 for mul) and the argument len(src); ``out`` joins sum, mul, min and max, and mean divides
    out + sum by the count; the argument is the first row that beat the value so far."""
    E, F = src.shape
    values, args = [], []
    for i in range(dim_size):
        rows = [e for e in range(E) if int(index[e]) == i]
        column_values, column_args = [], []
        for f in range(F):
            start = None if out is None else float(out[i, f])
            vals = [float(src[e, f]) for e in rows]
            arg = E
            if reduce in ("sum", "mean"):
                v = (start or 0.0) + sum(vals)
                if reduce == "mean":
                    v /= max(len(vals), 1)
            elif reduce == "mul":
                v = 1.0 if start is None else start
                for x in vals:
                    v *= x
            else:
                best = start
                for e, x in zip(rows, vals):
                    if best is None or (x > best if reduce == "max" else x < best):
                        best, arg = x, e
                v = 0.0 if best is None else best
            column_values.append(v)
            column_args.append(arg)
        values.append(column_values)
        args.append(column_args)
    return torch.tensor(values, dtype=torch.float64), torch.tensor(args)


@pytest.mark.parametrize("reduce", ["sum", "mul", "mean", "min", "max"])
@pytest.mark.parametrize("with_out", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_semantics(reduce, with_out, dtype):
    index = torch.tensor([0, 2, 2, 0, 3, 2, 0])
    src = (torch.randn(7, 3) * 4).to(dtype)
    src[3] = src[0]  # a tie
    out = (torch.randn(5, 3) * 4).to(dtype) if with_out else None
    ref_values, ref_args = loop_reference(src, index, 5, reduce, out)
    got = getattr(compat, f"scatter_{reduce}")(src, index, 0, None if out is None else out.clone(), 5)
    values, args = got if reduce in ("min", "max") else (got, None)
    if dtype == torch.int64 and reduce == "mean":  # integer division rounds down
        start = out.double() if out is not None else 0
        ref_values = torch.div(start + _sums(src, index, 5), _counts(index, 5), rounding_mode="floor")
    torch.testing.assert_close(values.double(), ref_values, rtol=1e-5, atol=1e-5)
    if args is not None:
        assert args.tolist() == ref_args.tolist()


def _sums(src, index, size):
    return torch.zeros(size, src.size(1), dtype=torch.float64).index_add_(0, index, src.double())


def _counts(index, size):
    return torch.bincount(index, minlength=size).clamp(min=1).double().unsqueeze(1)


def test_broadcast_index_along_other_dimensions():
    """An index of several dimensions (a different index per batch) and a 1-D index along dim 1."""
    src = torch.randn(2, 6, 3)
    index = torch.tensor([[0, 1, 1, 2, 0, 0], [2, 2, 1, 0, 0, 1]])
    for reduce in ("sum", "mean", "max"):
        got = compat.scatter(src, index, dim=1, reduce=reduce)
        for b in range(2):
            assert_close(got[b], scatter_reference(src[b], index[b], 3, reduce), torch.float32)
    one = torch.tensor([0, 1, 1, 2, 0, 0])
    assert_close(compat.scatter(src, one, dim=1, reduce="mean"), scatter_reference(src, one, 3, "mean", dim=1),
                 torch.float32)


def test_max_gradient_goes_to_the_argument():
    src = torch.tensor([[1.0], [3.0], [3.0], [2.0]], requires_grad=True)
    values, args = compat.scatter_max(src, torch.tensor([0, 0, 0, 1]), dim=0)
    values.sum().backward()
    assert args.flatten().tolist() == [1, 3] and src.grad.flatten().tolist() == [0.0, 1.0, 0.0, 1.0]


def CSR_CALL(src, index, indptr, reduce):
    return compat.segment_csr(src, indptr, reduce=reduce)


@pytest.mark.parametrize("call", [
    lambda src, index, indptr, reduce: compat.scatter(src, index, dim=0, reduce=reduce),
    lambda src, index, indptr, reduce: compat.segment_coo(src, index, reduce=reduce), CSR_CALL])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_value_only_extremum_runs_the_kernels(call, reduce):
    """The value-only functions run pyg_fast's kernels, never torch's scatter_reduce: the segment
    kernel, and where a gradient needs the argument, the argument kernel (on the CPU, and for the
    CSR family, which reads its pointer as given) or, on CUDA, the argument pass after the segment
    kernel (the scatter and COO families). The values stay those of float64 torch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func.__name__)
            return func(*args, **(kwargs or {}))

    index = torch.tensor([0, 0, 1, 3, 3, 3])
    indptr = torch.tensor([0, 2, 3, 3, 6])
    src = torch.randn(6, 4)
    expected = scatter_reference(src, index, 4, reduce)
    for requires_grad in (False, True):
        leaf = src.clone().requires_grad_(requires_grad)
        with Ops() as ops:
            values = call(leaf, index, indptr, reduce)
        assert_close(values, expected, torch.float32)
        names = " ".join(ops.names)
        assert "scatter_reduce" not in names
        split = call is not CSR_CALL and src.is_cuda
        assert ("segment_arg_reduce" in names) == (requires_grad and not split)
        assert ("scatter_arg" in names) == (requires_grad and split)


def test_csr_family_overwrites_out_and_takes_an_empty_indptr():
    src, indptr = torch.ones(5, 2), torch.tensor([0, 2, 2, 5])
    out = torch.full((3, 2), 7.0)
    compat.segment_csr(src, indptr, out=out)
    assert out.tolist() == [[2.0, 2.0], [0.0, 0.0], [3.0, 3.0]]
    assert compat.segment_csr(torch.zeros(0, 2), torch.tensor([], dtype=torch.long)).shape == (0, 2)
    assert compat.gather_csr(torch.tensor([[1.0], [2.0], [3.0]]), indptr).flatten().tolist() == [1, 1, 3, 3, 3]


@pytest.mark.parametrize("device", DEVICES)
def test_logsumexp_infinities_and_gradient(device):
    """Slots of -inf alone and empty slots give 0 (torch_scatter's result), a -inf among finite
    values adds nothing; the gradient is the float64 softmax of each slot's values."""
    inf = float("inf")
    src = torch.tensor([[1.0, -inf], [-inf, -inf], [2.0, 0.5], [-inf, 3.0], [0.25, -1.0]], device=device)
    index = torch.tensor([0, 1, 0, 2, 2], device=device)  # slot 1 only -inf, slot 3 empty
    leaf = src.clone().requires_grad_()
    got = compat.scatter_logsumexp(leaf, index, dim=0, dim_size=4)
    wide = src.double()
    expected = torch.zeros(4, 2, dtype=torch.float64)
    for i in range(3):
        rows = wide[index == i].cpu()
        value = rows.logsumexp(0)
        expected[i] = torch.where(torch.isinf(value), torch.zeros_like(value), value)
    torch.testing.assert_close(got.double().cpu(), expected, rtol=1e-6, atol=1e-6)
    seed = torch.randn(4, 2, device=device)
    (got * seed).sum().backward()
    finite = torch.isfinite(src)
    weights = torch.where(finite, torch.exp(wide - got.double().detach()[index]), torch.zeros_like(wide))
    expected_grad = torch.where(finite, weights * seed.double()[index], torch.zeros_like(wide))
    expected_grad[index == 1] = 0.0  # a slot of -inf alone has no finite term to move
    torch.testing.assert_close(leaf.grad.double(), expected_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_composites_match_their_definitions(device):
    src = torch.randn(9, 2, device=device)
    index = torch.tensor([2, 0, 1, 0, 1, 2, 1, 2, 2], device=device)  # unsorted; empty slot 3 below
    for i in range(3):
        rows = src[index == i].double()
        assert_close(compat.scatter_std(src, index, dim=0)[i], rows.var(0, unbiased=True).sqrt(),
                     torch.float32, scale=100)
        assert_close(compat.scatter_logsumexp(src, index, dim=0)[i], rows.logsumexp(0), torch.float32)
        assert_close(compat.scatter_softmax(src, index, dim=0)[index == i], rows.softmax(0), torch.float32)
        assert_close(compat.scatter_log_softmax(src, index, dim=0)[index == i], rows.log_softmax(0), torch.float32)
    assert compat.scatter_logsumexp(src, index, dim=0, dim_size=4)[3].abs().sum() == 0
    leaf, seed = src.clone().requires_grad_(), torch.randn_like(src)
    (compat.scatter_softmax(leaf, index, dim=0) * seed).sum().backward()
    wide = src.double().requires_grad_()
    expected = torch.cat([wide[index == i].softmax(0) for i in range(3)])
    order = torch.cat([torch.nonzero(index == i).flatten() for i in range(3)])
    (expected * seed.double()[order]).sum().backward()
    assert_close(leaf.grad, wide.grad, torch.float32)


def test_composites_along_another_dimension_and_per_batch_indices():
    """The composites over a 1-D index along dim 1 (its rows selected) and over a different index
    per batch (gathered), against their float64 definitions segment by segment."""
    src = torch.randn(2, 7, 3)
    per_batch = torch.tensor([[0, 1, 1, 2, 0, 0, 2], [2, 2, 1, 0, 0, 1, 1]])
    for index in (per_batch, per_batch[0]):
        for b in range(2):
            idx = index[b] if index.dim() == 2 else index
            for i in range(3):
                rows = src[b][idx == i].double()
                assert_close(compat.scatter_std(src, index, dim=1)[b, i], rows.var(0, unbiased=True).sqrt(),
                             torch.float32, scale=100)
                assert_close(compat.scatter_logsumexp(src, index, dim=1)[b, i], rows.logsumexp(0), torch.float32)
                assert_close(compat.scatter_softmax(src, index, dim=1)[b][idx == i], rows.softmax(0), torch.float32)
                assert_close(compat.scatter_log_softmax(src, index, dim=1)[b][idx == i], rows.log_softmax(0),
                             torch.float32)


def test_every_name_scripts():
    for name in compat.__all__:
        torch.jit.script(getattr(compat, name))
    scripted = torch.jit.script(compat.scatter_max)
    src, index = torch.randn(6, 2), torch.tensor([0, 1, 0, 1, 2, 2])
    assert all(torch.equal(a, b) for a, b in zip(scripted(src, index, 0), compat.scatter_max(src, index, 0)))


def test_same_as_torch_scatter_when_installed():
    torch_scatter = pytest.importorskip("torch_scatter")
    index = torch.randint(0, 9, (60,)).sort().values
    src = torch.randn(60, 4)
    for reduce in REDUCES:
        assert_close(compat.segment_coo(src, index, dim_size=9, reduce=reduce),
                     torch_scatter.segment_coo(src, index, dim_size=9, reduce=reduce), torch.float32)
        assert_close(compat.scatter(src, index, dim=0, dim_size=9, reduce=reduce),
                     torch_scatter.scatter(src, index, dim=0, dim_size=9, reduce=reduce), torch.float32)


def test_use_as_torch_scatter_reaches_imports_and_pyg(monkeypatch):
    """(monkeypatch puts every name it touched back afterwards)"""
    import sys

    import torch_geometric.typing
    import torch_geometric.utils._scatter as pyg_scatter
    import torch_geometric.utils._segment as pyg_segment
    from torch_geometric.utils import scatter as pyg_scatter_fn

    import pyg_fast.compat
    monkeypatch.setitem(sys.modules, "torch_scatter", None)  # removed again afterwards if it was absent
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SCATTER", False)
    for module in (torch_geometric.typing, pyg_scatter, pyg_segment):
        monkeypatch.setattr(module, "torch_scatter", None, raising=False)
    pyg_fast.compat.use_as_torch_scatter()
    import torch_scatter
    assert torch_scatter is compat and pyg_scatter.torch_scatter is compat
    src, index = torch.randn(6, 3, requires_grad=True), torch.tensor([0, 1, 0, 1, 2, 2])
    assert_close(pyg_scatter_fn(src, index, 0, 3, "max"), scatter_reference(src, index, 3, "max"), torch.float32)
