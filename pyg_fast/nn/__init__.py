"""Drop-in PyG layers on pyg_fast kernels, and the model converter.

Each class subclasses PyG's class of the same name (so ``isinstance``, ``repr`` and
``state_dict`` are unchanged) and takes the same arguments.
"""
from pyg_fast.nn.gcn_conv import GCNConv
from pyg_fast.nn.gin_conv import GINConv
from pyg_fast.nn.sage_conv import SAGEConv
from pyg_fast.nn.gat_conv import GATConv
from pyg_fast.convert import convert

__all__ = ["GCNConv", "GINConv", "SAGEConv", "GATConv", "convert"]
