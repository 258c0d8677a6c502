"""Whether :class:`pyg_fast.transforms.Reorder` pays for itself (``Reorder(when="auto")``).

Reordering only makes gathers of feature rows (``x[src]`` in the forward pass, the output
gradient's rows in the backward pass) cheaper by serving more of them from cache. The
prediction, from statistics that cost one sampled pass over a few thousand edges:

- cache windows: for each cache level (CUDA: L2; CPU: L2 and the last level), the rows that fit
  in ``cache_share`` of it, ``rows = cache_share * bytes / (F * element size)``;
- hit rate of a numbering at a level: the larger of (a) the share of sampled edges whose source
  and destination ids differ by less than half a window (the rows processed around a
  destination were gathered recently) and (b) ``rows / V`` (the share of a random numbering's rows
  the cache holds: all of them once x fits);
- after Reorder, before the communities are known, the hit rate is assumed to reach
  ``reordered_locality`` (graphs with community structure) or stay where it is if already
  higher; given the communities (``communities=``, from label propagation), it is the share of
  sampled edges inside one community that fits the window, plus the rest at a random
  numbering's rate: a graph without communities (label propagation ends with one giant
  community, as on a power-law graph) then predicts no saving;
- saving per iteration = ``gathers_per_iteration * E * row bytes * sum over levels of
  (hit after - hit before) * miss_ns_per_byte``;
- Reorder's cost = ``fixed_ms + ns_per_edge * E + ns_per_node * V``;
- reorder iff the saving over ``iterations`` iterations exceeds the cost.

:class:`pyg_fast.transforms.Reorder` with ``when="auto"`` decides in two stages: the cheap
prediction first (most graphs stop there: x fits in cache, or the numbering is already local),
then, only where that says yes, label propagation and the prediction from the communities
found (about half of Reorder's cost is spent on a graph that then declines).

All constants are in :data:`MODELS`, one :class:`ReorderModel` per device type: CUDA's fitted
to H100 measurements (sbm_1000, sbm_large, arxiv_like; see the comment there), CPU's to the
2-core development CPU. Pass ``model=`` (or
``Reorder(model=...)``; ``dataclasses.replace(MODELS["cuda"], ns_per_edge=...)`` changes some) to
use other constants, ``cache_bytes=`` to assume other cache sizes.
"""
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Tuple

import torch
from torch import Tensor

# Edges sampled for the locality statistic (evenly spaced, deterministic): +-1% at this size.
LOCALITY_SAMPLES = 1 << 14


@dataclass(frozen=True)
class ReorderModel:
    """Constants of the prediction (module docstring). Times in milliseconds / nanoseconds."""
    fixed_ms: float  # Reorder's cost at any size: kernel launches, host syncs per BFS level and LP round pair
    ns_per_edge: float  # adjacency sort, intra-community BFS, the final sort and gather of the edges
    ns_per_node: float  # label propagation rounds, per-level work over nodes, permuting x
    cache_share: float  # share of a cache level that holds gathered rows (the rest: indices, outputs)
    miss_ns_per_byte: Tuple[float, ...]  # per cache level, innermost first: extra ns per byte gathered past it
    reordered_locality: float  # hit rate Reorder reaches at every level on a graph with communities


# CUDA: fitted to an H100 (suite "reorder", Reorder with the hash-drawn label propagation
# op): Reorder took 5.0 ms (sbm_1000: 4 M edges, 200k nodes), 25 ms (reddit2_like: 23 M edges,
# 233k nodes) and 34 ms (sbm_large: 32 M edges, 2 M nodes), fitted within 15% by 2 ms + 0.9 ns per
# edge + 0.6 ns per node. Graphs whose label propagation ends in one giant community cost more
# (arxiv_like 12 ms, cora 4.9 ms: level-synchronous BFS levels), but predict no saving from their
# communities, so the cost does not decide there. Savings per aggregation pass were 0.17 ms
# (sbm_1000, F = 64: x is 51 MB against a 50 MB L2), 1.5 ms (sbm_1000, F = 256), 4.0 and 14 ms
# (sbm_large, F = 64 and 256), predicted at 0.23, 1.6, 3.5 and 14 ms with half of L2 holding
# gathered rows and 0.00025 ns per byte moved from DRAM to L2; the other graphs saved nothing
# (-0.13 to 0.03 ms) and are predicted to save nothing once their communities are known. CPU:
# fitted to this repository's development machine (2 cores, 1 MiB L2 per core, 32 MiB L3) on
# sbm graphs of 20k and 200k nodes (Reorder 0.1 s / 1.55 s; an iteration at F = 16 and 64 saved
# 0.5 to 66 ms).
MODELS = {
    "cuda": ReorderModel(fixed_ms=2.0, ns_per_edge=0.9, ns_per_node=0.6, cache_share=0.5,
                         miss_ns_per_byte=(0.00025,), reordered_locality=0.85),
    "cpu": ReorderModel(fixed_ms=5.0, ns_per_edge=210.0, ns_per_node=3500.0, cache_share=0.25,
                        miss_ns_per_byte=(0.0035, 0.05), reordered_locality=0.85),
}
# Iterations are forward + backward passes: one gather of x's rows and one of the output
# gradient's rows per edge (benchmarks/suites/reorder.py's iteration).
GATHERS_PER_ITERATION = 2
# Cache sizes assumed where the device does not report them.
FALLBACK_CACHE_BYTES = {"cuda": (40 << 20,), "cpu": (1 << 20, 32 << 20)}


