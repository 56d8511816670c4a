"""The matrix bench's parts (harness.benchmarks.matrix and phases): the flag probe, the breakdown of a run, the
CPU shares, and a selection that matches nothing (the bench itself: tests/e2e/test_matrix_bench.py)."""
import subprocess
import sys
from pathlib import Path

from harness.benchmarks import matrix as matrix_bench
from harness.benchmarks import phases

ROOT = Path(__file__).resolve().parents[4]


def test_the_flag_probe_asks_the_harness_own_parser():
    assert matrix_bench.harness_accepts(("--jobs", "1"))
    assert not matrix_bench.harness_accepts(("--no-such-flag",))
    assert not matrix_bench.harness_accepts(("--timeout", "soon"))  # a value its type refuses
    passed, lacking = matrix_bench.usable_flags((("--jobs", "1"), ("--no-such-flag",)))
    assert passed == ["--jobs", "1"] and lacking == ["--no-such-flag"]


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
    assert (warm["cells_run"], warm["cells_kept"], warm["phases_s"]) == (0, 1, {})
    assert warm["checks"]["a"]["kept"] == 1 and warm["checks"]["a"]["seconds"] == 0.0

    rerun_b = {"c": cell("t2", 3.0, [ran, {**reused, "reused_from": None, "duration": 3.0}])}
    partial = phases.breakdown(first, rerun_b)  # a kept from the earlier run, b run again; no phases recorded
    assert partial["checks"]["a"]["kept"] == 1 and partial["checks"]["b"]["ran"] == 1
    assert partial["phases_s"] == {"other": 0.0}


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
