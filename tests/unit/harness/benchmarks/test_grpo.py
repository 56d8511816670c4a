"""The GRPO-vs-TRL benchmark's pure parts: threshold timing, the id tokenizer, prompts, summaries.

No timings are asserted (the benchmark itself runs in the `bench` session)."""
from __future__ import annotations

import json
import random
import sys

import pytest

from harness.benchmarks import grpo as bench_grpo
from harness.benchmarks.grpo import StepClock, compare, run_capped, summarise, time_to_threshold
from harness.benchmarks.trl import RewardRecorder, build_tokenizer, ids_to_text, step_prompts
from trainers.grpo.tasks import make_task

REFERENCE = {"threshold": 0.6, "final_window": 3}


def test_threshold_needs_a_full_window_of_mean_at_least_threshold():
    rewards = [0.9, 0.2, 0.5, 0.6, 0.7, 0.5, 0.9]
    seconds = [1.0 * (i + 1) for i in range(len(rewards))]
    # windows: (0.9,0.2,0.5)=0.53, (0.2,0.5,0.6)=0.43, (0.5,0.6,0.7)=0.6 -> step 4, reached at >= not >
    assert time_to_threshold(rewards, seconds, 0.6, 3) == (4, 5.0)
    assert time_to_threshold(rewards, seconds, 0.61, 3) == (6, 7.0)


def test_threshold_not_reached_and_single_step_spike_ignored():
    assert time_to_threshold([0.1, 0.95, 0.1, 0.2], [1, 2, 3, 4], 0.6, 3) == (None, None)
    assert time_to_threshold([0.9, 0.9], [1, 2], 0.6, 3) == (None, None)  # no full window yet


def test_tokenizer_maps_every_id_one_to_one():
    tokenizer = build_tokenizer(128)
    ids = list(range(128))
    assert tokenizer.encode(ids_to_text(ids), add_special_tokens=False) == ids
    assert tokenizer.decode([5, 6, 2, 0], skip_special_tokens=True) == "t5 t6"
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    batch = tokenizer(["t5 t6", "t7"], padding=True)
    assert batch["input_ids"] == [[5, 6], [0, 7]]  # left padding, as GRPO prompts need


@pytest.mark.slow  # imports the FSDP trainer (torch.distributed.checkpoint): ~30 s on a loaded machine
def test_trl_sees_the_prompts_our_trainer_draws_in_order():
    task = make_task("target-set")
    prompts = step_prompts(task, seed=3, steps=2, batch_prompts=4)
    assert prompts[4:] == task.prompts(4, random.Random(3 * 1_000_003 + 1))
    from trainers.fsdp.config import TrainConfig
    from trainers.fsdp.train import GRPOTrainer

    trainer = GRPOTrainer.__new__(GRPOTrainer)  # only _prompts, no model
    trainer.config, trainer.task, trainer.world, trainer.rank = TrainConfig(seed=3), task, 1, 0
    rows, _ = trainer._prompts(1)
    assert rows[::8] == prompts[4:]


def test_reward_recorder_scores_token_ids_with_the_task():
    task, tokenizer = make_task("target-set"), build_tokenizer()
    recorder = RewardRecorder(task, tokenizer)
    prompt = ids_to_text([50, 60])
    rewards = recorder([prompt, prompt], ["", ""], [[3] * 8, [100] * 4 + [3] * 4])
    assert rewards == [1.0, 0.5] and recorder.means == [0.75]


def test_step_clock_and_summary(tmp_path):
    clock = StepClock(tmp_path / "steps.jsonl")
    for step, reward in enumerate([0.2, 0.7, 0.7, 0.7]):
        clock.record(step, reward, 1)
    records = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    run = {"exit_code": 0, "timed_out": False, "wall_seconds": 10.0, "peak_rss_mib": 100.0}
    figures = summarise(records, run, REFERENCE, tmp_path / "log")
    assert figures["threshold_step"] == 3 and figures["reached"] and figures["threads"] == [1]
    assert figures["seconds_to_threshold"] == records[3]["seconds"]
    missed = summarise(records[:2], run, REFERENCE, tmp_path / "log")
    assert not missed["reached"] and missed["seconds_to_threshold"] is None


def test_compare_reports_no_speedup_when_a_side_misses():
    side = {"reached": True, "seconds_to_threshold": 10.0, "cpu_seconds_to_threshold": 4.0, "threshold_step": 12,
            "steps_per_second": 2.0, "peak_rss_mib": 400.0, "startup_seconds": 5.0}
    slow = {**side, "seconds_to_threshold": 25.0, "steps_per_second": 0.8, "peak_rss_mib": 600.0}
    summary = compare([side], [slow])
    assert summary["speedup_to_threshold"] == 2.5 and summary["target_2x_met"] and not summary["target_3x_met"]
    assert summary["memory_ratio"] == 1.5
    missed = {**slow, "reached": False, "seconds_to_threshold": None}
    summary = compare([side], [missed])
    assert summary["speedup_to_threshold"] is None and not summary["target_2x_met"] and "note" in summary


def test_run_capped_kills_at_the_cap_and_measures_the_child(tmp_path):
    run = run_capped([sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path / "log", cap=0.5)
    assert run["timed_out"] and run["exit_code"] != 0
    done = run_capped([sys.executable, "-c", "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"],
                      {}, tmp_path / "log", cap=60)
    assert done["exit_code"] == 0 and not done["timed_out"] and done["peak_rss_mib"] > 200


@pytest.mark.parametrize("name", ["torch", "transformers", "tensordict"])
def test_trl_env_pins_this_environments_versions(name, monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(bench_grpo.cellenv, "build", lambda cell, reqs, *a, **k: seen.setdefault("reqs", reqs))
    bench_grpo.build_trl_env("1.16.0", tmp_path, tmp_path)
    from importlib import metadata

    assert f"{name}=={metadata.version(name).split('+')[0]}" in seen["reqs"] and "trl==1.16.0" in seen["reqs"]


def test_both_sides_make_the_same_passes_over_a_step_s_rows():
    """The benchmark's settings give TRL's side its gradient accumulation and ours its micro-batches from one value
    (the trainer's default is 2), so neither side makes more forward and backward passes per step."""
    from harness.benchmarks import trl as bench_trl
    from trainers.fsdp.config import TrainConfig

    reference = json.loads(bench_grpo.reference_path("fsdp", "text").read_text(encoding="utf-8"))
    settings = {**reference["trainer_args"], **bench_grpo.WORKLOAD, "seed": 0, "steps": 2, "device": "cpu"}
    assert TrainConfig(model="text", **settings).micro_batches == bench_trl.passes_per_step(settings) == 1
