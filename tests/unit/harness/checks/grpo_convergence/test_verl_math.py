"""verl's GRPO math against the project's (`verl:grpo-math`): how the convergence result says whom it speaks for
(stand-in verdicts, no verl needed), and with verl installed the verdict itself, which fails when verl's advantage
is changed."""
from __future__ import annotations

import pytest

from harness.checks import CheckOptions
from harness.checks import grpo_convergence as check
from harness.checks.grpo_convergence import verl_math
from harness.checks.support import verl
from harness.results.records import CheckResult, Status, Verdict


def _math(status: Status) -> Verdict:
    return Verdict("verl:grpo-math", status, "stand-in", metrics={"verl": {"release": "9.9.0", "ran": []}})


def test_a_verl_row_runs_the_math_after_the_trainer_and_the_message_says_where_it_speaks_for_verl(monkeypatch):
    order = []
    monkeypatch.setattr(verl, "installed", lambda: "9.9.0")
    monkeypatch.setattr(verl_math, "verdict", lambda: order.append("math") or _math(Status.PASS))
    monkeypatch.setattr(check, "run_with", lambda options: order.append("run") or CheckResult(
        "grpo-convergence", Status.PASS, "final reward 0.9", verdicts=[Verdict("threshold", Status.PASS)]))
    result = check.run(CheckOptions())
    # the math after the run: importing verl starts threads that would keep the trainer's ranks from being forked
    assert order == ["run", "math"] and [v.name for v in result.verdicts] == ["threshold", "verl:grpo-math"]
    assert result.status is Status.PASS
    assert "speaks for verl 9.9.0's GRPO math in the typical regime only" in result.message
    for mechanism in ("dual clip", "low_var_kl clamp", "GSPO"):
        assert mechanism in result.message


def test_where_verls_math_differs_the_convergence_result_does_not_speak_for_verl_and_fails():
    result = verl_math.attach(CheckResult("grpo-convergence", Status.PASS, "final reward 0.9"), _math(Status.FAIL))
    assert result.status is Status.FAIL and "does not speak for verl 9.9.0" in result.message


def test_without_verl_the_check_is_unchanged(monkeypatch):
    monkeypatch.setattr(verl, "installed", lambda: None)
    monkeypatch.setattr(verl_math, "verdict", lambda: pytest.fail("no verl math without verl"))
    monkeypatch.setattr(check, "run_with", lambda options: CheckResult("grpo-convergence", Status.PASS, "ok"))
    assert check.run(CheckOptions()).message == "ok"


def test_the_extreme_batches_reach_the_mechanisms_they_name():
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")
    ratio = verl_math.make_batch("extreme-ratio")
    assert float(torch.exp(ratio["logp"] - ratio["old"]).max()) > 3.0  # above clip_ratio_c
    far = verl_math.make_batch("extreme-kl")
    k3 = torch.exp(far["ref"] - far["logp"]) - (far["ref"] - far["logp"]) - 1
    assert float((k3 * far["mask"]).max()) > 10.0  # above the low_var_kl clamp


# --- with verl installed (the `tests-verl` session) ---------------------------------------------------------------


@pytest.mark.verl
def test_verls_math_equals_the_projects_on_typical_batches_and_names_what_it_ran():
    pytest.importorskip("verl")
    made = verl.attributed(verl_math.verdict())
    assert made.status is Status.PASS, made.message
    assert made.metrics["verl"]["ran"][:2] == ["verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage",
                                                "verl.workers.utils.losses.ppo_loss"]
    assert made.metrics["verl_defaults"]["clip_ratio_c"] == 3.0
    assert made.metrics["max_abs_errors"]["extreme-ratio"]["loss"] > verl_math.ATOL  # verl's dual clip acted


@pytest.mark.verl
def test_a_changed_verl_advantage_fails_the_verdict(monkeypatch):
    pytest.importorskip("verl")
    from verl.trainer.ppo import core_algos

    real = core_algos.compute_grpo_outcome_advantage

    def unnormalised(*args, **kwargs):
        return real(*args, **{**kwargs, "norm_adv_by_std_in_grpo": False})

    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", unnormalised)
    broken = verl_math.verdict()
    assert broken.status is Status.FAIL and "typical" in broken.message, broken.message
