"""How the checks start ranks: the one torchrun launcher stops a job past its time with every process it
started, and a job is terminated when the check that started it dies (so no rank outlives a killed check);
(forked ranks, and forking only from a process without native threads: tests/e2e/test_forked_ranks.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.checks.support import ranks

ROOT = Path(__file__).resolve().parents[5]

# A stand-in for torchrun: starts a "rank" that outlives nothing on its own, writes its pid, and waits.
JOB = textwrap.dedent("""\
    import subprocess, sys, time
    from pathlib import Path
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(sys.argv[1]).write_text(str(rank.pid))
    time.sleep(120)
    """)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
        return stat.read().split(")")[-1].split()[0] != "Z"


def _wait_for(path: Path, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not (path.exists() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_command_is_torchrun_on_one_node():
    argv = ranks.torchrun_command(2, "trainers.fsdp", ["--steps", "3"])
    assert argv[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "trainers.fsdp",
                        "--steps", "3"]
    assert argv[5] == "2" and argv[7] == "trainers.fsdp"  # the layout grpo_convergence.forked_trainer reads


def test_a_job_past_its_timeout_is_stopped_with_every_process_it_started(tmp_path):
    pid_file = tmp_path / "rank.pid"
    job = ranks.start_torchrun([sys.executable, "-c", JOB, str(pid_file)], tmp_path / "job.log")
    _wait_for(pid_file)
    rank = int(pid_file.read_text())
    assert os.getpgid(job.pid) == job.pid != os.getpgid(0)  # its own session: stopping it touches nothing else
    assert ranks.wait_torchrun(job, 0.5) is None
    deadline = time.monotonic() + 10
    while _alive(rank) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(rank), "the rank outlived its stopped job"


def test_a_finished_job_gives_its_exit_code_and_its_output_goes_to_the_log(tmp_path):
    job = ranks.start_torchrun([sys.executable, "-c", "print('hello from rank 0'); raise SystemExit(3)"],
                               tmp_path / "j.log")
    assert ranks.wait_torchrun(job, 30) == 3
    assert "hello from rank 0" in (tmp_path / "j.log").read_text()
    job = ranks.start_torchrun([sys.executable, "-c", "print('second')"], tmp_path / "j.log", append=True)
    assert ranks.wait_torchrun(job, 30) == 0
    assert (tmp_path / "j.log").read_text().splitlines() == ["hello from rank 0", "second"]


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_the_job_is_terminated_when_the_check_that_started_it_dies(tmp_path):
    marker = tmp_path / "terminated"
    job = textwrap.dedent(f"""\
        import signal, sys, time
        from pathlib import Path
        def bye(*_):
            Path({str(marker)!r}).write_text("SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        Path({str(tmp_path / 'ready')!r}).write_text("ready")
        time.sleep(120)
        """)
    check = textwrap.dedent(f"""\
        import sys, time
        from harness.checks.support import ranks
        ranks.start_torchrun([sys.executable, "-c", {job!r}], __import__("pathlib").Path({str(tmp_path / 'j.log')!r}))
        time.sleep(120)
        """)
    process = subprocess.Popen([sys.executable, "-c", check], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    _wait_for(tmp_path / "ready")
    assert (tmp_path / "ready").exists(), (tmp_path / "j.log").read_text() if (tmp_path / "j.log").exists() else ""
    process.send_signal(signal.SIGKILL)  # the harness's timeout kills a check this way
    process.wait()
    _wait_for(marker, 10)
    assert marker.exists() and marker.read_text() == "SIGTERM"


def test_a_job_where_forking_is_unsafe_runs_under_torchrun_with_the_check_s_environment(tmp_path, monkeypatch):
    seen = {}

    def command(nproc, module, args):
        seen.update(nproc=nproc, module=module, args=args)
        return [sys.executable, "-c", "import os; print('threads', os.environ['OMP_NUM_THREADS']); raise SystemExit(4)"]

    monkeypatch.setattr(ranks, "fork_safe", lambda: False)
    monkeypatch.setattr(ranks, "torchrun_command", command)
    monkeypatch.setattr(ranks, "run_ranks", lambda *a, **k: pytest.fail("nothing may be forked"))
    log = tmp_path / "job.log"
    assert ranks.run_job(lambda argv: 0, "harness.checks.x", ["--out", "f"], 2, log, 30,
                         {"OMP_NUM_THREADS": "1"}) == (False, "torchrun")
    assert seen == {"nproc": 2, "module": "harness.checks.x", "args": ["--out", "f"]}
    assert log.read_text().strip() == "threads 1"


def test_a_job_where_forking_is_safe_forks_the_entry_with_its_arguments(tmp_path, monkeypatch):
    calls = []

    def forked(target, nproc, log, timeout, env):
        calls.append((target(), nproc, env))
        return ranks.RanksOutcome([0] * nproc, False, 0.0)

    monkeypatch.setattr(ranks, "fork_safe", lambda: True)
    monkeypatch.setattr(ranks, "run_ranks", forked)
    assert ranks.run_job(lambda argv: len(argv), "m", ["a", "b"], 2, tmp_path / "l", 30, {}) == (True, "forked")
    assert calls == [(2, 2, {})]
