"""Shared command line, data loading and training loop of the example scripts."""
import argparse
import glob
import os
import shutil
import tempfile
import time

import torch
import torch.nn.functional as F

DATASETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "datasets", "planetoid")


class TwoLayerNet(torch.nn.Module):
    """The two-layer node classifier of PyG's Planetoid examples: dropout, conv1, activation,
    dropout, conv2. The layers keep PyG's attribute names (conv1, conv2) for the converter."""

    def __init__(self, conv1: torch.nn.Module, conv2: torch.nn.Module, dropout: float = 0.5, act=F.relu):
        super().__init__()
        self.conv1, self.conv2 = conv1, conv2
        self.dropout, self.act = dropout, act

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.act(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.dropout, training=self.training)
        return self.conv2(x, edge_index)


def parse_args(description: str, epochs: int, lr: float, weight_decay: float = 5e-4):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dataset", default="Cora", choices=["Cora", "CiteSeer"])
    parser.add_argument("--backend", default="both", choices=["pyg", "pyg_fast", "both"],
                        help="'both' trains stock PyG and pyg_fast from the same seed and compares them")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--weight_decay", type=float, default=weight_decay)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default=os.environ.get("PLANETOID_ROOT", DATASETS),
                        help="folder holding the Planetoid raw files (copied, never written)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser.parse_args()


def load_planetoid(args):
    """The dataset, loaded from a temporary copy of the shared raw files."""
    from torch_geometric.datasets import Planetoid
    import torch_geometric.transforms as T
    workdir = tempfile.mkdtemp(prefix="pyg_fast_example_")
    raw = os.path.join(workdir, args.dataset, "raw")
    os.makedirs(raw)
    for path in glob.glob(os.path.join(args.root, f"ind.{args.dataset.lower()}.*")):
        shutil.copy(path, raw)
    return Planetoid(workdir, args.dataset, transform=T.NormalizeFeatures())[0].to(args.device)


def run(args, make_model, data) -> None:
    """Trains the model from ``make_model()`` with each requested backend from the same seed
    and prints accuracy and epoch times side by side."""
    backends = ["pyg", "pyg_fast"] if args.backend == "both" else [args.backend]
    results = {}
    for backend in backends:
        torch.manual_seed(args.seed)
        results[backend] = train(args, backend, make_model(), data)
    print(f"\n{args.dataset}: backend | test accuracy | median epoch (train step)")
    for backend, (acc, median_s) in results.items():
        print(f"  {backend:8s} | {acc:.4f} | {median_s * 1e3:.2f} ms")
    if len(results) == 2:
        print(f"  pyg_fast speedup per epoch: {results['pyg'][1] / results['pyg_fast'][1]:.2f}x")


def train(args, backend: str, model: torch.nn.Module, data):
    """Trains with Adam, printing progress, and returns (test accuracy at the epoch of best
    validation accuracy, as PyG's examples report it; median epoch time in seconds)."""
    if backend == "pyg_fast":
        import pyg_fast.nn
        pyg_fast.convert(model)
    model = model.to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    best_val = test_acc = 0.0
    times = []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(dim=-1)
        accs = [float((pred[m] == data.y[m]).float().mean()) for m in (data.train_mask, data.val_mask, data.test_mask)]
        if accs[1] > best_val:
            best_val, test_acc = accs[1], accs[2]
        if epoch % 20 == 0 or epoch == args.epochs:
            print(f"[{backend}] epoch {epoch:03d}  loss {loss.item():.4f}  train {accs[0]:.4f}  "
                  f"val {accs[1]:.4f}  test {accs[2]:.4f}  time {times[-1] * 1e3:.1f} ms")
    return test_acc, sorted(times)[len(times) // 2]
