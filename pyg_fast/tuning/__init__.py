"""Per-input choice of CUDA schedule and tiling for the segment kernels.

The choice depends only on cheap features of the input, known without touching
the data: number of source rows E, number of segments V (so the mean segment
length E / V), feature size F, element size and whether rows are gathered. It
is looked up in ``rules.json``: a table of measured best configurations written
by ``benchmarks/tune_segment.py`` from sweeps on the H100 (nearest entry in
(log2 E, log2 E/V, log2 F, element size, gather) space). Nothing here is tuned
by hand. CPU kernels take no configuration.

A config is ``[schedule, lanes, vector width, threads per block, rows per chunk]``
(see ``pyg_fast/csrc/cuda/segment_launch.cuh``); schedules are ``row`` (one thread
group per segment) and ``chunk`` (one group per fixed-size chunk of rows, for
balance on skewed segment lengths).
"""
import json
import math
import os
from functools import lru_cache
from typing import Dict, List, Optional

from torch import Tensor

RULES_PATH = os.path.join(os.path.dirname(__file__), "rules.json")
SCHEDULES = {"row": 0, "chunk": 1}

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


def features(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool) -> List[float]:
    return [math.log2(max(num_rows, 1)), math.log2(max(num_rows, 1) / max(num_segments, 1)),
            math.log2(max(num_features, 1)), float(element_size), float(gather)]


def _nearest(feat: List[float]) -> Dict:
    table = rules()["table"]
    weights = rules()["weights"]
    best, best_d = None, float("inf")
    for entry in table:
        d = sum(w * (a - b) ** 2 for w, a, b in zip(weights, feat, entry["features"]))
        if d < best_d:
            best, best_d = entry, d
    return best["params"] if best is not None else rules()["default"]


def vector_width(num_features: int, element_size: int, feature_block: int) -> int:
    """Widest vector (at most 16 bytes) whose length divides the feature size and block."""
    vec = max(1, 16 // element_size)
    while vec > 1 and (num_features % vec or feature_block % vec):
        vec //= 2
    return vec


def choose(num_rows: int, num_segments: int, num_features: int, element_size: int, gather: bool,
           feature_block: int) -> Dict:
    """The parameters for one launch, with the reason (the table entry matched)."""
    params = _override or _nearest(features(num_rows, num_segments, num_features, element_size, gather))
    vec = vector_width(num_features, element_size, feature_block)
    lanes = 1
    while lanes < params["max_lanes"] and lanes * vec < num_features:
        lanes *= 2
    return dict(schedule=params["schedule"], lanes=lanes, vec=vec, threads=max(params["threads"], lanes),
                chunk=params["chunk"])


def segment_config(values: Tensor, num_rows: int, num_segments: int, gather: bool = False,
                   heads: int = 1, covers_all: bool = True) -> List[int]:
    """The int[] config argument of the segment ops; [] on CPU.

    ``values`` is the tensor whose rows are reduced (its last dimension is F);
    ``num_rows`` the number of rows reduced (E); ``covers_all``: the segments cover
    all E rows (ptr[0] == 0, ptr[-1] == E), which the chunk schedule needs (a COO
    index always does).
    """
    if not values.is_cuda:
        return []
    num_features = values.size(-1)
    p = choose(num_rows, num_segments, num_features, values.element_size(), gather, num_features // heads)
    schedule = p["schedule"] if covers_all else "row"
    return [SCHEDULES[schedule], p["lanes"], p["vec"], p["threads"], p["chunk"]]
