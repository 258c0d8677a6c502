"""Smoke test of the benchmark harness: every suite runs in quick mode on the CPU and
gives well-formed records in which every method that ran gave the right answer."""
import json
import subprocess
import sys

import pytest
import torch

from benchmarks.common import Recorder, check, time_ms
from benchmarks.run import available_suites, run_suites

# The case keys issue 2's acceptance reads.
CASE_KEYS = {"segment_reduce": {"graph", "F", "reduce", "dtype"}, "spmm": {"graph", "F", "dtype"}}
# What benchmarks.graphs.datasets_dir raises with when ../shared/datasets is absent (e.g. a clone in /tmp).
MISSING_DATASETS = "no datasets folder"
# What a suite that only compares against torch_scatter (torch_scatter_api) records without it.
MISSING_TORCH_SCATTER = "torch_scatter is not importable"
ENV_KEYS = {"gpu", "torch", "cuda", "torch_geometric", "commit", "csrc_tree", "copy_gbps"}


@pytest.fixture(scope="module")
def recorder():
    return Recorder("cpu", verbose=False)


@pytest.mark.parametrize("suite", available_suites())
def test_suite_quick(recorder, suite, tmp_path):
    before = len(recorder.records)
    run_suites(recorder, torch.device("cpu"), [suite], quick=True)
    failures = [f for f in recorder.failures if f["suite"] == suite]
    if failures and all(MISSING_DATASETS in f["error"] for f in failures):
        pytest.skip("the suite reads the offline datasets, which are not next to this checkout (set PYG_FAST_DATA)")
    if failures and all(MISSING_TORCH_SCATTER in f["error"] for f in failures):
        pytest.skip("the suite compares against torch_scatter, which is not installed")
    assert failures == []
    records = recorder.records[before:]  # a module may record several suites (e2e_train, e2e_infer)
    assert records and any(r["method"] == "pyg_fast" for r in records)
    for r in records:
        assert {"suite", "case", "method", "ms"} <= r.keys() and isinstance(r["case"], dict)
        assert CASE_KEYS.get(suite, r["case"].keys()) == r["case"].keys(), r
        assert not r.get("error", "").startswith("wrong"), r
        if r["method"] == "pyg_fast":
            assert r["ms"] is not None and r["ms"] > 0, r
    recorder.write(tmp_path / "results.json", tmp_path / "summary.md")
    written = json.loads((tmp_path / "results.json").read_text())
    assert ENV_KEYS <= written["env"].keys() and len(written["records"]) == len(recorder.records)
    summary = (tmp_path / "summary.md").read_text()
    assert all(f"## {name}" in summary for name in {r["suite"] for r in records})


def test_failing_suite_is_reported_and_others_run(tmp_path):
    rec = Recorder("cpu", env={}, verbose=False)
    run_suites(rec, torch.device("cpu"), ["no_such_suite"], quick=True)
    assert len(rec.failures) == 1 and "no_such_suite" in rec.failures[0]["error"]
    rec.write(tmp_path / "r.json", tmp_path / "s.md")
    assert "suite failed" in (tmp_path / "s.md").read_text()


def test_check_and_timing():
    ref = torch.randn(10, 3)
    assert check(ref + 1e-7, ref, 1e-5)
    assert not check(ref * 1.1, ref, 1e-5)
    assert not check(torch.full_like(ref, float("nan")), ref, 1e-5)
    assert not check(ref[:5], ref, 1e-5)
    assert time_ms(lambda: ref.sum(), warmup=0, rep=0) > 0


def test_merge_results_keeps_the_origin_of_each_suite():
    from benchmarks.merge_results import merge

    def run(commit, suites, runs=None):
        env = {"gpu": "g", "commit": commit, "csrc_tree": commit, "date": commit, "torch_scatter": None}
        if runs is not None:
            env["runs"] = runs
        return {"env": env, "records": [{"suite": s, "case": {}, "method": "pyg_fast", "ms": 1.0} for s in suites]}

    first = merge([run("a", ["x", "y"]), run("b", ["y"])])
    assert [(r["commit"], r["suites"]) for r in first["env"]["runs"]] == [("a", ["x"]), ("b", ["y"])]
    # Merging an already merged file keeps where its suites came from.
    second = merge([first, run("c", ["z"])])
    assert [(r["commit"], r["suites"]) for r in second["env"]["runs"]] == [("a", ["x"]), ("b", ["y"]), ("c", ["z"])]
    assert sorted(r["suite"] for r in second["records"]) == ["x", "y", "z"]


