"""pyg_fast::index_range_flags: the index range check behind every index an op validates, against
torch's comparisons; with the sddmm wrapper's two checks, one op call and one report."""
import pytest
import torch

import pyg_fast
from pyg_fast.ops import _deferred

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference(indices, sizes):
    return torch.tensor([int(bool(((i < 0) | (i >= s)).any())) for i, s in zip(indices, sizes)], dtype=torch.long)


@pytest.mark.parametrize("device", DEVICES)
def test_flags_match_comparisons(device):
    n = 300_000  # more values than the CUDA grid's threads: the grid-stride loop runs
    good = torch.randint(0, 1000, (n,), device=device)
    high, low, last = good.clone(), good.clone(), good.clone()
    high[n // 2] = 1000
    low[17] = -1
    last[-1] = 2 ** 40
    cases = [
        ([good], [1000]),
        ([high], [1000]),
        ([low], [1000]),
        ([good, high, low, last], [1000, 1000, 1000, 1000]),
        ([good, good], [1000, 999]),  # a size below the largest value
        ([good[:0], good], [0, 1000]),  # an empty index never raises, even against size 0
        ([good[:5]], [0]),
        ([good] * 8, [1000] * 7 + [10]),
    ]
    for indices, sizes in cases:
        flags = torch.ops.pyg_fast.index_range_flags(indices, sizes)
        assert flags.dtype == torch.long and flags.device.type == device
        torch.testing.assert_close(flags.cpu(), reference([i.cpu() for i in indices], sizes))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise(device):
    index = torch.arange(10, device=device)
    op = torch.ops.pyg_fast.index_range_flags
    with pytest.raises(ValueError, match="1 to 8 indices"):
        op([index] * 9, [10] * 9)
    with pytest.raises(ValueError, match="2 indices but 1 sizes"):
        op([index, index], [10])
    with pytest.raises(ValueError, match="negative size"):
        op([index], [-1])
    with pytest.raises(TypeError, match="int64"):
        op([index.int()], [10])
    with pytest.raises(ValueError, match="contiguous"):
        op([torch.arange(20, device=device)[::2]], [10])


def test_sddmm_checks_both_indices_in_one_report(monkeypatch):
    reports = []
    original = _deferred.report
    monkeypatch.setattr(_deferred, "report", lambda flags, messages: reports.append(len(_deferred.worded(messages))) or
                        original(flags, messages))
    a, b = torch.randn(6, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    a_index, b_index = torch.tensor([0, 5, 2]), torch.tensor([4, 0, 1])
    out = pyg_fast.sddmm(a, b, a_index, b_index)
    torch.testing.assert_close(out, (a[a_index] * b[b_index]).sum(-1))
    assert reports == [2]
    pyg_fast.sddmm(a, b, a_index, b_index)  # both checked already: no report
    assert reports == [2]
    with pytest.raises(IndexError, match="'b_index' holds values outside \\[0, 5\\)"):
        pyg_fast.sddmm(a, b, a_index, torch.tensor([4, 5, 1]))
