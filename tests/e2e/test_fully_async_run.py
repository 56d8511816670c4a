"""Real fully-async runs of the FSDP trainer on CPU: a producer thread with its own Hugging Face
model generates while the trainer updates; a producer missing a patch stops the run at start-up."""
import subprocess
import sys

import pytest

from trainers.grpo.metrics import read_metrics

pytest.importorskip("torch")


def _train(tmp_path, name, *args, steps=4):
    metrics = tmp_path / f"{name}.jsonl"
    command = [sys.executable, "-m", "trainers.fsdp", "--steps", str(steps), "--device", "cpu",
               "--metrics", str(metrics), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return read_metrics(metrics)


@pytest.mark.slow
def test_staleness_is_bounded_and_recorded(tmp_path):
    records = _train(tmp_path, "k2", "--mode", "fully-async", "--staleness", "2", "--rollout-check", "generate")
    assert [r["weight_version"] for r in records] == [0, 0, 0, 1]
    assert [r["staleness"] for r in records] == [0, 1, 2, 2]
    assert all(r["queue_max_depth"] <= r["queue_capacity"] == 2 for r in records)
    assert 0.0 <= records[-1]["overlap_fraction"] <= min(records[-1]["rollout_busy_fraction"],
                                                          records[-1]["update_busy_fraction"])
    assert records[0]["producer_patches"]  # the producer reported what it runs with
    # The producer's engine compared its first batch with transformers' generate, and the first update says so.
    assert records[0]["rollout_check"]["same_tokens"] and records[0]["rollout_check"]["max_logit_diff"] < 1e-4
    assert all("rollout_check" not in r for r in records[1:])


@pytest.mark.slow
def test_staleness_zero_is_the_synchronous_run(tmp_path):
    """K=0 through the async machinery gives the same samples as the sync loop (the correction's
    weights are then engine/trainer rounding, about 1), so the plumbing adds nothing of its own."""
    sync = _train(tmp_path, "sync", steps=3)
    async0 = _train(tmp_path, "k0", "--mode", "fully-async", "--staleness", "0", steps=3)
    assert [r["reward_mean"] for r in async0] == [r["reward_mean"] for r in sync]
    assert all(r["staleness"] == 0 for r in async0)


@pytest.mark.slow
def test_a_producer_without_a_trainer_patch_stops_the_run_at_start_up():
    import torch.distributed as dist

    from trainers.fsdp.config import TrainConfig
    from trainers.fsdp.train import GRPOTrainer
    from trainers.fully_async import driver
    from trainers.fully_async.patch_agreement import PatchMismatch

    trainer = GRPOTrainer(TrainConfig(steps=2, mode="fully-async", staleness=1, device="cpu"))
    try:
        skipped = trainer.patches.applied[-1]
        skipped.remove()  # in effect for the trainer when it built its model, not where the producer runs
        with pytest.raises(PatchMismatch) as caught:
            driver.train(trainer)
        message = str(caught.value)
        assert "\n" not in message and f"lacks {skipped.name}" in message
        assert trainer.writer.path is None or not trainer.writer.path.read_text()  # no step ran
    finally:
        trainer.close()
        dist.destroy_process_group()


@pytest.mark.slow
def test_megatron_trainer_runs_the_same_fully_async_loop(tmp_path):
    pytest.importorskip("megatron.core")
    metrics = tmp_path / "megatron.jsonl"
    command = [sys.executable, "-m", "trainers.megatron", "--steps", "3", "--device", "cpu", "--mode", "fully-async",
               "--staleness", "1", "--metrics", str(metrics)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    records = read_metrics(metrics)
    assert [r["staleness"] for r in records] == [0, 1, 1] and [r["weight_version"] for r in records] == [0, 0, 1]


def _total(state) -> float:
    return float(sum(t.double().sum() for t in state.values()))


class _RecordingEngine:
    """The trainer's engine, wrapped to record which thread loads weights into it: the path a vLLM
    engine takes too (the producer calls only `generate` and `sync_weights`)."""

    def __init__(self, inner):
        self.inner, self.loads = inner, []

    def generate(self, *args, **kwargs):
        return self.inner.generate(*args, **kwargs)

    def sync_weights(self, state):
        import threading

        self.loads.append((threading.current_thread().name, _total(state)))
        self.inner.sync_weights(state)

    def held_fingerprint(self):
        return self.inner.held_fingerprint()

    def fingerprint_of(self, state):
        return self.inner.fingerprint_of(state)

    def close(self):
        self.inner.close()


@pytest.mark.slow
def test_weights_reach_the_engine_from_the_producer_thread_only():
    import threading

    import torch.distributed as dist

    from trainers.fsdp.config import TrainConfig
    from trainers.fsdp.train import GRPOTrainer
    from trainers.fully_async import driver

    trainer = GRPOTrainer(TrainConfig(steps=4, mode="fully-async", staleness=1, device="cpu"))
    try:
        trainer.rollout = engine = _RecordingEngine(trainer.rollout)
        exported, export = [], trainer.export_weights

        def export_and_note():
            state = export()
            exported.append(_total(state))  # now: the trainer's tensors change with the next update
            return state

        trainer.export_weights = export_and_note
        driver.train(trainer)
        # batches 0..3 use versions 0, 0, 1, 2: versions 1 and 2 are loaded, by the producer, never the trainer
        assert [name for name, _ in engine.loads] == ["rollout-hf-0"] * 2
        assert threading.current_thread().name not in {name for name, _ in engine.loads}
        assert [total for _, total in engine.loads] == exported[:2]  # exactly the versions the trainer published
    finally:
        trainer.close()
        dist.destroy_process_group()


def _async_run_in_process(tmp_path, steps=3, staleness=1):
    import torch.distributed as dist

    from trainers.fsdp.config import TrainConfig
    from trainers.fsdp.train import GRPOTrainer
    from trainers.fully_async import driver

    trainer = GRPOTrainer(TrainConfig(steps=steps, mode="fully-async", staleness=staleness, device="cpu",
                                      metrics=str(tmp_path / "run.jsonl")))
    try:
        return driver.train(trainer)
    finally:
        trainer.close()
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_run_that_ignores_staleness_fails_the_schedule_and_correction_verdicts(tmp_path, monkeypatch):
    """A producer that loads the newest weights instead of the scheduled ones runs synchronously: its
    curve can sit inside the staleness-1 band, the bound holds, but the schedule and correction fail."""
    from harness.checks.grpo_convergence import async_verdicts
    from harness.results.records import Status
    from trainers.fully_async import producer

    monkeypatch.setattr(producer, "behaviour_version", lambda step, staleness: step)
    records = _async_run_in_process(tmp_path)
    assert [r["weight_version"] for r in records] == [0, 1, 2]  # held, as the engine's weights say
    statuses = {v.name: v.status for v in async_verdicts.verdicts(records, 1)}
    assert statuses == {"bounded": Status.PASS, "schedule": Status.FAIL, "correction": Status.FAIL}


@pytest.mark.slow
def test_a_run_with_the_correction_switched_off_fails_the_correction_verdict(tmp_path, monkeypatch):
    from harness.checks.grpo_convergence import async_verdicts
    from harness.results.records import Status
    from trainers.grpo import objective

    policy_loss = objective.policy_loss
    monkeypatch.setattr(objective, "policy_loss",  # the behaviour log-probs never reach the loss
                        lambda *args, behaviour_logprobs=None, **kwargs: policy_loss(*args, **kwargs))
    records = _async_run_in_process(tmp_path)
    verdicts = {v.name: v for v in async_verdicts.verdicts(records, 1)}
    assert verdicts["schedule"].status is Status.PASS
    assert verdicts["correction"].status is Status.FAIL and "not applied" in verdicts["correction"].message


@pytest.mark.slow
def test_a_stale_run_records_a_correction_that_moved_the_ratio(tmp_path):
    from harness.checks.grpo_convergence import async_verdicts
    from harness.results.records import Status

    records = _async_run_in_process(tmp_path)
    assert records[0]["is_ratio_max"] < 1 + 1e-4  # same weights on both sides: rounding only
    verdict = async_verdicts.correction_verdict(records, 1)
    assert verdict.status is Status.PASS and verdict.metrics["ratio_max"] > 1 + async_verdicts.MIN_RATIO_SHIFT


@pytest.mark.slow
def test_a_run_whose_sync_does_nothing_fails_bounded_and_schedule(tmp_path, monkeypatch):
    """The real driver and producer with an engine that ignores every weight update: the producer asks for
    versions 0, 0, 1, 2 but the engine holds version 0 throughout, and its weights' fingerprint says so."""
    from harness.checks.grpo_convergence import async_verdicts
    from harness.results.records import Status
    from trainers.rollout.hf import HFRollout

    monkeypatch.setattr(HFRollout, "sync_weights", lambda self, weights: None)
    records = _async_run_in_process(tmp_path, steps=4)
    assert [r["scheduled_version"] for r in records] == [0, 0, 1, 2]
    assert [r["weight_version"] for r in records] == [0, 0, 0, 0] and [r["staleness"] for r in records] == [0, 1, 2, 3]
    verdicts = {v.name: v for v in async_verdicts.verdicts(records, 1)}
    assert verdicts["bounded"].status is Status.FAIL and "older at steps [2, 3]" in verdicts["bounded"].message
    assert verdicts["schedule"].status is Status.FAIL and "differs at steps [2, 3]" in verdicts["schedule"].message
