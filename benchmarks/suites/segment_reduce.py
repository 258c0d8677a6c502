"""Suite "segment_reduce": rows of ``src`` [E, F] reduced per destination over the
sorted index ``edge_index[1]`` of each benchmark graph.

Case keys: graph, F, reduce, dtype. Methods: ``pyg_fast``
(``pyg_fast.segment_reduce``), ``torch_index_add`` (sum; mean divides by the
degree), ``torch_scatter_reduce`` (``scatter_reduce_``), ``torch_segment_reduce``,
``torch_sparse_csr`` (sum and mean as ``torch.sparse.mm`` of a [V, E] CSR matrix;
cuSPARSE on GPU) and, when torch_scatter is importable,
``torch_scatter_segment_coo`` / ``torch_scatter_segment_csr`` / ``torch_scatter_scatter``.
Per-graph preprocessing (CSR pointer, degrees, empty-segment mask, the sparse
matrix) is done once outside the timing for every method, as pyg_fast caches
its layout per index tensor. The reference is float64 torch on the same device.
"""
import warnings
from typing import Callable, Dict, Iterator, Tuple

import torch
from torch import Tensor

import pyg_fast
from benchmarks.common import REL_TOL, bench_methods, budget_for
from benchmarks.graphs import LARGE_GRAPHS, ZOO_LARGE, graph_names, load_graph

SUITE = "segment_reduce"
FEATURES = (1, 4, 16, 32, 64, 128, 256)
ZOO_LARGE_FEATURES = (16, 64, 128, 256)  # the zoo's graphs of 10 M edges and more
QUICK_FEATURES = (1, 4, 64)
REDUCES = ("sum", "mean", "max", "min")
LARGE_GRAPH_REDUCES = ("sum", "mean", "max")  # min costs as much as max and adds nothing there
BF16_FEATURES = 64  # bfloat16 is measured at this feature size, on the large graphs
SCATTER_REDUCE_NAMES = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}
# Float64 reference chunks hold at most this many elements, so that reddit2_like at
# F = 128 (E * F > 2^31) is checked on the GPU without a 24 GB float64 copy of src.
REFERENCE_CHUNK_ELEMENTS = 1 << 28

Reducer = Callable[[Tensor], Tensor]


def cases(graph: str, quick: bool) -> Iterator[Tuple[int, torch.dtype, Tuple[str, ...]]]:
    """(F, dtype, reduces) measured on ``graph``."""
    large = graph in LARGE_GRAPHS
    features = QUICK_FEATURES if quick else ZOO_LARGE_FEATURES if graph in ZOO_LARGE else FEATURES
    for num_features in features:
        dtypes = [torch.float32]
        if num_features == BF16_FEATURES and (large or quick):
            dtypes.append(torch.bfloat16)
        for dtype in dtypes:
            yield num_features, dtype, LARGE_GRAPH_REDUCES if large else REDUCES


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def segment_bytes(num_edges: int, num_nodes: int, num_features: int, dtype: torch.dtype) -> int:
    """Bytes a segment reduction must move: src, the int64 index and the output."""
    size = torch.finfo(dtype).bits // 8
    return num_edges * num_features * size + num_edges * 8 + num_nodes * num_features * size


