import dataclasses
import re

import numpy as np

import pytest
import scipy.sparse
import torch
from scipy.sparse.csgraph import connected_components, reverse_cuthill_mckee
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import GCNConv, SAGEConv

import pyg_fast
from pyg_fast.testing import DEVICES, assert_close
from pyg_fast.transforms import Reorder, community_rcm_order, label_propagation
from pyg_fast.transforms import reorder as reorder_module
from pyg_fast.transforms.reorder import undirected_adjacency
from pyg_fast.tuning.reorder import MODELS, ReorderModel, decide, device_cache_bytes, sampled_community_share


def block_graph(num_nodes=600, num_blocks=12, num_edges=6000, inside=0.9, seed=0):
    """A stochastic block model with randomly numbered nodes: most edges inside blocks."""
    gen = torch.Generator().manual_seed(seed)
    block = torch.randint(0, num_blocks, (num_nodes,), generator=gen)
    members = torch.argsort(block)  # nodes grouped by block
    size = torch.bincount(block, minlength=num_blocks)
    first = size.cumsum(0) - size
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    b = block[src]
    same_block = members[first[b] + (torch.rand(num_edges, generator=gen) * size[b]).long()]
    dst = torch.where(torch.rand(num_edges, generator=gen) < inside, same_block,
                      torch.randint(0, num_nodes, (num_edges,), generator=gen))
    return torch.stack([src, dst]), block


def full_data(seed=0):
    edge_index, block = block_graph(seed=seed)
    n, e = 600, edge_index.size(1)
    return Data(x=torch.randn(n, 5), y=block, train_mask=torch.rand(n) < 0.5, pos=torch.randn(n, 3),
                edge_index=edge_index, edge_attr=torch.randn(e, 2), edge_weight=torch.rand(e) + 0.1,
                graph_label=torch.tensor([3]), name="sbm")


def assert_same_data(a: Data, b: Data):
    assert set(a.keys()) == set(b.keys())
    for key, value in a.items():
        assert torch.equal(value, b[key]) if isinstance(value, torch.Tensor) else value == b[key], key


def test_round_trip_restores_every_attribute():
    data = full_data()
    reordered = Reorder()(data)
    perm = reordered.node_perm
    assert sorted(perm.tolist()) == list(range(600)) and not torch.equal(perm, torch.arange(600))
    assert torch.equal(reordered.x, data.x[perm]) and torch.equal(reordered.y, data.y[perm])
    assert torch.equal(reordered.graph_label, data.graph_label) and reordered.name == "sbm"
    # Edges renamed consistently and carried with their attributes, sorted by destination.
    inverse = torch.argsort(perm)
    old = reordered.edge_perm
    assert torch.equal(reordered.edge_index, inverse[data.edge_index[:, old]])
    assert torch.equal(reordered.edge_attr, data.edge_attr[old])
    assert bool((reordered.edge_index[1].diff() >= 0).all())
    assert_same_data(Reorder.undo(reordered), data)


def test_twice_composes_and_undoes():
    data = full_data(seed=1)
    twice = Reorder(seed=5)(Reorder()(data))
    assert torch.equal(twice.x, data.x[twice.node_perm])
    assert torch.equal(twice.edge_attr, data.edge_attr[twice.edge_perm])
    assert_same_data(Reorder.undo(twice), data)


@pytest.mark.parametrize("conv", [GCNConv, SAGEConv])
def test_model_outputs_preserved_up_to_the_permutation(conv):
    torch.manual_seed(0)
    data = full_data(seed=2)
    model = conv(5, 7).double()
    reordered = Reorder()(data)
    out = model(data.x.double(), data.edge_index)
    out_reordered = model(reordered.x.double(), reordered.edge_index)
    assert_close(Reorder.restore(out_reordered, reordered.node_perm), out, torch.float64)
    # The same through pyg_fast's weighted aggregation.
    src, dst = data.edge_index
    ref = pyg_fast.index_weight_segment_reduce(data.x, src, dst, data.edge_weight, 600, "sum")
    src_r, dst_r = reordered.edge_index
    got = pyg_fast.index_weight_segment_reduce(reordered.x, src_r, dst_r, reordered.edge_weight, 600, "sum")
    assert_close(Reorder.restore(got, reordered.node_perm), ref, torch.float32)


