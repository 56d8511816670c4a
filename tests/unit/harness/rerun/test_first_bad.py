"""A planted regression in a local index's releases: watch finds the new releases, their cells run (code from
each release's wheel, executed), the pass-to-fail turn is bisected to the first bad release, and the report
shows it at its top. No network."""
import datetime as dt
import os
import subprocess
import sys
import zipfile

import pytest
from fake_index import FakeIndex

from harness import matrix
from harness.matrix.index import PackageIndex
from harness.matrix.metadata import MetadataSource
from harness.matrix.newest import Resolver
from harness.matrix.watch import watch
from harness.report.pipeline import write_report
from harness.rerun.first_bad import first_bad, record, turns
from harness.results.records import CellResult, CheckResult, Status, cell_path, write_json_atomic

DAY = dt.date(2026, 11, 27)
GOOD = "def double(x):\n    return x * 2\n"
BAD = "def double(x):\n    return x * 2 + (x > 1)\n"  # the planted regression
MATRIX = """
[matrix]
name = "fb"
checks = ["stack-smoke"]

[axes]
transformers = ["5.21.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
"""


@pytest.fixture
def fake(tmp_path):
    index = FakeIndex(tmp_path / "index")
    for minor in (20, 21):
        index.add("transformers", f"5.{minor}.0", modules={"fakeqwen": GOOD})
    return index


def runner(fake, tmp_path, out, ran):
    """Run a cell: the wheel of its transformers installed (unpacked) and its code called in a fresh interpreter."""
    def run_one(cell):
        version = cell.axes["transformers"]
        target = tmp_path / "envs" / version
        with zipfile.ZipFile(next(fake.files.glob(f"transformers-{version}-*.whl"))) as wheel:
            wheel.extractall(target)
        probe = subprocess.run([sys.executable, "-c", "import fakeqwen; print(fakeqwen.double(2))"],
                               capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(target)})
        got = probe.stdout.strip()
        status = Status.PASS if got == "4" else Status.FAIL
        result = CellResult("fb", cell.id, dict(cell.axes),
                            checks=[CheckResult("stack-smoke", status, f"double(2) = {got}, expected 4")])
        write_json_atomic(cell_path(out, cell.id), result.to_dict())
        ran.append(version)
        return result
    return run_one


