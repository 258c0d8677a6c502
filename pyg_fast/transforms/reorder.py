"""Community-aware node renumbering: neighbours get nearby ids, so the rows a
segment reduction gathers (``x[src]``) lie close together in memory and in cache.

Everything runs on the edges' device without a Python loop over nodes or communities: one sort
builds the undirected adjacency, label propagation costs one fused op per round over sampled
neighbours (``torch.ops.pyg_fast.label_propagation_round``), Cuthill-McKee one op for all
communities up to a size (``torch.ops.pyg_fast.cuthill_mckee``) and a few vectorised torch ops per
BFS level for larger ones, the final permutation one sort of the edges."""
import copy
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

# Keys Reorder writes; they are permuted like any node/edge attribute, which composes them
# when Reorder is applied to already reordered data.
NODE_PERM, EDGE_PERM = "node_perm", "edge_perm"
WHEN = ("always", "auto")
# Cuthill-McKee sorts by (community or node, degree, id) with one sort of a combined int64 key
# while the product of the keys' ranges stays below this, else with stable sorts key by key.
COMBINED_KEY_LIMIT = 2 ** 63
# community_rcm_order sorts neighbour lists with int32 keys (node, rank inside its community)
# while nodes x largest community stays below this, else with int64 keys.
INT32_KEY_LIMIT = 2 ** 31


class Adjacency(NamedTuple):
    """Undirected adjacency without self-loops, grouped by node: both directions of every edge
    (duplicates kept), node ``v``'s neighbours ``col[ptr[v]:ptr[v + 1]]`` in input order."""
    ptr: Tensor  # [V + 1] int64
    row: Tensor  # [2E'] the node of each entry (sorted)
    col: Tensor  # [2E'] its neighbour


def _index_dtype(num_nodes: int) -> torch.dtype:
    return torch.int32 if num_nodes < 2 ** 31 else torch.int64


def undirected_adjacency(edge_index: Tensor, num_nodes: int, num_loops: Optional[int] = None) -> Adjacency:
    """One stable sort of the 2E entries by node (32-bit keys where ids fit); self-loops are
    sorted behind every node and cut off. ``num_loops``: the number of self-loops in
    ``edge_index`` where the caller knows it, else counted here (one host sync)."""
    dtype = _index_dtype(num_nodes)
    edges = edge_index.to(dtype)
    loops = edges[0] == edges[1]
    if num_loops is None:
        num_loops = int(loops.sum())
    rows = edges.flip(0).reshape(-1)  # [dst, src]: each entry's node; its neighbour is edges.reshape(-1)'s
    if num_loops > 0:
        rows = torch.where(loops.repeat(2), num_nodes, rows)
    row, order = torch.sort(rows, stable=True)
    kept = rows.numel() - 2 * num_loops
    row, order = row[:kept], order[:kept]
    col = edges.reshape(-1)[order]
    # Sorted rows give the pointers without counting (bincount reads the maximum: a host sync).
    ptr = torch.searchsorted(row, torch.arange(num_nodes + 1, dtype=dtype, device=row.device))
    return Adjacency(ptr, row, col)


