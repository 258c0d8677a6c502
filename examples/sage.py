"""GraphSAGE (mean) on Cora / CiteSeer; `--backend pyg_fast` converts the model."""
import torch
from torch_geometric.nn import SAGEConv

from _common import TwoLayerNet, load_planetoid, parse_args, run


def SAGE(in_channels, hidden_channels, out_channels):
    return TwoLayerNet(SAGEConv(in_channels, hidden_channels), SAGEConv(hidden_channels, out_channels))

if __name__ == "__main__":
    args = parse_args("GraphSAGE node classification", epochs=200, lr=0.01)
    torch.manual_seed(args.seed)
    data = load_planetoid(args)
    run(args, lambda: SAGE(data.num_features, 64, int(data.y.max()) + 1), data)
