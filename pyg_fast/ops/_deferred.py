"""Checks and small values computed on the device and read by the host without waiting for it.

A check is a few integer flags on the data's device. On the CPU a raised flag raises at once. On
CUDA the op that checks raises its flags in a slot of a pinned host ring mapped into the device's
address space (``flag_slot``; csrc/cuda/flag_ring.cuh), where the host reads them with no copy
and no event a check, and the first pyg_fast call that finds a flag there raises (``poll``;
:func:`check_errors` waits for every pending check). A recorded call (torch.compile) raises its
flags in a slot kept for its call site instead (``at_site``). Flags computed by torch's ops instead are
copied into pinned memory behind the kernels (``report``). ``config.validate = "sync"`` waits at
the call instead. ``HostValue`` reads a small integer tensor by such a copy, for decisions that
can wait until the value is there (the schedule of a reused graph).
"""
import ctypes
import threading
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple, Type, Union

import torch
from torch import Tensor

from pyg_fast.config import config

Message = Tuple[Type[Exception], str]
# A check's messages, or a function that words them when a flag is raised (wording a fresh graph's
# two range messages took 1 us a call, CPU host: the ring hands out a slot for 5)
Messages = Union[Sequence[Message], Callable[[], Sequence[Message]]]

_SLOT = 8  # flags or values per slot of a pinned ring
_SLOTS = 512


class _Ring:
    """One CUDA device's slots of pinned host memory, with the event that marks each slot's copy
    (made once: a new torch.cuda.Event and a 2-d index of the ring cost more than the copy). Per
    device: an event records on one device's streams only, so one ring for every GPU of a process
    failed at the first call on a second GPU."""
    __slots__ = ("device", "rows", "events", "free")

    def __init__(self, device: torch.device):
        with torch.cuda.device(device):
            ring = torch.zeros(_SLOTS, _SLOT, dtype=torch.long, pin_memory=True)
        self.device = device
        self.rows: List[Tensor] = list(ring.unbind(0))
        self.events = [torch.cuda.Event() for _ in range(_SLOTS)]
        self.free: List[int] = list(range(_SLOTS))


_rings: Dict[torch.device, _Ring] = {}
# Slots whose copy may not have landed yet, oldest first: (ring, slot, owner); owner is a _Check
# (raises when a flag is set) or a HostValue (keeps the values).
_in_flight: Deque = deque()
# Threads share the rings (torch.nn.DataParallel runs one replica a GPU in threads of one process).
_lock = threading.RLock()

LATE = ("(reported once the check reached the host: on CUDA index checks run behind the kernels "
        "without a host synchronisation, so the call that passed it, or a later one, raises, and that "
        "call's output skipped the invalid entries; set pyg_fast.config.validate = 'sync' to raise "
        "before the kernels run)")


class _FlagRing:
    """The pinned ring the CUDA checks raise their flags in (``pyg_fast::flag_ring``), in slots of
    ``stride`` bytes handed out in order. A slot may be handed out again once the kernels that were
    given it have run: every ``_FLAG_BLOCK`` checks (or ``_FLAG_BLOCK`` scans of a block that no
    further check fills), an event on the current stream of each device that used the block marks
    that (a kernel still queued on another stream when its slot comes round again, 4096 checks
    later, is not waited for)."""
    __slots__ = ("address", "slots", "stride", "issued", "pending", "devices", "closed", "open_scans")

    def __init__(self, address: int, slots: int, values: int):
        self.address, self.slots, self.stride = address, slots, values * 8
        self.issued = 0  # checks handed a slot so far; check n has slot n % slots
        self.pending: Deque[Tuple[int, Optional[Messages]]] = deque()  # (n, messages; None once raised)
        self.devices: Set[int] = set()  # devices of the block being handed out
        self.closed: Deque[Tuple[int, List]] = deque()  # (checks before the block's end, its events)
        self.open_scans = 0  # scans that read checks of the block being handed out

    def flags(self, first: int, count: int) -> bytes:
        """The flags of checks first .. first + count - 1, as bytes."""
        start = first % self.slots
        head = min(count, self.slots - start)
        data = ctypes.string_at(self.address + start * self.stride, head * self.stride)
        if head < count:
            data += ctypes.string_at(self.address, (count - head) * self.stride)
        return data


# Checks a ring event covers: an event is recorded once a block, not once a check (its record was
# part of the 60-110 us of host time a copied report cost a call, H100 host).
_FLAG_BLOCK = 64
_flag_ring: Optional[_FlagRing] = None

# Whether a call was recorded with ``at_site``; then the sites' flags: (address of the number of
# sites in use, address of the first site's slot, bytes a slot), () in a build without CUDA.
_recorded = False
_sites: Optional[Tuple[int, ...]] = None
AT_SITE, AT_SITE_SYNC = -3, -4  # kAtSite, kAtSiteSync in csrc/common/flag_site.h


