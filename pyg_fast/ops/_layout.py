"""Per-graph preparation shared by the ops and layers: CSR pointers, sort permutations and
transposed layouts, built on the data's device without a host synchronisation.

Index values are validated inside the preparation ops (``pyg_fast::csr_layout``,
``checked_index``, ``checked_ptr``) through ``_deferred``: on CUDA a bad index is reported by a
later call, and the kernels skip its entries meanwhile. Nothing here reads device data on the
host, except on the CPU in eager mode, where reading is free (an index found sorted skips its sort).

In eager mode a result is cached with the index tensor it came from while that tensor is alive
and unchanged (keyed weakly on its storage owner, view geometry and version counter), so a graph
used by several layers and steps is prepared once; a graph used once (a sampled mini-batch) costs
the preparation kernels and nothing else. Under ``torch.compile``, ``torch.jit.trace`` and
TorchScript nothing is cached or decided from the data: the same preparation ops run inside the
traced graph, so a trace holds no property of its example.
"""
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
import functools
import weakref

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from pyg_fast.ops import _deferred
from pyg_fast.ops._python_ops import python_op
from pyg_fast.ops._checks import check_index_tensor

# id(owner) -> (weak reference to owner, {slot: value}); the reference's callback drops the entry
# when the owner dies. Keyed by id rather than through torch's WeakTensorKeyDictionary, which
# builds a WeakIdRef object on every lookup (about 1 us of a 2 us lookup).
_CACHE: Dict[int, Tuple[weakref.ref, Dict]] = {}


def eager(*tensors: Tensor) -> bool:
    """False while tracing (torch.compile, including AOTAutograd's backward trace, where
    is_compiling() is False but the tensors are fake; torch.jit.trace; TorchScript): nothing may
    be cached or read from the data then."""
    # torch.jit.is_tracing() is _is_tracing() behind an is_scripting() test, which is never true
    # where Python runs (TorchScript calls pyg_fast only through jit.ignore): a third of this test
    if torch.compiler.is_compiling() or torch._C._is_tracing():
        return False
    for t in tensors:  # fake tensors are Tensor subclasses: a plain Tensor skips the (slower) is_fake test
        if type(t) is not Tensor and is_fake(t):
            return False
    return True


def readable(tensor: Tensor) -> bool:
    """Whether the host may read ``tensor``'s values for a decision: eager and on the CPU."""
    return tensor.device.type == "cpu" and eager(tensor)


def cached(tensor: Tensor, key: Tuple, compute: Callable[[], object]) -> object:
    """Returns ``compute()``, memoised on ``tensor`` (and any view of its storage owner) in eager
    mode."""
    if not eager(tensor):
        return compute()
    entries, slot = _entries(tensor, key, create=True)
    value = entries.get(slot, _MISSING)
    if value is _MISSING:
        _make_room(entries)
        value = entries[slot] = compute()
    return value


def _make_room(entries: Dict) -> None:
    """Before a new slot: an owner changed in place many times drops the entries of old versions."""
    if len(entries) > 64:
        entries.clear()


def peek(tensor: Tensor, key: Tuple) -> object:
    """What :func:`cached` holds for ``tensor`` under ``key``, or None (nothing computed or
    stored, not even an entry for a tensor seen for the first time; always None while tracing)."""
    if not eager(tensor):
        return None
    entries, slot = _entries(tensor, key, create=False)
    return None if entries is None else entries.get(slot)


def forget(tensor: Tensor, key: Tuple) -> None:
    """Drops what :func:`cached` holds for ``tensor`` under ``key``, if anything."""
    entries, slot = _entries(tensor, key, create=False)
    if entries is not None:
        entries.pop(slot, None)


def known(tensor: Tensor) -> bool:
    """Whether anything is cached with ``tensor``'s storage owner (no slot key built)."""
    return _owner_entries(storage_owner(tensor)) is not None


def _owner_entries(owner: Tensor, create: bool = False) -> Optional[Dict]:
    """The cache entries of the storage owner ``owner``: None where it has none, unless ``create``."""
    found = _CACHE.get(id(owner))
    if found is not None and found[0]() is owner:
        return found[1]
    if not create:
        return None
    entries = {}
    _CACHE[id(owner)] = (weakref.ref(owner, functools.partial(_drop, id(owner))), entries)
    return entries


def _entries(tensor: Tensor, key: Tuple, create: bool) -> Tuple[Optional[Dict], Tuple]:
    """The cache entries of ``tensor``'s storage owner (None where it has none and not
    ``create``), and ``tensor``'s slot among them."""
    entries = _owner_entries(storage_owner(tensor), create)
    if entries is None:
        return None, ()
    return entries, (key, tensor.storage_offset(), tensor.shape, tensor.stride(), tensor._version)


_MISSING = object()


