"""Launch configuration of the Triton segmented matmul: routing tables, a performance model
that picks a configuration at no cost, and an optional autotuner with a persistent cache.

Importing this module does not import Triton.

Forward programs: the rows are cut into blocks of ``rows_per_prog`` rows at multiples of
``rows_per_prog`` and, besides, at every segment's start, so that each program multiplies rows of
one type by one weight, and most programs start at a multiple of ``rows_per_prog`` (a row table
of (type, first row) is all a program reads before its rows). In a long launch the last rows go
to blocks a quarter as long, so that the SMs run out of work together (``TAIL_WAVES``).
Backward (FASTEN's tiling): each segment is split into *items* of at most ``rows_per_item``
rows, one program each, counted per type for the weight gradient's reduction.

Performance model (FASTEN's waves x per-wave time): a launch runs in
``programs * n_tiles / (SMs * programs per SM)`` waves (at least one; not rounded up: the SMs
take programs as they free up, so a last partial wave costs its share), and each wave takes as
long as one program: the larger of its tensor-core time, its memory time and its load latency,
plus its start, which grows with its row tile. Rows padded up to ``block_m`` count as work, which
is what makes small ``block_m`` win for tiny segments (the utilisation factor). The launch ends
with its last programs, while other SMs run out of work: that drain costs about one program's
time (a short-tail program's where the launch has them).
"""
import json
import math
import os
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

# Device ceilings (per GPU) used by the model and by the benchmarks' roofline. Keys are
# substrings of the device name. H100: measured on the project's H100 80GB HBM3 (matmul bf16,
# TF32 and fp32 TFLOP/s; device-to-device copy GB/s, read + write); others: vendor figures.
# smem_kb: shared memory one program may use (and about what one SM has).
HARDWARE = {
    "H100": {"tflops_16": 687.0, "tflops_tf32": 375.0, "tflops_fp32": 52.0, "gbps": 3020.0, "smem_kb": 227},
    "H200": {"tflops_16": 700.0, "tflops_tf32": 350.0, "tflops_fp32": 51.0, "gbps": 4300.0, "smem_kb": 227},
    "A100": {"tflops_16": 280.0, "tflops_tf32": 140.0, "tflops_fp32": 19.5, "gbps": 1700.0, "smem_kb": 163},
    "default": {"tflops_16": 100.0, "tflops_tf32": 50.0, "tflops_fp32": 15.0, "gbps": 800.0, "smem_kb": 99},
}


class ModelConstants(NamedTuple):
    """The performance model's fitted constants (``python -m benchmarks.sweep_segment_matmul``
    measures every candidate and fits them)."""
    # a program's start, per KB of its row tile: the first tiles and the weight arrive before the
    # first product (measured on the H100: 3-5 us per 32 KB fp32 tile, under 1 us per 16 KB one)
    start_us_per_kb: float
    load_latency_us: float  # a program's loads in flight complete every load_latency_us
    # the model picks programs of at most this many rows per byte of the element size (the
    # autotuner may pick longer ones): longer programs measured slower than modelled, fp32 ones
    # (TF32, half bf16's rate) less so
    max_rows_per_prog_per_byte: int
    drain_programs: float  # programs' time the launch's end costs (SMs out of work)


# Fitted to benchmarks/data/sweeps/segment_matmul_h100.jsonl (48 cases, block tables): the pick's measured
# time over the best candidate's is 1.047 in geometric mean, at worst 1.17 (DBLP K = 64 fp32); 3.1% of the
# summed best time is lost. Without the start cost: 1.050, 4.6% lost, and BGS / AM fp32 K = 128 got 64-row
# tiles 6-9% slower than the 32-row ones. The drain term fits to zero here.
MODEL = ModelConstants(start_us_per_kb=0.1, load_latency_us=3.0, max_rows_per_prog_per_byte=128,
                       drain_programs=0.0)

BLOCK_MS = (16, 32, 64, 128)
MAX_WHOLE_K = 128  # up to this K a row tile's product is one tl.dot and the weight tile stays loaded
ROWS_PER_PROG_FACTORS = (1, 2, 4, 8, 16)
MAX_ROWS_PER_PROG = 2048  # the candidates' longest program


class SegmmConfig(NamedTuple):
    """Tile sizes of one launch (``block_*`` are powers of two, at least 16 for tl.dot)."""
    block_m: int
    block_n: int
    block_k: int
    rows_per_prog: int
    num_warps: int = 4
    num_stages: int = 2


