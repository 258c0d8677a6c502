"""Neighbour sampling for PyG's loaders without pyg-lib or torch-sparse, on the CPU or on the
graph's GPU.

:class:`NeighborSampler` is PyG's ``torch_geometric.sampler.NeighborSampler`` (same arguments,
same :class:`~torch_geometric.sampler.SamplerOutput` or ``HeteroSamplerOutput``: seeds first,
``row``/``col`` local indices of each sampled edge's source and target, ``edge`` its position in
the sampler's CSC, per-hop counts) whose sampling of ``Data`` and ``HeteroData`` (a fanout list
per edge type) runs here, in tensor operations of fixed size: a hop over P
frontier nodes with fanout k fills P * k slots, draws without replacement by Floyd's algorithm
(one kernel, ``pyg_fast::sample_offsets``; each subset equally likely), and numbers new nodes in
order of first appearance (a table over the node type; sorted keys in ``disjoint`` mode), so the
device is never waited on inside a hop and, on CUDA, a sampler replays a batch's hops as one
captured CUDA graph; the sizes the loader needs are read once per batch (one host
synchronisation) and for a fanout of -1 (one per such hop). ``pyg_fast.sampler.NeighborLoader``
is PyG's ``NeighborLoader`` with this sampler.
"""
import gc
import warnings
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.loader import NeighborLoader as _PyGNeighborLoader
from torch_geometric.sampler import NeighborSampler as _PyGNeighborSampler
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.sampler.base import SubgraphType

_NONE = torch.iinfo(torch.long).max  # key of an empty slot: sorts last


class NeighborSampler(_PyGNeighborSampler):
    """PyG's ``NeighborSampler`` sampling with pyg_fast's sampler.

    Args (beyond PyG's):
        device: where the graph's CSC lives and the sampling runs (default: the device of the
            data's tensors; the CPU for feature and graph stores). The batches' indices live
            there, so the node and edge features must too.
        generator: a ``torch.Generator`` on ``device`` for reproducible batches.
    """

    def __init__(self, data, num_neighbors, *args, device=None, generator: Optional[torch.Generator] = None,
                 **kwargs):
        with warnings.catch_warnings():  # PyG warns that sampling without pyg-lib is deprecated: not ours
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
            super().__init__(data, num_neighbors, *args, **kwargs)
        if self.subgraph_type == SubgraphType.induced:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler: subgraph_type='induced' is not supported")
        if self.node_time is not None or self.edge_time is not None or self.edge_weight is not None:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler: temporal and weighted sampling are not "
                                      "supported yet")
        devices = _devices(data)
        self.device = _indexed(device) if device is not None else (devices.pop() if len(devices) == 1 else
                                                                   torch.device("cpu"))
        if devices - {self.device}:
            raise ValueError(f"pyg_fast.sampler.NeighborSampler samples on {self.device}, but the data holds "
                             f"tensors on {sorted(map(str, devices))}: the batches index them with tensors on "
                             f"{self.device}; move the data there (data.to(device))")
        # The CSC in int32 where its values fit (half the memory and the gathers' traffic);
        # sampled positions and node ids come out as int64, as PyG's are.
        if hasattr(self, "colptr"):  # Data, or a homogeneous (feature store, graph store) pair
            self.colptr = _narrow(self.colptr.to(self.device), self.row.numel())
            self.row = _narrow(self.row.to(self.device), self.num_nodes)
        else:
            most_nodes = max(self.num_nodes.values(), default=0)
            self.colptr_dict = {k: _narrow(v.to(self.device), self.row_dict[k].numel())
                                for k, v in self.colptr_dict.items()}
            self.row_dict = {k: _narrow(v.to(self.device), most_nodes) for k, v in self.row_dict.items()}
        if isinstance(self.perm, Tensor):  # edge ids of the CSC's edges, read with the batch's edge positions
            self.perm = self.perm.to(self.device)
        elif isinstance(self.perm, dict):
            self.perm = {k: None if v is None else v.to(self.device) for k, v in self.perm.items()}
        self.generator = generator
        self._graphs = {}  # the CUDA graphs of the hops, one per seed count (see sample_typed)

    def _sample(self, seed, seed_time=None, **kwargs):
        if seed_time is not None:
            raise NotImplementedError("pyg_fast.sampler.NeighborSampler: temporal sampling is not supported yet")
        if isinstance(seed, dict):
            return self._sample_typed(seed)
        fanouts = self.num_neighbors.get_mapped_values()
        node, row, col, edge, batch, nodes_per_hop, edges_per_hop = sample(
            self.colptr, self.row, seed.to(self.device), fanouts, self.replace, self.disjoint, self.generator,
            self._graphs)
        if self.sample_direction == "backward":
            row, col = col, row
        return SamplerOutput(node=node, row=row, col=col, edge=edge, batch=batch,
                             num_sampled_nodes=nodes_per_hop, num_sampled_edges=edges_per_hop)


    def _sample_typed(self, seed):
        """HeteroData: edge types keyed as PyG's sampler keys them ('src__rel__dst'), the CSC of
        each over its targets (sources and targets swapped for sample_direction='backward')."""
        ends = {}
        for edge_type in self.edge_types:
            key = self.to_rel_type[edge_type]
            ends[key] = (edge_type[0], edge_type[2])
        node, row, col, edge, batch, nodes_per_hop, edges_per_hop = sample_typed(
            self.colptr_dict, self.row_dict, ends, self.num_nodes, seed,
            self.num_neighbors.get_mapped_values(self.edge_types), self.replace, self.disjoint, self.generator,
            self._graphs)
        if self.sample_direction == "backward":
            row, col = col, row
        restore = self.to_edge_type
        if self.sample_direction == "backward":
            restore = {k: self.to_restored_edge_type[v] for k, v in restore.items()}
        remap = lambda d: {restore[k]: v for k, v in d.items()}  # noqa: E731
        return HeteroSamplerOutput(node=node, row=remap(row), col=remap(col), edge=remap(edge), batch=batch,
                                   num_sampled_nodes=nodes_per_hop, num_sampled_edges=remap(edges_per_hop))


