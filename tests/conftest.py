import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = Path(__file__).resolve().parent / "resources"
sys.path.insert(0, str(ROOT))
# the shared test helpers (plan_helpers, qwen35_helpers, report_helpers), importable from any test folder
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))

from harness.execution.cell import FORK_SAFETY  # noqa: E402

# A test that runs a check in this process stands where a check process stands: with the settings the harness
# gives check processes so that they can fork ranks (pyarrow's allocator thread kept off), set before any import.
for _name, _value in FORK_SAFETY.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session", autouse=True)
def session_temporary_folder(tmp_path_factory) -> Path:
    """What the code under test leaves in the temporary folder (a check's default work folder, torchrun's log
    folders, verl's lock files), made inside this session's own folder, removed at the session's end, not left in the
    machine's. pytest's tmp_path folders stay where pytest keeps them (asked for first). The folder is short and beside
    the machine's: Unix socket paths made in it (vLLM's, Ray's) must stay under 108 bytes."""
    tmp_path_factory.getbasetemp()
    folder = tempfile.mkdtemp(prefix="qh-")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", folder)
        patch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        yield Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def resources() -> Path:
    return RESOURCES


@pytest.fixture
def project_env(monkeypatch):
    """Environment for a child `python -m harness`: the project and test resources importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(RESOURCES / "checks"), env.get("PYTHONPATH", "")])
    env["HARNESS_EXTRA_CHECKS"] = "misbehave=misbehaving,misbehave-too=misbehaving"
    return env
