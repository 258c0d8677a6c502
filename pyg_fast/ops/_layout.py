"""Per-graph preprocessing shared by the ops: CSR pointers, sort permutations and
index validation.

Each result is computed once per index tensor and cached while that tensor is
alive and unchanged (keyed weakly on the tensor's storage owner, its view
geometry and its version counter), so a model that reuses one ``edge_index``
pays for validation (one host synchronisation) and sorting once, not per call.
Under ``torch.compile`` nothing is cached or validated (no host syncs are
allowed there); the layouts are recomputed inside the graph instead.
"""
from typing import Callable, Dict, NamedTuple, Optional, Tuple
import functools
import weakref

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from pyg_fast.ops._checks import check_index_tensor

# id(owner) -> (weak reference to owner, {slot: value}); the reference's callback drops the entry
# when the owner dies. Keyed by id rather than through torch's WeakTensorKeyDictionary, which
# builds a WeakIdRef object on every lookup (about 1 us of a 2 us lookup).
_CACHE: Dict[int, Tuple[weakref.ref, Dict]] = {}


def _compiling(*tensors: Tensor) -> bool:
    """True while tracing (torch.compile, including AOTAutograd's backward trace, where
    is_compiling() is False but the tensors are fake): data cannot be read then."""
    if torch.compiler.is_compiling():
        return True
    for t in tensors:  # fake tensors are Tensor subclasses: a plain Tensor skips the (slower) is_fake test
        if type(t) is not Tensor and is_fake(t):
            return True
    return False


def cached(tensor: Tensor, key: Tuple, compute: Callable[[], object]) -> object:
    """Returns ``compute()``, memoised on ``tensor`` (and any view of its storage owner)."""
    if _compiling(tensor) or torch.jit.is_scripting():
        return compute()
    return _cached(tensor, key, compute)


def _cached(tensor: Tensor, key: Tuple, compute: Callable[[], object]) -> object:
    owner = storage_owner(tensor)
    slot = (key, tensor.storage_offset(), tensor.shape, tensor.stride(), tensor._version)
    found = _CACHE.get(id(owner))
    if found is None or found[0]() is not owner:
        found = _CACHE[id(owner)] = (weakref.ref(owner, functools.partial(_drop, id(owner))), {})
    entries = found[1]
    value = entries.get(slot, _MISSING)
    if value is _MISSING:
        if len(entries) > 64:  # an owner mutated in place many times: drop old versions
            entries.clear()
        value = entries[slot] = compute()
    return value


_MISSING = object()


def storage_owner(tensor: Tensor) -> Tensor:
    """The tensor whose storage ``tensor`` views (itself if it is not a view)."""
    return tensor if tensor._base is None else tensor._base


def values_key(tensor: Tensor) -> Tuple:
    """Identifies ``tensor``'s values while its storage owner lives: the owner's id, the view
    geometry and the version (what ``cached`` files values under). Keep a weak reference to the
    owner beside it: an id is reused once its object is gone."""
    return id(storage_owner(tensor)), tensor.storage_offset(), tensor.shape, tensor.stride(), tensor._version


def plans(tensor: Optional[Tensor], src: Tensor) -> Optional[Dict]:
    """The plans of an op's calls with ``tensor`` as their index (a dict cached on it, keyed by the
    call's other arguments, see e.g. ``segment_reduce``), or None where nothing may be kept: either
    is not a tensor, or is being traced."""
    if not (isinstance(tensor, Tensor) and isinstance(src, Tensor)) or _compiling(tensor, src) or \
            torch.jit.is_scripting():
        return None
    return _cached(tensor, ("plans",), dict)


def keep(plans: Dict, key: Tuple, plan: object) -> None:
    """Files ``plan`` under ``key`` in a dict of :func:`plans`; a dict grown past 64 plans (calls
    with ever new shapes or source indices, of which some are gone) is emptied first."""
    if len(plans) >= 64:
        plans.clear()
    plans[key] = plan


