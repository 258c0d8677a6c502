"""pyg_fast.sampler against PyG's conventions (seeds first, local row/col, e_id back to the input
edges, per-hop counts) and the sampling distribution, on every device."""
from collections import Counter

import pytest
import torch
from torch_geometric.data import Data, HeteroData

import pyg_fast.sampler as sampler
from pyg_fast.testing import DEVICES


def graph(num_nodes=120, num_edges=1500, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    return Data(x=torch.randn(num_nodes, 4, generator=gen), edge_index=edge_index, y=torch.arange(num_nodes))


def in_degree(edge_index, num_nodes):
    return torch.bincount(edge_index[1], minlength=num_nodes)


def hops(batch):
    """The batch's edges split by hop: [(row, col) of hop h]."""
    bounds = torch.tensor([0] + batch.num_sampled_edges).cumsum(0).tolist()
    return [(batch.edge_index[0, a:b], batch.edge_index[1, a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("fanouts", [[5, 3], [-1, 2], [4]])
def test_batches_follow_pyg_conventions(device, replace, disjoint, fanouts):
    data = graph()
    deg = in_degree(data.edge_index, data.num_nodes)
    edges = set(map(tuple, data.edge_index.t().tolist()))
    loader = sampler.NeighborLoader(graph().to(device), fanouts, batch_size=16, replace=replace, disjoint=disjoint,
                                    shuffle=True)
    for batch in loader:
        n_id, e_id = batch.n_id.cpu(), batch.e_id.cpu()
        ei = batch.edge_index.cpu()
        B = batch.batch_size
        assert B == batch.input_id.numel() <= 16 and n_id[:B].equal(batch.input_id.cpu())  # seeds first
        assert batch.x.cpu().equal(data.x[n_id]) and batch.y.cpu().equal(n_id)
        glob = n_id[ei]
        assert all(tuple(e) in edges for e in glob.t().tolist())  # every sampled edge exists
        assert data.edge_index[:, e_id].equal(glob)  # e_id maps back to the input edges
        assert sum(batch.num_sampled_nodes) == n_id.numel() and sum(batch.num_sampled_edges) == ei.size(1)
        assert len(batch.num_sampled_edges) == len(fanouts)
        targets_start = 0
        for h, ((row, col), k) in enumerate(zip(hops(batch), fanouts)):
            targets = torch.arange(targets_start, targets_start + batch.num_sampled_nodes[h])
            targets_start += batch.num_sampled_nodes[h]
            got = torch.bincount(col.cpu() - targets[0], minlength=targets.numel()) if col.numel() else \
                torch.zeros(targets.numel(), dtype=torch.long)
            assert got.numel() == targets.numel()  # edges of hop h lead to the nodes found at hop h - 1
            d = deg[n_id[targets]]
            expected = d if k < 0 else (torch.where(d > 0, k, 0) if replace else d.clamp(max=k))
            assert got.equal(expected)
            if not replace:  # no edge twice for one target
                first = sum(batch.num_sampled_edges[:h])
                hop_edges = e_id[first:first + col.numel()].tolist()
                assert len(set(zip(col.tolist(), hop_edges))) == col.numel()
        if disjoint:  # each seed's tree is its own
            b = batch.batch.cpu()
            assert b[:B].equal(torch.arange(B)) and b[ei[0]].equal(b[ei[1]])
        else:
            assert n_id.unique().numel() == n_id.numel()


@pytest.mark.parametrize("device", DEVICES)
def test_new_nodes_are_numbered_in_order_of_first_appearance(device):
    batch = next(iter(sampler.NeighborLoader(graph().to(device), [6, 4], batch_size=10)))
    known = batch.num_sampled_nodes[0]
    for (row, _), new in zip(hops(batch), batch.num_sampled_nodes[1:]):
        fresh = [r for r in row.tolist() if r >= known]
        firsts = list(dict.fromkeys(fresh))
        assert firsts == list(range(known, known + new))
        known += new


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
def test_each_neighbour_is_drawn_with_equal_probability(device, replace):
    # node 0 has 10 in-neighbours (1..10); 4000 draws of 3
    edge_index = torch.stack([torch.arange(1, 11), torch.zeros(10, dtype=torch.long)])
    colptr = torch.tensor([0] + [10] * 11, device=device)
    row = edge_index[0].to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    seeds = torch.zeros(4000, dtype=torch.long, device=device)
    counts = Counter()
    for s in seeds.split(1000):
        # disjoint: every seed draws on its own
        _, r, _, edge, _, _, per_hop = sampler.sample(colptr, row, s, [3], replace, True, gen)
        assert per_hop == [3000]
        counts.update(edge.tolist())
        if not replace:
            assert edge.view(-1, 3).sort(1).values.diff(dim=1).gt(0).all()  # three distinct
    p = torch.tensor([counts[i] for i in range(10)], dtype=torch.float64) / 12000
    assert (p - 0.1).abs().max() < 0.01  # 4 standard deviations (sd ~ 0.0027)


@pytest.mark.parametrize("device", DEVICES)
def test_a_seeded_generator_gives_the_same_batches(device):
    data = graph().to(device)

    def batches():
        gen = torch.Generator(device=device).manual_seed(5)
        loader = sampler.NeighborLoader(data, [5, 3], batch_size=32, generator=gen)
        return [(b.n_id.cpu(), b.edge_index.cpu()) for b in loader]

    for (n1, e1), (n2, e2) in zip(batches(), batches()):
        assert n1.equal(n2) and e1.equal(e2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs replay on CUDA only")
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("disjoint", [False, True])
def test_replayed_hops_give_the_batches_of_op_by_op_sampling(replace, disjoint):
    data = graph(num_nodes=300, num_edges=4000)
    perm = torch.argsort(data.edge_index[1], stable=True)
    colptr = torch._convert_indices_from_coo_to_csr(data.edge_index[1, perm], data.num_nodes).cuda()
    row = data.edge_index[0, perm].cuda()
    seed_sets = [torch.randperm(300, generator=torch.Generator().manual_seed(i))[:n].cuda()
                 for i, n in enumerate([32, 32, 7, 32])]  # a second seed count: a second graph

    def run(graphs):
        gen = torch.Generator(device="cuda").manual_seed(11)
        return [sampler.sample(colptr, row, s, fanouts, replace, disjoint, gen, graphs)
                for s in seed_sets for fanouts in ([6, 4], [3])]  # other fanouts: other graphs

    graphs = {}
    replayed, op_by_op = run(graphs), run(None)
    assert len(graphs) == 4
    for got, want in zip(replayed, op_by_op):  # earlier batches survive later replays
        for g, w in zip(got, want):
            assert g.equal(w) if isinstance(g, torch.Tensor) else g == w


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
def test_an_int32_graph_gives_the_batches_of_an_int64_one(device, replace):
    data = graph(num_nodes=200, num_edges=3000)
    perm = torch.argsort(data.edge_index[1], stable=True)
    colptr = torch._convert_indices_from_coo_to_csr(data.edge_index[1, perm], data.num_nodes).to(device)
    row = data.edge_index[0, perm].to(device)
    seed = torch.randperm(200, generator=torch.Generator().manual_seed(1))[:24].to(device)
    got, want = ([sampler.sample(c, r, seed, [5, 3], replace, False,
                                 torch.Generator(device=device).manual_seed(2), {}) for _ in range(2)]
                 for c, r in ((colptr.int(), row.int()), (colptr, row)))
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            if isinstance(a, torch.Tensor):
                assert a.dtype == b.dtype == torch.long and a.equal(b)
            else:
                assert a == b
    loader_sampler = sampler.NeighborSampler(data.to(device), [5, 3])
    assert loader_sampler.colptr.dtype == loader_sampler.row.dtype == torch.int32


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_graph_on_a_second_gpu_samples_while_the_first_is_current():
    data = graph().to("cuda:1")
    loader = sampler.NeighborLoader(data, [4, 2], batch_size=16, generator=torch.Generator("cuda:1").manual_seed(0))
    with torch.cuda.device(0):
        batches = [b for b in loader]  # the second epoch's first batch is replayed
        batches += [next(iter(loader))]
    for b in batches:
        assert b.n_id.device == torch.device("cuda:1") and b.x.equal(data.x[b.n_id])
        assert data.edge_index[:, b.e_id].equal(b.n_id[b.edge_index])


def hetero_graph():
    gen = torch.Generator().manual_seed(3)
    data = HeteroData()
    data["paper"].x = torch.randn(60, 4, generator=gen)
    data["author"].x = torch.randn(40, 4, generator=gen)
    for (src, rel, dst), n in {("paper", "cites", "paper"): 300, ("author", "writes", "paper"): 200,
                               ("paper", "rev_writes", "author"): 200}.items():
        data[src, rel, dst].edge_index = torch.stack([torch.randint(0, data[src].num_nodes, (n,), generator=gen),
                                                      torch.randint(0, data[dst].num_nodes, (n,), generator=gen)])
    return data


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("disjoint", [False, True])
def test_hetero_batches_follow_pyg_conventions(device, disjoint):
    data = hetero_graph()
    fanouts = {("paper", "cites", "paper"): [3, 2], ("author", "writes", "paper"): [2, 1],
               ("paper", "rev_writes", "author"): [4, 2]}
    loader = sampler.NeighborLoader(hetero_graph().to(device), fanouts, batch_size=8, input_nodes="paper",
                                    disjoint=disjoint)
    for batch in loader:
        B = batch["paper"].batch_size
        assert batch["paper"].n_id[:B].cpu().equal(batch["paper"].input_id.cpu())
        for node_type in ("paper", "author"):
            assert batch[node_type].x.cpu().equal(data[node_type].x[batch[node_type].n_id.cpu()])
        for edge_type, k in fanouts.items():
            src, _, dst = edge_type
            ei, e_id = batch[edge_type].edge_index.cpu(), batch[edge_type].e_id.cpu()
            glob = torch.stack([batch[src].n_id.cpu()[ei[0]], batch[dst].n_id.cpu()[ei[1]]])
            assert data[edge_type].edge_index[:, e_id].equal(glob)  # every edge exists, e_id maps back
            if dst == "paper":  # hop 1 targets are the seeds: min(in-degree, fanout) edges each
                hop1 = batch[edge_type].num_sampled_edges[0]
                got = torch.bincount(ei[1, :hop1], minlength=B)[:B]
                deg = torch.bincount(data[edge_type].edge_index[1], minlength=data[dst].num_nodes)
                assert got.equal(deg[batch[dst].n_id.cpu()[:B]].clamp(max=k[0]))


def test_unsupported_inputs_raise_clearly():
    with pytest.raises(NotImplementedError, match="induced"):
        sampler.NeighborSampler(graph(), [2], subgraph_type="induced")
    data = graph()
    data.time = torch.arange(data.num_nodes)
    with pytest.raises(NotImplementedError, match="temporal"):
        sampler.NeighborSampler(data, [2], time_attr="time")
    if torch.cuda.is_available():  # CPU data, CUDA sampling: the batches could not index the features
        with pytest.raises(ValueError, match="move the data there"):
            sampler.NeighborSampler(graph(), [2], device="cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_runs_where_the_data_lives(device):
    data = graph().to(device)
    for named in (None, device):  # "cuda" names the GPU the data's tensors call cuda:0
        batch = next(iter(sampler.NeighborLoader(data, [3, 2], batch_size=8, device=named)))
        assert batch.n_id.device.type == device and batch.x.equal(data.x[batch.n_id])


@pytest.mark.parametrize("device", DEVICES)
def test_pyg_link_loader_samples_around_both_ends_of_each_label_edge(device):
    from torch_geometric.loader import LinkNeighborLoader
    data = graph().to(device)
    labelled = data.edge_index[:, :64]
    loader = LinkNeighborLoader(data, [3, 2], edge_label_index=labelled, batch_size=16,
                                neighbor_sampler=sampler.NeighborSampler(data, [3, 2]), neg_sampling_ratio=1.0)
    seen = 0
    for batch in loader:
        ends = batch.n_id[batch.edge_label_index]
        positive = batch.edge_label == 1
        assert positive.sum() == 16 and ends[:, positive].equal(labelled[:, batch.input_id])
        assert data.edge_index[:, batch.e_id].equal(batch.n_id[batch.edge_index])  # every sampled edge exists
        assert batch.x.equal(data.x[batch.n_id])
        seen += batch.input_id.numel()
    assert seen == 64
