"""Suite "e2e_train_compiled": the training step of suite e2e's 3-layer models (GCN, GIN, SAGE,
GAT; hidden 64) under ``torch.compile``, against compiled stock PyG, the fair comparison for a
user who compiles.

Case keys: model, graph. Methods: ``pyg_fast`` (``torch.compile`` of the converted model),
``pyg_compiled`` (``torch.compile`` of the stock model, same options), ``pyg_fast_eager``,
``pyg``; each compiled method records ``graph_breaks`` and ``compile_s`` (its first step).
Outputs of the compiled models are checked against the stock eager model before timing;
compile_s adds the training graph's compilation to its first step.
"""
import copy
import time

import torch
from torch._dynamo.utils import counters

from benchmarks.common import TIMING_ROUNDS, Recorder, budget_for, compiled_apart, time_interleaved
from benchmarks.suites.e2e import cases, step_functions

SUITE = "e2e_train_compiled"


def compiled(net: torch.nn.Module, reference: torch.nn.Module, x, edge_index, y):
    """(compiled train step, seconds its first step took, graph breaks while compiling); the
    compiled model's output is checked against ``reference`` first."""
    torch._dynamo.reset()
    counters.clear()
    model = compiled_apart(net)
    with torch.no_grad():
        torch.testing.assert_close(model(x, edge_index), reference(x, edge_index), rtol=1e-3, atol=1e-3)
    step = step_functions(model, x, edge_index, y)[0]
    start = time.perf_counter()
    step()
    if x.is_cuda:
        torch.cuda.synchronize()
    return model, step, time.perf_counter() - start, sum(counters["graph_break"].values())


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    for case, (x, edge_index, y), stock, fast in cases(device, quick):
        fns, extra = {}, {}
        reference = copy.deepcopy(stock)  # the compiled steps train the models they were given
        for method, net in (("pyg_fast", fast), ("pyg_compiled", stock)):
            model, step, compile_s, breaks = compiled(net, reference, x, edge_index, y)
            fns[method], extra[method] = step, dict(compile_s=compile_s, graph_breaks=breaks)
        fns["pyg_fast_eager"] = step_functions(fast, x, edge_index, y)[0]
        fns["pyg"] = step_functions(stock, x, edge_index, y)[0]
        times = time_interleaved(fns, *budget_for(quick), device, TIMING_ROUNDS)
        for method in fns:
            rec.add(SUITE, case, method, times[method], **extra.get(method, {}))
        del fns
        torch._dynamo.reset()
