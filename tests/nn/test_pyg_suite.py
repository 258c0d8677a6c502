"""PyG's own layer tests, run against pyg_fast's layers (see tests/nn/pyg_suite.py)."""
import pytest

from tests.nn import pyg_suite


def test_pyg_layer_tests_pass_on_pyg_fast():
    missing = [layer for layer in pyg_suite.LAYERS if pyg_suite.test_file(layer) is None]
    if len(missing) == len(pyg_suite.LAYERS):
        pytest.skip(pyg_suite.missing_reason(missing))
    problems = [pyg_suite.missing_reason(missing)] if missing else []
    for layer, result in pyg_suite.compare(list(pyg_suite.LAYERS)).items():
        if result["substituted"] != pyg_suite.LAYERS[layer]:
            problems.append(f"{result['file']} did not get pyg_fast's {pyg_suite.LAYERS[layer]}")
        for test_id, outcome in result["ours"].items():
            if pyg_suite.severity(outcome) > pyg_suite.severity(result["pyg"][test_id]):
                problems.append(f"{test_id}: PyG {result['pyg'][test_id]}, pyg_fast {outcome}\n"
                                f"{result['reasons'].get(test_id, '')}")
        if not any(result["kernels"].values()):
            problems.append(f"no test of {result['file']} reached a pyg_fast kernel")
    assert not problems, "\n".join(problems)


PATCHED_SUITES = ["nn/conv", "nn/aggr", "nn/pool/test_glob.py", "utils/test_scatter.py", "utils/test_segment.py",
                  "utils/test_softmax.py"]


def test_pyg_tests_pass_under_the_switch():
    """PyG's own tests of its layers, aggregations and scatter/softmax utilities, run with
    pyg_fast.patch() on: every test that passes without it passes with it."""
    if not (pyg_suite.pyg_test_dir() / "test").is_dir():
        pytest.skip(pyg_suite.missing_reason(list(pyg_suite.LAYERS)))
    worse = pyg_suite.compare_patched(PATCHED_SUITES)
    assert not worse, "\n".join(f"{k}: {a} -> {b}" for k, (a, b) in worse.items())