def at_site() -> int:
    """The ``flag_slot`` of a recorded call (torch.compile, torch.jit.trace): on CUDA its kernel
    raises the flags in the ring slot kept for its call site, which the next such call,
    :func:`poll` and :func:`check_errors` read (no host code runs beside a compiled call to hand
    it a slot); with ``config.validate == "sync"`` it waits and raises at once, as the CPU
    always does. Decided when the call is recorded."""
    global _recorded
    _recorded = True  # a store only: a read would guard the compiled graph on it
    return AT_SITE_SYNC if config.validate == "sync" else AT_SITE


def _poll_sites() -> None:
    """Raises for a recorded call's raised flags (``at_site``)."""
    global _sites
    if _sites is None:
        if not torch.cuda.is_initialized():  # no CUDA kernel ran: nothing to read, nothing to set up
            return
        if not hasattr(torch.ops.pyg_fast, "flag_ring"):
            _sites = ()
        else:
            address, slots, values, count = torch.ops.pyg_fast.flag_ring()
            _sites = (count, address + slots * values * 8, values * 8)
    if _sites:
        count, first, stride = _sites
        data = ctypes.string_at(first, ctypes.c_int64.from_address(count).value * stride)
        if data.count(0) != len(data):
            torch.ops.pyg_fast.raise_site_flags()


def flag_slot(messages: Messages, device: torch.device) -> int:
    """The ``flag_slot`` of a check on ``device`` whose flags ``messages`` name: a slot of the ring
    on CUDA, -1 where the op should return its flags for :func:`report` (the CPU, ``validate ==
    "sync"``, a CUDA graph capture). The ring is read by :func:`poll`, which the op's launch
    calls, not here as well."""
    global _flag_ring
    if device.type != "cuda" or config.validate == "sync" or _capturing():
        return -1
    with _lock:
        ring = _flag_ring
        if ring is None:
            if not hasattr(torch.ops.pyg_fast, "flag_ring"):  # a build without CUDA: its ops say so themselves
                return -1
            ring = _flag_ring = _FlagRing(*torch.ops.pyg_fast.flag_ring()[:3])
        n = ring.issued
        if ring.pending and ring.pending[0][0] <= n - ring.slots:  # the slot's last kernels may not have run
            for _, events in ring.closed:
                for event in events:
                    event.synchronize()
            _scan_flags(ring)
        ctypes.memset(ring.address + n % ring.slots * ring.stride, 0, ring.stride)
        ring.pending.append((n, messages))
        ring.devices.add(device.index if device.index is not None else torch.cuda.current_device())
        ring.issued = n + 1
        if ring.issued % _FLAG_BLOCK == 0:
            _close_block(ring)
        return n % ring.slots


def _close_block(ring: _FlagRing) -> List:
    """Ends the block being handed out: an event on the current stream of each device it used
    marks when its kernels have run. Returns those events."""
    events = []
    for index in ring.devices:
        events.append(torch.cuda.Event())
        events[-1].record(torch.cuda.current_stream(index))
    ring.closed.append((ring.issued, events))
    ring.devices = set()
    ring.open_scans = 0
    return events


def _scan_flags(ring: _FlagRing) -> None:
    """Retires the pending checks whose kernels have run, and raises for the first raised flag
    among the pending ones (which may still run: a raised flag is final)."""
    while ring.closed and all(event.query() for event in ring.closed[0][1]):
        end = ring.closed.popleft()[0]
        _raise_flags(ring, end)
        while ring.pending and ring.pending[0][0] < end:
            ring.pending.popleft()
    if ring.pending:
        # The open block is closed after as many scans as a block holds checks, full or not: where
        # no further check fills it (a graph checked in its first steps, then reused), every launch
        # read its checks again (24 ring reads a GAT step on cora, 0.5 ms of an 8 ms profiled
        # step, H200 host).
        if ring.devices:
            ring.open_scans += 1
            if ring.open_scans >= _FLAG_BLOCK:
                _close_block(ring)
        _raise_flags(ring, ring.issued)


def _raise_flags(ring: _FlagRing, end: int) -> None:
    """Raises for the first raised flag of the pending checks before ``end`` (each once)."""
    if not ring.pending:
        return
    first = ring.pending[0][0]
    count = min(end, ring.issued) - first
    if count <= 0:
        return
    data = ring.flags(first, count)
    if data.count(0) == len(data):
        return
    for n, messages in ring.pending:
        if n >= first + count:
            break
        values = data[(n - first) * ring.stride:(n - first + 1) * ring.stride]
        if messages is None or values.count(0) == len(values):
            continue
        flags = [int.from_bytes(values[k:k + 8], "little") for k in range(0, len(values), 8)]
        failure = next(((kind, text) for (kind, text), flag in zip(worded(messages), flags) if flag), None)
        if failure is not None:
            ring.pending[n - first] = (n, None)
            kind, text = failure
            raise kind(f"{text} {LATE}")


