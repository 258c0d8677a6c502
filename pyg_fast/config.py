"""User settings of pyg_fast, in one object: ``pyg_fast.config``.

``validate``
    How index values are checked on CUDA. ``"async"`` (the default): the checks run on the
    device and raise their flags in pinned host memory (or a copy brings them there) behind the
    kernels, with no host synchronisation; a failed check raises at the first pyg_fast call that
    finds its flag there (usually the next layer, the next step at the latest), or at
    :func:`pyg_fast.check_errors`. Until then the kernels skip out-of-range rows: they never
    read or write out of bounds, but that call's output is wrong. ``"sync"``: the checks wait
    for the device and raise at the call that received the bad index (one synchronisation per
    new graph; use it to find the call). On the CPU checks always raise at the call.

``tuning_rules``
    Path of the measured schedule table the CUDA segment kernels choose from (``None``: the
    table shipped in ``pyg_fast/tuning/rules.json``). Takes effect through
    :func:`pyg_fast.tuning.load_rules`.

``measure_launches``
    Whether a graph reused in eager mode on CUDA times its table entry's candidate schedules
    (``pyg_fast.tuning.TRIAL_CANDIDATES``) on its own data (``pyg_fast.tuning.Trial``) and keeps
    the fastest (the default; with no synchronisation: the choice takes effect once the timings
    have reached the host, a call or two later), or keeps the table's first pick. Off under
    ``torch.use_deterministic_algorithms``, where the schedule, and with it the order of each sum,
    must not depend on a timing.

``segment_matmul_autotune``, ``segment_matmul_tune_file``
    Whether the segmented matmul times its best candidate launches on the GPU for each new kind
    of input (else a performance model picks one), and a JSON file keeping those choices across
    runs. Read when the Triton kernels are first used.
"""
from dataclasses import dataclass
from typing import Optional

VALIDATE_MODES = ("async", "sync")


@dataclass
class Config:
    validate: str = "async"
    tuning_rules: Optional[str] = None
    measure_launches: bool = True
    segment_matmul_autotune: bool = False
    segment_matmul_tune_file: Optional[str] = None

    def __setattr__(self, name, value):
        if name == "validate" and value not in VALIDATE_MODES:
            raise ValueError(f"pyg_fast: config.validate must be one of {VALIDATE_MODES}, got {value!r}")
        super().__setattr__(name, value)


config = Config()
