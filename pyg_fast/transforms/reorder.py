"""Community-aware node renumbering (issue 5): neighbours get nearby ids, so the rows a
segment reduction gathers (``x[src]``) lie close together in memory and in cache."""
from typing import Optional

import numpy as np
import scipy.sparse
from scipy.sparse.csgraph import reverse_cuthill_mckee
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

# Keys Reorder writes; they are permuted like any node/edge attribute, which composes them
# when Reorder is applied to already reordered data.
NODE_PERM, EDGE_PERM = "node_perm", "edge_perm"


def label_propagation(edge_index: Tensor, num_nodes: int, max_iters: int = 10, seed: int = 0) -> Tensor:
    """Community label of every node by semi-synchronous label propagation (a fast modularity
    heuristic), vectorised with torch on the edges' device; edges are taken as undirected.

    Each round a random half of the nodes (fixed seed, per device) adopts the label most frequent among its
    neighbours and itself (ties broken at random); updating half at a time avoids the
    oscillation of fully synchronous updates on bipartite structures. Stops when under 0.1% of the
    nodes change. Returns labels compacted to 0..C-1.
    """
    device = edge_index.device
    src, dst = edge_index
    keep = src != dst
    src, dst = src[keep], dst[keep]
    loops = torch.arange(num_nodes, device=device)
    # Both directions plus one self entry per node (inertia, and every node has a candidate).
    tail = torch.cat([src, dst, loops])
    head = torch.cat([dst, src, loops])
    labels = torch.arange(num_nodes, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    for _ in range(max_iters):
        key = head * num_nodes + labels[tail]
        pairs, counts = _unique_counts(key)
        node, label = pairs // num_nodes, pairs % num_nodes
        # Ties broken at random per (node, label): a fixed order of labels would flood the graph
        # with the first labels (min-label propagation finds connected components, not communities).
        score = counts.double() + 0.5 * torch.rand(pairs.numel(), generator=generator, dtype=torch.float64,
                                                   device=device)
        best = torch.zeros(num_nodes, dtype=score.dtype, device=device).scatter_reduce(
            0, node, score, "amax", include_self=False)
        candidate = torch.where(score == best[node], label, torch.full_like(label, num_nodes))
        winner = torch.full((num_nodes,), num_nodes, device=device).scatter_reduce(
            0, node, candidate, "amin", include_self=True)
        update = torch.rand(num_nodes, generator=generator, device=device) < 0.5
        new_labels = torch.where(update, winner, labels)
        changed = int((new_labels != labels).sum())
        labels = new_labels
        if changed <= num_nodes // 1000:
            break
    present = torch.zeros(num_nodes + 1, dtype=torch.long, device=device)
    present[labels + 1] = 1
    return present.cumsum(0)[labels]  # labels compacted to 0..C-1, in label order


def _unique_counts(key: Tensor):
    """``torch.unique(key, return_counts=True)`` through one sort (torch.unique is slow on CPU)."""
    key = torch.sort(key).values
    first = torch.ones_like(key, dtype=torch.bool)
    first[1:] = key[1:] != key[:-1]
    starts = first.nonzero().squeeze(1)
    counts = torch.diff(starts, append=starts.new_tensor([key.numel()]))
    return key[starts], counts


def community_rcm_order(edge_index: Tensor, num_nodes: int, communities: Tensor) -> Tensor:
    """Node order: communities one after another, Reverse Cuthill-McKee inside each (scipy).

    Returns ``perm`` with ``perm[new_id] = old_id``.
    """
    src, dst = edge_index.cpu()
    comm = communities.cpu()
    inside = comm[src] == comm[dst]
    rows, cols = src[inside].numpy(), dst[inside].numpy()
    adjacency = scipy.sparse.coo_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)),
                                        shape=(num_nodes, num_nodes)).tocsr()
    # Intra-community edges only: RCM then never mixes communities within one component.
    rcm = torch.from_numpy(reverse_cuthill_mckee(adjacency, symmetric_mode=False).astype(np.int64))
    position = torch.empty(num_nodes, dtype=torch.long)
    position[rcm] = torch.arange(num_nodes)
    return torch.sort(comm * num_nodes + position).indices.to(edge_index.device)


class Reorder(BaseTransform):
    r"""Renumbers the nodes of a homogeneous graph so that communities get consecutive ids,
    ordered by Reverse Cuthill-McKee inside each community, and sorts the edges by
    (destination, source) in the new numbering (the CSR order the segment kernels read).

    Every node-level attribute (``x``, ``y`` per node, masks, ``pos``, ...) and edge-level
    attribute (``edge_attr``, ``edge_weight``, ...) is permuted consistently; graph-level ones
    are kept. The returned ``Data`` carries the permutations, so results map back:

    - ``data.node_perm[new_id] = old_id``: ``out_original = Reorder.restore(out, data.node_perm)``;
    - ``data.edge_perm[new_edge] = old_edge``.

    ``Reorder.undo(data)`` returns the original data. Applying Reorder to reordered data
    composes the permutations. The communities come from label propagation
    (:func:`label_propagation`, vectorised torch, on the data's device); RCM runs in scipy.
    Preprocessing costs a few label-propagation rounds (a sort of the edges each) and one RCM
    pass: worth it for a graph reused over many iterations.

    Args:
        max_iters: label propagation rounds at most.
        seed: seed of the random half of nodes updated each round.
    """

    def __init__(self, max_iters: int = 10, seed: int = 0):
        self.max_iters = max_iters
        self.seed = seed

    def forward(self, data: Data) -> Data:
        if not isinstance(data, Data):
            raise TypeError(f"pyg_fast: Reorder takes a homogeneous torch_geometric Data, got {type(data).__name__}")
        if data.edge_index is None:
            raise ValueError("pyg_fast: Reorder needs 'edge_index' (it has no sparse adjacency support)")
        num_nodes = data.num_nodes
        edge_index = data.edge_index
        if edge_index.numel() > 0 and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
            raise IndexError(f"pyg_fast: Reorder: 'edge_index' holds ids outside [0, {num_nodes})")
        communities = label_propagation(edge_index, num_nodes, self.max_iters, self.seed)
        perm = community_rcm_order(edge_index, num_nodes, communities)
        return permute(data, perm)

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
    out = data.clone()
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
