"""RGAT entity classification on AIFB / MUTAG (PyG's examples/rgat.py setup: random 16-dim
node features, two RGAT layers and a linear classifier). Run with --backend pyg or pyg_fast."""
import torch
import torch.nn.functional as F

from hetero_common import entities, layers, parser, train


class RGAT(torch.nn.Module):
    def __init__(self, conv_cls, in_channels, hidden, num_classes, num_relations):
        super().__init__()
        self.conv1 = conv_cls(in_channels, hidden, num_relations)
        self.conv2 = conv_cls(hidden, hidden, num_relations)
        self.lin = torch.nn.Linear(hidden, num_classes)

    def forward(self, x, edge_index, edge_type):
        x = F.relu(self.conv1(x, edge_index, edge_type))
        x = F.relu(self.conv2(x, edge_index, edge_type))
        return F.log_softmax(self.lin(x), dim=-1)


def main():
    args = parser("RGAT on Entities", ["AIFB", "MUTAG"]).parse_args()
    dataset = entities(args)
    data = dataset[0]
    torch.manual_seed(args.seed)
    data.x = torch.randn(data.num_nodes, 16)
    data = data.to(args.device)
    model = RGAT(layers(args.backend).RGATConv, 16, 16, dataset.num_classes, dataset.num_relations).to(args.device)

    def train_step():
        out = model(data.x, data.edge_index, data.edge_type)
        return F.nll_loss(out[data.train_idx], data.train_y)

    def evaluate():
        pred = model(data.x, data.edge_index, data.edge_type).argmax(dim=-1)
        return "accuracy", (pred[data.test_idx] == data.test_y).float().mean().item()

    train(args, model, train_step, evaluate)


if __name__ == "__main__":
    main()
