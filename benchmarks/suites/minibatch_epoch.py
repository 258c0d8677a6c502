"""Suite "minibatch_epoch": one epoch of the reddit-style mini-batch loop, end to end (sampling,
feature gathering, training): fanouts [25, 10], 1,024 seeds a batch, SAGE with hidden 256, over
the training nodes (60% of the nodes, drawn at random).

Case keys: graph. Methods: ``pyg_fast`` (the graph and features on the benchmark device, sampled
there by ``pyg_fast.sampler.NeighborLoader``, the model converted) and ``pyg`` (stock PyG: the
graph on the CPU, PyG's NeighborLoader with 4 workers through pyg-lib or torch-sparse, each
batch copied to the device); ``pyg`` is left out where neither sampler is installed. ``ms`` is
the wall time of the epoch after a warm-up epoch; ``batches`` and ``edges`` are recorded with it.
"""
import copy
import time

import torch
import torch.nn.functional as F
import torch_geometric.typing
from torch_geometric.data import Data

import pyg_fast
import pyg_fast.sampler
from benchmarks.common import Recorder
from benchmarks.graphs import load_graph, selected
from benchmarks.suites.minibatch_train import Net, make_model

SUITE = "minibatch_epoch"
GRAPHS = ("reddit2_like", "products_like")
QUICK_GRAPHS = ("quick_powerlaw",)
FANOUTS, SEEDS, IN_FEATURES, HIDDEN, CLASSES = [25, 10], 1024, 128, 256, 41
QUICK = {"seeds": 64, "hidden": 16}


def epoch(model: Net, loader, optimizer, device) -> float:
    """Trains one epoch; returns its wall seconds."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for batch in loader:
        batch = batch.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    seeds, hidden = (QUICK["seeds"], QUICK["hidden"]) if quick else (SEEDS, HIDDEN)
    for graph_name in selected(QUICK_GRAPHS if quick else GRAPHS):
        graph = load_graph(graph_name, "cpu")
        gen = torch.Generator().manual_seed(0)
        data = Data(edge_index=graph.edge_index, num_nodes=graph.num_nodes,
                    x=torch.randn(graph.num_nodes, IN_FEATURES, generator=gen),
                    y=torch.randint(0, CLASSES, (graph.num_nodes,), generator=gen))
        train = torch.randperm(graph.num_nodes, generator=gen)[:int(0.6 * graph.num_nodes)]
        torch.manual_seed(0)
        stock = make_model("sage", IN_FEATURES, hidden).to(device)
        fast = pyg_fast.convert(copy.deepcopy(stock), verbose=False)
        methods = {"pyg_fast": (fast, lambda: pyg_fast.sampler.NeighborLoader(
            data.to(device), FANOUTS, batch_size=seeds, input_nodes=train.to(device), shuffle=True))}
        if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
            from torch_geometric.loader import NeighborLoader
            methods["pyg"] = (stock, lambda: NeighborLoader(data, FANOUTS, batch_size=seeds, input_nodes=train,
                                                            shuffle=True, num_workers=0 if quick else 4,
                                                            persistent_workers=not quick))
        case = {"graph": graph_name}
        for name, (model, make_loader) in methods.items():
            loader = make_loader()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            epoch(model, loader, optimizer, device)  # warm-up: allocator, kernels, workers
            seconds = epoch(model, loader, optimizer, device)
            rec.add(SUITE, case, name, seconds * 1e3, batches=len(loader), edges=graph.edge_index.size(1))
