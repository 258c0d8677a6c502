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


def merge(runs: list) -> dict:
    suites_from = {}  # suite -> index of the run it is taken from
    for i, run in enumerate(runs):
        for record in run["records"]:
            suites_from[record["suite"]] = i
    records = [r for i, run in enumerate(runs) for r in run["records"] if suites_from[r["suite"]] == i]
    failures = [f for i, run in enumerate(runs) for f in run.get("failures", []) if suites_from.get(f["suite"], i) == i]
    env = dict(runs[-1]["env"])
    env["runs"] = [dict({k: run["env"].get(k) for k in RUN_KEYS},
                        suites=sorted(s for s, j in suites_from.items() if j == i))
                   for i, run in enumerate(runs) if i in suites_from.values()]
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