# The use from which an index counts as reused. PyG's layers use an index up to three times in a
# step and make a new one per call where they add self loops: GCN's normalisation and aggregation
# use it twice, GAT's softmax (max, sum) and aggregation three times, a 2-layer SAGE step its
# edge_index twice on a new graph. Grouping an index for at most three uses lost to PyG's scatter
# (2 cores, 500 k edges, training step with patch(): GCN 0.91x, GAT 0.94x, SAGE on a new graph
# 0.97x); a reused graph reaches the 4th use in its second step (SAGE: 1.07x).
REUSED_FROM_USE = 4


def use_count(tensor: Tensor, key: Tuple) -> int:
    """How many calls with ``key`` have seen ``tensor``, this one included (counted with it in
    eager mode; 1 while tracing): per-graph work that pays off over several uses is skipped for a
    graph used only a few times, as the layers of a sampled mini-batch use theirs. Counted per
    storage owner and version (a change in place counts anew), not per view like :func:`cached`'s
    values: a count decides when to prepare, and what is prepared is keyed by view (the view's key
    cost 3.6 of a 5.8 us first count, CPU host)."""
    if not eager(tensor):
        return 1
    entries = _owner_entries(storage_owner(tensor), create=True)
    slot = ("uses", tensor._version) + key
    count = entries.get(slot, 0) + 1
    if count == 1:
        _make_room(entries)
    entries[slot] = count
    return count


def first_use(tensor: Tensor, key: Tuple) -> bool:
    """Whether this is the first call with ``key`` for ``tensor`` (see ``use_count``)."""
    return use_count(tensor, key) == 1


def storage_owner(tensor: Tensor) -> Tensor:
    """The tensor whose storage ``tensor`` views (itself if it is not a view)."""
    return tensor if tensor._base is None else tensor._base


def _drop(owner_id: int, ref: weakref.ref, cache: Dict = _CACHE) -> None:
    """Weak reference callback: forgets a dead owner's entries (unless its id was reused since)."""
    if cache.get(owner_id, (None,))[0] is ref:
        del cache[owner_id]


def cached_with(tensor: Tensor, other: Tensor, key: Tuple, compute: Callable[[], object]) -> object:
    """``compute()`` of two tensors, memoised on ``tensor`` for ``other`` as :func:`cached` keys
    ``tensor``: its storage owner's identity, its place in it and the version. A new view of the
    same values hits (``edge_index[0]`` sliced anew every call: keyed on the view object, the
    grouping of a gather-reduce ran on every call). The owner is held weakly: a cached value must
    not keep it alive."""
    return cached_with_all(tensor, (other,), key, compute)


def cached_with_all(tensor: Tensor, others: Sequence[Tensor], key: Tuple, compute: Callable[[], object]) -> object:
    """:func:`cached_with` for several other tensors (the edge indices of a heterogeneous
    graph's relations): memoised on ``tensor`` for all of ``others``, each held weakly."""
    if not eager(tensor, *others):
        return compute()
    bases = tuple(storage_owner(other) for other in others)

    def entry():
        return tuple(weakref.ref(base) for base in bases), compute()

    owners, value = cached(tensor, key + tuple(part for other in others for part in _place(other)), entry)
    if any(owner() is not base for owner, base in zip(owners, bases)):  # an id() reused: recompute
        return compute()
    return value


def peek_with(tensor: Tensor, other: Tensor, key: Tuple) -> object:
    """What :func:`cached_with` holds for ``tensor`` and ``other`` under ``key``, or None (nothing
    stored; always None while tracing)."""
    if not eager(tensor, other):
        return None
    entry = peek(tensor, key + _place(other))
    return entry[1] if entry is not None and entry[0][0]() is storage_owner(other) else None


def _place(tensor: Tensor) -> Tuple:
    """``tensor``'s storage owner's identity, its place in it and its version: the part of a
    :func:`cached_with` key that names the other tensor."""
    return id(storage_owner(tensor)), tensor.storage_offset(), tensor.shape, tensor.stride(), tensor._version


INT32_MAX = 2 ** 31 - 1


def gather_index_dtype(like: Tensor, num_rows) -> torch.dtype:
    """The dtype of a gather index that a layout keeps for rows ``[0, num_rows)`` on ``like``'s
    device: int32 on CUDA, whose gather-reduce kernel reads either (half the bytes to read, and to
    copy where a recorded graph's layout comes out of its memo: a compiled GCN step on a 23 M-edge
    graph spent 0.45 ms copying layouts and 0.33 ms more in its gather kernels than the eager
    step's int32 reads, H100); int64 on the CPU, whose kernels take int64, and beyond int32."""
    return torch.int32 if like.is_cuda and num_rows <= INT32_MAX else torch.long


def narrow_gather_index(index: Tensor, rows: Tensor) -> Tensor:
    """The checked int64 ``index`` of rows of ``rows`` as a cached int32 copy where
    :func:`gather_index_dtype` allows (CUDA), else itself: for the kernels that read either, on a
    graph used more than once."""
    if index.dtype != torch.long or gather_index_dtype(rows, rows.size(0)) != torch.int32:
        return index
    return cached(index, ("as_int32",), lambda: index.int())


