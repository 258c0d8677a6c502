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
- ``ZOO``: 19 graphs of other shapes for tuning with held-out graphs (real ones: Cora, CiteSeer,
  PubMed, Tolokers, Minesweeper, WordNet18 and 18RR, the HGB graphs' homogeneous projections;
  generated: power laws with other exponents for sources and destinations up to 25 M edges, a
  block model, a road-like grid, a bipartite graph, sampled mini-batches of the large ones),
  built once and kept on disk; ``$PYG_FAST_BENCH_ZOO=1`` runs the op suites over it.

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
from typing import Callable, Dict, Optional, Tuple

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


def selected(names) -> tuple:
    """``names`` restricted to ``$PYG_FAST_BENCH_GRAPHS`` when it is set."""
    wanted = os.environ.get("PYG_FAST_BENCH_GRAPHS", "")
    wanted = {name for name in wanted.split(",") if name}
    return tuple(name for name in names if not wanted or name in wanted)


def graph_names(quick: bool) -> tuple:
    """The graphs of the op suites: the quick ones, the zoo (``$PYG_FAST_BENCH_ZOO=1``) or the
    default four, restricted by ``$PYG_FAST_BENCH_GRAPHS``."""
    if quick:
        return selected(QUICK_GRAPHS)
    return selected(ZOO if os.environ.get("PYG_FAST_BENCH_ZOO") == "1" else BENCH_GRAPHS)


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
    if name in _ZOO_BUILDERS:
        return _zoo_graph(name)
    raise ValueError(f"unknown benchmark graph {name!r}; known: "
                     + ", ".join(dict.fromkeys(BENCH_GRAPHS + QUICK_GRAPHS + ZOO)))


