"""harness.benchmarks.matrix: the flag probe, the CPU shares, and a selection that matches nothing (the breakdown
of a run: test_phases.py; the bench itself: tests/e2e/test_matrix_bench.py)."""
import json
import subprocess
import sys
from pathlib import Path

from harness.benchmarks import matrix as matrix_bench

ROOT = Path(__file__).resolve().parents[4]


def test_the_flag_probe_asks_the_harness_own_parser():
    assert matrix_bench.harness_accepts(("--jobs", "1"))
    assert not matrix_bench.harness_accepts(("--no-such-flag",))
    assert not matrix_bench.harness_accepts(("--timeout", "soon"))  # a value its type refuses
    passed, lacking = matrix_bench.usable_flags((("--jobs", "1"), ("--no-such-flag",)))
    assert passed == ["--jobs", "1"] and lacking == ["--no-such-flag"]


def test_cpu_shares_count_steal_apart_from_busy_and_idle(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    before = matrix_bench.cpu_times(stat)
    stat.write_text("cpu  160 0 70 860 50 0 0 20 5 0\ncpu0 1 2 3\n")  # +60 user +20 system +60 idle +20 steal
    assert matrix_bench.cpu_shares(before, matrix_bench.cpu_times(stat)) == {
        "cpu_busy_percent": 50.0, "cpu_steal_percent": 12.5}
    assert matrix_bench.cpu_times(tmp_path / "missing") is None
    assert matrix_bench.cpu_shares(None, before) == {}


def test_an_unknown_cell_stops_the_bench_before_it_measures(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.benchmarks", "--only", "matrix", "--out",
                           str(tmp_path / "f.json"), "--matrix-cells", "no-such-cell"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no-such-cell" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "f.json").exists()


def test_defaults_only_leaves_out_the_serial_run_and_says_nothing_of_a_ratio(tmp_path, monkeypatch):
    """--matrix-defaults-only: the defaults cold and their warm rerun, no serial run, and the table reads."""
    ran = []

    def timed_run(label, chosen, ids, flags, out, env_root, work):
        ran.append(label)
        return {"wall_s": 1.0, "exit_status": 0, "load_average_start": [0.1], "load_average_end": [0.1],
                "cells_run": len(ids), "cells_kept": 0, "phases_s": {}, "checks": {}, "report_s": 0.1, "jobs": "",
                "cells_not_installed": 3, "cells_not_installed_here": 1}

    monkeypatch.setattr(matrix_bench, "timed_run", timed_run)
    monkeypatch.setattr(matrix_bench, "warm_uv_cache", lambda cells, scratch: 0.0)
    monkeypatch.setattr(matrix_bench, "second_nox", lambda *args: {"measured": False, "why": "not here"})
    monkeypatch.setattr(matrix_bench, "verdicts", lambda first, second: "identical")
    chosen = matrix_bench.Slice(ROOT / "matrices" / "cpu.toml", tags=("smoke",), serial=False)
    figures = matrix_bench.bench(chosen, tmp_path)
    assert ran == ["new-way", "warm-rerun"]
    assert "old_way" not in figures and "old_to_new_ratio" not in figures
    assert figures["verdicts"] == {"new_vs_warm_rerun": "identical"}
    table = matrix_bench.describe(figures)
    assert "old way" not in table and "new way" in table and "warm rerun" in table
    # the cells not installed, and how many of them only this runner could not: another runner runs those
    assert any(line.startswith("  not installed / this runner's limits") and line.split()[-1] == "3/1"
               for line in table.splitlines())
    assert matrix_bench.run_summary({"new_way": figures["new_way"]})["cells_not_installed_here"] == 1


def test_the_cold_runs_launch_plans_verdicts_are_kept_for_the_docs(tmp_path, monkeypatch):
    """docs/launch-plans.md's table is generated from these (docsgen/plans.py): they come from the cold run's cells."""
    from harness.results.records import CellResult, CheckResult, Status, Verdict

    def timed_run(label, chosen, ids, flags, out, env_root, work):
        if label == "new-way":
            (out / "cells").mkdir(parents=True)
            verdict = Verdict("a-plan", Status.PASS, "would start", metrics={"memory_gib": {"total": 1.5}})
            cell = CellResult("cpu", "m", {"megatron_core": "0.16.1", "transformers": "5.23.0"},
                              checks=[CheckResult("launch-plans", Status.PASS, "", verdicts=[verdict])])
            (out / "cells" / "m.json").write_text(json.dumps(cell.to_dict()), encoding="utf-8")
        return {"wall_s": 1.0, "exit_status": 0}

    monkeypatch.setattr(matrix_bench, "timed_run", timed_run)
    monkeypatch.setattr(matrix_bench, "warm_uv_cache", lambda cells, scratch: 0.0)
    monkeypatch.setattr(matrix_bench, "second_nox", lambda *args: {"measured": False, "why": "not here"})
    monkeypatch.setattr(matrix_bench, "verdicts", lambda first, second: "identical")
    chosen = matrix_bench.Slice(ROOT / "matrices" / "cpu.toml", tags=("smoke",), serial=False)
    figures = matrix_bench.bench(chosen, tmp_path)
    assert figures["launch_plans"]["0.16.1"]["cell"] == "m"
    assert figures["launch_plans"]["0.16.1"]["verdicts"]["a-plan"]["memory_gib"] == 1.5


def _fake_nox(tmp_path, monkeypatch, status=0):
    """A `nox` on PATH that records each call's arguments."""
    calls = tmp_path / "calls"
    nox = tmp_path / "bin" / "nox"
    nox.parent.mkdir()
    nox.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit {status}\n")
    nox.chmod(0o755)
    monkeypatch.setenv("PATH", f"{nox.parent}:/usr/bin:/bin")
    return calls


def test_a_second_nox_runs_the_default_session_on_the_defaults_results_and_times_the_second_call(
        tmp_path, monkeypatch):
    """What a user types the second time, nox's start and the session's set-up included, on the results and the
    environments of the defaults' run: once untimed (the session's environment made), then timed."""
    calls = _fake_nox(tmp_path, monkeypatch)
    whole = matrix_bench.Slice(ROOT / "matrices" / "cpu.toml", serial=False)
    figures = matrix_bench.second_nox(whole, ["a", "b"], tmp_path / "new", tmp_path / "envs", tmp_path)
    assert figures["measured"] and figures["exit_status"] == 0 and figures["wall_s"] >= 0
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == lines[1]
    assert lines[0].split() == ["-f", str(ROOT / "noxfile.py"), "-s", "cpu-fsdp-qwen35", "--", "--out",
                                str(tmp_path / "new"), "--env-root", str(tmp_path / "envs")]
    some = matrix_bench.Slice(ROOT / "matrices" / "cpu.toml", tags=("smoke",), checks=("stack-smoke",))
    matrix_bench.second_nox(some, ["a", "b"], tmp_path / "new", tmp_path / "envs", tmp_path)
    assert calls.read_text().splitlines()[-1].split()[4:7] == ["--", "--cells", "a"]
    assert calls.read_text().splitlines()[-1].split()[-2:] == ["--checks", "stack-smoke"]


def test_a_second_nox_that_fails_keeps_its_log_and_another_matrix_is_not_measured(tmp_path, monkeypatch):
    _fake_nox(tmp_path, monkeypatch, status=3)
    whole = matrix_bench.Slice(ROOT / "matrices" / "cpu.toml", serial=False)
    figures = matrix_bench.second_nox(whole, [], tmp_path / "new", tmp_path / "envs", tmp_path)
    assert figures["exit_status"] == 3 and "log_tail" in figures
    other = matrix_bench.second_nox(matrix_bench.Slice(tmp_path / "tiny.toml"), [], tmp_path, tmp_path, tmp_path)
    assert other == {"measured": False, "why": "`nox` runs cpu.toml, not tiny.toml"}
    table = matrix_bench.describe({"matrix": "m", "cells": [], "machine": {"cores": 2, "cpu": "c", "memory_gib": 1},
                                   "harness_lacks": [], "verdicts": {}, "second_nox": other})
    assert "a second `nox`: not measured (`nox` runs cpu.toml, not tiny.toml)" in table
