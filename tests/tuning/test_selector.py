"""The schedule selector and the per-graph layouts of the graph-aware schedules (CPU-checkable
parts; the CUDA kernels that read the layouts are tested in tests/ops on the GPU)."""
import json

import pytest
import torch

from pyg_fast import tuning
from pyg_fast.ops import _layout


def groups_reference(ptr: list, group_size: int):
    """The neighbour-group table built row by row in plain Python (an empty segment: one group)."""
    group_ptr, group_start, group_segment = [0], [], []
    for r in range(len(ptr) - 1):
        for start in range(ptr[r], max(ptr[r + 1], ptr[r] + 1), group_size):
            group_start.append(start)
            group_segment.append(r)
        group_ptr.append(len(group_start))
    return group_ptr + group_start + [ptr[-1]] + group_segment


@pytest.mark.parametrize("group_size", [1, 3, 16])
def test_neighbor_groups_match_reference(group_size):
    degrees = torch.tensor([0, 5, 0, 0, 37, 1, 2, 0, 16])
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), degrees.cumsum(0)]) + 4  # need not start at 0
    expected = groups_reference(ptr.tolist(), group_size)
    num_groups = (len(expected) - len(degrees) - 2) // 2
    table = _layout.neighbor_groups(ptr, group_size, num_groups)
    assert table.tolist() == expected
    assert _layout.neighbor_groups(ptr, group_size, num_groups) is table  # built once per graph


def test_neighbor_groups_rejects_bad_size():
    with pytest.raises(ValueError, match="group size"):
        _layout.neighbor_groups(torch.tensor([0, 3]), 0, 1)


def test_balanced_order_sorts_by_decreasing_length():
    ptr = torch.tensor([0, 2, 2, 9, 10, 14, 14])
    order = _layout.balanced_order(ptr)
    assert sorted(order.tolist()) == list(range(6))
    assert order.tolist() == [2, 4, 0, 3, 1, 5]  # stable among equal lengths


