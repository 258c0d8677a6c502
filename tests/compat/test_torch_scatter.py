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


def test_out_accumulates_for_sum_and_limits_raise():
    index, src = torch.tensor([0, 0, 2]), torch.ones(3, 2)
    out = torch.full((3, 2), 10.0)
    compat.scatter(src, index, dim=0, out=out)
    assert out.tolist() == [[12.0, 12.0], [10.0, 10.0], [11.0, 11.0]]
    with pytest.raises(NotImplementedError, match="out"):
        compat.scatter(src, index, dim=0, out=out, reduce="max")
    with pytest.raises(NotImplementedError, match="1-D"):
        compat.segment_coo(src, index.view(1, 3))


def test_same_as_torch_scatter_when_installed():
    torch_scatter = pytest.importorskip("torch_scatter")
    index = torch.randint(0, 9, (60,)).sort().values
    src = torch.randn(60, 4)
    for reduce in REDUCES:
        assert_close(compat.segment_coo(src, index, dim_size=9, reduce=reduce),
                     torch_scatter.segment_coo(src, index, dim_size=9, reduce=reduce), torch.float32)
        assert_close(compat.scatter(src, index, dim=0, dim_size=9, reduce=reduce),
                     torch_scatter.scatter(src, index, dim=0, dim_size=9, reduce=reduce), torch.float32)
