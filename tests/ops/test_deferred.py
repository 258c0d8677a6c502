"""Index checks without host synchronisation (pyg_fast.ops._deferred, pyg_fast.config.validate):
bad indices are still reported with the argument's name, on the CPU at the call, on CUDA at a
later call or at pyg_fast.check_errors() (at the call with validate="sync"), and a layer's forward
and backward on a new graph never synchronise on CUDA."""
import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn

import pyg_fast
import pyg_fast.nn
from tests.nn._helpers import random_graph

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def bad_calls(device):
    """Calls whose index holds a value out of range, with the message naming the argument."""
    x = torch.randn(10, 4, device=device)
    src = torch.tensor([0, 1, 2, 12], device=device)  # 12 >= 10 rows of x
    dst = torch.tensor([0, 0, 1, 2], device=device)
    return [
        (lambda: pyg_fast.segment_reduce(x[:4], dst + 5, dim_size=3), "'index' holds values outside \\[0, 3\\)"),
        (lambda: pyg_fast.index_segment_reduce(x, src, dst, 3), "'src_index' holds values outside \\[0, 10\\)"),
        (lambda: pyg_fast.sddmm(x, x, dst, src), "'b_index' holds values outside \\[0, 10\\)"),
        (lambda: pyg_fast.edge_softmax(x[:4], dst - 1, num_nodes=3), "'index' holds values outside"),
        (lambda: pyg_fast.segment_reduce(x[:4], ptr=torch.tensor([0, 1, 3], device=device)),
         "'ptr' must be non-decreasing from 0 to 4"),
    ]


@pytest.mark.parametrize("case", range(5))
def test_cpu_raises_at_the_call(case):
    call, message = bad_calls("cpu")[case]
    with pytest.raises((IndexError, ValueError), match=message):
        call()


@needs_cuda
@pytest.mark.parametrize("case", range(5))
def test_cuda_raises_later_without_waiting(case):
    call, message = bad_calls("cuda")[case]
    pyg_fast.check_errors()  # nothing pending from other tests
    with pytest.raises((IndexError, ValueError), match=message + ".*reported once the check reached the host"):
        call()  # the check is on its way to the host; a later step of the same call may find it there
        pyg_fast.check_errors()
    pyg_fast.check_errors()  # reported once


class _StubEvent:
    """torch.cuda.Event on the CPU, all records on one stream: a record lands when the test says
    so, or when a later one is waited for."""
    recorded = []

    def __init__(self):
        self.done = False

    def record(self, stream=None):
        self.done = False
        _StubEvent.recorded.append(self)

    def query(self):
        return self.done

    def synchronize(self):  # a stream's earlier records land first
        at = _StubEvent.recorded.index(self) + 1 if self in _StubEvent.recorded else 0
        for event in _StubEvent.recorded[:at]:
            event.done = True
        del _StubEvent.recorded[:at]
        self.done = True


def test_the_pinned_rings_on_stubbed_cuda_events(monkeypatch):
    """The rings' bookkeeping, run on the CPU with CUDA's events, streams and pinned memory stubbed:
    a failed check raises once its copy has landed, a host value arrives, a full ring waits for its
    oldest copy, and check_errors waits on every device's ring."""
    from collections import deque
    from contextlib import nullcontext
    from pyg_fast.ops import _deferred
    zeros = torch.zeros
    monkeypatch.setattr(torch.cuda, "Event", _StubEvent)
    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch, "zeros", lambda *a, pin_memory=False, **k: zeros(*a, **k))
    monkeypatch.setattr(_deferred, "_capturing", lambda: False)
    monkeypatch.setattr(_deferred, "_SLOTS", 4)
    monkeypatch.setattr(_deferred, "_rings", {})
    monkeypatch.setattr(_deferred, "_in_flight", deque())

    def land():
        for event in _StubEvent.recorded:
            event.done = True
        _StubEvent.recorded.clear()

    _deferred._slot(torch.tensor([0, 1]), _deferred._Check(((IndexError, "first"), (ValueError, "second"))))
    _deferred._slot(torch.tensor([0, 0]), _deferred._Check(((IndexError, "third"),)))
    _deferred.poll()  # nothing has landed: nothing raises
    assert len(_deferred._in_flight) == 2
    land()
    with pytest.raises(ValueError, match="^second .*reached the host"):
        _deferred.poll()
    ring = _deferred._rings[torch.device("cpu")]
    assert not _deferred._in_flight and sorted(ring.free) == [0, 1, 2, 3]
    value = _deferred.HostValue(torch.tensor([5, 6, 7]))
    assert value.get() is None
    land()
    assert value.get() == [5, 6, 7]
    for _ in range(5):  # four slots: the fifth waits for the oldest copy
        _deferred._slot(torch.tensor([0]), _deferred._Check(((IndexError, "x"),)))
    assert len(_deferred._in_flight) == 4
    other = _deferred._rings["another device"] = _deferred._Ring(torch.device("cpu"))
    slot = other.free.pop()
    other.rows[slot][0] = 1
    other.events[slot].record()
    _deferred._in_flight.append((other, slot, _deferred._Check(((IndexError, "on the other device"),))))
    with pytest.raises(IndexError, match="^on the other device"):
        _deferred.check_errors()
    assert not _deferred._in_flight and len(other.free) == 4 and len(ring.free) == 4