@pytest.fixture
def table(tmp_path):
    """A rules table with one input whose best schedule is graph-aware, loaded into the selector
    (the shipped table is loaded back afterwards)."""
    rules = {"source": "test table", "weights": [1.0] * 6,
             "default": dict(schedule="row", max_lanes=32, threads=256, chunk=256),
             "table": [{"features": [20, 3, 5, 4, 1, 1],
                        "candidates": [dict(schedule="groups", max_lanes=0, threads=128, chunk=0),
                                       dict(schedule="chunk", max_lanes=32, threads=128, chunk=512),
                                       dict(schedule="balanced", max_lanes=32, threads=128, chunk=0),
                                       dict(schedule="chunk", max_lanes=8, threads=128, chunk=512),
                                       dict(schedule="chunk", max_lanes=16, threads=128, chunk=512)],
                        "geot_params": dict(schedule="chunk", max_lanes=32, threads=128, chunk=64)}]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    tuning.load_rules(str(path))
    yield rules
    tuning.load_rules()


def test_selector_uses_graph_aware_only_with_a_layout(table):
    args = (1_000_000, 125_000, 48, 4, True, 48, 40)
    geot = tuning.choose(*args, graph_aware=False)
    aware = tuning.choose(*args, graph_aware=True)
    assert geot == dict(schedule="chunk", lanes=16, vec=4, threads=128, chunk=64)  # 16 * 4 >= 48
    # GNNAdvisor's model fills in the zeros: group size near the mean degree 8, F / 3 = 16 -> 4 vectors.
    assert aware == dict(schedule="groups", lanes=4, vec=4, threads=128, chunk=8)
    text = tuning.explain(1_000_000, 125_000, 48, 4, True, 40, graph_aware=True)
    assert "groups" in text and "test table" in text and "graph-aware layouts allowed" in text


def test_gnnadvisor_group_size_follows_the_mean_degree(table):
    def group_size(num_rows, num_segments):
        return tuning.choose(num_rows, num_segments, 48, 4, True, 48, 40, graph_aware=True)["chunk"]
    assert group_size(1000, 100) == 8  # mean degree 10 -> 8
    assert group_size(10, 100) == 2 and group_size(10**7, 10) == 64


def test_features_are_the_table_coordinates():
    f = tuning.features(1024, 64, 32, 2, True, 64)
    assert f == pytest.approx([10.0, 4.0, 5.0, 2.0, 1.0, 2.0])  # skew = 64 / 16
    assert tuning.features(1024, 64, 32, 2, False, None)[5] == pytest.approx(8.0)  # unknown: 256


def test_override_wins_and_resolves(table):
    tuning.set_override(dict(schedule="balanced", max_lanes=32, threads=64, chunk=0))
    try:
        p = tuning.choose(1000, 10, 64, 4, True, 64)
    finally:
        tuning.set_override(None)
    assert p == dict(schedule="balanced", lanes=8, vec=4, threads=64, chunk=0)  # 8 lanes * 4 * tile 2 = 64


def test_cpu_takes_no_config():
    values, ptr = torch.randn(5, 3), torch.tensor([0, 2, 5])
    assert tuning.segment_launch(values, ptr, 5) == tuning.AUTO


def test_shipped_rules_name_known_schedules():
    for entry in tuning.rules()["table"]:
        assert 1 <= len(entry["candidates"]) <= tuning.TRIAL_CANDIDATES
        for params in entry["candidates"] + [entry["geot_params"]]:
            assert params["schedule"] in tuning.SCHEDULES
        assert entry["geot_params"]["schedule"] not in tuning.GRAPH_AWARE


def test_candidates_are_the_nearest_entrys_distinct_launches(table):
    """A reused graph's trial launches: the nearest entry's candidates resolved for the input, the
    selector's own pick first, each configuration once, graph-aware ones with their layouts."""
    ptr = torch.tensor([0, 3, 3, 11, 12, 20, 24])
    stats = _layout.SegmentStats(8, {size: int(ptr.diff().add(size - 1).div(size, rounding_mode="floor")
                                               .clamp(min=1).sum()) for size in _layout.GROUP_SIZES})
    launches = tuning._candidates(ptr, stats, 24, 48, 4, True, 48)
    first = tuning.choose(24, 6, 48, 4, True, 48, 8, graph_aware=True)
    assert launches[0].config == [tuning.SCHEDULES[first["schedule"]], first["lanes"], first["vec"],
                                  first["threads"], first["chunk"]]
    configs = [tuple(launch.config) for launch in launches]
    # at F = 48 (12 vectors) the chunk candidates of at most 32 and 16 lanes both take 16: one launch
    assert len(set(configs)) == len(configs) == 4
    names = [list(tuning.SCHEDULES)[c[0]] for c in configs]
    assert names[0] == "groups" and "balanced" in names and "chunk" in names
    for launch, name in zip(launches, names):
        assert (launch.data is not None) == (name in tuning.GRAPH_AWARE)
        assert launch.trial is None
    groups = launches[0]
    assert torch.equal(groups.data, _layout.neighbor_groups(ptr, groups.config[4], None))


def test_wide_rows_take_the_wide_candidates(table):
    """Rows of WIDE_FEATURES and more (beyond what the table measured) are tried on
    WIDE_CANDIDATES, resolved for the input, in their order, then the nearest entry's own pick
    where it differs; the first is also the pick without a trial. Narrower rows keep the table's
    entry."""
    ptr = torch.tensor([0, 3, 3, 11, 12, 20, 24])
    stats = _layout.SegmentStats(8, {size: int(ptr.diff().add(size - 1).div(size, rounding_mode="floor")
                                               .clamp(min=1).sum()) for size in _layout.GROUP_SIZES})
    wide = tuning.WIDE_FEATURES + 3
    launches = tuning._candidates(ptr, stats, 24, wide, 4, True, wide)
    expected = [tuple(torch.ops.pyg_fast.segment_schedule_resolve(
        tuning.SCHEDULES[p["schedule"]], p["max_lanes"], p["threads"], p["chunk"], 24, 6, wide, 4, wide))
        for p in tuning.WIDE_CANDIDATES]
    own = tuning.choose(24, 6, wide, 4, True, wide, 8, graph_aware=True)
    own = (tuning.SCHEDULES[own["schedule"]], own["lanes"], own["vec"], own["threads"], own["chunk"])
    expected += [own] if own not in expected else []
    assert [tuple(launch.config) for launch in launches] == expected
    assert [list(tuning.SCHEDULES)[c[0]] for c in expected[:3]] == [p["schedule"] for p in tuning.WIDE_CANDIDATES]
    assert expected[0][4] == tuning.WIDE_CANDIDATES[0]["chunk"]
    assert torch.equal(launches[0].data, _layout.neighbor_groups(ptr, expected[0][4], None))
    assert tuning._chosen(ptr, stats, 24, wide, 4, True, wide).config == launches[0].config
    narrow = tuning._candidates(ptr, stats, 24, tuning.WIDE_FEATURES - 1, 4, True, tuning.WIDE_FEATURES - 1)
    first = tuning.choose(24, 6, tuning.WIDE_FEATURES - 1, 4, True, tuning.WIDE_FEATURES - 1, 8, graph_aware=True)
    assert narrow[0].config[0] == tuning.SCHEDULES[first["schedule"]]


def test_candidates_come_from_the_entry_nearest_by_the_weighted_distance(tmp_path):
    """With several entries, the trial's candidates are those of the entry nearest to the input by
    the table's weighted squared distance (computed here in float64), the entry whose first
    candidate the C++ selector resolves."""
    weights = [1.0, 0.5, 2.0, 0.0, 1.0, 0.25]
    entries = [[4, 1, 4, 4, 1, 0], [5, 2, 6, 4, 1, 2], [3, 1, 5, 4, 0, 1]]
    schedules = ["chunk", "row", "edges"]
    rules = {"source": "three entries", "weights": weights,
             "default": dict(schedule="row", max_lanes=32, threads=256, chunk=256),
             "table": [{"features": f, "candidates": [dict(schedule=name, max_lanes=8, threads=128, chunk=256)],
                        "geot_params": dict(schedule=name, max_lanes=8, threads=128, chunk=256)}
                       for f, name in zip(entries, schedules)]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    tuning.load_rules(str(path))
    try:
        seen = set()
        for num_rows, num_segments, num_features, max_segment in [(24, 6, 16, 8), (40, 4, 64, 30), (9, 9, 32, 1),
                                                                  (64, 8, 8, 20)]:
            point = torch.tensor(tuning.features(num_rows, num_segments, num_features, 4, True, max_segment),
                                 dtype=torch.float64)
            distances = ((torch.tensor(entries, dtype=torch.float64) - point) ** 2
                         * torch.tensor(weights, dtype=torch.float64)).sum(1)
            want = int(distances.argmin())
            seen.add(want)
            assert torch.ops.pyg_fast.segment_schedule_entry(num_rows, num_segments, num_features, 4, True,
                                                             max_segment) == want
            ptr = torch.linspace(0, num_rows, num_segments + 1).long()
            launches = tuning._candidates(ptr, _layout.SegmentStats(max_segment, {}), num_rows, num_features, 4,
                                          True, num_features)
            assert [list(tuning.SCHEDULES)[launch.config[0]] for launch in launches] == [schedules[want]]
            assert tuning.choose(num_rows, num_segments, num_features, 4, True, num_features, max_segment,
                                 graph_aware=True)["schedule"] == schedules[want]
        assert len(seen) >= 2  # the inputs reach more than one entry
    finally:
        tuning.load_rules()


def test_candidates_of_an_empty_table_are_the_fallback(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"source": "empty", "weights": [1.0] * 6, "table": [],
                                "default": dict(schedule="chunk", max_lanes=8, threads=128, chunk=256)}))
    tuning.load_rules(str(path))
    try:
        ptr = torch.tensor([0, 3, 3, 11])
        launches = tuning._candidates(ptr, _layout.SegmentStats(8, {}), 11, 16, 4, True, 16)
    finally:
        tuning.load_rules()
    assert len(launches) == 1 and launches[0].config[0] == tuning.SCHEDULES["chunk"]


