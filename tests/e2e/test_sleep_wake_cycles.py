"""vllm-rollout's sleep and wake cycles on a stand-in engine (no vLLM), whole: a GRPO update, sleep, weight sync
and wake per cycle. They pass on a sleep that keeps the engine whole and fail on a wake that zeroes the Gated
DeltaNet state, on the text and MoE models."""
from __future__ import annotations

import pytest
from qwen35_helpers import qwen35_or_skip
from sleep_standin import zero_ssm_state

from harness.checks.vllm_rollout import sleep_wake
from harness.results.records import Status

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
CYCLES = (1, 2)  # both levels, and a second wake


@pytest.fixture(autouse=True)
def _qwen35():
    qwen35_or_skip()


def _verdicts(monkeypatch, on_kv_wake=None, kind="text"):
    from sleep_standin import standin_verdicts

    return standin_verdicts(monkeypatch, on_kv_wake=on_kv_wake, kind=kind, cycles=CYCLES)


def test_a_sleep_that_keeps_the_engine_whole_passes(monkeypatch):
    verdicts = _verdicts(monkeypatch)
    assert verdicts["sleep-wake"].status is Status.PASS, verdicts["sleep-wake"].message
    assert verdicts["sleep-greedy"].status is Status.PASS, verdicts["sleep-greedy"].message
    records = verdicts["sleep-wake"].metrics["cycles"]
    assert [r["level"] for r in records] == list(CYCLES)
    assert all(r["fresh"]["compared"] > 0 and r["fresh"]["rows_diverged"] == 0 for r in records)


def test_a_wake_that_zeroes_the_ssm_state_fails(monkeypatch):
    verdicts = _verdicts(monkeypatch, on_kv_wake=zero_ssm_state)
    verdict = verdicts["sleep-wake"]
    assert verdict.status is Status.FAIL and "against a fresh engine" in verdict.message, verdict.message
    assert verdict.metrics["cycles"][0]["fresh"]["max_abs_error"] > sleep_wake.tolerance_for("text")


def test_the_moe_model_fails_the_same_way(monkeypatch):
    verdict = _verdicts(monkeypatch, on_kv_wake=zero_ssm_state, kind="moe")["sleep-wake"]
    assert verdict.status is Status.FAIL, verdict.message
