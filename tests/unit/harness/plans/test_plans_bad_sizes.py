"""Sizes that mean nothing (zero, NaN, infinite) are bad input naming the field; an uneven pipeline split is
blamed on the stage sizes that make it; a plan that starts against its `[expect] starts = false` says so."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plan_helpers import write_plan

from harness.errors import InputError
from harness.plans import megatron_probe, rules
from harness.plans.plan_format import load_plan

needs_mcore = pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")


@pytest.mark.parametrize("changes, expected", [
    ({"cluster__nodes": 0}, "cluster.nodes: expected a number above 0, got 0"),  # "0 means unset" is rollout.nodes'
    ({"cluster__devices_per_node": 0}, "cluster.devices_per_node: expected a number above 0, got 0"),
    ({"cluster__memory_gib": float("nan")}, "cluster.memory_gib: expected a finite number above 0, got nan"),
    ({"cluster__memory_gib": float("inf")}, "cluster.memory_gib: expected a finite number above 0, got inf"),
    ({"batch__max_prompt_length": 0}, "batch.max_prompt_length: expected a number above 0, got 0"),
    ({"rollout__tp": 0}, "rollout.tp: expected a number above 0, got 0"),
])
def test_meaningless_sizes_are_refused_by_field(tmp_path, changes, expected):
    path = write_plan(tmp_path, **changes)
    with pytest.raises(InputError) as info:
        load_plan(path)
    assert str(info.value) == f"{path}: {expected}"


def test_zero_still_means_unset_where_the_format_says_so(tmp_path):
    plan = load_plan(write_plan(tmp_path, rollout__nodes=0, batch__max_response_length=0,
                                parallel__first_stage_layers=0))
    assert plan.rollout_world_size == plan.world_size and plan.first_stage_layers == 0


def _failed(plan_path, field):
    return [f for f in rules.check(load_plan(plan_path)) if f.field == field and f.status == rules.FAIL]


@needs_mcore
@pytest.mark.parametrize("changes, blamed", [
    # stage sizes on a plan without a pipeline: megatron-core refuses them, not tp/pp/cp/ep/etp
    ({"parallel__pp": 1, "parallel__first_stage_layers": 1000, "cluster__nodes": 2}, ["parallel.first_stage_layers"]),
    # 48 - 11 - 10 = 27 layers do not split over 2 middle stages
    ({"parallel__pp": 4, "parallel__first_stage_layers": 11, "parallel__last_stage_layers": 10, "cluster__nodes": 8},
     ["parallel.first_stage_layers", "parallel.last_stage_layers"]),
])
def test_an_uneven_split_is_blamed_on_the_stage_sizes(tmp_path, changes, blamed):
    found = rules.check(load_plan(write_plan(tmp_path, **changes)))
    failed = sorted({f.field for f in found if f.status == rules.FAIL})
    assert failed == blamed, [f.line() for f in found]


@needs_mcore
def test_an_even_uneven_split_passes_and_pp_is_still_blamed_for_itself(tmp_path):
    good = rules.check(load_plan(write_plan(tmp_path, parallel__pp=4, parallel__first_stage_layers=10,
                                            parallel__last_stage_layers=10, cluster__nodes=8)))
    assert not [f for f in good if f.status == rules.FAIL], [f.line() for f in good]
    assert _failed(write_plan(tmp_path, parallel__pp=5, cluster__nodes=5, parallel__ep=2), "parallel.pp")


def test_without_megatron_core_the_stage_sizes_are_checked_as_arithmetic(tmp_path, monkeypatch):
    monkeypatch.setattr(megatron_probe, "version", lambda: None)
    assert _failed(write_plan(tmp_path, parallel__pp=1, parallel__first_stage_layers=1000, cluster__nodes=2),
                   "parallel.first_stage_layers")
    both = write_plan(tmp_path, parallel__pp=4, parallel__first_stage_layers=11, parallel__last_stage_layers=10,
                      cluster__nodes=8)
    assert _failed(both, "parallel.first_stage_layers") and _failed(both, "parallel.last_stage_layers")
    even = write_plan(tmp_path, parallel__pp=4, parallel__first_stage_layers=10, parallel__last_stage_layers=10,
                      cluster__nodes=8)
    assert not _failed(even, "parallel.first_stage_layers") and not _failed(even, "parallel.last_stage_layers")


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


@pytest.mark.parametrize("option", ["--hidden", "--layers", "--batch", "--length"])
def test_the_estimate_validation_refuses_sizes_below_1(capsys, option):
    from harness.plans import validate

    with pytest.raises(SystemExit) as info:
        validate.main([option, "0"])
    assert info.value.code == 2
    assert f"{option}: expected a whole number of at least 1, got 0" in capsys.readouterr().err
