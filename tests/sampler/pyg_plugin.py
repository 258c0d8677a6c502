"""pytest plugin for PyG's test/loader/test_neighbor_loader.py: its NeighborLoader samples with
pyg_fast.sampler.NeighborSampler, and its sampler-only tests run without pyg-lib or
torch-sparse. Used by test_pyg_loader_suite.py."""
import torch_geometric.loader.neighbor_loader as neighbor_loader
import torch_geometric.testing.decorators as decorators

import pyg_fast.sampler

decorators.WITH_TORCH_SPARSE = True  # the skip decorator only: PyG's own code still sees none installed
neighbor_loader.NeighborSampler = pyg_fast.sampler.NeighborSampler
