"""GraphSAGE on several GPUs with DistributedDataParallel, as PyG's examples/multi_gpu scripts:
one process per GPU (``mp.spawn``), each with its own share of the training nodes and its own
sampler, gradients all-reduced over NCCL, evaluation on rank 0. Without GPUs the processes run on
the CPU over gloo (``--world_size`` of them), which is how CI-sized runs check it.

``--backend pyg_fast`` converts the model and samples with ``pyg_fast.sampler.NeighborLoader``
on each rank's device; ``--backend pyg`` is stock PyG (its loader needs pyg-lib or torch-sparse).
The graph is the generated one of ``sage_minibatch.py`` (or Cora / CiteSeer).
"""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import _common
from sage_minibatch import SAGE, generated, loader_for


def run(rank: int, world_size: int, args, init_file: str) -> None:
    cuda = torch.cuda.is_available() and not args.cpu
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)
    try:
        train(rank, world_size, args, device)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def train(rank: int, world_size: int, args, device: str) -> None:
    # Its own frame: the DDP module is freed before the process group (gloo's destructor otherwise
    # joins a thread that waits for the GIL it holds).
    args.device = device
    torch.manual_seed(0)  # the same graph and initial weights on every rank
    if args.graph == "generated":
        data = generated(args.nodes, args.avg_degree, 16, device)
    else:
        args.dataset = args.graph
        data = _common.load_planetoid(args)
    model = SAGE(data.num_features, 256, int(data.y.max()) + 1).to(device)
    if args.backend == "pyg_fast":
        import pyg_fast
        pyg_fast.convert(model, verbose=rank == 0)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[int(device.split(":")[1])]
                                                    if device.startswith("cuda") else None)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=0.003)
    train_nodes = data.train_mask.nonzero().view(-1)
    per_rank = train_nodes.numel() // world_size  # equal shares: every rank takes as many steps (DDP)
    mine = train_nodes[rank * per_rank:(rank + 1) * per_rank]  # each rank trains on its own seeds
    torch.manual_seed(rank)  # and samples its own batches
    loader = loader_for(args, data, mine, shuffle=True)
    test = loader_for(args, data, data.test_mask, shuffle=False) if rank == 0 else None
    for epoch in range(1, args.epochs + 1):
        ddp.train()
        start = time.perf_counter()
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            out = ddp(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
        dist.barrier()
        seconds = time.perf_counter() - start
        if rank == 0:
            model.eval()
            correct = total = 0
            with torch.no_grad():
                for batch in test:
                    batch = batch.to(device)
                    pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
                    correct += int((pred == batch.y[:batch.batch_size]).sum())
                    total += batch.batch_size
            print(f"epoch {epoch}: {seconds:.2f} s on {world_size} process(es), test accuracy {correct / total:.4f}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="pyg_fast", choices=["pyg", "pyg_fast"])
    parser.add_argument("--graph", default="generated", choices=["generated", "Cora", "CiteSeer"])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--avg_degree", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=1024)
    parser.add_argument("--world_size", type=int, default=torch.cuda.device_count() or 2,
                        help="processes: one per GPU (default: every GPU; 2 CPU processes without GPUs)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU over gloo even where GPUs exist")
    parser.add_argument("--root", default=_common.DATASETS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(args.world_size, args, os.path.join(tmp, "init")), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
