"""RGCN entity classification on AIFB / MUTAG (PyG's examples/rgcn.py setup: featureless
two-layer RGCN with 30 bases). --backend pyg, pyg_fast (converted) or both (alternating)."""
import torch
import torch.nn.functional as F

from torch_geometric.nn import RGCNConv

from hetero_common import entities, parser, run


class RGCN(torch.nn.Module):
    def __init__(self, num_nodes, num_relations, num_classes):
        super().__init__()
        self.conv1 = RGCNConv(num_nodes, 16, num_relations, num_bases=30)
        self.conv2 = RGCNConv(16, num_classes, num_relations, num_bases=30)

    def forward(self, edge_index, edge_type):
        x = F.relu(self.conv1(None, edge_index, edge_type))
        return F.log_softmax(self.conv2(x, edge_index, edge_type), dim=1)


def main():
    args = parser("RGCN on Entities", ["AIFB", "MUTAG"]).parse_args()
    dataset = entities(args)
    data = dataset[0].to(args.device)

    def train_step(model):
        out = model(data.edge_index, data.edge_type)
        return F.nll_loss(out[data.train_idx], data.train_y)

    def evaluate(model):
        pred = model(data.edge_index, data.edge_type).argmax(dim=-1)
        return "accuracy", (pred[data.test_idx] == data.test_y).float().mean().item()

    run(args, lambda: RGCN(data.num_nodes, dataset.num_relations, dataset.num_classes), train_step, evaluate)


if __name__ == "__main__":
    main()