def _stub_flag_ring(monkeypatch, slots: int, block: int):
    """(buffer, ring): a flag ring of ``slots`` slots of 8 flags in a host buffer, closed into
    blocks of ``block`` checks, with CUDA's events and streams stubbed."""
    import ctypes
    from pyg_fast.ops import _deferred
    buffer = ctypes.create_string_buffer(slots * 8 * 8)
    ring = _deferred._FlagRing(ctypes.addressof(buffer), slots, 8)
    monkeypatch.setattr(_deferred, "_flag_ring", ring)
    monkeypatch.setattr(_deferred, "_FLAG_BLOCK", block)
    monkeypatch.setattr(torch.cuda, "Event", _StubEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    _StubEvent.recorded.clear()
    return buffer, ring


def test_the_flag_ring_on_stubbed_cuda_events(monkeypatch):
    """The flag ring's bookkeeping on the CPU, its memory a host buffer that the test writes as a
    kernel would and CUDA's events stubbed: a raised flag raises its message once, at the next
    poll, whether or not its block has run; a block's event retires its checks; a full ring waits
    for its oldest block; check_errors waits for the block still being handed out."""
    import ctypes
    from pyg_fast.ops import _deferred
    monkeypatch.setattr(_deferred, "_capturing", lambda: False)
    if not hasattr(torch.ops.pyg_fast, "flag_ring"):  # a build without CUDA has no ring to hand out
        monkeypatch.setattr(_deferred, "_flag_ring", None)
        assert _deferred.flag_slot([(IndexError, "a")], torch.device("cuda", 0)) == -1
    buffer, ring = _stub_flag_ring(monkeypatch, 4, 2)
    gpu = torch.device("cuda", 0)

    def raise_flag(slot, k):  # what a kernel that finds a bad index does
        ctypes.memmove(ctypes.addressof(buffer) + slot * 64 + 8 * k, (1).to_bytes(8, "little"), 8)

    assert _deferred.flag_slot([(IndexError, "a")], torch.device("cpu")) == -1
    first = _deferred.flag_slot([(IndexError, "a0"), (ValueError, "a1")], gpu)
    second = _deferred.flag_slot([(IndexError, "b0"), (ValueError, "b1")], gpu)
    assert (first, second) == (0, 1) and len(_StubEvent.recorded) == 1  # the first block closed
    _deferred.poll()  # no flag raised: nothing raises
    raise_flag(second, 1)
    with pytest.raises(ValueError, match="^b1 .*reached the host"):
        _deferred.poll()
    _deferred.poll()  # raised once
    assert len(ring.pending) == 2
    _StubEvent.recorded[0].done = True
    _deferred.poll()
    assert not ring.pending and not ring.closed  # the block ran: retired
    raise_flag(0, 0)  # a stale flag in a slot handed out again is cleared
    slots = [_deferred.flag_slot([(IndexError, f"c{n}")], gpu) for n in range(4)]
    assert slots == [2, 3, 0, 1]
    _deferred.poll()
    assert len(ring.pending) == 4 and len(ring.closed) == 2
    # a fifth check takes slot 2 again: the ring waits for the block that used it, then retires it
    assert _deferred.flag_slot([(IndexError, "d")], gpu) == 2
    assert [n for n, _ in ring.pending] == [6]
    raise_flag(2, 0)
    with pytest.raises(IndexError, match="^d "):
        _deferred.check_errors()
    _deferred.check_errors()
    assert not ring.pending
    for n in range(2):  # a block closed after its checks were retired by check_errors
        _deferred.flag_slot([(IndexError, "e")], gpu)
        _deferred.check_errors()
    _deferred.poll()
    assert not ring.pending and not ring.closed


def test_an_unfilled_flag_block_closes_after_as_many_scans(monkeypatch):
    """Checks that no later check follows into their block (a graph checked once, then reused) are
    read by the polls until _FLAG_BLOCK polls have passed; then the block closes, and once its
    event has run they retire and the polls stop reading the ring. A flag raised before that
    still raises."""
    import ctypes
    from pyg_fast.ops import _deferred
    monkeypatch.setattr(_deferred, "_capturing", lambda: False)
    buffer, ring = _stub_flag_ring(monkeypatch, 8, 4)
    reads = []
    flags = _deferred._FlagRing.flags
    monkeypatch.setattr(_deferred._FlagRing, "flags", lambda self, *a: reads.append(a) or flags(self, *a))
    gpu = torch.device("cuda", 0)
    slots = [_deferred.flag_slot([(IndexError, f"a{n}")], gpu) for n in range(2)]
    for _ in range(3):
        _deferred.poll()
    assert len(reads) == 3 and not _StubEvent.recorded  # open: read on every poll
    ctypes.memmove(ctypes.addressof(buffer) + slots[1] * 64, (1).to_bytes(8, "little"), 8)
    with pytest.raises(IndexError, match="^a1 "):
        _deferred.poll()  # the fourth scan: the block closes behind it
    assert len(_StubEvent.recorded) == 1 and len(ring.pending) == 2
    _StubEvent.recorded[0].done = True
    _deferred.poll()
    assert not ring.pending and not ring.closed
    count = len(reads)
    for _ in range(10):
        _deferred.poll()
    assert len(reads) == count  # retired: the polls no longer read the ring


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_checks_on_two_gpus_of_one_process():
    """Each GPU's checks reach the host, in turn and with another GPU current (one ring of
    events for every GPU failed at the first call on the second)."""
    pyg_fast.check_errors()
    for device, current in (("cuda:0", 0), ("cuda:1", 1), ("cuda:0", 0), ("cuda:1", 0)):
        call, message = bad_calls(device)[1]
        with torch.cuda.device(current), pytest.raises(IndexError, match=message):
            call()
            pyg_fast.check_errors()
    x = torch.randn(10, 4, device="cuda:1")
    src, dst = torch.tensor([0, 1, 9], device="cuda:1"), torch.tensor([0, 0, 1], device="cuda:1")
    with torch.cuda.device(0):
        out = pyg_fast.index_segment_reduce(x, src, dst, 2)
    pyg_fast.check_errors()
    torch.testing.assert_close(out, torch.stack([x[0] + x[1], x[9]]))


@needs_cuda
@pytest.mark.parametrize("case", range(5))
def test_cuda_sync_mode_raises_at_the_call(case):
    call, message = bad_calls("cuda")[case]
    pyg_fast.config.validate = "sync"
    try:
        with pytest.raises((IndexError, ValueError), match=message):
            call()
    finally:
        pyg_fast.config.validate = "async"


@needs_cuda
def test_cuda_report_reaches_the_next_call():
    x, dst = torch.randn(4, 4, device="cuda"), torch.tensor([0, 0, 1, 7], device="cuda")
    with pytest.raises(IndexError, match="'index' holds values outside"):
        # The call itself raises if the copy lands before its last step, else the next call.
        pyg_fast.segment_reduce(x, dst, dim_size=3)
        torch.cuda.synchronize()
        pyg_fast.segment_reduce(x, dst.clone().clamp_(max=2), dim_size=3)


@needs_cuda
def test_checks_of_a_new_index_copy_nothing_to_the_host():
    """On CUDA the checks of a new index are read where their kernels raised them (the flag ring):
    a call copies nothing from the device (a copied report cost 60-110 us of host time a call on
    an H100 host), and the outputs are right."""
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    rows, x = torch.randn(400, 8, device="cuda"), torch.randn(100, 8, device="cuda")
    src, dst = torch.randint(0, 100, (400,), device="cuda"), torch.randint(0, 100, (400,), device="cuda")
    weight = torch.rand(400, device="cuda")
    calls = [lambda: pyg_fast.segment_reduce(rows, dst.clone(), dim_size=100),
             lambda: pyg_fast.segment_reduce(rows, dst.clone(), dim_size=100, reduce="max"),
             lambda: pyg_fast.index_weight_segment_reduce(x, src, dst.clone(), weight, 100),
             lambda: pyg_fast.sddmm(x, x, src.clone(), dst),
             lambda: pyg_fast.edge_softmax(rows, dst.clone(), num_nodes=100)]
    for call in calls:  # first calls: the ring, the kernels' lazy initialisation
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        outs = [call() for call in calls]
        torch.cuda.synchronize()
    assert [e.name for e in prof.events() if "DtoH" in e.name] == []
    pyg_fast.check_errors()
    rows64, x64, w64 = rows.double(), x.double(), weight.double()
    index = dst.view(-1, 1).expand(-1, 8)
    refs = [torch.zeros(100, 8, dtype=torch.float64, device="cuda").index_add_(0, dst, rows64),
            torch.zeros(100, 8, dtype=torch.float64, device="cuda").scatter_reduce_(
                0, index, rows64, "amax", include_self=False),
            torch.zeros(100, 8, dtype=torch.float64, device="cuda").index_add_(0, dst, x64[src] * w64[:, None]),
            (x64[src] * x64[dst]).sum(-1),
            (rows64 - torch.zeros(100, 8, dtype=torch.float64, device="cuda").scatter_reduce_(
                0, index, rows64, "amax", include_self=False)[dst]).exp()]
    sums = torch.zeros(100, 8, dtype=torch.float64, device="cuda").index_add_(0, dst, refs[4])
    refs[4] = refs[4] / sums[dst]
    for out, ref in zip(outs, refs):
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_config_rejects_unknown_modes():
    with pytest.raises(ValueError, match="validate"):
        pyg_fast.config.validate = "never"


LAYERS = {"gcn": lambda: pyg_nn.GCNConv(16, 16), "gin": lambda: pyg_nn.GINConv(torch.nn.Linear(16, 16)),
          "sage": lambda: pyg_nn.SAGEConv(16, 16), "sage_max": lambda: pyg_nn.SAGEConv(16, 16, aggr="max"),
          "gat": lambda: pyg_nn.GATConv(16, 4, heads=4)}


@needs_cuda
@pytest.mark.parametrize("kind", list(LAYERS))
def test_layer_on_a_new_graph_never_synchronises(kind):
    ref = LAYERS[kind]().cuda()
    fast = pyg_fast.nn.convert(copy.deepcopy(ref))

    def step(num_nodes, num_edges):
        x = torch.randn(num_nodes, 16, device="cuda", requires_grad=True)
        edge_index = random_graph(num_nodes, num_edges, "cuda")
        out = fast(x, edge_index)
        out.square().sum().backward()
        return x, edge_index, out

    step(50, 400)  # warm-up: lazy initialisation, the pinned ring of the checks
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for num_nodes, num_edges in ((60, 500), (45, 300), (60, 500)):
            x, edge_index, out = step(num_nodes, num_edges)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out, ref(x.detach(), edge_index), rtol=1e-4, atol=1e-4)
    pyg_fast.check_errors()


