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
    """Trains the model from ``make_model()`` with each requested backend from the same seed and
    prints accuracy and epoch times side by side. With ``both`` the backends alternate epoch by
    epoch in this process (each with its own random stream, so each sees the dropout masks of a
    run on its own), so that a change in the machine's load reaches both alike."""
    backends = ["pyg", "pyg_fast"] if args.backend == "both" else [args.backend]
    runs = {}
    for backend in backends:
        torch.manual_seed(args.seed)
        runs[backend] = Run(args, backend, make_model(), data)
    for epoch in range(1, args.epochs + 1):
        for backend in (backends if epoch % 2 else backends[::-1]):
            runs[backend].epoch(epoch)
        if epoch % 20 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:03d}  " + "  |  ".join(runs[b].progress() for b in backends), flush=True)
    print(f"\n{args.dataset}: backend | test accuracy | median epoch (train step)")
    for backend, r in runs.items():
        print(f"  {backend:8s} | {r.test_acc:.4f} | {r.median_s() * 1e3:.2f} ms")
    if len(runs) == 2:
        ratios = sorted(a / b for a, b in zip(runs["pyg"].times, runs["pyg_fast"].times))
        print(f"  pyg_fast speedup per epoch (median of the epoch pairs): {ratios[len(ratios) // 2]:.2f}x")


class Run:
    """One backend's model, optimiser, random stream and results."""

    def __init__(self, args, backend: str, model: torch.nn.Module, data):
        if backend == "pyg_fast":
            import pyg_fast
            pyg_fast.convert(model)
        self.args, self.backend, self.data = args, backend, data
        self.model = model.to(args.device)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state() if args.device.startswith("cuda") else None
        self.best_val = self.test_acc = 0.0
        self.times, self.loss, self.accs = [], float("nan"), [0.0, 0.0, 0.0]

    def epoch(self, epoch: int) -> None:
        """One training step, timed, then evaluation (test accuracy at the best validation
        accuracy, as PyG's examples report it)."""
        args, data, model = self.args, self.data, self.model
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state(self.cuda_rng)
        start = time.perf_counter()
        model.train()
        self.optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        self.optimizer.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(dim=-1)
        self.accs = [float((pred[m] == data.y[m]).float().mean()) for m in (data.train_mask, data.val_mask,
                                                                           data.test_mask)]
        if self.accs[1] > self.best_val:
            self.best_val, self.test_acc = self.accs[1], self.accs[2]
        self.loss = loss.item()
        self.rng = torch.get_rng_state()
        if self.cuda_rng is not None:
            self.cuda_rng = torch.cuda.get_rng_state()

    def progress(self) -> str:
        return (f"[{self.backend}] loss {self.loss:.4f} val {self.accs[1]:.4f} test {self.accs[2]:.4f} "
                f"time {self.times[-1] * 1e3:.1f} ms")

    def median_s(self) -> float:
        return sorted(self.times)[len(self.times) // 2]
