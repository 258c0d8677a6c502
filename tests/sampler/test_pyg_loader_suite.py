"""PyG 2.8's own NeighborLoader tests with pyg_fast's sampler in place of pyg-lib's.

Selected (17): the homogeneous and heterogeneous basic tests on int64 indices (directional and
bidirectional, in the three filter modes for Data), the karate-club ones, the custom feature
and graph store loaders (homogeneous, heterogeneous, duplicate edge types), memmap and input_id.
Left out: the int32 and induced variants, which return early without pyg-lib or torch-sparse
(a pass that would test nothing), and what needs pyg-lib's own features (temporal, weighted,
sampled-info and mapping tests, marked withPackage('pyg_lib'))."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nn.pyg_suite import pyg_test_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
SELECTED = ("neighbor_loader_basic and int64 and not induced or neighbor_loader_on_karate and not induced "
            "or custom or memmap or input_id")


def test_pyg_neighbor_loader_tests_pass_with_our_sampler():
    path = pyg_test_dir() / "test" / "loader" / "test_neighbor_loader.py"
    if not path.is_file():
        pytest.skip(f"PyG's test/loader/test_neighbor_loader.py not found under {pyg_test_dir()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests" / "sampler")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pyg_plugin", "-p", "no:cacheprovider",
                          str(path), "-k", SELECTED], cwd=path.parents[2], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "\n17 passed" in run.stdout, run.stdout[-1000:]
