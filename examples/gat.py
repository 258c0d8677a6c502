"""GAT on Cora / CiteSeer, as PyG's examples/gat.py; `--backend pyg_fast` converts the model."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

from _common import TwoLayerNet, load_planetoid, parse_args, run


def GAT(in_channels, hidden_channels, out_channels, heads=8):
    return TwoLayerNet(GATConv(in_channels, hidden_channels, heads, dropout=0.6),
                       GATConv(hidden_channels * heads, out_channels, heads=1, concat=False, dropout=0.6),
                       dropout=0.6, act=F.elu)

if __name__ == "__main__":
    args = parse_args("GAT node classification", epochs=200, lr=0.005)
    torch.manual_seed(args.seed)
    data = load_planetoid(args)
    run(args, lambda: GAT(data.num_features, 8, int(data.y.max()) + 1), data)