def test_merge_results_by_case_replaces_only_the_cases_rerun():
    from benchmarks.merge_results import merge

    def run(commit, cases, ms):
        env = {"gpu": "g", "commit": commit, "csrc_tree": commit, "date": commit, "torch_scatter": None}
        return {"env": env, "records": [{"suite": "s", "case": {"graph": g}, "method": "pyg_fast", "ms": ms}
                                        for g in cases] + [{"suite": "t", "case": {}, "method": "m", "ms": ms}]}

    merged = merge([run("a", ["cora", "arxiv"], 1.0), run("b", ["cora"], 2.0)], by_case=["s"])
    got = {r["case"]["graph"]: (r["ms"], r["origin"]["commit"]) for r in merged["records"] if r["suite"] == "s"}
    assert got == {"cora": (2.0, "b"), "arxiv": (1.0, "a")}
    assert [r["ms"] for r in merged["records"] if r["suite"] == "t"] == [2.0]  # whole suites as before
    assert [(r["commit"], r["suites"]) for r in merged["env"]["runs"]] == [("b", ["s", "t"]), ("a", ["s"])]
    # merged again: each record keeps its run
    again = merge([merged, run("c", ["pubmed"], 3.0)], by_case=["s"])
    got = {r["case"]["graph"]: r["origin"]["commit"] for r in again["records"] if r["suite"] == "s"}
    assert got == {"cora": "b", "arxiv": "a", "pubmed": "c"}


def test_sweep_merge_keeps_lower_timing_of_unchanged_schedules():
    """A re-sweep merged with ``changed``: unchanged schedules keep the lower of their two timings,
    changed ones take the new timing, and the bests are recomputed from the merged timings."""
    from benchmarks.tune_segment import merged
    row, edges, groups = (dict(schedule=s, max_lanes=32, threads=256, chunk=c)
                          for s, c in (("row", 256), ("edges", 1024), ("groups", 0)))
    entry = lambda F, timings: dict(graph="g", F=F, gather=False, all=[dict(ms=ms, **p) for ms, p in timings])
    old = [entry(1, [(0.010, row), (0.030, edges), (0.008, groups)]), entry(32, [(0.5, row)])]
    new = [entry(1, [(0.090, row), (0.020, edges), (0.040, groups)])]
    by_f = {r["F"]: r for r in merged(old, new, changed={"edges"})}
    assert [t["ms"] for t in by_f[1]["all"]] == [0.010, 0.020, 0.008]
    assert (by_f[1]["best"], by_f[1]["best_ms"]) == (groups, 0.008)
    assert (by_f[1]["geot_best"], by_f[1]["geot_best_ms"]) == (row, 0.010)
    assert by_f[32] is old[1]
    plain = {r["F"]: r for r in merged(old, new)}
    assert plain[1] is new[0]


