"""The report benchmark (harness.benchmarks.suite.bench_report) times every format, in a process of its own; every group
the bench writes carries its date, machine and revision."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.benchmarks import suite
from harness.report.pipeline import DEFAULT_FORMATS


def test_the_report_benchmark_times_and_sizes_every_format_without_torch(monkeypatch):
    figures = suite.bench_report(30, runs=2)
    for fmt in ("build", *DEFAULT_FORMATS):
        assert figures[f"{fmt}_cpu_s"] >= 0
    assert all(figures[f"{fmt}_bytes"] > 100 for fmt in DEFAULT_FORMATS)
    assert figures["cells"] == 30 and figures["render_cpu_s"] >= figures["build_cpu_s"]
    # The fastest of the runs is reported, every run's total beside it.
    assert figures["runs"] == 2 and figures["render_cpu_s"] == min(figures["render_cpu_s_per_run"])
    # The child is a fresh interpreter: what this process imported does not weigh on it.
    monkeypatch.setattr(suite.sys, "executable", sys.executable + "-missing")
    with pytest.raises(FileNotFoundError):
        suite.bench_report(30)


def test_each_group_the_bench_writes_carries_its_revision_and_the_earlier_groups_keep_theirs(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_REVISION", "fake0123rev")  # what envinfo.project_revision reports
    monkeypatch.setattr(suite, "bench_report", lambda cells: {"cells": cells, "render_cpu_s": 1.0})

    run = suite.subprocess.run

    def grpo_bench(argv, **kwargs):  # the GRPO bench's subprocess: its figures, as benchmark() writes them
        if "harness.benchmarks.grpo" not in argv:
            return run(argv, **kwargs)
        out = Path(argv[argv.index("--out") + 1])
        out.write_text(json.dumps({"date": "2026-01-05", "harness_revision": "fake0123rev",
                                   "summary": {"speedup_to_threshold": 3.5}}))

    monkeypatch.setattr(suite.subprocess, "run", grpo_bench)
    out = tmp_path / "figures.json"
    earlier = {"checks_per_cell": {"total_s": 40.0},
               "grpo_vs_trl_repeats": [{"harness_revision": "fake0123rev", "summary": {"speedup_to_threshold": 3.1}},
                                       {"harness_revision": "older", "summary": {"speedup_to_threshold": 2.0}}]}
    out.write_text(json.dumps(earlier))
    assert suite.main(["--only", "report", "--grpo", "--cells", "3", "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    for key in ("report", "grpo_vs_trl"):
        assert figures[key]["harness_revision"] == "fake0123rev", key
        assert figures[key]["machine"]["cores"] and figures[key]["date"]
    assert figures["grpo_vs_trl"]["date"] == "2026-01-05"  # the benchmark's own date wins
    assert figures["checks_per_cell"] == {"total_s": 40.0}  # not measured now: nothing invented for it
    assert "date" not in figures and "machine" not in figures  # no file-wide stamp to mistake for a group's
    # This run joins the runs of its revision; a run on another revision is not compared with it.
    runs = figures["grpo_vs_trl_repeats"]
    assert [run["summary"]["speedup_to_threshold"] for run in runs] == [3.1, 3.5]
    assert runs[-1]["harness_revision"] == "fake0123rev" and runs[-1]["machine"]["cores"]


def _matrix_group(wall_s: float, revision: str, cells: int = 3, **extra) -> dict:
    return {"date": "2026-01-02", "harness_revision": revision, "matrix": "cpu.toml",
            "machine": {"cpu": "Some CPU", "cores": 2}, "cells": [f"cell-{i}" for i in range(cells)],
            "new_way": {"wall_s": wall_s, "cells_run": cells, "cpu_busy_percent": 95.0}, **extra}


def test_every_matrix_run_joins_the_kept_runs_and_a_file_from_before_the_list_starts_it_with_its_figure(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_REVISION", "fake0123rev")
    benched = []

    def matrix_run(chosen, work):  # the whole matrix's bench, as run_slice returns it
        benched.append(chosen)
        return _matrix_group(700.0 + len(benched), "fake0123rev", whole_matrix=True)

    monkeypatch.setattr(suite.matrix_bench, "run_slice", matrix_run)
    out = tmp_path / "figures.json"
    out.write_text(json.dumps({"matrix": _matrix_group(480.0, "older")}))  # written before matrix_runs existed
    assert suite.main(["--only", "matrix", "--matrix-defaults-only", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["matrix_runs"]
    assert [(run["wall_s"], run["harness_revision"]) for run in runs] == [(480.0, "older"), (701.0, "fake0123rev")]
    assert runs[-1]["machine"]["calibration"]  # the run's own machine, calibrated
    assert runs[0]["whole_matrix"] is None and runs[-1]["whole_matrix"] is True and runs[-1]["cells"] == 3
    assert suite.main(["--only", "matrix", "--matrix-defaults-only", "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert [run["wall_s"] for run in figures["matrix_runs"]] == [480.0, 701.0, 702.0]  # on any revision, in order
    assert figures["matrix"]["new_way"]["wall_s"] == 702.0


def test_the_kept_matrix_runs_are_the_newest_twenty_and_a_group_without_a_timed_run_adds_none():
    from harness.benchmarks import matrix as matrix_bench

    earlier = [matrix_bench.run_summary(_matrix_group(float(i), "r")) for i in range(25)]
    kept = matrix_bench.runs_history(earlier, None, _matrix_group(99.0, "new"))
    assert len(kept) == matrix_bench.HISTORY_LIMIT and kept[-1]["wall_s"] == 99.0 and kept[0]["wall_s"] == 6.0
    assert matrix_bench.runs_history([], None, {"new_way": {"exit_status": 3}}) == []  # nothing timed
    # an empty list is the list: it is not started again from the group the run replaces
    assert matrix_bench.runs_history([], _matrix_group(1.0, "old"), _matrix_group(2.0, "new"))[0]["wall_s"] == 2.0
