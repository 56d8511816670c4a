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
    # only z failed on this runner's limits alone: a runner that can install it runs its checks
    assert done["cells_not_installed_here"] == 1 and done["not_installed_here"] == ["z"]
    assert list(done["cells_s"].items()) == [("y", 3.0), ("x", 1.0), ("z", 0.5)]  # each cell run, longest first


def test_an_environment_installed_ahead_of_its_cell_is_summed_but_not_taken_from_the_cells_time():
    ran = {"check": "a", "duration": 2.0, "status": "pass"}
    done = phases.breakdown({}, {"c": cell("t1", 4.0, [ran], {"environment": 0.5, "environment_ahead": 3.0,
                                                                "capture": 0.5, "imports": 1.0})})
    # other = 4 - 0.5 (environment, waited for in the cell) - 1 (imports) - 2 (check a); the 3 s ahead are apart
    assert done["phases_s"] == {"environment": 0.5, "environment_ahead": 3.0, "capture": 0.5, "imports": 1.0,
                                "other": 0.5}


def megatron_cell(started: str, duration: float, checks: list[dict], bridge: str | None = None,
                  cell_phases: dict | None = None) -> dict:
    axes = {"backend": "megatron", **({"megatron_bridge": bridge} if bridge else {})}
    return {**cell(started, duration, checks, cell_phases), "axes": axes}


def test_each_megatron_cell_run_keeps_its_parts_and_the_bridge_cell_is_held_to_the_longest_other():
    ran = {"check": "bridge-parity", "duration": 20.0, "status": "pass"}
    reused = {"check": "launch-plans", "duration": 2.0, "status": "pass", "reused_from": "other-cell"}
    small = {"check": "bridge-parity", "duration": 4.0, "status": "pass"}
    refused = {"check": "bridge-parity", "duration": 0.0, "status": "error", "failure_class": "install-runner"}
    after = {"bridge": megatron_cell("t1", 40.0, [ran, reused], "0.6.2", {"imports": 15.0, "capture": 1.0}),
             "core": megatron_cell("t1", 30.0, [small], cell_phases={"imports": 6.0, "environment_ahead": 9.0}),
             "not-installed": megatron_cell("t1", 50.0, [refused]),
             "fsdp": {**cell("t1", 90.0, [small]), "axes": {"backend": "fsdp"}}}
    done = phases.breakdown({}, after)
    assert list(done["megatron_cells"]) == ["bridge", "core"]  # longest first; FSDP and uninstalled cells left out
    assert done["megatron_cells"]["bridge"] == {
        "seconds": 40.0, "megatron_bridge": "0.6.2", "phases": {"imports": 15.0, "capture": 1.0, "other": 5.0},
        "checks": {"bridge-parity": 20.0}, "reused": ["launch-plans"]}
    compared = done["megatron_bridge_cell"]
    assert compared == {"cell": "bridge", "seconds": 40.0, "longest_other": "core", "longest_other_s": 30.0,
                        "met": False}
    assert compared == phases.megatron_bridge_against_others(done["megatron_cells"])
    after["core"]["duration"] = 40.0  # as long as the bridge cell: the target holds
    assert phases.megatron_bridge_against_others(phases.breakdown({}, after)["megatron_cells"])["met"] is True
    assert phases.megatron_bridge_against_others({"core": done["megatron_cells"]["core"]}) is None  # no pair
    assert phases.megatron_bridge_against_others(None) is None


def test_a_kept_run_carries_its_bridge_cell_against_the_longest_other():
    from harness.benchmarks import matrix

    cells = {"b": {"seconds": 9.0, "megatron_bridge": "0.6.2"}, "o": {"seconds": 7.0, "megatron_bridge": None}}
    summary = matrix.run_summary({"new_way": {"wall_s": 100.0, "megatron_cells": cells,
                                              "megatron_bridge_cell": phases.megatron_bridge_against_others(cells)}})
    assert summary["megatron_bridge_cell"] == {"cell": "b", "seconds": 9.0, "longest_other": "o",
                                               "longest_other_s": 7.0, "met": False}
    assert matrix.run_summary({"new_way": {"wall_s": 100.0}})["megatron_bridge_cell"] is None
