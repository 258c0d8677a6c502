"""HGT node classification on the HGB datasets DBLP (author), ACM (paper) and IMDB (movie,
multi-label) with PyG's HGBDataset: per-type input projections, two HGT layers (64 channels,
2 heads) and a linear classifier. --backend pyg, pyg_fast (converted) or both (alternating)."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import HGTConv, Linear

from hetero_common import hgb, parser, run

TARGET = {"DBLP": "author", "ACM": "paper", "IMDB": "movie"}


class HGT(torch.nn.Module):
    def __init__(self, metadata, target, hidden, out_channels, heads=2, num_layers=2):
        super().__init__()
        self.target = target
        self.lin_dict = torch.nn.ModuleDict({t: Linear(-1, hidden) for t in metadata[0]})
        self.convs = torch.nn.ModuleList([HGTConv(hidden, hidden, metadata, heads) for _ in range(num_layers)])
        self.lin = Linear(hidden, out_channels)

    def forward(self, x_dict, edge_index_dict):
        x_dict = {t: self.lin_dict[t](x).relu() for t, x in x_dict.items()}
        for conv in self.convs:
            x_dict = conv(x_dict, edge_index_dict)
        return self.lin(x_dict[self.target])


def main():
    args = parser("HGT on HGB", ["DBLP", "ACM", "IMDB"]).parse_args()
    data = hgb(args)[0]
    target = TARGET[args.dataset]
    for node_type in data.node_types:  # featureless node types get a constant input
        if "x" not in data[node_type]:
            data[node_type].x = torch.ones(data[node_type].num_nodes, 1)
    data = data.to(args.device)
    y, train_mask, test_mask = data[target].y, data[target].train_mask, data[target].test_mask
    multi_label = y.dim() == 2

    def make_model():
        model = HGT(data.metadata(), target, 64, y.size(1) if multi_label else int(y.max()) + 1).to(args.device)
        with torch.no_grad():  # materialise the lazy input projections
            model(data.x_dict, data.edge_index_dict)
        return model

    def train_step(model):
        out = model(data.x_dict, data.edge_index_dict)[train_mask]
        if multi_label:
            return F.binary_cross_entropy_with_logits(out, y[train_mask].float())
        return F.cross_entropy(out, y[train_mask])

    def evaluate(model):
        out = model(data.x_dict, data.edge_index_dict)[test_mask]
        if multi_label:  # micro-F1 over the labels
            pred, true = out > 0, y[test_mask].bool()
            tp = (pred & true).sum().item()
            return "micro-F1", 2 * tp / max(1, pred.sum().item() + true.sum().item())
        return "accuracy", (out.argmax(-1) == y[test_mask]).float().mean().item()

    run(args, make_model, train_step, evaluate)


if __name__ == "__main__":
    main()
