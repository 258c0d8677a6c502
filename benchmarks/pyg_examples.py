"""PyG's own example scripts, unmodified and with the one line a pyg_fast user adds.

    python -m benchmarks.pyg_examples --pyg DIR [--out FILE] [--scripts gcn,gat,rgcn,hgt_dblp]

``DIR`` holds PyG's ``examples/`` folder at the tag of the installed version (not part of this
repository: e.g. ``git archive 2.8.0 examples | tar -x -C DIR`` in a pytorch_geometric clone).
Each script is copied into a scratch folder beside a copy of the staged datasets it reads
(``../shared/datasets``, where PyG's scripts would download them) and run twice in a
subprocess: as it is, and with ``import pyg_fast`` at the top and

    pyg_fast.convert(model)

before its training function. Both runs start with ``torch.manual_seed(0)`` (PyG's scripts set
no seed), so they begin from the same weights. The table reports each run's final test accuracy
(the last ``Test`` printed), the script's own "Median time per epoch" where it prints one, and
the wall time of the whole script (dataset processing included).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.graphs import datasets_dir

# name: (script under examples/, dataset folders to stage: (source under datasets/, destination under data/))
SCRIPTS = {
    "gcn": ("gcn.py", [("planetoid", "Planetoid/Cora/raw")]),
    "gat": ("gat.py", [("planetoid", "Planetoid/Cora/raw")]),
    "rgcn": ("rgcn.py", [("entities", "Entities")]),
    "hgt_dblp": ("hetero/hgt_dblp.py", [("magnn/dblp", "DBLP")]),
}
ADDED_LINE = "pyg_fast.convert(model)"


SEEDED = "import torch\ntorch.manual_seed(0)\n"


def with_pyg_fast(source: str) -> str:
    """The script with the one added line (and its import)."""
    match = re.search(r"^def train\(", source, flags=re.M)
    if match is None:
        raise ValueError("no train() function to put the conversion before")
    return ("import pyg_fast\n" + source[:match.start()] + ADDED_LINE + "\n\n\n" + source[match.start():])


def stage(scratch: Path, folders) -> None:
    for source, destination in folders:
        target = scratch / "data" / destination
        if source == "planetoid":  # PyG reads the raw files from <root>/<name>/raw
            target.mkdir(parents=True, exist_ok=True)
            for path in (datasets_dir() / source).glob("ind.cora.*"):
                shutil.copy(path, target)
        else:
            shutil.copytree(datasets_dir() / source, target, dirs_exist_ok=True)


def run(script: Path, device: str) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="" if device == "cpu" else os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, script.name], cwd=script.parent, env=env, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr)[-2000:]}
    tests = re.findall(r"Test(?: acc)?[=:]\s*([0-9.]+)", proc.stdout)
    median = re.search(r"Median time per epoch:\s*([0-9.]+)s", proc.stdout)
    return {"test": float(tests[-1]) if tests else None, "epoch_s": float(median.group(1)) if median else None,
            "wall_s": wall_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyg", required=True, help="folder holding PyG's examples/")
    parser.add_argument("--scripts", default=",".join(SCRIPTS))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", default=None, help="markdown file for the table (printed anyway)")
    args = parser.parse_args()
    rows = ["| script | backend | test accuracy | median epoch (ms) | script wall time (s) |",
            "| --- | --- | --- | --- | --- |"]
    for name in args.scripts.split(","):
        relative, folders = SCRIPTS[name]
        source = (Path(args.pyg) / "examples" / relative).read_text()
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp)
            stage(scratch, folders)
            for backend, text in (("pyg", SEEDED + source), ("pyg_fast", SEEDED + with_pyg_fast(source))):
                script = scratch / "examples" / relative
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text(text)
                result = run(script, args.device)
                if "error" in result:
                    rows.append(f"| {relative} | {backend} | failed | {result['error'][-300:]!r} | |")
                    continue
                epoch = f"{1e3 * result['epoch_s']:.1f}" if result["epoch_s"] is not None else "-"
                rows.append(f"| {relative} | {backend} | {result['test']} | {epoch} | {result['wall_s']:.1f} |")
                print(rows[-1], flush=True)
    table = "\n".join(rows)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
