"""The `run` verb's steps (harness/execution/command.py): a bad --jobs value stops the run in one line."""
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