def label_propagation(edge_index: Tensor, num_nodes: int, max_iters: int = 20, seed: int = 0,
                      adjacency: Optional[Adjacency] = None) -> Tensor:
    """Community label of every node by semi-synchronous label propagation (a fast modularity
    heuristic) on the edges' device, one ``label_propagation_round`` op per round; edges are
    taken as undirected.

    The nodes are split once into two random halves that update in turn (updating all at once
    oscillates on bipartite structures). An updating node adopts the label most frequent among
    itself and its neighbours, all of them up to 16 neighbours, else 16 spread evenly over its
    list from a random offset per round: a fixed cost per node instead of a sort of all the edges'
    (node, label) pairs each round (the 16 is the op's kLabelPropagationSamples). Below 16
    neighbours, each missing one adds a vote for the label of adjacency entry ``col[0]``, should
    that label be a candidate: a quirk of the first, vectorised version, kept because it decides
    what label propagation finds on graphs without clear communities (arxiv_like: one giant
    community with it, thousands of small ones without), which the selector's second stage was
    fitted to. Ties are broken by a random order of the labels drawn anew each round (a fixed
    order floods the graph with the first labels: min-label propagation finds connected
    components, not communities). One order for all nodes of a round, rather than a coin per
    node, makes the first rounds, where every label ties, gather nodes around locally first
    labels. Stops after ``max_iters`` rounds, or after a pair of rounds in which at most 0.1% of
    the nodes changed (checked once per pair: one host sync per two rounds). The random draws
    (halves, offsets, label orders) are a hash of (``seed``, round, node or label) computed in
    the op: a round is one launch, and the labels are the same on every device for a ``seed``.
    Returns labels compacted to 0..C-1 (int64), in the order of the final labels.
    """
    device = edge_index.device
    adj = adjacency if adjacency is not None else undirected_adjacency(edge_index, num_nodes)
    labels = torch.arange(num_nodes, dtype=adj.col.dtype, device=device)
    if adj.col.numel() > 0 and max_iters > 0:
        changed = torch.zeros((), dtype=torch.long, device=device)  # a running total
        seen = 0
        for round_ in range(max_iters):
            labels = torch.ops.pyg_fast.label_propagation_round(labels, adj.ptr, adj.col, seed, round_, changed)
            if round_ % 2 == 1:
                total = int(changed)
                if total - seen <= num_nodes // 1000:
                    break
                seen = total
    present = torch.zeros(num_nodes, dtype=torch.long, device=device)
    present[labels] = 1
    return (present.cumsum(0) - 1)[labels]  # labels compacted to 0..C-1, in label order


@torch.library.register_fake("pyg_fast::label_propagation_round")
def _(labels, ptr, col, seed, round, changed):
    return torch.empty_like(labels)


