"""A check that runs until it is stopped: a cell that is certainly still running when a test interrupts it
(stack-smoke can finish between the test seeing its container run and the signal arriving). Registered by
tests/e2e/test_container.py through HARNESS_EXTRA_CHECKS."""
import time

from harness.results.records import CheckResult, Status


def run(options):
    time.sleep(3600)
    return CheckResult("sleeper", Status.FAIL, "never interrupted")
