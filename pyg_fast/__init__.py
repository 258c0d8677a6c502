"""pyg_fast: faster kernels for PyTorch Geometric models.

Ops (``pyg_fast.ops``, also re-exported here) run on the compiled extension
``pyg_fast._C`` through ``torch.ops.pyg_fast``; they work on CPU and CUDA, with
autograd and under ``torch.compile``.
"""
from pyg_fast._loading import load_library, cuda_arch_list

__version__ = "0.1.0"

_LIBRARY_PATH = load_library()

from pyg_fast.ops import (  # noqa: E402
    edge_softmax,
    index_segment_reduce,
    index_weight_segment_reduce,
    gather_segment_matmul,
    sddmm,
    segment_arg_reduce,
    segment_matmul,
    segment_reduce,
)

from pyg_fast.patch import patch  # noqa: E402
from pyg_fast import aggr, hetero, nn  # noqa: E402
from pyg_fast.convert import convert  # noqa: E402
from pyg_fast.config import config  # noqa: E402
from pyg_fast.ops._deferred import check_errors  # noqa: E402


def show_config() -> str:
    """Returns (and prints) versions and which kernels this build has."""
    import torch
    lines = [f"pyg_fast {__version__} ({_LIBRARY_PATH})", f"torch {torch.__version__}"]
    try:
        import torch_geometric
        lines.append(f"torch_geometric {torch_geometric.__version__}")
    except ImportError:
        lines.append("torch_geometric not installed")
    lines.append("CPU kernels: built")
    archs = cuda_arch_list()
    if archs:
        lines.append("CUDA kernels: built for " + ", ".join(f"sm_{a // 10}" for a in archs))
    else:
        lines.append("CUDA kernels: not built")
    lines.append(f"CUDA available to torch: {torch.cuda.is_available()}"
                 + (f" ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else ""))
    try:
        import torch_scatter
        lines.append(f"torch_scatter {torch_scatter.__version__} (used as a benchmark baseline)")
    except ImportError:
        lines.append("torch_scatter not installed (optional)")
    text = "\n".join(lines)
    print(text)
    return text


__all__ = ["convert", "patch", "config", "check_errors", "nn", "hetero", "aggr", "edge_softmax", "segment_reduce", "segment_arg_reduce", "index_segment_reduce", "index_weight_segment_reduce", "sddmm",
           "segment_matmul", "gather_segment_matmul",
           "show_config", "cuda_arch_list"]
