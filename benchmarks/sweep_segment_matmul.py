"""Measures every forward configuration of the Triton segmented matmul and fits the performance
model's constants to the measurements.

    python -m benchmarks.sweep_segment_matmul --out sweep.jsonl     # on the GPU: one line per case
    python -m benchmarks.sweep_segment_matmul --fit sweep.jsonl     # anywhere: grid search of the constants

Cases: the eight hetero_types distributions, K = N in {32, 64, 128}, bf16 and fp32 (TF32). The fit
minimises the mean over cases of log(measured time of the model's pick / best measured time) and
prints the constants to put in ``pyg_fast.tuning.segment_matmul.MODEL``.
"""
import argparse
import itertools
import json
import math

import torch

from benchmarks.common import time_ms
from benchmarks.suites.segment_matmul import DIMS, DTYPES, segment_sizes
from pyg_fast.tuning.segment_matmul import (MODEL, HARDWARE, ModelConstants, SegmmConfig, candidates,
                                                   model_time_us, modelled_candidates)

GRID = {
    "start_us_per_kb": (0.0, 0.05, 0.1, 0.2, 0.5),
    "load_latency_us": (2.0, 3.0, 4.0, 6.0, 8.0),
    "max_rows_per_prog_per_byte": (64, 128, 256, 512),
    "drain_programs": (0.0, 0.5, 1.0, 2.0),
}


def sweep(out_path: str, budget=(5.0, 25.0)) -> None:
    from pyg_fast.triton import segment_matmul as kernels
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    ceil, _ = kernels.hardware(device)
    with open(out_path, "w") as out:
        for dataset, sizes in segment_sizes().items():
            ptr = torch.tensor([0] + sizes).cumsum(0)
            plan = kernels.SegmentPlan(ptr, device)
            for dim, (dname, dtype) in itertools.product(DIMS, DTYPES.items()):
                x = torch.randn(int(ptr[-1]), dim, device=device).to(dtype)
                w = (torch.randn(len(sizes), dim, dim, device=device) / dim ** 0.5).to(dtype)
                times = [(tuple(cfg), time_ms(lambda: kernels.forward(x, plan, w, config=cfg), *budget))
                         for cfg in candidates(dim, dim, dtype, ceil)]
                out.write(json.dumps({"dataset": dataset, "K": dim, "N": dim, "dtype": dname, "times": times}) + "\n")
                out.flush()
                best = min(times, key=lambda t: t[1])
                print(f"{dataset} K={dim} {dname}: best {best[1]:.4f} ms {best[0]}", flush=True)
                del x, w


def pick_ratios(cases, model: ModelConstants, ceil: dict, num_sms: int):
    """Measured time of the model's pick over the best measured time, per case."""
    sizes = segment_sizes()
    ratios = []
    for case in cases:
        counts = torch.tensor(sizes[case["dataset"]])
        dtype = DTYPES[case["dtype"]]
        times = {SegmmConfig(*cfg): ms for cfg, ms in case["times"]}
        allowed = [cfg for cfg in modelled_candidates(case["K"], case["N"], dtype, ceil, model) if cfg in times]
        pick = min(allowed, key=lambda c: model_time_us(c, counts, case["K"], case["N"], dtype, ceil, num_sms, model))
        ratios.append(times[pick] / min(times.values()))
    return ratios


def fit(path: str) -> None:
    with open(path) as f:
        cases = [json.loads(line) for line in f]
    torch.backends.cuda.matmul.allow_tf32 = True  # the fp32 cases ran on TF32 tensor cores
    ceil, num_sms = HARDWARE["H100"], 132

    def score(model):
        ratios = pick_ratios(cases, model, ceil, num_sms)
        return sum(math.log(r) for r in ratios) / len(ratios), max(ratios)

    current = score(MODEL)
    scored = [(score(m), m) for m in (ModelConstants(*values) for values in itertools.product(*GRID.values()))]
    (mean_log, worst), best = min(scored, key=lambda s: s[0])
    print(f"{len(cases)} cases; current {MODEL}: pick / best geomean {math.exp(current[0]):.4f}, "
          f"worst {current[1]:.3f}")
    print(f"fitted  {best}: pick / best geomean {math.exp(mean_log):.4f}, worst {worst:.3f}")
    worst_cases = sorted(zip(pick_ratios(cases, best, ceil, num_sms), cases), key=lambda rc: -rc[0])[:5]
    print("slowest picks: " + ", ".join(f"{c['dataset']} K={c['K']} {c['dtype']} {r:.2f}x" for r, c in worst_cases))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="sweep on the GPU, writing one JSON line per case here")
    parser.add_argument("--fit", help="fit the model's constants to this sweep file")
    args = parser.parse_args()
    if args.out:
        sweep(args.out)
    if args.fit:
        fit(args.fit)


if __name__ == "__main__":
    main()
