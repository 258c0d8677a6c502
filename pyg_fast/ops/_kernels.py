"""The registered segment-family ops below the public wrappers: their fake kernels, their
autograd (``torch.library.register_autograd``: one route for eager calls, ``torch.compile`` and
direct ``torch.ops.pyg_fast`` calls; that of gather_scatter, segment_reduce and edge_softmax, whose
backward is one op call, is C++ in csrc/ops), and the helpers that call them on prepared layouts.

Backward formulas call only ``torch.ops.pyg_fast`` ops, ``_layout`` and ``tuning``, never the
public wrappers, so the modules above import this one and nothing here imports them.
"""
import functools
import math
import weakref
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import guard_or_false

from pyg_fast import tuning
from pyg_fast.ops import _deferred, _layout

EXTREMA = ("max", "min", "amax", "amin")
# The schedules for which an eager call keeps an int32 copy of an int64 source index (the CUDA
# kernels read either): at small F the index is a large share of the bytes a weighted gather moves
# (SpMM F = 1: 0.93x -> 1.03x cuSPARSE on a 23 M-edge graph).
_INT32_SCHEDULES = (tuning.SCHEDULES["edges"], tuning.SCHEDULES["groups"])


def run(op, *args):
    """``op(*args)``. In eager mode, for an op with Python autograd formulas (``register_autograd``
    below): where no input needs a gradient (the backward's own calls, inference), straight to the
    kernel below the autograd key (the Python wrapper that torch.library.register_autograd puts
    there costs 4 of a 7 us call, CPU host); where one does, through the same formulas as an
    autograd.Function."""
    if torch.compiler.is_compiling() or torch._C._is_tracing():
        return op(*args)
    # a failed check of an earlier call raises here, once a launch: polled on every cache lookup
    # instead, a GIN training step on arxiv_like polled 18 times (about 0.35 ms, H200 host)
    _deferred.poll()
    eager = _EAGER.get(op)
    if eager is None:
        # C++ autograd (csrc/ops; it steps aside itself where nothing needs a gradient), no autograd,
        # or an op registered elsewhere (segment_matmul): the dispatcher's route, whose C++ test
        # beat a Python one here (gather_scatter, CPU host: 10.8 us a call against 13.3 below the
        # autograd key and 17.9 through the grad tests)
        return op.default(*args)
    if torch._C.is_grad_enabled() and torch._C._any_requires_grad(*args):
        if not _layout.eager(*[a for a in args if isinstance(a, Tensor)]):
            return op(*args)
        function, defaults = eager
        return function.apply(*args, *defaults[len(args):])
    # the overload itself: the packet's resolution of it costs 1.8 of a 6.4 us call (CPU host)
    with torch._C._AutoDispatchBelowAutograd():
        return op.default(*args)


# op -> (an autograd.Function of the op's formulas, its arguments' defaults)
_EAGER = {}


