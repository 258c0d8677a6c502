"""Launch decisions: here those of the CUDA segment kernels (segment_reduce, index_segment_reduce /
SpMM); the Triton segmented matmul's in ``segment_matmul``, graph reordering's in ``reorder``.

A launch is a config ``[schedule, lanes, vector width, threads per block, rows per chunk or
group]`` (see ``pyg_fast/csrc/cuda/segment_launch.cuh``) and, for the graph-aware schedules, a
per-graph layout. Schedules: ``row`` (GeoT sequential: a thread group per segment, lanes over
features), ``row_parallel`` (GeoT parallel: lanes over a segment's rows, warp-shuffle combine),
``chunk`` (GeoT balanced: fixed chunks of rows, a fix-up pass for split segments), ``edges`` (a
warp per chunk of rows, lanes over consecutive rows, for small F), ``groups`` (GNNAdvisor's
neighbour groups; needs the group table) and ``balanced`` (G-Sparse's degree-sorted rows; needs
the row order).

The choice is made in C++ (``pyg_fast/csrc/tuning/segment_schedule.cpp``) by nearest neighbour
in a table measured on the GPU (``rules.json``, written by ``benchmarks/tune_segment.py``; each
entry holds the configuration that did best over it and its nearest entries), over
(log2 E, log2 E/V, log2 F, element size, gather, log2 skew):

- from sizes alone, inside the op, when the call brings no config: under ``torch.compile``,
  ``torch.jit.trace``, and for a graph seen for the first time (skew assumed high);
- here, with the graph's measured skew and the graph-aware schedules, for a graph reused in eager
  mode once its statistics have reached the host (``_layout.segment_stats``: computed on the
  device from the second reduction of the same sizes over it, copied without a synchronisation).
  There the nearest entry's ``TRIAL_CANDIDATES`` configurations (for rows wider than the table
  measured, ``WIDE_CANDIDATES`` and the entry's pick) are timed on the call's own data as the
  sweeps time them (a :class:`Trial`, read back without a synchronisation) and the fastest is kept
  (``config.measure_launches``).

``explain`` says what an input gets; ``set_override`` forces a choice (the tuning sweep and the
benchmarks use it).
"""
import json
import os
import statistics
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from pyg_fast.config import config as _config
from pyg_fast.ops import _deferred, _layout
from pyg_fast.tuning.reorder import device_cache_bytes

DEFAULT_RULES = os.path.join(os.path.dirname(__file__), "rules.json")
SCHEDULES: Dict[str, int] = {name: i for i, name in enumerate(torch.ops.pyg_fast.segment_schedule_names())}
GRAPH_AWARE = ("groups", "balanced")

# The fewest values (rows x features) a reduction needs before ``pyg_fast.patch()`` runs it on the
# kernels rather than PyG's scatter, per device type: below, the kernels' extra host time costs
# more than their faster reduction saves. CPU, 2 threads, one layer's forward + backward (stock
# time / patched time): GIN 0.56-0.82x at E x F <= 128 k, 1.29-1.75x from 320 k; SAGE (mean)
# 0.64-0.94x up to 1.3 M, 1.03-1.51x from 1.6 M. H100, the e2e suite's 3-layer GIN and SAGE on a
# reused graph, 64 features: 0.82-1.10x on Cora (0.7 M values a reduction), 1.11-1.27x on arxiv_like (75 M).
PATCH_MIN_ELEMENTS: Dict[str, int] = {"cpu": 2 ** 21, "cuda": 2 ** 25}

