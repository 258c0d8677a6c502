import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import GCNConv, SAGEConv

import pyg_fast
from pyg_fast.testing import assert_close
from pyg_fast.transforms import Reorder, label_propagation


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
    assert spread(data.edge_index) < 0.4 * spread(edge_index)  # measured 0.31; ideal block order ~0.2
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
