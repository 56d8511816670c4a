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
