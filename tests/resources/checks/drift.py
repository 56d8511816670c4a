"""A check whose verdict drifts from call to call, so that two runs of the same cells disagree: it counts
its calls in the file DRIFT_COUNTER names and fails from the DRIFT_FAIL_FROM-th call on (its sub-verdict
with it). Registered through HARNESS_EXTRA_CHECKS (drift=drift) by
tests/e2e/test_matrix_bench.py."""
import fcntl
import os

from harness.results.records import CheckResult, Status, Verdict


def _next_call() -> int:
    with open(os.environ["DRIFT_COUNTER"], "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # cells may run in parallel
        handle.seek(0)
        calls = int(handle.read() or 0)
        handle.truncate(0)
        handle.write(str(calls + 1))
    return calls


def run(options):
    call = _next_call()
    status = Status.FAIL if call >= int(os.environ["DRIFT_FAIL_FROM"]) else Status.PASS
    return CheckResult("drift", status, f"call {call}", verdicts=[Verdict("reading", status, f"call {call}")])
