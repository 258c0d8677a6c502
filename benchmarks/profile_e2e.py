"""Where the time of pyg_fast's end-to-end steps goes: the models of the e2e suites, converted
with pyg_fast.convert, under torch.profiler.

    python -m benchmarks.profile_e2e --out DIR [--graphs arxiv_like,reddit2_like] [--models gcn,sage]
                                     [--steps 5] [--compile]

For each model and graph it times a training step and an inference pass (median, as the e2e
suites) and profiles a few of each: device time per kernel, grouped into the categories below,
and the share of the step the device is busy (below 100%: the step waits on the host, i.e.
Python and launch overhead). ``--compile`` profiles ``torch.compile`` of the converted models. Writes DIR/profile_e2e.json and DIR/profile_e2e.md. On a CPU it
profiles CPU operators instead of kernels.
"""
import argparse
import json
import re
from pathlib import Path
from typing import Dict, List

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import environment, time_ms
from benchmarks.suites.e2e import MODELS, graph_inputs, step_functions, stock_and_fast

# (category, pattern on the kernel or operator name); the first match wins.
CATEGORIES = (
    ("edge softmax", r"edge_softmax"),
    ("sddmm", r"sddmm"),
    ("pyg_fast aggregation", r"pyg_fast|segment_(rows|chunks|groups|balanced|fixup|extremum|spread)"),
    ("matmul", r"gemm|gemv|cutlass|xmma|sm90_|cublas|Kernel2|::mm|::addmm|::bmm|::linear|matmul"),
    ("optimizer", r"multi_tensor|adam|foreach"),
    ("copy / fill", r"[Mm]emcpy|[Mm]emset|fill|copy_|::clone|contiguous"),
    ("reduction", r"reduce_kernel|::sum|::mean|::max|::min|log_softmax|nll_loss|cross_entropy"),
    ("elementwise", r"elementwise|::add|::mul|::relu|::leaky_relu|::div|::sub|::where|threshold"),
)
DEFAULT_GRAPHS = ("arxiv_like", "reddit2_like")


def category(name: str) -> str:
    return next((cat for cat, pattern in CATEGORIES if re.search(pattern, name)), "other")


def _device_events(prof, device: torch.device) -> Dict[str, float]:
    """Self time in microseconds per kernel (CUDA) or top-level operator (CPU), summed over the run."""
    times: Dict[str, float] = {}
    for event in prof.key_averages():
        if device.type == "cuda":
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
        else:
            if not event.key.startswith("aten::") and "pyg_fast" not in event.key:
                continue
            us = event.self_cpu_time_total
        if us:
            times[event.key] = times.get(event.key, 0.0) + us
    return times


def profile_step(fn, device: torch.device, steps: int) -> Dict:
    """Median step time, and device time per category and top kernels over ``steps`` profiled calls."""
    step_ms = time_ms(fn, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    per_kernel = {k: us / steps / 1e3 for k, us in _device_events(prof, device).items()}  # ms per step
    by_category: Dict[str, float] = {}
    for name, ms in per_kernel.items():
        by_category[category(name)] = by_category.get(category(name), 0.0) + ms
    busy = sum(per_kernel.values())
    top = sorted(per_kernel.items(), key=lambda item: -item[1])[:10]
    return {"step_ms": step_ms, "device_busy_ms": busy,
            "categories_ms": dict(sorted(by_category.items(), key=lambda item: -item[1])),
            "top_kernels_ms": [[name[:120], ms] for name, ms in top]}


def run(device: torch.device, graphs, models, steps: int, compiled: bool) -> List[Dict]:
    rows = []
    for graph_name in graphs:
        x, edge_index, y = graph_inputs(graph_name, device)
        for model_name in models:
            _, fast = stock_and_fast(model_name, device)
            if compiled:
                torch._dynamo.reset()
                fast = torch.compile(fast)
            train_step, infer = step_functions(fast, x, edge_index, y)
            for kind, fn in (("train", train_step), ("infer", infer)):
                row = {"model": model_name, "graph": graph_name, "step": kind, "compiled": compiled,
                       **profile_step(fn, device, steps)}
                print(json.dumps(row)[:300], flush=True)
                rows.append(row)
            del fast
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def markdown(env: Dict, rows: List[Dict]) -> str:
    lines = ["# Where pyg_fast's end-to-end steps spend their time", "",
             f"- gpu: {env.get('gpu')}, torch {env.get('torch')}, commit {env.get('commit')}", "",
             "Busy = device time of all kernels / median step time; below 100% the step waits on the host.",
             "Categories: share of the device time.", "",
             "| model | graph | step | ms | busy | categories | top kernel |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        busy = r["device_busy_ms"]
        cats = ", ".join(f"{c} {100 * ms / busy:.0f}%" for c, ms in r["categories_ms"].items() if ms >= 0.02 * busy)
        top = r["top_kernels_ms"][0] if r["top_kernels_ms"] else ["-", 0.0]
        lines.append(f"| {r['model']} | {r['graph']} | {r['step']} | {r['step_ms']:.3f} | "
                     f"{100 * busy / r['step_ms']:.0f}% | {cats} | {top[0][:60]} ({100 * top[1] / busy:.0f}%) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", required=True)
    parser.add_argument("--graphs", default=",".join(DEFAULT_GRAPHS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = run(device, [g for g in args.graphs.split(",") if g], [m for m in args.models.split(",") if m], args.steps,
               args.compile)
    env = environment(device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile_e2e.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    (out / "profile_e2e.md").write_text(markdown(env, rows))


if __name__ == "__main__":
    main()
