import pytest
import torch

from pyg_fast.testing import DEVICES


def first_rows(src, index, out):
    """float64 torch: per (b, v, f) the first row j with index[j] == v holding out[b, v, f]."""
    B, E, F = src.shape
    V = out.size(1)
    wide, best = src.double(), out.double()
    arg = torch.full((B, V, F), E, dtype=torch.long, device=src.device)
    ok = (index >= 0) & (index < V)
    j = torch.arange(E, device=src.device)[ok]
    v = index[ok]
    at = best[:, v]
    hit = (wide[:, ok] == at) | (wide[:, ok].isnan() & at.isnan())
    rows = torch.where(hit, j.view(1, -1, 1), E)
    return arg.scatter_reduce_(1, v.view(1, -1, 1).expand_as(rows), rows, "amin")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("F, E", [(1, 500), (16, 500), (33, 500), (40, 4000)])  # the last: CPU threads own segments
def test_first_row_holding_each_extremum(device, dtype, F, E):
    gen = torch.Generator().manual_seed(F)
    B, V = 2, 30
    src = torch.randint(-3, 4, (B, E, F), generator=gen).to(dtype)  # many ties
    src[0, 7, 0] = float("nan")
    index = torch.randint(-2, V + 2, (E,), generator=gen)  # rows outside [0, V) are skipped
    index[7] = 3  # the NaN's row lies in a segment
    ok = (index >= 0) & (index < V)
    index_ok = torch.where(ok, index, 0)
    ext = torch.full((B, V, F), float("-inf"), dtype=torch.float64).scatter_reduce_(
        1, index_ok.view(1, -1, 1).expand(B, E, F), torch.where(ok.view(1, -1, 1), src.double(), float("-inf")),
        "amax").to(dtype)  # NaN propagates
    src, index, ext = src.to(device), index.to(device), ext.to(device)
    arg = torch.ops.pyg_fast.scatter_arg(src, index, ext)
    assert torch.equal(arg, first_rows(src, index, ext))
    assert arg[0, 3, 0] == 7  # the NaN is its segment's extremum


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise(device):
    src, index, out = torch.randn(1, 4, 2, device=device), torch.zeros(4, dtype=torch.long, device=device), \
        torch.zeros(1, 3, 2, device=device)
    with pytest.raises(ValueError, match="'index' has 3 entries"):
        torch.ops.pyg_fast.scatter_arg(src, index[:3], out)
    with pytest.raises(TypeError, match="one dtype"):
        torch.ops.pyg_fast.scatter_arg(src, index, out.double())
    with pytest.raises(ValueError, match=r"\[B, E, F\]"):
        torch.ops.pyg_fast.scatter_arg(src[0], index, out)
