"""Small graphs of the benchmark zoo (benchmarks/graphs.py) with other shapes than the tests' own:
dense rows with a hub (tolokers), a grid (minesweeper), bipartite, heterogeneous projections."""
import pytest

ZOO_TEST_GRAPHS = ("cora", "citeseer", "tolokers", "minesweeper", "wordnet18rr", "imdb_homogeneous", "bipartite")


def zoo_graph(name: str):
    """A zoo graph's ``edge_index`` (sorted by destination) and node count; skips the test where
    the offline datasets are not next to this checkout."""
    from benchmarks.graphs import load_graph
    try:
        data = load_graph(name)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return data.edge_index, data.num_nodes
