import pytest
import torch

import pyg_fast


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(12345)


@pytest.fixture(autouse=True)
def _no_pending_index_errors():
    """Index checks on CUDA report after the call (pyg_fast.config.validate): a bad index a test
    passes on purpose must fail that test, not a later one."""
    yield
    pyg_fast.check_errors()
