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


ROUTES = ("grouped", "coo")


def pytest_generate_tests(metafunc):
    """A test that takes ``route`` runs on both routes of a sum or mean over a new index."""
    if "route" in metafunc.fixturenames:
        metafunc.parametrize("route", ROUTES)


@pytest.fixture(autouse=True)
def _route(request, monkeypatch):
    """The route of a sum or mean over an index's first uses (``pyg_fast.ops._kernels.coo_route``):
    'grouped' (the COO route off) unless the test takes ``route``, so that a test of the grouped
    kernels reaches them on its first call; 'coo': every size takes the COO route."""
    from pyg_fast import tuning
    route = request.node.callspec.params.get("route", "grouped") if hasattr(request.node, "callspec") else "grouped"
    limit = -1 if route == "grouped" else 2 ** 62
    monkeypatch.setattr(tuning, "COO_MAX_ELEMENTS", {"cpu": limit, "cuda": limit})
    return route