def community_rcm_order(edge_index: Tensor, num_nodes: int, communities: Tensor,
                        adjacency: Optional[Adjacency] = None, max_sequential: Optional[int] = None) -> Tensor:
    """Node order: communities one after another (in label order), Reverse Cuthill-McKee inside
    each, over the edges inside the community only.

    Each community starts with its nodes that have no neighbour inside it (by id), then from its
    unvisited node of smallest (degree, id) (degrees inside the community); a node's unvisited
    neighbours follow it by (degree, id), and a BFS that ends with nodes left starts again from
    the community's smallest unvisited node. That is sequential Cuthill-McKee; scipy's
    ``reverse_cuthill_mckee`` also seeds every component, a node without neighbours included, at
    an unvisited node of smallest degree (ties in numpy's argsort order). The order is then
    reversed within each community.

    Communities of at most ``max_sequential`` nodes (default :data:`MAX_SEQUENTIAL` of the
    device: all of them on the CPU) run ``torch.ops.pyg_fast.cuthill_mckee``, one queue-based BFS
    per community (one launch on CUDA, a warp per community); larger ones run a
    level-synchronous BFS over all of them at once (:func:`_level_synchronous`), whose cost is a
    few ops and host syncs per BFS level instead of a sequential walk over the community. Both
    give the same order.

    Returns ``perm`` with ``perm[new_id] = old_id``.
    """
    device = edge_index.device
    adj = adjacency if adjacency is not None else undirected_adjacency(edge_index, num_nodes)
    if num_nodes == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    communities = communities.to(device=device, dtype=torch.long)
    # Intra-community adjacency: rows are grouped, so a row's list starts after the inside
    # entries of the rows before it.
    inside = communities[adj.row] == communities[adj.col]
    inside_before = torch.zeros(inside.numel() + 1, dtype=torch.long, device=device)
    torch.cumsum(inside, 0, out=inside_before[1:])
    ptr = inside_before[adj.ptr]
    degree = ptr.diff()
    size = torch.zeros(num_nodes, dtype=torch.long, device=device)
    size.index_add_(0, communities, communities.new_ones(()).expand(num_nodes))
    # The one host sync of this function (beside _level_synchronous's).
    num_communities, max_size, max_degree, num_inside = torch.stack(
        [communities.max() + 1, size.max(), degree.max(), inside_before[-1]]).tolist()
    degree_span = max_degree + 1
    community_ptr = torch.zeros(num_communities + 1, dtype=torch.long, device=device)
    torch.cumsum(size[:num_communities], 0, out=community_ptr[1:])  # each community's first position
    nodes = torch.arange(num_nodes, device=device)
    roots = _lexsort((communities, degree, nodes), (num_communities, degree_span, num_nodes))
    if device.type in PRESORTED_NEIGHBOURS:
        # Every node's neighbours sorted by (degree, id), the order in which the BFS appends
        # them: by the rank inside the community that roots gives, one sort of (node, rank)
        # keys that puts the entries across communities last.
        rank = torch.empty_like(roots)
        rank[roots] = nodes
        rank -= community_ptr[communities]
        span = num_nodes * max_size  # above every key of an inside entry
        dtype = torch.int32 if span < INT32_KEY_LIMIT else torch.long
        key = torch.where(inside, adj.row.to(dtype) * max_size + rank.to(dtype)[adj.col], span)
        entries = torch.sort(key).indices[:num_inside]  # equal keys are equal entries: any order will do
    else:
        entries = inside.nonzero().squeeze(1)  # the op sorts each node's new neighbours itself
    col = adj.col[entries].long()
    if max_sequential is None:
        max_sequential = MAX_SEQUENTIAL.get(device.type, num_nodes)
    position = torch.ops.pyg_fast.cuthill_mckee(ptr, col, roots, community_ptr, max_sequential)
    if max_size > max_sequential:
        _level_synchronous(position, ptr, col, degree, degree_span, communities, community_ptr)
    # Reverse within each community, then perm[new] = old.
    reflect = community_ptr[:-1] + community_ptr[1:] - 1  # first + last position of each community
    perm = torch.empty_like(position)
    perm[reflect[communities] - position] = nodes
    return perm


# Communities up to this many nodes take the sequential op (module docstring of
# community_rcm_order). CUDA: a warp walks about one parent or 32 neighbours per microsecond,
# while a level-synchronous BFS level costs about 0.9 ms on the H100 (sbm_1000).
MAX_SEQUENTIAL = {"cuda": 4096}
# Devices whose op reads neighbour lists pre-sorted by (degree, id) (the CPU op sorts each node's
# new neighbours itself, cheaper there than a global sort).
PRESORTED_NEIGHBOURS = ("cuda",)


@torch.library.register_fake("pyg_fast::cuthill_mckee")
def _(ptr, col, roots, community_ptr, max_community_size):
    return torch.empty_like(roots)


def _lexsort(keys, spans) -> Tensor:
    """Indices that sort by ``keys[0]``, then ``keys[1]``, ... (int64 tensors, ``keys[i]`` in
    ``[0, spans[i])``): one sort of a combined key while the spans' product stays below
    :data:`COMBINED_KEY_LIMIT`, else stable sorts from the last key to the first."""
    if math.prod(spans) < COMBINED_KEY_LIMIT:
        combined = keys[0]
        for key, span in zip(keys[1:], spans[1:]):
            combined = combined * span + key
        return torch.sort(combined).indices  # equal combined keys are equal tuples: any order will do
    order = torch.sort(keys[-1], stable=True).indices
    for key in reversed(keys[:-1]):
        order = order[torch.sort(key[order], stable=True).indices]
    return order