def test_a_table_without_candidates_is_refused(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"source": "old", "weights": [1.0] * 6,
                                "default": dict(schedule="row", max_lanes=8, threads=128, chunk=256),
                                "table": [{"features": [1.0] * 6,
                                           "params": dict(schedule="row", max_lanes=8, threads=128, chunk=256)}]}))
    try:
        with pytest.raises(ValueError, match="without 'candidates'"):
            tuning.load_rules(str(path))
    finally:
        tuning.load_rules()


class _Event:
    def __init__(self, done, start=0.0, end=0.0):
        self.done, self.start, self.end = done, start, end

    def query(self):
        return self.done

    def elapsed_time(self, other):
        return other.end - self.start


def test_a_trial_settles_on_the_fastest_once_its_timings_are_in():
    """The candidate of least median time over the trial's rounds: one round's outlier (here
    candidate 2's 0.05 ms, and candidate 1's 0.9) does not decide."""
    launches = [tuning.Launch([i], None) for i in range(3)]
    trial = tuning.Trial(launches, torch.device("cpu"))
    assert trial.settled() is None  # not run yet
    trial.held, trial.tries = True, 1
    rounds = [(0.3, 0.1, 0.05)] + [(0.3, 0.1, 0.2)] * (tuning.Trial.ROUNDS - 2) + [(0.3, 0.9, 0.2)]
    trial.events = [(_Event(True, 0.0), _Event(True, end=ms)) for times in rounds for ms in times]
    trial.events[-1] = (_Event(True, 0.0), _Event(False, end=0.2))
    assert trial.settled() is None  # the last candidate's launch has not run yet
    trial.events[-1] = (_Event(True, 0.0), _Event(True, end=0.2))
    assert trial.settled() is launches[1]
    calls = []
    trial.run(calls.append)
    assert calls == []  # a trial runs once


