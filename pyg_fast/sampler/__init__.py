"""Neighbour sampling for PyG's loaders without pyg-lib or torch-sparse, on the CPU or on the
graph's GPU.

:class:`NeighborSampler` is PyG's ``torch_geometric.sampler.NeighborSampler`` (same arguments,
same :class:`~torch_geometric.sampler.SamplerOutput`: seeds first, ``row``/``col`` local indices
of each sampled edge's source and target, ``edge`` its position in the sampler's CSC, per-hop
counts) whose homogeneous sampling runs here, in tensor operations of fixed size: a hop over P
frontier nodes with fanout k fills P * k slots, draws without replacement by Floyd's algorithm
(k vectorised steps, each subset equally likely), and numbers new nodes in order of first
appearance by sorting, so the device is never waited on inside a hop; the sizes the loader
needs are read once per batch (one host synchronisation) and for a fanout of -1 (one per such
hop). ``pyg_fast.sampler.NeighborLoader`` is PyG's ``NeighborLoader`` with this sampler.
"""
import warnings
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.loader import NeighborLoader as _PyGNeighborLoader
from torch_geometric.sampler import NeighborSampler as _PyGNeighborSampler
from torch_geometric.sampler import SamplerOutput
from torch_geometric.sampler.base import DataType, SubgraphType

_NONE = torch.iinfo(torch.long).max  # key of an empty slot: sorts last


class NeighborSampler(_PyGNeighborSampler):
    """PyG's ``NeighborSampler`` sampling homogeneous graphs with pyg_fast's sampler.

    Args (beyond PyG's):
        device: where the graph's CSC lives and the sampling runs (default: the CPU, as PyG).
        generator: a ``torch.Generator`` on ``device`` for reproducible batches.
    """

    def __init__(self, data, num_neighbors, *args, device=None, generator: Optional[torch.Generator] = None,
                 **kwargs):
        with warnings.catch_warnings():  # PyG warns that sampling without pyg-lib is deprecated: not ours
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
            super().__init__(data, num_neighbors, *args, **kwargs)
        if self.data_type != DataType.homogeneous:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler samples homogeneous graphs (Data); "
                                      "HeteroData is not supported yet")
        if self.subgraph_type == SubgraphType.induced:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler: subgraph_type='induced' is not supported")
        if self.node_time is not None or self.edge_time is not None or self.edge_weight is not None:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler: temporal and weighted sampling are not "
                                      "supported yet")
        self.device = torch.device(device) if device is not None else self.colptr.device
        self.colptr, self.row = self.colptr.to(self.device), self.row.to(self.device)
        self.generator = generator

    def _sample(self, seed, seed_time=None, **kwargs):
        if seed_time is not None:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler: temporal sampling is not supported yet")
        fanouts = self.num_neighbors.get_mapped_values()
        node, row, col, edge, batch, nodes_per_hop, edges_per_hop = sample(
            self.colptr, self.row, seed.to(self.device), fanouts, self.replace, self.disjoint, self.generator)
        if self.sample_direction == "backward":
            row, col = col, row
        return SamplerOutput(node=node, row=row, col=col, edge=edge, batch=batch,
                             num_sampled_nodes=nodes_per_hop, num_sampled_edges=edges_per_hop)


def NeighborLoader(data, num_neighbors, *args, device=None, generator: Optional[torch.Generator] = None,
                   **kwargs) -> _PyGNeighborLoader:
    """``torch_geometric.loader.NeighborLoader`` (same arguments) sampling with
    :class:`NeighborSampler` on ``device``."""
    sampler_args = {k: kwargs[k] for k in ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
                                           "weight_attr", "is_sorted", "share_memory", "directed") if k in kwargs}
    sampler = NeighborSampler(data, num_neighbors, device=device, generator=generator, **sampler_args)
    return _PyGNeighborLoader(data, num_neighbors, *args, neighbor_sampler=sampler, **kwargs)