class SizeStats(NamedTuple):
    """The features of a segment-size distribution that configs and tuning keys depend on."""
    rows: int
    mean: float  # over non-empty segments
    cv: float  # coefficient of variation over non-empty segments


def size_stats(counts: Tensor) -> SizeStats:
    """Statistics of the segment sizes ``counts`` (a CPU int64 tensor)."""
    nonempty = counts[counts > 0].double()
    if nonempty.numel() == 0:
        return SizeStats(0, 0.0, 0.0)
    mean = nonempty.mean().item()
    std = nonempty.std(unbiased=False).item() if nonempty.numel() > 1 else 0.0
    return SizeStats(int(counts.sum()), mean, std / mean)


def _pow2_clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, 1 << max(0, (n - 1).bit_length())))


def hardware(device: torch.device) -> Tuple[dict, int]:
    """(ceilings, number of SMs) of a CUDA device; defaults elsewhere (interpreter)."""
    if device.type != "cuda":
        return HARDWARE["default"], 132
    props = torch.cuda.get_device_properties(device)
    for key, value in HARDWARE.items():
        if key in props.name:
            return value, props.multi_processor_count
    return HARDWARE["default"], props.multi_processor_count


def tensor_cores(dtype: torch.dtype) -> bool:
    """Whether the products of ``dtype`` run on tensor cores: 16-bit types, and float32 where TF32
    is allowed (the switch behind ``torch.backends.cuda.matmul.allow_tf32``, read directly: its
    property costs 1.5 us)."""
    return dtype in (torch.float16, torch.bfloat16) or (dtype == torch.float32 and torch._C._get_cublas_allow_tf32())


def _peak_tflops(ceil: dict, dtype: torch.dtype) -> float:
    if dtype in (torch.float16, torch.bfloat16):
        return ceil["tflops_16"]
    return ceil["tflops_tf32"] if tensor_cores(dtype) else ceil["tflops_fp32"]


def fwd_smem_bytes(cfg: SegmmConfig, elt: int) -> int:
    """Shared memory of the forward kernel as Triton 3.6-3.9 lay it out (exact for fp32 wgmma
    tiles, an upper bound for 16-bit ones): ``num_stages`` row tiles of the input, the weight
    tile, and the output tile's layout conversion before the store."""
    return elt * (cfg.num_stages * cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n + cfg.block_m * cfg.block_n)


def candidates(K: int, N: int, dtype: torch.dtype, ceil: dict) -> List[SegmmConfig]:
    """All configurations the model and the autotuner consider for these sizes: the whole K in
    one tile up to MAX_WHOLE_K, three pipeline stages where the shared memory allows, else two."""
    elt = torch.tensor([], dtype=dtype).element_size()
    block_n = _pow2_clamp(N, 16, 128)
    block_k = _pow2_clamp(K, 16, MAX_WHOLE_K) if K <= MAX_WHOLE_K else 64
    out = []
    for block_m in BLOCK_MS:
        warps = 8 if block_m * block_n >= 64 * 128 else 4  # measured on the H100 (K = N = 128, fp32 and bf16)
        fitting = [cfg for cfg in (SegmmConfig(block_m, block_n, block_k, block_m, warps, stages) for stages in (3, 2))
                   if fwd_smem_bytes(cfg, elt) <= ceil["smem_kb"] * 1024]
        if not fitting:
            continue
        for factor in ROWS_PER_PROG_FACTORS:
            rows = block_m * factor
            if rows <= MAX_ROWS_PER_PROG:
                out.append(fitting[0]._replace(rows_per_prog=rows))
    return out