def test_communities_become_contiguous():
    """Neighbours get nearby ids: mean |src - dst| drops far below that of the random numbering."""
    edge_index, block = block_graph(num_nodes=1000, num_blocks=10, num_edges=12_000)
    data = Reorder()(Data(edge_index=edge_index, num_nodes=1000))
    spread = lambda ei: (ei[0] - ei[1]).abs().double().mean().item()
    assert spread(data.edge_index) < 0.3 * spread(edge_index)  # measured 0.19 (scipy RCM, 10 rounds: 0.31)
    # Label propagation recovers the blocks: each community lies (almost) inside one block.
    labels = label_propagation(edge_index, 1000)
    majority = sum(torch.bincount(block[labels == c]).max().item() for c in range(int(labels.max()) + 1))
    assert majority >= 0.95 * 1000


def test_bad_inputs_raise():
    with pytest.raises(TypeError, match="homogeneous"):
        Reorder()(HeteroData())
    with pytest.raises(IndexError, match="outside"):
        Reorder()(Data(edge_index=torch.tensor([[0, 5], [1, 0]]), num_nodes=3))
    with pytest.raises(ValueError, match="edge_index"):
        Reorder()(Data(x=torch.randn(3, 2)))


def sequential_rcm(edge_index, num_nodes, communities):
    """Reverse Cuthill-McKee one node at a time from a queue, community after community, over
    the edges inside a community (each edge both ways, repeats kept, self-loops dropped): each
    component starts at its unvisited node of smallest (degree, id), a node's unvisited
    neighbours join the queue by (degree, id)."""
    comm = communities.tolist()
    neighbours = [[] for _ in range(num_nodes)]
    for u, v in edge_index.t().tolist():
        if u != v and comm[u] == comm[v]:
            neighbours[u].append(v)
            neighbours[v].append(u)
    degree = [len(n) for n in neighbours]
    order = []
    for c in sorted(set(comm)):
        members = [v for v in range(num_nodes) if comm[v] == c]
        visited, queue = set(), []
        while len(queue) < len(members):
            start = min((v for v in members if v not in visited), key=lambda v: (degree[v], v))
            visited.add(start)
            queue.append(start)
            head = len(queue) - 1
            while head < len(queue):
                children = {w for w in neighbours[queue[head]] if w not in visited}
                children = sorted(children, key=lambda w: (degree[w], w))
                visited.update(children)
                queue += children
                head += 1
        order += queue[::-1]
    return order


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_sequential", [None, 0, 12])
@pytest.mark.parametrize("seed", range(40))
def test_cuthill_mckee_is_the_sequential_order(seed, max_sequential, device):
    """Random graphs with repeated edges, self-loops, isolated nodes and communities that are
    disconnected inside (random labels), and one community (the whole graph); communities run
    the sequential op (up to max_sequential nodes; None: the device's default), the
    level-synchronous BFS (larger ones) or both."""
    gen = torch.Generator().manual_seed(seed)
    num_nodes = int(torch.randint(1, 60, (1,), generator=gen))
    edge_index = torch.randint(0, num_nodes, (2, int(torch.randint(0, 4 * num_nodes, (1,), generator=gen))),
                               generator=gen)
    for communities in (torch.randint(0, 4, (num_nodes,), generator=gen), torch.zeros(num_nodes, dtype=torch.long)):
        communities = torch.unique(communities, return_inverse=True)[1]  # labels 0..C-1
        got = community_rcm_order(edge_index.to(device), num_nodes, communities.to(device),
                                  max_sequential=max_sequential)
        assert got.tolist() == sequential_rcm(edge_index, num_nodes, communities)


@pytest.mark.parametrize("device", DEVICES)
def test_cuthill_mckee_on_many_large_communities(device):
    """Hundreds of communities of up to a few hundred nodes with hubs (more neighbours than a
    warp has lanes, repeated edges): the sequential op and the level-synchronous BFS agree with
    the reference."""
    edge_index, block = block_graph(num_nodes=6000, num_blocks=40, num_edges=60_000, seed=5)
    hub_edges = torch.stack([torch.zeros(500, dtype=torch.long), torch.randint(0, 6000, (500,))])
    edge_index = torch.cat([edge_index, hub_edges, hub_edges], 1)  # node 0: a hub, each edge twice
    want = sequential_rcm(edge_index, 6000, block)
    for max_sequential in (None, 0, 150):
        got = community_rcm_order(edge_index.to(device), 6000, block.to(device), max_sequential=max_sequential)
        assert got.tolist() == want