def _indexed(device) -> torch.device:
    """``device`` with its index (``"cuda"`` is the current GPU), as the data's tensors name theirs."""
    device = torch.device(device)
    return torch.device("cuda", torch.cuda.current_device()) if device.type == "cuda" and device.index is None \
        else device


def _narrow(index: Tensor, bound: int) -> Tensor:
    """``index`` (values at most ``bound``) as int32 where ``bound`` fits it."""
    return index.int() if bound <= torch.iinfo(torch.int32).max else index


def _devices(data) -> set:
    """The devices of the tensors a Data or HeteroData holds (empty for feature and graph stores)."""
    stores = getattr(data, "stores", [])
    return {value.device for store in stores for value in store.values() if isinstance(value, Tensor)}


def NeighborLoader(data, num_neighbors, *args, device=None, generator: Optional[torch.Generator] = None,
                   **kwargs) -> _PyGNeighborLoader:
    """``torch_geometric.loader.NeighborLoader`` (same arguments) sampling with
    :class:`NeighborSampler` on ``device``."""
    sampler_args = {k: kwargs[k] for k in ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
                                           "weight_attr", "is_sorted", "share_memory", "directed") if k in kwargs}
    sampler = NeighborSampler(data, num_neighbors, device=device, generator=generator, **sampler_args)
    return _PyGNeighborLoader(data, num_neighbors, *args, neighbor_sampler=sampler, **kwargs)


def sample(colptr: Tensor, row: Tensor, seed: Tensor, fanouts: List[int], replace: bool = False,
           disjoint: bool = False, generator: Optional[torch.Generator] = None, graphs: Optional[dict] = None
           ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Optional[Tensor], List[int], List[int]]:
    """Samples ``fanouts[h]`` in-neighbours per node at hop h from the CSC graph (``colptr``,
    ``row``) around ``seed``. Returns (node, row, col, edge, batch, nodes per hop, edges per
    hop): sampled global node ids, seeds first then new nodes in order of first appearance;
    each sampled edge's source and target as indices into ``node`` and its CSC position; with
    ``disjoint`` every seed grows its own tree (a node reached from two seeds appears twice) and
    ``batch`` says whose each node is. ``graphs``: see :func:`sample_typed`."""
    node, row_, col, edge, batch, nodes_per_hop, edges_per_hop = sample_typed(
        {"e": colptr}, {"e": row}, {"e": ("n", "n")}, {"n": colptr.numel() - 1}, {"n": seed}, {"e": fanouts},
        replace, disjoint, generator, graphs)
    return (node["n"], row_["e"], col["e"], edge["e"], None if batch is None else batch["n"], nodes_per_hop["n"],
            edges_per_hop["e"])


