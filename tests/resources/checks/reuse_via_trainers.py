"""A check whose own code imports no third-party package: it reaches transformers only through trainers/,
so its result depends on transformers' version all the same. Registered through HARNESS_EXTRA_CHECKS by
tests/e2e/test_reuse_fork_stack.py."""
import os

from harness.results.records import CheckResult, Status


def run(options):
    from trainers import rollout

    return CheckResult("via-trainers", Status.PASS, f"rollout has {len(vars(rollout))} names",
                       metrics={"pid": os.getpid()})