def test_a_planted_regression_is_bisected_to_its_first_bad_release(fake, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(MATRIX)
    m = matrix.load(path)
    base, new, ran = tmp_path / "base", tmp_path / "new", []
    for cell in m.cells:  # last night's run of the matrix: 5.21.0 passes
        runner(fake, tmp_path, base, ran)(cell)
    for minor in range(22, 30):  # eight releases land; 5.25.0 brings the regression
        fake.add("transformers", f"5.{minor}.0", modules={"fakeqwen": GOOD if minor < 25 else BAD})
    index = PackageIndex(fake.url, find_links=[])
    releases = watch(m, Resolver(index, MetadataSource(index, tmp_path / "cache", DAY), DAY, {}))
    assert [r.version for r in releases] == [f"5.{minor}.0" for minor in range(22, 30)]
    listing = {"releases": [r.to_dict() for r in releases]}
    new_run = runner(fake, tmp_path, new, ran)
    for release in releases:  # the nightly runs the new releases' cells
        for crossing in release.cells:
            new_run(matrix.Cell(m.name, crossing.id, crossing.axes, (), m.checks))
    found = turns(listing, base, new)
    assert [(t.good, t.bad, t.check, t.status) for t in found] == [("5.21.0", "5.29.0", "stack-smoke", "fail")]
    ran.clear()
    finding = first_bad(found[0], m, runner(fake, tmp_path, new / "bisect", ran), index)
    assert (finding["first_bad"], finding["last_good"]) == ("5.25.0", "5.24.0")
    assert len(ran) <= 2 + 3  # the ends, then log2 of the nine releases between them
    assert finding["evidence"]["5.25.0"] == "fail" and finding["evidence"]["5.24.0"] == "pass"
    record(new, [finding], DAY)
    write_report(new, formats=["md", "html"])
    md = (new / "report.md").read_text()
    top = md.split("**", 1)[0]  # before the table's counts
    assert "## First bad release" in top and "transformers 5.25.0 is the first bad release for stack-smoke" in top
    assert "double(2) = 5, expected 4" in top
    assert "First bad release</h2>" in (new / "report.html").read_text().split("<table", 1)[0]


def test_no_turn_where_the_origin_already_failed_or_the_new_release_passes(fake, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(MATRIX.replace('"5.21.0"', '"5.20.0"'))
    m = matrix.load(path)
    fake.add("transformers", "5.20.0", modules={"fakeqwen": BAD})  # the origin fails already
    fake.add("transformers", "5.22.0", modules={"fakeqwen": BAD})
    base, new, ran = tmp_path / "base", tmp_path / "new", []
    runner(fake, tmp_path, base, ran)(m.cells[0])
    index = PackageIndex(fake.url, find_links=[])
    releases = watch(m, Resolver(index, MetadataSource(index, tmp_path / "cache", DAY), DAY, {}))
    for release in releases:
        for crossing in release.cells:
            runner(fake, tmp_path, new, ran)(matrix.Cell(m.name, crossing.id, crossing.axes, (), m.checks))
    assert turns({"releases": [r.to_dict() for r in releases]}, base, new) == []


def _night(directory, version, status):
    resolved = [{"axis": "transformers", "symbol": "newest", "version": version, "date": "2026-11-27",
                 "index": "file:///i", "text": f"{version}, newest on 2026-11-27"}]
    result = CellResult("fb", "fsdp-text-tfnewest", {"backend": "fsdp", "transformers": version},
                        checks=[CheckResult("stack-smoke", status, "")], environment={"resolved": resolved})
    write_json_atomic(cell_path(directory, result.cell_id), result.to_dict())


def test_a_newest_cell_that_moved_to_a_failing_release_is_a_turn(tmp_path):
    from harness.rerun.first_bad import turns_of_newest

    _night(tmp_path / "previous", "5.24.0", Status.PASS)
    _night(tmp_path / "tonight", "5.25.0", Status.AFFECTED)
    _night(tmp_path / "same", "5.24.0", Status.FAIL)  # the same release failing: no release to bisect
    found = turns_of_newest(tmp_path / "previous", tmp_path / "tonight")
    assert [(t.distribution, t.good, t.bad, t.origin, t.status) for t in found] == [
        ("transformers", "5.24.0", "5.25.0", "fsdp-text-tfnewest", "affected")]
    assert turns_of_newest(tmp_path / "previous", tmp_path / "same") == []
    write_report(tmp_path / "tonight", formats=["md"])  # the row says which release `newest` was, and when
    md = (tmp_path / "tonight" / "report.md").read_text()
    assert "- **resolved**: transformers 5.25.0, newest on 2026-11-27" in md


@pytest.mark.parametrize("status", [Status.FAIL, Status.AFFECTED, Status.CRASH, Status.ERROR, Status.TIMEOUT])
def test_every_turn_from_pass_to_not_pass_is_bisected(tmp_path, status):
    """A new release whose check crashes, errors or times out is a turn as much as one where it fails."""
    from harness.rerun.first_bad import turns_of_newest

    _night(tmp_path / "previous", "5.24.0", Status.PASS)
    _night(tmp_path / "tonight", "5.25.0", status)
    assert [(t.good, t.bad, t.status) for t in turns_of_newest(tmp_path / "previous", tmp_path / "tonight")] == [
        ("5.24.0", "5.25.0", status.value)]
    listing = {"releases": [{"axis": "transformers", "distribution": "transformers", "named": "5.24.0",
                             "version": "5.25.0", "cells": [{"origin": "fsdp-text-tfnewest",
                                                             "id": "fsdp-text-tfnewest"}]}]}
    assert [t.status for t in turns(listing, tmp_path / "previous", tmp_path / "tonight")] == [status.value]


def test_a_check_that_did_not_run_is_no_turn(tmp_path):
    from harness.rerun.first_bad import turns_of_newest

    _night(tmp_path / "previous", "5.24.0", Status.PASS)
    _night(tmp_path / "tonight", "5.25.0", Status.SKIP)
    assert turns_of_newest(tmp_path / "previous", tmp_path / "tonight") == []
