"""Timing, checking and recording shared by every benchmark.

- ``time_ms(fn)``: median milliseconds of ``fn()`` after warm-up.
- ``rel_error`` / ``check``: relative Frobenius error against a reference, NaN fails.
- ``bench_methods``: checks each method's output against a reference, then times
  only the methods that gave the right answer; records both kinds.
- ``Recorder``: collects ``{"suite", "case", "method", "ms", ...}`` records with
  the environment of the run and writes ``results.json`` and ``summary.md``.
"""
import contextlib
import datetime
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import time
import types
from pathlib import Path
from typing import Callable, ContextManager, Dict, Iterable, List, Optional, Tuple

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]

# Bounds on ||out - ref|| / ||ref|| against a float64 reference. Looser than the
# unit tests' bounds (pyg_fast.testing.REL_TOL) because power-law graphs have
# segments of 10^4+ rows, where float32 accumulation alone reaches ~sqrt(n) eps.
REL_TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}

# Timing budgets in milliseconds (warm-up, measurement), as triton's do_bench takes them.
# PYG_FAST_BENCH_BUDGET="10,40" shortens a run that must fit a device call.
FULL_BUDGET = tuple(float(v) for v in os.getenv("PYG_FAST_BENCH_BUDGET", "25,100").split(","))
QUICK_BUDGET = (0, 0)  # one warm-up call and five timed calls


def budget_for(quick: bool) -> Tuple[float, float]:
    return QUICK_BUDGET if quick else FULL_BUDGET


def time_ms(fn: Callable[[], object], warmup: float = FULL_BUDGET[0], rep: float = FULL_BUDGET[1],
            device: Optional[torch.device] = None) -> float:
    """Median milliseconds of one call of ``fn`` after warm-up.

    ``warmup`` and ``rep`` are time budgets in milliseconds (as in
    ``triton.testing.do_bench``). ``device`` defaults to CUDA when CUDA has been
    initialised in this process. On CUDA, ``do_bench`` is used when triton is
    importable (it flushes L2 before each call, so times are cold-cache), else
    CUDA events around each call; on CPU ``time.perf_counter``.
    """
    device = torch.device(device) if device is not None else torch.device(
        "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu")
    if device.type == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        if do_bench is not None:
            return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
        return _median_of_calls(fn, warmup, rep, _cuda_event_timer)
    return _median_of_calls(fn, warmup, rep, _cpu_timer)