def sample_typed(colptrs: Dict[str, Tensor], rows: Dict[str, Tensor], ends: Dict[str, Tuple[str, str]],
                 num_nodes: Dict[str, int], seeds: Dict[str, Tensor], fanouts: Dict[str, List[int]],
                 replace: bool = False, disjoint: bool = False, generator: Optional[torch.Generator] = None,
                 graphs: Optional[dict] = None):
    """:func:`sample` over typed nodes and edges: edge type ``r`` runs from node type
    ``ends[r][0]`` to ``ends[r][1]`` with its CSC (``colptrs[r]``, ``rows[r]``) over the targets.
    At hop h every edge type draws ``fanouts[r][h]`` neighbours for the target-type nodes found
    at hop h - 1 (the seeds at hop 0). Returns the dicts (node, row, col, edge, batch) and the
    per-hop counts {node type: [...]} and {edge type: [...]}; in ``disjoint`` mode a seed's
    tree holds the nodes of every type it reaches.

    ``graphs``: a dict kept between batches over the same graph tensors. On CUDA the hops then
    run as a CUDA graph captured once per seed count (a batch is ~140 small ops, so launching
    them one by one bounds the sampler: 2.1 ms a batch on arxiv_like, H100); fanouts of -1 size
    their hops from device data and run op by op."""
    device = next(iter(rows.values())).device
    seeds = {t: seeds.get(t, torch.empty(0, dtype=torch.long, device=device)).to(device).long() for t in num_nodes}
    hops = max((len(f) for f in fanouts.values()), default=0)
    args = (colptrs, rows, ends, num_nodes, fanouts, hops, replace, disjoint, generator)
    if graphs is None or device.type != "cuda" or any(k < 0 for f in fanouts.values() for k in f):
        grown = _grow(seeds, *args)
    else:
        grown = _replay(graphs, seeds, args)
    sizes_dev, node_full, batch_full, edge_full, edge_keys = grown
    # The one read of the batch's sizes: nodes of each type after each hop, edges per type and hop.
    sizes = sizes_dev.tolist() if num_nodes else []
    types = list(num_nodes)
    at_hop = [dict(zip(types, sizes[i * len(types):(i + 1) * len(types)])) for i in range(hops + 1)]
    nodes_per_hop = {t: [at_hop[0][t]] + [at_hop[i + 1][t] - at_hop[i][t] for i in range(hops)] for t in types}
    edges_per_hop = {r: [0] * hops for r in colptrs}
    for (r, h), n in zip(edge_keys, sizes[(hops + 1) * len(types):]):
        edges_per_hop[r][h] = n
    # Copies: a replayed graph overwrites its outputs with the next batch.
    node = {t: node_full[t][:at_hop[hops][t]].clone() for t in types}
    batch = {t: batch_full[t][:at_hop[hops][t]].clone() for t in types} if disjoint else None
    row_out, col_out, edge_out = {}, {}, {}
    for r, (rs, cs, es) in edge_full.items():
        n = sum(edges_per_hop[r])
        row_out[r], col_out[r], edge_out[r] = rs[:n].clone(), cs[:n].clone(), es[:n].clone()
    return node, row_out, col_out, edge_out, batch, nodes_per_hop, edges_per_hop


def _replay(graphs: dict, seeds: Dict[str, Tensor], args: tuple):
    """:func:`_grow` replayed from a CUDA graph captured for these seed counts (and graph
    tensors, which the entry keeps alive so that their addresses stay theirs), on the graph's
    GPU whichever is current."""
    colptrs, rows, ends, _, fanouts, _, replace, disjoint, generator = args
    key = (tuple((t, s.numel()) for t, s in seeds.items()),
           tuple(t.data_ptr() for t in (*colptrs.values(), *rows.values())), id(generator),
           tuple((r, tuple(f)) for r, f in fanouts.items()), tuple(ends.items()), replace, disjoint)
    entry = graphs.get(key)
    with torch.cuda.device(next(iter(rows.values())).device):
        if entry is None:
            static = {t: s.clone() for t, s in seeds.items()}
            g = torch.cuda.CUDAGraph()
            if generator is not None:
                g.register_generator_state(generator)
            # thread_local: a loader's pin-memory thread may use CUDA while this captures. No garbage
            # collection while capturing: it can free another sampler's graph, which CUDA forbids then
            # (and the capture fails: 1 run in 4 of the sampler tests under pytest-xdist, H100)
            collecting = gc.isenabled()
            gc.disable()
            try:
                with torch.cuda.graph(g, capture_error_mode="thread_local"):
                    out = _grow(static, *args)
            finally:
                if collecting:
                    gc.enable()
            entry = graphs[key] = (g, static, out, args)
        else:
            for t, s in seeds.items():
                entry[1][t].copy_(s)
        entry[0].replay()
    return entry[2]


