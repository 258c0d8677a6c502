"""Suite "ddp_train": mini-batch training with DistributedDataParallel, one process per GPU, as
PyG's examples/multi_gpu scripts run it.

Case keys: model (sage, gcn, gat), graph (reddit2_like), gpus (1, 2, 4 and 8, as many as the
machine has; on the CPU, in quick mode, 1 and 2 gloo processes). Methods: ``pyg_fast`` (the
converted model) and ``pyg`` (stock), both wrapped in DDP in the same processes, their epochs
alternated. An epoch is a fixed set of sampled batches of the minibatch_train loop (fanout
[25, 10], 1,024 seeds, 602 features, hidden 256, a new edge_index every step), shared out
between the ranks, each rank sampling its own on its device; ``ms`` is the median epoch time.
Each record also carries ``scaling_efficiency``: the method's epoch time on one GPU over
(gpus x its epoch time here); pyg_fast's carries ``speedup_over_pyg``, the median over epoch
pairs of pyg's time over pyg_fast's. Before timing, one DDP step of each model from the same weights
must give the same gradients.
"""
import copy
import gc
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import pyg_fast.nn
from benchmarks.common import Recorder, synchronize
from benchmarks.graphs import load_graph, selected
from benchmarks.suites import minibatch_train as mb

SUITE = "ddp_train"
GRAPHS = ("reddit2_like",)
QUICK_GRAPHS = ("quick_powerlaw",)
MODELS = ("sage", "gcn", "gat")
BATCHES, EPOCHS = 64, 5  # batches per epoch over all ranks (16 a rank on 4 GPUs); timed epochs per method
QUICK = dict(seeds=64, in_features=32, hidden=32, batches=4, epochs=2)


def _worker(rank: int, world: int, cfg: dict, init_file: str, out_file: str) -> None:
    cuda = cfg["device"] == "cuda"
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        times = _measure(rank, world, cfg, device)
        gc.collect()  # the DDP modules go before the process group (gloo's destructor waits otherwise)
        if rank == 0:
            with open(out_file, "w") as f:
                json.dump(times, f)
    finally:
        dist.destroy_process_group()


def _measure(rank: int, world: int, cfg: dict, device: torch.device) -> dict:
    """{model: {method: [epoch ms]}} of this rank."""
    data = load_graph(cfg["graph"], device)
    num_nodes = data.num_nodes
    colptr = torch._convert_indices_from_coo_to_csr(data.edge_index[1], num_nodes)
    gen = torch.Generator(device=device).manual_seed(0)
    features = torch.randn(num_nodes, cfg["in_features"], device=device, generator=gen)
    labels = torch.randint(0, mb.CLASSES, (num_nodes,), device=device, generator=gen)
    torch.manual_seed(1 + rank)  # each rank its own seeds and neighbours
    batches = [mb.sample(colptr, data.edge_index[0], torch.randperm(num_nodes, device=device)[:cfg["seeds"]],
                         mb.FANOUTS, features, labels) for _ in range(cfg["batches"] // world)]
    ddp_args = dict(device_ids=[device.index]) if device.type == "cuda" else {}
    results = {}
    for kind in MODELS:
        torch.manual_seed(0)
        stock = mb.make_model(kind, cfg["in_features"], cfg["hidden"]).to(device)
        fast = pyg_fast.nn.convert(copy.deepcopy(stock), verbose=False)
        models = {"pyg_fast": torch.nn.parallel.DistributedDataParallel(fast, **ddp_args),
                  "pyg": torch.nn.parallel.DistributedDataParallel(stock, **ddp_args)}
        _check_gradients(models, batches[0])
        steps = {method: mb.stepper(model, batches) for method, model in models.items()}
        times = {method: [] for method in steps}
        for round_ in range(cfg["epochs"] + 1):  # the first epoch of each warms up
            for method, step in steps.items():
                synchronize(device)
                dist.barrier()
                start = time.perf_counter()
                for _ in batches:
                    step()
                synchronize(device)
                dist.barrier()
                if round_:
                    times[method].append((time.perf_counter() - start) * 1e3)
        results[kind] = times
        del models, steps, stock, fast
    return results


def _check_gradients(models: dict, batch: mb.Batch) -> None:
    """One DDP backward of each model on the same batch from the same weights: equal gradients."""
    grads = {}
    for method, model in models.items():
        model.zero_grad(set_to_none=True)
        out = model(batch.x, batch.edge_index.clone())
        torch.nn.functional.cross_entropy(out[:batch.y.numel()], batch.y).backward()
        grads[method] = [p.grad for p in model.parameters()]
        model.zero_grad(set_to_none=True)
    for got, want in zip(grads["pyg_fast"], grads["pyg"]):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)


def _spawn(world: int, cfg: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "times.json")
        mp.spawn(_worker, args=(world, cfg, os.path.join(tmp, "init"), out_file), nprocs=world, join=True)
        with open(out_file) as f:
            return json.load(f)


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    cfg = dict(QUICK) if quick else dict(seeds=mb.SEEDS, in_features=mb.IN_FEATURES, hidden=mb.HIDDEN,
                                         batches=BATCHES, epochs=EPOCHS)
    cfg["device"] = device.type
    counts = (1, 2) if device.type != "cuda" else tuple(g for g in (1, 2, 4, 8) if g <= torch.cuda.device_count())
    # Each GPU count runs twice, in the order 1, 2, 4, 4, 2, 1: a drift of the host's speed over the
    # run (these steps are partly host-bound) then weighs on every count alike.
    order = counts if quick else counts + counts[::-1]
    for graph in selected(QUICK_GRAPHS if quick else GRAPHS):
        cfg["graph"] = graph
        measured = {g: {kind: {"pyg_fast": [], "pyg": []} for kind in MODELS} for g in counts}
        for g in order:
            for kind, by_method in _spawn(g, cfg).items():
                for method, epochs in by_method.items():
                    measured[g][kind][method] += epochs
        for kind in MODELS:
            for method in ("pyg_fast", "pyg"):
                one = statistics.median(measured[1][kind][method])
                for g in counts:
                    epochs = measured[g][kind][method]
                    ms = statistics.median(epochs)
                    extra = {}
                    if method == "pyg_fast":  # over the epoch pairs, which ran back to back
                        extra["speedup_over_pyg"] = statistics.median(
                            p / f for p, f in zip(measured[g][kind]["pyg"], epochs))
                    rec.add(SUITE, {"model": kind, "graph": graph, "gpus": g}, method, ms,
                            scaling_efficiency=one / (g * ms), batches_per_epoch=cfg["batches"],
                            epoch_ms_min=min(epochs), epoch_ms_max=max(epochs), **extra)
