"""verl's example scripts run under recording stubs and read as launch plans, on a fixture script written for these
tests (tests/resources/verl_examples): every external command is recorded, none runs."""
from __future__ import annotations

import pytest

from harness.plans import verl_launch

FIXTURE = "examples/grpo_trainer/run_qwen3_5_27b_fsdp.sh"


@pytest.fixture
def script(resources) -> str:
    return (resources / "verl_examples" / FIXTURE).read_text()


def test_every_command_is_recorded_and_none_runs(script, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # the script's own HOME is an empty folder, not this one
    calls = verl_launch.record(script, "gpu")
    programs = [argv[0] for argv in calls]
    # the two ends of the launch's pipe (python3 | tee) start in either order
    assert programs[:3] == ["date", "mkdir", "touch"] and sorted(programs[3:]) == ["python3", "tee"]
    assert not list(tmp_path.iterdir())  # touch was a stub
    launch = next(argv for argv in calls if argv[0] == "python3")
    assert launch[:3] == ["python3", "-m", "verl.trainer.main_ppo"] and "data.max_response_length=2048" in launch


def test_the_launch_and_its_overrides_are_read_and_mapped_onto_the_plan_format(script):
    found = verl_launch.launch(verl_launch.record(script, "npu"))
    assert found.module == "verl.trainer.main_ppo" and found.config_name is None
    assert found.settings["trainer.n_gpus_per_node"] == "16"  # the script's NPU branch
    plan, missing = verl_launch.derive(FIXTURE, found, "gpu")
    assert missing == []
    assert plan["plan"]["model"] == "Qwen3.5-27B" and plan["plan"]["backend"] == "fsdp"
    assert plan["batch"] == {"micro_batch": 1, "max_prompt_length": 1024, "max_response_length": 2048,
                             "remove_padding": True, "dynamic_bsz": False}
    assert plan["memory"] == {"param_offload": True, "optimizer_offload": True, "recompute": True}
    assert plan["rollout"] == {"engine": "vllm", "tp": 4}
    assert plan["cluster"]["memory_gib"] == 80 and "80GB each" in plan["plan"]["source"]


def test_what_a_script_does_not_say_is_named_never_guessed(script):
    edited = script.replace("    data.max_prompt_length=1024\n", "").replace("${MODEL_PATH}", "/models/..")
    found = verl_launch.launch(verl_launch.record(edited, "gpu"))
    found.settings["model_engine"] = "veomni"
    _, missing = verl_launch.derive(FIXTURE, found, "gpu")
    assert missing == ["plan.backend: model_engine=veomni has no backend in this project",
                       "batch.max_prompt_length: the script sets none of data.max_prompt_length",
                       "plan.model: actor_rollout_ref.model.path ends in '..', not a model name"]


@pytest.mark.parametrize("text, why", [
    ("/usr/bin/python3 -m verl.trainer.main_ppo\n", "names a program by an absolute path"),
    ("x=$(/bin/cat /etc/hostname)\n", "names a program by an absolute path"),
    ("exit 3\n", "bash exited 3 under the stubs"),
    ("python3 -c 'print(1)'\n", "no launch of a verl module among its 1 commands"),
])
def test_a_script_that_cannot_be_read_says_why(text, why):
    with pytest.raises(verl_launch.NotRun, match=why):
        verl_launch.launch(verl_launch.record(text, "gpu"))


def test_a_script_that_does_not_end_is_stopped():
    with pytest.raises(verl_launch.NotRun, match="ran over 1 s"):
        verl_launch.record("while :; do :; done\n", "gpu", timeout=1)


def test_the_environment_is_cleared():
    calls = verl_launch.record('probe "${HARNESS_SECRET:-unset}" "$PATH"\n', "gpu")
    assert calls[0][1] == "unset" and calls[0][2].endswith("/stubs")


def test_the_plan_is_written_as_toml_the_plan_format_reads(script, tmp_path):
    from harness.plans.plan_format import load_plan

    plan, _ = verl_launch.derive(FIXTURE, verl_launch.launch(verl_launch.record(script, "gpu")), "gpu")
    plan["plan"]["name"] = 'a "quoted" \\ name'
    path = tmp_path / "plan.toml"
    path.write_text(verl_launch.plan_toml(plan))
    loaded = load_plan(path)
    assert loaded.name == 'a "quoted" \\ name' and loaded.world_size == 8 and loaded.rollout_tp == 4
