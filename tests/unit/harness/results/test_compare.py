"""A run against a previous one (compare.py): new failures first, fixed, still failing, unchanged; a runner's
limit is never a new failure."""
from __future__ import annotations

import json

from cause_cells import cell as vllm_cell
from cause_cells import not_installed, ran
from report_helpers import history_cell as cell

from harness.results import compare
from harness.results.compare import NEW, new_failures
from harness.results.records import CheckResult, Status


def test_compare_classifies_and_puts_new_failures_first():
    previous = [cell("5.3.0", Status.PASS), cell("5.5.3", Status.FAIL), cell("5.8.1", Status.FAIL),
                cell("5.9.0", Status.PASS)]
    current = [cell("5.3.0", Status.FAIL), cell("5.5.3", Status.FAIL), cell("5.8.1", Status.PASS),
               cell("5.9.0", Status.PASS), cell("5.23.0", Status.CRASH), cell("5.10.0", Status.PASS, flaky=True)]
    changes = compare.compare(current, previous)
    kinds = {(c.cell_id, c.kind) for c in changes}
    assert ("fsdp-text-tf5.3.0", compare.NEW) in kinds
    assert ("fsdp-text-tf5.23.0", compare.NEW) in kinds  # a new entry that fails is a new failure
    assert ("fsdp-text-tf5.10.0", compare.NEW) in kinds  # flaky is never a plain pass
    assert ("fsdp-text-tf5.5.3", compare.STILL) in kinds
    assert ("fsdp-text-tf5.8.1", compare.FIXED) in kinds
    assert ("fsdp-text-tf5.9.0", compare.UNCHANGED) in kinds
    assert [c.kind for c in changes][:3] == [compare.NEW] * 3
    assert json.dumps([c.__dict__ for c in changes])


def test_a_runner_limit_never_fails_a_pull_request_as_a_new_break():
    before = [ran("5.12.1", "0.32.0", CheckResult("vllm-chat-parity", Status.PASS)),
              ran("5.19.0", "0.32.0", CheckResult("vllm-chat-parity", Status.PASS))]
    after = [vllm_cell("5.12.1", "0.32.0", *not_installed("bridge")),
             vllm_cell("5.19.0", "0.32.0", *not_installed("vllm032"))]
    fresh = new_failures(compare.compare(after, before))
    # The runner's limit is not new; pins that installed before and now conflict are.
    assert {c.cell_id for c in fresh} == {"fsdp-text-tf5.19.0-vllmcpu0.32.0"}
    # A cell that never installed keeps its install verdict as its kind, never "new failure".
    kinds = {c.kind for c in compare.compare(after, [])}
    assert NEW not in kinds and kinds == {"cannot be installed together", "not installable on this runner"}