def test_consensus_and_candidates_are_what_the_neighbours_share():
    """An entry stands for the configuration with the lowest summed log(time / best) over it and its
    nearest entries, among configurations swept on all of them; the far entry does not vote."""
    from benchmarks.tune_segment import consensus, ranked, select
    row, groups, edges = (dict(schedule=s, max_lanes=32, threads=256, chunk=c)
                          for s, c in (("row", 256), ("groups", 0), ("edges", 1024)))
    entry = lambda x, timings: dict(features=[x], best_ms=min(timings, key=lambda t: t[0])[0],
                                    best=min(timings, key=lambda t: t[0])[1],
                                    all=[dict(ms=ms, **p) for ms, p in timings])
    a = entry(0.0, [(1.00, row), (1.02, groups), (0.90, edges)])  # edges: a near-tie here ...
    b = entry(1.0, [(2.00, row), (1.00, groups)])  # ... not swept here; groups twice as fast as row
    c = entry(1.5, [(1.50, row), (1.00, groups), (9.00, edges)])
    far = entry(9.0, [(1.00, row), (5.00, groups)])
    table, weights = [a, b, c, far], [1.0]
    assert consensus(a, table, weights, neighbours=1) == edges
    # log costs over a, b, c: row 0 + log 2 + log 1.5, groups log 1.02 + 0 + 0; edges is not on b
    assert consensus(a, table, weights) == groups
    assert consensus(far, table, weights, neighbours=1) == row
    assert select(table, [0.2], weights) == groups  # the nearest entry (a) and its consensus
    apart = entry(0.5, [(1.00, dict(row, chunk=32))])  # a grid that shares nothing with a's
    assert consensus(apart, [apart, a], weights) == dict(row, chunk=32)
    # the candidates a reused graph times: the shared configurations by summed log cost, best first
    assert ranked(a, table, weights, 5) == [groups, row]
    assert ranked(a, table, weights, 5, neighbours=1) == [edges, row, groups]
    assert ranked(a, table, weights, 2, neighbours=1) == [edges, row]


def test_a_picks_time_is_the_lowest_reading_of_its_kernel_under_any_name():
    """Grid parameters that resolve to one launch on an input are one kernel: a pick's time is the
    lowest reading among them (at F = 1 a row of 8 or of 32 lanes is one lane), not the reading of
    the name it was picked under; parameters not swept have no time."""
    from benchmarks.tune_segment import picked_ms, resolved
    row = lambda lanes, threads: dict(schedule="row", max_lanes=lanes, threads=threads, chunk=256)
    result = dict(num_edges=38_868, num_nodes=30_449, F=1,
                  all=[dict(ms=9.6, **row(8, 128)), dict(ms=6.5, **row(32, 128)), dict(ms=6.3, **row(32, 256))])
    assert resolved(result, row(8, 128)) == resolved(result, row(32, 128)) != resolved(result, row(32, 256))
    assert picked_ms(result, row(8, 128)) == picked_ms(result, row(32, 128)) == 6.5
    assert picked_ms(result, row(32, 256)) == 6.3
    assert picked_ms(result, row(8, 256)) is None
    wide = dict(result, F=64)  # 64 features: the lanes differ, and so do the kernels
    assert resolved(wide, row(8, 128)) != resolved(wide, row(32, 128))
    assert picked_ms(wide, row(8, 128)) == 9.6


def test_sweep_quick_on_cpu(tmp_path):
    """The tuning sweep runs end to end (quick graphs, on the CPU, where configurations do not
    change the kernel) and writes one line per input whose bests are among its timings."""
    from benchmarks.tune_segment import read_jsonl, sweep, write_rules
    results = sweep("cpu", True, str(tmp_path))
    assert results == read_jsonl(str(tmp_path / "sweep.jsonl"))
    params = lambda t: {k: v for k, v in t.items() if k != "ms"}
    for r in results:
        assert r["best_ms"] == min(t["ms"] for t in r["all"])
        assert any(t["ms"] == r["best_ms"] and params(t) == r["best"] for t in r["all"])
    write_rules(results, str(tmp_path), "CPU")
    assert len(json.loads((tmp_path / "rules.json").read_text())["table"]) == len(results)
    (tmp_path / "again").mkdir()
    again = sweep("cpu", True, str(tmp_path / "again"), graphs={"sbm_quick"})  # a subset swept again
    assert {r["graph"] for r in again} == {"sbm_quick"} and len(again) == 4  # F = 1, 16, direct and gather


