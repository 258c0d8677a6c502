"""Checks and small values computed on the device and read by the host without waiting for it.

A check is a few integer flags on the data's device (``report``). On the CPU a raised flag
raises at once. On CUDA the flags are copied into pinned host memory behind the kernels that
follow, with no host synchronisation, and the first pyg_fast call that finds the copy landed
raises (``poll``; :func:`check_errors` waits for every pending check). ``config.validate =
"sync"`` waits at the call instead. ``HostValue`` reads a small integer tensor the same way,
for decisions that can wait until the value is there (the schedule of a reused graph).
"""
from collections import deque
from typing import Deque, List, Optional, Sequence, Tuple, Type

import torch
from torch import Tensor

from pyg_fast.config import config

Message = Tuple[Type[Exception], str]

_SLOT = 8  # flags or values per slot of the pinned ring
_SLOTS = 512
_ring: Optional[Tensor] = None  # [_SLOTS, _SLOT] int64 in pinned host memory
# Per slot: its row of the ring and the event that marks its copy, made once with the ring
# (a new torch.cuda.Event and a 2-d index of the ring cost more than the copy itself).
_rows: List[Tensor] = []
_events: List = []
# Slots whose copy may not have landed yet, oldest first: (slot, event, owner); owner is a
# _Check (raises when a flag is set) or a HostValue (keeps the values).
_in_flight: Deque = deque()
_free: List[int] = []

LATE = ("(reported once the check reached the host: on CUDA index checks run behind the kernels "
        "without a host synchronisation, so the call that passed it, or a later one, raises, and that "
        "call's output skipped the invalid entries; set pyg_fast.config.validate = 'sync' to raise "
        "before the kernels run)")


class _Check:
    __slots__ = ("messages",)

    def __init__(self, messages: Sequence[Message]):
        self.messages = messages


def _slot(values: Tensor, owner) -> int:
    """Copies ``values`` (at most _SLOT int64 on a CUDA device) into a free slot of the pinned
    ring behind the current stream, without waiting; returns the slot."""
    global _ring
    if _ring is None:
        _ring = torch.zeros(_SLOTS, _SLOT, dtype=torch.long, pin_memory=True)
        _rows.extend(_ring.unbind(0))
        _events.extend(torch.cuda.Event() for _ in range(_SLOTS))
        _free.extend(range(_SLOTS))
    while not _free:  # every slot in flight: wait for the oldest (thousands of unlanded checks)
        _in_flight[0][1].synchronize()
        poll()
    slot = _free.pop()
    _rows[slot].narrow(0, 0, values.numel()).copy_(values, non_blocking=True)
    event = _events[slot]
    event.record()
    _in_flight.append((slot, event, owner))
    return slot


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
    while _in_flight and _in_flight[0][1].query():
        slot, _, owner = _in_flight.popleft()
        if isinstance(owner, _Check):
            if failure is None:
                flags = _rows[slot].tolist()  # host memory: no synchronisation
                failure = next((m for m, f in zip(owner.messages, flags) if f), None)
            _free.append(slot)
        else:
            owner._landed(slot)
    if failure is not None:
        kind, text = failure
        raise kind(f"{text} {LATE}")


def check_errors() -> None:
    """Waits for every pending index check and raises for the first that failed."""
    if _in_flight and not _capturing():
        _in_flight[-1][1].synchronize()
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

    def _landed(self, slot: int) -> None:
        self.values = _rows[slot].tolist()[:self.count]
        _free.append(slot)

    def get(self) -> Optional[List[int]]:
        if self.values is None:
            poll()
        return self.values
