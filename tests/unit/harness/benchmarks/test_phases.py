"""harness.benchmarks.phases: the breakdown of a run counts only what the run did (kept and reused results cost
nothing)."""
from harness.benchmarks import phases


def cell(started: str, duration: float, checks: list[dict], cell_phases: dict | None = None) -> dict:
    return {"cell_id": "c", "started": started, "duration": duration, "checks": checks,
            **({"phases": cell_phases} if cell_phases is not None else {})}


def test_breakdown_counts_only_what_the_run_did():
    ran = {"check": "a", "duration": 2.0, "status": "pass"}
    reused = {"check": "b", "duration": 9.0, "status": "pass", "reused_from": "other-cell"}
    first = {"c": cell("t1", 5.0, [ran, reused], {"environment": 1.0, "capture": 0.5, "imports": 0.25})}
    done = phases.breakdown({}, first)
    assert done["cells_run"] == 1 and done["checks_reused"] == 1
    # capture and imports overlap: other = 5 - 1 (environment) - 0.5 (the longer of the two) - 2 (check a)
    assert done["phases_s"] == {"environment": 1.0, "capture": 0.5, "imports": 0.25, "other": 1.5}
    assert done["checks"]["a"] == {"seconds": 2.0, "ran": 1, "reused": 0, "kept": 0}
    assert done["checks"]["b"]["seconds"] == 0.0  # a reused result cost nothing in this run

    warm = phases.breakdown(first, first)  # the file kept its start time: reused whole
    assert (warm["cells_run"], warm["cells_kept"], warm["phases_s"], warm["cells_s"]) == (0, 1, {}, {})
    assert warm["checks"]["a"]["kept"] == 1 and warm["checks"]["a"]["seconds"] == 0.0

    rerun_b = {"c": cell("t2", 3.0, [ran, {**reused, "reused_from": None, "duration": 3.0}])}
    partial = phases.breakdown(first, rerun_b)  # a kept from the earlier run, b run again; no phases recorded
    assert partial["checks"]["a"]["kept"] == 1 and partial["checks"]["b"]["ran"] == 1
    assert partial["phases_s"] == {"other": 0.0}


def test_cells_whose_environment_could_not_be_installed_are_counted_apart():
    refused = {"check": "a", "duration": 0.0, "status": "error", "failure_class": "install-runner"}
    conflict = {"check": "b", "duration": 0.0, "status": "error", "failure_class": "install-conflict"}
    ran = {"check": "a", "duration": 2.0, "status": "pass"}
    broken = {"check": "b", "duration": 1.0, "status": "error", "failure_class": "crash"}
    done = phases.breakdown({}, {"x": cell("t1", 1.0, [refused, conflict]), "y": cell("t1", 3.0, [ran, broken]),
                                 "z": cell("t1", 0.5, [refused])})
    assert done["cells_run"] == 3 and done["cells_not_installed"] == 2 and done["not_installed"] == ["x", "z"]
    assert list(done["cells_s"].items()) == [("y", 3.0), ("x", 1.0), ("z", 0.5)]  # each cell run, longest first


def test_an_environment_installed_ahead_of_its_cell_is_summed_but_not_taken_from_the_cells_time():
    ran = {"check": "a", "duration": 2.0, "status": "pass"}
    done = phases.breakdown({}, {"c": cell("t1", 4.0, [ran], {"environment": 0.5, "environment_ahead": 3.0,
                                                                "capture": 0.5, "imports": 1.0})})
    # other = 4 - 0.5 (environment, waited for in the cell) - 1 (imports) - 2 (check a); the 3 s ahead are apart
    assert done["phases_s"] == {"environment": 0.5, "environment_ahead": 3.0, "capture": 0.5, "imports": 1.0,
                                "other": 0.5}