@dataclass(frozen=True)
class ReorderDecision:
    """A prediction and the decision taken from it (``explain()`` says it in words)."""
    reorder: bool
    saving_ms: float  # predicted saving per iteration
    reorder_ms: float  # predicted cost of Reorder
    break_even_iterations: float  # reorder_ms / saving_ms (inf without a saving)
    iterations: int
    num_nodes: int
    num_edges: int
    row_bytes: int
    cache_bytes: Tuple[int, ...]
    window_rows: Tuple[int, ...]  # rows per cache window, per level
    hit_before: Tuple[float, ...]  # per level
    hit_after: Tuple[float, ...]
    locality: Tuple[float, ...]  # sampled share of edges within half a window, per level
    model: ReorderModel
    device_type: str

    def explain(self) -> str:
        levels = "; ".join(
            f"level {i + 1}: {b / 2 ** 20:.1f} MiB -> {w} rows, local edges {loc:.3f}, hit {h0:.3f} -> {h1:.3f}"
            for i, (b, w, loc, h0, h1) in enumerate(zip(self.cache_bytes, self.window_rows, self.locality,
                                                        self.hit_before, self.hit_after)))
        verdict = "reorder" if self.reorder else "keep the numbering"
        return (f"{verdict}: saves {self.saving_ms:.4g} ms per iteration x {self.iterations} iterations = "
                f"{self.saving_ms * self.iterations:.4g} ms against a cost of {self.reorder_ms:.4g} ms "
                f"(break-even after {self.break_even_iterations:.3g} iterations)\n"
                f"  {self.device_type}: V = {self.num_nodes}, E = {self.num_edges}, row = {self.row_bytes} B, "
                f"x = {self.num_nodes * self.row_bytes / 2 ** 20:.1f} MiB\n  {levels}")


