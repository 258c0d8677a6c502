"""Thin Python layer over torch.ops.pyg_fast: argument checks, per-graph layouts,
fake (meta) kernels for torch.compile and autograd."""
from pyg_fast.ops.segment_reduce import segment_reduce
from pyg_fast.ops.segment_arg_reduce import segment_arg_reduce
from pyg_fast.ops.index_segment_reduce import index_segment_reduce, index_weight_segment_reduce
from pyg_fast.ops.sddmm import sddmm
from pyg_fast.ops.edge_softmax import edge_softmax
from pyg_fast.ops.segment_matmul import gather_segment_matmul, segment_matmul

__all__ = ["segment_reduce", "segment_arg_reduce", "index_segment_reduce", "index_weight_segment_reduce", "sddmm", "edge_softmax",
           "segment_matmul", "gather_segment_matmul"]
