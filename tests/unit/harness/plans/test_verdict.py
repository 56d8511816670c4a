"""The `plan` verb: a verdict per plan, and a plan that starts against its `[expect] starts = false` says so
and exits 1. The verb runs in this process (megatron-core imported once per test worker); `python -m harness`
reaching it is tests/unit/harness/plans/test_plan_format.py's one-line errors."""
from __future__ import annotations

import argparse
import json

import pytest
from plan_helpers import ROOT_PLANS, write_plan

from harness.plans import megatron_probe, verdict

needs_mcore = pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")


@pytest.fixture
def plan_verb(monkeypatch, capsys):
    """`plan [--json] FILE...` in this process: (exit status, stdout); the verb's one thread put back after."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    def run(*files, as_json=False) -> tuple[int, str]:
        try:
            code = verdict.cmd_plan(argparse.Namespace(files=list(files), json=as_json))
        finally:
            torch.set_num_threads(threads)
        return code, capsys.readouterr().out

    return run


@needs_mcore
def test_the_verb_prints_a_verdict_per_plan(plan_verb):
    code, out = plan_verb(ROOT_PLANS / "qwen3.5-35b-a3b-megatron-grpo.toml", as_json=True)
    assert code == 0, out
    [found] = json.loads(out)
    assert found["verdict"] == "would start" and found["memory_gib"]["total"] < 80
    fields = {f["field"] for f in found["findings"]}
    assert fields >= {"parallel", "parallel.pp", "parallel.ep", "rollout.tp", "cluster.memory_gib"}


@needs_mcore
def test_a_stale_expect_is_said_and_exits_1(tmp_path, plan_verb):
    stale = write_plan(tmp_path, expect__starts=False, expect__reason="thought too big")
    code, out = plan_verb(stale)
    assert code == 1, out
    assert out.splitlines()[0].endswith("would start (test plan; 32 x cuda)")
    assert out.splitlines()[-1] == ("  stale     expect.starts: declared false (thought too big), but it would "
                                    "start here: the declaration is stale")
    code, out = plan_verb(stale, as_json=True)
    assert code == 1 and json.loads(out)[0]["stale_expect"] is True


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
