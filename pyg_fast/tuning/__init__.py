"""Per-input choice of CUDA schedule and tiling for the segment kernels.

The choice is a pure function of cheap features (rows, segments, feature size,
dtype, whether rows are gathered) evaluated against the rule table in
``rules.json``. That table is generated from measurements on the H100 by
``benchmarks/tune_segment.py``; nothing here is hand-tuned. CPU kernels take
no configuration.
"""
import json
import os
from functools import lru_cache
from typing import List

from torch import Tensor

_RULES = os.path.join(os.path.dirname(__file__), "rules.json")

# Config layout shared with csrc/cuda/segment_config.h.
SCHEDULES = {"row": 0}


@lru_cache(maxsize=None)
def rules() -> dict:
    with open(_RULES) as f:
        return json.load(f)


def vector_width(num_features: int, element_size: int, divisor: int = 1) -> int:
    """Widest vector (at most 16 bytes) whose length divides the feature size."""
    vec = max(1, 16 // element_size)
    while vec > 1 and (num_features % vec or divisor % vec):
        vec //= 2
    return vec


def segment_config(src3: Tensor, num_segments: int, reduce: str, gather: bool = False,
                   heads: int = 1) -> List[int]:
    """[schedule, lanes per row, vector width, threads per block] for a CUDA launch; [] on CPU.

    ``src3`` is the [B, E, F] input; ``heads`` the number of weight columns.
    """
    if not src3.is_cuda:
        return []
    num_features = src3.size(2)
    vec = vector_width(num_features, src3.element_size(), num_features // heads)
    lanes_needed = max(1, -(-num_features // vec))
    lanes = 1
    for rule in rules()["row_lanes"]:  # [max lanes needed, lanes to use], ascending
        if lanes_needed <= rule[0]:
            lanes = rule[1]
            break
    else:
        lanes = 32
    return [SCHEDULES["row"], lanes, vec, rules()["threads"]]
