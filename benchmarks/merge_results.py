"""Combines benchmark runs into one results.json + summary.md: suites of a later run replace
the same suites of earlier ones; suites no later run measured are kept, and ``env.runs`` says
which run (commit, csrc tree, date) each suite comes from.

    python -m benchmarks.merge_results OUT_DIR old/results.json new/results.json [...]
"""
import argparse
import json
from pathlib import Path

from benchmarks.common import summary_markdown

RUN_KEYS = ("gpu", "commit", "csrc_tree", "date", "torch_scatter")


def _origin(run: dict, suite: str) -> dict:
    """The device run a suite of ``run`` was measured in: its own env, or for an already merged
    file the entry of its ``env.runs`` that lists the suite."""
    for origin in run["env"].get("runs") or []:
        if isinstance(origin, dict) and suite in origin.get("suites", ()):
            return {k: origin.get(k) for k in RUN_KEYS}
    return {k: run["env"].get(k) for k in RUN_KEYS}


def merge(runs: list) -> dict:
    suites_from = {}  # suite -> index of the run it is taken from
    for i, run in enumerate(runs):
        for record in run["records"]:
            suites_from[record["suite"]] = i
    records = [r for i, run in enumerate(runs) for r in run["records"] if suites_from[r["suite"]] == i]
    failures = [f for i, run in enumerate(runs) for f in run.get("failures", []) if suites_from.get(f["suite"], i) == i]
    env = dict(runs[-1]["env"])
    origins = []  # (origin, suites), in the order the runs were given
    for suite, i in sorted(suites_from.items(), key=lambda item: item[1]):
        origin = _origin(runs[i], suite)
        match = next((entry for entry in origins if entry[0] == origin), None)
        if match is None:
            origins.append((origin, [suite]))
        else:
            match[1].append(suite)
    env["runs"] = [dict(origin, suites=sorted(suites)) for origin, suites in origins]
    return {"env": env, "records": records, "failures": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for the merged results.json and summary.md")
    parser.add_argument("runs", nargs="+", help="results.json files, oldest first")
    args = parser.parse_args()
    merged = merge([json.loads(Path(p).read_text()) for p in args.runs])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(merged, indent=1))
    (out / "summary.md").write_text(summary_markdown(merged["env"], merged["records"], merged["failures"]))


if __name__ == "__main__":
    main()