def worded(messages: Messages) -> Sequence[Message]:
    """``messages`` worded (see ``Messages``)."""
    return messages() if callable(messages) else messages


def checked(call: Callable[[int], object], messages: Messages, device: torch.device,
            first: Optional[Callable[[], bool]] = None):
    """``call(flag_slot)`` of an op that checks indices and returns its flags last (or only), with
    ``messages`` raised for them: from the flag ring on CUDA, else through :func:`report`, there
    only where ``first()`` says so if given (flags read once per index: each read of CUDA flags
    waits for the device) or on the CPU (reading them there costs less than asking ``first()``)."""
    slot = flag_slot(messages, device)
    out = call(slot)
    if slot < 0 and (first is None or device.type == "cpu" or first()):
        report(out[-1] if isinstance(out, (tuple, list)) else out, messages)
    return out


class _Check:
    __slots__ = ("messages",)

    def __init__(self, messages: Messages):
        self.messages = messages


def _slot(values: Tensor, owner) -> None:
    """Copies ``values`` (at most _SLOT int64 on a CUDA device) into a free slot of that device's
    pinned ring behind the device's current stream, without waiting."""
    with _lock:  # two threads' first calls on one GPU make one ring
        ring = _rings.get(values.device)
        if ring is None:
            ring = _rings[values.device] = _Ring(values.device)
        while not ring.free:  # every slot in flight: wait for the oldest (thousands of unlanded checks)
            oldest = next(entry for entry in _in_flight if entry[0] is ring)
            oldest[0].events[oldest[1]].synchronize()
            poll()
        slot = ring.free.pop()
        ring.rows[slot].narrow(0, 0, values.numel()).copy_(values, non_blocking=True)
        ring.events[slot].record(torch.cuda.current_stream(values.device))
        _in_flight.append((ring, slot, owner))


def _capturing() -> bool:
    """Whether a CUDA graph is being captured: events cannot be queried then (the kernels stay
    in bounds; checks and statistics resume after the capture)."""
    # is_initialized, not is_available: the latter reads an environment variable on every call
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def poll() -> None:
    """Raises for the first failed check that has reached the host; retires the checks and copies
    that have landed."""
    if _flag_ring is not None and _flag_ring.pending and not _capturing():
        with _lock:
            _scan_flags(_flag_ring)
    if _recorded:
        _poll_sites()
    if not _in_flight or _capturing():
        return
    failure = None
    with _lock:
        while _in_flight and _in_flight[0][0].events[_in_flight[0][1]].query():
            ring, slot, owner = _in_flight.popleft()
            if isinstance(owner, _Check):
                if failure is None:
                    flags = ring.rows[slot].tolist()  # host memory: no synchronisation
                    failure = next((m for m, f in zip(worded(owner.messages), flags) if f), None)
                ring.free.append(slot)
            else:
                owner._landed(ring, slot)
    if failure is not None:
        kind, text = failure
        raise kind(f"{text} {LATE}")


def check_errors() -> None:
    """Waits for every pending index check and raises for the first that failed."""
    if _recorded and torch.cuda.is_initialized():  # a recorded call's kernels, on any stream
        torch.cuda.synchronize()
    ring = _flag_ring
    if ring is not None and ring.pending and not _capturing():
        with _lock:
            # the block being handed out has no event yet
            events = [event for _, block in ring.closed for event in block] + _close_block(ring)
        for event in events:
            event.synchronize()
    if _in_flight and not _capturing():
        with _lock:
            last = {}  # each device's newest copy: its event marks every earlier one of that device
            for ring, slot, _ in _in_flight:
                last[ring] = slot
        for ring, slot in last.items():
            ring.events[slot].synchronize()
    poll()


def report(flags: Tensor, messages: Messages) -> None:
    """Raises ``messages[i]`` for the first nonzero entry ``i`` of the int64 ``flags`` (1-D, at
    most 8): at once on the CPU or with ``config.validate == "sync"``, else once the flags reach
    the host."""
    poll()
    if flags.device.type == "cuda":
        if _capturing():
            return
        if config.validate != "sync":
            _slot(flags, _Check(messages if callable(messages) else tuple(messages)))
            return
    values = flags.tolist()
    if any(values):
        kind, text = next(message for message, flag in zip(worded(messages), values) if flag)
        raise kind(text)


class HostValue:
    """Up to 8 integers of a CUDA tensor, copied to the host behind the kernels: ``get()`` gives
    them once the copy has landed (None before), never waiting."""
    __slots__ = ("values", "count", "__weakref__")

    def __init__(self, values: Tensor):
        self.values: Optional[List[int]] = None
        self.count = values.numel()
        _slot(values.long(), self)

    def _landed(self, ring: _Ring, slot: int) -> None:
        self.values = ring.rows[slot].tolist()[:self.count]
        ring.free.append(slot)

    def get(self) -> Optional[List[int]]:
        if self.values is None:
            poll()
        return self.values
