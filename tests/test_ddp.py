"""Converted layers (GCN, SAGE, RGCN) under DistributedDataParallel (two CPU processes over gloo;
two GPUs over NCCL where the machine has them), eager and under torch.compile: one training step
gives the gradients of the single-process run on the CPU, with each rank's caches its own."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

import pyg_fast

WORLD = 2


class Net(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        make = {"gcn": pyg_nn.GCNConv, "sage": pyg_nn.SAGEConv,
                "rgcn": lambda i, o: pyg_nn.RGCNConv(i, o, num_relations=3, num_bases=2)}[kind]
        self.conv1, self.conv2 = make(8, 16), make(16, 4)
        self.typed = kind == "rgcn"

    def forward(self, x, edge_index):
        args = (edge_index, edge_type(edge_index)) if self.typed else (edge_index,)
        return self.conv2(self.conv1(x, *args).relu(), *args)


def edge_type(edge_index):
    return (edge_index[0] + edge_index[1]) % 3


def model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return Net(kind)


def data():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 8, generator=gen)
    edge_index = torch.randint(0, 50, (2, 400), generator=gen)
    y = torch.randint(0, 4, (50,), generator=gen)
    return x, edge_index, y


def loss_on(net, nodes, device="cpu"):
    x, edge_index, y = (t.to(device) for t in data())
    return F.cross_entropy(net(x, edge_index)[nodes.to(device)], y[nodes.to(device)])


def rank_nodes(rank: int) -> torch.Tensor:
    return torch.arange(rank, 50, WORLD)  # each rank's share of the training nodes


def worker(rank: int, kind: str, init_file: str, out_dir: str, compiled: bool, cuda: bool) -> None:
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    try:
        step(rank, kind, out_dir, compiled, device)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def step(rank: int, kind: str, out_dir: str, compiled: bool, device: torch.device) -> None:
    # Its own frame: the DDP module dies before the process group. Freed after it (torch 2.13, gloo),
    # the reducer's destructor joined gloo's thread while holding the GIL that thread waited for.
    net = pyg_fast.convert(model(kind).to(device), verbose=False)
    ddp = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank] if device.type == "cuda" else None)
    loss_on(torch.compile(ddp) if compiled else ddp, rank_nodes(rank), device).backward()
    torch.save([p.grad.cpu() for p in ddp.parameters()], os.path.join(out_dir, f"grads{rank}.pt"))


@pytest.mark.parametrize("cuda", [False, pytest.param(True, marks=pytest.mark.skipif(
    torch.cuda.device_count() < WORLD, reason=f"needs {WORLD} GPUs"))], ids=["gloo", "nccl"])
@pytest.mark.parametrize("kind,compiled", [("gcn", False), ("sage", False), ("rgcn", False), ("sage", True),
                                           ("gcn", True), ("rgcn", True)])
def test_ddp_step_matches_single_process(kind, compiled, cuda, tmp_path):
    mp.spawn(worker, args=(kind, str(tmp_path / "init"), str(tmp_path), compiled, cuda), nprocs=WORLD, join=True)
    single = model(kind)
    # DDP averages the ranks' gradients: the mean of their losses, here in one process
    (sum(loss_on(single, rank_nodes(r)) for r in range(WORLD)) / WORLD).backward()
    for rank in range(WORLD):
        grads = torch.load(tmp_path / f"grads{rank}.pt")
        for got, param in zip(grads, single.parameters()):
            # float32 on the GPU sums in another order than on the CPU
            torch.testing.assert_close(got, param.grad, **(dict(rtol=1e-4, atol=1e-5) if cuda else
                                                            dict(rtol=1e-5, atol=1e-6)))
