"""Shared by the heterogeneous examples: offline dataset loading and the timed training loop of
one or both backends."""
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
    p.add_argument("--backend", choices=["pyg", "pyg_fast", "both"], default="both")
    p.add_argument("--dataset", choices=datasets, default=datasets[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--datasets", default=DEFAULT_DATASETS, help="the staged dataset folder (read only)")
    p.add_argument("--workdir", default="/tmp/pyg_fast_examples", help="where a writable copy is made")
    return p


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


def run(args, make_model, train_step, evaluate) -> None:
    """Trains ``make_model()`` (PyG's layers) with each requested backend from the same seed
    (``pyg_fast`` converts it); ``both`` alternates the two epoch by epoch in this process, each
    with its own random stream. ``train_step(model)`` returns the loss, ``evaluate(model)`` a
    (name, value) pair. Prints per-epoch times, the final test metric and the median speedup."""
    backends = ["pyg", "pyg_fast"] if args.backend == "both" else [args.backend]
    runs = {}
    for backend in backends:
        torch.manual_seed(args.seed)
        model = make_model().to(args.device)
        if backend == "pyg_fast":
            import pyg_fast
            pyg_fast.convert(model)
        runs[backend] = dict(model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4),
                             rng=torch.get_rng_state(), times=[])
    cuda = args.device.startswith("cuda")
    for epoch in range(1, args.epochs + 1):
        for backend in (backends if epoch % 2 else backends[::-1]):
            r = runs[backend]
            torch.set_rng_state(r["rng"])
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            r["model"].train()
            r["optimizer"].zero_grad()
            loss = train_step(r["model"])
            loss.backward()
            r["optimizer"].step()
            if cuda:
                torch.cuda.synchronize()
            r["times"].append(time.perf_counter() - start)
            r["rng"], r["loss"] = torch.get_rng_state(), loss.item()
        if epoch % 10 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:3d}  " + "  |  ".join(
                f"[{b}] loss {runs[b]['loss']:.4f} time {1e3 * runs[b]['times'][-1]:.1f} ms" for b in backends),
                flush=True)
    for backend, r in runs.items():
        r["model"].eval()
        with torch.no_grad():
            name, value = evaluate(r["model"])
        steady = r["times"][1:] or r["times"]  # the first epoch includes one-off preparation
        median = sorted(steady)[len(steady) // 2]
        print(f"[{backend}] {args.dataset}: median epoch time {1e3 * median:.1f} ms "
              f"(first {1e3 * r['times'][0]:.1f} ms), test {name} {value:.4f}")
    if len(runs) == 2:
        pairs = sorted(a / b for a, b in zip(runs["pyg"]["times"][1:], runs["pyg_fast"]["times"][1:]))
        if pairs:
            print(f"pyg_fast speedup per epoch (median of the epoch pairs): {pairs[len(pairs) // 2]:.2f}x")
