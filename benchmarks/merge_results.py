"""Combines benchmark runs into one results.json + summary.md: suites of a later run replace
the same suites of earlier ones; suites no later run measured are kept, and ``env.runs`` says
which run (commit, csrc tree, date) each suite comes from. A suite named in ``--by-case`` is
merged case by case instead: a later run replaces only the cases (case and method) it measured,
as a rerun of a suite on some of its graphs does, and each of that suite's records names its run
under ``origin``.

    python -m benchmarks.merge_results [--by-case SUITE,...] OUT_DIR old/results.json new/results.json [...]
"""
import argparse
import json
from pathlib import Path
from typing import Sequence

from benchmarks.common import summary_markdown

RUN_KEYS = ("gpu", "commit", "csrc_tree", "date", "torch_scatter")


def suite_origin(run: dict, suite: str) -> dict:
    """The device run a suite of ``run`` was measured in: its own env, or for an already merged
    file the entry of its ``env.runs`` that lists the suite."""
    for origin in run["env"].get("runs") or []:
        if isinstance(origin, dict) and suite in origin.get("suites", ()):
            return {k: origin.get(k) for k in RUN_KEYS}
    return {k: run["env"].get(k) for k in RUN_KEYS}


def _key(entry: dict) -> tuple:
    return entry["suite"], json.dumps(entry.get("case"), sort_keys=True), entry.get("method")


def merge(runs: list, by_case: Sequence[str] = ()) -> dict:
    suites_from = {}  # suite -> index of the run it is taken from
    latest = {}  # a by-case suite's (suite, case, method) -> index of the last run that measured it
    for i, run in enumerate(runs):
        for record in run["records"]:
            suites_from[record["suite"]] = i
            latest[_key(record)] = i

    def kept(entry: dict, i: int) -> bool:
        return latest.get(_key(entry), i) == i if entry["suite"] in by_case else suites_from.get(entry["suite"], i) == i

    records = [r if r["suite"] not in by_case else dict(r, origin=r.get("origin") or suite_origin(run, r["suite"]))
               for i, run in enumerate(runs) for r in run["records"] if kept(r, i)]
    failures = [f for i, run in enumerate(runs) for f in run.get("failures", []) if kept(f, i)]
    env = dict(runs[-1]["env"])
    origins = []  # (origin, suites): whole suites in the order of their runs, then the by-case ones
    found = [(suite, suite_origin(runs[i], suite)) for suite, i in sorted(suites_from.items(), key=lambda item: item[1])
             if suite not in by_case]
    found += [(r["suite"], r["origin"]) for r in records if r["suite"] in by_case]
    for suite, origin in found:
        match = next((entry for entry in origins if entry[0] == origin), None)
        if match is None:
            origins.append((origin, [suite]))
        elif suite not in match[1]:
            match[1].append(suite)
    env["runs"] = [dict(origin, suites=sorted(suites)) for origin, suites in origins]
    return {"env": env, "records": records, "failures": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder for the merged results.json and summary.md")
    parser.add_argument("runs", nargs="+", help="results.json files, oldest first")
    parser.add_argument("--by-case", default="", help="suites merged case by case (comma-separated)")
    args = parser.parse_args()
    merged = merge([json.loads(Path(p).read_text()) for p in args.runs],
                   [s for s in args.by_case.split(",") if s])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(merged, indent=1))
    (out / "summary.md").write_text(summary_markdown(merged["env"], merged["records"], merged["failures"]))


if __name__ == "__main__":
    main()