def _grow(seeds: Dict[str, Tensor], colptrs, rows, ends, num_nodes, fanouts, hops, replace, disjoint, generator):
    """The hops of :func:`sample_typed`, in ops whose sizes follow from the seed counts and
    fanouts alone (none for a fanout of -1): (sizes on the device, {node type: nodes, a spare
    slot at the end}, {node type: owning seeds} or None, {edge type: (row, col, edge) packed
    to the front}, the (edge type, hop) of each edge count in sizes)."""
    device = next(iter(rows.values())).device
    state, counts_at, edge_counts = {}, [], []
    offset = 0
    for t in num_nodes:
        seed = seeds[t]
        B = seed.numel()
        ids = torch.arange(B, device=device)
        owner = ids + offset if disjoint else torch.zeros(B, dtype=torch.long, device=device)
        offset += B if disjoint else 0
        known = (_SortedIds(owner * num_nodes[t] + seed) if disjoint else _DenseIds(seed, num_nodes[t]))
        state[t] = _TypeState(seed, ids, owner, known)
    counts_at.append([st.known.count for st in state.values()])
    out_edges = {r: ([], [], []) for r in colptrs}
    for h in range(hops):
        drawn = {t: [] for t in num_nodes}  # per source type: (edge type, slot_ok, src, src_owner, cand, pos, col)
        for r, (src_t, dst_t) in ends.items():
            k = fanouts[r][h] if h < len(fanouts[r]) else 0
            st = state[dst_t]
            if k == 0 or st.frontier.numel() == 0:
                continue
            colptr, row = colptrs[r], rows[r]
            valid = st.frontier >= 0
            v = st.frontier.clamp(min=0)
            start = colptr[v].long()  # an int32 CSC widens past its gathers
            deg = torch.where(valid, colptr[v + 1].long() - start, 0)
            slot_node, offset_, slot_ok = _draw(deg, k, replace, generator)
            pos = torch.where(slot_ok, start[slot_node] + offset_, 0)
            src = torch.where(slot_ok, row[pos].long() if row.numel() else pos, -1)
            src_owner = st.frontier_owner[slot_node]
            cand = torch.where(slot_ok, src_owner * num_nodes[src_t] + src if disjoint else src, _NONE)
            drawn[src_t].append((r, slot_ok, src, src_owner, cand, pos, st.frontier_ids[slot_node]))
        for t, parts in drawn.items():
            st = state[t]
            if not parts:
                st.frontier = st.frontier[:0]
                continue
            cand = torch.cat([p[4] for p in parts])
            ids, first = st.known.number(cand)
            src, src_owner = torch.cat([p[2] for p in parts]), torch.cat([p[3] for p in parts])
            at = 0
            for r, slot_ok, _, _, _, pos, col in parts:
                n = slot_ok.numel()
                out_edges[r][0].append(torch.where(slot_ok, ids[at:at + n], -1))
                out_edges[r][1].append(col)
                out_edges[r][2].append(pos)
                edge_counts.append(((r, h), slot_ok.sum()))
                at += n
            st.frontier = torch.where(first, src, -1)
            st.frontier_ids, st.frontier_owner = ids, src_owner
            st.nodes.append(st.frontier)
            st.owners.append(src_owner)
            st.ids.append(ids)
        counts_at.append([st.known.count for st in state.values()])
    sizes = torch.stack([c for at in counts_at for c in at] + [c for _, c in edge_counts]) if num_nodes else None
    node, batch = {}, {} if disjoint else None
    for t, st in state.items():
        all_nodes, all_ids = torch.cat(st.nodes), torch.cat(st.ids)
        B, S = st.nodes[0].numel(), all_ids.numel()
        placed = all_nodes >= 0
        placed[:B].fill_(True)
        slot = torch.where(placed, all_ids, S)  # slots that found a known node go to the spare row S
        node[t] = torch.empty(S + 1, dtype=torch.long, device=device).index_copy_(
            0, slot, torch.where(placed, all_nodes, 0))
        if disjoint:
            batch[t] = torch.empty(S + 1, dtype=torch.long, device=device).index_copy_(0, slot, torch.cat(st.owners))
        elif B:  # duplicate seeds keep their own slots, as given
            node[t][:B] = st.nodes[0]
    edges = {}
    for r, (rs, cs, es) in out_edges.items():
        if not rs:
            empty = torch.empty(0, dtype=torch.long, device=device)
            edges[r] = (empty, empty, empty)
            continue
        row_all = torch.cat(rs)
        kept = row_all >= 0
        n = row_all.numel()
        at = torch.where(kept, torch.cumsum(kept, 0) - 1, n)  # kept edges packed to the front in order; n: spare
        edges[r] = tuple(torch.empty(n + 1, dtype=torch.long, device=device).index_copy_(0, at, x)
                         for x in (row_all, torch.cat(cs), torch.cat(es)))
    return sizes, node, batch, edges, [key for key, _ in edge_counts]


