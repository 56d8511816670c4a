"""Child processes that die with the process that started them.

A runner killed with SIGKILL cannot clean up: its uv installs, environment captures and checks would
run on as orphans, writing into a results directory nobody is running any more. On Linux the kernel
can send the child SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG); every child the harness
starts asks for that, through this one helper.
"""
from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: runs in the child before exec."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