def model_time_us(cfg: SegmmConfig, counts: Tensor, K: int, N: int, dtype: torch.dtype, ceil: dict,
                  num_sms: int, model: ModelConstants = MODEL) -> float:
    """Modelled run time of the forward kernel (or, with K and N swapped, of the input gradient)."""
    elt = torch.tensor([], dtype=dtype).element_size()
    num_rows = int(counts.sum())
    if num_rows == 0:
        return 0.0
    programs, padded = block_shape(counts, cfg.rows_per_prog, cfg.block_m,
                                   tail_rows(num_rows, cfg.rows_per_prog, num_sms))
    n_tiles = math.ceil(N / cfg.block_n)
    per_sm = max(1, 4 * 128 * 128 // (cfg.block_m * cfg.block_n * cfg.num_warps // 4))
    per_sm = max(1, min(per_sm, 8, ceil["smem_kb"] * 1024 // fwd_smem_bytes(cfg, elt)))
    waves = max(1.0, programs * n_tiles / (num_sms * per_sm))
    rows = padded / programs
    flops = 2.0 * rows * K * cfg.block_n
    # bytes moved: the rows themselves (padding rows are masked off, not loaded) and the weight tile
    real_rows = num_rows / programs
    nbytes = elt * (real_rows * K + real_rows * cfg.block_n + K * cfg.block_n)
    sm_rate_flops = _peak_tflops(ceil, dtype) * 1e6 / (num_sms * per_sm)  # flops per us per program
    sm_rate_bytes = ceil["gbps"] * 1e3 / (num_sms * per_sm)  # bytes per us per program
    # latency: a program first waits for its weight, then keeps num_stages - 1 row tiles in flight
    latency_us = (rows / cfg.block_m / max(1, cfg.num_stages - 1) + 1) * model.load_latency_us
    start_us = model.start_us_per_kb * cfg.block_m * K * elt / 1024
    wave_us = max(flops / sm_rate_flops, nbytes / sm_rate_bytes, latency_us) + start_us
    last_program = wave_us * short_tail_share(num_rows, cfg.rows_per_prog, cfg.block_m, num_sms)
    return waves * wave_us + model.drain_programs * last_program


def model_config(counts: Tensor, K: int, N: int, dtype: torch.dtype, device: torch.device,
                 model: ModelConstants = MODEL) -> SegmmConfig:
    """The configuration with the lowest modelled time (no measurement)."""
    ceil, num_sms = hardware(device)
    return min(modelled_candidates(K, N, dtype, ceil, model),
               key=lambda c: model_time_us(c, counts, K, N, dtype, ceil, num_sms, model))


def modelled_candidates(K: int, N: int, dtype: torch.dtype, ceil: dict,
                        model: ModelConstants = MODEL) -> List[SegmmConfig]:
    """The candidates the model chooses from (programs no longer than ``model`` allows)."""
    max_rows = model.max_rows_per_prog_per_byte * torch.tensor([], dtype=dtype).element_size()
    return [c for c in candidates(K, N, dtype, ceil) if c.rows_per_prog <= max_rows]


# A backward item has at least this many times the rows whose x and g bytes equal its fp32 K x N
# weight-gradient partial: smaller items spend more on writing and summing partials than on their
# rows. Fitted on the H100 to items of 1, 2, 4, 8x the four-wave size (8 distributions, K = 64/128,
# bf16/fp32): against the best size per case,
# geomean 1.146 -> 1.072 (4: 1.128, 8-10: 1.072, 12: 1.114); MUTAG K = 128 bf16 0.123 -> 0.070 ms.
PARTIAL_ROWS_FACTOR = 8


def bwd_rows_per_item(stats: SizeStats, num_sms: int, block_m: int, K: int, N: int, element_size: int) -> int:
    """Rows per backward item: enough items for about four waves, but at least PARTIAL_ROWS_FACTOR
    times a partial's worth of rows, and at least four row tiles."""
    target = max(1, 4 * num_sms)
    rows = math.ceil(stats.rows / target) if stats.rows else block_m
    rows = max(rows, math.ceil(PARTIAL_ROWS_FACTOR * K * N * 4 / max(1, (K + N) * element_size)))
    return max(4 * block_m, math.ceil(rows / block_m) * block_m)


def bwd_config(K: int, N: int, dtype: torch.dtype, stats: SizeStats, num_sms: int, ceil: dict,
               input_grad: bool) -> SegmmConfig:
    """Tiles of the backward kernel, whose weight-gradient reduction runs over rows: one K x N
    tile up to 128 x 128 (x and the gradient are read once), 64 rows per step for 128 x 128
    tiles, else 128 (chosen from a sweep of the weight gradient on the H100: AM, Freebase,
    AIFB, MUTAG); three stages where they fit beside the weight tile the input gradient keeps."""
    elt = torch.tensor([], dtype=dtype).element_size()
    block_k, block_n = _pow2_clamp(K, 16, MAX_WHOLE_K), _pow2_clamp(N, 16, MAX_WHOLE_K)
    big = block_k * block_n >= 128 * 128
    block_m = 64 if big else 128
    resident = block_k * block_n * elt if input_grad else 0
    stages = 3 if resident + 3 * block_m * (block_k + block_n) * elt <= ceil["smem_kb"] * 1024 else 2
    return SegmmConfig(block_m, block_n, block_k, bwd_rows_per_item(stats, num_sms, block_m, K, N, elt),
                       8 if big else 4, stages)


# Where more items than this share a type, the weight gradient adds them atomically unless it must
# be deterministic: the type's last program sums its partials alone, a serial tail. Measured on the
# H100: with up to 44 items per type the
# ordered sum takes 2-34% less time than atomics (no zero fill, no cast); with 71 to 444 items
# atomics win in bf16 (by up to 5.8x), less so or not at all in fp32 (Freebase: ordered 3-6% ahead).
ATOMIC_MIN_ITEMS = 64


# ---------------------------------------------------------------------------------------------
# Forward blocks and backward items
# A forward launch's last rows go to blocks a quarter as long (at least one row tile): the SMs
# then run out of work together instead of waiting for the last full-length programs. The tail
# holds TAIL_WAVES waves of full-length programs, one per SM. Measured on the H100 (fp32): BGS K = 128 0.453 ->
# 0.423 ms, K = 64 0.207 -> 0.200 ms, AM K = 128 1.300 -> 1.262 ms; 1 or 2 waves gained less.
TAIL_WAVES = 0.5
TAIL_SHRINK = 4


def tail_rows(num_rows: int, rows_per_prog: int, num_sms: int) -> int:
    """Rows of a forward launch that go to short programs: TAIL_WAVES waves' worth, where the
    launch has at least four times that (a launch of a few waves has no long tail to even out)."""
    rows = int(TAIL_WAVES * num_sms * rows_per_prog)
    return rows if num_rows >= 4 * rows else 0


def tail_program_rows(rows_per_prog: int, block_m: int) -> int:
    """Rows of a short-tail program: a TAIL_SHRINK-th of the others, at least one row tile."""
    return max(block_m, rows_per_prog // TAIL_SHRINK)


def short_tail_share(num_rows: int, rows_per_prog: int, block_m: int, num_sms: int) -> float:
    """Length of a forward launch's last programs over ``rows_per_prog``: below one where the
    launch has a short tail."""
    if not tail_rows(num_rows, rows_per_prog, num_sms):
        return 1.0
    return min(1.0, tail_program_rows(rows_per_prog, block_m) / rows_per_prog)


def _block_regions(num_rows: int, rows_per_prog: int, block_m: int, short_tail: int) -> List[Tuple[int, int, int]]:
    """(first row, end, block length) of the forward's two regions: blocks of ``rows_per_prog``
    from row 0, then the short tail's blocks from the last multiple of ``rows_per_prog`` that
    leaves at least ``short_tail`` rows."""
    cut = max(0, num_rows - short_tail) // rows_per_prog * rows_per_prog if short_tail > 0 else num_rows
    return [(0, cut, rows_per_prog), (cut, num_rows, tail_program_rows(rows_per_prog, block_m))]


def build_blocks(ptr_cpu: Tensor, rows_per_prog: int, block_m: int, short_tail: int = 0) -> Tensor:
    """The forward's programs: [P + 1, 2] int32 rows (type, first row), then (0, M). Program p
    multiplies rows ``[blocks[p, 1], blocks[p + 1, 1])`` by weight ``blocks[p, 0]``. The rows are
    cut at the multiples of the block length of their region (see :func:`_block_regions`) and at
    every non-empty segment's start."""
    num_rows = int(ptr_cpu[-1])
    aligned = [torch.arange(lo, hi, length) for lo, hi, length in _block_regions(num_rows, rows_per_prog, block_m,
                                                                                 short_tail)]
    starts = torch.cat([*aligned, ptr_cpu[:-1][ptr_cpu.diff() > 0]]).unique()
    types = torch.searchsorted(ptr_cpu, starts, right=True) - 1  # the last type starting there: the non-empty one
    return torch.cat([torch.stack([types, starts], 1), torch.tensor([[0, num_rows]])]).to(torch.int32)


def block_shape(counts: Tensor, rows_per_prog: int, block_m: int, short_tail: int) -> Tuple[int, int]:
    """(programs, rows padded to whole ``block_m`` tiles) of :func:`build_blocks`, in time linear
    in the number of segments (the model evaluates every candidate); exact where the block
    lengths are multiples of ``block_m``, as the candidates' are."""
    ends = counts.cumsum(0)
    programs = tiles = 0
    for lo, hi, length in _block_regions(int(ends[-1]), rows_per_prog, block_m, short_tail):
        start, end = (ends - counts).clamp(lo, hi), ends.clamp(lo, hi)
        start, end = start[end > start], end[end > start]
        aligned = start + torch.remainder(lo - start, length)  # the first block start at or after the segment's
        first = torch.minimum(end, aligned) - start  # rows before it: a block of their own
        rest = (end - aligned).clamp(min=0)  # the rest in blocks at multiples of length, the last one partial
        programs += int((first > 0).sum()) + int(torch.div(rest + length - 1, length, rounding_mode="floor").sum())
        tiles += int(torch.div(first + block_m - 1, block_m, rounding_mode="floor").sum()
                     + torch.div(rest + block_m - 1, block_m, rounding_mode="floor").sum())
    return programs, tiles * block_m


class Routing(NamedTuple):
    """The backward's items, one program each: ``items`` [I, 3] int32 rows (type, row start, row
    end); ``type_items`` [T + 1] int32 points into ``items`` per type; ``max_items_per_type`` is a
    host int."""
    items: Tensor
    type_items: Tensor
    max_items_per_type: int


def build_routing(ptr_cpu: Tensor, rows_per_item: int) -> Routing:
    """Splits every segment into items of at most ``rows_per_item`` rows; an empty segment has one
    empty item (the backward writes every type's weight gradient). Vectorised: no Python loop
    over segments or items."""
    counts = ptr_cpu.diff()
    T = counts.numel()
    chunks = torch.div(counts + rows_per_item - 1, rows_per_item, rounding_mode="floor").clamp(min=1)
    item_type = torch.repeat_interleave(torch.arange(T), chunks)
    first_item = torch.cumsum(chunks, 0) - chunks
    within = torch.arange(item_type.numel()) - first_item[item_type]
    start = ptr_cpu[:-1][item_type] + within * rows_per_item
    end = torch.minimum(start + rows_per_item, ptr_cpu[1:][item_type])
    items = torch.stack([item_type, start, end], 1).to(torch.int32)
    type_items = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(chunks, 0)]).to(torch.int32)
    return Routing(items.contiguous(), type_items, int(chunks.max()) if T else 0)


# ---------------------------------------------------------------------------------------------
# Autotuning
def tune_key(op: str, K: int, N: int, dtype: torch.dtype, stats: SizeStats) -> str:
    """Cache key that stays the same under small changes of the segment sizes: the mean size is
    binned by half-octaves and the spread by quarter steps of its coefficient of variation."""
    mean_bin = round(2 * math.log2(stats.mean + 1))
    cv_bin = round(4 * min(stats.cv, 8.0))
    tf32 = dtype == torch.float32 and tensor_cores(dtype)
    return f"{op}|K={K}|N={N}|{str(dtype).replace('torch.', '')}{'+tf32' if tf32 else ''}|mean~{mean_bin}|cv~{cv_bin}"


class Tuner:
    """Chooses launch configurations: the performance model by default, measured candidates when
    autotuning is on. Results live in memory and, with a cache file, in JSON users can ship.

    Enable with ``pyg_fast.config.segment_matmul_autotune`` / ``segment_matmul_tune_file`` (read
    when this module is first imported) or ``TUNER.enable(cache_file=...)``.
    """

    def __init__(self):
        from pyg_fast.config import config
        self.autotune = config.segment_matmul_autotune
        self.cache_file: Optional[str] = config.segment_matmul_tune_file
        self.top_k = 6
        self._cache: Dict[str, SegmmConfig] = {}
        self._lock = threading.Lock()
        if self.cache_file and os.path.exists(self.cache_file):
            self.load(self.cache_file)

    def enable(self, on: bool = True, cache_file: Optional[str] = None) -> None:
        self.autotune = on
        if cache_file is not None:
            self.cache_file = cache_file
            if os.path.exists(cache_file):
                self.load(cache_file)

    def load(self, path: str) -> None:
        with open(path) as f:
            entries = json.load(f)
        for key, value in entries.items():
            self._cache[key] = SegmmConfig(**value)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({k: v._asdict() for k, v in sorted(self._cache.items())}, f, indent=1)

    def cached(self, key: str) -> Optional[SegmmConfig]:
        return self._cache.get(key)

    def choose(self, op: str, counts: Tensor, K: int, N: int, dtype: torch.dtype, device: torch.device,
               bench) -> SegmmConfig:
        """``bench(cfg) -> ms`` runs one candidate; called only when autotuning an unseen key."""
        stats = size_stats(counts)
        key = tune_key(op, K, N, dtype, stats)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if not self.autotune:
            return model_config(counts, K, N, dtype, device)
        ceil, num_sms = hardware(device)
        ranked = sorted(candidates(K, N, dtype, ceil),
                        key=lambda c: model_time_us(c, counts, K, N, dtype, ceil, num_sms))
        best = min(ranked[:self.top_k], key=bench)
        with self._lock:
            self._cache[key] = best
            if self.cache_file:
                self.save(self.cache_file)
        return best


TUNER = Tuner()
