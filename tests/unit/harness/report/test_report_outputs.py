"""The at-a-glance verdicts (support.py), support.json and report.junit.xml: derived from the data, stable,
escaped."""
from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET

from harness.report import build_report, render, support_json, to_junit
from harness.report.support import KINDS, SUPPORT_SCHEMA, SUPPORT_SCHEMA_VERSION, row_verdicts
from harness.report.synthetic import HOSTILE_MESSAGES, hostile_cells, synthetic_cells
from harness.results.records import CellResult, CheckResult, Status, Verdict


def cell(tf: str, *checks: CheckResult, backend: str = "fsdp") -> CellResult:
    axes = {"device": "cpu", "torch": "2.13.0", "transformers": tf, "backend": backend, "model": "text"}
    return CellResult("cpu", f"{backend}-text-tf{tf}", axes, checks=list(checks), finished="2026-11-23T10:00:00Z")


def check(name: str, status: Status, message: str = "", verdicts=(), **kw) -> CheckResult:
    return CheckResult(name, status, message, verdicts=list(verdicts), **kw)


# Made-up check and verdict names: the kind comes from statuses and sub-verdicts, never from names.
CELLS = [
    cell("5.1.0", check("probe", Status.XFAIL, "no model", original_status=Status.FAIL,
                        known_failure={"reason": "not there yet", "link": "https://x.example/1",
                                       "expires": "2099-01-01"}),
         check("other", Status.SKIP, "n/a")),
    cell("5.3.0", check("probe", Status.PASS, "ok", [Verdict("stock", Status.AFFECTED, "bug"),
                                                     Verdict("ours", Status.PASS, "fixed")]),
         check("other", Status.PASS, "ok")),
    cell("5.9.0", check("probe", Status.PASS, "ok"), check("other", Status.AFFECTED, "upstream leak")),
    cell("5.10.0", check("probe", Status.PASS, "ok"), check("other", Status.PASS, "ok")),
    cell("5.11.0", check("probe", Status.PASS, "ok"), check("other", Status.TIMEOUT, "no result in 600 s")),
    cell("5.12.0", check("probe", Status.SKIP, "n/a"), check("other", Status.SKIP, "n/a")),
]


def test_each_combination_gets_one_kind_and_a_reason_from_its_data():
    report = build_report(CELLS)
    got = [(v.kind, v.reason) for v in row_verdicts(report)]
    assert got == [
        # The reason quotes what the run measured (its message), then links the declared known failure.
        ("known", "fsdp · text · probe: known failure: no model (https://x.example/1)"),
        ("patched", "fsdp · text · probe: upstream bug reproduced (stock); ours pass"),
        ("patched", "fsdp · text · other: upstream leak"),
        ("works", "2 checks pass"),
        ("broken", "fsdp · text · other: timeout: no result in 600 s"),
        ("skipped", "all 2 checks skipped"),
    ]


def test_support_json_is_stable_and_documented():
    report = build_report(CELLS)
    data = support_json(report)
    assert list(data) == ["schema", "schema_version", "title", "constant_axes", "varying_axes", "columns", "counts",
                          "combinations", "standing_findings"]
    assert (data["schema"], data["schema_version"]) == (SUPPORT_SCHEMA, SUPPORT_SCHEMA_VERSION) == (
        "qwen35-support-summary", 3)
    assert data["constant_axes"] == {"device": "cpu", "torch": "2.13.0"}
    assert data["varying_axes"] == ["transformers"] and list(data["counts"]) == list(KINDS)
    assert data["combinations"][1] == {
        "axes": {"transformers": "5.3.0"}, "verdict": "patched", "label": "works with the trainer's patches",
        "reason": "fsdp · text · probe: upstream bug reproduced (stock); ours pass", "cells": ["fsdp-text-tf5.3.0"],
        "checks": {"fsdp/text/probe": "pass", "fsdp/text/other": "pass"}}
    assert data["columns"][1] == {"key": "fsdp/text/probe", "backend": "fsdp", "model": "text", "check": "probe"}
    # The same results in any order give the same bytes.
    shuffled = CELLS.copy()
    random.Random(3).shuffle(shuffled)
    assert render(build_report(shuffled), "support") == render(report, "support")
    text = render(build_report(synthetic_cells(300, seed=2)), "support")
    assert text == render(build_report(list(reversed(synthetic_cells(300, seed=2)))), "support")
    assert sum(json.loads(text)["counts"].values()) == len(json.loads(text)["combinations"])


def test_junit_has_a_suite_per_cell_and_a_case_per_check():
    root = ET.fromstring(to_junit(build_report(CELLS)))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == sorted(c.cell_id for c in CELLS)
    assert int(root.get("tests")) == 12 and int(root.get("failures")) == 1 and int(root.get("skipped")) == 4
    by_name = {(s.get("name"), c.get("name")): c for s in suites for c in s.findall("testcase")}
    timeout = by_name[("fsdp-text-tf5.11.0", "other")].find("failure")
    assert timeout.get("type") == "timeout" and timeout.get("message") == "no result in 600 s"
    assert "repro: python -m harness repro fsdp-text-tf5.11.0 --check other" in timeout.text
    xfail = by_name[("fsdp-text-tf5.1.0", "probe")].find("skipped")
    assert xfail.get("message").startswith("known failure: not there yet (https://x.example/1")
    affected = by_name[("fsdp-text-tf5.3.0", "probe")]
    assert affected.find("failure") is None and affected.find("skipped") is None
    assert "stock: affected: bug" in affected.find("system-out").text


def test_junit_escapes_hostile_text():
    root = ET.fromstring(to_junit(build_report(hostile_cells())))  # parses: nothing broke out of its place
    messages = [f.get("message") for f in root.iter("failure")]
    assert len(messages) == len(HOSTILE_MESSAGES) and all(messages)
    assert "</table><script>alert(1)</script>" in messages  # shown as text, exactly
    assert len(root.findall("testsuite")) == len(HOSTILE_MESSAGES)
