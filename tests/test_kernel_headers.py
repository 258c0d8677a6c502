"""The CUDA kernel headers compile without torch (nvcc, sm_90), each on its own: machines without
torch's CUDA headers (CI, the CPU wheel) can then check a kernel change before the GPU build."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[1] / "pyg_fast" / "csrc" / "cuda" / "kernels"
HEADERS = sorted(p.name for p in KERNELS.glob("*.cuh"))
NVCC = shutil.which("nvcc")
# setup.py's flags that change what compiles
FLAGS = ["-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr"]

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


def compile_unit(tmp_path: Path, source: str, *extra: str) -> str:
    unit = tmp_path / "unit.cu"
    unit.write_text(source)
    done = subprocess.run([NVCC, *FLAGS, *extra, "-c", str(unit), "-o", str(tmp_path / "unit.o")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def test_headers_found():
    assert "segment_chunk.cuh" in HEADERS and len(HEADERS) >= 10


@pytest.mark.parametrize("header", HEADERS)
def test_header_compiles_alone(header, tmp_path):
    compile_unit(tmp_path, f'#include "{KERNELS / header}"\n')


def test_chunk_kernel_float_rows_within_64_registers(tmp_path):
    # __maxnreg__ in segment_chunk.cuh: weighted rows of 4 floats took 70 registers without it
    instances = "\n".join(
        f"template __global__ void segment_chunks_kernel<float, float, Reduce::Sum, 4, "
        f"GatheredRows<float, 4, {weighted}, {index}>>(const int64_t*, int64_t, int64_t, int64_t, int64_t, "
        f"Groups, GatheredRows<float, 4, {weighted}, {index}>, float*, float*);"
        for weighted in ("true", "false") for index in ("int32_t", "int64_t"))
    log = compile_unit(tmp_path, f'#include "{KERNELS / "segment_chunk.cuh"}"\n'
                                 f"namespace pyg_fast::cuda {{\n{instances}\n}}\n", "-Xptxas", "-v")
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", log)]
    assert len(registers) == 4 and max(registers) <= 64, log