def _level_synchronous(position: Tensor, ptr: Tensor, col: Tensor, degree: Tensor, degree_span: int,
                       communities: Tensor, community_ptr: Tensor) -> None:
    """Fills the Cuthill-McKee positions of the nodes still at -1 in ``position``, whose
    communities hold nothing else, level-synchronously for all these communities at once: the
    next BFS level is every unvisited neighbour of the current level, ordered by (smallest
    position among its neighbours in the current level, degree, id), the order the sequential
    algorithm gives. A community whose BFS ends with nodes left starts again from its smallest
    unvisited node once every community's BFS has ended (BFS never leaves a community, so when a
    community restarts does not change its order, and waiting spares a host sync per level).
    Each level costs three host syncs and work proportional to its edges."""
    device, num_nodes = position.device, position.numel()
    next_free = community_ptr[:-1].clone()
    next_free.index_add_(0, communities, (position >= 0).long())
    best_parent = torch.full((num_nodes,), num_nodes, dtype=torch.long, device=device)

    def place(nodes: Tensor) -> None:
        """Gives ``nodes`` (sorted by community, in order) their community's next positions."""
        comm = communities[nodes]
        rank = torch.arange(nodes.numel(), device=device) - torch.searchsorted(comm, comm)  # within the run
        position[nodes] = next_free[comm] + rank
        next_free.index_add_(0, comm, torch.ones_like(comm))

    isolated = ((degree == 0) & (position < 0)).nonzero().squeeze(1)
    place(isolated[torch.sort(communities[isolated], stable=True).indices])
    left = int((position < 0).sum())
    level = isolated[:0]
    while left > 0:
        level = _next_level(level, ptr, col, degree, position, best_parent, degree_span)
        if level.numel() == 0:
            # Every BFS has ended: each community with nodes left starts again from its unvisited
            # node of smallest (degree, id).
            unvisited = (position < 0).nonzero().squeeze(1)
            key = degree[unvisited] * num_nodes + unvisited
            none_left = degree_span * num_nodes  # above every key
            smallest = torch.full((community_ptr.numel() - 1,), none_left, dtype=torch.long, device=device)
            smallest.scatter_reduce_(0, communities[unvisited], key, "amin")
            level = smallest[(smallest < none_left).nonzero().squeeze(1)] % num_nodes
        place(level)
        left -= level.numel()


def _next_level(level: Tensor, ptr: Tensor, col: Tensor, degree: Tensor, position: Tensor,
                best_parent: Tensor, degree_span: int) -> Tensor:
    """The unvisited neighbours of ``level`` in Cuthill-McKee order: by (smallest position of a
    neighbour in ``level``, degree, id). ``best_parent`` is scratch of size V (entries of visited
    nodes are never read again, so it needs no reset)."""
    counts = degree[level]
    total = int(counts.sum())
    if total == 0:
        return level[:0]
    # Entries of the level's rows: each row's first entry, less the entries listed before it, repeated.
    entry = torch.repeat_interleave(ptr[level] - (counts.cumsum(0) - counts), counts, output_size=total)
    entry += torch.arange(total, device=level.device)
    child = col[entry]
    parent = torch.repeat_interleave(position[level], counts, output_size=total)
    fresh = position[child] < 0
    num_nodes = position.numel()
    # Visited children vote num_nodes, above every position: their entries keep what they had.
    best_parent.scatter_reduce_(0, child, torch.where(fresh, parent, num_nodes), "amin")
    first_parent = (fresh & (best_parent[child] == parent)).nonzero().squeeze(1)
    child, parent = child[first_parent], parent[first_parent]
    child = child[_lexsort((parent, degree[child], child), (num_nodes, degree_span, num_nodes))]
    # A child listed twice (a repeated edge) is adjacent to itself now.
    return torch.unique_consecutive(child)


