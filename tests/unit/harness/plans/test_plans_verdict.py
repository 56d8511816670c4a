"""The `plan` verb: a verdict per plan, and a plan that starts against its `[expect] starts = false` says so
and exits 1."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plan_helpers import ROOT_PLANS, write_plan

from harness.plans import megatron_probe

needs_mcore = pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")


def test_cli_prints_a_verdict_per_plan(project_env):
    pytest.importorskip("megatron.core")
    plan = ROOT_PLANS / "qwen3.5-35b-a3b-megatron-grpo.toml"
    done = subprocess.run([sys.executable, "-m", "harness", "plan", "--json", str(plan)], capture_output=True,
                          text=True, env=project_env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [verdict] = json.loads(done.stdout)
    assert verdict["verdict"] == "would start" and verdict["memory_gib"]["total"] < 80
    fields = {f["field"] for f in verdict["findings"]}
    assert fields >= {"parallel", "parallel.pp", "parallel.ep", "rollout.tp", "cluster.memory_gib"}


@needs_mcore
def test_a_stale_expect_is_said_and_exits_1(tmp_path, project_env):
    stale = write_plan(tmp_path, expect__starts=False, expect__reason="thought too big")
    done = subprocess.run([sys.executable, "-m", "harness", "plan", str(stale)], capture_output=True, text=True,
                          env=project_env, timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].endswith("would start (test plan; 32 x cuda)")
    assert done.stdout.splitlines()[-1] == ("  stale     expect.starts: declared false (thought too big), but it would "
                                            "start here: the declaration is stale")
    done = subprocess.run([sys.executable, "-m", "harness", "plan", "--json", str(stale)], capture_output=True,
                          text=True, env=project_env, timeout=600)
    assert done.returncode == 1 and json.loads(done.stdout)[0]["stale_expect"] is True


@pytest.mark.parametrize("raised", [ValueError("no layout for 3 stages"), AssertionError("stage sizes differ"),
                                    RuntimeError("fake world"), TypeError("unexpected None")])
def test_a_memory_estimate_that_raises_is_an_error_naming_the_exception(tmp_path, monkeypatch, raised):
    from harness.plans import verdict
    from harness.plans.plan_format import load_plan

    def broken(*args, **kwargs):
        raise raised

    monkeypatch.setattr(verdict, "fsdp_estimate", broken)
    plan = load_plan(write_plan(tmp_path, plan__backend="fsdp", parallel__tp=1, parallel__pp=1, parallel__ep=1,
                                rollout__tp=1))
    finding, gib = verdict.memory_finding(plan)
    assert finding.status == verdict.ERROR and gib == {}
    assert f"the memory estimate raised {type(raised).__name__}: {raised}" == finding.message
    judged = verdict.PlanVerdict(plan, [finding])
    assert judged.verdict == "error" and judged.to_dict()["verdict"] == "error"


def test_a_model_this_environment_cannot_build_stays_unchecked(tmp_path, monkeypatch):
    from harness.plans import memory, verdict
    from harness.plans.plan_format import load_plan

    def unavailable(*args, **kwargs):
        raise memory.MemoryUnavailable("transformers 5.1.0 has no 'qwen3_5_text'")

    monkeypatch.setattr(verdict, "fsdp_estimate", unavailable)
    plan = load_plan(write_plan(tmp_path, plan__backend="fsdp", parallel__tp=1, parallel__pp=1, parallel__ep=1,
                                rollout__tp=1))
    assert verdict.memory_finding(plan)[0].status == verdict.UNCHECKED
