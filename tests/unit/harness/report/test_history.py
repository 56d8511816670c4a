"""What earlier runs said (history.py): last known good carried across runs, and the committed baseline of
verdicts."""
from __future__ import annotations

from pathlib import Path

import pytest
from report_helpers import history_cell

from harness import matrix
from harness.report import history
from harness.report.history import read_baseline
from harness.results.records import Status

ROOT = Path(__file__).resolve().parents[4]


BASELINES = ROOT / "matrices" / "baselines"


def test_last_known_good_is_the_newest_passing_combination_with_its_lock(tmp_path):
    history.update(tmp_path, [history_cell("5.3.0", Status.PASS, tmp=tmp_path),
                              history_cell("5.10.0", Status.PASS, tmp=tmp_path),
                              history_cell("5.23.0", Status.FAIL, tmp=tmp_path)])
    entry = history.load(tmp_path / "history.json")["last_known_good"]["fsdp/text/stack-smoke"]
    assert entry["versions"]["transformers"] == "5.10.0"  # by version, not by string
    assert "transformers==5.10.0" in entry["lock"]


def test_history_is_carried_across_runs(tmp_path):
    history.update(tmp_path, [history_cell("5.10.0", Status.PASS, tmp=tmp_path)])
    # A later run where everything fails, or only older pins pass, keeps the known good entry.
    history.update(tmp_path, [history_cell("5.10.0", Status.FAIL, tmp=tmp_path),
                              history_cell("5.3.0", Status.PASS, tmp=tmp_path)])
    entry = history.load(tmp_path / "history.json")["last_known_good"]["fsdp/text/stack-smoke"]
    assert entry["versions"]["transformers"] == "5.10.0"
    history.update(tmp_path, [history_cell("5.23.0", Status.PASS, "2026-11-23T00:00:00+00:00", tmp=tmp_path)])
    entry = history.load(tmp_path / "history.json")["last_known_good"]["fsdp/text/stack-smoke"]
    assert entry["versions"]["transformers"] == "5.23.0" and entry["date"].startswith("2026-11-23")


def test_a_flaky_pass_is_not_known_good(tmp_path):
    history.update(tmp_path, [history_cell("5.23.0", Status.PASS, flaky=True)])
    assert history.load(tmp_path / "history.json")["last_known_good"] == {}


@pytest.mark.parametrize("content", ["{", '{"history_version": 0, "last_known_good": {}}', "[]"])
def test_a_corrupt_or_old_history_is_refused_clearly(tmp_path, content):
    (tmp_path / "history.json").write_text(content)
    with pytest.raises(ValueError, match="history"):
        history.update(tmp_path, [history_cell("5.3.0", Status.PASS)])


def test_a_history_merged_without_saving_leaves_the_file_as_it_is(tmp_path):
    history.update(tmp_path, [history_cell("5.3.0", Status.PASS, tmp=tmp_path)])
    before = (tmp_path / "history.json").read_text()
    merged = history.update(tmp_path, [history_cell("5.23.0", Status.PASS, tmp=tmp_path)], save=False)
    assert merged["last_known_good"]["fsdp/text/stack-smoke"]["versions"]["transformers"] == "5.23.0"
    assert (tmp_path / "history.json").read_text() == before


def test_the_committed_cpu_smoke_baseline_covers_exactly_the_pull_request_slice():
    """ci.yml's cpu-smoke job runs `nox -t smoke boundary`: the baseline names exactly those cells."""
    expected = read_baseline(BASELINES / "cpu-smoke.json")
    cells = matrix.load(ROOT / "matrices" / "cpu.toml").cells
    slice_ids = {c.id for c in cells if {"smoke", "boundary"} & set(c.tags)}
    assert set(expected) == slice_ids
    statuses = {s.value for s in Status}
    for checks in expected.values():
        assert set(checks) and set(checks.values()) <= statuses
    # Every check the slice runs has an expected status: a check added to the matrix without a baseline
    # entry would turn the pull-request job red ("expected absent, got skip") on every pull request.
    for cell in cells:
        if cell.id in expected:
            assert set(expected[cell.id]) == set(cell.checks), cell.id
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert "nox -t smoke boundary" in workflow and "--baseline matrices/baselines/cpu-smoke.json" in workflow
