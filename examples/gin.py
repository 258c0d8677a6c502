"""GIN (2 layers, MLP updates) on Cora / CiteSeer; `--backend pyg_fast` converts the model."""
import torch
from torch_geometric.nn import MLP, GINConv

from _common import TwoLayerNet, load_planetoid, parse_args, run


def GIN(in_channels, hidden_channels, out_channels):
    return TwoLayerNet(GINConv(MLP([in_channels, hidden_channels, hidden_channels]), train_eps=True),
                       GINConv(MLP([hidden_channels, hidden_channels, out_channels], norm=None), train_eps=True))

if __name__ == "__main__":
    args = parse_args("GIN node classification", epochs=200, lr=0.01)
    torch.manual_seed(args.seed)
    data = load_planetoid(args)
    run(args, lambda: GIN(data.num_features, 64, int(data.y.max()) + 1), data)
