"""The matrix bench end to end (harness.benchmarks.matrix, `nox -s bench -- --only matrix`): a tiny matrix with
a fake check run the old way, the new way and warm, its breakdown, and a verdict drift it must report."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.benchmarks import matrix as matrix_bench

ROOT = Path(__file__).resolve().parents[2]
TINY = """\
[matrix]
name = "tiny"
checks = ["drift"]

[axes]
backend = ["fsdp", "megatron"]
model = ["text"]
device = ["cpu"]
"""


@pytest.mark.slow
def test_bench_runs_three_ways_and_reports_a_verdict_drift(tmp_path, project_env):
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY)
    figures_file = tmp_path / "figures.json"
    figures_file.write_text(json.dumps({"report": {"render_s": 1.0}}))  # an earlier bench's figures
    env = {**project_env, "HARNESS_EXTRA_CHECKS": "drift=drift", "DRIFT_COUNTER": str(tmp_path / "calls"),
           "DRIFT_FAIL_FROM": "2"}  # the old way's two calls pass, the new way's two fail
    done = subprocess.run([sys.executable, "-m", "harness.benchmarks", "--only", "matrix", "--out", str(figures_file),
                           "--matrix-file", str(tiny), "--matrix-work", str(tmp_path / "work")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(figures_file.read_text())
    assert figures["report"] == {"render_s": 1.0}  # kept: this bench did not measure it
    bench = figures["matrix"]
    assert bench["cells"] == ["fsdp-text", "megatron-text"] and bench["matrix"] == "tiny.toml"
    old, new, warm = bench["old_way"], bench["new_way"], bench["warm_rerun"]
    assert [r["exit_status"] for r in (old, new, warm)] == [0, 0, 0]
    lacking = [f for f in ("--no-reuse", "--no-fork", "--jobs auto") if not matrix_bench.harness_accepts(tuple(
        f.split()))]
    assert bench["harness_lacks"] == lacking  # named, and never passed
    assert not {f.split()[0] for f in lacking if f != "--jobs auto"} & set(old["flags"] + new["flags"])
    assert (old["cells_run"], new["cells_run"], warm["cells_run"], warm["cells_kept"]) == (2, 2, 0, 2)
    assert old["checks"]["drift"]["ran"] == 2 and warm["checks"]["drift"]["kept"] == 2
    assert all(len(r["load_average_start"]) == 3 and r["report_s"] > 0 for r in (old, new, warm))
    assert all(0 <= r["cpu_busy_percent"] <= 100 and 0 <= r["cpu_steal_percent"] <= 100 for r in (old, new, warm))
    assert bench["old_to_new_ratio"] == round(old["wall_s"] / new["wall_s"], 2)
    assert bench["verdicts"]["old_vs_new"] == [
        "fsdp-text drift: pass -> fail", "fsdp-text drift reading: pass -> fail",
        "megatron-text drift: pass -> fail", "megatron-text drift reading: pass -> fail"]
    assert bench["verdicts"]["new_vs_warm_rerun"] == "identical"
    assert "verdicts old vs new: 4 differ" in done.stderr and "old / new:" in done.stderr
    assert ("harness lacks: " + ", ".join(lacking)) in done.stderr if lacking else "harness lacks" not in done.stderr
    assert str(tmp_path) not in json.dumps(bench)  # figures are committed: no path of the machine
