"""Per-input choice of CUDA schedule and tiling for the segment kernels: one selector over
GeoT's format-free schedules and the graph-aware ones (GNNAdvisor, G-Sparse).

The choice depends only on cheap features of the input: number of source rows
E, number of segments V (so the mean segment length E / V), feature size F,
element size, whether rows are gathered, and the skew max/mean segment length
(the maximum is computed once per graph with its layout), plus whether a
graph-aware layout may be used. It is looked up in ``rules.json``: a table of
measured best configurations written by ``benchmarks/tune_segment.py`` from
sweeps on the GPU (nearest entry in (log2 E, log2 E/V, log2 F, element size,
gather, log2 skew) space). Each entry holds the best configuration overall
(``params``) and the best of GeoT's schedules (``geot_params``), taken where no
per-graph layout may be built. The choice is memoised, so repeated calls on one
graph cost a dictionary lookup. CPU kernels take no configuration.

A config is ``[schedule, lanes, vector width, threads per block, rows per chunk or group]``
(see ``pyg_fast/csrc/cuda/segment_launch.cuh``). Schedules:

- ``row`` (GeoT sequential): one thread group per segment, lanes over features;
- ``row_parallel`` (GeoT parallel): one group per segment, lanes over its rows, warp-shuffle
  combine; for small F;
- ``chunk`` (GeoT balanced): one group per fixed-size chunk of rows, for skewed segment lengths;
- ``groups`` (GNNAdvisor): neighbour groups of ``chunk`` rows, dimension workers over features,
  block-level combine in shared memory, one launch (a segment spanning blocks is finished by the
  last of them to arrive); needs the per-graph group table;
- ``balanced`` (G-Sparse): one warp per segment in degree-sorted order, staged indices, strided
  register tiles; needs the per-graph row order;
- ``edges`` (GeoT parallel, across segments): one warp per fixed-size chunk of rows; each group of
  lanes walks a run of consecutive rows sequentially and a warp-segmented scan joins the runs;
  for small F, where a lane per feature leaves lanes idle and a group per segment leaves lanes
  idle on short segments.

Graph-aware layouts are built once per graph (cached with its CSR pointer, reused by the
forward and backward passes), from the second reduction over the same graph on: a graph used
once never pays for them. Under ``torch.compile`` only GeoT's schedules are used. Where a
table entry leaves the group size or the dimension workers to the model (value 0), GNNAdvisor's
rules fill them in: group size near the mean degree, dimension workers near F / 3.
``explain`` shows a decision, ``set_override`` forces one.
"""
import json
import math
import os
from functools import lru_cache
from typing import Dict, List, NamedTuple, Optional, Sequence

from torch import Tensor

from pyg_fast.ops import _layout

# The shipped table; PYG_FAST_TUNING_RULES names another (e.g. one measured on your GPU).
RULES_PATH = os.environ.get("PYG_FAST_TUNING_RULES") or os.path.join(os.path.dirname(__file__), "rules.json")
SCHEDULES = {"row": 0, "chunk": 1, "row_parallel": 2, "groups": 3, "balanced": 4, "edges": 5}
GRAPH_AWARE = ("groups", "balanced")
# Schedules that cut the rows into fixed chunks: the segments must cover every row (else "row").
CHUNKED = ("chunk", "edges")
# Benchmark method name of each schedule (suite "schedule_select").
METHOD_NAMES = {"row": "geot_sr", "row_parallel": "geot_pr", "chunk": "geot_chunk", "edges": "geot_edges",
                "groups": "advisor_groups", "balanced": "gsparse_balanced"}
BALANCED_TILE = 2  # output vectors per thread of the balanced schedule: kBalancedTile in segment_reduce.cuh
# A graph-aware layout is built on this reduction over the same CSR pointer, not before.
LAYOUT_AFTER_USES = 2

_override: Optional[Dict] = None


@lru_cache(maxsize=None)
def rules() -> dict:
    with open(RULES_PATH) as f:
        return json.load(f)


def overridden() -> bool:
    """Whether :func:`set_override` forces the launches now (callers must not reuse kept ones)."""
    return _override is not None


def set_override(params: Optional[Dict]) -> None:
    """Forces ``params`` (keys schedule, max_lanes, threads, chunk) for every launch; None undoes it.

    ``max_lanes`` 0 and, for ``groups``, ``chunk`` 0 leave lanes and group size to GNNAdvisor's model.
    Graph-aware schedules are forced too (their layout is built at once), except while tracing.
    Used by the tuning sweep, the benchmarks and for experiments.
    """
    global _override
    _override = params


