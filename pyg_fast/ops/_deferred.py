"""Checks and small values computed on the device and read by the host without waiting for it.

A check is a few integer flags on the data's device (``report``). On the CPU a raised flag
raises at once. On CUDA the flags are copied into pinned host memory behind the kernels that
follow, with no host synchronisation, and the first pyg_fast call that finds the copy landed
raises (``poll``; :func:`check_errors` waits for every pending check). ``config.validate =
"sync"`` waits at the call instead. ``HostValue`` reads a small integer tensor the same way,
for decisions that can wait until the value is there (the schedule of a reused graph).
"""
import threading
from collections import deque
from typing import Deque, Dict, List, Optional, Sequence, Tuple, Type

import torch
from torch import Tensor

from pyg_fast.config import config

Message = Tuple[Type[Exception], str]

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


class _Check:
    __slots__ = ("messages",)

    def __init__(self, messages: Sequence[Message]):
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
    """Retires every copy that has landed; raises for the first failed check among them."""
    if not _in_flight or _capturing():
        return
    failure = None
    with _lock:
        while _in_flight and _in_flight[0][0].events[_in_flight[0][1]].query():
            ring, slot, owner = _in_flight.popleft()
            if isinstance(owner, _Check):
                if failure is None:
                    flags = ring.rows[slot].tolist()  # host memory: no synchronisation
                    failure = next((m for m, f in zip(owner.messages, flags) if f), None)
                ring.free.append(slot)
            else:
                owner._landed(ring, slot)
    if failure is not None:
        kind, text = failure
        raise kind(f"{text} {LATE}")


def check_errors() -> None:
    """Waits for every pending index check and raises for the first that failed."""
    if _in_flight and not _capturing():
        with _lock:
            last = {}  # each device's newest copy: its event marks every earlier one of that device
            for ring, slot, _ in _in_flight:
                last[ring] = slot
        for ring, slot in last.items():
            ring.events[slot].synchronize()
    poll()


def report(flags: Tensor, messages: Sequence[Message]) -> None:
    """Raises ``messages[i]`` for the first nonzero entry ``i`` of the int64 ``flags`` (1-D, at
    most 8): at once on the CPU or with ``config.validate == "sync"``, else once the flags reach
    the host."""
    poll()
    if flags.device.type == "cuda":
        if _capturing():
            return
        if config.validate != "sync":
            _slot(flags, _Check(tuple(messages)))
            return
    for flag, (kind, text) in zip(flags.tolist(), messages):
        if flag:
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
