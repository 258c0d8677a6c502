"""GAT on Cora / CiteSeer, as PyG's examples/gat.py; `--backend pyg_fast` converts the model."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

from _common import load_planetoid, parse_args, run


class GAT(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, heads=8):
        super().__init__()
        self.conv1 = GATConv(in_channels, hidden_channels, heads, dropout=0.6)
        self.conv2 = GATConv(hidden_channels * heads, out_channels, heads=1, concat=False, dropout=0.6)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


if __name__ == "__main__":
    args = parse_args("GAT node classification", epochs=200, lr=0.005)
    torch.manual_seed(args.seed)
    data = load_planetoid(args)
    run(args, lambda: GAT(data.num_features, 8, int(data.y.max()) + 1), data)
