"""Suite "torch_scatter_api": the names of ``pyg_fast.compat.torch_scatter`` that the
``segment_reduce`` suite does not time (the argmin/argmax outputs, integer values, ``mul``, the CSR
family's sum and the compositions std, logsumexp and softmax) against torch_scatter 2.1.2 itself, on the
destination index of each graph (unsorted: torch_scatter's ``scatter`` and PyG's callers do not
sort; ``segment_*`` get the sorted index they require).

Case keys: api, graph, F, dtype. Methods: ``pyg_fast`` (the stand-in) and ``torch_scatter``.
The reference is torch_scatter's result on float64 values (integers: on the same values); an
arg-extremum output is checked to point, in every column, at a row of its segment that holds the
extremum (torch_scatter breaks ties in no fixed order), and the timings are of the whole call.
Runs only where torch_scatter is importable.
"""
from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

from benchmarks.common import REL_TOL, bench_methods, budget_for
from benchmarks.graphs import graph_names, load_graph

SUITE = "torch_scatter_api"
FEATURES = (16, 64)

# api: (function name, the index it takes: "index" (unsorted), "sorted" or "ptr", value dtype)
APIS = {
    "scatter_max": ("scatter_max", "index", torch.float32),
    "scatter_min": ("scatter_min", "index", torch.float32),
    "segment_coo_max": ("segment_max_coo", "sorted", torch.float32),
    "segment_csr_max": ("segment_max_csr", "ptr", torch.float32),
    "segment_csr_sum": ("segment_csr", "ptr", torch.float32),
    "scatter_sum_int64": ("scatter_sum", "index", torch.int64),
    "scatter_max_int64": ("scatter_max", "index", torch.int64),
    "scatter_mul": ("scatter_mul", "index", torch.float32),
    "scatter_std": ("scatter_std", "index", torch.float32),
    "scatter_logsumexp": ("scatter_logsumexp", "index", torch.float32),
    "scatter_softmax": ("scatter_softmax", "index", torch.float32),
}


def _values(api: str, num_edges: int, num_features: int, dtype: torch.dtype, device) -> Tensor:
    if not dtype.is_floating_point:
        return torch.randint(-1000, 1000, (num_edges, num_features), device=device, dtype=dtype)
    if api == "scatter_mul":  # products of 10^4 values in [0.9, 1.1] stay within float32's range
        return torch.rand(num_edges, num_features, device=device, dtype=dtype).mul_(0.2).add_(0.9)
    return torch.randn(num_edges, num_features, device=device, dtype=dtype)


def _valid_arg(arg: Tensor, values: Tensor, src: Tensor, segment: Tensor) -> bool:
    """Whether every arg is torch_scatter's ``src.size(0)`` for an empty segment, and else a row of
    its segment holding the extremum."""
    E = src.size(0)
    empty = torch.zeros(values.size(0), dtype=torch.bool, device=src.device)
    empty[segment] = True
    empty = ~empty.unsqueeze(1).expand_as(arg)
    rows = arg.clamp(max=E - 1)
    held = (src.gather(0, rows).to(values.dtype) == values) & (segment[rows] == torch.arange(
        values.size(0), device=src.device).unsqueeze(1))
    return bool(torch.where(empty, arg == E, held & (arg < E)).all())


def _call(module, name: str, kind: str, src: Tensor, indices: Dict[str, Tensor], num_nodes: int):
    fn = getattr(module, name)
    if kind == "ptr":
        return fn(src, indices["ptr"])
    if kind == "sorted":
        return fn(src, indices["sorted"], dim_size=num_nodes)
    return fn(src, indices["index"], dim=0, dim_size=num_nodes)


def bench_graph(rec, device, graph: str, modules, budget: Tuple[float, float]) -> None:
    data = load_graph(graph, device)
    num_nodes = data.num_nodes
    shuffle = torch.randperm(data.edge_index.size(1), device=device)
    index = data.edge_index[1][shuffle]
    sorted_index = data.edge_index[1].sort().values
    indices = {"index": index, "sorted": sorted_index,
               "ptr": torch._convert_indices_from_coo_to_csr(sorted_index, num_nodes)}
    for api, (name, kind, dtype) in APIS.items():
        for num_features in FEATURES:
            case = {"api": api, "graph": graph, "F": num_features, "dtype": str(dtype).replace("torch.", "")}
            src = _values(api, index.numel(), num_features, dtype, device)
            reference = _call(modules["torch_scatter"], name, kind, src.double() if dtype.is_floating_point else src,
                              indices, num_nodes)
            methods: Dict[str, Callable] = {method: (lambda m=module: _call(m, name, kind, src, indices, num_nodes))
                                            for method, module in modules.items()}
            if isinstance(reference, tuple):  # (values, arg): ties make any arg of the extremum right
                segment = indices["sorted"] if kind != "index" else index
                for method in list(methods):
                    if not _valid_arg(methods[method]()[1], reference[0], src, segment):
                        rec.add(SUITE, case, method, None, error="an arg-extremum that is not one")
                        del methods[method]
                reference = reference[0]
                methods = {method: (lambda fn=fn: fn()[0]) for method, fn in methods.items()}
            bench_methods(rec, SUITE, case, methods, reference, device,
                          REL_TOL[dtype] if dtype.is_floating_point else 0.0, budget)
            del src, reference, methods


def run(rec, device, quick: bool = False) -> None:
    try:
        import torch_scatter
    except ImportError:
        rec.add_failure(SUITE, "torch_scatter is not importable: nothing to compare against")
        return
    from pyg_fast.compat import torch_scatter as stand_in
    modules = {"pyg_fast": stand_in, "torch_scatter": torch_scatter}
    torch.manual_seed(0)
    for graph in graph_names(quick):
        try:
            bench_graph(rec, torch.device(device), graph, modules, budget_for(quick))
        except FileNotFoundError as exc:
            rec.add_failure(SUITE, f"graph {graph}: {exc}")