# The most values (edges x features) a sum or mean over an index's first uses reduces with atomics
# (the COO route, ``pyg_fast.ops._kernels.coo_route``) rather than grouping the index first, per
# device type; under torch.compile, where no use is counted, over every use. A mean over a new
# index, forward + backward, ms (H100, device time): 37 k edges, F = 16-602: 0.75-0.85 COO against
# 1.11-1.32 grouped; 1.2 M edges x 64 (77 M values): 0.73 against 1.22; 217 k x 602 (131 M): 2.85
# against 2.56; 1.2 M x 256: 2.9 against 1.95. Compiled 3-layer GCN, GIN, SAGE and GAT training
# steps on arxiv_like's reused graph (75 M values), ms: 4.16 / 2.71 / 2.83 / 6.60 COO against
# 4.39 / 2.88 / 2.99 / 6.62 with the grouping memoised behind the compiled graph's Python ops (H100,
# interleaved). CPU (2 threads): 37 k x 16 (0.6 M): 1.17 against 1.61; 5 k x 256 (1.3 M): 3.4
# against 1.2.
COO_MAX_ELEMENTS: Dict[str, int] = {"cpu": 2 ** 20, "cuda": 96 * 2 ** 20}

# What gathering one value over an edge costs in multiply-adds of a dense product, per device
# type: a single-head GATConv sums its sources' own features under the attention and projects the
# sums where that costs less (``GATConv._projects_after``). CPU, 2 threads: 14,328 rows of 4,231
# features into 64 outputs took 334 ms, their attention-weighted sum over 14,328 edges 49 ms and
# over 85,810 edges 345 ms (9.5 and 11). CUDA (H100): the product 0.20 ms, the sums over the
# 85,810 edges 0.43-1.02 ms (4,232 / 4,231 features, the fastest launches tried), 23-55; into
# 4,057 authors (19,645 edges) and 20 venues, 48-89.
GATHER_COST: Dict[str, float] = {"cpu": 12.0, "cuda": 40.0}

# A max or min over an index's first uses (``segment_reduce``'s COO route, ``scatter_extremum``)
# groups the index instead from (features a row, values) on, per device type: its atomics read
# every target row before they write, and at wide rows over many edges those scattered reads cost
# more than the grouping. A new index in random order, device us, COO / grouped (H200):
# arxiv_like (1.17 M rows) F = 32: 184 / 257, F = 64: 340 / 303; a 898 k-row grid graph F = 32:
# 202 / 235, F = 64: 382 / 246; a sampled reddit2_like batch (217 k rows) F = 64: 98 / 132, F = 128
# (26 M values): 171 / 267; reddit2_like (23 M rows) F = 4: 734 / 1450.
EXTREMUM_GROUPED_FROM: Dict[str, Tuple[int, int]] = {"cuda": (64, 2 ** 25)}


def extremum_grouped(device_type: str, rows: int, features: int) -> bool:
    """Whether a max or min over a new index of ``rows`` rows of ``features`` values groups the
    index rather than take the COO route (``EXTREMUM_GROUPED_FROM``)."""
    bound = EXTREMUM_GROUPED_FROM.get(device_type)
    return bound is not None and features >= bound[0] and rows * features > bound[1]


