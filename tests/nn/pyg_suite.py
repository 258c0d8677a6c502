"""Runs PyG's own layer tests against pyg_fast's layers.

PyG's test files (``test/nn/conv/test_<layer>_conv.py`` of a pytorch_geometric checkout) are
run twice in subprocesses: once as they are, against PyG's classes, and once with this file
loaded as a pytest plugin (``--pyg-fast-substitute``), which rebinds
``torch_geometric.nn.GCNConv`` etc. to ``pyg_fast.nn.GCNConv`` etc. before the test modules
import them. pyg_fast's layers must pass every test that PyG's own classes pass.

The test files are not part of this repository and not on PyPI (the torch_geometric sdists,
2.2.0 to 2.8.1, and pyg-nightly's ship no ``test/`` folder). They are read from
``$PYG_TEST_DIR`` (default ``~/.cache/pyg_fast/pytorch_geometric``), the root of a
pytorch_geometric checkout; without one the tests skip.

    PYTHONPATH=. python -m tests.nn.pyg_suite [gcn gin sage gat]   # prints the per-layer table
"""
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# Suite -> the class names pyg_fast replaces in its test file.
LAYERS = {"gcn": ["GCNConv"], "gin": ["GINConv"], "sage": ["SAGEConv"], "gat": ["GATConv"],
          "rgcn": ["FastRGCNConv", "RGCNConv"], "rgat": ["RGATConv"], "hgt": ["HGTConv"],
          "linear": ["HeteroDictLinear", "HeteroLinear"],
          "aggr": ["MaxAggregation", "MeanAggregation", "MinAggregation", "SumAggregation"]}
# Suite -> its test file under PyG's test/ (the conv layers': nn/conv/test_<suite>_conv.py).
PATHS = {"linear": "nn/dense/test_linear.py", "aggr": "nn/aggr/test_basic.py"}
# Class name -> the pyg_fast module that holds it.
SOURCES = {**{name: "pyg_fast.nn" for name in ("GCNConv", "GINConv", "SAGEConv", "GATConv")},
           **{name: "pyg_fast.hetero" for name in ("RGCNConv", "FastRGCNConv", "RGATConv", "HGTConv",
                                                    "HeteroLinear", "HeteroDictLinear")},
           **{name: "pyg_fast.aggr" for name in LAYERS["aggr"]}}
SUBSTITUTED = sorted(name for names in LAYERS.values() for name in names)
# torch_geometric modules whose names are rebound.
PYG_MODULES = ("torch_geometric.nn", "torch_geometric.nn.conv", "torch_geometric.nn.dense", "torch_geometric.nn.aggr")


def pyg_test_dir() -> Path:
    return Path(os.environ.get("PYG_TEST_DIR", Path.home() / ".cache" / "pyg_fast" / "pytorch_geometric"))


def test_file(layer: str) -> Optional[Path]:
    """PyG's test file for ``layer``, or None when there is no checkout."""
    path = pyg_test_dir() / "test" / PATHS.get(layer, f"nn/conv/test_{layer}_conv.py")
    return path if path.is_file() else None


def missing_reason(layers: List[str]) -> str:
    files = ", ".join(PATHS.get(layer, f"nn/conv/test_{layer}_conv.py") for layer in layers)
    return (f"PyG's test/{{{files}}} not found under {pyg_test_dir()}: PyG's tests are not "
            "published on PyPI; set PYG_TEST_DIR to a pytorch_geometric checkout (tag 2.8.0)")


# ---------------------------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------------------------

def run(files: List[Path], substitute: bool, patched: bool = False) -> Dict:
    """Runs PyG's test ``files`` in a subprocess; returns ``{"outcomes": {test id: outcome},
    "reasons": {test id: skip/failure text}, "substituted": {file name: [class names]}}``."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.nn.pyg_suite",
               f"--pyg-fast-report={report}", "--rootdir", str(pyg_test_dir() / "test"), "-W", "ignore"]
        if substitute:
            cmd.append("--pyg-fast-substitute")
        if patched:
            cmd.append("--pyg-fast-patch")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                                          os.environ.get("PYTHONPATH")])))
        proc = subprocess.run(cmd + [str(f) for f in files], cwd=tmp, env=env, capture_output=True, text=True)
        if not report.is_file():
            raise RuntimeError(f"PyG's tests did not run (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return json.loads(report.read_text())


def compare(layers: List[str]) -> Dict[str, Dict]:
    """Per layer: PyG's and pyg_fast's outcomes of PyG's test file."""
    files = {layer: test_file(layer) for layer in layers}
    present = [f for f in files.values() if f is not None]
    if not present:
        return {}
    stock, ours = run(present, substitute=False), run(present, substitute=True)
    result = {}
    for layer, path in files.items():
        if path is None:
            continue
        ids = sorted(k for k in stock["outcomes"] if k.split("::")[0] == path.name)
        result[layer] = {
            "file": path.name,
            "pyg": {k: stock["outcomes"][k] for k in ids},
            "ours": {k: ours["outcomes"].get(k, "not run") for k in ids},
            "reasons": {k: ours["reasons"][k] for k in ids if k in ours["reasons"]},
            "substituted": ours["substituted"].get(path.name, []),
            "kernels": {k: ours["kernels"].get(k, []) for k in ids},
        }
    return result


