"""GraphSAGE trained in mini-batches, as PyG's reddit.py: neighbour sampling with fanouts
[25, 10], 1,024 seeds a batch, hidden 256, on a generated power-law graph (default) or on Cora
or CiteSeer (Planetoid raw files from ../shared/datasets/planetoid, ``--graph Cora``).

``--backend pyg_fast`` samples with ``pyg_fast.sampler.NeighborLoader`` on the training device and
converts the model; ``--backend pyg`` is stock PyG, whose NeighborLoader needs pyg-lib or
torch-sparse. Prints a progress line per epoch, the epoch time (sampling, feature gathering and
training) and the accuracy on the test nodes, sampled the same way.
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

import _common


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(in_channels, hidden_channels), SAGEConv(hidden_channels, out_channels)

    def forward(self, x, edge_index):
        x = F.dropout(F.relu(self.conv1(x, edge_index)), p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def generated(num_nodes: int, avg_degree: int, classes: int, device) -> Data:
    """A graph with power-law in-degrees, features that carry the class, and random splits."""
    gen = torch.Generator().manual_seed(0)
    weights = torch.arange(1, num_nodes + 1, dtype=torch.float).pow(-0.7)
    dst = torch.multinomial(weights, num_nodes * avg_degree, replacement=True, generator=gen)
    src = torch.randint(0, num_nodes, (num_nodes * avg_degree,), generator=gen)
    y = torch.randint(0, classes, (num_nodes,), generator=gen)
    x = torch.randn(num_nodes, 64, generator=gen) + F.one_hot(y, 64).float() * 2
    split = torch.rand(num_nodes, generator=gen)
    return Data(x=x, y=y, edge_index=torch.stack([src, dst]), train_mask=split < 0.6,
                test_mask=split >= 0.8).to(device)


def loader_for(args, data, nodes, shuffle):
    kwargs = dict(num_neighbors=[25, 10], batch_size=args.batch_size, input_nodes=nodes, shuffle=shuffle)
    if args.backend == "pyg_fast":
        import pyg_fast.sampler
        return pyg_fast.sampler.NeighborLoader(data, device=args.device, **kwargs)
    import torch_geometric.typing as typing
    if not (typing.WITH_PYG_LIB or typing.WITH_TORCH_SPARSE):
        sys.exit("--backend pyg: PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is installed")
    from torch_geometric.loader import NeighborLoader
    return NeighborLoader(data, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pyg_fast", choices=["pyg", "pyg_fast"])
    parser.add_argument("--graph", default="generated", choices=["generated", "Cora", "CiteSeer"])
    parser.add_argument("--nodes", type=int, default=100_000, help="--graph generated: number of nodes")
    parser.add_argument("--avg_degree", type=int, default=20, help="--graph generated: edges per node")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=1024)
    parser.add_argument("--root", default=_common.DATASETS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.graph == "generated":
        data = generated(args.nodes, args.avg_degree, 16, args.device)
    else:
        args.dataset = args.graph
        data = _common.load_planetoid(args)
    model = SAGE(data.num_features, 256, int(data.y.max()) + 1).to(args.device)
    if args.backend == "pyg_fast":
        import pyg_fast
        pyg_fast.convert(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    train = loader_for(args, data, data.train_mask, shuffle=True)
    test = loader_for(args, data, data.test_mask, shuffle=False)
    for epoch in range(1, args.epochs + 1):
        model.train()
        start, seen = time.perf_counter(), 0
        for i, batch in enumerate(train, 1):
            batch = batch.to(args.device)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            seen += batch.batch_size
            print(f"\repoch {epoch}: batch {i}/{len(train)}", end="", flush=True)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in test:
                batch = batch.to(args.device)
                pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
                correct += int((pred == batch.y[:batch.batch_size]).sum())
                total += batch.batch_size
        print(f"\repoch {epoch}: {seconds:.2f} s ({seen / seconds:,.0f} seeds/s), test accuracy {correct / total:.4f}")


if __name__ == "__main__":
    main()
