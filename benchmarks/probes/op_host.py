# Host-time probe of one small segment op call on the device: what the C++ op costs with and without
# its schedule config, against torch_scatter's op and a trivial op, below the autograd key (as the
# Python layer calls it).
import torch

import pyg_fast
from benchmarks.common import host_ms

dev = "cuda"
E, V, F = 10556, 2708, 1
index = torch.randint(0, V, (E,), device=dev).sort().values
ptr = torch._convert_indices_from_coo_to_csr(index, V)
src3 = torch.rand(1, E, F, device=dev)
launch = pyg_fast.tuning.segment_launch(src3, ptr, E)
for _ in range(3):
    pyg_fast.segment_reduce(src3[0], ptr=ptr)
launch = pyg_fast.tuning.segment_launch(src3, ptr, E)
op = torch.ops.pyg_fast.segment_reduce.default
out = torch.empty(V, F, device=dev)


def below(fn):
    def call():
        with torch._C._AutoDispatchBelowAutograd():
            return fn()
    return call


calls = {
    "public pyg_fast.segment_reduce(ptr=)": lambda: pyg_fast.segment_reduce(src3[0], ptr=ptr),
    "op, config": below(lambda: op(src3, ptr, "sum", launch.config, launch.data)),
    "op, config as tuple": below(lambda: op(src3, ptr, "sum", tuple(launch.config), launch.data)),
    "op, default config": below(lambda: op(src3, ptr, "sum")),
    "op via OpOverload._op": below(lambda: op._op(src3, ptr, "sum", launch.config, launch.data)),
    "op through autograd key": lambda: op(src3, ptr, "sum", launch.config, launch.data),
    "trivial op cuda_arch_list": torch.ops.pyg_fast.cuda_arch_list.default,
    "torch.empty": lambda: torch.empty(V, F, device=dev),
    "out.zero_ (one launch)": lambda: out.zero_(),
}
try:
    import torch_scatter
    calls["torch_scatter segment_sum_csr op"] = lambda: torch.ops.torch_scatter.segment_sum_csr(src3[0], ptr, None)
    calls["torch_scatter.segment_csr"] = lambda: torch_scatter.segment_csr(src3[0], ptr, reduce="sum")
except ImportError:
    pass
print("launch", list(launch.config))
for rnd in range(2):
    for name, fn in calls.items():
        fn()
        print(f"round {rnd} {name:40s} {1e3 * host_ms(fn, dev, calls=2000, sync_every=50):6.1f} us", flush=True)