def cm_args(device="cpu"):
    """A valid call: community 0 = {0, 1, 2} (a path 1-0-2), community 1 = {3}."""
    return dict(ptr=torch.tensor([0, 2, 3, 4, 4], device=device), col=torch.tensor([1, 2, 0, 0], device=device),
                roots=torch.tensor([1, 2, 0, 3], device=device), community_ptr=torch.tensor([0, 3, 4], device=device),
                max_community_size=10)


def test_cuthill_mckee_op():
    assert torch.ops.pyg_fast.cuthill_mckee(*cm_args().values()).tolist() == [1, 0, 2, 3]
    # Communities larger than max_community_size are left at -1.
    assert torch.ops.pyg_fast.cuthill_mckee(*{**cm_args(), "max_community_size": 2}.values()).tolist() == [-1, -1, -1, 3]

    def fn(ptr, col, roots, community_ptr):
        return torch.ops.pyg_fast.cuthill_mckee(ptr, col, roots, community_ptr, 10)

    args = list(cm_args().values())[:4]
    assert torch.equal(torch.compile(fn, fullgraph=True, backend="aot_eager")(*args), fn(*args))


@pytest.mark.parametrize("changes, error, match", [
    (dict(ptr=torch.tensor([0, 2, 3, 4], dtype=torch.long)), ValueError, "'ptr' must have V \\+ 1 = 5"),
    (dict(ptr=torch.tensor([0, 2, 3, 4, 4], dtype=torch.int32)), TypeError, "'ptr' must be int64"),
    (dict(col=torch.tensor([1, 2, 0, 0], dtype=torch.int32)), TypeError, "'col' must be int64"),
    (dict(community_ptr=torch.tensor([0.0, 4.0])), TypeError, "'community_ptr' must be int64"),
    (dict(community_ptr=torch.tensor([0, 3])), ValueError, "'community_ptr' must run from 0 to V = 4"),
    (dict(community_ptr=torch.tensor([0, 4, 3, 4])), ValueError, "'community_ptr' must be non-decreasing"),
    (dict(roots=torch.tensor([7, 2, 0, 3])), IndexError, "'roots' holds ids outside \\[0, 4\\)"),
    (dict(roots=torch.tensor([3, 2, 0, 3])), ValueError, "'roots' must list every node once"),
    (dict(col=torch.tensor([1, 5, 0, 0])), IndexError, "'col' holds ids outside \\[0, 4\\)"),
    (dict(col=torch.tensor([1, 3, 0, 0])), ValueError, "'col' must link nodes of one community only"),
    (dict(ptr=torch.tensor([0, 2, 1, 4, 4])), ValueError, "'ptr' must be non-decreasing"),
])
def test_cuthill_mckee_op_bad_inputs_raise(changes, error, match):
    with pytest.raises(error, match=match):
        torch.ops.pyg_fast.cuthill_mckee(*{**cm_args(), **changes}.values())


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
def test_cuthill_mckee_op_cuda_skips_bad_indices_and_checks_devices():
    args = cm_args("cuda")
    assert torch.ops.pyg_fast.cuthill_mckee(*args.values()).tolist() == [1, 0, 2, 3]
    for bad in (dict(roots=torch.tensor([1, 2, 7, -3], device="cuda")), dict(roots=torch.tensor([3, 2, 0, 3], device="cuda")),
                dict(col=torch.tensor([1, 2, -1, 1 << 40], device="cuda")), dict(col=torch.tensor([1, 3, 0, 0], device="cuda")),
                dict(ptr=torch.tensor([0, 2, 1, 100, 4], device="cuda")),
                dict(community_ptr=torch.tensor([0, 3, 1 << 40], device="cuda"))):
        position = torch.ops.pyg_fast.cuthill_mckee(*{**args, **bad}.values())
        assert ((position >= -1) & (position < 4)).all()  # every write stays in its community's range
    torch.cuda.synchronize()
    for name in ("col", "roots", "community_ptr"):
        with pytest.raises(ValueError, match=f"'{name}' is on cpu"):
            torch.ops.pyg_fast.cuthill_mckee(*{**args, name: args[name].cpu()}.values())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_sequential", [None, 0])
