"""A verl row names what is verl's code (the checks whose CheckSpec.verl is set) and what is this project's ("no
verl counterpart"), says which pins were outside verl's declared range, and gives its pins box the install line
the row used; a row without verl is never described as verl's."""
from __future__ import annotations

import dataclasses

import pytest
from report_helpers import ok

from harness import checks
from harness.report import verl_rows
from harness.report.build import build_report
from harness.report.html.first_screen import groups
from harness.report.html.page import to_html
from harness.report.markdown import to_markdown
from harness.report.pins import pins_boxes
from harness.report.safe_text import escape_html
from harness.results.records import CellResult, Status

OUTSIDE = [{"distribution": "transformers", "version": "5.23.0", "crossed": "verl", "crossed_version": "0.9.1",
            "declared": "!=5.6.0,<5.11,>=5.5.3", "text": "made up by the result file"}]


def verl_cell(tf: str, td: str, status: Status = Status.PASS, extra: str = "", outside=(), requirements=None,
              verl: str = "0.9.1") -> CellResult:
    axes = {"device": "cpu", "backend": "fsdp", "model": "text", "verl": verl, "torch": "2.13.0",
            "transformers": tf, "tensordict": td, **({"verl_extra": extra} if extra else {})}
    name = f"verl[{extra}]" if extra else "verl"
    environment = {"requirements": requirements or [f"{name}=={verl}", "torch==2.13.0", f"transformers=={tf}",
                                                    f"tensordict=={td}"],
                   "outside_range": list(outside)}
    return CellResult("cpu", f"fsdp-text-verl{verl}-tf{tf}-td{td}", axes,
                      checks=[ok("stack-smoke", status), ok("offload-regression", status)],
                      environment=environment, finished="2026-11-28T10:00:00Z")


def plain_cell(tf: str) -> CellResult:
    axes = {"device": "cpu", "backend": "fsdp", "model": "text", "torch": "2.13.0", "transformers": tf,
            "tensordict": "0.15.3"}
    return CellResult("cpu", f"fsdp-text-tf{tf}", axes, checks=[ok("stack-smoke"), ok("offload-regression")],
                      finished="2026-11-28T10:00:00Z")


@pytest.fixture
def offload_has_a_verl_counterpart(monkeypatch):
    spec = dataclasses.replace(checks.CHECKS["offload-regression"], verl="apply_fsdp2, fsdp2_load_full_state_dict")
    monkeypatch.setitem(checks.CHECKS, "offload-regression", spec)


def test_a_verl_row_names_verls_code_and_this_projects(offload_has_a_verl_counterpart):
    report = build_report([verl_cell("5.9.0", "0.10.0"), plain_cell("5.9.0")])
    verl_row = next(r for r in report.rows if r.axes[report.axes.index("verl")])
    assert verl_row.environment["verl"] == ("verl's code: offload-regression (verl: apply_fsdp2, "
                                            "fsdp2_load_full_state_dict); this project's code: stack-smoke "
                                            "(no verl counterpart)")
    plain = next(r for r in report.rows if not r.axes[report.axes.index("verl")])
    assert "verl" not in plain.environment  # the project's rows are never described as verl's
    assert escape_html("verl's code: offload-regression") in to_html(report)
    assert "no verl counterpart" in to_markdown(report)


def test_without_a_counterpart_every_check_is_the_projects():
    assert verl_rows.code_split(["stack-smoke", "bridge-parity", "not-a-check"]) == (
        "this project's code: stack-smoke, bridge-parity, not-a-check (no verl counterpart)")


def test_the_verl_box_comes_first_with_the_install_line_the_row_used():
    cells = [verl_cell("5.9.0", "0.10.0", extra="cpu",
                       requirements=["verl[cpu]==0.9.1", "torch==2.11.0", "transformers==5.9.0", "tensordict==0.10.0"]),
             plain_cell("5.23.0")]
    cells[0].axes["torch"] = "2.11.0"
    boxes = pins_boxes(build_report(cells))
    assert [b.title for b in boxes] == ["verl 0.9.1 [cpu]: FSDP", "FSDP"]
    assert boxes[0].command == "uv pip install 'verl[cpu]==0.9.1' torch==2.11.0 transformers==5.9.0 tensordict==0.10.0"
    # the verl row is no candidate for the project's FSDP box
    assert boxes[1].tested == 1 and dict(boxes[1].pins)["transformers"] == "5.23.0"


def test_a_stack_inside_verls_range_is_preferred_and_one_outside_it_carries_its_override():
    inside, outside = verl_cell("5.9.0", "0.10.0"), verl_cell("5.23.0", "0.10.0", outside=OUTSIDE)
    box, = pins_boxes(build_report([inside, outside]))
    assert dict(box.pins)["transformers"] == "5.9.0" and not box.overrides  # the newer stack needs an override
    inside.checks[0].status = Status.FAIL
    report = build_report([inside, outside])
    box, = pins_boxes(report)
    assert box.command.splitlines() == [
        "printf '%s\\n' transformers==5.23.0 > overrides.txt",
        "uv pip install --override overrides.txt verl==0.9.1 torch==2.13.0 transformers==5.23.0 tensordict==0.10.0"]
    said = "outside verl's declared range: transformers 5.23.0 (verl 0.9.1 declares transformers!=5.6.0,<5.11,>=5.5.3)"
    assert box.outside == said
    assert escape_html(said) + ": installed through uv's --override" in to_html(report)
    assert "made up by the result file" not in to_html(report)  # the text is rebuilt from the record's fields


def test_a_hostile_record_reaches_no_command():
    cell = verl_cell("5.9.0", "0.10.0", requirements=["verl==0.9.1", "x; rm -rf / #", "$(reboot)"],
                     outside=[{"distribution": "transformers", "version": "5.9.0; touch pwned"}, "junk"])
    box, = pins_boxes(build_report([cell]))
    assert box.command == "uv pip install verl==0.9.1"
    assert verl_rows.outside_text([{"distribution": 1}, None]) == ""


def test_releases_order_newest_first_and_a_git_revision_last():
    git = "git+https://github.com/verl-project/verl@" + "1" * 40
    cells = [verl_cell("5.9.0", "0.10.0", verl=v, requirements=["verl==x"]) for v in ("0.8.0", git, "0.9.1")]
    assert [b.title for b in pins_boxes(build_report(cells))] == [
        "verl 0.9.1: FSDP", "verl 0.8.0: FSDP", "verl from git 111111111111: FSDP"]


def test_the_grid_groups_verl_rows_by_release_first_and_the_others_as_before():
    cells = [verl_cell("5.9.0", "0.10.0"), verl_cell("5.23.0", "0.15.3", outside=OUTSIDE), plain_cell("5.9.0"),
             plain_cell("5.23.0")]
    headings = [g.heading.split(" · ")[0] for g in groups(build_report(cells))]
    assert headings == ["verl 0.9.1", "transformers 5.9.0", "transformers 5.23.0"]
