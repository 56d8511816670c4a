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


def test_a_source_is_written_only_when_set_and_read_back():
    cell = _cell()
    assert "source" not in cell.to_dict()  # the writers leave it out: the folder they write to says it
    cell.source = results.Source.CPU_SIDE
    data = json.loads(json.dumps(cell.to_dict()))
    assert data["source"] == "cpu-side" and CellResult.from_dict(data) == cell
    with pytest.raises(ValueError):
        CellResult.from_dict({**data, "source": "elsewhere"})


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


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_result_files_respect_the_umask_like_any_new_file(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        results.write_json_atomic(tmp_path / "cells" / "x.json", _cell().to_dict())
        results.write_text_atomic(tmp_path / "report.md", "# report\n")
    finally:
        os.umask(old)
    assert (tmp_path / "cells" / "x.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == mode


def _xfail(expires: str) -> CheckResult:
    known = {"check": "c", "verdict": None, "when": "", "reason": "r", "link": "https://x.test/1", "expires": expires}
    return CheckResult("c", Status.XFAIL, "broke", known_failure=known, original_status=Status.FAIL,
                       failure_class="test")


def test_a_result_read_after_its_known_failure_expired_is_a_failure_again(tmp_path):
    cell = _cell()
    cell.checks = [_xfail("2000-01-01"), _xfail("2999-01-01")]
    cell.checks[1].check = "d"
    results.write_json_atomic(tmp_path / "x.json", cell.to_dict())
    first, second = results.load_cell(tmp_path / "x.json").checks
    assert first.status is Status.FAIL and first.known_failure["state"] == "expired"
    assert "known failure expired on 2000-01-01" in first.message
    assert second.status is Status.XFAIL  # not expired: still known
    again = results.expire_known_failure(first)  # idempotent: read twice, said once
    assert again.message.count("expired on") == 1


def test_clearing_a_known_failure_gives_back_the_check_own_result():
    result = results.expire_known_failure(_xfail("2000-01-01"))
    cleared = results.clear_known_failure(result)
    assert cleared.status is Status.FAIL and cleared.known_failure is None and cleared.original_status is None
    assert cleared.message == "broke"
