"""Per-input choice of CUDA schedule and tiling for the segment kernels.

The choice depends only on cheap features of the input: number of source rows
E, number of segments V (so the mean segment length E / V), feature size F,
element size, whether rows are gathered, and the skew max/mean segment length
(the maximum is computed once per graph with its layout). It is looked up in
``rules.json``: a table of measured best configurations written by
``benchmarks/tune_segment.py`` from sweeps on the GPU (nearest entry in
(log2 E, log2 E/V, log2 F, element size, gather, log2 skew) space). Nothing here
is tuned by hand. The choice is memoised, so repeated calls on one graph cost a
dictionary lookup. CPU kernels take no configuration.

A config is ``[schedule, lanes, vector width, threads per block, rows per chunk]``
(see ``pyg_fast/csrc/cuda/segment_launch.cuh``); schedules are ``row`` (one thread
group per segment, lanes over features), ``row_parallel`` (one group per segment,
lanes over its rows, warp-shuffle combine; for small F) and ``chunk`` (one group
per fixed-size chunk of rows, for balance on skewed segment lengths).
"""
import json
import math
import os
from functools import lru_cache
from typing import Dict, List, Optional

from torch import Tensor

RULES_PATH = os.path.join(os.path.dirname(__file__), "rules.json")
SCHEDULES = {"row": 0, "chunk": 1, "row_parallel": 2}

_override: Optional[Dict] = None


@lru_cache(maxsize=None)
def rules() -> dict:
    with open(RULES_PATH) as f:
        return json.load(f)


def set_override(params: Optional[Dict]) -> None:
    """Forces ``params`` (keys schedule, max_lanes, threads, chunk) for every launch; None undoes it.

    Used by the tuning sweep and for experiments.
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


def _nearest(feat: List[float]) -> Dict:
    table = rules()["table"]
    weights = rules()["weights"]
    best, best_d = None, float("inf")
    for entry in table:
        d = sum(w * (a - b) ** 2 for w, a, b in zip(weights, feat, entry["features"]))
        if d < best_d:
            best, best_d = entry, d
    return best["params"] if best is not None else rules()["default"]


def explain(num_rows: int, num_segments: int, num_features: int, element_size: int = 4, gather: bool = False,
            max_segment: Optional[int] = None) -> str:
    """Says which configuration an input gets and from which measured table entry."""
    feat = features(num_rows, num_segments, num_features, element_size, gather, max_segment)
    table, weights = rules()["table"], rules()["weights"]
    dist = [sum(w * (a - b) ** 2 for w, a, b in zip(weights, feat, e["features"])) for e in table]
    nearest = table[min(range(len(table)), key=dist.__getitem__)] if table else None
    chosen = choose(num_rows, num_segments, num_features, element_size, gather, num_features, max_segment)
    return (f"features {[round(f, 2) for f in feat]} -> nearest measured input {nearest and nearest['features']} "
            f"-> {chosen} ({rules()['source']})")


def vector_width(num_features: int, element_size: int, feature_block: int) -> int:
    """Widest vector (at most 16 bytes) whose length divides the feature size and block."""
    vec = max(1, 16 // element_size)
    while vec > 1 and (num_features % vec or feature_block % vec):
        vec //= 2
    return vec


def choose(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool,
           feature_block: int, max_segment: Optional[int] = None) -> Dict:
    """The launch parameters for an input (schedule, lanes, vec, threads, chunk)."""
    if _override is not None:
        return _resolve(_override, num_features, element_size, feature_block)
    return _choose_from_table(num_rows, num_segments, num_features, element_size, gather, feature_block,
                              max_segment)


@lru_cache(maxsize=4096)
def _choose_from_table(num_rows, num_segments, num_features, element_size, gather, feature_block, max_segment):
    feat = features(num_rows, num_segments, num_features, element_size, gather, max_segment)
    return _resolve(_nearest(feat), num_features, element_size, feature_block)


def _resolve(params: Dict, num_features: int, element_size: int, feature_block: int) -> Dict:
    """Concrete launch parameters: vector width from F, lanes from F (or the rows, for row_parallel)."""
    vec = vector_width(num_features, element_size, feature_block)
    lanes = 1
    if params["schedule"] == "row_parallel":
        lanes = params["max_lanes"]
    while lanes < params["max_lanes"] and lanes * vec < num_features:
        lanes *= 2
    return dict(schedule=params["schedule"], lanes=lanes, vec=vec, threads=max(params["threads"], lanes),
                chunk=params["chunk"])


def segment_config(values: Tensor, num_rows: int, num_segments: int, gather: bool = False,
                   heads: int = 1, covers_all: bool = True, max_segment: Optional[int] = None) -> List[int]:
    """The int[] config argument of the segment ops; [] on CPU.

    ``values`` is the tensor whose rows are reduced (its last dimension is F);
    ``num_rows`` the number of rows reduced (E); ``covers_all``: the segments cover
    all E rows (ptr[0] == 0, ptr[-1] == E), which the chunk schedule needs (a COO
    index always does).
    """
    if not values.is_cuda:
        return []
    num_features = values.size(-1)
    p = choose(num_rows, num_segments, num_features, values.element_size(), gather, num_features // heads,
               max_segment)
    schedule = p["schedule"] if covers_all else "row"
    return [SCHEDULES[schedule], p["lanes"], p["vec"], p["threads"], p["chunk"]]
