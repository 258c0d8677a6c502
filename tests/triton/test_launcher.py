"""How a compiled Triton kernel is described to the C++ launcher (torch.classes.pyg_fast.TritonKernel):
checked on the CPU against a stand-in compiled kernel; launching itself is tested on CUDA in
tests/ops/test_segment_matmul.py."""
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")
from pyg_fast.triton import launcher  # noqa: E402
from pyg_fast.triton.launcher import KernelCall, Role, native_kernel  # noqa: E402

SIGNATURE = {"x": "*fp32", "w": "*fp32", "table": "*i32", "K": "i32", "big": "i64", "one": "constexpr",
             "BLOCK": "constexpr"}


class FakeLauncher:
    """What Launcher.compile returns, with the given signature and metadata."""

    def __init__(self, signature=SIGNATURE, **metadata):
        meta = dict(name="kernel", num_warps=4, warp_size=32, shared=1024, num_ctas=1)
        meta.update(metadata)
        self.compiled = SimpleNamespace(src=SimpleNamespace(signature=signature), metadata=SimpleNamespace(**meta),
                                        function=1234)

    def compile(self, grid, tensors, scalars, num_warps, num_stages):
        return self.compiled


@pytest.fixture
def recorded(monkeypatch):
    """The arguments native_kernel passes to the C++ TritonKernel constructor."""
    calls = []
    monkeypatch.setattr(torch.classes.pyg_fast, "TritonKernel", lambda *args: calls.append(args) or "kernel")
    return calls


def call_of(fake, x, w, table, scalars=(7, 2 ** 40, 1, 64)):
    return KernelCall(fake, (3, 2, 1), (x, w, table), scalars, 4, 2)


def test_parameters_are_described_by_role_and_constexprs_left_out(recorded):
    x, w, table = torch.zeros(4), torch.zeros(8), torch.zeros(2, dtype=torch.int32)
    assert native_kernel(call_of(FakeLauncher(), x, w, table), {Role.INPUT: x, Role.WEIGHT: w, Role.BIAS: None}) \
        == "kernel"
    (function, device, grid, threads, shared, bits, sizes, roles, keep_alive), = recorded
    assert (function, device, grid, threads, shared) == (1234, None, [3, 2, 1], 128, 1024)
    # x and w by role; the table is fixed (its address, kept alive); then K (i32) and big (i64)
    assert bits == [0, 0, table.data_ptr(), 7, 2 ** 40]
    assert sizes == [8, 8, 8, 4, 8]
    assert roles == [Role.INPUT, Role.WEIGHT, -1, -1, -1]
    assert len(keep_alive) == 1 and keep_alive[0] is table


@pytest.mark.parametrize("fake, match", [
    (FakeLauncher(global_scratch_size=64), "scratch memory"),
    (FakeLauncher(num_ctas=2), "clusters"),
    (FakeLauncher(launch_pdl=True), "special launch"),
    (FakeLauncher({**SIGNATURE, "K": "fp32"}), "parameter of type fp32"),
    (FakeLauncher({"x": "*fp32", "w": "*fp32"}), "has 2 parameters, called with 7"),
])
def test_kernels_the_cpp_launcher_cannot_run_as_triton_would_are_refused(recorded, fake, match):
    x, w, table = torch.zeros(4), torch.zeros(8), torch.zeros(2, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match=match):
        native_kernel(call_of(fake, x, w, table), {Role.INPUT: x, Role.WEIGHT: w})
    assert not recorded


def test_two_roles_on_one_data_pointer_are_refused(recorded):
    x, table = torch.zeros(4), torch.zeros(2, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="share a data pointer"):
        native_kernel(call_of(FakeLauncher(), x, x, table), {Role.INPUT: x, Role.WEIGHT: x.view(2, 2)})


def test_an_empty_hook_chain_is_no_hook(monkeypatch):
    from triton import knobs
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", SimpleNamespace(calls=[]))
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    assert launcher.native_launch_allowed()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", SimpleNamespace(calls=[print]))
    assert not launcher.native_launch_allowed()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", print)  # a plain function is a hook
    assert not launcher.native_launch_allowed()