class Reorder(BaseTransform):
    r"""Renumbers the nodes of a homogeneous graph so that communities get consecutive ids,
    ordered by Reverse Cuthill-McKee inside each community, and sorts the edges by
    (destination, source) in the new numbering (the CSR order the segment kernels read).

    Every node-level attribute (``x``, ``y`` per node, masks, ``pos``, ...) and edge-level
    attribute (``edge_attr``, ``edge_weight``, ...) is permuted consistently; graph-level ones
    are kept (the same tensors). The returned ``Data`` carries the permutations, so results map
    back:

    - ``data.node_perm[new_id] = old_id``: ``out_original = Reorder.restore(out, data.node_perm)``;
    - ``data.edge_perm[new_edge] = old_edge``.

    ``Reorder.undo(data)`` returns the original data. Applying Reorder to reordered data
    composes the permutations. The communities come from label propagation
    (:func:`label_propagation`), the order inside them from a level-synchronous Cuthill-McKee
    (:func:`community_rcm_order`), all vectorised torch on the data's device.

    With ``when="auto"`` the transform first asks :func:`pyg_fast.tuning.reorder.decide` whether
    reordering pays for itself within ``iterations`` iterations (a cheap prediction from the
    sizes, the cache size and a sampled locality of the current numbering); where it does, label
    propagation runs and the prediction is made again from the communities found (a graph
    without community structure declines there). The decision of the last call is kept in
    ``self.decision`` (``self.decision.explain()`` says why). When it
    declines, the transform returns a shallow copy of the data with nothing permuted: the same
    tensors, plus identity ``node_perm`` / ``edge_perm`` where the data has none, so
    ``restore`` and ``undo`` work on either outcome.

    Args:
        max_iters: label propagation rounds at most.
        seed: seed of label propagation's random choices.
        when: ``"always"`` (default) or ``"auto"``.
        iterations: ``"auto"``: forward + backward passes over the edges within which Reorder
            must pay for itself (a training step of L message-passing layers makes about L).
        num_features: ``"auto"``: feature size of the rows the kernels gather (default: that of
            ``data.x``; required when the data has no ``x``).
        model: ``"auto"``: the cost model's constants (default: those of the data's device type in
            :data:`pyg_fast.tuning.reorder.MODELS`).
    """

    def __init__(self, max_iters: int = 20, seed: int = 0, when: str = "always", iterations: int = 20,
                 num_features: Optional[int] = None, model=None):
        if when not in WHEN:
            raise ValueError(f"pyg_fast: Reorder: 'when' must be one of {WHEN}, got {when!r}")
        if not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"pyg_fast: Reorder: 'iterations' must be a positive int, got {iterations!r}")
        if num_features is not None and (not isinstance(num_features, int) or num_features < 1):
            raise ValueError(f"pyg_fast: Reorder: 'num_features' must be a positive int, got {num_features!r}")
        self.max_iters = max_iters
        self.seed = seed
        self.when = when
        self.iterations = iterations
        self.num_features = num_features
        self.model = model
        self.decision = None

    def forward(self, data: Data) -> Data:
        if not isinstance(data, Data):
            raise TypeError(f"pyg_fast: Reorder takes a homogeneous torch_geometric Data, got {type(data).__name__}")
        if data.edge_index is None:
            raise ValueError("pyg_fast: Reorder needs 'edge_index' (it has no sparse adjacency support)")
        num_nodes = data.num_nodes
        edge_index = data.edge_index
        # One host sync for the check and the adjacency's self-loop count.
        lowest, highest, num_loops = torch.stack([*torch.aminmax(edge_index), (edge_index[0] == edge_index[1]).sum()]
                                                 ).tolist() if edge_index.numel() > 0 else (0, -1, 0)
        if lowest < 0 or highest >= num_nodes:
            raise IndexError(f"pyg_fast: Reorder: 'edge_index' holds ids outside [0, {num_nodes})")
        if self.when == "auto":
            self.decision, adjacency, communities = self._plan(data, num_loops)
            if not self.decision.reorder:
                return _unchanged(data)
        else:
            adjacency, communities = self._communities(data, num_loops)
        perm = community_rcm_order(edge_index, num_nodes, communities, adjacency)
        return permute(data, perm)

    def plan(self, data: Data):
        """The "auto" decision in its two stages, without reordering: ``(decision, adjacency,
        communities)``, the last two None where the first, cheap stage declined."""
        return self._plan(data)

    def _plan(self, data: Data, num_loops: Optional[int] = None):
        decision = self.decide(data)
        if not decision.reorder:
            return decision, None, None
        # The prediction assumed communities: find them, then predict from them.
        adjacency, communities = self._communities(data, num_loops)
        return self.decide(data, communities), adjacency, communities

    def _communities(self, data: Data, num_loops: Optional[int]):
        """(undirected adjacency, label propagation's communities); ``num_loops`` as in
        :func:`undirected_adjacency`."""
        adjacency = undirected_adjacency(data.edge_index, data.num_nodes, num_loops)
        return adjacency, label_propagation(data.edge_index, data.num_nodes, self.max_iters, self.seed, adjacency)

    def decide(self, data: Data, communities: Optional[Tensor] = None):
        """The "auto" decision for ``data`` (:class:`pyg_fast.tuning.reorder.ReorderDecision`),
        from the communities when given (label propagation's), else assuming the graph has some."""
        from pyg_fast.tuning.reorder import decide
        x = data.x if isinstance(data.x, Tensor) else None
        num_features = self.num_features
        if num_features is None:
            if x is None or x.dim() != 2:
                raise ValueError("pyg_fast: Reorder(when='auto') needs 'num_features' for data without a 2-D 'x'")
            num_features = x.size(1)
        element_size = x.element_size() if x is not None else 4
        return decide(data.edge_index, data.num_nodes, num_features, element_size, self.iterations, self.model,
                      communities=communities)

    @staticmethod
    def restore(out: Tensor, node_perm: Tensor, dim: int = 0) -> Tensor:
        """A node-level result of the reordered graph in the original node order."""
        return out.index_select(dim, torch.argsort(node_perm))

    @staticmethod
    def undo(data: Data) -> Data:
        """The data before Reorder (attributes and edges in their original order)."""
        node_perm, edge_perm = data[NODE_PERM], data[EDGE_PERM]
        restored = permute(data, torch.argsort(node_perm), torch.argsort(edge_perm))
        del restored[NODE_PERM], restored[EDGE_PERM]
        return restored


