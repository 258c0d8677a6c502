"""GraphSAGE (mean) on Cora / CiteSeer; `--backend pyg_fast` converts the model."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

from _common import load_planetoid, parse_args, run


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden_channels)
        self.conv2 = SAGEConv(hidden_channels, out_channels)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


if __name__ == "__main__":
    args = parse_args("GraphSAGE node classification", epochs=200, lr=0.01)
    torch.manual_seed(args.seed)
    data = load_planetoid(args)
    run(args, lambda: SAGE(data.num_features, 64, int(data.y.max()) + 1), data)