def test_a_trial_timed_at_the_hosts_pace_runs_again_then_keeps_the_rules_pick():
    """Timings taken after the holding sleep ended are dropped: the trial asks for another run
    (``events`` cleared) until ``TRIES`` runs were all unheld, then keeps the first candidate."""
    launches = [tuning.Launch([i], None) for i in range(3)]
    trial = tuning.Trial(launches, torch.device("cpu"))
    for tries in range(1, tuning.Trial.TRIES + 1):
        trial.held, trial.tries = False, tries
        trial.events = [(_Event(True, 0.0), _Event(True, end=ms)) for ms in (0.3, 0.1, 0.2)]
        if tries < tuning.Trial.TRIES:
            assert trial.settled() is None and trial.events is None
    assert trial.settled() is launches[0]


def test_slice_count_rule():
    """Feature slices of one cache line a row only for rows read by many edges that exceed twice
    the innermost cache and half the outermost and whose slices fit in 1.5 x the outermost, four
    slices at least."""
    l2 = (50 * 2 ** 20,)
    dense = dict(num_rows=232_965, num_edges=23_213_838, caches=l2)  # 100 edges a row
    assert tuning.slice_count(num_features=128, element_size=4, **dense) == 4
    assert tuning.slice_count(num_features=256, element_size=4, **dense) == 8
    assert tuning.slice_count(num_features=256, element_size=2, **dense) == 4
    assert tuning.slice_count(num_features=64, element_size=4, **dense) == 1  # 1.2 x L2
    assert tuning.slice_count(num_features=128, element_size=2, **dense) == 1  # two slices
    assert tuning.slice_count(num_features=136, element_size=4, **dense) == 1  # not whole lines
    big = dict(num_rows=500_000, num_edges=25_000_000, caches=l2)  # a 64 MB slice
    assert tuning.slice_count(num_features=128, element_size=4, **big) == 4
    assert tuning.slice_count(num_features=64, element_size=4, **big) == 1  # two slices
    sparse = dict(num_rows=169_343, num_edges=1_166_243, caches=l2)  # 7 edges a row
    assert tuning.slice_count(num_features=256, element_size=4, **sparse) == 1
    # CPU: 64-byte lines, a core's L2 and the last level
    cpu = (2 ** 20, 32 * 2 ** 20)
    assert tuning.slice_count(100_000, 64, 10_000_000, 4, cpu, line_bytes=64, min_edges_per_row=20) == 4
    assert tuning.slice_count(1_000_000, 64, 50_000_000, 4, cpu, line_bytes=64) == 1  # a 64 MB slice
    assert tuning.slice_count(1_000_000, 64, 10_000_000, 4, cpu, line_bytes=64) == 1  # 10 edges a row
    assert tuning.slice_count(10_942, 256, 547_872, 4, cpu, line_bytes=64) == 1  # 11 MB: fits L3
    assert tuning.slice_count(100_000, 128, 2_000_000, 4, cpu, line_bytes=64, min_edges_per_row=20) == 8
    assert tuning.slice_count(100_000, 64, 1_500_000, 4, cpu, line_bytes=64, min_edges_per_row=20) == 1
    assert tuning.feature_slices(torch.randn(100_000, 128), 10_000_000) == 8
    assert tuning.feature_slices(torch.randn(100_000, 128), 10_000_000, heads=2) == 1