def _unchanged(data: Data) -> Data:
    """What "auto" returns when it declines: the same tensors, with identity permutations
    recorded where the data carries none."""
    out = copy.copy(data)
    device = data.edge_index.device
    if NODE_PERM not in data:
        out[NODE_PERM] = torch.arange(data.num_nodes, device=device)
    if EDGE_PERM not in data:
        out[EDGE_PERM] = torch.arange(data.edge_index.size(1), device=device)
    return out


def permute(data: Data, perm: Tensor, edge_perm: Optional[Tensor] = None) -> Data:
    """``data`` with node ``perm[i]`` renamed ``i`` (node attributes gathered through ``perm``)
    and its edges in the order ``edge_perm`` (default: sorted by new destination, then source).
    Records the permutations as ``node_perm`` / ``edge_perm`` unless present (then composed)."""
    num_nodes = data.num_nodes
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(num_nodes, device=perm.device)
    edge_index = inverse[data.edge_index]
    if edge_perm is None:
        edge_perm = torch.sort(edge_index[1] * num_nodes + edge_index[0], stable=True).indices
    out = copy.copy(data)  # shares what is not permuted below; the rest is replaced, not copied
    for key, value in data.items():
        if not isinstance(value, Tensor):
            continue
        if key == "edge_index":
            out[key] = edge_index[:, edge_perm]
        elif data.is_node_attr(key):
            out[key] = value.index_select(data.__cat_dim__(key, value), perm.to(value.device))
        elif data.is_edge_attr(key):
            out[key] = value.index_select(data.__cat_dim__(key, value), edge_perm.to(value.device))
    if NODE_PERM not in data:
        out[NODE_PERM] = perm
    if EDGE_PERM not in data:
        out[EDGE_PERM] = edge_perm
    return out