# Skew assumed where the longest segment is unknown (under torch.compile): prefer balance.
UNKNOWN_SKEW = 64.0


def features(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool,
             max_segment: Optional[int]) -> List[float]:
    mean_segment = max(num_rows, 1) / max(num_segments, 1)
    skew = UNKNOWN_SKEW if max_segment is None else max(max_segment, 1) / mean_segment
    return [math.log2(max(num_rows, 1)), math.log2(mean_segment), math.log2(max(num_features, 1)),
            float(element_size), float(gather), math.log2(max(skew, 1.0))]


def _distances(feat: List[float]) -> List[float]:
    weights = rules()["weights"]
    return [sum(w * (a - b) ** 2 for w, a, b in zip(weights, feat, e["features"])) for e in rules()["table"]]


def _nearest_entry(feat: List[float]) -> Optional[Dict]:
    table = rules()["table"]
    if not table:
        return None
    dist = _distances(feat)
    return table[min(range(len(table)), key=dist.__getitem__)]


def _table_params(feat: List[float], graph_aware: bool) -> Dict:
    entry = _nearest_entry(feat)
    if entry is None:
        return rules()["default"]
    if graph_aware or entry["params"]["schedule"] not in GRAPH_AWARE:
        return entry["params"]
    return entry.get("geot_params", rules()["default"])


def explain(num_rows: int, num_segments: int, num_features: int, element_size: int = 4, gather: bool = False,
            max_segment: Optional[int] = None, graph_aware: bool = False) -> str:
    """Says which configuration an input gets and from which measured table entry.

    ``graph_aware``: whether a per-graph layout may be used (the graph is reused, not tracing).
    """
    feat = features(num_rows, num_segments, num_features, element_size, gather, max_segment)
    nearest = _nearest_entry(feat)
    chosen = choose(num_rows, num_segments, num_features, element_size, gather, num_features, max_segment,
                    graph_aware)
    layouts = "graph-aware layouts allowed" if graph_aware else "GeoT schedules only (no per-graph layout)"
    measured = nearest and {k: nearest.get(k) for k in ("params", "geot_params") if k in nearest}
    override = " [override]" if _override is not None else ""
    return (f"features {[round(f, 2) for f in feat]}, {layouts} -> nearest measured input "
            f"{nearest and nearest['features']} {measured} -> {chosen}{override} ({rules()['source']})")


