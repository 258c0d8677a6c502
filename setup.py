"""Builds pyg_fast and its one extension, pyg_fast._C.

CPU kernels are always built. CUDA kernels are built when a GPU and nvcc are
present or FORCE_CUDA=1; FORCE_ONLY_CPU=1 skips them. TORCH_CUDA_ARCH_LIST picks
the architectures (e.g. "9.0"). Install with `pip install --no-build-isolation .`:
the build imports the torch that is already installed.
"""
import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import (
    CUDA_HOME,
    BuildExtension,
    CppExtension,
    CUDAExtension,
)

CSRC = os.path.join("pyg_fast", "csrc")


def with_cuda() -> bool:
    if os.getenv("FORCE_ONLY_CPU", "0") == "1":
        return False
    if os.getenv("FORCE_CUDA", "0") == "1":
        return True
    return torch.cuda.is_available() and CUDA_HOME is not None


# The extension's sources and flags, also read by benchmarks/cuda_build_here.py (the CUDA build
# without a GPU machine).
CXX_FLAGS = ["-O3", "-fopenmp"]
NVCC_FLAGS = ["-O3", "-lineinfo", "--expt-relaxed-constexpr", "-DWITH_CUDA"]
LINK_FLAGS = ["-fopenmp", "-ldl"]


def sources(cuda: bool) -> list:
    found = []
    for folder in ("ops", "cpu", "tuning", "triton"):  # triton: launches Triton's CUDA kernels
        found += sorted(glob.glob(os.path.join(CSRC, folder, "*.cpp")))
    return found + (sorted(glob.glob(os.path.join(CSRC, "cuda", "*.cu"))) if cuda else [])


def extension():
    kwargs = dict(extra_link_args=LINK_FLAGS)
    if with_cuda():
        return CUDAExtension("pyg_fast._C", sources(True), define_macros=[("WITH_CUDA", None)],
                             extra_compile_args={"cxx": CXX_FLAGS, "nvcc": NVCC_FLAGS}, **kwargs)
    return CppExtension("pyg_fast._C", sources(False), extra_compile_args={"cxx": CXX_FLAGS}, **kwargs)


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """torch's ninja build, in a fixed folder of the checkout: pip builds in a new temporary folder
    every time, so a second `pip install -e .` (README's test command after its main one) compiled
    every file again (2 min 18 s on 2 cores); ninja now recompiles only what changed."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "ninja")


if __name__ == "__main__":  # pip's setuptools backend runs this file as __main__
    setup(
        name="pyg_fast",
        version="0.1.0",
        description="Faster kernels for PyTorch Geometric models: segment reduction, "
        "SpMM, SDDMM, edge softmax and segmented matmul",
        packages=find_packages(include=["pyg_fast", "pyg_fast.*"]),
        package_data={"pyg_fast": ["tuning/*.json"]},
        python_requires=">=3.10",
        install_requires=["torch>=2.4", "torch_geometric>=2.6"],
        # test: the suite (Triton's interpreter runs the segmented-matmul kernels on the CPU);
        # bench: the benchmark harness and the heterogeneous datasets' loaders
        extras_require={"test": ["pytest", "pytest-xdist", "triton", "scipy"],
                        "bench": ["triton", "scipy", "pandas", "rdflib"]},
        ext_modules=[extension()],
        cmdclass={"build_ext": BuildExt},
        zip_safe=False,
    )