def test_chart_speedups_are_geometric_means_over_shared_cases():
    from benchmarks.chart import speedups
    records = [{"suite": "s", "case": {"g": g}, "method": m, "ms": ms}
               for g, m, ms in [(1, "pyg_fast", 1.0), (1, "base", 4.0), (2, "pyg_fast", 2.0), (2, "base", 2.0),
                                (3, "base", 9.0)]]  # case 3: no pyg_fast time, left out
    value, cases = speedups({"records": records})["s"]["base"]
    assert cases == 2 and abs(value - 2.0) < 1e-12  # sqrt(4 * 1)
    # an op suite's calls compare by device time where recorded
    kernel = [{"suite": "spmm", "case": {}, "method": m, "ms": 0.08, "device_ms": dev}
              for m, dev in (("pyg_fast", 0.01), ("torch_sparse_csr", 0.03))]
    value, cases = speedups({"records": kernel})["spmm"]["torch_sparse_csr"]
    assert cases == 1 and abs(value - 3.0) < 1e-12


def test_zoo_generators_have_their_shapes():
    from benchmarks import graphs
    ei = graphs.block_model_graph(2000, 40_000, 10, 0.8, 0)
    same_block = (ei[0] // 200 == ei[1] // 200).double().mean().item()
    assert abs(same_block - (0.8 + 0.2 / 10)) < 0.01  # inside, or anywhere and by chance inside
    ei = graphs.grid_graph(20, 1.0, 0)
    assert ei.size(1) == 2 * 2 * 20 * 19 and torch.bincount(ei[1], minlength=400).max() == 4
    assert ((ei[0] - ei[1]).abs().unsqueeze(1) == torch.tensor([1, 20])).any(1).all()  # grid neighbours only
    ei = graphs.bipartite_graph(100, 200, 5000, 0.6, 0)
    assert ei[0].max() < 100 <= ei[1].min() and ei[1].max() < 300
    ei = graphs.power_law_graph(5000, 100_000, 0, exponent=0.3, src_exponent=1.0)
    out_degree, in_degree = torch.bincount(ei[0], minlength=5000), torch.bincount(ei[1], minlength=5000)
    assert out_degree.max() > 5 * in_degree.max()  # hubs among the sources only
    assert bool((ei[1][1:] >= ei[1][:-1]).all())


def test_zoo_graph_is_built_once_and_kept_on_disk(monkeypatch, tmp_path):
    from benchmarks import graphs
    calls = []

    def build():
        calls.append(1)
        return torch.tensor([[0, 3, 1, 2], [2, 0, 2, 1]]), 4

    monkeypatch.setenv("PYG_FAST_GRAPH_CACHE", str(tmp_path))
    monkeypatch.setitem(graphs._ZOO_BUILDERS, "tiny", build)
    for _ in range(2):
        data = graphs._zoo_graph("tiny")
        assert data.num_nodes == 4 and data.edge_index.tolist() == [[3, 2, 0, 1], [0, 1, 2, 2]]
    assert len(calls) == 1 and [p.name for p in tmp_path.iterdir()] == [f"tiny-v{graphs.ZOO_VERSION}.pt"]


@pytest.mark.parametrize("fresh", [False, True])
def test_layer_overhead_checks_each_pair_then_times_it(fresh):
    """The per-layer host-cost table: each PyG / pyg_fast pair's outputs and gradients are checked
    against each other on the step's graph (a new one every step with --fresh) before timing."""
    args = [sys.executable, "-m", "benchmarks.layer_overhead", "--steps", "3", "--blocks", "1"]
    result = subprocess.run(args + (["--fresh"] if fresh else []), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "us/step" not in line
            and "---" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["GCN", "GIN", "SAGE", "GAT"]
    assert ("a new edge_index every step" in result.stdout) == fresh


def test_op_overhead_checks_every_call_then_times_it():
    """The per-call host-time table: every call's result is checked against its float64
    reference before it is timed, and each layer of the op stack gets a row."""
    args = [sys.executable, "-m", "benchmarks.op_overhead", "--calls", "2", "--rounds", "1"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    groups = {line.split("|")[1].strip() for line in result.stdout.splitlines()
              if line.startswith("| ") and "---" not in line and "host us" not in line}
    assert {"torch", "pyg_fast", "stand-in"} <= groups
