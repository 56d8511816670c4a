"""Checks that misbehave on purpose, to test how the runner classifies them.

Registered through HARNESS_EXTRA_CHECKS; the behaviour is chosen by the check's name.
"""
import gc
import os
import signal
import subprocess
import sys
import time

from harness.results.records import CheckResult, Status


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return ""


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rpartition(")")[2].split()[1])


def _runner_pid() -> int:
    """The process running the cell: the parent, or above the check server (and its tier) that forked this."""
    parent = os.getppid()
    while "checkserver" in _title(parent):
        parent = _parent_of(parent)
    return parent


def _parent_title() -> str:
    """The command line of the process running the cell (a Ray worker names itself ray::...)."""
    return _title(_runner_pid())


def _first_to_claim(marker: str) -> bool:
    """Whether this process is the first to create `marker` (O_EXCL: two cells starting together cannot both claim
    it, as they could by testing for it and then writing it); True without a marker."""
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def run(options):
    mode = os.environ.get("MISBEHAVE", "pass")
    if mode == "pass":
        return CheckResult("misbehave", Status.PASS, "fine", metrics={"answer": 42, "runner": _parent_title()})
    if mode in ("kill-runner", "kill-runner-once"):  # the process running the cell dies (a lost Ray worker)
        if mode == "kill-runner" or _first_to_claim(os.environ.get("MISBEHAVE_MARKER", "")):
            os.kill(_runner_pid(), signal.SIGKILL)
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
        if _first_to_claim(os.environ["MISBEHAVE_MARKER"]):
            os.abort()
        return CheckResult("misbehave", Status.PASS, "passed on a retry")
    if mode == "kill-server-once":  # the check server dies mid-check; the fresh interpreter's try passes
        if "checkserver" in _title(os.getppid()) and _first_to_claim(os.environ["MISBEHAVE_MARKER"]):
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)
        return CheckResult("misbehave", Status.PASS, "passed without the check server")
    if mode == "talk":  # output of the check and of a process it starts: all of it belongs in its log
        print("said on stdout", flush=True)
        print("said on stderr", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-c", "print('said by a child process')"], check=True)
        return CheckResult("misbehave", Status.PASS, "talked")
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang-with-child":  # a hung check with a process of its own, as torchrun's ranks
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(os.environ["MISBEHAVE_PIDS"], "a") as handle:
            handle.write(f"{os.getpid()}\n{child.pid}\n")
        time.sleep(3600)
    if mode == "modules":  # what was imported before the check's own code ran, and the variables it found
        names = os.environ.get("MISBEHAVE_MODULES", "megatron.core,torch,transformers").split(",")
        return CheckResult("misbehave", Status.PASS, "modules", metrics={
            "preloaded": sorted(m for m in names if m in sys.modules), "pid": os.getpid(), "parent": os.getppid(),
            "variables": {k: os.environ.get(k) for k in os.environ.get("MISBEHAVE_VARIABLES", "").split(",") if k}})
    if mode == "tier":  # whether a tier's module was imported before the check's own code ran, and by whom
        return CheckResult("misbehave", Status.PASS, "tier", metrics={
            "imported": "tier_import" in sys.modules, "variable": os.environ.get("TIER_IMPORTED"),
            "parent": os.getppid(), "grandparent": _parent_of(os.getppid()), "runner": _runner_pid()})
    if mode == "collector":  # the garbage collector as this check finds it, and as it was during a tier's import
        tier = sys.modules.get("tier_import")
        return CheckResult("misbehave", Status.PASS, "collector", metrics={
            "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(), "thresholds": list(gc.get_threshold()),
            "tier_import_collecting": getattr(tier, "COLLECTING_AT_IMPORT", None)})
    if mode == "entry":  # how this check's process started: its entry point, and whether the top-level CLI is loaded
        return CheckResult("misbehave", Status.PASS, "entry", metrics={
            "argv0": sys.argv[0], "cli": "harness.cli" in sys.modules})
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
