"""GCN on Cora / CiteSeer, as PyG's examples/gcn.py; `--backend pyg_fast` converts the model."""
import torch
from torch_geometric.nn import GCNConv

from _common import TwoLayerNet, load_planetoid, parse_args, run


def GCN(in_channels, hidden_channels, out_channels):
    return TwoLayerNet(GCNConv(in_channels, hidden_channels, cached=True),
                       GCNConv(hidden_channels, out_channels, cached=True))

if __name__ == "__main__":
    args = parse_args("GCN node classification", epochs=200, lr=0.01)
    torch.manual_seed(args.seed)
    data = load_planetoid(args)
    run(args, lambda: GCN(data.num_features, 16, int(data.y.max()) + 1), data)