def test_cuthill_mckee_without_the_combined_sort_key(monkeypatch, max_sequential, device):
    """Graphs too large for one int64 key per (node, degree, id) take stable sorts key by key
    (on CUDA also the sort of every node's neighbours that the op reads in order)."""
    monkeypatch.setattr(reorder_module, "COMBINED_KEY_LIMIT", 0)
    for seed in range(10):
        gen = torch.Generator().manual_seed(seed)
        num_nodes = int(torch.randint(1, 60, (1,), generator=gen))
        edge_index = torch.randint(0, num_nodes, (2, 3 * num_nodes), generator=gen)
        communities = torch.unique(torch.randint(0, 3, (num_nodes,), generator=gen), return_inverse=True)[1]
        got = community_rcm_order(edge_index.to(device), num_nodes, communities.to(device),
                                  max_sequential=max_sequential)
        assert got.tolist() == sequential_rcm(edge_index, num_nodes, communities)


def test_cuthill_mckee_matches_scipy_on_connected_graphs():
    """scipy's reverse_cuthill_mckee starts at a node of smallest degree (ties in numpy's argsort
    order): graphs with a unique one, connected, each edge listed once."""
    compared = 0
    for seed in range(300):
        gen = torch.Generator().manual_seed(seed)
        n = int(torch.randint(2, 50, (1,), generator=gen))
        edges = torch.randint(0, n, (2, int(torch.randint(n, 4 * n, (1,), generator=gen))), generator=gen)
        edges = torch.unique(torch.sort(edges[:, edges[0] != edges[1]], 0).values, dim=1)
        matrix = scipy.sparse.coo_matrix((np.ones(edges.size(1)), tuple(edges.numpy())), shape=(n, n)).tocsr()
        matrix = (matrix + matrix.T).tocsr()
        matrix.sort_indices()
        degree = np.diff(matrix.indptr)
        if connected_components(matrix)[0] != 1 or (degree == degree.min()).sum() != 1:
            continue
        compared += 1
        expected = reverse_cuthill_mckee(matrix, symmetric_mode=True)
        assert community_rcm_order(edges, n, torch.zeros(n, dtype=torch.long)).tolist() == expected.tolist()
    assert compared >= 50


def test_label_propagation_recovers_blocks_and_is_deterministic():
    edge_index, block = block_graph(num_nodes=2000, num_blocks=20, num_edges=30_000, seed=3)
    labels = label_propagation(edge_index, 2000, seed=1)
    assert torch.equal(labels, label_propagation(edge_index, 2000, seed=1))
    assert torch.equal(torch.unique(labels), torch.arange(int(labels.max()) + 1))  # compacted
    # Measured: 20 communities, each exactly one block.
    assert 18 <= int(labels.max()) + 1 <= 24
    majority = sum(torch.bincount(block[labels == c]).max().item() for c in range(int(labels.max()) + 1))
    assert majority >= 0.98 * 2000
    # After Reorder most edges join nodes less than two blocks' sizes apart (measured 0.92).
    reordered = Reorder(seed=1)(Data(edge_index=edge_index, num_nodes=2000))
    assert ((reordered.edge_index[0] - reordered.edge_index[1]).abs() < 200).double().mean() > 0.85
    assert torch.equal(reordered.node_perm, Reorder(seed=1)(Data(edge_index=edge_index, num_nodes=2000)).node_perm)


def test_edgeless_and_self_loop_only_graphs():
    for edge_index in (torch.empty(2, 0, dtype=torch.long), torch.tensor([[2, 2], [2, 2]])):
        data = Reorder()(Data(edge_index=edge_index, num_nodes=4))
        assert torch.equal(data.node_perm, torch.arange(4))  # every node its own community


MASK64 = 2 ** 64 - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix(z):
    """splitmix64's output function on Python ints."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def draw_key(seed, round_, stream):
    """The op's key of (seed, round, stream); streams: 0 halves, 1 offsets, 2 label priorities."""
    return mix((mix(seed & MASK64) + (round_ * 4 + stream + 1) * GOLDEN) & MASK64)


def draw(key, i):
    return mix((key + (i + 1) * GOLDEN) & MASK64)


def test_draws_are_splitmix64():
    assert draw(0, 0) == 0xE220A8397B1DCDAF  # splitmix64's first output from state 0


