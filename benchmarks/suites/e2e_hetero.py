"""End-to-end training steps of heterogeneous GNNs: stock PyG layers against pyg_fast.hetero.

Suite "e2e_train_hetero"; case keys model (rgcn, rgat, hgt) and dataset; methods pyg, pyg_fast
and, for rgcn, pyg_fastrgcn (PyG's FastRGCNConv). Graphs: AM's 266 relation sizes on 1.9 M nodes
with 16 channels (rgcn), MUTAG's 46 relation sizes on 23.6 k nodes (rgat), and a
FakeHeteroDataset with about 120 k nodes and 2.4 M edges (hgt). One step = forward, cross
entropy on 10 k labelled nodes, backward, Adam step.
"""
import random

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch_geometric.datasets import FakeHeteroDataset

import pyg_fast.hetero as fast
from benchmarks.common import time_ms
from benchmarks.suites.segment_matmul import segment_sizes
from pyg_fast.testing import rel_err

SUITE = "e2e_train_hetero"
CHANNELS = 16
NUM_CLASSES = 11


class Relational(torch.nn.Module):
    """Two relational convolutions (RGCN or RGAT) with a ReLU between."""

    def __init__(self, conv_cls, num_relations: int):
        super().__init__()
        self.conv1 = conv_cls(CHANNELS, CHANNELS, num_relations)
        self.conv2 = conv_cls(CHANNELS, NUM_CLASSES, num_relations)

    def forward(self, x, edge_index, edge_type):
        return self.conv2(F.relu(self.conv1(x, edge_index, edge_type)), edge_index, edge_type)


class HGT(torch.nn.Module):
    def __init__(self, conv_cls, in_channels, metadata, target: str):
        super().__init__()
        self.target = target
        self.conv1 = conv_cls(in_channels, 64, metadata, heads=2)
        self.conv2 = conv_cls(64, 64, metadata, heads=2)
        self.lin = torch.nn.Linear(64, NUM_CLASSES)

    def forward(self, x_dict, edge_index_dict):
        h = {k: F.relu(v) for k, v in self.conv1(x_dict, edge_index_dict).items()}
        return self.lin(self.conv2(h, edge_index_dict)[self.target])


def relational_graph(sizes, num_nodes: int, device: str, gen: torch.Generator):
    """Random edges with the given per-relation counts (edge_type sorted as loaded data is not)."""
    counts = torch.tensor(sizes)
    edge_type = torch.repeat_interleave(torch.arange(len(sizes)), counts)
    edge_type = edge_type[torch.randperm(edge_type.numel(), generator=gen)]
    edge_index = torch.randint(0, num_nodes, (2, edge_type.numel()), generator=gen)
    x = torch.randn(num_nodes, CHANNELS, generator=gen)
    return (x.to(device), edge_index.to(device), edge_type.to(device)), len(sizes)


def labels(num_nodes: int, device: str, gen: torch.Generator, count: int = 10_000):
    idx = torch.randperm(num_nodes, generator=gen)[:min(count, num_nodes)]
    return idx.to(device), torch.randint(0, NUM_CLASSES, (idx.numel(), ), generator=gen).to(device)


def bench_models(rec, case, models, inputs, idx, y, check_against="pyg"):
    """Copies the reference model's parameters into every model, checks outputs, times a step."""
    ref = models[check_against]
    with torch.no_grad():
        want = ref(*inputs)
    for name, model in models.items():
        model.load_state_dict(ref.state_dict())
        with torch.no_grad():
            err = rel_err(model(*inputs), want)
        if err > 1e-3:
            raise AssertionError(f"{SUITE} {case} {name}: relative error {err:.3g} against {check_against}")
    for name, model in models.items():
        opt = torch.optim.Adam(model.parameters(), lr=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(*inputs)[idx], y).backward()
            opt.step()
        rec.add(SUITE, case, name, time_ms(step))


def run(rec, device, quick):
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # PyG's default numerics for every method
    try:
        run_cases(rec, device, quick)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def run_cases(rec, device, quick):
    gen = torch.Generator().manual_seed(0)
    sizes = segment_sizes()
    scale = 1000 if quick else 1

    am = [s // scale for s in sizes["AM"]]
    inputs, R = relational_graph(am, 1_900_000 // scale, device, gen)
    idx, y = labels(inputs[0].size(0), device, gen)
    models = {"pyg": Relational(pyg_nn.RGCNConv, R), "pyg_fastrgcn": Relational(pyg_nn.FastRGCNConv, R),
              "pyg_fast": Relational(fast.RGCNConv, R)}
    bench_models(rec, {"model": "rgcn", "dataset": "AM"}, {k: m.to(device) for k, m in models.items()}, inputs, idx, y)

    mutag = [s // (scale // 100 or 1) for s in sizes["MUTAG"]]
    inputs, R = relational_graph(mutag, 23_644 // (scale // 100 or 1), device, gen)
    idx, y = labels(inputs[0].size(0), device, gen)
    models = {"pyg": Relational(pyg_nn.RGATConv, R), "pyg_fast": Relational(fast.RGATConv, R)}
    bench_models(rec, {"model": "rgat", "dataset": "MUTAG"}, {k: m.to(device) for k, m in models.items()}, inputs,
                 idx, y)

    torch.manual_seed(0)
    random.seed(0)  # FakeHeteroDataset also draws node counts and edge types from Python's random
    data = FakeHeteroDataset(num_node_types=3, num_edge_types=6, avg_num_nodes=40_000 // scale, avg_degree=10,
                             avg_num_channels=64, num_classes=NUM_CLASSES)[0].to(device)
    target = data.node_types[0]
    in_channels = {k: v.x.size(-1) for k, v in data.node_items()}
    idx, y = labels(data[target].num_nodes, device, gen)
    models = {"pyg": HGT(pyg_nn.HGTConv, in_channels, data.metadata(), target),
              "pyg_fast": HGT(fast.HGTConv, in_channels, data.metadata(), target)}
    bench_models(rec, {"model": "hgt", "dataset": "FakeHeteroDataset"}, {k: m.to(device) for k, m in models.items()},
                 (data.x_dict, data.edge_index_dict), idx, y)
