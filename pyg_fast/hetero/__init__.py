"""Heterogeneous GNN layers on the segmented matmul (:func:`pyg_fast.segment_matmul`).

Drop-in classes with PyG's constructor arguments, ``state_dict`` keys and results, and
:class:`HeteroModuleWrapper` (alias ``FastenModule``) to run an existing PyG module on the kernels
without changing it. :class:`TensorSlice` groups rows by type once for any number of segmented
matmuls.
"""
from pyg_fast.hetero.tensor_slice import TensorSlice
from pyg_fast.hetero.linear import HeteroDictLinear, HeteroLinear
from pyg_fast.hetero.rgcn_conv import FastRGCNConv, RelationSlice, RGCNConv
from pyg_fast.hetero.rgat_conv import RGATConv
from pyg_fast.hetero.hgt_conv import HGTConv
from pyg_fast.hetero.hetero_conv import HeteroConv
from pyg_fast.hetero.module_wrapper import FastenModule, HeteroModuleWrapper

__all__ = ["TensorSlice", "RelationSlice", "HeteroModuleWrapper", "FastenModule", "RGCNConv", "FastRGCNConv",
           "RGATConv", "HGTConv", "HeteroLinear", "HeteroDictLinear", "HeteroConv"]
