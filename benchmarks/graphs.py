"""Benchmark graphs, each a ``torch_geometric.data.Data`` with ``edge_index``
(int64, sorted by destination ``edge_index[1]`` and then by source: CSC order,
the order aggregation walks) and ``num_nodes``.

- ``cora``: Planetoid Cora (2,708 nodes, 10,556 edges), with ``x`` and ``y``.
- ``pubmed``: the PubMed adjacency (19,717 nodes) from ``ind.pubmed.graph``,
  made undirected without self-loops as PyG's Planetoid does (88,648 edges); no features (``ind.pubmed.allx`` is missing from the datasets).
- ``arxiv_like`` (169,343 nodes, 1,166,243 edges) and ``reddit2_like``
  (232,965 nodes, 23,213,838 edges): synthetic power-law graphs of the sizes of
  ogbn-arxiv and Reddit2, from a fixed seed (see ``power_law_graph``).
- ``quick_powerlaw`` and ``quick_sparse``: small synthetic graphs for CPU smoke runs.

The datasets folder is ``$PYG_FAST_DATA`` if set, else ``shared/datasets`` next
to (or inside) the repository root. Graphs are cached in memory per process.
``$PYG_FAST_BENCH_GRAPHS`` (comma-separated names) restricts every suite to those graphs
(``selected``), for partial runs within a device call.
"""
import glob
import os
import pickle
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import torch
from torch_geometric.data import Data

REPO_ROOT = Path(__file__).resolve().parents[1]

BENCH_GRAPHS = ("cora", "pubmed", "arxiv_like", "reddit2_like")
QUICK_GRAPHS = ("quick_powerlaw", "quick_sparse")
LARGE_GRAPHS = ("arxiv_like", "reddit2_like")

# name: (nodes, edges, seed)
SYNTHETIC = {
    "arxiv_like": (169_343, 1_166_243, 1),
    "reddit2_like": (232_965, 23_213_838, 2),
    "products_like": (2_449_029, 61_859_140, 5),  # ogbn-products' sizes (about 1 GB of edge_index)
    "quick_powerlaw": (2_000, 30_000, 3),
    "quick_sparse": (1_500, 2_000, 4),  # most nodes have no in-edges: empty segments
}
PUBMED_NODES = 19_717


def selected(names) -> tuple:
    """``names`` restricted to ``$PYG_FAST_BENCH_GRAPHS`` when it is set."""
    wanted = os.environ.get("PYG_FAST_BENCH_GRAPHS", "")
    wanted = {name for name in wanted.split(",") if name}
    return tuple(name for name in names if not wanted or name in wanted)


def graph_names(quick: bool) -> tuple:
    return selected(QUICK_GRAPHS if quick else BENCH_GRAPHS)


def datasets_dir() -> Path:
    """The offline datasets folder (``$PYG_FAST_DATA`` or ``shared/datasets``)."""
    if os.environ.get("PYG_FAST_DATA"):
        return Path(os.environ["PYG_FAST_DATA"])
    candidates = [REPO_ROOT.parent / "shared" / "datasets", REPO_ROOT / "shared" / "datasets"]
    for path in candidates:
        if path.is_dir():
            return path
    raise FileNotFoundError("pyg_fast benchmarks: no datasets folder; looked at "
                            + ", ".join(map(str, candidates)) + " (set PYG_FAST_DATA)")


def load_graph(name: str, device="cpu") -> Data:
    """The named benchmark graph on ``device`` (generated or read once per process)."""
    return _load_cpu(name).to(device)


@lru_cache(maxsize=None)
def _load_cpu(name: str) -> Data:
    if name in SYNTHETIC:
        num_nodes, num_edges, seed = SYNTHETIC[name]
        return Data(edge_index=power_law_graph(num_nodes, num_edges, seed), num_nodes=num_nodes)
    if name == "cora":
        return _cora()
    if name == "pubmed":
        return _pubmed()
    raise ValueError(f"unknown benchmark graph {name!r}; known: "
                     + ", ".join(BENCH_GRAPHS + QUICK_GRAPHS))


def sort_by_destination(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Edges ordered by destination, then source."""
    key = edge_index[1] * num_nodes + edge_index[0]
    key = torch.sort(key).values
    return torch.stack([key % num_nodes, key // num_nodes])


def power_law_graph(num_nodes: int, num_edges: int, seed: int, exponent: float = 0.55) -> torch.Tensor:
    """A Chung-Lu multigraph: each endpoint of each edge is drawn independently with
    probability proportional to a node weight ``rank ** -exponent``, ranks assigned by a
    random permutation (separately for sources and destinations, so hubs in and out
    differ). Degrees then follow a power law with exponent ``1 + 1 / exponent`` (about
    2.8). Exactly ``num_edges`` edges; duplicates and self-loops are kept. Sorted by
    destination. Vectorised: reddit2_like takes a few seconds and under 2 GB."""
    generator = torch.Generator().manual_seed(seed)
    cdf = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow_(-exponent).cumsum_(0)

    def endpoints() -> torch.Tensor:
        node_of_rank = torch.randperm(num_nodes, generator=generator)
        u = torch.rand(num_edges, generator=generator, dtype=torch.float64).mul_(cdf[-1])
        ranks = torch.searchsorted(cdf, u, right=True).clamp_(max=num_nodes - 1)
        return node_of_rank[ranks]

    src = endpoints()
    dst = endpoints()
    return sort_by_destination(torch.stack([src, dst]), num_nodes)


def _planetoid_raw(key: str) -> list:
    files = sorted(glob.glob(str(datasets_dir() / "planetoid" / f"ind.{key}.*")))
    if not files:
        raise FileNotFoundError(f"no ind.{key}.* files under {datasets_dir() / 'planetoid'}")
    return files


def _cora() -> Data:
    from torch_geometric.datasets import Planetoid
    # PyG writes processed/ next to raw/, so load from a copy, never from shared/.
    with tempfile.TemporaryDirectory() as root:
        raw = os.path.join(root, "Cora", "raw")
        os.makedirs(raw)
        for path in _planetoid_raw("cora"):
            shutil.copy(path, raw)
        data = Planetoid(root, "Cora")[0]
    return Data(x=data.x, y=data.y, num_nodes=data.num_nodes,
                edge_index=sort_by_destination(data.edge_index, data.num_nodes))


def _pubmed() -> Data:
    from torch_geometric.utils import remove_self_loops, to_undirected
    graph_file = next((p for p in _planetoid_raw("pubmed") if p.endswith("ind.pubmed.graph")), None)
    if graph_file is None:
        raise FileNotFoundError(f"ind.pubmed.graph is missing under {datasets_dir() / 'planetoid'}")
    with open(graph_file, "rb") as f:
        adjacency = pickle.load(f, encoding="latin1")  # {node: [neighbours]}
    src = [i for i, neighbours in adjacency.items() for _ in neighbours]
    dst = [j for neighbours in adjacency.values() for j in neighbours]
    edge_index, _ = remove_self_loops(torch.tensor([src, dst], dtype=torch.long))
    edge_index = to_undirected(edge_index, num_nodes=PUBMED_NODES)
    return Data(edge_index=sort_by_destination(edge_index, PUBMED_NODES), num_nodes=PUBMED_NODES)
