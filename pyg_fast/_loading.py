"""Loads the compiled extension pyg_fast._C, which registers torch.ops.pyg_fast.*."""
import glob
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def load_library() -> str:
    """Loads ``_C*.so`` from the package folder and returns its path."""
    candidates = sorted(glob.glob(os.path.join(_HERE, "_C*.so")) + glob.glob(os.path.join(_HERE, "_C*.pyd")))
    if not candidates:
        raise ImportError(
            "pyg_fast: the compiled extension pyg_fast._C was not found next to "
            f"{_HERE}. Build it with `pip install --no-build-isolation -e .` from the "
            "repository root (FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 for CUDA kernels).")
    torch.ops.load_library(candidates[0])
    return candidates[0]


def cuda_arch_list() -> list:
    """Compute capabilities (e.g. [900]) the CUDA kernels were built for; [] if none."""
    return list(torch.ops.pyg_fast.cuda_arch_list())
