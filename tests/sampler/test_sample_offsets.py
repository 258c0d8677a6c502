"""pyg_fast::sample_offsets, the sampler's draws without replacement: every node's slots against
the rule (all neighbours in order where the degree is at most k, else k distinct offsets),
subsets equally likely, the same draws for a seed on every device, and clear errors."""
import itertools
import math

import pytest
import torch

from pyg_fast.testing import DEVICES


def draws(deg, k, seed, device):
    return torch.ops.pyg_fast.sample_offsets(torch.as_tensor(deg, device=device), k,
                                             torch.tensor([seed], device=device)).cpu()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [0, 1, 3, 25])
def test_slots_follow_the_rule(device, k):
    deg = torch.cat([torch.tensor([0, 1, k, k + 1, 2 * k + 5, 10 ** 6]), torch.randint(0, 60, (500,))])
    out = draws(deg, k, 11, device)
    assert out.shape == (deg.numel(), k) and out.dtype == torch.long
    for d, row in zip(deg.tolist(), out.tolist()):
        if d <= k:
            assert row == list(range(d)) + [-1] * (k - d)
        else:
            assert len(set(row)) == k and all(0 <= v < d for v in row)


@pytest.mark.parametrize("device", DEVICES)
def test_every_subset_is_equally_likely(device):
    d, k, nodes = 6, 3, 40000
    out = draws(torch.full((nodes,), d), k, 5, device)
    subsets = list(itertools.combinations(range(d), k))
    counts = torch.zeros(len(subsets))
    index = {s: i for i, s in enumerate(subsets)}
    for row in out.sort(dim=1).values.tolist():
        counts[index[tuple(row)]] += 1
    expected = nodes / len(subsets)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 19 degrees of freedom: P(chi2 > 50) < 2e-4
    assert chi2 < 50, chi2
    # each offset is kept with probability k / d
    per_offset = torch.bincount(out.view(-1), minlength=d).double() / nodes
    assert torch.allclose(per_offset, torch.full((d,), k / d, dtype=torch.double),
                          atol=5 * math.sqrt(k / d * (1 - k / d) / nodes))


@pytest.mark.parametrize("device", DEVICES)
def test_a_seed_gives_the_same_draws_on_every_device(device):
    deg = torch.randint(0, 100, (2000,))
    first = draws(deg, 10, 123, device)
    assert torch.equal(first, draws(deg, 10, 123, device))
    assert torch.equal(first, draws(deg, 10, 123, "cpu"))
    assert not torch.equal(first, draws(deg, 10, 124, device))


def test_bad_arguments_raise_clearly():
    deg, seed = torch.tensor([3, 4]), torch.tensor([1])
    with pytest.raises(ValueError, match="k >= 0"):
        torch.ops.pyg_fast.sample_offsets(deg, -1, seed)
    with pytest.raises(TypeError, match="'deg' must be int64"):
        torch.ops.pyg_fast.sample_offsets(deg.int(), 2, seed)
    with pytest.raises(TypeError, match="'seed' must be int64"):
        torch.ops.pyg_fast.sample_offsets(deg, 2, seed.float())
    with pytest.raises(ValueError, match="'seed' must hold one value"):
        torch.ops.pyg_fast.sample_offsets(deg, 2, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="1-D 'deg'"):
        torch.ops.pyg_fast.sample_offsets(deg.view(2, 1), 2, seed)