def _drop(owner_id: int, ref: weakref.ref, cache: Dict = _CACHE) -> None:
    """Weak reference callback: forgets a dead owner's entries (unless its id was reused since)."""
    if cache.get(owner_id, (None,))[0] is ref:
        del cache[owner_id]


def as_long(index: Tensor) -> Tensor:
    """The index as contiguous int64, the type the kernels take (cached)."""
    if index.dtype == torch.long and index.is_contiguous():
        return index
    if index.dtype not in (torch.int32, torch.int64, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"pyg_fast: index tensors must be integer, got {index.dtype}")
    return cached(index, ("as_long",), lambda: index.long().contiguous())


class SegmentLayout(NamedTuple):
    """How E rows map onto ``dim_size`` segments.

    ``ptr`` [dim_size + 1] is the CSR pointer over the rows in sorted order;
    ``perm`` [E] lists the rows in that order, or is None when the index was
    already sorted; ``covers_all`` says whether ptr spans every row (0 to E);
    ``max_segment`` is the longest segment (None where unknown, under compile),
    which the schedule choice uses to detect skew.
    """
    ptr: Tensor
    perm: Optional[Tensor]
    covers_all: bool = True
    max_segment: Optional[int] = None


def _index_stats(index: Tensor) -> Tuple[int, int, bool]:
    """(min, max, is_sorted) with one host synchronisation."""
    if index.numel() == 0:
        return 0, -1, True
    unsorted = (index[1:] < index[:-1]).any() if index.numel() > 1 else index.new_zeros((), dtype=torch.bool)
    stats = torch.stack([index.min(), index.max(), unsorted.long()]).tolist()
    return stats[0], stats[1], not stats[2]


def check_index_range(index: Tensor, size: int, name: str) -> bool:
    """Raises IndexError unless every value lies in [0, size); returns whether sorted (cached).

    Under torch.compile nothing is checked (that would need a host sync) and False is returned.
    """
    if _compiling(index):
        return False

    def compute():
        lo, hi, is_sorted = _index_stats(index)
        if index.numel() > 0 and (lo < 0 or hi >= size):
            raise IndexError(f"pyg_fast: '{name}' holds values in [{lo}, {hi}], outside [0, {size}) "
                             f"(the size of the dimension it indexes)")
        return is_sorted
    return cached(index, ("range", size), compute)


def coo_layout(index: Tensor, dim_size: int, is_sorted: Optional[bool] = None) -> SegmentLayout:
    """CSR layout of a COO index; ``is_sorted=True`` skips the sortedness check."""
    index = as_long(index)

    def compute():
        if _compiling(index):
            known_sorted = bool(is_sorted)
        else:
            checked = check_index_range(index, dim_size, "index")
            known_sorted = checked if is_sorted is None else (is_sorted and checked)
            if is_sorted and not checked:
                raise ValueError("pyg_fast: 'index' was declared sorted but is not sorted")
        perm = None
        if not known_sorted:
            index_sorted, perm = torch.sort(index, stable=True)
        ptr = torch._convert_indices_from_coo_to_csr(index if perm is None else index_sorted, dim_size)
        return SegmentLayout(ptr, perm, True, _max_segment(ptr))

    return cached(index, ("coo_layout", dim_size, is_sorted), compute)


def _max_segment(ptr: Tensor) -> Optional[int]:
    if _compiling(ptr):
        return None
    return int(ptr.diff().max()) if ptr.numel() > 1 else 0