def as_long(index: Tensor) -> Tensor:
    """The index as contiguous int64, the type the kernels take (cached)."""
    if type(index) is not Tensor and hasattr(index, "as_tensor"):  # torch_geometric's Index, EdgeIndex
        index = index.as_tensor()
    if index.dtype == torch.long and index.is_contiguous():
        return index
    if index.dtype not in (torch.int32, torch.int64, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"pyg_fast: index tensors must be integer, got {index.dtype}")
    return cached(index, ("as_long",), lambda: index.long().contiguous())


# The preparation ops ---------------------------------------------------------------------------
def range_message(name: str, size, size_name: str) -> _deferred.Message:
    return IndexError, f"pyg_fast: '{name}' holds values outside [0, {size}) ({size_name})"


# Bounds that derive from another tensor's shape travel as that tensor and a dimension: an int
# argument of a dispatcher call is recorded as a constant by torch.jit.trace, a tensor is not.
@python_op("csr_layout")
def _csr_layout(index: Tensor, num_segments: int, is_sorted: bool, src: Optional[Tensor], src_bound: Optional[Tensor],
                names: str, owner: Optional[Tensor] = None, with_perm: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    """(ptr [num_segments + 1], perm [E] (empty where ``is_sorted`` or not ``with_perm``), src[perm]
    [E] (empty without ``src``)): the rows of ``index`` grouped by value with a stable sort,
    validated (``src`` against [0, src_bound.size(0)) where ``src_bound`` is given). ``names``:
    'index name|size name|src name|src size name' for the messages. A caller that never reads
    the permutation says so (``with_perm=False``): where a graph is recorded every output is a
    copy, and the permutation of 23 M edges is 184 MB.

    ``owner`` (given where the call is recorded by torch.compile or torch.jit.trace): the caller's
    tensor that ``index`` and ``src`` view, its edge_index. When the recorded graph runs, the
    result is memoised with it (a graph reused step after step is grouped once) and copies are
    returned: copying a 1 M-edge layout costs about 10 us of device time, grouping it again
    200-350 us of host time on an H100 host."""
    skip = () if with_perm else (1,)
    if owner is not None and eager(owner):
        key = _memo_key(owner, index, num_segments, is_sorted, src, src_bound, names)
        if key is not None:
            return memoised(owner, key, lambda: _prepare(index, num_segments, is_sorted, src, src_bound, names), skip)
    return _without(_prepare(index, num_segments, is_sorted, src, src_bound, names), skip)


def csr_layout(index: Tensor, num_segments: int, is_sorted: bool, src: Optional[Tensor], src_bound: Optional[Tensor],
               names: str, owner: Optional[Tensor] = None, with_perm: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    """``pyg_fast::csr_layout``: the registered op where a graph is recorded, its body directly in
    eager mode (the dispatcher's round trip through Python cost 60 us of a 100 us call on a CPU
    host), where the permutation comes whatever ``with_perm`` says (it is cached, not copied)."""
    if eager(index):
        return _prepare(index, num_segments, is_sorted, src, src_bound, names)
    return _csr_layout(index, num_segments, is_sorted, src, src_bound, names, owner, with_perm)


def _memo_key(owner: Tensor, index: Tensor, num_segments: int, is_sorted: bool, src: Optional[Tensor],
              src_bound: Optional[Tensor], names: str) -> Optional[Tuple]:
    """The key of a ``csr_layout`` call memoised with ``owner``, or None where ``index`` or ``src``
    views another storage (then nothing ties their values to the owner's version). A compiled
    graph passes a slice of its input as a new tensor with a version counter of its own, which an
    in-place change of the input does not move; the memo is keyed on that new object then, so it
    never hits: only an input passed whole is grouped once."""
    storage = owner.untyped_storage()
    views = [index] if src is None else [index, src]
    if any(t.untyped_storage() is not storage for t in views):
        return None
    return ("csr_layout", num_segments, is_sorted, names, src_bound is None or src_bound.size(0),
            tuple((t.storage_offset(), t.shape, t.stride(), t.dtype) for t in views))


def _prepare(index: Tensor, num_segments: int, is_sorted: bool, src: Optional[Tensor], src_bound: Optional[Tensor],
             names: str) -> Tuple[Tensor, Tensor, Tensor]:
    """The work of ``pyg_fast::csr_layout``: one ``pyg_fast::coo_to_csr`` call (the kernels in
    csrc/cuda/kernels/layout.cuh) and its flags reported."""
    bound = -1 if src_bound is None else src_bound.size(0)
    index_name, size_name, src_name, src_size_name = names.split("|")
    messages = (range_message(index_name, num_segments, size_name), range_message(src_name, bound, src_size_name),
                (ValueError, f"pyg_fast: '{index_name}' was declared sorted but is not sorted"))
    ptr, perm, src_sorted, _ = _deferred.checked(
        lambda slot: torch.ops.pyg_fast.coo_to_csr(index, num_segments, is_sorted, src, bound, slot), messages,
        index.device)
    return ptr, perm, src_sorted


@torch.library.register_fake("pyg_fast::coo_to_csr")
def _(index, num_segments, is_sorted, src, src_bound, flag_slot=-1):
    E = index.numel()
    return (index.new_empty(num_segments + 1), index.new_empty(0 if is_sorted else E),
            index.new_empty(0 if src is None else E), index.new_empty(3))


@torch.library.register_fake("pyg_fast::csr_to_coo")
def _(ptr, num_rows):
    return ptr.new_empty(num_rows)


@torch.library.register_fake("pyg_fast::looped_csr")
def _(src, ptr, perm, num_loops):
    E = src.numel() + num_loops
    return src.new_empty(E), torch.empty_like(ptr), perm.new_empty(E)


@torch.library.register_fake("pyg_fast::csr_layout")
def _(index, num_segments, is_sorted, src, src_bound, names, owner=None, with_perm=True):
    E = index.numel()
    return (index.new_empty(num_segments + 1), index.new_empty(0 if is_sorted or not with_perm else E),
            index.new_empty(0 if src is None else E))


def check_ranges(indices: Sequence[Tensor], sizes: Sequence, names: Sequence[Tuple[str, str]]) -> None:
    """Reports each index with a value outside [0, sizes[i]), named by ``names[i]`` (its name, the
    size's name)."""
    _deferred.checked(lambda slot: torch.ops.pyg_fast.index_range_flags(list(indices), list(sizes), slot),
                      lambda: [range_message(name, size, size_name) for (name, size_name), size in zip(names, sizes)],
                      indices[0].device)


@python_op("checked_index")
def _checked_index(index: Tensor, bound: Tensor, dim: int, name: str, size_name: str) -> Tensor:
    """A copy of ``index`` whose values are checked to lie in [0, bound.size(dim))."""
    check_ranges([index], [bound.size(dim)], [(name, size_name)])
    return index.clone()


@torch.library.register_fake("pyg_fast::checked_index")
def _(index, bound, dim, name, size_name):
    return torch.empty_like(index)


@python_op("checked_ptr")
def _checked_ptr(ptr: Tensor, rows: Tensor, dim: int, name: str, covers_all: bool = True) -> Tensor:
    """A copy of the CSR pointer ``ptr``, checked (``_check_ptr``)."""
    _check_ptr(ptr, rows.size(dim), name, covers_all)
    return ptr.clone()


def _check_ptr(ptr: Tensor, num_rows: int, name: str, covers_all: bool) -> None:
    """Reports a CSR pointer that does not run non-decreasing from 0 to num_rows (``covers_all``),
    or within [0, num_rows] (where rows outside every segment are skipped, as torch_scatter's
    ``indptr`` allows)."""
    if covers_all:
        bad = (ptr[0] != 0) | (ptr[-1] != num_rows)
        message = f"pyg_fast: '{name}' must be non-decreasing from 0 to {num_rows} (the number of rows it splits)"
    else:
        bad = (ptr[0] < 0) | (ptr[-1] > num_rows)
        message = f"pyg_fast: '{name}' must be non-decreasing within [0, {num_rows}] (the number of rows it splits)"
    if ptr.numel() > 1:
        bad = bad | (ptr[1:] < ptr[:-1]).any()
    _deferred.report(bad.reshape(1).long(), [(ValueError, message)])


@torch.library.register_fake("pyg_fast::checked_ptr")
def _(ptr, rows, dim, name, covers_all=True):
    return torch.empty_like(ptr)


def rows_of(num_rows: int, device: torch.device) -> Tensor:
    """A [num_rows, 0] tensor: a bound of the preparation ops given as a number. Zeros, not empty:
    the compiler merges identical zeros but never empties, so with zeros the layers of a compiled
    model that group one edge_index are one grouping op a step (3-layer GAT: one csr_layout and two
    derived_layout ops a step instead of three and six)."""
    return torch.zeros((num_rows, 0), device=device)


class SegmentLayout(NamedTuple):
    """How E rows map onto segments: ``ptr`` [dim_size + 1] is the CSR pointer over the rows in
    sorted order, ``perm`` [E] lists the rows in that order (None where the index was sorted)."""
    ptr: Tensor
    perm: Optional[Tensor]


def checked_index(index: Tensor, bound: Tensor, dim: int, name: str, size_name: str) -> Tensor:
    """``index`` as int64, its values checked to lie in [0, bound.size(dim)) (see
    :func:`checked_indices`)."""
    return checked_indices((index, bound, dim, name, size_name))[0]


def checked_indices(*checks: Tuple[Tensor, Tensor, int, str, str]) -> List[Tensor]:
    """For each ``(index, bound, dim, name, size_name)``: ``index`` as int64, its values checked to
    lie in [0, bound.size(dim)). In eager mode each index is checked once (a flag cached with it),
    the unchecked ones of a call in one op call and one report (as aminmax and comparisons, a fresh
    SDDMM's two checks took 8 of its 9 launches and two flag copies, H100); where recorded,
    through the ``pyg_fast::checked_index`` op each, whose body does the same."""
    return _checked(checks, False)[0]


def kernel_checked_indices(*checks: Tuple[Tensor, Tensor, int, str, str]) -> Tuple[List[Tensor], int, bool]:
    """:func:`checked_indices` for an op whose CUDA kernel raises a flag for each out-of-range
    index, in order, where given a ring slot: (the indices as int64, that ``flag_slot``). In eager
    mode on CUDA, where some index is not checked yet, the check is left to the kernel (a fresh
    SDDMM's separate check was one of its two launches and about 25-30 us of host time, H100 host);
    elsewhere the indices are checked here and the slot is -1. Third: whether every index was
    checked by an earlier call in eager mode (a graph seen before)."""
    return _checked(checks, True)


def _checked(checks: Sequence[Tuple[Tensor, Tensor, int, str, str]], in_kernel: bool
             ) -> Tuple[List[Tensor], int, bool]:
    indices = [as_long(check[0]) for check in checks]
    if not eager(*indices):
        return [_checked_index(index, bound.detach(), dim, name, size_name)
                for index, (_, bound, dim, name, size_name) in zip(indices, checks)], -1, False
    # the cache keeps a flag, not the index: the index itself would keep its own entry alive
    marks = [cached(index, ("checked", bound.size(dim), name), lambda: [False])
             for index, (_, bound, dim, name, _) in zip(indices, checks)]
    pending = [k for k, mark in enumerate(marks) if not mark[0]]
    if not pending:
        return indices, -1, True
    slot = -1
    if in_kernel and indices[0].is_cuda:
        slot = _deferred.flag_slot([range_message(name, bound.size(dim), size_name)
                                    for _, bound, dim, name, size_name in checks], indices[0].device)
    if slot < 0:
        check_ranges([indices[k] for k in pending], [checks[k][1].size(checks[k][2]) for k in pending],
                      [(checks[k][3], checks[k][4]) for k in pending])
    for k in pending:
        marks[k][0] = True
    return indices, slot, False


def coo_layout(index: Tensor, dim_size: int, is_sorted: Optional[bool] = None, name: str = "index",
               size_name: str = "dim_size") -> SegmentLayout:
    """The CSR layout of a COO index (cached). ``is_sorted=True`` promises a sorted index (checked);
    else it is sorted on the device, unless it is read on the CPU and found sorted there (on CUDA
    a reused index found sorted later is then read without its permutation)."""
    index = as_long(index)

    def compute():
        known_sorted = bool(is_sorted)
        if is_sorted is None and readable(index) and index.numel() > 1:
            known_sorted = not bool((index[1:] < index[:-1]).any())
        ptr, perm, _ = csr_layout(index, dim_size, known_sorted, None, None, f"{name}|{size_name}||", index)
        return SegmentLayout(ptr, None if known_sorted else perm)

    # [layout, settled]: settled once the probe below has answered, after which a call costs one
    # lookup instead of three (and no poll of the pending checks for each)
    entry = cached(index, ("coo_layout", dim_size, is_sorted, name), lambda: [compute(), False])
    layout = entry[0]
    # eager() first: under tracing an index's size may be symbolic, and it must not be branched on
    if entry[1] or layout.perm is None or not eager(index) or readable(index) or _deferred._capturing() or (
            index.numel() == 0):
        return layout
    # An index the device sorted may have been sorted already (graphs stored by destination):
    # its permutation is then the identity, and gathering rows through it reads 8 bytes more per
    # row than reading them (an earlier build, which read a sorted index directly after a host
    # synchronisation, ran the H100 segment_reduce suite up to 1.6x faster). A reused index
    # learns that without waiting, from its REUSED_FROM_USE-th use on (the probe's three small
    # kernels and copy are not for a graph used a few times), and is read directly once the answer
    # has reached the host.
    if use_count(index, ("sorted_probe", dim_size)) < REUSED_FROM_USE:
        return layout
    found = cached(index, ("found_sorted", dim_size),
                   lambda: _deferred.HostValue(_sorted_in_range(index, dim_size))).get()
    if found is None:
        return layout
    entry[0], entry[1] = (SegmentLayout(layout.ptr, None) if found[0] else layout), True
    return entry[0]


def coo_settled(index: Tensor, dim_size: int, is_sorted: Optional[bool] = None, name: str = "index") -> bool:
    """Whether :func:`coo_layout` has built the layout of ``index`` and will not change it (a
    device-sorted index may yet prove sorted, and then drops its permutation)."""
    entry = peek(as_long(index), ("coo_layout", dim_size, is_sorted, name))
    return entry is not None and (entry[1] or entry[0].perm is None or readable(index))


def _sorted_in_range(index: Tensor, dim_size: int) -> Tensor:
    """[1] int64: 1 if ``index`` (non-empty) is non-decreasing within [0, dim_size), else 0."""
    ok = (index[0] >= 0) & (index[-1] < dim_size)
    if index.numel() > 1:
        ok = ok & (index[1:] >= index[:-1]).all()
    return ok.long().view(1)


def grouped_edges(dst: Tensor, num_dst: int, src: Tensor, src_bound: Tensor, names: str,
                  is_sorted: Optional[bool] = None, owner: Optional[Tensor] = None, with_perm: bool = True
                  ) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """(ptr, perm or None, src in destination order) of edges src -> dst, validated (sources
    against [0, src_bound.size(0))): the layout of a gather-reduce. Not cached (the callers cache
    what they build from it). ``names``, ``owner`` (the tensor ``dst`` and ``src`` view, kept
    only where recorded) and ``with_perm`` (False: perm may come empty) as for
    ``pyg_fast::csr_layout``."""
    dst, src = as_long(dst), as_long(src)
    known_sorted = bool(is_sorted)
    if is_sorted is None and readable(dst) and dst.numel() > 1:
        known_sorted = not bool((dst[1:] < dst[:-1]).any())
    ptr, perm, src_sorted = csr_layout(dst, num_dst, known_sorted, src, src_bound.detach(), names, owner, with_perm)
    return ptr, None if known_sorted else perm, src_sorted


def ptr_layout(ptr: Tensor, rows: Tensor, dim: int, name: str = "ptr", covers_all: bool = True) -> SegmentLayout:
    """A CSR pointer over the rows of ``rows`` along ``dim``, checked to run from 0 to their
    number, or within it where not ``covers_all`` (cached)."""
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"pyg_fast: '{name}' must be a non-empty 1-D tensor, got shape {tuple(ptr.shape)}")
    ptr = as_long(ptr)
    if eager(ptr):  # as checked_index
        cached(ptr, ("ptr_layout", rows.size(dim), name, covers_all),
               lambda: _check_ptr(ptr, rows.size(dim), name, covers_all) or True)
        return SegmentLayout(ptr, None)
    return SegmentLayout(_checked_ptr(ptr, rows.detach(), dim, name, covers_all), None)


def segments(index: Optional[Tensor], ptr: Optional[Tensor], rows: Tensor, dim: int, num_segments: Optional[int],
             *, index_name: str = "index", size_name: str = "dim_size",
             is_sorted: Optional[bool] = None, ptr_covers_all: bool = True) -> Tuple[SegmentLayout, int]:
    """The layout and number of segments of the rows of ``rows`` along ``dim`` that an op reduces,
    from a COO ``index`` (one entry per row) or a CSR ``ptr`` (used if both are given; see
    ``ptr_layout`` for ``ptr_covers_all``). ``num_segments`` (the op's ``size_name`` argument)
    defaults to what ``ptr`` says or to ``index.max() + 1`` (one host synchronisation: pass it). A
    ``torch_geometric.Index`` says whether it is sorted where ``is_sorted`` is None."""
    if ptr is not None:
        check_index_tensor(ptr, "ptr", None, rows.device)
        if num_segments is not None and num_segments != ptr.numel() - 1:
            raise ValueError(f"pyg_fast: {size_name}={num_segments} does not match 'ptr' with {ptr.numel()} "
                             f"entries (expected {size_name}={ptr.numel() - 1})")
        return ptr_layout(ptr, rows, dim, covers_all=ptr_covers_all), ptr.numel() - 1
    if index is None:
        raise ValueError(f"pyg_fast: pass '{index_name}' or 'ptr'")
    check_index_tensor(index, index_name, rows.size(dim), rows.device)
    if num_segments is None:
        num_segments = int(index.max()) + 1 if index.numel() > 0 else 0
    if num_segments < 0:
        raise ValueError(f"pyg_fast: {size_name} must be non-negative, got {num_segments}")
    if is_sorted is None:
        is_sorted = getattr(index, "is_sorted", None) or None
    return coo_layout(index, num_segments, is_sorted, index_name, size_name), num_segments


# Layouts derived from a grouping -----------------------------------------------------------------
# Where a graph is recorded, the grouping's tensors are new every step (copies of the memo kept
# with the caller's edge_index, see csr_layout), so the layouts derived from them (the grouping
# by source of a backward pass, the destination of every edge, a grouping with self loops) are
# memoised through where those copies came from: without it a compiled GCN training step on a
# 23 M-edge graph regrouped its edges three times a step (21 ms against 8.3 ms eager on an H100).
# id(storage of a copy) -> (weak reference to that storage, weak reference to the owner, key, the
# copy's version counter when issued).
_ISSUED: Dict[int, Tuple[weakref.ref, weakref.ref, Tuple, int]] = {}


def _issue(values: Sequence[Tensor], owner: Tensor, key: Tuple, skip: Sequence[int] = ()) -> Tuple[Tensor, ...]:
    """Copies of the memoised ``values`` of ``owner`` under ``key`` (an op's outputs must not be
    shared between calls), registered so that layouts derived from them are memoised too; the
    positions in ``skip`` come empty."""
    copies = tuple(value.new_empty(0) if position in skip else value.clone() for position, value in enumerate(values))
    for position, copy in enumerate(copies):
        if position in skip:
            continue
        storage = copy.untyped_storage()
        _ISSUED[id(storage)] = (weakref.ref(storage, functools.partial(_drop, id(storage), cache=_ISSUED)),
                                weakref.ref(owner), (key, owner._version, position), copy._version)
    return copies


def memoised(owner: Tensor, key: Tuple, compute: Callable[[], Sequence[Tensor]],
             skip: Sequence[int] = ()) -> Tuple[Tensor, ...]:
    """For an op body that runs where a graph is recorded: ``compute()`` memoised with ``owner``
    under ``key``, handed out as issued copies (see ``_issue``) but for the positions in ``skip``,
    which come empty."""
    return _issue(cached(owner, key, compute), owner, key, skip)


def _without(values: Sequence[Tensor], skip: Sequence[int]) -> List[Tensor]:
    """``values`` with the positions in ``skip`` empty."""
    return [value.new_empty(0) if position in skip else value for position, value in enumerate(values)]


def _origin(tensors: Sequence[Tensor]) -> Optional[Tuple[Tensor, Tuple]]:
    """(owner, key) where every tensor is an unchanged copy issued from one owner's memo, else None."""
    owner, parts = None, []
    for t in tensors:
        storage = t.untyped_storage()
        entry = _ISSUED.get(id(storage))
        if entry is None or entry[0]() is not storage or entry[3] != t._version:
            return None
        found = entry[1]()
        if found is None or (owner is not None and found is not owner):
            return None
        owner = found
        parts.append((entry[2], t.storage_offset(), t.shape, t.stride()))
    return owner, tuple(parts)


def _destinations(ptr: Tensor, num_rows: int) -> List[Tensor]:
    return [torch.ops.pyg_fast.csr_to_coo(ptr, num_rows)]


def _transposed(src_index: Tensor, dst_ptr: Tensor, num_src: int) -> List[Tensor]:
    # No report: src_index was checked where it was grouped (the raw ops check nothing, by
    # contract), and values out of range are grouped after every source, where no kernel reads.
    ptr, perm, dst_index, _ = torch.ops.pyg_fast.coo_to_csr(src_index.long(), num_src, False,
                                                            ptr_to_index(dst_ptr, src_index.numel()), -1)
    return [perm, ptr, dst_index.to(gather_index_dtype(dst_ptr, dst_ptr.numel() - 1))]


def _looped(src: Tensor, ptr: Tensor, perm: Tensor, num_loops: int) -> List[Tensor]:
    return list(torch.ops.pyg_fast.looped_csr(src, ptr, perm, num_loops))


# "in_order" (values[perm], a recorded graph's weights in another order) is registered by
# ops/_kernels.py, whose gather it runs.
_DERIVED = {"destinations": _destinations, "transposed": _transposed, "looped": _looped}


@python_op("derived_layout")
def _derived_layout(kind: str, layout: List[Tensor], sizes: List[int], skip: List[int]) -> List[Tensor]:
    """``_DERIVED[kind](*layout, *sizes)`` with the outputs at the positions in ``skip`` empty
    (the caller does not read them), memoised with the owner of ``layout`` when its tensors are
    copies issued by a memo (a recorded graph reusing its edge_index). Only recorded calls come
    here: eager callers cache the result with their tensors."""
    origin = _origin(layout) if eager(*layout) else None
    if origin is None:
        return _without(_DERIVED[kind](*layout, *sizes), skip)
    owner, key = origin
    return list(memoised(owner, ("derived", kind, tuple(sizes), key), lambda: _DERIVED[kind](*layout, *sizes), skip))


@torch.library.register_fake("pyg_fast::derived_layout")
def _(kind, layout, sizes, skip):
    if kind == "in_order":
        return [layout[0].new_empty((layout[1].numel(),) + tuple(layout[0].shape[1:]))]
    if kind == "destinations":
        shapes = [(layout[0], sizes[0], layout[0].dtype)]
    elif kind == "transposed":
        E = layout[0].numel()
        shapes = [(layout[0], E, torch.long), (layout[0], sizes[0] + 1, torch.long),
                  (layout[0], E, gather_index_dtype(layout[1], layout[1].numel() - 1))]
    else:
        E = layout[0].numel() + sizes[0]
        shapes = [(layout[0], E, layout[0].dtype), (layout[1], layout[1].numel(), layout[1].dtype),
                  (layout[2], E, layout[2].dtype)]
    return [like.new_empty(0 if position in skip else n, dtype=dtype)
            for position, (like, n, dtype) in enumerate(shapes)]


def _derive(kind: str, layout: List[Tensor], sizes: List[int], skip: Sequence[int] = ()) -> List[Tensor]:
    """``_DERIVED[kind]`` in eager mode (every output: they are cached, not copied), the memoising
    op where recorded."""
    if eager(*layout):
        return _DERIVED[kind](*layout, *sizes)
    return _derived_layout(kind, layout, sizes, list(skip))


def ptr_to_index(ptr: Tensor, num_rows: int) -> Tensor:
    """Segment of every row covered by ``ptr`` (cached); [num_rows]."""
    return cached(ptr, ("ptr_to_index", num_rows), lambda: _derive("destinations", [ptr], [num_rows])[0])


def looped_layout(src: Tensor, ptr: Tensor, perm: Tensor, num_loops: int) -> Tuple[Tensor, Tensor, Tensor]:
    """(src, ptr, perm) of a grouping by destination with the self loops ``v -> v`` for ``v <
    num_loops`` appended to the edges (loop v at input position E + v), derived from the
    grouping (``perm``: every edge's input position) without sorting again."""
    return tuple(_derive("looped", [src, ptr, perm], [num_loops]))


class TransposedLayout(NamedTuple):
    """The edges of a gather (src_index -> dst rows given by a CSR ptr) regrouped by source:
    ``perm`` lists the edges sorted by source, ``ptr`` [num_src + 1] points into that order and
    ``dst_index`` [E] is the destination of each edge in that order."""
    perm: Tensor
    ptr: Tensor
    dst_index: Tensor


def transposed_layout(src_index: Tensor, dst_ptr: Tensor, num_src: int, with_perm: bool = True) -> TransposedLayout:
    """Layout for the backward pass of a gather-reduce (cached on ``src_index``, int64 or int32);
    ``perm`` may come empty without ``with_perm``; ``dst_index`` in ``gather_index_dtype``."""
    return cached_with(src_index, dst_ptr, ("transposed", num_src), lambda: TransposedLayout(
        *_derive("transposed", [src_index, dst_ptr], [num_src], () if with_perm else (0,))))


def segment_sizes(ptr: Tensor, dtype: torch.dtype) -> Tensor:
    """[V, 1]: the sizes of the segments of ``ptr`` (at least 1) in ``dtype``, what a mean divides
    by (cached on ``ptr``)."""
    return cached(ptr, ("segment_sizes", dtype), lambda: ptr.diff().clamp_(min=1).to(dtype).unsqueeze(1))


# Neighbour-group sizes the schedule table may ask for (powers of two; see tuning).
GROUP_SIZES = (2, 4, 8, 16, 32, 64)


class SegmentStats(NamedTuple):
    """What the schedule of a reused graph depends on beyond its sizes: the longest segment and the
    number of neighbour groups of each size in GROUP_SIZES."""
    max_segment: int
    num_groups: Dict[int, int]


def segment_stats(ptr: Tensor) -> Optional[SegmentStats]:
    """The :class:`SegmentStats` of a CUDA pointer in eager mode, once they reach the host: the
    first call starts their computation and copy (no synchronisation) and returns None, as do the
    calls before the copy lands; None under tracing."""
    if not eager(ptr) or _deferred._capturing():
        return None

    def start():
        counts = ptr.diff()
        if counts.numel() == 0:
            return _deferred.HostValue(torch.zeros(1 + len(GROUP_SIZES), dtype=torch.long, device=ptr.device))
        groups = [counts.add(size - 1).div_(size, rounding_mode="floor").clamp_(min=1).sum() for size in GROUP_SIZES]
        return _deferred.HostValue(torch.stack([counts.max()] + groups))

    values = cached(ptr, ("stats",), start).get()
    if values is None:
        return None
    return SegmentStats(values[0], dict(zip(GROUP_SIZES, values[1:])))


def neighbor_groups(ptr: Tensor, group_size: int, num_groups: Optional[int]) -> Tensor:
    """GNNAdvisor's neighbour-group table of the segments of ``ptr`` (cached on ``ptr``), for
    ``num_groups`` groups (from :func:`segment_stats`, so no synchronisation; None: counted
    here, one synchronisation).

    Every segment is cut into groups of at most ``group_size`` consecutive rows, packed in
    segment order; an empty segment gets one group of no rows (the kernel then writes every
    segment in one launch). Returns ``[group_ptr (V + 1), group_start (G + 1), group_segment (G)]``
    concatenated (int64): segment ``r`` owns groups ``group_ptr[r]:group_ptr[r+1]`` and group
    ``g`` covers rows ``group_start[g]:group_start[g+1]`` of segment ``group_segment[g]``; the
    layout the CUDA groups schedule reads.
    """
    if group_size < 1:
        raise ValueError(f"pyg_fast: the neighbour group size must be positive, got {group_size}")

    def compute():
        counts = ptr.diff()
        per_segment = counts.add(group_size - 1).div_(group_size, rounding_mode="floor").clamp_(min=1)
        group_ptr = torch.cat([ptr.new_zeros(1), per_segment.cumsum(0)])
        count = int(group_ptr[-1]) if num_groups is None else num_groups
        group_segment = torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), per_segment,
                                                output_size=count)
        rank = torch.arange(count, device=ptr.device) - group_ptr[group_segment]
        group_start = ptr[group_segment] + rank * group_size
        return torch.cat([group_ptr, group_start, ptr[-1:], group_segment])
    return cached(ptr, ("neighbor_groups", group_size), compute)


def balanced_order(ptr: Tensor) -> Tensor:
    """G-Sparse's row order: the segments of ``ptr`` by decreasing length (cached on ``ptr``)."""
    return cached(ptr, ("balanced_order",),
                  lambda: torch.sort(ptr.diff(), descending=True, stable=True).indices)
