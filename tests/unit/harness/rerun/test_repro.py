"""`harness repro` (harness/rerun/repro.py): the environment is rebuilt on the cell's own interpreter, and without
it the command exits 3 in one line, building nothing."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_repro_rebuilds_on_the_cells_interpreter_and_exits_3_without_it(tmp_path):
    from harness.results.records import CellResult, write_json_atomic

    cell = CellResult("py", "fsdp-text-py3.95", {"backend": "fsdp", "model": "text", "device": "cpu",
                                                 "python": "3.95"}, lock="cells/fsdp-text-py3.95/lock.txt")
    write_json_atomic(tmp_path / "out" / "cells" / "fsdp-text-py3.95.json", cell.to_dict())
    (tmp_path / "out" / cell.lock).parent.mkdir(parents=True)
    (tmp_path / "out" / cell.lock).write_text("packaging==24.2\n")
    done = subprocess.run([sys.executable, "-m", "harness", "repro", cell.cell_id, "--check", "stack-smoke", "--dir",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs")], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "Python 3.95 is not on this runner" in done.stderr
    assert not (tmp_path / "envs").exists()
