"""Suite "edge_softmax": softmax of [E, heads] scores over edges grouped by destination
(forward). Methods: pyg_fast, torch (torch_geometric.utils.softmax with the same ptr)."""
import torch
from torch_geometric.utils import softmax

from benchmarks.common import Recorder, time_ms
from benchmarks.graphs import load_graph, selected
from pyg_fast.ops import edge_softmax

GRAPHS = ("cora", "arxiv_like", "reddit2_like")
HEADS = (1, 4, 8)


def run(rec: Recorder, device, quick: bool = False) -> None:
    device = torch.device(device)
    for graph_name in selected(("cora",) if quick else GRAPHS):
        data = load_graph(graph_name)
        dst = data.edge_index[1].to(device)  # sorted by destination
        N = data.num_nodes
        ptr = torch._convert_indices_from_coo_to_csr(dst, N)
        for heads in HEADS:
            scores = torch.randn(dst.numel(), heads, device=device)
            case = {"graph": graph_name, "heads": heads}
            ref = softmax(scores, dst, num_nodes=N)
            torch.testing.assert_close(edge_softmax(scores, ptr=ptr), ref, rtol=1e-4, atol=1e-6)
            rec.add("edge_softmax", case, "pyg_fast", time_ms(lambda: edge_softmax(scores, ptr=ptr)))
            rec.add("edge_softmax", case, "torch", time_ms(lambda: softmax(scores, dst, num_nodes=N)))
