"""harness/rerun/bisect.py: the cells a bisection builds keep their template's interpreter; verl-tests as a verdict
(a verl row as the template, a test file as the verdict, a newly failing test of a failing file counted as a change).
The first release where a verdict changes, end to end: tests/e2e/test_bisect.py."""
from __future__ import annotations

from pathlib import Path

import pytest
from matrix_helpers import INCLUDE_312, VALID, load_text
from packaging.version import Version

from harness.errors import InputError
from harness.matrix import Cell, Matrix
from harness.rerun import bisect as bs
from harness.results.records import CellResult, CheckResult, Status, Verdict

PROTOCOL = "tests/test_protocol_v2_on_cpu.py"


def _cell(cell_id: str, tags=(), **axes) -> Cell:
    return Cell("cpu", cell_id, {"backend": "fsdp", "model": "text", "device": "cpu", "torch": "2.13.0", **axes},
                tuple(tags), ("stack-smoke", "verl-tests"))


MATRIX = Matrix(Path("matrices/cpu.toml"), "cpu", "", ("stack-smoke",), None, "", None, None, [
    _cell("plain", ("smoke",), transformers="5.9.0", tensordict="0.10.0"),
    _cell("with-verl", transformers="5.9.0", tensordict="0.10.0", verl="0.9.1"),
])


def test_the_template_of_a_verl_tests_bisection_is_a_verl_row():
    assert bs.template_cell(MATRIX, "tensordict", None, "verl-tests").id == "with-verl"
    assert bs.template_cell(MATRIX, "tensordict", None, "stack-smoke").id == "plain"  # a smoke cell first
    with pytest.raises(InputError, match="--cell-template plain: the cell has no verl axis, which verl-tests needs"):
        bs.template_cell(MATRIX, "tensordict", "plain", "verl-tests")
    without = Matrix(MATRIX.path, "cpu", "", (), None, "", None, None, MATRIX.cells[:1])
    with pytest.raises(InputError, match="no cell has the tensordict and verl axes"):
        bs.template_cell(without, "tensordict", None, "verl-tests")


def test_a_verl_test_file_is_a_verdict_bisect_accepts():
    bs.check_verdict("verl-tests", PROTOCOL)
    with pytest.raises(InputError, match="verl-tests gives no verdict 'protocol'"):
        bs.check_verdict("verl-tests", "protocol")


def _result(*failing: str) -> CellResult:
    cases = [{"case": c, "first assertion line": "assert x"} for c in failing]
    verdict = Verdict(PROTOCOL, Status.FAIL if failing else Status.PASS, "", {"mismatches": cases})
    return CellResult("cpu", "x", {}, checks=[CheckResult("verl-tests", verdict.status, verdicts=[verdict])])


def test_a_file_failing_one_more_test_is_a_different_verdict():
    assert bs.verdict_text(_result(), "verl-tests", PROTOCOL) == "pass"
    assert bs.verdict_text(_result("test_own"), "verl-tests", PROTOCOL) == "fail (test_own)"
    assert bs.verdict_text(_result("test_own", "test_chunk_concat"), "verl-tests", PROTOCOL) == \
        "fail (test_chunk_concat, test_own)"


class _Index:
    url = "https://index.example/simple"

    def versions(self, distribution):
        return [Version(v) for v in ("0.10.0", "0.11.0", "0.12.0", "0.13.0", "0.15.3")]

    def has(self, distribution, version):
        return Version(version) in self.versions(distribution)


def test_bisect_finds_the_tensordict_release_that_breaks_a_verl_test_in_verl_rows():
    ran = []

    def run_one(cell: Cell) -> CellResult:
        ran.append(cell)
        return _result("test_own", *(["test_chunk_concat"] if Version(cell.axes["tensordict"]) >= Version("0.12.0")
                                     else []))

    found = bs.run_bisect(MATRIX, "tensordict", "0.10.0", "0.15.3", "verl-tests", PROTOCOL, None, run_one, _Index())
    assert found.first_changed == Version("0.12.0") and found.last_same == Version("0.11.0")
    assert all(cell.axes["verl"] == "0.9.1" for cell in ran)


def test_bisect_cells_keep_the_templates_interpreter(tmp_path):
    from packaging.version import Version

    from harness.rerun.bisect import cell_for

    template = load_text(tmp_path, VALID + INCLUDE_312).cells[1]
    probe = cell_for(template, "transformers", Version("5.9.0"))
    assert probe.id == "megatron-text-tf5.9.0-torch2.13.0-mcore0.19.2-py3.12" and probe.python == "3.12"
