"""The per-graph preparation ops (torch.ops.pyg_fast.coo_to_csr, csr_to_coo, looped_csr) against
torch's stable sort and the definitions, on valid and invalid input: invalid values are grouped
last, flagged, and never move a pointer out of [0, E]."""
import pytest
import torch

import pyg_fast  # noqa: F401  (registers the ops)
from pyg_fast.ops import _layout
from pyg_fast.testing import DEVICES

op = torch.ops.pyg_fast


def reference_csr(index, V, src=None, src_bound=-1):
    """(ptr, perm, src[perm], flags) from torch's stable sort, invalid values keyed V."""
    key = torch.where((index >= 0) & (index < V), index, V)
    perm = torch.sort(key, stable=True).indices
    ptr = torch.searchsorted(key[perm], torch.arange(V + 1, device=index.device))
    flags = [bool((key == V).any()), False, False]
    src_sorted = torch.empty(0, dtype=torch.long, device=index.device)
    if src is not None:
        src_sorted = src[perm]
        flags[1] = src_bound >= 0 and bool(((src < 0) | (src >= src_bound)).any())
    return ptr, perm, src_sorted, flags


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("E,V", [(0, 0), (0, 5), (1, 1), (300, 7), (5000, 1000), (20000, 70000)])
@pytest.mark.parametrize("bad", [False, True])
def test_coo_to_csr_matches_a_stable_sort(device, E, V, bad):
    index = torch.randint(0, max(V, 1), (E,), device=device) if V > 0 else torch.zeros(E, dtype=torch.long,
                                                                                          device=device)
    src = torch.randint(0, 50, (E,), device=device)
    if bad and E > 0:
        index[torch.randperm(E, device=device)[: max(E // 10, 1)]] = torch.tensor([-3, V, V + 9], device=device)[
            torch.arange(max(E // 10, 1), device=device) % 3]
        src[E // 2] = 50
    ptr, perm, src_sorted, flags = op.coo_to_csr(index, V, False, src, 50)
    want = reference_csr(index, V, src, 50)
    assert torch.equal(ptr, want[0]) and torch.equal(perm, want[1]) and torch.equal(src_sorted, want[2])
    assert [bool(f) for f in flags.tolist()] == want[3]


def test_coo_to_csr_in_chunks_matches_a_stable_sort():
    """The CPU counts and places the rows in chunks, one per thread where the rows outnumber the
    counters: the order stays the stable sort's, invalid values go last and are flagged, and a
    descent at a chunk's first row is found."""
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        E, V = 300_000, 1000  # four chunks of 75 000 rows
        index = torch.randint(0, V, (E,))
        index[::997] = -1
        index[5::1009] = V
        src = torch.randint(0, 50, (E,))
        src[E // 3] = 50
        ptr, perm, src_sorted, flags = op.coo_to_csr(index, V, False, src, 50)
        want = reference_csr(index, V, src, 50)
        assert torch.equal(ptr, want[0]) and torch.equal(perm, want[1]) and torch.equal(src_sorted, want[2])
        assert [bool(f) for f in flags.tolist()] == want[3] == [True, True, False]
        ordered = torch.randint(0, V, (E,)).sort().values
        ptr, _, _, flags = op.coo_to_csr(ordered, V, True, None, -1)
        assert torch.equal(ptr, reference_csr(ordered, V)[0]) and flags.tolist() == [0, 0, 0]
        ordered[E // 4 - 1], ordered[E // 4] = V - 1, 0  # the one descent: the second chunk's first row
        assert op.coo_to_csr(ordered, V, True, None, -1)[3].tolist() == [0, 0, 1]
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("device", DEVICES)
def test_coo_to_csr_takes_a_sorted_index_as_it_is(device):
    index = torch.randint(0, 40, (3000,), device=device).sort().values
    src = torch.randint(0, 9, (3000,), device=device)
    ptr, perm, src_sorted, flags = op.coo_to_csr(index, 40, True, src, -1)
    want = reference_csr(index, 40)
    assert torch.equal(ptr, want[0]) and perm.numel() == 0 and torch.equal(src_sorted, src)
    assert flags.tolist() == [0, 0, 0]
    unsorted = index.flip(0)
    ptr, _, _, flags = op.coo_to_csr(unsorted, 40, True, None, -1)
    assert flags.tolist()[2] != 0 and flags.tolist()[:2] == [0, 0]
    assert int(ptr[0]) >= 0 and int(ptr[-1]) <= 3000 and bool((ptr.diff() >= 0).all())  # in bounds regardless
    over = index.clone()
    over[-5:] = 40
    ptr, _, _, flags = op.coo_to_csr(over, 40, True, None, -1)
    assert flags.tolist() == [1, 0, 0] and int(ptr[-1]) == 2995


@pytest.mark.parametrize("device", DEVICES)
def test_csr_to_coo_gives_every_row_its_segment(device):
    counts = torch.randint(0, 4, (500,), device=device)
    counts[::7] = 0
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    E = int(ptr[-1])
    want = torch.repeat_interleave(torch.arange(500, device=device), counts)
    assert torch.equal(op.csr_to_coo(ptr, E), want)
    tail = op.csr_to_coo(ptr, E + 6)  # rows past ptr[-1] (invalid ones grouped last): the last segment
    assert torch.equal(tail[:E], want) and bool((tail[E:] == 499).all())
    assert op.csr_to_coo(ptr, 0).numel() == 0
    with pytest.raises(ValueError, match="0 segments"):
        op.csr_to_coo(torch.zeros(1, dtype=torch.long, device=device), 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_loops", [0, 1, 60, 100])
def test_looped_csr_equals_grouping_the_edges_and_loops_again(device, num_loops):
    E, V = 900, 100
    dst = torch.randint(0, V, (E,), device=device)
    dst[:30] = V + 3  # invalid destinations: grouped last, and kept last
    src = torch.randint(0, V, (E,), device=device)
    ptr, perm, src_sorted, _ = op.coo_to_csr(dst, V, False, src, -1)
    got_src, got_ptr, got_perm = op.looped_csr(src_sorted, ptr, perm, num_loops)
    loops = torch.arange(num_loops, device=device)
    want = reference_csr(torch.cat([dst, loops]), V, torch.cat([src, loops]))
    assert torch.equal(got_ptr, want[0]) and torch.equal(got_perm, want[1]) and torch.equal(got_src, want[2])
    with pytest.raises(ValueError, match="num_loops"):
        op.looped_csr(src_sorted, ptr, perm, V + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise_clear_errors(device):
    index = torch.zeros(4, dtype=torch.long, device=device)
    with pytest.raises(TypeError, match="'index' must be int64"):
        op.coo_to_csr(index.int(), 3, False, None, -1)
    with pytest.raises(ValueError, match="'src' has 3 entries"):
        op.coo_to_csr(index, 3, False, index[:3], -1)
    with pytest.raises(ValueError, match="number of segments"):
        op.coo_to_csr(index, -1, False, None, -1)


def test_reused_index_found_sorted_is_read_directly(monkeypatch):
    """Where the device sorts an index (its values not readable on the host), a reused index that
    was sorted and in range loses its identity permutation once the probe's answer arrives, from
    its REUSED_FROM_USE-th use; an unsorted one keeps it. Reductions on every layout equal
    the float64 reference."""
    from pyg_fast.ops import _deferred, _kernels
    from pyg_fast.testing import scatter_reference

    class Landed:  # a HostValue whose copy has landed at once
        def __init__(self, values):
            self.values = values.tolist()

        def get(self):
            return self.values

    probes = []
    use_count = _layout.use_count
    monkeypatch.setattr(_layout, "readable", lambda tensor: False)  # as on CUDA
    monkeypatch.setattr(_deferred, "HostValue", Landed)
    monkeypatch.setattr(_layout, "use_count", lambda tensor, key: probes.append(key) or use_count(tensor, key))
    for index, found_sorted in ((torch.sort(torch.randint(0, 20, (200,))).values, True),
                                (torch.randint(0, 20, (200,)), False)):
        src = torch.randn(200, 8)
        expected = scatter_reference(src, index, 20, "sum")
        for use in range(1, _layout.REUSED_FROM_USE + 3):
            probes.clear()
            layout = _layout.coo_layout(index, 20)
            assert (layout.perm is None) == (found_sorted and use >= _layout.REUSED_FROM_USE)
            # once answered, the probe is not consulted again
            assert bool(probes) == (use <= _layout.REUSED_FROM_USE)
            torch.testing.assert_close(_kernels.reduce_rows(src.unsqueeze(0), layout, "sum")[0],
                                       expected.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("values,size,expected", [([0, 1, 4], 5, 1), ([0, 1, 5], 5, 0), ([-1, 0], 5, 0),
                                                  ([2, 1], 5, 0), ([3], 5, 1)])
def test_sorted_in_range(values, size, expected):
    assert _layout._sorted_in_range(torch.tensor(values), size).tolist() == [expected]


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_checked_indices_say_when_a_graph_was_seen(device):
    """The third value of ``kernel_checked_indices`` is True only where every index was checked by
    an earlier call: what lets sddmm keep int32 copies for a graph seen before and not for one
    used once (a new view of the same values counts as seen)."""
    rows = torch.zeros(10, 1, device=device)
    a, b = torch.randint(0, 10, (20,), device=device), torch.randint(0, 10, (20,), device=device)
    checks = lambda x, y: ((x, rows, 0, "a", "n"), (y, rows, 0, "b", "n"))  # noqa: E731
    assert _layout.kernel_checked_indices(*checks(a, b))[2] is False
    assert _layout.kernel_checked_indices(*checks(a, b))[2] is True
    assert _layout.kernel_checked_indices(*checks(a[:], b))[2] is True
    assert _layout.kernel_checked_indices(*checks(a, b.clone()))[2] is False
    pyg_fast.check_errors()
