"""Checks that misbehave on purpose, to test how the runner classifies them.

Registered through HARNESS_EXTRA_CHECKS; the behaviour is chosen by the check's name.
"""
import os
import signal
import time

from harness.results.records import CheckResult, Status


def _parent_title() -> str:
    """The command line of the process that started this check (a Ray worker names itself ray::...)."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


def run(options):
    mode = os.environ.get("MISBEHAVE", "pass")
    if mode == "pass":
        return CheckResult("misbehave", Status.PASS, "fine", metrics={"answer": 42, "runner": _parent_title()})
    if mode in ("kill-runner", "kill-runner-once"):  # the process running the cell dies (a lost Ray worker)
        marker = os.environ.get("MISBEHAVE_MARKER", "")
        if mode == "kill-runner" or not os.path.exists(marker):
            if marker:
                open(marker, "w").close()
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)  # killed with its parent (PR_SET_PDEATHSIG)
        return CheckResult("misbehave", Status.PASS, "passed after the runner was replaced",
                           metrics={"runner": _parent_title()})
    if mode == "slow":
        pid_file = os.environ.get("MISBEHAVE_PIDS")
        if pid_file:
            with open(pid_file, "a") as handle:
                handle.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("MISBEHAVE_SECONDS", "1.5")))
        return CheckResult("misbehave", Status.PASS, "slow but fine")
    if mode == "crash-once":
        marker = os.environ["MISBEHAVE_MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.abort()
        return CheckResult("misbehave", Status.PASS, "passed on a retry")
    if mode == "raise":
        raise RuntimeError("the check itself is broken")
    if mode == "abort":
        os.abort()  # SIGABRT, as a C++ terminate does
    if mode == "exit":
        os._exit(3)
    if mode == "hang":
        time.sleep(3600)
    if mode == "memory":
        hog = [bytearray(64 * 1024 * 1024) for _ in range(1024)]  # 64 GiB: stopped by RLIMIT_AS
        return CheckResult("misbehave", Status.PASS, str(len(hog)))
    if mode == "wrong-type":
        return {"status": "pass"}
    raise ValueError(mode)