# A gather-reduce whose source rows are each read by many edges (at least this many edges a source
# row, per device type) and together exceed twice the innermost cache and half the outermost runs
# as feature slices of one cache line a row, one after the other, where a slice's rows fit in 1.5
# times the outermost cache: each slice's rows then stay in cache while the edges read them (CUDA:
# the L2 and 128-byte lines; CPU: a core's L2, the last level and 64-byte lines). Weighted SpMM, ms
# whole -> sliced (the slices' copies and the concatenation included):
# - H100, cold L2: 233 k rows, 100 edges a row (reddit2_like), F = 128: 2.80 -> 2.27, F = 256: 6.07
#   -> 4.60 (8 slices; 4: 4.85); 500 k rows (a 64 MB slice, 1.28 x L2), 50 edges a row, F = 128:
#   3.84 -> 3.66; forward + backward, reddit2_like F = 128: 5.71 -> 4.92 (mean: 5.59 -> 4.69), F =
#   256: 12.2 -> 9.8. Fewer edges a row lose: reddit2_like's edges thinned to 33 a row, F = 128:
#   1.00 -> 1.07; 16 a row 0.58 -> 0.81; arxiv_like (7 a row) 0.24 -> 0.45 (2 slices: 0.40). Two
#   slices never paid: reddit2_like F = 64 (1.2 x L2) 1.13 either way, the 500 k-row graph F = 64
#   1.75 -> 1.83.
# - CPU (2 cores, 1 MB L2 each, 32 MB L3), 100 edges a row: 100 k rows, F = 64 105 -> 57 (4 slices;
#   8: 86), F = 128 376 -> 138 (forward + backward 787 -> 378); 50 k rows, F = 256 327 -> 113; 20 k
#   rows, F = 128 31.7 -> 28.0. A slice of 1 M rows (64 MB, 2 x L3) loses at 50 edges a row: F = 64
#   1172 -> 1379 (forward + backward 3589 -> 4057); at 10 a row 291 -> 474. So do rows that fit in
#   L3 anyway: 11 k rows (HGB ACM's projection, 50 edges a row), F = 64 / 256 (2.8 / 11 MB): 2.49 ->
#   3.50, 8.74 -> 13.65; Tolokers (88 a row) F = 256 (12 MB) 18.8 -> 23.1. Fewer edges a row pay
#   on the CPU down to 20 (the six cases measured at 20-30 that the rest of the rule admits: 1.16-1.9x
#   with backward; 100 k rows F = 128 64.5 -> 41.9, 300 k rows F = 64 176 -> 122); at 15 forward +
#   backward lost (46.3 -> 49.8).
SLICE_MIN_EDGES_PER_ROW: Dict[str, int] = {"cuda": 40, "cpu": 20}
_cache_bytes: Dict[Tuple[str, int], Tuple[int, ...]] = {}


def feature_slices(x: Tensor, num_edges, heads: int = 1) -> int:
    """How many feature slices a gather-reduce of ``num_edges`` edges over the rows of ``x`` [N, F]
    runs as (1: whole rows): :func:`slice_count` for one weight head on CUDA and the CPU; 1 for
    symbolic sizes (``torch.compile(dynamic=True)``) and for a forced launch (the tuning sweep
    times whole rows)."""
    num_rows, num_features = x.shape
    device_type = "cuda" if x.is_cuda else "cpu" if x.is_cpu else None
    if (heads != 1 or _override is not None or device_type is None or type(num_rows) is not int
            or type(num_features) is not int or type(num_edges) is not int):
        return 1
    line = 128 if x.is_cuda else 64
    # the common case, decided before the cache sizes are read and before any comparison of sizes
    # that a traced graph may only know from its data (the edge count)
    if not _sliceable_rows(num_features, x.element_size(), line):
        return 1
    return slice_count(num_rows, num_features, num_edges, x.element_size(),
                       _device_caches(device_type, x.get_device() if x.is_cuda else 0), line,
                       SLICE_MIN_EDGES_PER_ROW[device_type])


