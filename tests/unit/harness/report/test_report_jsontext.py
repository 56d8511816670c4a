"""report.json and support.json through orjson: the same data json.dumps wrote, as pure ASCII when it can be,
and a lone surrogate in a result file (json.loads makes one from "\\ud800") no longer stops the report."""
from __future__ import annotations

import json

import pytest

from harness.report import jsontext, write_report
from harness.report.jsontext import json_text
from harness.results.records import CellResult, CheckResult, Status, Verdict

DATA = {"ascii": "plain", "quote": 'a "q" \\ b\n', "bmp": "5.2.0 \u2013 5.9.0\u2026 \u00b7",
        "astral": "\u2705 \U0001f4a5", "numbers": [0, -1, 2.5, 0.001, True, None], "nested": {"k": ["\u4e2d\u6587"]}}


def test_json_text_is_what_json_dumps_writes_without_spaces():
    text = json_text(DATA)
    assert text.isascii() and text.endswith("}\n") and text.count("\n") == 1
    # \u escapes, surrogate pairs beyond the BMP (floats may be spelt otherwise: 1e-7 for json's 1e-07)
    assert text == json.dumps(DATA, separators=(",", ":")) + "\n"
    assert json.loads(json_text({"tiny": 1e-7, "big": 1e300})) == {"tiny": 1e-7, "big": 1e300}


def test_many_non_ascii_characters_stay_the_same_data(monkeypatch):
    monkeypatch.setattr(jsontext, "MANY_NON_ASCII", 10)
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
