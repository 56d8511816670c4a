import os
import sys
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