def reference_segment_reduce(src: Tensor, index: Tensor, num_segments: int, reduce: str) -> Tensor:
    """Float64 ``scatter_reduce`` (empty segments give 0), a few columns at a time."""
    num_rows, num_features = src.shape
    out = torch.zeros(num_segments, num_features, dtype=torch.float64, device=src.device)
    step = max(1, REFERENCE_CHUNK_ELEMENTS // max(num_rows, 1))
    for start in range(0, num_features, step):
        chunk = src[:, start:start + step].double()
        out[:, start:start + step] = torch.zeros_like(out[:, start:start + step]).scatter_reduce_(
            0, index.view(-1, 1).expand_as(chunk), chunk, SCATTER_REDUCE_NAMES[reduce], include_self=False)
    return out


def torch_reducers(index: Tensor, ptr: Tensor, reduce: str, dtype: torch.dtype,
                   sparse: bool = True) -> Dict[str, Reducer]:
    """The baselines, each a function of src [E, F] giving the reduction [V, F].

    ``index`` is sorted with CSR pointer ``ptr``; ``sparse`` adds torch_sparse_csr.
    Empty segments give 0 in every method, as in PyG.
    """
    num_segments, num_rows = ptr.numel() - 1, index.numel()
    lengths = ptr.diff()
    empty = (lengths == 0).unsqueeze(1)
    reducers: Dict[str, Reducer] = {}
    if reduce in ("sum", "mean"):
        degree = lengths.clamp(min=1).to(dtype).unsqueeze(1)

        def index_add(src: Tensor) -> Tensor:
            out = src.new_zeros(num_segments, src.size(1)).index_add_(0, index, src)
            return out if reduce == "sum" else out.div_(degree)
        reducers["torch_index_add"] = index_add

    def scatter_reduce(src: Tensor) -> Tensor:
        return src.new_zeros(num_segments, src.size(1)).scatter_reduce_(
            0, index.view(-1, 1).expand_as(src), src, SCATTER_REDUCE_NAMES[reduce], include_self=False)
    reducers["torch_scatter_reduce"] = scatter_reduce

    def segment_reduce(src: Tensor) -> Tensor:
        if reduce in ("sum", "mean"):  # initial=0 only sets empty segments here
            return torch.segment_reduce(src, reduce, lengths=lengths, unsafe=True, initial=0)
        return torch.segment_reduce(src, reduce, lengths=lengths, unsafe=True).masked_fill_(empty, 0)
    reducers["torch_segment_reduce"] = segment_reduce

    if sparse and reduce in ("sum", "mean"):
        values = torch.ones(num_rows, dtype=dtype, device=index.device)
        if reduce == "mean":
            values = values.div_(degree.squeeze(1)[index])
        matrix = csr_matrix(ptr, torch.arange(num_rows, device=index.device), values,
                            (num_segments, num_rows))
        reducers["torch_sparse_csr"] = lambda src: torch.sparse.mm(matrix, src)

    try:
        import torch_scatter
    except ImportError:
        return reducers

    def first(result):  # torch_scatter's max/min also return the arg-extremum
        return result[0] if isinstance(result, tuple) else result
    reducers["torch_scatter_segment_coo"] = lambda src: first(
        torch_scatter.segment_coo(src, index, dim_size=num_segments, reduce=reduce))
    reducers["torch_scatter_segment_csr"] = lambda src: first(
        torch_scatter.segment_csr(src, ptr, reduce=reduce))

    def scatter(src: Tensor) -> Tensor:
        if reduce in ("max", "min") and src.is_cuda and src.numel() >= 2 ** 31:
            # torch_scatter 2.1.2's CUDA scatter max/min at E * F >= 2^31 gave wrong results on the
            # H100 and hit an illegal address, which ends the process's CUDA context.
            raise RuntimeError("not run: torch_scatter's CUDA scatter max/min fails for E * F >= 2^31")
        return torch_scatter.scatter(src, index, dim=0, dim_size=num_segments, reduce=reduce)
    reducers["torch_scatter_scatter"] = scatter
    return reducers


def csr_pointer(index: Tensor, num_segments: int) -> Tensor:
    return torch._convert_indices_from_coo_to_csr(index, num_segments)


def csr_matrix(ptr: Tensor, columns: Tensor, values: Tensor, size: Tuple[int, int]) -> Tensor:
    """A torch CSR matrix, without invariant checks or torch's "beta" warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(ptr, columns, values, size=size, check_invariants=False)


def bench_graph(rec, device, graph: str, case_list, budget) -> None:
    """Benchmarks every (F, dtype, reduces) of ``case_list`` on ``graph``."""
    data = load_graph(graph, device)
    index = data.edge_index[1]
    num_nodes, num_edges = data.num_nodes, index.numel()
    ptr = csr_pointer(index, num_nodes)
    for num_features, dtype, reduces in case_list:
        src = torch.randn(num_edges, num_features, device=device, dtype=dtype)
        for reduce in reduces:
            case = {"graph": graph, "F": num_features, "reduce": reduce, "dtype": dtype_name(dtype)}
            methods = {"pyg_fast": lambda: pyg_fast.segment_reduce(src, index, dim_size=num_nodes, reduce=reduce)}
            methods.update({name: (lambda fn=fn: fn(src))
                            for name, fn in torch_reducers(index, ptr, reduce, dtype).items()})
            ref = reference_segment_reduce(src, index, num_nodes, reduce)
            bench_methods(rec, SUITE, case, methods, ref, device, REL_TOL[dtype], budget,
                          nbytes=segment_bytes(num_edges, num_nodes, num_features, dtype))
            del methods, ref
        del src


def run_on_graphs(rec, suite: str, bench_graph_fn, device, quick: bool) -> None:
    """Runs ``bench_graph_fn`` on each benchmark graph with its cases; a graph whose
    dataset is missing on this machine is reported and the others still run."""
    torch.manual_seed(0)
    for graph in graph_names(quick):
        try:
            bench_graph_fn(rec, device, graph, cases(graph, quick), budget_for(quick))
        except FileNotFoundError as exc:
            rec.add_failure(suite, f"graph {graph}: {exc}")


def run(rec, device, quick: bool = False) -> None:
    run_on_graphs(rec, SUITE, bench_graph, device, quick)
