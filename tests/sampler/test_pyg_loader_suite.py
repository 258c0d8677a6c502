"""PyG 2.8's own homogeneous NeighborLoader tests with pyg_fast's sampler in place of pyg-lib's.

Selected: the tests that exercise the sampler on a Data object. Left out: the heterogeneous ones
(the sampler takes Data only), those that need pyg-lib's own features (temporal, weighted,
sampled-info and mapping tests are marked withPackage('pyg_lib')), and the int32 and induced
variants, which return early without pyg-lib or torch-sparse (a pass that would test nothing)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nn.pyg_suite import pyg_test_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
SELECTED = ("test_homo_neighbor_loader_basic and int64 and not induced or "
            "test_homo_neighbor_loader_on_karate and not induced or test_memmap_neighbor_loader")


def test_pyg_homogeneous_neighbor_loader_tests_pass_with_our_sampler():
    path = pyg_test_dir() / "test" / "loader" / "test_neighbor_loader.py"
    if not path.is_file():
        pytest.skip(f"PyG's test/loader/test_neighbor_loader.py not found under {pyg_test_dir()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests" / "sampler")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pyg_plugin", "-p", "no:cacheprovider",
                          str(path), "-k", SELECTED], cwd=path.parents[2], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "\n9 passed" in run.stdout, run.stdout[-1000:]
