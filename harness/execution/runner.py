"""Where failures become statuses: the only module that does it.

`execute` runs a check in this process (a check's own process, check_process.py) and turns its exceptions into
a status. `run_isolated` starts that process in a fresh interpreter with a timeout, and `outcome` turns what
happened to a check's process (a crash, a hang, memory exhaustion) into a status, with the tail of its log, so
that the run goes on; the fork path (forkclient) ends there too.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import checks
from harness.envs.cellenv import die_with_parent, tail
from harness.results.records import CheckResult, Status

from .module_providers import record_this_process

ENTRY = "harness.execution.check_process"  # a check's process: `python -m ENTRY NAME --result-file FILE ...`
# Check process groups running now, for a run interrupted while cells run in other threads.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()
STOPPING = threading.Event()


def execute(name: str, options: checks.CheckOptions) -> CheckResult:
    """Run check `name` here; never raises for a failure of the check itself."""
    record_this_process()  # a forked check's imports count for reuse as a fresh interpreter's do
    start = time.perf_counter()
    try:
        result = checks.run_in_process(name, options)
        if not isinstance(result, CheckResult):
            raise TypeError(f"check {name} returned {type(result).__name__}, not a CheckResult")
    except MemoryError:
        result = CheckResult(name, Status.CRASH, "out of memory (MemoryError)")
    except Exception as exc:  # noqa: BLE001 - a check's bug or a broken stack: recorded, not raised
        if lacks_qwen35(exc):  # a stack without Qwen3.5: nothing to check
            result = CheckResult(name, Status.SKIP, str(exc).split(":")[0])
        else:
            frames = "".join(traceback.format_exception(exc)[-6:])
            result = CheckResult(name, Status.ERROR, f"{type(exc).__name__}: {exc}"[:2000],
                                 metrics={"traceback": frames[-4000:]})
    result.check, result.duration = name, round(time.perf_counter() - start, 3)
    return result


def lacks_qwen35(exc: BaseException) -> bool:
    """Whether `exc` is trainers.models.Qwen35Unavailable (this stack has no Qwen3.5): a real type check. Where
    that module is not loaded no exception can be of its class, so it is looked up in sys.modules, never imported:
    the harness does not import the trainers to ask."""
    models = sys.modules.get("trainers.models")
    return models is not None and isinstance(exc, models.Qwen35Unavailable)


def limit_memory(megabytes: int | None) -> None:
    """Cap this process's address space (the matrix's memory_limit_mb); None: no cap."""
    if megabytes:
        import resource

        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _child_setup(megabytes: int | None):
    """Runs in the child before exec: die with the runner, and cap memory when asked."""

    def apply() -> None:
        die_with_parent()  # a killed runner must not leave its checks running
        limit_memory(megabytes)

    return apply


def kill_group(pgid: int) -> None:
    """SIGKILL a check's process group: torchrun and its ranks live in the check's group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def live_group(pgid: int) -> Iterator[None]:
    """Known to stop_all while the block runs."""
    with _LIVE_LOCK:
        _LIVE.add(pgid)
    try:
        yield
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(pgid)


def stop_all() -> None:
    """Ctrl-C with cells in several threads: only the main thread hears it, so kill every running
    check here, and tell the other threads to start nothing more (they raise KeyboardInterrupt)."""
    STOPPING.set()
    with _LIVE_LOCK:
        for pgid in list(_LIVE):
            kill_group(pgid)


def _kill_group(proc: subprocess.Popen) -> None:
    kill_group(proc.pid)
    proc.wait()


def run_isolated(python: Path | str, name: str, args: list[str], log_path: Path, timeout: float,
                 env: dict[str, str], memory_limit_mb: int | None = None) -> CheckResult:
    """Run one check in its own process; classify crash, timeout and memory exhaustion."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_path = log_path.with_suffix(".result.json")
    result_path.unlink(missing_ok=True)
    argv = [str(python), "-m", ENTRY, name, "--result-file", str(result_path), *args]
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=_child_setup(memory_limit_mb))
        try:
            with live_group(proc.pid):
                code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return timed_out(name, timeout, log_path, round(time.perf_counter() - start, 3))
        finally:
            if proc.poll() is None:  # interrupted (KeyboardInterrupt): leave no orphans
                _kill_group(proc)
    return outcome(name, code, log_path, result_path, round(time.perf_counter() - start, 3))


def timed_out(name: str, timeout: float, log_path: Path, duration: float) -> CheckResult:
    """A check killed at its time limit."""
    return CheckResult(name, Status.TIMEOUT, f"no result after {timeout:.0f} s; killed. Log tail:\n{tail(log_path)}",
                       duration=duration)


def outcome(name: str, code: int, log_path: Path, result_path: Path, duration: float) -> CheckResult:
    """What a finished check process left: its result file, else why it died (`code` as Popen's
    returncode: negative for a signal). Both process paths (fresh interpreter, fork) end here."""
    if result_path.exists():
        try:
            result = CheckResult.from_dict(json.loads(result_path.read_text()))
            result.check, result.duration = name, duration  # the request names the result
            return result
        except (ValueError, KeyError, TypeError) as exc:
            return CheckResult(name, Status.CRASH, f"unreadable result file ({exc}). Log tail:\n{tail(log_path)}",
                               duration=duration)
    log_tail = tail(log_path)
    if code < 0:
        why = f"killed by {signal.Signals(-code).name}"
        if -code == signal.SIGKILL:
            why += " (likely out of memory)"
    elif "MemoryError" in log_tail or "out of memory" in log_tail.lower():
        why = f"out of memory (exit status {code})"
    else:
        why = f"exited with status {code} without a result"
    return CheckResult(name, Status.CRASH, f"{why}. Log tail:\n{log_tail}", duration=duration)
