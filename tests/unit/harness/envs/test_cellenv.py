"""Every child the runner starts dies with it (harness/envs/cellenv.py, die_with_parent): after SIGKILL of the
runner, no uv install and no environment capture runs on as an orphan (checks: tests/e2e/test_interruptions.py);
uv is never allowed to download a Python."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.envs import cellenv

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


def test_uv_is_never_allowed_to_download_a_python(tmp_path, monkeypatch):
    """Every uv call of a cell environment (venv, install, sync, freeze) gets UV_PYTHON_DOWNLOADS=never,
    even where the user's environment asks for automatic downloads."""
    record = tmp_path / "uv-calls.jsonl"
    fake_uv = tmp_path / "uv"
    fake_uv.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, sys
        with open({str(record)!r}, "a") as out:
            out.write(json.dumps([sys.argv[1:3], os.environ.get("UV_PYTHON_DOWNLOADS")]) + "\\n")
        if sys.argv[1] == "venv":
            python = os.path.join(sys.argv[-1], "bin", "python")
            os.makedirs(os.path.dirname(python), exist_ok=True)
            open(python, "w").close()
        """))
    fake_uv.chmod(0o755)
    monkeypatch.setattr(cellenv, "uv_binary", lambda: str(fake_uv))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "automatic")
    env = cellenv.build("c", ["einops==0.8.2"], tmp_path / "envs", tmp_path / "setup.log", "/some/python3.12")
    cellenv.freeze(env)
    lock = tmp_path / "lock.txt"
    lock.write_text("einops==0.8.2\n")
    cellenv.build_from_lock("r", lock, tmp_path / "envs", tmp_path / "repro.log", "/some/python3.12")
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c[0][:2] for c in calls] == [["venv", "--quiet"], ["pip", "install"], ["pip", "freeze"],
                                         ["venv", "--quiet"], ["pip", "sync"]]
    assert {c[1] for c in calls} == {"never"}
    assert "--python /some/python3.12" in (tmp_path / "setup.log").read_text()