def ptr_layout(ptr: Tensor, num_rows: int, covers_all: bool = False) -> SegmentLayout:
    """Validates a CSR pointer over ``num_rows`` rows; the layout holds it as int64 (cached).

    ``covers_all`` demands ``ptr[0] == 0`` and ``ptr[-1] == num_rows``; otherwise
    the layout records whether that holds.
    """
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"pyg_fast: 'ptr' must be a non-empty 1-D tensor, got shape {tuple(ptr.shape)}")
    ptr = as_long(ptr)

    # The cache keeps (covers_all, max_segment), not the layout: a cached value holding its own key
    # tensor would keep that tensor (and the entry) alive forever.
    def compute():
        if _compiling(ptr):
            return covers_all, None
        if ptr.numel() > 1:
            lo, hi, is_sorted = _index_stats(ptr)
            if lo < 0 or hi > num_rows or not is_sorted or (covers_all and (lo != 0 or hi != num_rows)):
                span = f"from 0 to {num_rows}" if covers_all else f"within [0, {num_rows}]"
                raise ValueError(f"pyg_fast: 'ptr' must be non-decreasing {span} (the number of rows "
                                 f"it splits), got values in [{lo}, {hi}]{'' if is_sorted else ', not sorted'}")
            return lo == 0 and hi == num_rows, _max_segment(ptr)
        if covers_all and num_rows != 0:
            raise ValueError(f"pyg_fast: 'ptr' with one entry covers no rows but there are {num_rows}")
        return num_rows == 0, 0

    covers, max_segment = cached(ptr, ("ptr_layout", num_rows, covers_all), compute)
    return SegmentLayout(ptr, None, covers, max_segment)


def segments(index: Optional[Tensor], ptr: Optional[Tensor], num_rows: int, num_segments: Optional[int],
             device: torch.device, *, index_name: str = "index", size_name: str = "dim_size",
             covers_all: bool = False, is_sorted: Optional[bool] = None) -> Tuple[SegmentLayout, int]:
    """The layout and number of segments of the rows an op reduces, from a COO ``index`` (one
    entry per row, ideally sorted) or a CSR ``ptr`` (used if both are given), checked:
    ``num_segments`` (the op's ``size_name`` argument) defaults to ``index.max() + 1`` or to
    what ``ptr`` says, and must agree with ``ptr``. A ``torch_geometric.Index`` says whether it
    is sorted where ``is_sorted`` is None."""
    if ptr is not None:
        check_index_tensor(ptr, "ptr", None, device)
        if num_segments is not None and num_segments != ptr.numel() - 1:
            raise ValueError(f"pyg_fast: {size_name}={num_segments} does not match 'ptr' with {ptr.numel()} "
                             f"entries (expected {size_name}={ptr.numel() - 1})")
        return ptr_layout(ptr, num_rows, covers_all), ptr.numel() - 1
    if index is None:
        raise ValueError(f"pyg_fast: pass '{index_name}' or 'ptr'")
    check_index_tensor(index, index_name, num_rows, device)
    if num_segments is None:
        num_segments = int(index.max()) + 1 if index.numel() > 0 else 0
    if num_segments < 0:
        raise ValueError(f"pyg_fast: {size_name} must be non-negative, got {num_segments}")
    if is_sorted is None:
        is_sorted = getattr(index, "is_sorted", None)
    return coo_layout(index, num_segments, is_sorted), num_segments


def ptr_to_index(ptr: Tensor, num_rows: int) -> Tensor:
    """Row id of every element covered by ``ptr`` (cached); [num_rows]."""
    def compute():
        counts = ptr.diff()
        return torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), counts,
                                       output_size=num_rows)
    return cached(ptr, ("ptr_to_index", num_rows), compute)


class TransposedLayout(NamedTuple):
    """The edges of a gather (src_index -> dst rows given by a CSR ptr) regrouped by source.

    ``perm`` lists edges sorted by source, ``ptr`` [num_src + 1] points into that order,
    ``dst_index`` [E] is the destination of each edge in that order, ``max_segment`` the
    largest out-degree.
    """
    perm: Tensor
    ptr: Tensor
    dst_index: Tensor
    max_segment: Optional[int]


