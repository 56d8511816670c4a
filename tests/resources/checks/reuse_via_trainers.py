"""A check whose own code imports no third-party package: it reaches transformers only through trainers/,
so its result depends on transformers' version all the same. Registered through HARNESS_EXTRA_CHECKS by
tests/e2e/test_reuse_fork_stack.py."""
import os

from harness.results.records import CheckResult, Status


def run(options):
    from trainers.rollout import HFRollout  # the engine module imports transformers (trainers/rollout/hf.py)

    return CheckResult("via-trainers", Status.PASS, f"the HF engine has {len(vars(HFRollout))} names",
                       metrics={"pid": os.getpid()})
