"""The one way a check starts a torchrun job and stops it.

torchrun runs in a session of its own, so stopping it (a timeout) kills its ranks too, not only the
launcher, which they would outlive; and it gets SIGTERM when the check's process dies (prctl
PR_SET_PDEATHSIG), on which torchrun stops its ranks. The harness's own helper (envs.cellenv.die_with_parent)
sends SIGKILL instead, which torchrun cannot pass on to its ranks.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path


def command(nproc: int, module: str, args: list[str]) -> list[str]:
    """`python -m torch.distributed.run` on one node with `nproc` ranks, each running `module` with `args`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", module, *args]


def _terminated_with_this_check() -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def launch(argv: list[str], log: Path, env: dict[str, str] | None = None, append: bool = False) -> subprocess.Popen:
    """Start `argv` (a torchrun command), its output to `log`, in its own session, terminated with this process."""
    with open(log, "a" if append else "w", encoding="utf-8") as handle:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_terminated_with_this_check)


def stop(process: subprocess.Popen) -> None:
    """Kill the job: the launcher and its ranks (its session's group, which holds nothing else)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait(process: subprocess.Popen, timeout: float) -> int | None:
    """The job's exit code, or None when it ran past `timeout` seconds (then it is stopped)."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(process)
        return None