def sample(colptr: Tensor, row: Tensor, seed: Tensor, fanouts: List[int], replace: bool = False,
           disjoint: bool = False, generator: Optional[torch.Generator] = None
           ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Optional[Tensor], List[int], List[int]]:
    """Samples ``fanouts[h]`` in-neighbours per node at hop h from the CSC graph (``colptr``,
    ``row``) around ``seed``. Returns (node, row, col, edge, batch, nodes per hop, edges per
    hop): sampled global node ids, seeds first then new nodes in order of first appearance;
    each sampled edge's source and target as indices into ``node`` and its CSC position; with
    ``disjoint`` every seed grows its own tree (a node reached from two seeds appears twice) and
    ``batch`` says whose each node is."""
    device, num_nodes = row.device, colptr.numel() - 1
    seed = seed.long()
    B = seed.numel()
    arange_b = torch.arange(B, device=device)
    owner = arange_b if disjoint else torch.zeros(B, dtype=torch.long, device=device)
    keys = owner * num_nodes + seed if disjoint else seed
    known_keys, order = torch.sort(keys)
    known_ids = arange_b[order]
    count = torch.full((), B, dtype=torch.long, device=device)
    frontier, frontier_ids, frontier_owner = seed, arange_b, owner
    nodes, node_owner, node_ids = [seed], [owner], [arange_b]
    rows, cols, edges, hop_counts = [], [], [], [count.clone()]
    edge_counts = []
    for k in fanouts:
        valid = frontier >= 0
        v = frontier.clamp(min=0)
        start = colptr[v]
        deg = torch.where(valid, colptr[v + 1] - start, 0)
        slot_node, offset, slot_ok = _draw(deg, k, replace, generator)
        pos = torch.where(slot_ok, start[slot_node] + offset, 0)
        src = torch.where(slot_ok, row[pos] if row.numel() else pos, -1)
        src_owner = frontier_owner[slot_node]
        cand = torch.where(slot_ok, src_owner * num_nodes + src if disjoint else src, _NONE)
        ids, first, known_keys, known_ids, count = _number(cand, known_keys, known_ids, count)
        rows.append(torch.where(slot_ok, ids, -1))
        cols.append(frontier_ids[slot_node])
        edges.append(pos)
        edge_counts.append(slot_ok.sum())
        hop_counts.append(count.clone())
        frontier = torch.where(first, src, -1)
        frontier_ids, frontier_owner = ids, src_owner
        nodes.append(frontier)
        node_owner.append(src_owner)
        node_ids.append(ids)
    # The one read of the batch's sizes.
    sizes = torch.stack(hop_counts + edge_counts).tolist()
    total = sizes[len(fanouts)]
    nodes_per_hop = [sizes[0]] + [b - a for a, b in zip(sizes[:len(fanouts)], sizes[1:len(fanouts) + 1])]
    edges_per_hop = sizes[len(fanouts) + 1:]
    all_nodes, all_ids = torch.cat(nodes), torch.cat(node_ids)
    placed = all_nodes >= 0
    placed[:B] = True
    slot = torch.where(placed, all_ids, total)  # non-new slots go to a spare row
    node = torch.empty(total + 1, dtype=torch.long, device=device).index_copy_(0, slot, torch.where(placed, all_nodes, 0))[:total]
    batch = None
    if disjoint:
        batch = torch.empty(total + 1, dtype=torch.long, device=device).index_copy_(
            0, slot, torch.cat(node_owner))[:total]
    if B > 0 and not disjoint:  # duplicate seeds keep their own slots, as given
        node[:B] = seed
    row_all, col_all, edge_all = torch.cat(rows) if rows else seed[:0], torch.cat(cols) if cols else seed[:0], \
        torch.cat(edges) if edges else seed[:0]
    kept = row_all >= 0
    return (node, row_all[kept], col_all[kept], edge_all[kept], batch, nodes_per_hop, edges_per_hop)