def decide(edge_index: Tensor, num_nodes: int, num_features: int, element_size: int = 4, iterations: int = 20,
           model: Optional[ReorderModel] = None, cache_bytes: Optional[Tuple[int, ...]] = None,
           communities: Optional[Tensor] = None) -> ReorderDecision:
    """Predicts what Reorder costs and saves on this graph and decides (module docstring).

    Args:
        edge_index: ``[2, E]`` int64 on the device the graph will be used on.
        num_features, element_size: the gathered rows' feature size and bytes per element.
        iterations: forward + backward passes Reorder must pay for itself within.
        model: the constants (default ``MODELS[edge_index.device.type]``, CPU's for other devices).
        cache_bytes: sizes of the cache levels, innermost first (default: the device's).
        communities: ``[V]`` community of every node (label propagation's), when known: the hit
            rate after Reorder is then predicted from them instead of ``reordered_locality``.
    """
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError("pyg_fast: reorder decision needs 'edge_index' of shape [2, E]")
    for name, value in (("num_features", num_features), ("element_size", element_size), ("iterations", iterations)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"pyg_fast: reorder decision: '{name}' must be a positive int, got {value!r}")
    device_type = edge_index.device.type
    model = model or MODELS.get(device_type, MODELS["cpu"])
    caches = tuple(cache_bytes) if cache_bytes is not None else device_cache_bytes(edge_index.device)
    if len(caches) != len(model.miss_ns_per_byte):
        raise ValueError(f"pyg_fast: reorder decision: {len(caches)} cache sizes for a model of "
                         f"{len(model.miss_ns_per_byte)} levels")
    num_edges = edge_index.size(1)
    row_bytes = num_features * element_size
    windows = tuple(max(1, int(model.cache_share * size / row_bytes)) for size in caches)
    locality = sampled_locality(edge_index, windows)
    random_hit = tuple(min(1.0, w / max(num_nodes, 1)) for w in windows)
    hit_before = tuple(max(loc, h) for loc, h in zip(locality, random_hit))
    if communities is None:
        reordered = (model.reordered_locality,) * len(windows)
    else:
        inside = sampled_community_share(edge_index, communities, windows)
        reordered = tuple(q + (1 - q) * h for q, h in zip(inside, random_hit))
    hit_after = tuple(max(after, before) for after, before in zip(reordered, hit_before))
    saving_ms = GATHERS_PER_ITERATION * num_edges * row_bytes * 1e-6 * sum(
        (after - before) * cost for before, after, cost in zip(hit_before, hit_after, model.miss_ns_per_byte))
    reorder_ms = model.fixed_ms + 1e-6 * (model.ns_per_edge * num_edges + model.ns_per_node * num_nodes)
    return ReorderDecision(
        reorder=saving_ms * iterations > reorder_ms, saving_ms=saving_ms, reorder_ms=reorder_ms,
        break_even_iterations=reorder_ms / saving_ms if saving_ms > 0 else math.inf, iterations=iterations,
        num_nodes=num_nodes, num_edges=num_edges, row_bytes=row_bytes, cache_bytes=caches, window_rows=windows,
        hit_before=hit_before, hit_after=hit_after, locality=locality, model=model, device_type=device_type)


def _sampled_edges(edge_index: Tensor) -> Tensor:
    """``[2, S]``: ``LOCALITY_SAMPLES`` evenly spaced edges (all of them if fewer)."""
    num_edges = edge_index.size(1)
    samples = min(num_edges, LOCALITY_SAMPLES)
    return edge_index[:, torch.arange(samples, device=edge_index.device) * num_edges // samples]


def sampled_community_share(edge_index: Tensor, communities: Tensor, windows: Tuple[int, ...]) -> Tuple[float, ...]:
    """Share of the sampled edges whose endpoints share a community of at most each window's
    rows: the edges that Reorder's community-by-community order makes local (one host sync)."""
    if edge_index.size(1) == 0:
        return tuple(1.0 for _ in windows)
    communities = communities.to(edge_index.device)
    src, dst = _sampled_edges(edge_index)
    same = communities[src] == communities[dst]
    size = torch.bincount(communities)[communities[src]]
    limit = torch.tensor(windows, device=edge_index.device)
    return tuple((same.unsqueeze(0) & (size.unsqueeze(0) <= limit.unsqueeze(1))).double().mean(1).tolist())


def sampled_locality(edge_index: Tensor, windows: Tuple[int, ...]) -> Tuple[float, ...]:
    """Share of the sampled edges whose endpoints' ids differ by less than half of each window
    (one host sync)."""
    if edge_index.size(1) == 0:
        return tuple(1.0 for _ in windows)
    src, dst = _sampled_edges(edge_index)
    distance = (src - dst).abs()
    half = torch.tensor([w / 2 for w in windows], device=edge_index.device, dtype=torch.float64)
    return tuple((distance.unsqueeze(0) < half.unsqueeze(1)).double().mean(1).tolist())


def device_cache_bytes(device: torch.device) -> Tuple[int, ...]:
    """Cache levels, innermost first, that the model's ``miss_ns_per_byte`` refer to: CUDA L2;
    CPU L2 (per core) and last level (from sysfs)."""
    if device.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        return (int(size),) if size else FALLBACK_CACHE_BYTES["cuda"]
    return _cpu_cache_bytes()


@lru_cache(maxsize=None)
def _cpu_cache_bytes() -> Tuple[int, ...]:
    sizes = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(root):
            if not entry.startswith("index"):
                continue
            read = lambda name: open(os.path.join(root, entry, name)).read().strip()
            if read("type") in ("Data", "Unified"):
                size = read("size")
                scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
                sizes[int(read("level"))] = int(size.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return FALLBACK_CACHE_BYTES["cpu"]
    if 2 not in sizes:
        return FALLBACK_CACHE_BYTES["cpu"]
    # Without a level past L2, a row missing L2 comes from memory: both levels' costs apply.
    return sizes[2], sizes[max(sizes)]