def reference_round(labels, ptr, col, seed, round_):
    """One label propagation round, a node at a time on Python lists, as the op's header
    describes it: (new labels, how many nodes changed label)."""
    labels, ptr, col = labels.tolist(), ptr.tolist(), col.tolist()
    halves, offsets, priorities = draw_key(seed, 0, 0), draw_key(seed, round_, 1), draw_key(seed, round_, 2)
    filler = labels[col[0]] if col else None
    out, moved = list(labels), 0
    for v, label in enumerate(labels):
        if draw(halves, v) >> 63 != round_ % 2:
            continue
        lo, degree = ptr[v], ptr[v + 1] - ptr[v]
        rotation = draw(offsets, v) % max(degree, 1)
        real = [label] + [labels[col[lo + ((s * degree // 16 if degree > 16 else s) + rotation) % degree]]
                          for s in range(min(degree, 16))]
        votes = real + [filler] * (17 - len(real))  # slots that are not real vote for col[0]'s label
        out[v] = max(real, key=lambda c: (votes.count(c), draw(priorities, c) >> 32))  # the first on ties
        moved += out[v] != label
    return out, moved


def reference_label_propagation(edge_index, num_nodes, max_iters=20, seed=0):
    """label_propagation's loop over reference_round, compacted with torch.unique."""
    adj = undirected_adjacency(edge_index.cpu(), num_nodes)
    labels, changed = torch.arange(num_nodes), 0
    if adj.col.numel() > 0:
        for round_ in range(max_iters):
            labels, moved = reference_round(labels, adj.ptr, adj.col, seed, round_)
            labels, changed = torch.tensor(labels), changed + moved
            if round_ % 2 == 1:
                if changed <= num_nodes // 1000:
                    break
                changed = 0
    return torch.unique(labels, return_inverse=True)[1]


def hub_graph(gen, num_nodes):
    """Random edges among the first 3/4 of the nodes (the rest isolated), with self-loops,
    repeated edges and hubs of degree > 16 (some far above)."""
    linked = max(1, 3 * num_nodes // 4)
    edges = torch.randint(0, linked, (2, 3 * num_nodes), generator=gen)
    hubs = torch.randint(0, linked, (3,), generator=gen)
    spokes = torch.stack([hubs.repeat_interleave(40), torch.randint(0, linked, (120,), generator=gen)])
    return torch.cat([edges, spokes, edges[:, :num_nodes // 2]], 1)  # the last part: repeats


@pytest.mark.parametrize("device", DEVICES)
def test_undirected_adjacency(device):
    """Both directions of every edge but self-loops, grouped by node in input order, with the
    self-loop count given or counted."""
    gen = torch.Generator().manual_seed(0)
    edge_index = hub_graph(gen, 50)
    lists = [[] for _ in range(50)]
    for u, v in edge_index.t().tolist():
        if u != v:
            lists[v].append(u)
    for u, v in edge_index.t().tolist():
        if u != v:
            lists[u].append(v)
    num_loops = int((edge_index[0] == edge_index[1]).sum())
    assert num_loops > 0
    for given in (None, num_loops):
        adj = undirected_adjacency(edge_index.to(device), 50, given)
        assert adj.ptr.tolist() == [0] + torch.tensor([len(n) for n in lists]).cumsum(0).tolist()
        assert adj.col.tolist() == sum(lists, []) and adj.col.dtype == adj.row.dtype == torch.int32
        assert adj.row.tolist() == [v for v, n in enumerate(lists) for _ in n]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("seed", range(6))
def test_round_is_the_reference_round(device, dtype, seed):
    """label_propagation_round against reference_round, label for label: both halves, few
    distinct labels (many equal candidates, which also meet col[0]'s label in the slots that are
    not real), negative and large seeds, late rounds."""
    gen = torch.Generator().manual_seed(seed)
    num_nodes = int(torch.randint(20, 300, (1,), generator=gen))
    adj = undirected_adjacency(hub_graph(gen, num_nodes), num_nodes)
    ptr, col = adj.ptr.to(device), adj.col.to(device=device, dtype=dtype)
    assert int(adj.ptr.diff().max()) > 16 and int(adj.ptr.diff().min()) == 0
    for labels_span in (3, 10, num_nodes):
        labels = torch.randint(0, labels_span, (num_nodes,), generator=gen).to(device=device, dtype=dtype)
        for lp_seed, round_ in ((seed, 0), (seed, 1), (-7 - seed, 12), (2 ** 62 + seed, 2 ** 40 + 1)):
            want, moved = reference_round(labels, adj.ptr, adj.col, lp_seed, round_)
            changed = torch.full((), 5, dtype=torch.long, device=device)
            got = torch.ops.pyg_fast.label_propagation_round(labels, ptr, col, lp_seed, round_, changed)
            assert got.dtype == dtype and got.tolist() == want
            assert int(changed) == 5 + moved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(4))
def test_label_propagation_is_the_reference(device, seed):
    """The whole loop against the one of reference rounds, on a block graph and a hub graph:
    the same labels on every device."""
    gen = torch.Generator().manual_seed(seed)
    edge_index, _ = block_graph(num_nodes=800, num_blocks=8, num_edges=8000, seed=seed)
    for graph, num_nodes in ((edge_index, 800), (hub_graph(gen, 500), 500)):
        graph = graph.to(device)
        for max_iters in (20, 3):
            got = label_propagation(graph, num_nodes, max_iters=max_iters, seed=seed)
            assert got.tolist() == reference_label_propagation(graph, num_nodes, max_iters, seed).tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_round_without_neighbours(device):
    """No edges at all: every node keeps its label, in a new tensor."""
    labels = torch.tensor([4, 0, 2, 2, 1], dtype=torch.int32, device=device)
    ptr = torch.zeros(6, dtype=torch.long, device=device)
    col = torch.empty(0, dtype=torch.int32, device=device)
    changed = torch.zeros((), dtype=torch.long, device=device)
    for round_ in range(2):
        got = torch.ops.pyg_fast.label_propagation_round(labels, ptr, col, 3, round_, changed)
        assert torch.equal(got, labels) and got.data_ptr() != labels.data_ptr() and int(changed) == 0
    empty = labels[:0]
    assert torch.ops.pyg_fast.label_propagation_round(empty, ptr[:1], col, 3, 0, changed).numel() == 0


def round_args(device="cpu"):
    """A valid call: a triangle 0-1-2 and node 3 hanging off node 0."""
    adj = undirected_adjacency(torch.tensor([[0, 1, 2, 3], [1, 2, 0, 0]]), 4)
    return dict(labels=torch.arange(4, dtype=torch.int32, device=device), ptr=adj.ptr.to(device),
                col=adj.col.to(device), seed=0, round=0, changed=torch.zeros((), dtype=torch.long, device=device))


def call_round(**changes):
    args = round_args()
    args.update(changes)
    return torch.ops.pyg_fast.label_propagation_round(*args.values())


@pytest.mark.parametrize("changes, error, match", [
    (dict(labels=torch.arange(4.0)), TypeError, "'labels' must be int32 or int64"),
    (dict(labels=torch.zeros(2, 2, dtype=torch.int32)), ValueError, "1-D 'labels'"),
    (dict(ptr=torch.tensor([0, 3, 5, 7])), ValueError, "'ptr' must have V \\+ 1 = 5"),
    (dict(ptr=torch.tensor([0, 3, 5, 7, 8], dtype=torch.int32)), TypeError, "'ptr' must be int64"),
    (dict(col=torch.zeros(8, dtype=torch.long)), TypeError, "'col' must have the dtype of 'labels'"),
    (dict(changed=torch.zeros((), dtype=torch.int32)), TypeError, "'changed' must be int64"),
    (dict(changed=torch.zeros(2, dtype=torch.long)), ValueError, "'changed' must hold one value"),
    # Indices out of range: the CPU kernel raises (the CUDA kernel skips them).
    (dict(col=torch.tensor([2, 3, 1, 0, 2, 9, 0, 0], dtype=torch.int32)), IndexError, "'col' holds ids"),
    (dict(col=torch.tensor([-2, 3, 1, 0, 2, 1, 0, 0], dtype=torch.int32)), IndexError, "'col' holds ids"),
    (dict(ptr=torch.tensor([0, 3, 5, 4, 8])), ValueError, "'ptr' must be non-decreasing"),
    (dict(ptr=torch.tensor([0, 3, 5, 9, 9])), ValueError, "'ptr' must be non-decreasing"),
])
def test_round_bad_inputs_raise(changes, error, match):
    # A round reads the entries of its half's nodes only: the round whose half holds the node
    # with the bad entries raises (argument checks raise in both).
    raised = 0
    for round_ in range(2):
        try:
            call_round(**changes, round=round_)
        except error as e:
            assert re.search(match, str(e)), str(e)
            raised += 1
    assert raised >= 1
    assert torch.equal(call_round(), call_round())  # the valid call works


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA")
def test_round_cuda_skips_bad_indices_and_checks_devices():
    args = round_args("cuda")
    # Sampled entries outside [0, V), a row past the end of col.
    for bad in (dict(col=torch.tensor([1, 2, -3, 0, 9, 2, 1 << 30, 0], dtype=torch.int32, device="cuda")),
                dict(ptr=torch.tensor([0, 3, 5, 100, 100], device="cuda"))):
        for round_ in range(2):
            got = torch.ops.pyg_fast.label_propagation_round(*{**args, **bad, "round": round_}.values())
            assert ((got >= 0) & (got < 4)).all()
    torch.cuda.synchronize()
    for name in ("ptr", "col", "changed"):
        with pytest.raises(ValueError, match=f"'{name}' is on cpu"):
            torch.ops.pyg_fast.label_propagation_round(*{**args, name: args[name].cpu()}.values())


def test_round_compiles_fullgraph():
    args = round_args()
    args["labels"] = torch.tensor([3, 1, 1, 0], dtype=torch.int32)
    want = torch.ops.pyg_fast.label_propagation_round(*args.values())
    assert want.tolist() == reference_round(args["labels"], args["ptr"], args["col"], 0, 0)[0]

    def fn(labels, changed):
        return torch.ops.pyg_fast.label_propagation_round(labels, args["ptr"], args["col"], 0, 0, changed)

    changed = torch.zeros((), dtype=torch.long)
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(args["labels"], changed)
    assert torch.equal(got, want) and int(changed) == int(args["changed"])


# A model whose numbers are easy to check by hand: one cache level.
SIMPLE_MODEL = ReorderModel(fixed_ms=1.0, ns_per_edge=2.0, ns_per_node=3.0, cache_share=0.5,
                            miss_ns_per_byte=(0.01,), reordered_locality=0.85)


def test_decision_numbers():
    """1,000 nodes, 4,000 edges: a quarter join neighbours (distance 1), the rest are 500 apart.
    Rows of 100 floats; a cache of 80,000 bytes, half of it for rows: a window of 100 rows."""
    src = torch.arange(4000) % 1000
    dst = torch.where(torch.arange(4000) % 4 == 0, (src + 1) % 1000, (src + 500) % 1000)
    decision = decide(torch.stack([src, dst]), 1000, 100, 4, iterations=7, model=SIMPLE_MODEL, cache_bytes=(80_000,))
    assert decision.window_rows == (100,)
    # Local edges: distance < 50. Random numbering: 100 / 1000 rows cached. Hit 0.25 -> 0.85.
    assert decision.locality == pytest.approx((0.25,), abs=1e-3)
    assert decision.hit_before == pytest.approx((0.25,), abs=1e-3)
    saving = 2 * 4000 * 400 * 0.6 * 0.01 * 1e-6
    cost = 1.0 + (2.0 * 4000 + 3.0 * 1000) * 1e-6
    assert decision.saving_ms == pytest.approx(saving, rel=1e-2)
    assert decision.reorder_ms == pytest.approx(cost)
    assert decision.break_even_iterations == pytest.approx(cost / saving, rel=1e-2)  # about 52
    assert not decision.reorder and "keep the numbering" in decision.explain()
    assert decide(torch.stack([src, dst]), 1000, 100, 4, iterations=60, model=SIMPLE_MODEL,
                  cache_bytes=(80_000,)).reorder


def test_decision_declines_when_x_fits_in_cache():
    edge_index = torch.randint(0, 100_000, (2, 1_000_000), generator=torch.Generator().manual_seed(0))
    decision = decide(edge_index, 100_000, 64, 4, model=MODELS["cuda"], cache_bytes=(50 << 20,))  # x: 25.6 MB
    assert decision.hit_before == (1.0,) and decision.saving_ms == 0 and not decision.reorder
    assert decision.break_even_iterations == float("inf")


def test_decision_declines_when_the_numbering_is_already_local():
    """The same random-numbered block graph: reordered it is local, and Reorder would gain nothing."""
    edge_index, _ = block_graph(num_nodes=2000, num_blocks=20, num_edges=30_000, seed=3)
    cheap = dataclasses.replace(SIMPLE_MODEL, fixed_ms=0.0, ns_per_edge=0.0, ns_per_node=0.0)
    args = dict(num_nodes=2000, num_features=256, element_size=4, model=cheap, cache_bytes=(2 * 400 * 1024,))
    before = decide(edge_index, **args)  # window: 400 rows = 4 blocks, of 2,000 nodes
    assert before.hit_before[0] < 0.3 and before.reorder
    after = decide(Reorder()(Data(edge_index=edge_index, num_nodes=2000)).edge_index, **args)
    assert after.hit_before[0] > 0.9 and after.saving_ms == 0 and not after.reorder


def test_decision_accepts_a_large_random_numbered_graph():
    """1M nodes of 1,024 floats (4 GB of x) behind a 50 MB L2: the H100 placeholder model reorders."""
    edge_index = torch.randint(0, 1_000_000, (2, 8_000_000), generator=torch.Generator().manual_seed(0))
    decision = decide(edge_index, 1_000_000, 1024, 4, model=MODELS["cuda"], cache_bytes=(50 << 20,))
    assert decision.hit_before[0] < 0.02 and decision.reorder
    assert decision.break_even_iterations < 20


def test_auto_returns_the_data_unchanged_when_it_declines():
    data = full_data()  # 600 nodes of 5 features: x fits in any cache
    transform = Reorder(when="auto")
    out = transform(data)
    assert not transform.decision.reorder
    for key, value in data.items():
        assert out[key] is value  # the same tensors, nothing permuted
    assert torch.equal(out.node_perm, torch.arange(600)) and torch.equal(out.edge_perm, torch.arange(data.num_edges))
    assert "node_perm" not in data  # the input is left alone
    assert_same_data(Reorder.undo(out), data)
    assert torch.equal(Reorder.restore(data.x, out.node_perm), data.x)
    # Data that carries permutations keeps them.
    reordered = Reorder()(data)
    again = Reorder(when="auto")(reordered)
    assert again.node_perm is reordered.node_perm and again.edge_perm is reordered.edge_perm


def free_model(window_rows: int, row_bytes: int) -> ReorderModel:
    """Reordering costs nothing; the outermost cache level holds ``window_rows`` rows."""
    levels = device_cache_bytes(torch.device("cpu"))
    return ReorderModel(fixed_ms=0.0, ns_per_edge=0.0, ns_per_node=0.0,
                        cache_share=window_rows * row_bytes / max(levels), miss_ns_per_byte=(1.0,) * len(levels),
                        reordered_locality=0.85)


def test_auto_reorders_when_the_model_says_so():
    data = full_data()  # blocks of about 50 nodes, a window of 150 rows of 5 floats
    transform = Reorder(when="auto", model=free_model(150, 20))
    out = transform(data)
    assert transform.decision.reorder
    assert torch.equal(out.node_perm, Reorder()(data).node_perm)


def test_auto_declines_a_graph_without_communities():
    """Uniformly random edges: the first prediction (assuming communities) says reorder; label
    propagation then finds no community that fits the window, and the second one declines."""
    gen = torch.Generator().manual_seed(1)
    data = Data(x=torch.randn(600, 5), edge_index=torch.randint(0, 600, (2, 6000), generator=gen))
    transform = Reorder(when="auto", model=free_model(150, 20))
    assert transform.decide(data).reorder
    out = transform(data)
    assert not transform.decision.reorder and transform.decision.saving_ms == 0
    assert out.x is data.x and torch.equal(out.node_perm, torch.arange(600))


def test_sampled_community_share():
    """Edges 0-1 and 2-3 inside communities of 2 nodes, 4-5 inside one of 3, 0-4 across."""
    edge_index = torch.tensor([[0, 2, 4, 0], [1, 3, 5, 4]])
    communities = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    assert sampled_community_share(edge_index, communities, (2, 3, 1)) == pytest.approx((0.5, 0.75, 0.0))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="when"):
        Reorder(when="sometimes")
    with pytest.raises(ValueError, match="iterations"):
        Reorder(iterations=0)
    with pytest.raises(ValueError, match="num_features"):
        Reorder(num_features=0)
    with pytest.raises(ValueError, match="num_features"):
        Reorder(when="auto")(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
    with pytest.raises(ValueError, match=r"\[2, E\]"):
        decide(torch.zeros(3, 4, dtype=torch.long), 4, 8)
    with pytest.raises(ValueError, match="element_size"):
        decide(torch.zeros(2, 4, dtype=torch.long), 4, 8, 0)
    with pytest.raises(ValueError, match="cache sizes"):
        decide(torch.zeros(2, 4, dtype=torch.long), 4, 8, model=SIMPLE_MODEL, cache_bytes=(1, 2))
