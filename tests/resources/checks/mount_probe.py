"""A check that tries to write into the project directory: it passes only where that directory is a
read-only mount (a cell's container). Registered by tests/e2e/test_container.py through HARNESS_EXTRA_CHECKS."""
import errno
import os

from harness.envs.cellenv import PROJECT_ROOT
from harness.results.records import CheckResult, Status


def run(options):
    probe = PROJECT_ROOT / f".mount-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError as exc:
        # Only EROFS proves a read-only mount; a permission error would pass for the wrong reason.
        status = Status.PASS if exc.errno == errno.EROFS else Status.FAIL
        return CheckResult("ro-probe", status, f"writing into {PROJECT_ROOT}: {exc.strerror}",
                           metrics={"project_root": str(PROJECT_ROOT), "errno": exc.errno})
    probe.unlink()
    return CheckResult("ro-probe", Status.FAIL, f"{PROJECT_ROOT} is writable",
                       metrics={"project_root": str(PROJECT_ROOT)})
