"""Suite "e2e_train_hetero_pyg": heterogeneous models built the usual PyG way, stock against
``pyg_fast.convert``.

Case keys: model (``to_hetero_sage``, ``to_hetero_gat``: a two-layer homogeneous model turned
heterogeneous by ``torch_geometric.nn.to_hetero``; ``heteroconv_sage``: two ``HeteroConv``
layers of one ``SAGEConv`` per edge type) and dataset (the HGB graphs DBLP, IMDB and ACM from the
datasets folder; in quick mode a small ``FakeHeteroDataset``). Hidden 64, a linear classifier per
node type, summed over edge types. Methods: ``pyg`` and ``pyg_fast`` (the same model after
``pyg_fast.convert``, same weights), timed in alternating rounds. One step = forward, cross
entropy on the target type's labelled nodes, backward, Adam step. Outputs are checked first.
"""
import copy

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import FakeHeteroDataset
from torch_geometric.nn import GATConv, HeteroConv, Linear, SAGEConv, to_hetero

import pyg_fast
from benchmarks.common import TIMING_ROUNDS, Recorder, budget_for, time_interleaved
from benchmarks.graphs import hgb_graph

SUITE = "e2e_train_hetero_pyg"
DATASETS = {"DBLP": ("dblp", "author"), "IMDB": ("imdb", "movie"), "ACM": ("acm", "paper")}
MODELS = ("to_hetero_sage", "to_hetero_gat", "heteroconv_sage")
HIDDEN = 64
# CUDA: steps run before timing, and the timing budget (ms). A step takes 6-25 ms on an H100, where
# the common budget times one step a round, and a converted model's first steps there still time
# their reductions' candidate launches (``tuning.Trial``, once per graph and input), which a
# training run pays once.
CUDA_WARMUP_STEPS, CUDA_BUDGET = 30, (100.0, 1000.0)


class Homogeneous(torch.nn.Module):
    """What to_hetero turns heterogeneous: two convolutions and a classifier."""

    def __init__(self, conv: str, classes: int):
        super().__init__()
        make = (lambda: SAGEConv((-1, -1), HIDDEN)) if conv == "sage" else \
            (lambda: GATConv((-1, -1), HIDDEN, add_self_loops=False))
        self.conv1, self.conv2 = make(), make()
        self.lin = Linear(HIDDEN, classes)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.lin(self.conv2(x, edge_index).relu())


class HeteroSAGE(torch.nn.Module):
    def __init__(self, metadata, classes: int):
        super().__init__()
        node_types, edge_types = metadata
        self.convs = torch.nn.ModuleList(
            HeteroConv({et: SAGEConv((-1, -1), HIDDEN) for et in edge_types}, aggr="sum") for _ in range(2))
        self.lin = torch.nn.ModuleDict({t: Linear(HIDDEN, classes) for t in node_types})

    def forward(self, x_dict, edge_index_dict):
        for conv in self.convs:
            x_dict = {t: x.relu() for t, x in conv(x_dict, edge_index_dict).items()}
        return {t: self.lin[t](x) for t, x in x_dict.items()}


def make_model(name: str, metadata, classes: int) -> torch.nn.Module:
    if name == "heteroconv_sage":
        return HeteroSAGE(metadata, classes)
    return to_hetero(Homogeneous(name.rsplit("_", 1)[1], classes), metadata, aggr="sum")


def featured_hgb_graph(name: str):
    """(HGB graph ``name``, its target node type), every node type featured (types without
    features get a constant) and every relation named so that to_hetero can name modules after it."""
    folder, target = DATASETS[name]
    data = hgb_graph(folder)
    featureless = [t for t in data.node_types if "x" not in data[t]]
    data = T.Constant(node_types=featureless)(data) if featureless else data
    for i, (src, rel, dst) in enumerate(list(data.edge_types)):
        if not rel.isidentifier():  # to_hetero names modules after relations (IMDB has '>actorh')
            data[src, f"rel{i}", dst].edge_index = data[src, rel, dst].edge_index
            del data[src, rel, dst]
    return data, target


def fake_graph():
    data = FakeHeteroDataset(num_graphs=1, num_node_types=3, num_edge_types=6, avg_num_nodes=300,
                             avg_num_channels=16, num_classes=4)[0]
    return data, "v0"


def step_function(model, data, target: str, labelled: torch.Tensor):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_dict, edge_index_dict, y = data.x_dict, data.edge_index_dict, data[target].y[labelled]

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x_dict, edge_index_dict)[target][labelled], y).backward()
        optimizer.step()
    return step


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    graphs = {"fake": fake_graph} if quick else {name: (lambda n=name: featured_hgb_graph(n)) for name in DATASETS}
    for dataset, load in graphs.items():
        data, target = load()
        data = data.to(device)
        y = data[target].y
        if y.dim() > 1:  # IMDB's labels are multi-label: its first genre set stands as the class
            y = y.argmax(-1)
        data[target].y = y
        labelled = (y >= 0).nonzero().view(-1)
        classes = int(y.max()) + 1
        for name in MODELS:
            torch.manual_seed(0)
            stock = make_model(name, data.metadata(), classes).to(device)
            with torch.no_grad():  # materialises the lazy (-1) input sizes
                ref = stock(data.x_dict, data.edge_index_dict)
            fast = pyg_fast.convert(copy.deepcopy(stock), verbose=False)
            with torch.no_grad():
                out = fast(data.x_dict, data.edge_index_dict)
            for node_type in ref:
                torch.testing.assert_close(out[node_type], ref[node_type], rtol=1e-3, atol=1e-3)
            fns = {"pyg_fast": step_function(fast, data, target, labelled),
                   "pyg": step_function(stock, data, target, labelled)}
            steady = device.type == "cuda" and not quick
            for fn in fns.values():
                for _ in range(CUDA_WARMUP_STEPS if steady else 1):
                    fn()
            times = time_interleaved(fns, *(CUDA_BUDGET if steady else budget_for(quick)), device, TIMING_ROUNDS)
            case = {"model": name, "dataset": dataset}
            for method in fns:
                rec.add(SUITE, case, method, times[method],
                        converted=len(fast.pyg_fast_converted) if method == "pyg_fast" else 0)
