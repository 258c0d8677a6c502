"""Builds pyg_fast's CUDA extension on a machine without a GPU, for the GPU machine to load.

A GPU machine's time is scarce and a fresh one builds the extension in 210-340 s; here the same
build takes about 16 minutes on 2 cores and costs none of it. It compiles setup.py's sources with
setup.py's flags against the headers of the GPU machine's torch (its wheel, unpacked: the
``torch`` folder with ``include`` and ``lib``), this machine's nvcc, and the headers of the CUDA
libraries and of the Python the GPU machine runs, then links against that torch's libraries.

    CUDA_HOME=/usr/local/cuda python -m benchmarks.cuda_build_here --torch W/torch --include W/nvidia/cu13/include \\
        --include ~/.pyenv/versions/3.12.1/include/python3.12 --out /tmp/cuda_build

The result is ``OUT/_C.so``: copy it to ``pyg_fast/_C.cpython-312-x86_64-linux-gnu.so`` on the
GPU machine. Ninja keeps its objects in OUT, so a second run compiles only what changed.
"""
import argparse
import importlib.util
import os
import shutil
import subprocess

import torch
from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_file(setup, torch_dir: str, includes, arch: str) -> str:
    """The text of a build.ninja compiling ``setup.sources(True)`` into ``_C.so``."""
    cuda = os.environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("nvcc"))))
    incs = " ".join(f"-I{d}" for d in [f"{torch_dir}/include", f"{torch_dir}/include/torch/csrc/api/include",
                                        f"{cuda}/include", *includes])
    defs = ("-DWITH_CUDA -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C "
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    lines = [
        f"cxxflags = {' '.join(setup.CXX_FLAGS)} -fPIC -std=c++17 {defs} {incs}",
        f"nvflags = {' '.join(setup.NVCC_FLAGS + COMMON_NVCC_FLAGS)} --compiler-options '-fPIC' "
        f"-gencode=arch=compute_{arch},code=sm_{arch} -std=c++17 {defs} {incs}",
        "rule cxx\n  command = g++ -MMD -MF $out.d $cxxflags -c $in -o $out\n  depfile = $out.d\n  deps = gcc",
        "rule cu\n  command = nvcc --generate-dependencies-with-compile --dependency-output $out.d $nvflags "
        "-c $in -o $out\n  depfile = $out.d\n  deps = gcc",
        f"rule link\n  command = g++ -shared -o $out $in -L{torch_dir}/lib -lc10 -ltorch -ltorch_cpu "
        f"-ltorch_python -lc10_cuda -ltorch_cuda -L{cuda}/lib64 -lcudart {' '.join(setup.LINK_FLAGS)}",
    ]
    objects = []
    for source in setup.sources(True):
        obj = "obj/" + os.path.relpath(source, setup.CSRC).replace(os.sep, "_") + ".o"
        objects.append(obj)
        lines.append(f"build {obj}: {'cu' if source.endswith('.cu') else 'cxx'} {os.path.join(ROOT, source)}")
    lines.append("build _C.so: link " + " ".join(objects))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch", required=True, help="the torch folder of the GPU machine's torch wheel")
    parser.add_argument("--include", action="append", default=[],
                        help="more header folders: the CUDA libraries' (cusparse.h, cublas_v2.h), Python's")
    parser.add_argument("--arch", default="90", help="compute capability, e.g. 90")
    parser.add_argument("--out", default="/tmp/cuda_build")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("pyg_fast_setup", os.path.join(ROOT, "setup.py"))
    setup = importlib.util.module_from_spec(spec)
    cwd = os.getcwd()
    os.chdir(ROOT)  # setup.py globs relative to the checkout
    try:
        spec.loader.exec_module(setup)
        text = build_file(setup, os.path.abspath(args.torch), [os.path.abspath(d) for d in args.include], args.arch)
    finally:
        os.chdir(cwd)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "build.ninja"), "w") as f:
        f.write(text)
    subprocess.run(["ninja", "-j", str(args.jobs), "-C", args.out], check=True)
    print(os.path.join(args.out, "_C.so"))


if __name__ == "__main__":
    main()
