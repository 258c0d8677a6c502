"""Shared by the heterogeneous examples: offline dataset loading, backend choice and the timed
training loop."""
import argparse
import glob
import os
import shutil
import time
import zipfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATASETS = os.getenv("PYG_FAST_DATASETS", os.path.join(REPO, "..", "shared", "datasets"))


def parser(description: str, datasets) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--backend", choices=["pyg", "pyg_fast"], default="pyg_fast")
    p.add_argument("--dataset", choices=datasets, default=datasets[0])
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--datasets", default=DEFAULT_DATASETS, help="the staged dataset folder (read only)")
    p.add_argument("--workdir", default="/tmp/pyg_fast_examples", help="where a writable copy is made")
    return p


def layers(backend: str):
    """The module that provides the layer classes for a backend."""
    if backend == "pyg":
        import torch_geometric.nn as module
    else:
        import pyg_fast.hetero as module
    return module


def entities(args):
    """AIFB / MUTAG through PyG's Entities, loaded from a copy of the staged raw files."""
    from torch_geometric.datasets import Entities
    dst = os.path.join(args.workdir, "entities")
    shutil.copytree(os.path.join(args.datasets, "entities"), dst, dirs_exist_ok=True)
    return Entities(dst, args.dataset)


def hgb(args):
    """DBLP / ACM / IMDB through PyG's HGBDataset, loaded from a copy of the staged zips."""
    from torch_geometric.datasets import HGBDataset
    name = args.dataset.lower()
    dst = os.path.join(args.workdir, "hgb", name)
    shutil.copytree(os.path.join(args.datasets, "hgb", name), dst, dirs_exist_ok=True)
    for z in glob.glob(os.path.join(dst, "raw", "*.zip")):
        if not os.path.isdir(os.path.join(dst, "raw", name.upper())):
            zipfile.ZipFile(z).extractall(os.path.join(dst, "raw"))
    return HGBDataset(os.path.join(args.workdir, "hgb"), name)


def train(args, model, train_step, evaluate):
    """Runs the epochs; prints the mean epoch time (after the first, which includes one-off
    preprocessing and compilation) and the final test metric."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    times = []
    for epoch in range(1, args.epochs + 1):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = train_step()
        loss.backward()
        optimizer.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if epoch % 10 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}  time {1e3 * times[-1]:.1f} ms")
    model.eval()
    with torch.no_grad():
        name, value = evaluate()
    steady = times[1:] or times
    print(f"[{args.backend}] {args.dataset}: mean epoch time {1e3 * sum(steady) / len(steady):.1f} ms "
          f"(first {1e3 * times[0]:.1f} ms), test {name} {value:.4f}")