def slice_count(num_rows: int, num_features: int, num_edges: int, element_size: int, caches: Tuple[int, ...],
                line_bytes: int = 128, min_edges_per_row: int = SLICE_MIN_EDGES_PER_ROW["cuda"]) -> int:
    """The rule above, for cache levels ``caches`` (bytes, innermost first): four or more slices of
    ``line_bytes`` a row, else 1."""
    if (not _sliceable_rows(num_features, element_size, line_bytes) or num_edges < min_edges_per_row * num_rows
            or num_rows * num_features * element_size < max(2 * caches[0], caches[-1] // 2)
            or 2 * num_rows * line_bytes > 3 * caches[-1]):
        return 1
    return num_features // max(line_bytes // element_size, 1)


def _sliceable_rows(num_features: int, element_size: int, line_bytes: int) -> bool:
    """Whether rows of ``num_features`` values cut into four or more whole lines of ``line_bytes``."""
    width = max(line_bytes // element_size, 1)
    return num_features % width == 0 and num_features >= 4 * width


@torch.compiler.assume_constant_result  # read once by torch.compile, not traced
def _device_caches(device_type: str, index: int) -> Tuple[int, ...]:
    """The cache levels the slices are sized for (``reorder.device_cache_bytes``: a CUDA device's
    L2; a CPU core's L2 and the last level)."""
    key = (device_type, index)
    if key not in _cache_bytes:
        _cache_bytes[key] = device_cache_bytes(torch.device(device_type, index))
    return _cache_bytes[key]


_rules: Optional[dict] = None
_override: Optional[Dict] = None

# Configurations a reused graph's input times (the nearest entry's, best first: ``Trial``). Left
# out of the table, the zoo's 17 graphs' 230 inputs (H200 sweep): the first alone is within 10%
# of the best on 82.6% (worst 1.89x), the fastest of the first 3 on 93.9% (1.46x), of 6 on 100%
# (1.09x).
TRIAL_CANDIDATES = 6


def load_rules(path: Optional[str] = None) -> dict:
    """Loads a measured table (``path``, else ``config.tuning_rules``, else the shipped one) into
    the selector and returns it."""
    global _rules
    path = path or _config.tuning_rules or DEFAULT_RULES
    with open(path) as f:
        rules = json.load(f)

    def params(p: dict) -> List[int]:
        return [SCHEDULES[p["schedule"]], p["max_lanes"], p["threads"], p["chunk"]]

    if any("candidates" not in entry for entry in rules["table"]):
        raise ValueError(f"pyg_fast: the rules table {path} has entries without 'candidates' (written by an "
                         "earlier benchmarks.tune_segment); build it again from its sweep with --from-jsonl")
    features = [float(v) for entry in rules["table"] for v in entry["features"]]
    table = [v for entry in rules["table"]
             for v in params(entry["candidates"][0]) + params(entry.get("geot_params", rules["default"]))]
    torch.ops.pyg_fast.set_segment_rules([float(w) for w in rules["weights"]], features, table,
                                         params(rules["default"]))
    _rules = rules
    return rules


def rules() -> dict:
    """The table the selector holds."""
    return _rules if _rules is not None else load_rules()


def set_override(params: Optional[Dict]) -> None:
    """Forces ``params`` (keys schedule, max_lanes, threads, chunk) for every launch from this
    package; None undoes it. ``max_lanes`` 0 and, for ``groups``, ``chunk`` 0 leave lanes and
    group size to GNNAdvisor's model. Graph-aware schedules are forced too (their layout is built
    at once, with one synchronisation), except while tracing."""
    global _override
    _override = params


def overridden() -> bool:
    return _override is not None


def _as_dict(config: Sequence[int]) -> Dict:
    names = list(SCHEDULES)
    return dict(schedule=names[config[0]], lanes=config[1], vec=config[2], threads=config[3], chunk=config[4])


def choose(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool,
           feature_block: int, max_segment: Optional[int] = None, graph_aware: bool = False) -> Dict:
    """The launch parameters of an input (schedule, lanes, vec, threads, chunk)."""
    if _override is not None:
        p = _override
        config = torch.ops.pyg_fast.segment_schedule_resolve(
            SCHEDULES[p["schedule"]], p["max_lanes"], p["threads"], p["chunk"], num_rows, num_segments,
            num_features, element_size, feature_block)
    else:
        config = torch.ops.pyg_fast.segment_schedule(num_rows, num_segments, num_features, element_size, gather,
                                                     feature_block, -1 if max_segment is None else max_segment,
                                                     graph_aware)
    return _as_dict(config)


def features(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool,
             max_segment: Optional[int]) -> List[float]:
    """An input's coordinates in the table (what ``benchmarks/tune_segment.py`` records)."""
    return torch.ops.pyg_fast.segment_schedule_features(num_rows, num_segments, num_features, element_size, gather,
                                                        -1 if max_segment is None else max_segment)


def explain(num_rows: int, num_segments: int, num_features: int, element_size: int = 4, gather: bool = False,
            max_segment: Optional[int] = None, graph_aware: bool = False) -> str:
    """Says which configuration an input gets and why."""
    chosen = choose(num_rows, num_segments, num_features, element_size, gather, num_features, max_segment,
                    graph_aware)
    skew = "unknown skew (a graph seen once, or traced)" if max_segment is None else f"longest segment {max_segment}"
    layouts = "graph-aware layouts allowed" if graph_aware else "no per-graph layout"
    source = "[override]" if _override is not None else f"nearest of {len(rules()['table'])} measured inputs " \
                                                       f"({rules().get('source', 'rules table')})"
    return (f"E={num_rows}, V={num_segments}, F={num_features}, {element_size}-byte values, "
            f"{'gathered' if gather else 'direct'} rows, {skew}, {layouts} -> {chosen} {source}")


class Launch(NamedTuple):
    """The ``config`` and ``schedule_data`` arguments of a segment op; an empty config lets the op
    choose from the sizes. ``trial``: the :class:`Trial` this launch stands in for until it has
    settled (the caller runs it: ``Trial.run``)."""
    config: Sequence[int]
    data: Optional[Tensor]
    trial: Optional["Trial"] = None


class Trial:
    """Candidate launches of one input over a reused graph, timed on a call's own data as the
    sweeps behind the rule table time them: ``run(call)`` launches ``call(launch)`` for every
    candidate once to warm up, then ``ROUNDS`` rounds of all of them, each launch after an L2 flush
    and between CUDA events; ``settled()`` gives the candidate of least median time once the events
    have completed (queried, never waited for), None before. A sleep kernel holds the stream while
    the host queues the launches, so that the events time the kernels back to back and not the
    host's pace; where the sleep ended before the last launch was queued, the timings are dropped
    and the next call runs the trial again with a sleep twice as long, up to ``TRIES`` times, after
    which the rule's pick stays. The extra launches happen once per graph and input: the call that
    starts the trial and its outputs are those of the first candidate, the rule's pick. Nothing runs
    or is read during a CUDA graph capture (the timing launches would be recorded into the graph,
    and events cannot be queried then)."""
    __slots__ = ("launches", "device", "events", "held", "tries")
    # One warm timed launch a candidate (its data in L2, no repeat, unlike the sweeps' flushed
    # median of many) settled on groups of 32 rows where 8 took 10.9 us, 1.21-1.25x (H200:
    # imdb_homogeneous F = 16, wordnet18rr F = 4); timed so, on the best (H100).
    ROUNDS = 5
    # The holding sleep per queued launch (its flush, events and the op's host time): 1 M cycles,
    # 1.5 ms on H200 (655 k cycles a ms), covered 0.45-0.7 ms of queueing 2 rounds of 4 candidates.
    SLEEP_CYCLES_PER_LAUNCH = 125_000
    TRIES = 3

    def __init__(self, launches: List[Launch], device: torch.device):
        self.launches, self.device, self.tries = launches, device, 0
        self.events: Optional[List[Tuple[torch.cuda.Event, torch.cuda.Event]]] = None
        self.held = False  # whether the sleep still ran when the last launch was queued

    def run(self, call) -> None:
        if self.events is not None or _deferred._capturing():
            return
        events = []
        with torch.cuda.device(self.device), torch.no_grad():
            stream = torch.cuda.current_stream()  # the ops' stream: they run on their inputs' device
            # twice the L2, so each timed launch reads its data from memory as in the sweeps (whose flush
            # is 256 MB); written over before each timed launch
            try:
                flush = torch.empty(2 * device_cache_bytes(self.device)[-1], dtype=torch.int8, device=self.device)
            except torch.OutOfMemoryError:  # a call near the memory's end: timed warm rather than failed
                flush = None
            queued = len(self.launches) * (1 + self.ROUNDS)
            torch.cuda._sleep((self.SLEEP_CYCLES_PER_LAUNCH * queued) << self.tries)
            held = torch.cuda.Event()
            held.record(stream)
            for launch in self.launches:
                call(launch)
            for _ in range(self.ROUNDS):
                for launch in self.launches:
                    if flush is not None:
                        flush.zero_()
                    events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
                    events[-1][0].record(stream)
                    call(launch)
                    events[-1][1].record(stream)
        self.events, self.held, self.tries = events, not held.query(), self.tries + 1

    def settled(self) -> Optional[Launch]:
        if self.events is None or _deferred._capturing() or not self.events[-1][1].query():
            return None
        if not self.held:
            if self.tries < self.TRIES:
                self.events = None  # the next call runs it again, with a longer sleep
                return None
            return self.launches[0]
        count = len(self.launches)
        times = [statistics.median(start.elapsed_time(end) for start, end in self.events[k::count])
                 for k in range(count)]
        return self.launches[min(range(count), key=times.__getitem__)]


AUTO = Launch((), None)
# A traced call's launch (kChooseWithGroups in csrc/tuning/segment_schedule.h): the op chooses from
# the sizes with the groups schedule allowed and builds that schedule's layout for the call, as no
# layout can be kept with a recorded graph. With the size-only choice instead, the compiled 3-layer
# SAGE step on reddit2_like spent 6.3 ms in the chunk schedule's kernels against 5.5 ms grouped
# eagerly (H100).
TRACED = Launch((-1,), None)


def segment_launch(values: Tensor, ptr: Tensor, num_rows: int, gather: bool = False, heads: int = 1) -> Launch:
    """The launch of a segment op over ``values`` (rows of F = ``values.size(-1)`` features, ``heads``
    edge-weight heads) into the segments of the CSR pointer ``ptr`` (``num_rows`` rows): ``AUTO``
    on the CPU and for graphs without statistics yet, ``TRACED`` while tracing; else the table's
    choice with the graph's skew, its layout built once per graph (cached with ``ptr``)."""
    if not values.is_cuda:
        return AUTO
    if _override is not None:
        return _forced_launch(values, ptr, num_rows, gather, heads)
    if not _layout.eager(values, ptr):
        return TRACED
    memo = _layout.cached(ptr, ("launches",), dict)
    key = (num_rows, values.size(-1), values.element_size(), gather, heads)
    launch = memo.get(key)
    if launch is not None:
        if launch.trial is not None:
            settled = launch.trial.settled()
            if settled is not None:
                for loser in launch.trial.launches:
                    if loser.data is not None and loser.data is not settled.data:
                        _layout.forget(ptr, _layout_key(loser.config))
                launch = memo[key] = settled
        return launch
    if _layout.first_use(ptr, ("launch",) + key):  # statistics cost 30 ops: not for a graph used once
        return AUTO
    stats = _layout.segment_stats(ptr)
    if stats is None:
        return AUTO
    num_features = values.size(-1)
    sizes = (ptr, stats, num_rows, num_features, values.element_size(), gather, num_features // heads)
    if _config.measure_launches and not torch.are_deterministic_algorithms_enabled():
        launches = _candidates(*sizes)
        launch = memo[key] = launches[0] if len(launches) == 1 else launches[0]._replace(
            trial=Trial(launches, ptr.device))
        return launch
    launch = memo[key] = _chosen(*sizes)
    return launch


# Rows of at least this many features, 4 x the table's widest (256), take WIDE_CANDIDATES (the first
# before a trial has settled) rather than the nearest entry's, which the table extrapolates from
# narrow rows. H100, reused graph, ms, HGB DBLP's 14,328 papers' 4,231 features gathered into
# terms (85,810 edges) / venues (14,328 edges into 20) / authors (19,645): the table's picks
# 1.02 / 1.60 / 0.43; groups of 16 rows, 32 lanes, 512 threads 0.92 / 0.87 / 0.53; row 32.1 / 0.32
# / 1.60; groups of 32, 256 threads 1.03 / 1.07 / 0.77. At 4,232 features (16-byte rows): the
# table's picks 0.43 / 0.33 / 0.18, the first candidate 0.43 / 0.28 / 0.21.
WIDE_FEATURES = 1024
WIDE_CANDIDATES = ({"schedule": "groups", "max_lanes": 32, "threads": 512, "chunk": 16},
                   {"schedule": "row", "max_lanes": 32, "threads": 256, "chunk": 256},
                   {"schedule": "groups", "max_lanes": 32, "threads": 256, "chunk": 32})


def _chosen(ptr: Tensor, stats, num_rows: int, num_features: int, element_size: int, gather: bool,
            feature_block: int) -> Launch:
    """The C++ selector's pick for the graph's skew, with its graph-aware layout (for rows of
    ``WIDE_FEATURES`` and more, the first of ``WIDE_CANDIDATES``)."""
    if num_features >= WIDE_FEATURES:
        return _candidates(ptr, stats, num_rows, num_features, element_size, gather, feature_block)[0]
    p = choose(num_rows, ptr.numel() - 1, num_features, element_size, gather, feature_block, stats.max_segment,
               graph_aware=True)
    return _with_layout([SCHEDULES[p["schedule"]], p["lanes"], p["vec"], p["threads"], p["chunk"]], ptr, stats)


def _candidates(ptr: Tensor, stats, num_rows: int, num_features: int, element_size: int, gather: bool,
                feature_block: int) -> List[Launch]:
    """The distinct launches of the nearest table entry's candidate configurations (the C++
    selector's pick first: the entry it resolves); for wide rows ``WIDE_CANDIDATES``, then the
    entry's first."""
    num_segments = ptr.numel() - 1
    wide = num_features >= WIDE_FEATURES
    nearest = torch.ops.pyg_fast.segment_schedule_entry(num_rows, num_segments, num_features, element_size, gather,
                                                        stats.max_segment)
    if nearest < 0 and not wide:  # nothing measured: the selector's fallback alone
        return [_chosen(ptr, stats, num_rows, num_features, element_size, gather, feature_block)]
    candidates = [] if nearest < 0 else rules()["table"][nearest]["candidates"]
    if wide:  # the table's own pick last, which won at 4,232 features into the authors (0.18 ms)
        candidates = list(WIDE_CANDIDATES) + candidates[:1]
    launches, seen = [], set()
    for p in candidates:
        config = tuple(torch.ops.pyg_fast.segment_schedule_resolve(
            SCHEDULES[p["schedule"]], p["max_lanes"], p["threads"], p["chunk"], num_rows, num_segments, num_features,
            element_size, feature_block))
        grouped = config[0] == SCHEDULES["groups"]
        if config not in seen and (not grouped or config[4] in stats.num_groups):
            seen.add(config)
            launches.append(_with_layout(list(config), ptr, stats))
    return launches


def _layout_key(config: Sequence[int]) -> Tuple:
    """The ``_layout`` cache key of a graph-aware schedule's layout."""
    return ("neighbor_groups", config[4]) if config[0] == SCHEDULES["groups"] else ("balanced_order",)


def _with_layout(config: List[int], ptr: Tensor, stats) -> Launch:
    """A launch of ``config`` with its graph-aware layout, if it has one (built once, cached with ``ptr``)."""
    data = None
    if config[0] == SCHEDULES["groups"]:
        data = _layout.neighbor_groups(ptr, config[4], stats.num_groups[config[4]])
    elif config[0] == SCHEDULES["balanced"]:
        data = _layout.balanced_order(ptr)
    return Launch(config, data)


def _forced_launch(values: Tensor, ptr: Tensor, num_rows: int, gather: bool, heads: int) -> Launch:
    """The launch :func:`set_override` prescribes; a graph-aware layout is built at once (one
    synchronisation for the group count), a graph-aware schedule traced falls back to ``row``."""
    num_features = values.size(-1)
    p = choose(num_rows, ptr.numel() - 1, num_features, values.element_size(), gather, num_features // heads)
    schedule, data = p["schedule"], None
    if schedule in GRAPH_AWARE and not _layout.eager(values, ptr):
        schedule = "row"
    elif schedule == "groups":
        data = _layout.neighbor_groups(ptr, p["chunk"], None)
    elif schedule == "balanced":
        data = _layout.balanced_order(ptr)
    return Launch([SCHEDULES[schedule], p["lanes"], p["vec"], p["threads"], p["chunk"]], data)


load_rules()