def _cpu_timer(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _cuda_event_timer(fn: Callable[[], object]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _median_of_calls(fn: Callable[[], object], warmup: float, rep: float,
                     timer: Callable[[Callable[[], object]], float]) -> float:
    """Warms up for ``warmup`` ms (at least one call), then takes the median of
    as many calls as fit in ``rep`` ms (at least 5, at most 1000)."""
    spent, calls = 0.0, 0
    while calls == 0 or spent < warmup:
        spent += timer(fn)
        calls += 1
    count = int(min(1000, max(5, rep / max(spent / calls, 1e-6))))
    times = sorted(timer(fn) for _ in range(count))
    return times[count // 2] if count % 2 else 0.5 * (times[count // 2 - 1] + times[count // 2])


def measure_copy_bandwidth(device) -> float:
    """Device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    device = torch.device(device)
    nbytes = (1 << 30) if device.type == "cuda" else (1 << 27)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device=device)
    return 2 * nbytes / (ms * 1e6)


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 (inf for a shape mismatch, NaN or inf in ``out``); for
    tuples of tensors (several gradients), the largest over the pairs."""
    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            return math.inf
        return max(rel_error(a, b) for a, b in zip(out, ref))
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf
    out, ref = out.detach(), ref.detach().to(out.device)
    if not torch.isfinite(out).all():
        return math.inf
    diff = torch.linalg.vector_norm((out.double() - ref.double()).flatten()).item()
    norm = torch.linalg.vector_norm(ref.double().flatten()).item()
    return diff / (norm if norm > 0 else 1.0)


def check(out: torch.Tensor, ref: torch.Tensor, rel_tol: float) -> bool:
    """Whether ``out`` is within ``rel_tol`` relative Frobenius error of ``ref``; NaN fails."""
    return rel_error(out, ref) <= rel_tol


# Alternating timing rounds of the methods of one case (``time_interleaved``; they share the case's
# budget). On the H100 machine a timing window of a small-graph case now and then came
# out 2-20x slower for whichever method was being timed (torch's and torch_scatter's too), a host
# stall longer than the L2 flush that do_bench puts before each call: the median of several rounds,
# taken far enough apart that one stall spoils few of them, keeps such a window out of the record.
# Five, not three: two of three rounds of one method were once caught at 2-5x.
TIMING_ROUNDS = 5


def bench_methods(rec: "Recorder", suite: str, case: dict, methods: Dict[str, Callable[[], torch.Tensor]],
                  ref, device, rel_tol: float, budget: Tuple[float, float] = FULL_BUDGET,
                  nbytes: Optional[int] = None, rounds: int = TIMING_ROUNDS,
                  fields: Optional[Callable[[float], dict]] = None) -> None:
    """Checks every method's output against ``ref``, times the ones that are right.

    ``ref`` is one reference tensor, or a dict with one per method. A method that raises or
    gives a wrong answer is recorded with ``ms=None`` and an ``error``. ``nbytes`` (the bytes
    the operation must move at least) adds ``bytes`` and ``gbps`` to timed records. ``budget``
    is ``time_ms``'s (warm-up, rep) in ms, shared by ``rounds`` alternating rounds of all the
    methods (``time_interleaved``; 1: each method timed once, in turn). ``fields(ms)`` adds
    fields derived from a timed record's milliseconds.
    """
    warmup, rep = budget
    checked = {}
    for method, fn in methods.items():
        try:
            out = fn()
            err = rel_error(out, ref[method] if isinstance(ref, dict) else ref)
            del out
            if not err <= rel_tol:
                rec.add(suite, case, method, None, rel_err=err if math.isfinite(err) else None,
                        error=f"wrong result: relative error {err:.3g} > {rel_tol:.3g}")
                continue
            ms = time_ms(fn, warmup, rep, device=device) if rounds == 1 else None
        except Exception as exc:  # an unsupported case or out of memory: record it, go on
            _release_memory(device)
            rec.add(suite, case, method, None, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    if str(exc) else type(exc).__name__)
            continue
        checked[method] = (ms, err)
    if rounds > 1:
        times = time_interleaved({method: methods[method] for method in checked}, warmup, rep, device, rounds)
        checked = {method: (times[method], err) for method, (_, err) in checked.items()}
    for method, (ms, err) in checked.items():
        extra = {"rel_err": err}
        if nbytes is not None:
            extra.update(bytes=int(nbytes), gbps=nbytes / (ms * 1e6))
        if fields is not None:
            extra.update(fields(ms))
        if torch.device(device).type == "cuda" and ms < HOST_TIME_BELOW_MS:
            extra["host_ms"] = host_ms(methods[method], device)
            extra["device_ms"] = device_ms(methods[method], device)
        rec.add(suite, case, method, ms, **extra)


# Where a case's device time is this short, the host may be what do_bench measured: the next call
# must be launched within the L2 flush that precedes it (about 0.1 ms on the H100), or the device
# waits for the host inside the timed window. ``host_ms`` is recorded beside such times.
HOST_TIME_BELOW_MS = 1.0
HOST_TIME_CALLS = 20


def host_ms(fn: Callable[[], object], device, calls: int = HOST_TIME_CALLS, sync_every: int = 0) -> float:
    """Median milliseconds the host spends in one call of ``fn`` without waiting for the device
    (what launching it costs), over ``calls`` calls after a synchronisation. ``sync_every`` > 0
    also synchronises (untimed) after every that many calls, so that long series do not fill the
    launch queue and end up timing the device."""
    synchronize(device)
    times = []
    for i in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
        if sync_every and (i + 1) % sync_every == 0:
            synchronize(device)
    synchronize(device)
    return statistics.median(times)


DEVICE_TIME_CALLS = 30
_SLEEP_CYCLES_PER_MS: Dict[int, float] = {}
_FLUSH: Dict[int, torch.Tensor] = {}


def device_ms(fn: Callable[[], object], device, calls: int = DEVICE_TIME_CALLS) -> Optional[float]:
    """Median milliseconds of one call's kernels on CUDA with the host's share left out: a sleep
    kernel holds the stream while the host queues ``calls`` calls, each after an L2 flush (as
    do_bench's) and between two events, so the events time the kernels back to back. None on the
    CPU, and where the sleep ended before the last call was queued in three tries (the host then
    set the pace). do_bench's reading of a call whose host time outlasts the flush is host time:
    a reused SpMM on Cora read 8.8-40 us in H200 processes whose host spent 42-48 us a call."""
    if torch.device(device).type != "cuda":
        return None
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    if index not in _FLUSH:
        _FLUSH[index] = torch.empty(2 ** 28, dtype=torch.int8, device=device)  # 256 MB, past any L2
    flush = _FLUSH[index]
    queue_ms = host_ms(lambda: (flush.zero_(), fn()), device, calls=5)
    for attempt in range(3):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        held = torch.cuda.Event()
        synchronize(device)
        torch.cuda._sleep(int(_sleep_cycles_per_ms(index) * queue_ms * calls * 2 ** (attempt + 1)) + 1)
        held.record()
        for start, end in zip(starts, ends):
            flush.zero_()
            start.record()
            fn()
            end.record()
        queued_in_time = not held.query()  # the sleep still ran when the last call was queued
        synchronize(device)
        if queued_in_time:
            return statistics.median(start.elapsed_time(end) for start, end in zip(starts, ends))
    return None


def _sleep_cycles_per_ms(index: int) -> float:
    """Cycles of ``torch.cuda._sleep`` a millisecond on device ``index`` (measured once)."""
    if index not in _SLEEP_CYCLES_PER_MS:
        with torch.cuda.device(index):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            torch.cuda._sleep(10 ** 7)
            end.record()
            end.synchronize()
            _SLEEP_CYCLES_PER_MS[index] = 10 ** 7 / start.elapsed_time(end)
    return _SLEEP_CYCLES_PER_MS[index]


def warm_up(device, seconds: float = 3.0) -> None:
    """Keeps the device and the host busy for ``seconds`` (matrix products between small
    launches) before a run's first timing: on a machine just started, the first cases of a run
    read 2-4x slower than cases of the same size later in it (H100: the stand-in's scatter_max on
    Cora 58-77 us as a run's first case, 17 us in a run that followed a 4-minute build)."""
    if torch.device(device).type != "cuda":
        return
    a = torch.randn(2048, 2048, device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a.sum()
            a @ a
        synchronize(device)


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def compiled_apart(net: torch.nn.Module, **options) -> torch.nn.Module:
    """``torch.compile(net, **options)`` with ``net``'s forward bound as a copy of its class's code
    object. Dynamo keeps its caches, and its choice to skip a frame whose trace broke inside a loop
    (stock GCN's and GAT's ``gcn_norm``/``add_remaining_self_loops``), on the code object: a
    second model of the same class in the process then ran one compiled region per layer (the
    converted GCN's step on cora, H200: 4.8 ms after stock's compile against 2.9 ms eager), which
    a user compiling one model never sees."""
    forward = type(net).forward
    code = forward.__code__.replace(co_name=f"{forward.__name__}_{id(net):x}")
    own = types.FunctionType(code, forward.__globals__, forward.__name__, forward.__defaults__, forward.__closure__)
    net.forward = types.MethodType(own, net)
    return torch.compile(net, **options)


def time_interleaved(fns: Dict[str, Callable[[], object]], warmup: float, rep: float, device,
                     rounds: int, contexts: Optional[Dict[str, Callable[[], ContextManager]]] = None
                     ) -> Dict[str, float]:
    """Median ms of each callable over ``rounds`` alternating rounds (raised to a multiple of the
    number of callables), each round a ``time_ms`` with a ``rounds``-th of the budget; every
    callable takes every place in a round equally often (A B C, B C A, C A B, then the same
    backwards): a drift in the machine's speed over the run (other tenants, clocks) then reaches
    every callable alike, and so does the place in a round. An order merely reversed every other
    round leaves each callable two fixed places, and the place shows where the host sets the pace:
    one and the same PyG inference on cora, timed as two of six methods of one case, read
    0.83-0.90x of itself in the outer two places against the next two (H200), and 0.96-0.97x in
    four rounds of one order on the 2-core CPU. ``contexts`` (by
    name): a context entered around each of that callable's rounds, such as ``pyg_fast.patch()``'s
    switch, which entered for every call would add its own cost to each."""
    per_round = {name: [] for name in fns}
    names = list(fns)
    rounds = -(-rounds // len(names)) * len(names)
    for i in range(rounds):
        order = names if (i // len(names)) % 2 == 0 else names[::-1]
        for name in order[i % len(names):] + order[:i % len(names)]:
            with (contexts or {}).get(name, contextlib.nullcontext)():
                per_round[name].append(time_ms(fns[name], warmup if i == 0 else 0.0, rep / rounds, device=device))
    return {name: statistics.median(times) for name, times in per_round.items()}


def _release_memory(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _git(*args: str) -> Optional[str]:
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_tree_hash(path: Path) -> Optional[str]:
    """The hash git gives the tree at ``path`` (what ``git rev-parse HEAD:<path>``
    prints when it is committed), computed from the files themselves, for copies of
    the repository that lack .git. None for an empty folder (git stores none)."""
    entries = []
    for child in path.iterdir():
        if child.is_symlink() or child.name == "__pycache__":
            continue
        if child.is_dir():
            digest = git_tree_hash(child)
            if digest is not None:
                entries.append((child.name + "/", b"40000 " + child.name.encode(), bytes.fromhex(digest)))
        else:
            data = child.read_bytes()
            mode = b"100755" if os.access(child, os.X_OK) else b"100644"
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).digest()
            entries.append((child.name, mode + b" " + child.name.encode(), blob))
    if not entries:
        return None
    body = b"".join(head + b"\0" + digest for _, head, digest in sorted(entries))  # git orders dirs as "name/"
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def _version(module: str) -> Optional[str]:
    try:
        return __import__(module).__version__
    except Exception:  # not installed, or broken: the record says so with None
        return None


def environment(device) -> dict:
    """What the results depend on: hardware, versions, the code's commit and the copy bandwidth."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    try:
        import pyg_fast
        archs = [f"sm_{a // 10}" for a in pyg_fast.cuda_arch_list()]
    except Exception:
        archs = None
    # The kernel sources that ran, hashed from the files (git's tree hash when committed): a
    # checkout's git metadata can be stale (the device's is), the files cannot.
    csrc_tree = git_tree_hash(REPO_ROOT / "pyg_fast" / "csrc")
    committed_tree = os.environ.get("PYG_FAST_CSRC_TREE") or _git("rev-parse", "HEAD:pyg_fast/csrc")
    return {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        # Other processes on the CPUs delay multithreaded kernels by whole scheduler ticks.
        "load_avg_1min": os.getloadavg()[0],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "torch_geometric": _version("torch_geometric"),
        "torch_scatter": _version("torch_scatter"),
        "triton": _version("triton"),
        "pyg_fast_cuda_archs": archs,
        "commit": os.environ.get("PYG_FAST_COMMIT") or _git("rev-parse", "HEAD"),
        "csrc_tree": csrc_tree,
        # Whether the kernel sources that ran differ from the commit's (None: commit's tree unknown).
        "csrc_dirty": None if committed_tree is None else csrc_tree != committed_tree,
        "copy_gbps": measure_copy_bandwidth(device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


class Recorder:
    """Collects benchmark records and writes them as JSON and as a markdown summary.

    ``autosave=(path_json, path_md)`` rewrites both files at most every
    ``autosave_s`` seconds while records come in, so a run that is cut short
    still leaves its results.
    """

    def __init__(self, device, env: Optional[dict] = None, autosave: Optional[tuple] = None,
                 autosave_s: float = 20.0, verbose: bool = True):
        self.env = env if env is not None else environment(device)
        self.records: List[dict] = []
        self.failures: List[dict] = []
        self.autosave = autosave
        self.autosave_s = autosave_s
        self.verbose = verbose
        self._saved_at = time.monotonic()

    def add(self, suite: str, case: dict, method: str, ms: Optional[float], **extra) -> None:
        record = {"suite": suite, "case": dict(case), "method": method, "ms": ms, **extra}
        self.records.append(record)
        if self.verbose:
            shown = f"{ms:.4g} ms" if ms is not None else record.get("error", "failed")
            print(f"[{suite}] {_case_text(case)} {method}: {shown}", flush=True)
        if self.autosave and time.monotonic() - self._saved_at > self.autosave_s:
            self.write(*self.autosave)

    def add_failure(self, suite: str, message: str) -> None:
        """A whole suite (or part of one) that could not run."""
        self.failures.append({"suite": suite, "error": message})
        if self.verbose:
            print(f"[{suite}] FAILED:\n{message}", flush=True)

    def write(self, path_json, path_md, **sections) -> None:
        """Writes both files; ``sections`` are extra top-level entries of the JSON."""
        Path(path_json).parent.mkdir(parents=True, exist_ok=True)
        with open(path_json, "w") as f:
            json.dump({"env": self.env, "records": self.records, "failures": self.failures, **sections},
                      f, indent=1)
        Path(path_md).write_text(summary_markdown(self.env, self.records, self.failures))
        self._saved_at = time.monotonic()


def _case_text(case: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in case.items())


def _case_key(case: dict) -> str:
    return json.dumps(case, sort_keys=True)


def _ordered(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def _geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary_markdown(env: dict, records: List[dict], failures: List[dict]) -> str:
    """One table per suite: a row per case, a column per method (ms), pyg_fast's
    speedup over the fastest baseline and, where records carry bytes, its
    effective bandwidth and the share of the measured copy bandwidth."""
    lines = ["# pyg_fast benchmark results", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    copy_gbps = env.get("copy_gbps")
    for suite in _ordered(r["suite"] for r in records):
        rows = [r for r in records if r["suite"] == suite]
        methods = _ordered(["pyg_fast"] * any(r["method"] == "pyg_fast" for r in rows)
                           + [r["method"] for r in rows])
        cases = {}
        for r in rows:
            cases.setdefault(_case_key(r["case"]), {"case": r["case"], "by_method": {}})["by_method"][r["method"]] = r
        case_keys = _ordered(k for c in cases.values() for k in c["case"])
        header = case_keys + [f"{m} ms" for m in methods] + ["fastest baseline", "speedup"]
        with_bytes = any("bytes" in r for r in rows)
        if with_bytes:
            header += ["pyg_fast GB/s", "% of copy"]
        lines += ["", f"## {suite}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        speedups = {}
        for c in cases.values():
            by_method = c["by_method"]
            cells = [str(c["case"].get(k, "")) for k in case_keys]
            cells += [_ms_cell(by_method.get(m)) for m in methods]
            ours = by_method.get("pyg_fast")
            # pyg_fast's other variants (compiled, eager, a reused graph) are columns, not baselines
            timed = {m: r["ms"] for m, r in by_method.items() if not m.startswith("pyg_fast") and r["ms"] is not None}
            best = min(timed, key=timed.get) if timed else None
            if best is not None and ours is not None and ours["ms"] is not None:
                speedup = timed[best] / ours["ms"]
                speedups.setdefault(str(c["case"].get("graph", "all")), []).append(speedup)
                cells += [best, f"{speedup:.2f}x"]
            else:
                cells += [best or "-", "-"]
            if with_bytes:
                gbps = ours.get("gbps") if ours else None
                cells += [f"{gbps:.0f}" if gbps else "-",
                          f"{100 * gbps / copy_gbps:.0f}%" if gbps and copy_gbps else "-"]
            lines.append("| " + " | ".join(cells) + " |")
        if speedups:
            every = [s for group in speedups.values() for s in group]
            parts = [f"{g}: {_geomean(v):.2f}x" for g, v in speedups.items()]
            lines += ["", f"Geometric mean speedup of pyg_fast over the fastest baseline: "
                          f"{_geomean(every):.2f}x overall ({', '.join(parts)}); slowest case "
                          f"{min(every):.2f}x."]
        failed = [r for r in rows if r["ms"] is None]
        if failed:
            lines += ["", "Failed (not timed):", ""]
            lines += [f"- {_case_text(r['case'])} {r['method']}: {r.get('error', 'failed')}" for r in failed]
    for failure in failures:
        lines += ["", f"## {failure['suite']}: suite failed", "", "```", failure["error"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _ms_cell(record: Optional[dict]) -> str:
    if record is None:
        return ""
    if record["ms"] is None:
        return "wrong" if record.get("error", "").startswith("wrong") else "error"
    return f"{record['ms']:.4g}"
