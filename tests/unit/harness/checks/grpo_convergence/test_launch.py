"""How grpo-convergence starts its trainer: forked ranks only where they can run (CPU, Hugging Face rollout or one
vLLM rank), and as many ranks as there are (max_ranks, visible devices), Megatron's parallel sizes shrinking to fit."""
import pytest

from harness.checks.grpo_convergence import launch as check


def test_only_cpu_runs_with_hf_rollout_or_one_vllm_rank_go_to_forked_ranks(tmp_path, monkeypatch):
    from harness.checks.support import ranks as forked_ranks

    def command(device, nproc=2, **args):
        monkeypatch.setenv("HARNESS_DEVICE", device)
        return check.trainer_command("fsdp", "text", 3, 0, tmp_path / "m.jsonl", args, nproc=nproc)

    monkeypatch.setattr(forked_ranks, "fork_safe", lambda: False)  # native threads here: torchrun, whatever the run
    assert check.forked_trainer(command("cpu", lr=0.005)) is None
    monkeypatch.setattr(forked_ranks, "fork_safe", lambda: True)  # not this test process's threads: the decision

    module, argv, nproc = check.forked_trainer(command("cpu", lr=0.005))
    assert (module, nproc) == ("trainers.fsdp", 2) and argv[argv.index("--lr") + 1] == "0.005"
    # With more than one rank each rank's vLLM starts processes of its own; on one rank it runs inside it.
    assert check.forked_trainer(command("cpu", rollout="vllm")) is None
    assert check.forked_trainer(command("cpu", nproc=1, rollout="vllm"))[2] == 1
    assert check.forked_trainer(command("cuda")) is None  # a device runtime does not survive fork
    assert check.forked_trainer(command("cuda", nproc=1, rollout="vllm")) is None


def test_the_trainers_rank_imports_are_made_before_forking_and_a_thread_they_start_means_torchrun(monkeypatch):
    """The ranks import megatron-core only when they build their model (5 to 9 s each): the launcher imports the
    train module's RANK_IMPORTS first so the forked ranks share them, and asks whether forking is safe after that."""
    import sys
    import types

    from harness.checks.support import ranks as forked_ranks

    train = types.ModuleType("fake_trainer.train")
    train.RANK_IMPORTS = ("fake_heavy_dependency",)
    monkeypatch.setitem(sys.modules, "fake_trainer.train", train)
    events = []
    monkeypatch.setattr(forked_ranks, "preload", lambda *modules: events.append(("preload", modules)))
    monkeypatch.setattr(forked_ranks, "fork_safe", lambda: events.append(("fork_safe",)) or False)
    command = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
               "fake_trainer", "--device", "cpu"]
    assert check.forked_trainer(command) is None  # the import left a thread: the ranks are torchrun's
    assert events == [("preload", ("fake_trainer.train",)), ("preload", ("fake_heavy_dependency",)), ("fork_safe",)]

@pytest.mark.parametrize("device, visible, max_ranks, expected", [
    ("cpu", None, None, (2, {"tp": 2}, None)),
    ("cpu", None, 1, (1, {"tp": 1}, "max_ranks 1")),
    ("cuda", 1, None, (1, {"tp": 1}, "1 visible cuda device")),  # a one-GPU box: rank 1 has no device
    ("cuda", 2, None, (2, {"tp": 2}, None)),
    ("cuda", 4, 4, (2, {"tp": 2}, None)),  # never more than the reference's ranks
])
def test_a_run_fits_the_ranks_there_are(monkeypatch, device, visible, max_ranks, expected):
    monkeypatch.setenv("HARNESS_DEVICE", device)
    monkeypatch.setattr(check, "visible_devices", lambda kind: visible if kind == "cuda" else None)
    assert check.fit_ranks(2, "megatron", {"tp": 2, "lr": 0.005}, max_ranks) == \
        (expected[0], {**expected[1], "lr": 0.005}, expected[2])
    ranks, args, _ = check.fit_ranks(2, "fsdp", {"lr": 0.005}, max_ranks)
    assert ranks == expected[0] and args == {"lr": 0.005}  # FSDP shards over whatever ranks there are

def test_the_device_count_comes_from_the_trainers_device_plan():
    from trainers.runtime.device import plan

    assert check.visible_devices("cpu") is None and plan("cpu").device_count() is None

def test_megatron_keeps_what_fits_and_gives_up_expert_parallel_first():
    assert check.fit_ranks(8, "megatron", {"tp": 2, "ep": 2}, 2) == (2, {"tp": 2, "ep": 1}, "max_ranks 2")