class _TypeState:
    """The sampling state of one node type: its frontier (global ids, -1 for empty slots), their
    local ids and owning seeds, the numbering of the nodes found so far, and what each hop
    found."""

    def __init__(self, seed, ids, owner, known):
        self.frontier, self.frontier_ids, self.frontier_owner = seed, ids, owner
        self.known = known
        self.nodes, self.owners, self.ids = [seed], [owner], [ids]


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
    if replace:
        d = deg[slot_node]
        offset = (torch.rand(P * k, device=device, generator=generator) * d).long().clamp(max=(d - 1).clamp(min=0))
        return slot_node, offset, d > 0
    # Floyd's algorithm per node in one kernel: as a loop of k tensor steps a batch (fanouts
    # [25, 10], 1,024 seeds, a 1 M-edge graph) took 669 ops, 144 with the kernel
    seed = torch.randint(0, 2 ** 62, (1,), device=device, generator=generator)
    offset = torch.ops.pyg_fast.sample_offsets(deg.long().contiguous(), k, seed).view(-1)
    return slot_node, offset, offset >= 0


@torch.library.register_fake("pyg_fast::sample_offsets")
def _(deg, k, seed):
    return deg.new_empty(deg.numel(), k)


class _DenseIds:
    """Local ids of one node type's nodes in a table over all its nodes (-1: not found yet): each
    hop costs a few passes over its slots and the table, with no sort. For keys that are node
    ids (not disjoint); the table is as large as the node type."""

    def __init__(self, seed: Tensor, num_nodes: int):
        B = seed.numel()
        self.table = torch.full((num_nodes + 1,), -1, dtype=torch.long, device=seed.device)  # + a spare row
        if B:  # a seed given twice keeps the id of its first place
            self.table.scatter_reduce_(0, seed, torch.arange(B, device=seed.device), "amin", include_self=False)
        self.count = torch.full((), B, dtype=torch.long, device=seed.device)

    def number(self, cand: Tensor) -> Tuple[Tensor, Tensor]:
        """(ids of the candidate nodes, -1 for ``_NONE`` slots; whether each slot is its node's first
        appearance as a new node); new nodes are numbered from ``count`` in slot order."""
        spare = self.table.numel() - 1
        valid = cand != _NONE
        c = torch.where(valid, cand, spare)
        new = valid & (self.table[c] < 0)
        slot = torch.arange(c.numel(), device=c.device)
        first_slot = torch.full_like(self.table, c.numel()).scatter_reduce_(
            0, torch.where(new, c, spare), slot, "amin")
        first = new & (first_slot[c] == slot)
        self.table.index_put_((torch.where(first, c, spare),), self.count + torch.cumsum(first, 0) - 1)
        self.table[spare:].fill_(-1)  # fill_, not an assignment: that copies a host scalar (no CUDA graph)
        self.count = self.count + first.sum()
        return torch.where(valid, self.table[c], -1), first


class _SortedIds:
    """Local ids of nodes kept as sorted keys (disjoint mode: a key is seed * num_nodes + node,
    too many for a table)."""

    def __init__(self, keys: Tensor):
        self.keys, order = torch.sort(keys)
        self.ids = torch.arange(keys.numel(), device=keys.device)[order]
        self.count = torch.full((), keys.numel(), dtype=torch.long, device=keys.device)

    def number(self, cand: Tensor) -> Tuple[Tensor, Tensor]:
        """As :meth:`_DenseIds.number`: a known key keeps its id, new keys are numbered from
        ``count`` in order of first appearance, and the known keys take them in."""
        n, m = cand.numel(), self.keys.numel()
        if m:
            at = torch.searchsorted(self.keys, cand).clamp(max=m - 1)
            hit = self.keys[at] == cand
            old_ids = self.ids[at]
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
            0, torch.where(first_sorted, run, n), torch.where(first_sorted, self.count + rank, 0))
        new_id_sorted = run_id[run]
        ids = torch.empty_like(cand)
        ids[order] = torch.where(skey != _NONE, new_id_sorted, -1)
        ids = torch.where(hit & (cand != _NONE), old_ids, ids)
        first = torch.zeros_like(new)
        first[order] = first_sorted
        merged_keys = torch.cat([self.keys, torch.where(first, cand, _NONE)])
        merged_ids = torch.cat([self.ids, torch.where(first, ids, -1)])
        self.keys, at = torch.sort(merged_keys)
        self.ids, self.count = merged_ids[at], self.count + first_sorted.sum()
        return ids, first
