"""Draws the speedup chart of a results.json: for every suite, pyg_fast's speedup over each other
method measured in it (the geometric mean over the cases both ran; times as the targets read them,
``benchmarks.targets.timed``), as a PNG.

    python -m benchmarks.chart benchmarks/results/results.json benchmarks/results/speedup.png

Needs matplotlib (not a dependency of pyg_fast).
"""
import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

from benchmarks.targets import timed

# Suites whose methods are not baselines of one another (schedule and reordering studies).
SKIPPED = {"schedule_select", "selector_heldout", "reorder"}


def speedups(results: dict):
    """{suite: {method: (geomean of method ms / pyg_fast ms, number of cases)}}."""
    by_case = defaultdict(dict)
    for record in timed(results["records"]):
        if record.get("ms") and record["suite"] not in SKIPPED:
            key = (record["suite"], json.dumps(record["case"], sort_keys=True))
            by_case[key][record["method"]] = record["ms"]
    logs = defaultdict(lambda: defaultdict(list))
    for (suite, _), methods in by_case.items():
        ours = methods.get("pyg_fast")
        for method, ms in methods.items():
            if ours and method != "pyg_fast":
                logs[suite][method].append(math.log(ms / ours))
    return {suite: {m: (math.exp(sum(v) / len(v)), len(v)) for m, v in sorted(methods.items())}
            for suite, methods in sorted(logs.items())}


def draw(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    table = speedups(results)
    labels, values = [], []
    for suite, methods in table.items():
        for method, (value, cases) in methods.items():
            labels.append(f"{suite}: vs {method} ({cases})")
            values.append(value)
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(labels) + 1.2))
    colors = ["tab:green" if v >= 1 else "tab:red" for v in values]
    ax.barh(range(len(values)), values, color=colors)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    env = results.get("env", {})
    ax.set_xlabel("pyg_fast speedup (geometric mean over cases; > 1: pyg_fast faster)")
    ax.set_title(f"{env.get('gpu', env.get('device', ''))}, torch {env.get('torch', '?')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("png")
    args = parser.parse_args()
    draw(json.loads(Path(args.results).read_text()), Path(args.png))
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
