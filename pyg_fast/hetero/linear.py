"""Drop-in HeteroLinear and HeteroDictLinear running on the segmented matmul."""
from typing import Dict, List, Optional

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch.nn.parameter import UninitializedParameter

from pyg_fast._dropin import DropIn
from pyg_fast.hetero.tensor_slice import TensorSlice, host_ptr, slice_for
from pyg_fast.ops.segment_matmul import segment_matmul


def autocast_operands(*tensors: Optional[Tensor]) -> List[Optional[Tensor]]:
    """The operands in the autocast dtype when autocast is on for their device (custom ops are
    not autocast by PyTorch), else unchanged."""
    x = tensors[0]
    if x is not None and torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
        return [t.to(dtype) if t is not None else None for t in tensors]
    return list(tensors)


class HeteroLinear(DropIn, pyg_nn.HeteroLinear):
    r"""PyG's :class:`~torch_geometric.nn.HeteroLinear` (same arguments, state and results):
    :math:`\mathbf{x}^{\prime}_i = \mathbf{x}_i \mathbf{W}_{\tau(i)} + \mathbf{b}_{\tau(i)}` as one
    segmented matmul with the bias fused, on rows in any order (the grouping by type is cached
    with ``type_vec``). ``tensor_slice`` may pass a prebuilt :class:`TensorSlice` of ``type_vec``.
    """

    def forward(self, x: Tensor, type_vec: Tensor, tensor_slice: Optional[TensorSlice] = None) -> Tensor:
        if torch.jit.is_scripting() or not x.is_floating_point() or isinstance(self.weight, UninitializedParameter):
            return super().forward(x, type_vec)
        ts = slice_for(type_vec, self.num_types, x.device, tensor_slice, self.is_sorted)
        x, weight, bias = autocast_operands(x, self.weight, self.bias)
        return ts.gather_matmul(x, weight, bias)


class HeteroDictLinear(DropIn, pyg_nn.HeteroDictLinear):
    r"""PyG's :class:`~torch_geometric.nn.HeteroDictLinear` (same arguments, state and results):
    :math:`\mathbf{x}^{\prime}_{\kappa} = \mathbf{x}_{\kappa} \mathbf{W}^{\top}_{\kappa} + \mathbf{b}_{\kappa}`.
    When at least ``min_types`` types with equal input size are present, all of them run as one
    segmented matmul (the pointer comes from the tensor sizes: no sync); otherwise one GEMM per
    type, which is as fast for a few large types.
    """
    min_types = 4

    def forward(self, x_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
        keys = [key for key in self.lins.keys() if key in x_dict]
        if torch.jit.is_scripting() or len(keys) < self.min_types:
            return super().forward(x_dict)
        xs = [x_dict[key] for key in keys]
        lins = [self.lins[key] for key in keys]
        if (any(isinstance(lin.weight, UninitializedParameter) for lin in lins)
                or len({(x.size(-1), x.dtype, x.device, x.dim()) for x in xs}) != 1
                or not xs[0].is_floating_point() or xs[0].dim() != 2):
            return super().forward(x_dict)
        sizes = [x.size(0) for x in xs]
        ptr = host_ptr(tuple(sizes))
        weight = torch.stack([lin.weight.t() for lin in lins])
        bias = torch.stack([lin.bias for lin in lins]) if lins[0].bias is not None else None
        x, weight, bias = autocast_operands(torch.cat(xs), weight, bias)
        outs = segment_matmul(x, ptr, weight, bias).split(sizes)
        return dict(zip(keys, outs))