def vector_width(num_features: int, element_size: int, feature_block: int) -> int:
    """Widest vector (at most 16 bytes) whose length divides the feature size and block."""
    vec = max(1, 16 // element_size)
    while vec > 1 and (num_features % vec or feature_block % vec):
        vec //= 2
    return vec


def choose(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool,
           feature_block: int, max_segment: Optional[int] = None, graph_aware: bool = False) -> Dict:
    """The launch parameters for an input (schedule, lanes, vec, threads, chunk)."""
    if _override is not None:
        return _resolve(_override, num_rows, num_segments, num_features, element_size, feature_block)
    return _choose_from_table(num_rows, num_segments, num_features, element_size, gather, feature_block,
                              max_segment, graph_aware)


@lru_cache(maxsize=4096)
def _choose_from_table(num_rows, num_segments, num_features, element_size, gather, feature_block, max_segment,
                       graph_aware):
    feat = features(num_rows, num_segments, num_features, element_size, gather, max_segment)
    return _resolve(_table_params(feat, graph_aware), num_rows, num_segments, num_features, element_size,
                    feature_block)


def _pow2_near(value: float, lo: int, hi: int) -> int:
    """The power of two nearest to ``value`` (in log scale), clamped to [lo, hi]."""
    return int(min(hi, max(lo, 2 ** round(math.log2(max(value, 1.0))))))


def advisor_group_size(num_rows: int, num_segments: int) -> int:
    """GNNAdvisor's neighbour-group size: near the mean segment length (degree), 2 to 64 rows."""
    return _pow2_near(num_rows / max(num_segments, 1), 2, 64)


def advisor_lanes(num_features: int, vec: int) -> int:
    """GNNAdvisor's dimension workers: about F / 3 features per pass, here in vectors of ``vec``."""
    return _pow2_near(num_features / (3 * vec), 1, 32)


def _resolve(params: Dict, num_rows: int, num_segments: int, num_features: int, element_size: int,
             feature_block: int) -> Dict:
    """Concrete launch parameters: vector width from F; lanes from F (or the rows, for row_parallel);
    GNNAdvisor's model where ``max_lanes`` or a group's ``chunk`` is 0."""
    schedule = params["schedule"]
    vec = vector_width(num_features, element_size, feature_block)
    chunk = params["chunk"]
    if schedule == "groups" and chunk == 0:
        chunk = advisor_group_size(num_rows, num_segments)
    if params["max_lanes"] == 0:
        lanes = advisor_lanes(num_features, vec)
    else:
        # Balanced threads hold BALANCED_TILE vectors each; row_parallel's lanes split rows.
        per_lane = vec * (BALANCED_TILE if schedule == "balanced" else 1)
        lanes = params["max_lanes"] if schedule == "row_parallel" else 1
        while lanes < params["max_lanes"] and lanes * per_lane < num_features:
            lanes *= 2
    return dict(schedule=schedule, lanes=lanes, vec=vec, threads=max(params["threads"], lanes, 32), chunk=chunk)


class Launch(NamedTuple):
    """The ``config`` and ``schedule_data`` arguments of a segment op. ``final``: the same input will
    always get them (on the CPU, or on a device once graph-aware layouts are allowed there and no
    override is set), so a caller may keep them with the graph."""
    config: Sequence[int]
    data: Optional[Tensor]
    final: bool


CPU_LAUNCH = Launch((), None, True)


def segment_launch(values: Tensor, ptr: Tensor, num_rows: int, gather: bool = False, heads: int = 1,
                   covers_all: bool = True, max_segment: Optional[int] = None) -> Launch:
    """The launch of a segment op over ``values``: :data:`CPU_LAUNCH` on CPU.

    ``values`` is the tensor whose rows are reduced (its last dimension is F); ``ptr`` the CSR
    pointer of the segments; ``num_rows`` the number of rows reduced (E); ``covers_all``: the
    segments cover all E rows (ptr[0] == 0, ptr[-1] == E), which the chunked schedules need. The
    layout of a graph-aware schedule is built here once per graph (cached on ``ptr``).
    """
    if not values.is_cuda:
        return CPU_LAUNCH
    return _device_launch(values, ptr, num_rows, gather, heads, covers_all, max_segment)


def _device_launch(values: Tensor, ptr: Tensor, num_rows: int, gather: bool, heads: int, covers_all: bool,
                   max_segment: Optional[int]) -> Launch:
    """:func:`segment_launch` for a device input. A final launch is memoised with ``ptr``: a repeated
    reduction then costs one cache lookup instead of counting the use, selecting and looking up the
    layout (a few us per call)."""
    tracing = _layout._compiling(values, ptr)
    memo = key = None
    if not tracing and _override is None:
        memo = _layout.cached(ptr, ("launches",), dict)
        key = (num_rows, values.size(-1), values.element_size(), gather, heads, covers_all, max_segment)
        launch = memo.get(key)
        if launch is not None:
            return launch
    graph_aware = not tracing and _layout.uses(ptr) >= LAYOUT_AFTER_USES
    launch = _resolve_launch(values, ptr, num_rows, gather, heads, covers_all, max_segment, graph_aware, tracing)
    if launch.final:
        memo[key] = launch
    return launch


def _resolve_launch(values: Tensor, ptr: Tensor, num_rows: int, gather: bool, heads: int, covers_all: bool,
                    max_segment: Optional[int], graph_aware: bool, tracing: bool) -> Launch:
    num_features = values.size(-1)
    p = choose(num_rows, ptr.numel() - 1, num_features, values.element_size(), gather, num_features // heads,
               max_segment, graph_aware)
    schedule = p["schedule"]
    if (schedule in CHUNKED and not covers_all) or (schedule in GRAPH_AWARE and tracing):
        schedule = "row"
    data = None
    if schedule == "groups":
        data = _layout.neighbor_groups(ptr, p["chunk"])
    elif schedule == "balanced":
        data = _layout.balanced_order(ptr)
    return Launch([SCHEDULES[schedule], p["lanes"], p["vec"], p["threads"], p["chunk"]], data,
                  graph_aware and _override is None)