def register_autograd(name: str, backward, setup_context) -> None:
    """``torch.library.register_autograd`` (the route of ``torch.compile`` and direct
    ``torch.ops.pyg_fast`` calls), and an autograd.Function of the same two formulas for
    :func:`run`'s eager calls: torch's wrapper rebuilds the op's arguments from its schema on
    every call (``fill_defaults``: 22 us of a GIN layer's 240 us forward + backward, CPU host)."""
    torch.library.register_autograd(name, backward, setup_context=setup_context)
    packet = getattr(torch.ops.pyg_fast, name.split("::")[1])
    defaults = tuple(a.default_value for a in packet.default._schema.arguments if a.has_default_value())

    def forward(ctx, *args):
        with torch._C._AutoDispatchBelowAutograd():
            output = packet(*args)
        setup_context(ctx, args, output)
        return output

    function = type(f"Eager_{packet.__name__}", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    _EAGER[packet] = (function, (None,) * (len(packet.default._schema.arguments) - len(defaults)) + defaults)


# Helpers on prepared layouts -------------------------------------------------------------------
def reduce_csr(x2: Tensor, src_index: Tensor, ptr: Tensor, weight: Optional[Tensor], reduce: str,
               launch: Optional[tuning.Launch] = None) -> Tensor:
    """``out[r] = reduce over e in ptr[r]:ptr[r+1] of weight[e] * x2[src_index[e]]`` for x2 [N, F],
    edges already in destination order, ``src_index`` int64 and ``ptr`` covering every edge (both
    prepared by ``_layout``), ``weight`` [E, H] in x2's dtype or None. No checks: the layers call
    this per layer on a graph prepared once. Runs in feature slices where ``tuning.feature_slices``
    says so (every reduce is per feature); ``launch``: what :func:`csr_launch` gave, if known."""
    heads = 1 if weight is None else weight.size(1)
    if launch is None:
        launch = csr_launch(x2, ptr, src_index.numel(), heads)
    if launch is None:  # split, not narrow: the gradient of the slices is one concatenation, not one zero fill each
        slices = tuning.feature_slices(x2, src_index.numel(), heads)
        return torch.cat([reduce_csr(part, src_index, ptr, weight, reduce)
                          for part in x2.split(x2.size(1) // slices, dim=1)], dim=1)
    # only without gradients, where the copy was timed (an eager training forward reads int64)
    narrow = not (torch.is_grad_enabled() and (x2.requires_grad or (weight is not None and weight.requires_grad)))
    x2, weight = x2.contiguous(), None if weight is None else weight.contiguous()
    if launch.trial is not None:
        launch.trial.run(lambda candidate: _index_reduce(x2, src_index, ptr, weight, reduce, candidate, narrow))
    return _index_reduce(x2, src_index, ptr, weight, reduce, launch, narrow)


def _index_reduce(x2: Tensor, src_index: Tensor, ptr: Tensor, weight: Optional[Tensor], reduce: str,
                  launch: tuning.Launch, narrow: bool) -> Tensor:
    """``pyg_fast::index_segment_reduce`` with ``launch``, over an int32 copy of ``src_index`` where
    ``narrow`` and the launch's schedule gains by one."""
    if narrow and launch.config and launch.config[0] in _INT32_SCHEDULES:
        src_index = _layout.narrow_gather_index(src_index, x2)
    return run(torch.ops.pyg_fast.index_segment_reduce, x2, src_index, ptr, weight, reduce, launch.config,
               launch.data)


def csr_launch(x2: Tensor, ptr: Tensor, num_edges, heads: int = 1) -> Optional[tuning.Launch]:
    """The launch of :func:`reduce_csr` over whole rows of ``x2``; None where it runs in feature
    slices."""
    if tuning.feature_slices(x2, num_edges, heads) > 1:
        return None
    return tuning.segment_launch(x2, ptr, num_edges, gather=True, heads=heads)


def reduce_rows(src3: Tensor, layout: _layout.SegmentLayout, reduce: str,
                launch: Optional[tuning.Launch] = None) -> Tensor:
    """Reduces ``src3`` [B, E, F] over its rows into ``layout``'s segments: [B, V, F]; ``launch``:
    what :func:`rows_launch` gave, if known."""
    if layout.perm is None:
        if launch is None:
            launch = rows_launch(src3, layout)
        src3 = src3.contiguous()
        if launch.trial is not None:
            launch.trial.run(lambda candidate: run(torch.ops.pyg_fast.segment_reduce, src3, layout.ptr, reduce,
                                                   candidate.config, candidate.data))
        return run(torch.ops.pyg_fast.segment_reduce, src3, layout.ptr, reduce, launch.config, launch.data)
    if src3.size(0) == 1:
        # squeeze, not src3[0]: a select's backward zero-fills and copies an [1, E, F] gradient
        # (PyG's SAGE step on 500 k edges with patch(), CPU: 82 of 762 ms in fill_)
        return reduce_rows_2d(src3.squeeze(0), layout, reduce, launch).unsqueeze(0)
    return reduce_rows(src3.index_select(1, layout.perm), _layout.SegmentLayout(layout.ptr, None), reduce)


def reduce_rows_2d(rows: Tensor, layout: _layout.SegmentLayout, reduce: str,
                   launch: Optional[tuning.Launch] = None) -> Tensor:
    """:func:`reduce_rows` of one batch given as ``rows`` [E, F]: [V, F]. Where the layout has a
    permutation the kernel gathers the rows in sorted order, and no [1, E, F] view is made (a view
    costs 2.6 us, CPU host)."""
    if layout.perm is not None:
        return reduce_csr(rows, layout.perm, layout.ptr, None, reduce, launch)
    return reduce_rows(rows.unsqueeze(0), layout, reduce, launch).squeeze(0)


def rows_launch(src3: Tensor, layout: _layout.SegmentLayout) -> Optional[tuning.Launch]:
    """The launch :func:`reduce_rows` takes for ``src3`` ([1, E, F] where ``layout`` has a
    permutation); None where its gather runs in feature slices."""
    if layout.perm is None:
        return tuning.segment_launch(src3, layout.ptr, src3.size(1))
    return csr_launch(src3.squeeze(0), layout.ptr, src3.size(1))


# A reused index's (or pointer's) reduction over its rows, kept with it once its layout and launch
# are settled: one lookup where the layout's, the launch's and the COO route's use count took three
# with their checks (segment_reduce on pubmed, F = 16, H100 hosts: 47.7 -> 30.9 us a call; torch's
# index_add_ 15-19; a reused pointer on a tiny input, CPU host: 51-56 -> 39-45). Looked up without
# storing, so that an index used once stores nothing.
def kept_key(values: Tensor, rows: int, features: int, index: Optional[Tensor], dim_size: Optional[int],
             is_sorted: Optional[bool], by: str = "index") -> Optional[Tuple]:
    """The key under which ``index`` (a COO index, or a CSR pointer where ``by="ptr"``) keeps its
    (layout, launch) (see :func:`keep_rows`) for ``values`` as one batch of ``rows`` rows of
    ``features`` values (``_layout.peek`` reads it), or None where nothing is kept: a traced call,
    an index of another type, a segment count to read from the index, a forced launch, an index
    with nothing cached yet (a fresh graph's: its first call keeps nothing and skips building the
    key)."""
    if not keeps(index, values, dim_size):
        return None
    return "kept_rows", by, dim_size, is_sorted, rows, features, values.dtype, values.device


def keeps(index: Optional[Tensor], values: Tensor, dim_size: Optional[int]) -> bool:
    """Whether a call over ``index`` may keep its layout and launch with it (see :func:`kept_key`):
    a plain tensor with something cached already, a segment count given, eager, no forced launch."""
    # eager() before known(): Dynamo would trace known()'s lookup by id() and recompile on it
    return (type(index) is Tensor and dim_size is not None and not tuning.overridden() and _layout.eager(values)
            and _layout.known(index))


def final_launch(launch: Optional[tuning.Launch], values: Tensor) -> bool:
    """Whether ``launch`` is the one later calls take: whole rows, chosen from the graph's
    statistics on CUDA (a graph's first calls there get ``AUTO``) and settled (no trial pending),
    any on the CPU."""
    return launch is not None and (launch is not tuning.AUTO or not values.is_cuda) and launch.trial is None


def keep_rows(key: Optional[Tuple], index: Tensor, src3: Tensor, layout: _layout.SegmentLayout, dim_size: int,
              is_sorted: Optional[bool]) -> Optional[tuning.Launch]:
    """The launch to give :func:`reduce_rows` for ``src3`` over ``index``'s ``layout`` (None: let
    it choose), kept with ``index`` under ``key`` with the layout where both are final: the layout
    settled, the launch chosen from the graph's statistics (or left to the op on the CPU), whole
    rows; a pointer's layout is final at once."""
    if key is None or (key[1] == "index" and not _layout.coo_settled(index, dim_size, is_sorted)):
        return None
    launch = rows_launch(src3, layout)
    if final_launch(launch, src3):
        # None for a layout that is the pointer itself (int64 already): held in its own cache, it
        # would never be freed
        kept = (None if layout.ptr is index else layout, launch)
        _layout.cached(index, key, lambda: kept)
    return launch


def gather_rows(values: Tensor, index: Tensor) -> Tensor:
    """``values.index_select(0, index)`` for an int64 ``index`` in range, differentiable. Rows of
    several floating values go through the gather kernel, each row a segment of one edge: torch's
    CUDA index_select is bound by the block launch rate there (23 M rows of 16 bytes: 14 ms
    against 0.46 ms here). Rows of one value are torch's (223 k scalars: 0.017 ms and 13 us of
    host time against 0.047 ms and 84 us here). Under torch.compile Inductor writes the gather
    itself, fused with what reads it (the compiled GCN step on a 23 M-edge graph spent 5.4 of its
    15.7 ms gathering scalars through the segment kernel)."""
    if not values.is_floating_point() or values.dim() == 0 or values.numel() == values.size(0) or (
            not values.is_cuda) or (not torch.jit.is_tracing() and not _layout.eager(values, index)):
        return values.index_select(0, index)
    unit_ptr = _layout.cached(index, ("unit_ptr",), lambda: torch.arange(index.numel() + 1, device=index.device))
    out = reduce_csr(values.reshape(values.size(0), -1), index, unit_ptr, None, "sum")
    return out.view((index.numel(),) + tuple(values.shape[1:]))


def weight_in_order(weight: Tensor, dtype: torch.dtype, perm: Optional[Tensor], is_data: bool = False) -> Tensor:
    """``weight`` as [E, H] in ``dtype``, its rows in the order ``perm`` (None: as they are). The
    last weight used without a gradient is kept with the order, one per order and dtype (a fixed
    SpMM: gathering 23 M weights added 0.09 ms to a 0.21 ms call, H200; a sliced reduction's
    backward asks once a slice); a new weight replaces it rather than piling up beside it.

    Where recorded, weights that no gradient reaches (``is_data``: a graph's normalisation) are
    memoised with the graph when both are unchanged copies from its memo (the gather of a 23
    M-edge graph's weights cost 0.29 ms a compiled GCN step, the copy out of the memo 0.06 ms,
    H100); computed ones (attention) are a gather that the compiler writes and fuses."""
    if perm is None:
        return weight_as(weight, dtype)
    recorded = not _layout.eager(weight, perm)
    if (weight.requires_grad and torch.is_grad_enabled()) or (recorded and not is_data):
        return gather_rows(weight_as(weight, dtype), perm)
    if recorded:
        return _layout._derive("in_order", [weight_as(weight, dtype), perm], [])[0]
    kept = _layout.cached(perm, ("weight_in_order", dtype), lambda: [None, -1, None])
    if kept[0] is None or kept[0]() is not weight or kept[1] != weight._version:
        kept[:] = [weakref.ref(weight), weight._version, gather_rows(weight_as(weight, dtype), perm)]
    return kept[2]


# The memo's gather (once a graph) through the gather kernel: torch's index_select of 23 M weight
# rows of 4 heads took 14 ms a call.
_layout._DERIVED["in_order"] = lambda values, perm: [gather_rows(values, perm)]


def weight_as(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """An edge weight [E] or [E, H] as [E, H] in ``dtype``."""
    w2 = weight.unsqueeze(1) if weight.dim() == 1 else weight
    return w2 if w2.dtype == dtype else w2.to(dtype)


def scatter_sum(values: Tensor, index: Tensor, num_rows: int) -> Tensor:
    """Sums per-edge ``values`` [E, ...] into rows ``index`` (validated int64) of [num_rows, ...].

    Recorded (compile, trace), where a grouping could not be kept for the next step, it is torch's
    atomic ``index_add``: regrouping a graph costs a sort every step, which cost more than the
    whole index_add at both sizes timed on an H100 host (10 k edges: 33 us against 70 us for the
    sort alone; 1.2 M edges: 160 us against 205 us). In eager mode an index's first uses take
    the COO route (``coo_route``: GAT's scores on a sampled graph, used once), and the grouping,
    kept with the index, its later ones (a graph reused step after step: on reddit2_like's 23 M
    destinations, 4-value rows, 0.20 ms grouped against 0.67 ms for torch's atomic scatter_add,
    H200; the COO route was not timed there)."""
    if not _layout.eager(values, index):
        return values.new_zeros((num_rows,) + values.shape[1:]).index_add_(0, index, values)
    # [E, H] values (GAT's scores) take no view in or out (2.6 us each, CPU host)
    rows = values if values.dim() == 2 else values.reshape(values.size(0), math.prod(values.shape[1:]))
    if coo_route(index, ("scatter_sum", num_rows), values.numel()):
        out = gather_scatter(rows, None, index, None, num_rows, "sum", None)
    else:
        out = reduce_rows_2d(rows, _layout.coo_layout(index, num_rows), "sum")
    return out if values.dim() == 2 else out.view((num_rows,) + values.shape[1:])


# segment_reduce ----------------------------------------------------------------------------------
@torch.library.register_fake("pyg_fast::segment_reduce")
def _(src, ptr, reduce, config=(), schedule_data=None):
    return src.new_empty(src.size(0), ptr.size(0) - 1, src.size(2))


@torch.library.register_fake("pyg_fast::segment_reduce_backward")
def _(grad_out, src, out, ptr, reduce, num_rows):
    return grad_out.new_empty(grad_out.size(0), num_rows, grad_out.size(2))


# index_segment_reduce (gather-reduce, SpMM) -------------------------------------------------------
@torch.library.register_fake("pyg_fast::index_segment_reduce")
def _(x, src_index, ptr, weight, reduce, config=(), schedule_data=None):
    return x.new_empty(ptr.size(0) - 1, x.size(1))


@torch.library.register_fake("pyg_fast::index_segment_reduce_extremum_backward")
def _(grad_out, x, src_index, ptr, weight, out):
    return x.new_empty(src_index.size(0), x.size(1))


def _gather_setup(ctx, inputs, output):
    x, src_index, ptr, weight, reduce = inputs[:5]
    extremum = reduce in EXTREMA
    # x only where the backward reads it (fewer saved tensors to unpack, x freed sooner)
    ctx.save_for_backward(x if extremum or ctx.needs_input_grad[3] else None, src_index, ptr, weight,
                          output if extremum else None)
    ctx.reduce = reduce
    ctx.num_src = x.size(0)
    ctx.weight_is_data = weight is not None and not weight.requires_grad  # the backward's copy has no flag


def _gather_backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
    x, src_index, ptr, weight, out = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[3]
    grad_out = grad_out.contiguous()
    N, F = ctx.num_src, grad_out.size(1)
    E, V, H = src_index.numel(), ptr.numel() - 1, 1 if weight is None else weight.size(1)
    # src_index as the forward read it (int32 from a layout on CUDA): the grouping by source is
    # kept with that tensor; the kernels below that take int64 get an int64 copy
    grad_x = grad_w = None
    if ctx.reduce in EXTREMA:
        src_long = src_index.long()
        grad_msg = torch.ops.pyg_fast.index_segment_reduce_extremum_backward(
            grad_out, x, src_long, ptr, weight, out).view(E, H, F // H)
        if need_x:  # the messages summed per source, on the same grouping by source as below
            msg = grad_msg * weight.unsqueeze(-1) if weight is not None else grad_msg
            t = _layout.transposed_layout(src_index, ptr, N)
            grad_x = reduce_csr(msg.view(E, F), t.perm, t.ptr, None, "sum")
        if need_w:
            grad_w = (grad_msg * gather_rows(x, src_long).view(E, H, F // H)).sum(-1)
        return grad_x, None, None, grad_w, None, None, None
    if ctx.reduce == "mean":  # divided, as PyG's mean backward does: the same rounding
        grad_out = grad_out / _layout.segment_sizes(ptr, grad_out.dtype)
    if need_x and coo_route(src_index, ("transposed", N), E * F):  # no regrouping of a graph's first uses
        grad_x = gather_scatter(grad_out, _layout.ptr_to_index(ptr, E), src_index.long(), weight, N, "sum", None)
    elif need_x:
        grad_x = sum_by_source(grad_out, src_index, ptr, weight, N, ctx.weight_is_data)
    if need_w:
        dst_index = _layout.ptr_to_index(ptr, E)
        grad_w = run(torch.ops.pyg_fast.sddmm, grad_out.view(V, H, F // H), x.view(N, H, F // H), dst_index,
                     src_index.long(), "dot")
    return grad_x, None, None, grad_w, None, None, None


def sum_by_source(grad_out: Tensor, src_index: Tensor, ptr: Tensor, weight: Optional[Tensor], num_src: int,
                  weight_is_data: bool) -> Tensor:
    """The adjoint of :func:`reduce_csr`'s sum over (``src_index``, ``ptr``): ``grad_out`` [V, F]
    summed into the ``num_src`` sources, weighted by ``weight`` [E, H] (None: 1), on the grouping
    by source kept with ``src_index``, and the weight in that order kept with it as
    :func:`weight_in_order` keeps it (``weight_is_data``: no gradient reaches it)."""
    t = _layout.transposed_layout(src_index, ptr, num_src, with_perm=weight is not None)
    w_t = None if weight is None else weight_in_order(weight, weight.dtype, t.perm, weight_is_data)
    return reduce_csr(grad_out, t.dst_index, t.ptr, w_t, "sum")


register_autograd("pyg_fast::index_segment_reduce", _gather_backward, _gather_setup)


# gather_scatter (the COO route of a gather-reduce: no grouping) ------------------------------------
COO_REDUCES = ("sum", "mean")
# gather_scatter's flag_slot where another op checked the indices: no flags (kCheckedBefore in
# csrc/ops/gather_scatter.h)
CHECKED_BEFORE = -2


def coo_route(index: Tensor, key: Tuple, elements: int) -> bool:
    """Whether a sum or mean over ``index`` (``elements``: edges x features) takes the COO route
    (:func:`gather_scatter`, no grouping), never where deterministic algorithms are asked for
    (CUDA atomics add in no fixed order). In eager mode on the index's first uses under ``key``
    (before ``_layout.REUSED_FROM_USE``; a graph reused step after step is grouped once then), up
    to ``tuning.COO_MAX_ELEMENTS`` values. Recorded by torch.compile, where no use can be counted,
    by size alone; a ``torch.jit.trace`` keeps the grouped route (the choice would be a property of
    its example)."""
    if index.is_cuda and torch.are_deterministic_algorithms_enabled():
        return False
    limit = tuning.COO_MAX_ELEMENTS.get(index.device.type, 0)
    if not _layout.eager(index):
        # sizes known only at run time (unbacked: a segment count read from data) keep the grouping
        return not torch.jit.is_tracing() and guard_or_false(elements <= limit)
    if elements > limit:
        return False
    return _layout.use_count(index, ("coo",) + key) < _layout.REUSED_FROM_USE


def gather_scatter(x2: Tensor, src_index: Optional[Tensor], dst_index: Tensor, weight: Optional[Tensor],
                   num_rows: int, reduce: str, names: Optional[str]) -> Tensor:
    """``reduce`` ('sum' or 'mean') over the edges e of ``weight[e] * x2[src_index[e]]`` (x2 [N,
    F]; ``src_index`` None: row e) into rows ``dst_index[e]`` of [num_rows, F], both indices int64,
    in any order: atomics rather than a grouping (see :func:`coo_route`). Edges with an end
    out of range are skipped and reported under ``names`` ('src name|src size name|dst name|dst
    size name'; None: not reported, a call on indices another call reported). On the CPU the
    kernel raises them itself, on every call. In eager mode on CUDA the kernel raises them in a
    slot of the flag ring (``_deferred.flag_slot``: no copy; a copied report cost 60-110 us of host
    time a call on an H100 host); with validate="sync" once per pair of index tensors and sizes, as
    the grouped route checks an index once. Where recorded, the kernel raises them for its call site
    (``AT_SITE``), read by the next such call or the next eager check."""
    def call(slot: int, site: str = ""):
        return run(torch.ops.pyg_fast.gather_scatter, x2.contiguous(), src_index, dst_index,
                   None if weight is None else weight.contiguous(), num_rows, reduce == "mean", slot, site)
    if names is None:
        return call(CHECKED_BEFORE)[0]
    if dst_index.device.type == "cpu":
        # the kernel raises at once, worded as _range_messages: no flags to copy out and read (a
        # fresh index, 64 x 4, CPU host: 39-40 -> 27-28 us a call)
        return call(_deferred.AT_SITE, names)[0]
    if _layout.eager(x2, dst_index):
        return _deferred.checked(call, functools.partial(_range_messages, names, x2.size(0), num_rows),
                                 dst_index.device,
                                 lambda: _first_report(src_index, dst_index, (num_rows, x2.size(0), names)))[0]
    return call(_deferred.at_site(), names)[0]


def _range_messages(names: str, num_src: int, num_dst: int) -> Tuple[_deferred.Message, _deferred.Message]:
    src_name, src_size, dst_name, dst_size = names.split("|")
    return _layout.range_message(src_name, num_src, src_size), _layout.range_message(dst_name, num_dst, dst_size)


def _first_report(src_index: Optional[Tensor], dst_index: Tensor, key: Tuple) -> bool:
    """Whether this is the first report of these indices' flags under ``key``, keyed on the tensors
    the indices view and where they sit in them (as the caches are): every layer slices the ends of
    its edge_index anew, and keyed on the slices themselves a 3-layer SAGE reported one graph three
    times."""
    key = ("coo_reported",) + key
    if src_index is None:
        seen = _layout.cached(dst_index, key, lambda: [False])
    else:
        seen = _layout.cached_with(dst_index, src_index, key, lambda: [False])
    first, seen[0] = not seen[0], True
    return first


@torch.library.register_fake("pyg_fast::gather_scatter")
def _(x, src_index, dst_index, weight, num_rows, mean, flag_slot=-1, site=""):
    flags = 2 if flag_slot >= -1 else 0
    return x.new_empty(num_rows, x.size(1)), x.new_empty(num_rows if mean else 0), dst_index.new_empty(flags)


# sddmm ------------------------------------------------------------------------------------------
@torch.library.register_fake("pyg_fast::sddmm")
def _(a, b, a_index, b_index, op, flag_slot=-1):
    E = a_index.size(0)
    return a.new_empty(E, a.size(1)) if op == "dot" else a.new_empty(E, a.size(1), a.size(2))


def _sddmm_setup(ctx, inputs, output):
    a, b, a_index, b_index, op = inputs[:5]
    reads_operands = op not in ("add", "sub")  # add/sub gradients are the incoming gradient, summed
    ctx.save_for_backward(a if reads_operands else None, b if reads_operands else None, a_index, b_index)
    ctx.op = op
    ctx.num_rows = (a.size(0), b.size(0))


def _gather_by(values: Tensor, values_index: Tensor, weight: Tensor, index: Tensor, num_rows: int) -> Tensor:
    """``out[i] = sum over e with index[e] = i of weight[e] * values[values_index[e]]`` for values
    [N, H, D] and weight [E, H]: [num_rows, H, D] (a weighted SpMM over the edges grouped by index)."""
    layout = _layout.coo_layout(index, num_rows)
    src = values_index if layout.perm is None else _layout.cached_with(
        values_index, layout.perm, ("in_order",), lambda: values_index.index_select(0, layout.perm))
    w = weight if layout.perm is None else gather_rows(weight, layout.perm)
    out = reduce_csr(values.reshape(values.size(0), -1), src, layout.ptr, w.to(values.dtype), "sum")
    return out.view((num_rows,) + values.shape[1:])


def _sddmm_backward(ctx, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
    a, b, a_index, b_index = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    num_a, num_b = ctx.num_rows
    grad_a = grad_b = None
    if ctx.op == "dot":  # d out[e,h] / d a[i,h,:] = b[j,h,:]: a weighted gather-reduce (SpMM)
        grad = grad.contiguous()
        if need_a:
            grad_a = _gather_by(b, b_index, grad, a_index, num_a)
        if need_b:
            grad_b = _gather_by(a, a_index, grad, b_index, num_b)
        return grad_a, grad_b, None, None, None, None
    if ctx.op == "add":
        ga, gb = grad, grad
    elif ctx.op == "sub":
        ga, gb = grad, -grad
    else:  # mul, div: the gradients read the gathered operands
        a_e, b_e = gather_rows(a, a_index), gather_rows(b, b_index)
        ga, gb = (grad * b_e, grad * a_e) if ctx.op == "mul" else (grad / b_e, -grad * a_e / (b_e * b_e))
    if need_a:
        grad_a = scatter_sum(ga, a_index, num_a)
    if need_b:
        grad_b = scatter_sum(gb, b_index, num_b)
    return grad_a, grad_b, None, None, None, None


register_autograd("pyg_fast::sddmm", _sddmm_backward, _sddmm_setup)


# edge_softmax -----------------------------------------------------------------------------------
@torch.library.register_fake("pyg_fast::edge_softmax")
def _(src, ptr, lanes=0):
    return torch.empty_like(src)


@torch.library.register_fake("pyg_fast::edge_softmax_backward")
def _(out, grad_out, ptr, lanes=0):
    return torch.empty_like(out)


@torch.library.register_fake("pyg_fast::edge_softmax_coo")
def _(src, index, num_nodes, flag_slot=-1):
    return torch.empty_like(src), index.new_empty(1)


@torch.library.register_fake("pyg_fast::edge_softmax_coo_backward")
def _(out, grad_out, index, num_nodes):
    return torch.empty_like(out)


@torch.library.register_fake("pyg_fast::index_range_flags")
def _(indices, sizes, flag_slot=-1):
    return indices[0].new_empty(len(indices))


@torch.library.register_fake("pyg_fast::scatter_extremum")
def _(src, index, num_rows, is_max, flag_slot=-1):
    return src.new_empty(num_rows, src.size(1)), index.new_empty(1)


@torch.library.register_fake("pyg_fast::scatter_extremum_backward")
def _(grad_out, src, index, out):
    return torch.empty_like(src)


def coo_reported(op, src2: Tensor, index: Tensor, size: int, name: str, size_name: str, *args) -> Tensor:
    """``op(src2, index, size, *args)`` for a COO op that returns ``(out, flags)``
    (``pyg_fast::scatter_extremum``, ``pyg_fast::edge_softmax_coo``: rows or edges of ``src2`` in
    any order over the int64 ``index``, no grouping; see :func:`coo_route`): ``out``, with an
    index out of ``[0, size)`` reported (its rows were skipped) as :func:`gather_scatter` reports."""
    return _deferred.checked(lambda slot: run(op, src2.contiguous(), index, size, *args, slot),
                             lambda: [_layout.range_message(name, size, size_name)], index.device,
                             lambda: _first_report(None, index, (size, name, size_name)))[0]
