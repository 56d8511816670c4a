"""The `run` verb's steps (harness/execution/command.py): a bad --jobs value stops the run in one line; the index is
asked only about the cells that will run."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_jobs_value_is_one_line_naming_it(tmp_path, value):
    argv = [sys.executable, "-m", "harness", "run", "tests/resources/matrices/small.toml", "--jobs", value,
            "--no-index-check", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: --jobs: expected a whole number of at least 1 or auto, got {value!r}"


def test_the_index_is_asked_only_about_the_cells_that_will_run(monkeypatch, tmp_path):
    """A warm rerun builds nothing: a cell whose results are complete is kept, and its releases are not asked
    about (the index check was most of a warm rerun's time); a cell missing a check, or --redo, is asked about."""
    from types import SimpleNamespace

    from harness import matrix
    from harness.execution import command
    from harness.files import write_json_atomic
    from harness.results.records import CellResult, CheckResult, Status, cell_path

    m = matrix.load(ROOT / "tests" / "resources" / "matrices" / "small.toml")
    done, partial, *rest = m.cells
    for cell, checks in ((done, m.checks), (partial, m.checks[:1])):
        result = CellResult(m.name, cell.id, dict(cell.axes), list(cell.tags),
                            checks=[CheckResult(name, Status.PASS) for name in checks])
        write_json_atomic(cell_path(tmp_path, cell.id), result.to_dict())
    asked = []
    monkeypatch.setattr(command.index, "check_cells", lambda cells, locate: asked.append([c.id for c in cells]))

    def check(redo=False, checks=None):
        asked.clear()
        args = SimpleNamespace(no_index_check=False, checks=checks, redo=redo)
        command.check_index(SimpleNamespace(args=args, cells=m.cells, out=tmp_path, matrix=m))
        return asked[0] if asked else []

    assert check() == [partial.id, *(c.id for c in rest)]
    assert check(redo=True) == [c.id for c in m.cells]  # --redo runs them all: all are asked about
    assert check(checks=[m.checks[0]]) == [c.id for c in rest]  # only the first check wanted: both are complete
    for cell in rest + [partial]:
        write_json_atomic(cell_path(tmp_path, cell.id), CellResult(
            m.name, cell.id, dict(cell.axes), list(cell.tags),
            checks=[CheckResult(name, Status.PASS) for name in m.checks]).to_dict())
    assert check() == []  # nothing to build: the index is not asked at all
