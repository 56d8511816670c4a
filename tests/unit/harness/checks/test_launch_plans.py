"""The launch-plans check: one sub-verdict per plan, failing when a plan would not start here."""
from __future__ import annotations

import os

import pytest
from plan_helpers import write_plan

from harness.checks import CheckOptions, launch_plans
from harness.plans import megatron_probe
from harness.results.records import Status

pytest.importorskip("torch")
needs_mcore = pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")


def run_on(monkeypatch, *paths):
    monkeypatch.setenv("HARNESS_PLANS", os.pathsep.join(str(p) for p in paths))
    return launch_plans.run(CheckOptions())


@needs_mcore
def test_passes_when_every_plan_would_start(tmp_path, monkeypatch):
    result = run_on(monkeypatch, write_plan(tmp_path, "good.toml"))
    assert result.status is Status.PASS, result.message
    assert [(v.name, v.status) for v in result.verdicts] == [("good", Status.PASS)]
    assert result.verdicts[0].metrics["memory_gib"]["total"] > 0


@needs_mcore
def test_fails_naming_the_plan_and_the_field(tmp_path, monkeypatch):
    good = write_plan(tmp_path, "good.toml")
    bad = write_plan(tmp_path, "bad-cp.toml", parallel__cp=2)
    result = run_on(monkeypatch, good, bad)
    assert result.status is Status.FAIL and "bad-cp" in result.message
    verdict = {v.name: v for v in result.verdicts}["bad-cp"]
    assert verdict.status is Status.FAIL and "parallel.cp" in verdict.message


def test_without_megatron_core_the_plan_is_unchecked_not_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(megatron_probe, "version", lambda: None)
    result = run_on(monkeypatch, write_plan(tmp_path, "good.toml"))
    assert result.status is Status.SKIP
    assert result.verdicts[0].status is Status.SKIP and "megatron-core not installed" in result.verdicts[0].message


def test_shipped_plans_are_found():
    assert len(launch_plans.plan_files()) >= 5


@needs_mcore
def test_a_declared_failure_is_xfail_and_a_stale_one_fails(tmp_path, monkeypatch):
    declared = write_plan(tmp_path, "declared.toml", parallel__cp=2, expect__starts=False,
                          expect__reason="cp with GDN is refused")
    result = run_on(monkeypatch, declared)
    assert result.status is Status.PASS, result.message
    assert result.verdicts[0].status is Status.XFAIL and "cp with GDN is refused" in result.verdicts[0].message
    stale = write_plan(tmp_path, "stale.toml", expect__starts=False, expect__reason="thought to be too big")
    result = run_on(monkeypatch, stale)
    assert result.status is Status.FAIL and result.verdicts[0].status is Status.FAIL
    assert "stale" in result.verdicts[0].message


def test_a_declared_failure_needs_its_reason(tmp_path):
    from harness.errors import InputError
    from harness.plans.plan_format import load_plan

    with pytest.raises(InputError, match=r"expect\.reason: missing"):
        load_plan(write_plan(tmp_path, "noreason.toml", expect__starts=False))


def test_a_plan_whose_memory_estimate_raises_is_an_error_not_unchecked(tmp_path, monkeypatch):
    from harness.plans import verdict

    def broken(*args, **kwargs):
        raise ValueError("no layout for 3 stages")

    monkeypatch.setattr(verdict, "fsdp_estimate", broken)
    plan = write_plan(tmp_path, "fsdp.toml", plan__backend="fsdp", parallel__tp=1, parallel__pp=1, parallel__ep=1,
                      rollout__tp=1)
    result = run_on(monkeypatch, plan)
    assert result.status is Status.ERROR and "ValueError: no layout for 3 stages" in result.message
    assert result.verdicts[0].status is Status.ERROR
