"""Graph transforms that make pyg_fast's kernels faster on a graph used many times."""
from pyg_fast.transforms.reorder import Reorder, community_rcm_order, label_propagation, permute

__all__ = ["Reorder", "community_rcm_order", "label_propagation", "permute"]
