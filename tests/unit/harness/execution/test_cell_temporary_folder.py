"""Each cell's checks get a temporary folder of the cell's own, removed at the cell's end, so that what the stack
leaves there (verl's `ckpt_*.lock` files, torchrun's `torchelastic_*` folders) does not pile up in the machine's;
torch.compile's cache stays one for every cell, beside the environments, and builds no precompiled header."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from harness import checks, matrix
from harness.checks import CheckSpec
from harness.envs.cellenv import CellEnv
from harness.execution import forkclient, runner
from harness.execution.cell import RunOptions, run_cell
from harness.execution.reuse import NOT_SETTINGS, settings
from harness.results.records import Status

RESOURCES = Path(__file__).resolve().parents[3] / "resources" / "checks"
MATRIX = """
[matrix]
name = "tmp"
checks = ["temp-probe"]

[axes]
transformers = ["5.3.0", "5.9.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
"""


@pytest.fixture
def probed(tmp_path, monkeypatch):
    monkeypatch.setitem(checks.CHECKS, "temp-probe", CheckSpec("temp-probe", "temp_probe", "probe"))
    monkeypatch.setenv("HARNESS_EXTRA_CHECKS", "temp-probe=temp_probe")
    monkeypatch.setenv("PYTHONPATH", str(RESOURCES))
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    # The probe imports no torch: the server preloads the check entry alone; its check is still forked from it.
    init = forkclient.CheckProcesses.__init__
    monkeypatch.setattr(forkclient.CheckProcesses, "__init__",
                        lambda self, *args, **kwargs: init(self, *args, **{**kwargs, "preload": (runner.ENTRY,)}))
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("TEMP_PROBE_DIR", str(seen))
    (tmp_path / "tmp.toml").write_text(MATRIX)
    return matrix.load(tmp_path / "tmp.toml"), seen


def _here(cell, log):
    """This interpreter as the cell's environment: no install."""
    return CellEnv(Path(sys.prefix)), "transformers==5.3.0\n"


def _run(m, seen: Path, opts: RunOptions) -> list[dict]:
    for cell in m.cells:
        result = run_cell(cell, m, opts)
        assert [c.status for c in result.checks] == [Status.PASS], result.checks[0].message
    found = [json.loads(p.read_text()) for p in seen.glob("*.json")]
    for p in seen.glob("*.json"):
        p.unlink()
    return found


def test_each_cell_s_checks_write_to_a_folder_of_the_cell_s_own_removed_at_its_end(probed, tmp_path):
    m, seen = probed
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", prepare=_here, reuse=False)
    found = _run(m, seen, opts)
    assert len(found) == 2
    runner_tmp = Path(tempfile.gettempdir())
    folders = [Path(f["tempdir"]) for f in found]
    assert all(f.parent == runner_tmp and f.name.startswith("qh-cell-") for f in folders)  # short, the runner's
    assert folders[0] != folders[1]  # no cell sees another's
    assert not any(f.exists() for f in folders)  # removed with the cell,
    assert not any(Path(f["left"]).exists() for f in found)  # and what the check left there with it
    assert not list(runner_tmp.glob("left-behind-*"))
    # torch.compile's kernels are still shared between cells, beside the environments
    assert {f["inductor"] for f in found} == {str((tmp_path / "envs" / ".torchinductor").resolve())}
    # and built without a precompiled header per environment (155 MB in the temporary folder, for a kernel or two)
    assert {f["headers"] for f in found} == {"0"}
    assert {"TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"} <= NOT_SETTINGS  # no reuse stops
    assert not settings({"TMPDIR": "/x"})


def test_a_temporary_folder_or_compile_setting_the_user_chose_wins(probed, tmp_path, monkeypatch):
    m, seen = probed
    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "1")
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", prepare=_here, reuse=False,
                      extra_env={"TMPDIR": str(mine)})
    found = _run(m, seen, opts)
    assert {f["tempdir"] for f in found} == {str(mine)}
    assert {(f["inductor"], f["headers"]) for f in found} == {(str(tmp_path / "kernels"), "1")}
    assert len(list(mine.glob("left-behind-*"))) == 2  # the user's folder is the user's to clear