@needs_cuda
@pytest.mark.parametrize("kind", list(LAYERS))
def test_a_reused_graph_leaves_no_check_pending(kind):
    """A graph's checks, made in its first steps, retire once their kernels have run even where
    no later check fills their block of the flag ring: the launches of the steps after them find
    nothing pending to read."""
    from pyg_fast.ops import _deferred
    pyg_fast.check_errors()
    issued = 0 if _deferred._flag_ring is None else _deferred._flag_ring.issued
    fast = pyg_fast.nn.convert(LAYERS[kind]().cuda())
    x = torch.randn(60, 16, device="cuda", requires_grad=True)
    edge_index = random_graph(60, 500, "cuda")
    for _ in range(2 * _deferred._FLAG_BLOCK):
        fast(x, edge_index).square().sum().backward()
    torch.cuda.synchronize()
    fast(x, edge_index)  # its launches poll: the ring's checks have run
    ring = _deferred._flag_ring
    assert ring is not None and ring.issued > issued  # the new graph was checked in the ring
    assert not ring.pending


def test_messages_name_the_arguments_passed():
    x = torch.randn(10, 4)
    src, dst = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 0, 1, 2])
    with pytest.raises(IndexError, match=r"'dst_index' holds values outside \[0, 2\) \(dim_size\)"):
        pyg_fast.index_segment_reduce(x, src, dst, 2)  # dim_size too small
    with pytest.raises(ValueError, match="'dst_index' has 6 entries but 'src_index' has 4"):
        pyg_fast.index_segment_reduce(x, src, torch.zeros(6, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing from 0 to 6"):
        pyg_fast.segment_reduce(torch.randn(6, 2), ptr=torch.tensor([0, 2, 4, 5]))  # the last row left out
    with pytest.raises(ValueError, match="'ptr' must be non-decreasing from 0 to 6"):
        pyg_fast.segment_matmul(torch.randn(6, 2), torch.tensor([0, 2, 5]), torch.randn(2, 2, 3))
