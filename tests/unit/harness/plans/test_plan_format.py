"""Plan files: bad input is one line naming the file and the field, exit status 2; sizes that mean nothing
(zero, NaN, infinite) are bad input naming the field."""
from __future__ import annotations

import subprocess
import sys

import pytest
from plan_helpers import ROOT_PLANS, write_plan

from harness.errors import InputError
from harness.plans.plan_format import MODELS_DIR, load_plan


def test_shipped_plans_load_and_name_their_seed():
    plans = sorted(ROOT_PLANS.glob("*.toml"))
    assert len(plans) >= 5
    for path in plans:
        plan = load_plan(path)
        assert plan.source.startswith("seed 00"), path
        assert "Seed 00" in path.read_text().splitlines()[0], path


def test_shipped_models_record_their_source():
    for path in MODELS_DIR.glob("*.json"):
        text = path.read_text()
        assert "huggingface.co/Qwen/" in text and "numbers_read_from" in text, path


def test_world_size_and_rollout_pool(tmp_path):
    plan = load_plan(write_plan(tmp_path, rollout__nodes=2))
    assert plan.world_size == 32 and plan.rollout_world_size == 16 and plan.sequence_length == 7336


@pytest.mark.parametrize("changes, expected", [
    ({"plan__model": "Qwen9-1T"}, "plan.model: unknown model 'Qwen9-1T'"),
    ({"cluster__nodes": None}, "cluster.nodes: missing (required)"),
    ({"parallel__tp": 0}, "parallel.tp: expected a number above 0, got 0"),
    ({"parallel__ep": -8}, "parallel.ep: expected a number above 0, got -8"),
    ({"cluster__memory_gib": 0}, "cluster.memory_gib: expected a number above 0"),
    ({"batch__micro_batch": "one"}, "batch.micro_batch: expected int, got 'one'"),
    ({"batch__remove_padding": 1}, "batch.remove_padding: expected bool, got 1"),
    ({"plan__backend": "deepspeed"}, "plan.backend: expected one of fsdp, megatron"),
    ({"parallel__vpp": 2}, "parallel.vpp: unknown field"),
])
def test_bad_fields_name_file_and_field(tmp_path, changes, expected):
    path = write_plan(tmp_path, **changes)
    with pytest.raises(InputError) as info:
        load_plan(path)
    assert str(info.value).startswith(f"{path}: ") and expected in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_section_and_invalid_toml(tmp_path):
    with pytest.raises(InputError, match=r"cluster\.\w+: missing \(required\)"):
        load_plan(write_plan(tmp_path, drop=("cluster",)))
    broken = tmp_path / "broken.toml"
    broken.write_text("[plan\nname = 1\n")
    with pytest.raises(InputError, match=r"broken\.toml: not valid TOML"):
        load_plan(broken)
    with pytest.raises(InputError, match="cannot read"):
        load_plan(tmp_path / "absent.toml")


@pytest.mark.parametrize("changes", [{"plan__model": "nope"}, {"parallel__tp": -2}, {"batch__max_prompt_length": None}])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, project_env, changes):
    path = write_plan(tmp_path, **changes)
    done = subprocess.run([sys.executable, "-m", "harness", "plan", str(path)], capture_output=True, text=True,
                          env=project_env, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]
    assert done.stdout == ""


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
