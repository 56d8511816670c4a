"""Every group the bench writes carries the date, the machine and the project revision that produced it."""
from __future__ import annotations

import datetime as dt
import subprocess

from harness.benchmarks import provenance


def test_the_stamp_names_today_this_machine_and_the_revision(monkeypatch):
    monkeypatch.setenv("HARNESS_REVISION", "fake0123rev")
    stamp = provenance.stamp()
    assert stamp["harness_revision"] == "fake0123rev" and stamp["date"] == dt.date.today().isoformat()
    assert stamp["machine"]["cores"] and stamp["machine"]["memory_gib"] > 0


def test_a_group_keeps_what_it_says_itself_and_gets_the_rest():
    run = {"date": "2026-01-02", "machine": {"cores": 2}, "harness_revision": "abc"}
    assert provenance.stamped({"seconds": 1.0}, run) == {**run, "seconds": 1.0}
    own = {"date": "2026-01-01", "harness_revision": None, "seconds": 1.0}  # a null is no revision of its own
    assert provenance.stamped(own, run) == {**run, "date": "2026-01-01", "seconds": 1.0}
    assert provenance.stamped([{"x": 1}, 2], run) == [{**run, "x": 1}, 2]


def test_the_figures_file_the_bench_rewrites_makes_no_revision_dirty(tmp_path, monkeypatch):
    """Two runs on one commit: the first rewrote bench/figures.json, and the second is still on that revision;
    any other tracked change is '+dirty'."""
    monkeypatch.delenv("HARNESS_REVISION", raising=False)

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "figures.json").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    clean = provenance.revision(tmp_path)
    assert clean and not clean.endswith("+dirty")

    (tmp_path / "bench" / "figures.json").write_text('{"grpo_vs_trl": {}}\n')
    assert provenance.revision(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance.revision(tmp_path) == clean + "+dirty"


def test_the_calibration_times_one_thread_of_python_and_torch_and_leaves_the_thread_count_as_it_was():
    torch = __import__("pytest").importorskip("torch")
    threads = torch.get_num_threads()
    parts = provenance.calibration()
    assert set(parts) == {"python_s", "torch_s"} and all(v > 0 for v in parts.values())
    assert torch.get_num_threads() == threads


def test_a_calibration_without_torch_leaves_its_part_null(monkeypatch):
    def no_torch():
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(provenance, "_torch_work", no_torch)
    parts = provenance.calibration()
    assert parts["torch_s"] is None and parts["python_s"] > 0


def test_a_group_that_names_its_own_machine_gets_the_runs_calibration_and_keeps_its_own():
    run = {"date": "2026-01-02", "machine": {"cores": 2, "calibration": {"python_s": 0.3, "torch_s": 0.2}}}
    group = {"machine": {"cpu": "Some CPU", "cores": 2}, "wall_s": 1.0}
    assert provenance.stamped(group, run)["machine"] == {"cpu": "Some CPU", "cores": 2,
                                                         "calibration": {"python_s": 0.3, "torch_s": 0.2}}
    own = {"machine": {"cores": 2, "calibration": {"python_s": 9.0}}}
    assert provenance.stamped(own, run)["machine"]["calibration"] == {"python_s": 9.0}
    assert provenance.stamped({"machine": "NVIDIA H200"}, run)["machine"] == "NVIDIA H200"  # a device's name
