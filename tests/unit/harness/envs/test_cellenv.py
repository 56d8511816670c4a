"""Every child the runner starts dies with it (harness/envs/cellenv.py, die_with_parent): after SIGKILL of the
runner, no uv install and no environment capture runs on as an orphan (checks: tests/e2e/test_interruptions.py)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

RUNNER = textwrap.dedent("""\
    import os, sys
    from pathlib import Path
    mode, pid_file = sys.argv[1], sys.argv[2]
    if mode == "setup":  # what cellenv.build runs uv through
        from harness.envs import cellenv
        with open(pid_file + ".log", "ab") as log:
            cellenv._run_logged(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 120"], log, dict(os.environ))
    else:  # the environment capture of a cell
        from harness.envs.cellenv import CellEnv
        from harness.execution.cell import RunOptions, _capture
        _capture(CellEnv(Path(sys.argv[3])), RunOptions(out_dir=Path(sys.argv[3])))
    """)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["setup", "capture"])
def test_a_killed_runner_leaves_no_child_behind(tmp_path, mode):
    pid_file = tmp_path / "child.pid"
    env_dir = tmp_path / "env"
    (env_dir / "bin").mkdir(parents=True)
    fake_python = env_dir / "bin" / "python"  # stands in for the cell's interpreter running envinfo
    fake_python.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    fake_python.chmod(0o755)
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, mode, str(pid_file), str(env_dir)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.time() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert _alive(child)
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.05)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, f"the {mode} child outlived its runner"