def compare_patched(paths: List[str]) -> Dict[str, Dict[str, str]]:
    """PyG's test files (paths under its test/, e.g. ``nn/conv``) with and without
    ``pyg_fast.patch()``: {test id: (outcome without, outcome with)} for the tests whose outcome
    differs."""
    files = [pyg_test_dir() / "test" / path for path in paths]
    files = [f for f in files if f.exists()]
    if not files:
        return {}
    stock, patched = run(files, substitute=False), run(files, substitute=False, patched=True)
    return {k: (v, patched["outcomes"].get(k, "not run")) for k, v in stock["outcomes"].items()
            if severity(patched["outcomes"].get(k, "not run")) > severity(v)}


def main(argv: List[str]) -> int:
    layers = argv or list(LAYERS)
    result = compare(layers)
    print(f"PyG tests from {pyg_test_dir()}")
    print("| layer | tests | PyG passed | PyG skipped | PyG failed | pyg_fast passed | pyg_fast skipped "
          "| pyg_fast failed | ran pyg_fast kernels |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for layer in layers:
        if layer not in result:
            print(f"| {layer} | {missing_reason([layer])} |")
            continue
        r = result[layer]
        pyg, ours = Counter(r["pyg"].values()), Counter(r["ours"].values())
        n = len(r["pyg"])
        print(f"| {layer} | {n} | {pyg['passed']} | {pyg['skipped']} | {n - pyg['passed'] - pyg['skipped']} | "
              f"{ours['passed']} | {ours['skipped']} | {n - ours['passed'] - ours['skipped']} | "
              f"{sum(bool(k) for k in r['kernels'].values())} |")
    for layer, r in result.items():
        for test_id, outcome in r["ours"].items():
            if outcome != "passed":
                print(f"{test_id}: {outcome}: {r['reasons'].get(test_id, '')[:500]}")
    return 0


# ---------------------------------------------------------------------------------------------
# pytest plugin (loaded in the subprocess with ``-p tests.nn.pyg_suite``)
# ---------------------------------------------------------------------------------------------

_SEVERITY = {"passed": 0, "skipped": 1, "failed": 2}


def severity(outcome: str) -> int:
    """passed < skipped < failed (and anything else, e.g. a test that did not run)."""
    return _SEVERITY.get(outcome, 3)


_STATE = {"outcomes": {}, "reasons": {}, "substituted": {}, "kernels": {}}  # this process's run


def pytest_addoption(parser):
    parser.addoption("--pyg-fast-patch", action="store_true",
                     help="turn pyg_fast.patch() on for the whole run (PyG's classes, pyg_fast's kernels)")
    parser.addoption("--pyg-fast-substitute", action="store_true",
                     help="rebind torch_geometric.nn's layer classes to pyg_fast.nn's before collection")
    parser.addoption("--pyg-fast-report", default=None, help="write per-test outcomes to this JSON file")


def pytest_configure(config):
    if config.getoption("--pyg-fast-patch"):
        import pyg_fast
        pyg_fast.tuning.PATCH_MIN_ELEMENTS.clear()  # PyG's small test inputs reach the kernels too
        pyg_fast.patch()
    if config.getoption("--pyg-fast-substitute"):
        import importlib
        for name in SUBSTITUTED:
            ours = getattr(importlib.import_module(SOURCES[name]), name)
            for module_name in PYG_MODULES:
                module = importlib.import_module(module_name)
                if hasattr(module, name):
                    setattr(module, name, ours)


def pytest_collection_modifyitems(session, config, items):
    """With substitution on, every collected test module that imports a substituted name must
    hold pyg_fast's class (else the run would silently test PyG)."""
    if not config.getoption("--pyg-fast-substitute"):
        return
    import importlib
    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        names = []
        for name in SUBSTITUTED:
            held = getattr(module, name, None)
            if held is None:
                continue
            if held is not getattr(importlib.import_module(SOURCES[name]), name):
                raise pytest.UsageError(f"{module.__file__} holds {held!r}, not pyg_fast's {name}")
            names.append(name)
        _STATE["substituted"][Path(module.__file__).name] = names


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Records the pyg_fast kernels each test ran (so a run that never reaches them shows)."""
    from pyg_fast.testing import PygFastOps
    with PygFastOps() as mode:
        yield
    _STATE["kernels"][item.nodeid.split("/")[-1]] = sorted(mode.ops)


def pytest_runtest_logreport(report):
    state = _STATE
    test_id = report.nodeid.split("/")[-1]
    outcome = report.outcome
    if outcome == "passed" and report.when != "call":
        outcome = state["outcomes"].get(test_id, "passed")
    if severity(outcome) >= severity(state["outcomes"].get(test_id, "passed")):
        state["outcomes"][test_id] = outcome
    if report.outcome in ("failed", "skipped"):
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        state["reasons"][test_id] = text


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--pyg-fast-report")
    if path:
        Path(path).write_text(json.dumps(_STATE, indent=1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
