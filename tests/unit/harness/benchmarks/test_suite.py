"""The report benchmark (harness.benchmarks.suite.bench_report) times every format, in a process of its own."""
from __future__ import annotations

import sys

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
