"""Result records round-trip, and result files are written atomically."""
import json
import os

import pytest

from harness.results import records as results
from harness.results.records import CellResult, CheckResult, Status, Verdict


def _cell():
    check = CheckResult("offload-regression", Status.AFFECTED, "upstream bug reproduced", 1.5, {"max_err": 0.0},
                        [Verdict("upstream", Status.AFFECTED, "index on cpu", emulated=True),
                         Verdict("trainer", Status.PASS)], log="cells/x/logs/offload-regression.log")
    return CellResult("cpu", "x", {"transformers": "5.3.0"}, ["cpu"], [check], {"python": "3.11"}, "cells/x/lock.txt")


def test_cell_round_trip():
    cell = _cell()
    again = CellResult.from_dict(json.loads(json.dumps(cell.to_dict())))
    assert again == cell
    assert again.to_dict()["schema_version"] == results.SCHEMA_VERSION


def test_failure_statuses():
    assert {s for s in Status if s.is_failure} == {Status.FAIL, Status.TIMEOUT, Status.CRASH, Status.ERROR}


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "cells" / "x.json"
    results.write_json_atomic(path, _cell().to_dict())
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        results.write_json_atomic(path, {"half": "written"})
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temporary file left behind


@pytest.mark.parametrize("content", ["", "{", '{"schema_version": 99, "matrix": "m"}', "[]", '{"schema_version": 1}'])
def test_corrupt_or_foreign_files_are_refused_with_the_file_name(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="bad.json"):
        results.load_cell(path)
