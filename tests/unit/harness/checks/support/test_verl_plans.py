"""launch-plans' verl side: verl's own example scripts judged by verl's own config check and this project's rules,
on the fixture script (tests/resources/verl_examples); with verl installed, verl's own check of its launch."""
from __future__ import annotations

import pytest

from harness.checks import CheckOptions, launch_plans
from harness.checks.support import verl, verl_plans
from harness.plans import verl_launch, verl_sources
from harness.results.records import CheckResult, Status

FIXTURE = "examples/grpo_trainer/run_qwen3_5_27b_fsdp.sh"


@pytest.fixture
def script(resources) -> str:
    return (resources / "verl_examples" / FIXTURE).read_text()


def _accepting(launch):
    return None, [verl_plans.verl_check]  # a stand-in for verl's own config check (a function it ran)


@pytest.mark.parametrize("outcome, status", [("would start", Status.PASS), ("would not start", Status.FAIL),
                                             ("unchecked", Status.SKIP)])
def test_the_verdict_follows_verls_check_and_this_projects_rules(script, monkeypatch, outcome, status):
    monkeypatch.setattr(verl_plans, "verl_check", _accepting)
    monkeypatch.setattr(verl_plans, "project_rules", lambda fields: (outcome, "reasons"))
    made = verl_plans.script_verdict(FIXTURE, script, "a folder")
    assert made.name == "verl:plan/grpo_trainer/run_qwen3_5_27b_fsdp" and made.status is status
    assert "verl's own config check accepts it; this project's rules: " + outcome in made.message


def test_a_launch_verls_own_check_rejects_fails_whatever_the_rules_say(script, monkeypatch):
    monkeypatch.setattr(verl_plans, "verl_check", lambda launch: ("verl's own config check rejects it: X", [len]))
    monkeypatch.setattr(verl_plans, "project_rules", lambda fields: pytest.fail("no plan needed"))
    made = verl_plans.script_verdict(FIXTURE, script, "a folder")
    assert made.status is Status.FAIL and made.message.endswith("rejects it: X")


def test_a_model_without_a_published_config_is_a_skip_naming_it(script, monkeypatch):
    monkeypatch.setattr(verl_plans, "verl_check", _accepting)
    made = verl_plans.script_verdict(FIXTURE, script.replace("Qwen3.5-27B", "Qwen3.5-2B"), "a folder")
    assert made.status is Status.SKIP and "plan.model: unknown model 'Qwen3.5-2B'" in made.message
    assert "plan.toml" not in made.message  # the temporary file the plan was written to is not the point


def test_without_the_scripts_there_is_one_skip_saying_why(monkeypatch):
    def unreachable(release):
        raise verl_sources.Unavailable("verl's example scripts are not shipped in its sdist or wheel; this runner "
                                       "cannot reach github.com")

    monkeypatch.setattr(verl_sources, "scripts", unreachable)
    [made] = verl_plans.verdicts()
    assert made.name == "verl:plans" and made.status is Status.SKIP and "cannot reach github.com" in made.message


def test_a_verl_row_adds_the_scripts_to_the_check_and_a_failing_one_fails_it(monkeypatch):
    monkeypatch.setattr(verl, "installed", lambda: "9.9.0")
    monkeypatch.setattr(launch_plans, "shipped_plans", lambda: CheckResult("launch-plans", Status.PASS, "6 of 6"))
    failing = verl.verdict("plan/x", Status.FAIL, "rejected", [])
    monkeypatch.setattr(verl_plans, "verdicts", lambda: [failing, verl.verdict("plan/y", Status.SKIP, "no plan", [])])
    result = launch_plans.run(CheckOptions())
    assert result.status is Status.FAIL
    assert result.message == "6 of 6; verl's own Qwen3.5 scripts: 1 fail, 1 skip (failing: verl:plan/x)"


# --- with verl installed (the `tests-verl` session) ---------------------------------------------------------------


@pytest.mark.verl
def test_verls_own_check_accepts_the_fixtures_launch_and_refuses_a_key_it_does_not_have(script):
    pytest.importorskip("verl")
    pytest.importorskip("hydra")
    launch = verl_launch.launch(verl_launch.record(script, "gpu"))
    objection, ran = verl_plans.verl_check(launch)
    assert objection is None and "verl.utils.config.validate_config" in [verl.qualname(f) for f in ran]
    launch.overrides.append("actor_rollout_ref.actor.fsdp_config.no_such_setting=True")
    objection, _ = verl_plans.verl_check(launch)
    assert objection.startswith("verl's own config check rejects it") and "no_such_setting" in objection


@pytest.mark.verl
def test_a_verl_config_check_that_refuses_every_launch_fails_the_scripts_verdict(script, monkeypatch):
    pytest.importorskip("verl")
    pytest.importorskip("hydra")
    from verl.utils import config as verl_config

    def refusing(config, **kwargs):
        raise ValueError("refused")

    monkeypatch.setattr(verl_config, "validate_config", refusing)
    monkeypatch.setattr(verl_plans, "project_rules", lambda fields: pytest.fail("a refused launch needs no plan"))
    made = verl_plans.script_verdict(FIXTURE, script, "a folder")  # the guard would also fail it: ran a stand-in
    assert made.status is Status.FAIL
    assert "verl's own config check rejects it: ValueError: refused" in made.message, made.message
