"""Last known good carried across runs, and new/fixed/still-failing against a previous run."""
import json

import pytest

from harness.report import history
from harness.results import compare
from harness.results.records import CellResult, CheckResult, Status


def cell(tf, status, finished="2026-11-22T10:00:00+00:00", flaky=False, lock="torch==2.13.0\n", tmp=None):
    axes = {"backend": "fsdp", "model": "text", "device": "cpu", "transformers": tf, "torch": "2.13.0"}
    lock_rel = None
    if tmp is not None:
        lock_rel = f"cells/{tf}/lock.txt"
        (tmp / lock_rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / lock_rel).write_text(lock + f"transformers=={tf}\n")
    return CellResult("cpu", f"fsdp-text-tf{tf}", axes, checks=[CheckResult("stack-smoke", status, flaky=flaky)],
                      lock=lock_rel, finished=finished)


def test_last_known_good_is_the_newest_passing_combination_with_its_lock(tmp_path):
    history.update(tmp_path, [cell("5.3.0", Status.PASS, tmp=tmp_path), cell("5.10.0", Status.PASS, tmp=tmp_path),
                              cell("5.23.0", Status.FAIL, tmp=tmp_path)])
    entry = history.load(tmp_path / "history.json")["last_known_good"]["fsdp/text/stack-smoke"]
    assert entry["versions"]["transformers"] == "5.10.0"  # by version, not by string
    assert "transformers==5.10.0" in entry["lock"]


def test_history_is_carried_across_runs(tmp_path):
    history.update(tmp_path, [cell("5.10.0", Status.PASS, tmp=tmp_path)])
    # A later run where everything fails, or only older pins pass, keeps the known good entry.
    history.update(tmp_path, [cell("5.10.0", Status.FAIL, tmp=tmp_path), cell("5.3.0", Status.PASS, tmp=tmp_path)])
    entry = history.load(tmp_path / "history.json")["last_known_good"]["fsdp/text/stack-smoke"]
    assert entry["versions"]["transformers"] == "5.10.0"
    history.update(tmp_path, [cell("5.23.0", Status.PASS, "2026-11-23T00:00:00+00:00", tmp=tmp_path)])
    entry = history.load(tmp_path / "history.json")["last_known_good"]["fsdp/text/stack-smoke"]
    assert entry["versions"]["transformers"] == "5.23.0" and entry["date"].startswith("2026-11-23")


def test_a_flaky_pass_is_not_known_good(tmp_path):
    history.update(tmp_path, [cell("5.23.0", Status.PASS, flaky=True)])
    assert history.load(tmp_path / "history.json")["last_known_good"] == {}


@pytest.mark.parametrize("content", ["{", '{"history_version": 0, "last_known_good": {}}', "[]"])
def test_a_corrupt_or_old_history_is_refused_clearly(tmp_path, content):
    (tmp_path / "history.json").write_text(content)
    with pytest.raises(ValueError, match="history"):
        history.update(tmp_path, [cell("5.3.0", Status.PASS)])


def test_compare_classifies_and_puts_new_failures_first():
    previous = [cell("5.3.0", Status.PASS), cell("5.5.3", Status.FAIL), cell("5.8.1", Status.FAIL),
                cell("5.9.0", Status.PASS)]
    current = [cell("5.3.0", Status.FAIL), cell("5.5.3", Status.FAIL), cell("5.8.1", Status.PASS),
               cell("5.9.0", Status.PASS), cell("5.23.0", Status.CRASH), cell("5.10.0", Status.PASS, flaky=True)]
    changes = compare.compare(current, previous)
    kinds = {(c.cell_id, c.kind) for c in changes}
    assert ("fsdp-text-tf5.3.0", compare.NEW) in kinds
    assert ("fsdp-text-tf5.23.0", compare.NEW) in kinds  # a new entry that fails is a new failure
    assert ("fsdp-text-tf5.10.0", compare.NEW) in kinds  # flaky is never a plain pass
    assert ("fsdp-text-tf5.5.3", compare.STILL) in kinds
    assert ("fsdp-text-tf5.8.1", compare.FIXED) in kinds
    assert ("fsdp-text-tf5.9.0", compare.UNCHANGED) in kinds
    assert [c.kind for c in changes][:3] == [compare.NEW] * 3
    assert json.dumps([c.__dict__ for c in changes])
