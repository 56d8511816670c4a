"""`python -m trainers.fsdp` and `python -m trainers.megatron` in fresh interpreters: bad input gives the same one
line and exit status as the trainers' `main` (tests/unit/trainers/test_launch.py)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def trainer(module: str, *args):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)


@pytest.mark.parametrize("module", ["trainers.fsdp", "trainers.megatron"])
def test_python_m_gives_the_same_line_and_status(module):
    done = trainer(module, "--lr", "nan")
    assert done.returncode == 2 and done.stderr == "error: invalid trainer options: lr=nan (expected a finite number)\n"


