"""Passing ranges (ranges.py): per package, the versions in which every check passed, a version that fails
everywhere left out first."""
from __future__ import annotations

from report_helpers import make_cell, ok

from harness.report.build import build_report
from harness.report.ranges import pass_ranges
from harness.results.records import Status


def test_pass_ranges_are_contiguous_runs_over_sorted_tested_versions():
    outcome = {"5.2.0": Status.PASS, "5.3.0": Status.SKIP, "5.5.3": Status.TIMEOUT, "5.8.1": Status.XFAIL,
               "5.9.0": Status.AFFECTED, "5.10.0": Status.PASS, "5.23.0": Status.PASS}
    cells = [make_cell(f"c{v}", [ok(status=s)], transformers=v) for v, s in outcome.items()]
    # A second cell with 5.23.0 that fails makes 5.23.0 failing: every cell with the version counts.
    cells.append(make_cell("c5.23.0-megatron", [ok(status=Status.FAIL)], transformers="5.23.0", backend="megatron"))
    (tf,) = [r for r in pass_ranges(cells) if r.axis == "transformers"]
    assert tf.segments == [["5.2.0", "5.3.0"], ["5.9.0", "5.10.0"]]
    text = tf.text()
    assert "5.2.0 – 5.3.0 (all 2 tested versions in between pass)" in text
    assert "5.9.0 – 5.10.0 (all 2 tested versions in between pass)" in text
    # 5.23.0's two cells share one combination of versions, which fails; 5.8.1's check failed, as declared.
    assert "failing: 5.5.3 (0 of 1 combinations pass), 5.8.1 (0 of 1 combinations pass), 5.23.0 (0 of 1 " \
           "combinations pass)" in text


def test_a_version_failing_everywhere_does_not_make_the_other_packages_look_broken():
    # transformers 5.1.0 has no Qwen3.5: every cell with it fails. torch and tensordict are fine with
    # every other release, so they pass, with the count of their combinations that do.
    cells = [make_cell(f"c{tf}-{td}", [ok(status=Status.FAIL if tf == "5.1.0" else Status.PASS)],
                       transformers=tf, tensordict=td) for tf in ("5.1.0", "5.2.0", "5.23.0")
             for td in ("0.10.0", "0.15.3")]
    ranges = {r.axis: r for r in pass_ranges(cells)}
    assert ranges["transformers"].passing == ["5.2.0", "5.23.0"]
    assert "failing: 5.1.0 (0 of 2 combinations pass)" in ranges["transformers"].text()
    assert ranges["tensordict"].passing == ["0.10.0", "0.15.3"]
    assert ranges["tensordict"].combinations["0.10.0"] == (2, 3)
    assert "0.10.0 (2 of 3 combinations pass)" in ranges["tensordict"].text()
    # A tensordict release that also fails with good transformers releases is the one left out.
    cells += [make_cell(f"c{tf}-0.16.0", [ok(status=Status.FAIL)], transformers=tf, tensordict="0.16.0")
              for tf in ("5.2.0", "5.23.0")]
    ranges = {r.axis: r for r in pass_ranges(cells)}
    assert ranges["transformers"].passing == ["5.2.0", "5.23.0"]
    assert ranges["tensordict"].passing == ["0.10.0", "0.15.3"] and "failing: 0.16.0" in ranges["tensordict"].text()


def test_one_failing_combination_leaves_no_package_passing_wrongly():
    cells = [make_cell("only", [ok(status=Status.FAIL)], transformers="5.23.0", tensordict="0.15.3")]
    assert all(r.passing == [] for r in pass_ranges(cells))


def test_pass_range_single_run_and_cell_without_checks_counts_as_failing():
    cells = [make_cell(f"c{v}", [ok()], transformers=v) for v in ("5.9.0", "5.10.0", "5.2.0")]
    (tf,) = [r for r in pass_ranges(cells) if r.axis == "transformers"]
    assert tf.text() == "5.2.0 – 5.10.0 (all 3 tested versions in between pass)"
    cells.append(make_cell("empty", [], transformers="5.11.0"))
    report = build_report(cells)
    (tf,) = [r for r in report.ranges if r.axis == "transformers"]
    assert tf.tested[-1] == "5.11.0" and "5.11.0" not in tf.passing
    assert any("empty" in p and "no check results" in p for p in report.problems)


def test_no_range_lists_a_version_in_which_a_check_failed_even_as_a_declared_known_failure():
    """transformers 5.1.0 has no Qwen3.5: its stack-smoke fails, declared as a known failure (xfail)."""
    cells = [make_cell("old", [ok(status=Status.XFAIL)], transformers="5.1.0"),
             make_cell("new", [ok()], transformers="5.23.0")]
    (tf,) = [r for r in pass_ranges(cells) if r.axis == "transformers"]
    assert tf.passing == ["5.23.0"] and "failing: 5.1.0 (0 of 1 combinations pass)" in tf.text()