def sort_by_destination(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Edges ordered by destination, then source."""
    key = edge_index[1] * num_nodes + edge_index[0]
    key = torch.sort(key).values
    return torch.stack([key % num_nodes, key // num_nodes])


def power_law_graph(num_nodes: int, num_edges: int, seed: int, exponent: float = 0.55,
                    src_exponent: Optional[float] = None) -> torch.Tensor:
    """A Chung-Lu multigraph: each endpoint of each edge is drawn independently with
    probability proportional to a node weight ``rank ** -exponent``, ranks assigned by a
    random permutation (separately for sources and destinations, so hubs in and out
    differ). Degrees then follow a power law with exponent ``1 + 1 / exponent`` (about
    2.8). ``src_exponent`` gives the sources another exponent (default: the same). Exactly
    ``num_edges`` edges; duplicates and self-loops are kept. Sorted by destination.
    Vectorised: reddit2_like takes a few seconds and under 2 GB."""
    generator = torch.Generator().manual_seed(seed)

    def endpoints(power: float) -> torch.Tensor:
        cdf = torch.arange(1, num_nodes + 1, dtype=torch.float64).pow_(-power).cumsum_(0)
        node_of_rank = torch.randperm(num_nodes, generator=generator)
        u = torch.rand(num_edges, generator=generator, dtype=torch.float64).mul_(cdf[-1])
        ranks = torch.searchsorted(cdf, u, right=True).clamp_(max=num_nodes - 1)
        return node_of_rank[ranks]

    src = endpoints(exponent if src_exponent is None else src_exponent)
    dst = endpoints(exponent)
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
    edge_index, num_nodes = _planetoid_graph("pubmed")
    return Data(edge_index=sort_by_destination(edge_index, num_nodes), num_nodes=num_nodes)


# The zoo ----------------------------------------------------------------------------------------
# Graphs of other shapes than the two the kernels were tuned on, for tuning with held-out graphs:
# real ones from the datasets folder and generated ones. Each is built once and kept on disk
# (``$PYG_FAST_GRAPH_CACHE``, default ``~/.cache/pyg_fast/graphs``), as edge_index sorted by
# destination and the node count.
ZOO_VERSION = 1  # part of the cache file names: raise it when a builder changes


def _dataset_copy(folder: str, root: str) -> str:
    """A writable copy of ``datasets/<folder>`` under ``root`` (PyG writes processed/ beside raw/)."""
    target = os.path.join(root, folder)
    shutil.copytree(datasets_dir() / folder, target, dirs_exist_ok=True)
    return target


def _heterophilous(name: str) -> Tuple[torch.Tensor, int]:
    from torch_geometric.datasets import HeterophilousGraphDataset
    with tempfile.TemporaryDirectory() as root:
        data = HeterophilousGraphDataset(_dataset_copy("heterophilous", root), name)[0]
    return data.edge_index, data.num_nodes


def _wordnet(name: str) -> Tuple[torch.Tensor, int]:
    from torch_geometric.datasets import WordNet18, WordNet18RR
    cls, folder = (WordNet18, "wn18") if name == "wn18" else (WordNet18RR, "wn18rr")
    with tempfile.TemporaryDirectory() as root:
        data = cls(os.path.join(_dataset_copy("wordnet", root), folder))[0]
    return data.edge_index, data.num_nodes


def hgb_graph(name: str):
    """HGB graph ``name`` ('acm', 'dblp', 'imdb') as PyG's ``HGBDataset`` gives it (HeteroData),
    kept on disk after its first processing (tens of seconds for DBLP and IMDB)."""
    import zipfile
    from torch_geometric.datasets import HGBDataset
    path = graph_cache_dir() / f"hgb_{name}-v{ZOO_VERSION}.pt"
    if path.exists():
        return torch.load(path, weights_only=False)
    with tempfile.TemporaryDirectory() as root:
        copy = _dataset_copy(os.path.join("hgb", name), root)
        for archive in glob.glob(os.path.join(copy, "raw", "*.zip")):
            zipfile.ZipFile(archive).extractall(os.path.join(copy, "raw"))
        data = HGBDataset(os.path.join(root, "hgb"), name)[0]
    _save(data, path)
    return data


def _hgb_homogeneous(name: str) -> Tuple[torch.Tensor, int]:
    """The HGB graph's every edge type in one node numbering (``HeteroData.to_homogeneous``)."""
    data = hgb_graph(name).to_homogeneous()
    return data.edge_index, data.num_nodes


def _planetoid_graph(key: str) -> Tuple[torch.Tensor, int]:
    """The adjacency of a Planetoid graph from its ``ind.<key>.graph`` file, made undirected
    without self-loops as PyG's Planetoid does."""
    from torch_geometric.utils import remove_self_loops, to_undirected
    graph_file = next((p for p in _planetoid_raw(key) if p.endswith(f"ind.{key}.graph")), None)
    if graph_file is None:
        raise FileNotFoundError(f"ind.{key}.graph is missing under {datasets_dir() / 'planetoid'}")
    with open(graph_file, "rb") as f:
        adjacency = pickle.load(f, encoding="latin1")  # {node: [neighbours]}
    num_nodes = max(max(adjacency), max((j for n in adjacency.values() for j in n), default=0)) + 1
    src = [i for i, neighbours in adjacency.items() for _ in neighbours]
    dst = [j for neighbours in adjacency.values() for j in neighbours]
    edge_index, _ = remove_self_loops(torch.tensor([src, dst], dtype=torch.long))
    return to_undirected(edge_index, num_nodes=num_nodes), num_nodes


def block_model_graph(num_nodes: int, num_edges: int, blocks: int, inside: float, seed: int) -> torch.Tensor:
    """A stochastic block model: sources uniform, each edge's destination uniform inside the
    source's block (of ``blocks`` equal contiguous ones) with probability ``inside``, else
    uniform over all nodes."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    size = -(-num_nodes // blocks)
    block_start = src // size * size
    block_len = (num_nodes - block_start).clamp(max=size)
    local = (torch.rand(num_edges, generator=gen, dtype=torch.float64) * block_len).long()
    anywhere = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.where(torch.rand(num_edges, generator=gen) < inside, block_start + local, anywhere)
    return torch.stack([src, dst])


def grid_graph(side: int, keep: float, seed: int) -> torch.Tensor:
    """A road-like graph: a ``side`` x ``side`` grid, each undirected edge to a right or lower
    neighbour kept with probability ``keep``, both directions (in-degrees 0-4)."""
    gen = torch.Generator().manual_seed(seed)
    node = torch.arange(side * side).view(side, side)
    pairs = torch.cat([torch.stack([node[:, :-1].reshape(-1), node[:, 1:].reshape(-1)]),
                       torch.stack([node[:-1, :].reshape(-1), node[1:, :].reshape(-1)])], dim=1)
    pairs = pairs[:, torch.rand(pairs.size(1), generator=gen) < keep]
    return torch.cat([pairs, pairs.flip(0)], dim=1)


def bipartite_graph(num_left: int, num_right: int, num_edges: int, exponent: float, seed: int) -> torch.Tensor:
    """Edges from ``num_left`` uniform sources to ``num_right`` destinations (numbered after the
    sources) of power-law popularity (weight ``rank ** -exponent``)."""
    gen = torch.Generator().manual_seed(seed)
    weights = torch.arange(1, num_right + 1, dtype=torch.float64).pow_(-exponent)
    dst = num_left + torch.randperm(num_right, generator=gen)[torch.multinomial(weights, num_edges, True, generator=gen)]
    return torch.stack([torch.randint(0, num_left, (num_edges,), generator=gen), dst])


def sampled_subgraph(name: str, seeds: int, fanouts: Tuple[int, ...], seed: int) -> Tuple[torch.Tensor, int]:
    """A neighbour-sampled mini-batch of benchmark graph ``name`` (the sampler of the
    minibatch_train suite: ``seeds`` seed nodes, uniform neighbours with replacement)."""
    from benchmarks.suites.minibatch_train import sample
    data = _load_cpu(name)
    torch.manual_seed(seed)
    colptr = torch._convert_indices_from_coo_to_csr(data.edge_index[1], data.num_nodes)
    nodes = torch.randperm(data.num_nodes)[:seeds]
    batch = sample(colptr, data.edge_index[0], nodes, fanouts, torch.zeros(data.num_nodes, 0),
                   torch.zeros(data.num_nodes, dtype=torch.long))
    return batch.edge_index, batch.x.size(0)


def _generated(edge_index_fn: Callable[[], torch.Tensor], num_nodes: int) -> Callable[[], Tuple[torch.Tensor, int]]:
    return lambda: (edge_index_fn(), num_nodes)


# name: builder of (edge_index in any order, num_nodes), for the zoo's graphs beyond cora and pubmed
_ZOO_BUILDERS: Dict[str, Callable[[], Tuple[torch.Tensor, int]]] = {
    "citeseer": lambda: _planetoid_graph("citeseer"),
    "tolokers": lambda: _heterophilous("Tolokers"),  # dense: 88 edges a node
    "minesweeper": lambda: _heterophilous("Minesweeper"),  # a grid: 8 neighbours
    "wordnet18": lambda: _wordnet("wn18"),
    "wordnet18rr": lambda: _wordnet("wn18rr"),
    "acm_homogeneous": lambda: _hgb_homogeneous("acm"),
    "dblp_homogeneous": lambda: _hgb_homogeneous("dblp"),
    "imdb_homogeneous": lambda: _hgb_homogeneous("imdb"),
    # power laws: hubs among the sources only, the destinations only, both; up to 25 M edges
    "powerlaw_src0.3_dst1.0": _generated(lambda: power_law_graph(200_000, 2_000_000, 11, 1.0, 0.3), 200_000),
    "powerlaw_src1.0_dst0.3": _generated(lambda: power_law_graph(200_000, 2_000_000, 12, 0.3, 1.0), 200_000),
    "powerlaw_0.7_10m": _generated(lambda: power_law_graph(1_000_000, 10_000_000, 13, 0.7), 1_000_000),
    "powerlaw_0.45_25m": _generated(lambda: power_law_graph(500_000, 25_000_000, 14, 0.45), 500_000),
    "block_model": _generated(lambda: block_model_graph(100_000, 1_000_000, 20, 0.8, 15), 100_000),
    "road_like": _generated(lambda: grid_graph(500, 0.9, 16), 250_000),
    "bipartite": _generated(lambda: bipartite_graph(50_000, 100_000, 1_000_000, 0.6, 17), 150_000),
    "minibatch_arxiv_like": lambda: sampled_subgraph("arxiv_like", 1024, (25, 10), 18),
    "minibatch_reddit2_like": lambda: sampled_subgraph("reddit2_like", 1024, (25, 10), 19),
}


ZOO = ("cora", "pubmed") + tuple(_ZOO_BUILDERS)
ZOO_LARGE = ("powerlaw_0.7_10m", "powerlaw_0.45_25m")  # measured at fewer feature sizes


def graph_cache_dir() -> Path:
    return Path(os.environ.get("PYG_FAST_GRAPH_CACHE", Path.home() / ".cache" / "pyg_fast" / "graphs"))


def _zoo_graph(name: str) -> Data:
    path = graph_cache_dir() / f"{name}-v{ZOO_VERSION}.pt"
    if path.exists():
        edge_index, num_nodes = torch.load(path)
    else:
        edge_index, num_nodes = _ZOO_BUILDERS[name]()
        edge_index = sort_by_destination(edge_index, num_nodes)
        _save((edge_index, num_nodes), path)
    return Data(edge_index=edge_index, num_nodes=num_nodes)


def _save(value, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")  # one per process: test workers build alike
    torch.save(value, partial)
    partial.replace(path)  # never a half-written file under the final name
