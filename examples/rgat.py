"""RGAT entity classification on AIFB / MUTAG (PyG's examples/rgat.py setup: random 16-dim
node features, two RGAT layers and a linear classifier). --backend pyg, pyg_fast (converted) or both."""
import torch
import torch.nn.functional as F

from torch_geometric.nn import RGATConv

from hetero_common import entities, parser, run


class RGAT(torch.nn.Module):
    def __init__(self, in_channels, hidden, num_classes, num_relations):
        super().__init__()
        self.conv1 = RGATConv(in_channels, hidden, num_relations)
        self.conv2 = RGATConv(hidden, hidden, num_relations)
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

    def train_step(model):
        out = model(data.x, data.edge_index, data.edge_type)
        return F.nll_loss(out[data.train_idx], data.train_y)

    def evaluate(model):
        pred = model(data.x, data.edge_index, data.edge_type).argmax(dim=-1)
        return "accuracy", (pred[data.test_idx] == data.test_y).float().mean().item()

    run(args, lambda: RGAT(16, 16, dataset.num_classes, dataset.num_relations), train_step, evaluate)


if __name__ == "__main__":
    main()