def _draw(deg: Tensor, k: int, replace: bool, generator: Optional[torch.Generator]) -> Tuple[Tensor, Tensor, Tensor]:
    """(frontier node of each slot, neighbour offset in [0, deg), whether the slot holds a draw)
    for ``k`` draws per node of degree ``deg``; k < 0 takes every neighbour (its size is read)."""
    device, P = deg.device, deg.numel()
    if k < 0:
        total = int(deg.sum())
        slot_node = torch.repeat_interleave(torch.arange(P, device=device), deg, output_size=total)
        first = torch.cumsum(deg, 0) - deg
        offset = torch.arange(total, device=device) - first[slot_node]
        return slot_node, offset, torch.ones(total, dtype=torch.bool, device=device)
    slot_node = torch.arange(P, device=device).repeat_interleave(k)
    j = torch.arange(k, device=device).repeat(P)
    d = deg[slot_node]
    if replace:
        offset = (torch.rand(P * k, device=device, generator=generator) * d).long().clamp(max=(d - 1).clamp(min=0))
        return slot_node, offset, d > 0
    # Floyd: for r = 0..k-1, draw t in [0, deg - k + r]; take deg - k + r instead if t was taken.
    chosen = torch.empty(P, k, dtype=torch.long, device=device)
    u = torch.rand(P, k, device=device, generator=generator)
    for r in range(k):
        top = deg - k + r
        t = (u[:, r] * (top + 1)).long().clamp(max=top.clamp(min=0))
        taken = (chosen[:, :r] == t.unsqueeze(1)).any(1) if r else torch.zeros_like(t, dtype=torch.bool)
        chosen[:, r] = torch.where(taken, top, t)
    offset = torch.where(d > k, chosen.view(-1), j)
    return slot_node, offset, j < d


def _number(cand: Tensor, known_keys: Tensor, known_ids: Tensor, count: Tensor
            ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Local ids of candidate keys (``_NONE``: empty slot, id -1): a known key keeps its id; new
    keys are numbered from ``count`` in order of first appearance. Returns (ids, whether each slot
    is its key's first appearance as a new node, known keys and ids after, count after)."""
    n, m = cand.numel(), known_keys.numel()
    if m:
        at = torch.searchsorted(known_keys, cand).clamp(max=m - 1)
        hit = known_keys[at] == cand
        old_ids = known_ids[at]
    else:
        hit = torch.zeros_like(cand, dtype=torch.bool)
        old_ids = torch.full_like(cand, -1)
    new = (cand != _NONE) & ~hit
    skey, order = torch.sort(torch.where(new, cand, _NONE), stable=True)  # a key's slots: in slot order
    run_start = torch.ones_like(new)
    run_start[1:] = skey[1:] != skey[:-1]
    first_sorted = run_start & (skey != _NONE)
    # Number the new keys by the slot of their first appearance.
    first_slot = torch.where(first_sorted, order, n)
    rank = torch.searchsorted(torch.sort(first_slot).values, first_slot)
    run = torch.cumsum(run_start.long(), 0) - 1
    run_id = torch.zeros(n + 1, dtype=torch.long, device=cand.device).scatter_(  # row n: a spare for other runs
        0, torch.where(first_sorted, run, n), torch.where(first_sorted, count + rank, 0))
    new_id_sorted = run_id[run]
    ids = torch.empty_like(cand)
    ids[order] = torch.where(skey != _NONE, new_id_sorted, -1)
    ids = torch.where(hit & (cand != _NONE), old_ids, ids)
    first = torch.zeros_like(new)
    first[order] = first_sorted
    merged_keys = torch.cat([known_keys, torch.where(first, cand, _NONE)])
    merged_ids = torch.cat([known_ids, torch.where(first, ids, -1)])
    merged_keys, at = torch.sort(merged_keys)
    return ids, first, merged_keys, merged_ids[at], count + first_sorted.sum()