def cached_with(tensor: Tensor, other: Tensor, key: Tuple, compute: Callable[[], object]) -> object:
    """``compute()`` of two tensors, memoised on ``tensor`` for this ``other`` tensor (its identity
    and version). ``other`` is held weakly: a cached value must not keep it alive."""
    if _compiling(tensor, other) or torch.jit.is_scripting():  # dynamo cannot trace id() of a traced tensor
        return compute()

    def entry():
        return weakref.ref(other), compute()

    owner, value = cached(tensor, key + (id(other), other._version), entry)
    if owner() is not other:  # id() was reused by another tensor: recompute
        return compute()
    return value


def transposed_layout(src_index: Tensor, dst_ptr: Tensor, num_src: int) -> TransposedLayout:
    """Layout for the backward pass of a gather-reduce (cached on ``src_index``)."""
    def compute():
        dst_index = ptr_to_index(dst_ptr, src_index.numel())
        sorted_src, perm = torch.sort(src_index, stable=True)
        ptr = torch._convert_indices_from_coo_to_csr(sorted_src, num_src)
        return TransposedLayout(perm, ptr, dst_index.index_select(0, perm), _max_segment(ptr))

    return cached_with(src_index, dst_ptr, ("transposed", num_src), compute)


def segment_sizes(ptr: Tensor, dtype: torch.dtype) -> Tensor:
    """[V, 1]: the sizes of the segments of ``ptr`` (at least 1) in ``dtype``, what a mean divides
    by (cached on ``ptr``)."""
    return cached(ptr, ("segment_sizes", dtype), lambda: ptr.diff().clamp_(min=1).to(dtype).unsqueeze(1))


def uses(ptr: Tensor) -> int:
    """Counts the reductions over the CSR pointer ``ptr`` (1 on its first; always 1 while tracing).

    The schedule selector builds a graph-aware layout only for a graph seen again, so a graph
    used once (a sampled mini-batch) never pays for preprocessing it cannot amortise.
    """
    counter = cached(ptr, ("uses",), lambda: [0])
    counter[0] += 1
    return counter[0]


def neighbor_groups(ptr: Tensor, group_size: int) -> Tensor:
    """GNNAdvisor's neighbour-group table of the segments of ``ptr`` (cached on ``ptr``).

    Every segment is cut into groups of at most ``group_size`` consecutive rows, packed in
    segment order; an empty segment gets one group of no rows (the kernel then writes every
    segment in one launch). Returns ``[group_ptr (V + 1), group_start (G + 1), group_segment (G)]``
    concatenated (int64): segment ``r`` owns groups ``group_ptr[r]:group_ptr[r+1]`` and group
    ``g`` covers rows ``group_start[g]:group_start[g+1]`` of segment ``group_segment[g]``; the
    layout the CUDA groups schedule reads. One host synchronisation (the number of groups).
    """
    if group_size < 1:
        raise ValueError(f"pyg_fast: the neighbour group size must be positive, got {group_size}")

    def compute():
        counts = ptr.diff()
        per_segment = counts.add(group_size - 1).div_(group_size, rounding_mode="floor").clamp_(min=1)
        group_ptr = torch.cat([ptr.new_zeros(1), per_segment.cumsum(0)])
        num_groups = int(group_ptr[-1])
        group_segment = torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), per_segment,
                                                output_size=num_groups)
        rank = torch.arange(num_groups, device=ptr.device) - group_ptr[group_segment]
        group_start = ptr[group_segment] + rank * group_size
        return torch.cat([group_ptr, group_start, ptr[-1:], group_segment])
    return cached(ptr, ("neighbor_groups", group_size), compute)


def balanced_order(ptr: Tensor) -> Tensor:
    """G-Sparse's row order: the segments of ``ptr`` by decreasing length (cached on ``ptr``)."""
    return cached(ptr, ("balanced_order",),
                  lambda: torch.sort(ptr.diff(), descending=True, stable=True).indices)
