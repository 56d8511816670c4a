"""report.md (markdown.py): entries with their links, sub-verdicts, emulation footnote and known failures, and the
size cap that cuts the details first, then rows."""
from __future__ import annotations

import re
from html import unescape

from report_helpers import make_cell, ok

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.markdown import to_markdown
from harness.report.synthetic import synthetic_cells
from harness.results.records import CheckResult, Status, Verdict


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


def test_an_accelerator_row_names_its_gpu_driver_torch_and_date_in_markdown_too():
    gpu = make_cell("g", [ok()], device="cuda")
    gpu.environment.update(origin="offline run on the box's own Python 3.12.3", devices=["NVIDIA H200"],
                           driver="580.159.04", torch="2.11.0+cu130")
    cpu = make_cell("c", [ok()], transformers="5.23.0")
    cpu.environment.update(devices=[], driver="580.159.04", torch="2.13.0+cpu")
    md = to_markdown(build_report([gpu, cpu]))
    for line in ("- **origin**: offline run on the box's own Python 3.12.3", "- **devices**: NVIDIA H200",
                 "- **driver**: 580.159.04", "- **torch**: 2.11.0+cu130", "- **date**: 2026-11-22"):
        assert md.count(line) == 1, line  # the GPU row's, and not the CPU row's
    assert "2.13.0+cpu" not in md
