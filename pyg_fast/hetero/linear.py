"""Drop-in HeteroLinear and HeteroDictLinear running on the segmented matmul."""
from typing import Dict, List, Optional, Tuple

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch.nn.parameter import UninitializedParameter

from pyg_fast._dropin import DropIn
from pyg_fast.hetero.tensor_slice import TensorSlice, host_ptr, slice_for
from pyg_fast.hetero.typed_calls import finish, group, keys_of, order_problem, typed_calls
from pyg_fast.ops.segment_matmul import segment_matmul
from pyg_fast.tuning.segment_matmul import tensor_cores


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
    # Where the types' layers run as one segmented matmul. On the CPU one GEMM per type was faster:
    # a HeteroConv SAGE training step on HGB DBLP / ACM / IMDB (2 cores) took 2-9% longer grouped,
    # the inputs' concatenation and the outputs' split costing more than the calls they save.
    grouped_devices = ("cuda",)
    # The in and out features (each within these bounds) of layers that run grouped: the range the
    # segmented matmul was tuned over (K = N = 32-128).
    grouped_features = (32, 128)

    @classmethod
    def groups(cls, in_features: int, out_features: int, dtype: Optional[torch.dtype] = None) -> bool:
        """Whether layers of this shape run grouped on a device of ``grouped_devices`` (where CUDA
        computes in ``dtype``; None: not known yet). On CUDA only where the segmented matmul's
        products run on tensor cores (16-bit types, or float32 with TF32 allowed): in exact
        float32, PyTorch's default, its FMA path lost to cuBLAS. Six types of 4-14 k rows, forward
        and backward on an H200: 3.3 ms grouped against 1.15 ms one GEMM per type at 64 features,
        8.9 against 1.7 at 128; with TF32 or bfloat16 0.8-1.07 ms against 1.46-1.89 ms."""
        lo, hi = cls.grouped_features
        return lo <= in_features <= hi and lo <= out_features <= hi and (dtype is None or tensor_cores(dtype))

    def forward(self, x_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
        keys = [key for key in self.lins.keys() if key in x_dict]
        if torch.jit.is_scripting() or len(keys) < self.min_types:
            return super().forward(x_dict)
        return dict(zip(keys, grouped_linear([self.lins[key] for key in keys], [x_dict[key] for key in keys])))


def grouped_linear(lins: List[torch.nn.Module], xs: List[Tensor]) -> List[Tensor]:
    """``[lin(x) for lin, x in zip(lins, xs)]`` for linear layers (``weight`` [out, in], ``bias``)
    as one segmented matmul where the inputs share their feature size, dtype and device, one of
    ``HeteroDictLinear.grouped_devices``, and the layers a shape and dtype ``HeteroDictLinear.groups``
    (the pointer comes from the tensor sizes: no sync), else one GEMM each."""
    device = xs[0].device.type
    if (any(isinstance(lin.weight, UninitializedParameter) for lin in lins)
            or device not in HeteroDictLinear.grouped_devices
            or len({(x.size(-1), x.dtype, x.device, x.dim()) for x in xs}) != 1
            or len({(lin.weight.shape, lin.bias is None) for lin in lins}) != 1
            or not HeteroDictLinear.groups(lins[0].weight.size(1), lins[0].weight.size(0), (
                None if device != "cuda" else
                torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else xs[0].dtype))
            or not xs[0].is_floating_point() or xs[0].dim() != 2):
        return [lin(x) for lin, x in zip(lins, xs)]
    sizes = [x.size(0) for x in xs]
    ptr = host_ptr(tuple(sizes))
    weight = torch.stack([lin.weight.t() for lin in lins])
    bias = torch.stack([lin.bias for lin in lins]) if lins[0].bias is not None else None
    x, weight, bias = autocast_operands(torch.cat(xs), weight, bias)
    return list(segment_matmul(x, ptr, weight, bias).split(sizes))


def _run_grouped(lins: torch.nn.ModuleDict, keys: Tuple[str, ...], *xs: Tensor) -> Tuple[Tensor, ...]:
    """The call a grouping puts into a traced model: the layers ``lins[key]`` of the model's own
    ModuleDict (read through the graph, so a copy of the model uses its own layers)."""
    return tuple(grouped_linear([lins[key] for key in keys], list(xs)))


def group_typed_linears(model: torch.fx.GraphModule) -> List[Tuple[str, List[str], str]]:
    """Rewrites the per-type calls of a traced model's linear layers (what ``to_hetero`` makes of a
    ``Linear``) into one call that runs them as a segmented matmul (``grouped_linear``). Returns
    (ModuleDict name, the types grouped, '' or why it was left) per candidate."""
    done = []
    for parent, members in typed_calls(model).items():
        owner = model.get_submodule(parent)
        keys = keys_of(members)
        layers = [owner[key] for key in keys]
        if len(members) < 2 or not all(type(lin) in (torch.nn.Linear, pyg_nn.Linear) for lin in layers):
            continue
        why = ""
        if len(members) < HeteroDictLinear.min_types:
            why = f"{len(members)} types: one GEMM per type is as fast below {HeteroDictLinear.min_types}"
        elif any(isinstance(lin.weight, UninitializedParameter) for lin in layers):
            why = "lazily initialised layers (run the model once before convert)"
        elif len({(lin.weight.shape, lin.bias is None) for lin in layers}) != 1:
            why = "the layers differ in shape"
        elif not HeteroDictLinear.groups(layers[0].weight.size(1), layers[0].weight.size(0)):
            lo, hi = HeteroDictLinear.grouped_features
            why = (f"{layers[0].weight.size(1)} -> {layers[0].weight.size(0)} features: one GEMM per type is "
                   f"faster outside {lo}-{hi}")
        elif any(len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], torch.fx.Node) for node in members):
            why = "a call with other arguments than one tensor"
        else:
            why = order_problem(model, members, [node.args[0] for node in members])
        done.append((parent, keys, why))
        if not why:
            group(model, parent, members, _run_grouped, (), [node.args[0] for node in members])
    if any(not why for _, _, why in done):
        finish(model)
    return done
