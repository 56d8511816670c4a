"""report.json and support.json (json_files.py): everything in the table, a stable support summary, and JSON text
that is pure ASCII and the same data as json.dumps writes."""
from __future__ import annotations

import json
import random

import pytest
from report_helpers import CELLS

from harness.report import json_files
from harness.report.build import build_report
from harness.report.json_files import (
    REPORT_SCHEMA_VERSION,
    SUPPORT_SCHEMA,
    SUPPORT_SCHEMA_VERSION,
    json_text,
    support_json,
    to_json,
)
from harness.report.pipeline import render, write_report
from harness.report.row_verdicts import KINDS
from harness.report.synthetic import synthetic_cells
from harness.results.records import CellResult, CheckResult, Status, Verdict


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


def test_support_json_is_stable_and_documented():
    report = build_report(CELLS)
    data = support_json(report)
    assert list(data) == ["schema", "schema_version", "title", "constant_axes", "varying_axes", "columns", "counts",
                          "combinations", "standing_findings"]
    assert (data["schema"], data["schema_version"]) == (SUPPORT_SCHEMA, SUPPORT_SCHEMA_VERSION) == (
        "qwen35-support-summary", 4)
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


DATA = {"ascii": "plain", "quote": 'a "q" \\ b\n', "bmp": "5.2.0 \u2013 5.9.0\u2026 \u00b7",
        "astral": "\u2705 \U0001f4a5", "numbers": [0, -1, 2.5, 0.001, True, None], "nested": {"k": ["\u4e2d\u6587"]}}


def test_json_text_is_what_json_dumps_writes_without_spaces():
    text = json_text(DATA)
    assert text.isascii() and text.endswith("}\n") and text.count("\n") == 1
    # \u escapes, surrogate pairs beyond the BMP (floats may be spelt otherwise: 1e-7 for json's 1e-07)
    assert text == json.dumps(DATA, separators=(",", ":")) + "\n"
    assert json.loads(json_text({"tiny": 1e-7, "big": 1e300})) == {"tiny": 1e-7, "big": 1e300}


def test_many_non_ascii_characters_stay_the_same_data(monkeypatch):
    monkeypatch.setattr(json_files, "MANY_NON_ASCII", 10)
    text = json_text(DATA)
    assert not text.isascii() and json.loads(text) == DATA


@pytest.mark.parametrize("where", ["message", "log", "verdict name"])
def test_a_lone_surrogate_in_a_result_file_is_dropped_and_every_format_is_written(tmp_path, where):
    lone = "\ud800"
    check = CheckResult("stack-smoke", Status.FAIL, f"bad {lone} text" if where == "message" else "bad",
                        log=f"cells/c1/{lone}.log" if where == "log" else "cells/c1/x.log")
    if where == "verdict name":
        check.verdicts = [Verdict(f"v{lone}", Status.FAIL, "m")]
    cell = CellResult("m", "c1", {"transformers": "5.3.0", "backend": "fsdp", "model": "text"}, checks=[check])
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "c1.json").write_text(json.dumps(cell.to_dict()))  # "\ud800" escaped, as a file holds it
    paths = write_report(tmp_path)
    assert len(paths) == 5
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert lone not in text and "\\ud800" not in text.lower() and "&#55296;" not in text
    entry = json.loads((tmp_path / "report.json").read_text())["rows"][0]["entries"][0]
    if where == "log":
        assert entry["log"] is None  # not a safe link: shown as text only
