"""The fully-async loop: the producer generates batch i+1.. while the trainer updates on batch i.

Staleness rule (docs/fully-async.md): batch i is generated with weight version
max(0, i - K), and the update that consumes it runs at version i, so every sample is exactly
min(i, K) versions old. Stale samples are *corrected*, not dropped: the loss weighs each token
by the truncated importance ratio min(pi_old / pi_behaviour, tis_cap) against the log-probs the
engine reported (trainers/grpo/objective.py).

A sample's age is read from the weights its engine held when it generated it (their fingerprint matched
against the published versions', trainers/fully_async/producer.py), not from the version the schedule asked
for. A sample older than K, or one whose engine held weights matching no single published version, is
neither dropped nor refused: its record says so (`weight_version`, `staleness`, `weight_versions_matched`),
and grpo-convergence's `bounded` and `schedule` verdicts fail on it. Stopping the run there would leave
those verdicts nothing to read, and one rank stopping alone would leave the others in a collective.

Every rank runs one producer for its share; collectives (update, weight export, metrics) stay on
the trainer's thread, in the same order on every rank.
"""
from __future__ import annotations

import dataclasses
import time
from collections import Counter

import torch
import torch.distributed as dist

from .busy import BusyClock
from .patch_agreement import PatchMismatch, check_agreement, intended_patches
from .producer import RolloutProducer
from .samples import BoundedSampleQueue
from .weights import WeightPublisher

START_TIMEOUT = 600.0  # seconds for a producer to report its patches


class SampleOutOfOrder(RuntimeError):
    """A batch reached an update other than its own (the producer and the queue keep them in order)."""


class EngineCannotSayItsWeights(RuntimeError):
    """The rollout engine has no fingerprint of the weights it holds, so no sample's age could be known."""


def _oldest_held_version(version: int | None, device) -> int | None:
    """The oldest version any rank's engine held for this step; None when some rank's matched none or several."""
    low = _all_reduce([-1.0 if version is None else float(version)], device, dist.ReduceOp.MIN)[0]
    return None if low < 0 else int(low)


def _all_reduce(values: list[float], device, op=dist.ReduceOp.SUM) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def _agree_on_patches(trainer, producer: RolloutProducer, device) -> list[str]:
    """The producer's report against the trainer's patches; every rank fails if any rank differs."""
    reported = producer.patch_report.result(timeout=START_TIMEOUT)
    expected = intended_patches(getattr(trainer, "patches", None), producer.device_type)
    problem = None
    try:
        check_agreement(expected, {producer.producer_name: reported})
    except PatchMismatch as exc:
        problem = exc
    if _all_reduce([1.0 if problem else 0.0], device, dist.ReduceOp.MAX)[0] and problem is None:
        problem = PatchMismatch("patch mismatch on another rank's rollout producer (see its log)")
    if problem is not None:
        raise problem
    return reported


def train(trainer, on_record=None) -> list[dict]:
    """Run trainer.config.steps updates in fully-async mode; one metrics record per update, also
    handed to `on_record` as it is made (the benchmark's step clock)."""
    config = trainer.config
    staleness, device = config.staleness, trainer.device
    trainer.loss_config = dataclasses.replace(trainer.loss_config, tis_cap=config.tis_cap)
    device_type = torch.device(device).type
    clock = BusyClock()
    engine = trainer.rollout
    if not (hasattr(engine, "held_fingerprint") and hasattr(engine, "fingerprint_of")):
        raise EngineCannotSayItsWeights(f"fully-async needs a rollout engine that can fingerprint the weights it "
                                        f"holds; {type(engine).__name__} cannot")
    publisher = WeightPublisher(keep=staleness + 1, fingerprint_of=engine.fingerprint_of)
    samples = BoundedSampleQueue(capacity=max(1, staleness))
    producer = RolloutProducer(trainer, publisher, samples, clock, staleness, config.steps, device_type)
    producer.start()
    records: list[dict] = []
    try:
        producer_patches = _agree_on_patches(trainer, producer, device)
        producer.go.set()
        for step in range(config.steps):
            records.append(_one_update(trainer, step, samples, publisher, producer, clock, producer_patches))
            if on_record is not None:
                on_record(records[-1])
    finally:
        producer.stop()
    return records


def _one_update(trainer, step, samples, publisher, producer, clock, producer_patches) -> dict:
    config = trainer.config
    waited = time.perf_counter()
    depth = samples.depth()
    sample = samples.get(producer.is_alive)
    wait_seconds = time.perf_counter() - waited
    if sample.step != step:
        raise SampleOutOfOrder(f"batch {sample.step} reached update {step}")
    held = _oldest_held_version(sample.version, trainer.device)
    age = None if held is None else step - held  # this trainer holds version `step`; the engines held `held`
    started = time.perf_counter()
    with clock.busy("update"):
        stats = trainer.update(sample.batch, sample.advantages)
        trainer.stop_if_not_finite(step, stats)
        update_seconds = time.perf_counter() - started
        started = time.perf_counter()
        state = trainer.export_weights()  # a collective under FSDP2 / tensor parallelism
    publisher.publish(step + 1, state)
    sync_seconds = time.perf_counter() - started
    rewards = sample.rewards
    count, total, squares = _all_reduce([float(rewards.numel()), float(rewards.sum()),
                                         float((rewards.double() ** 2).sum())], trainer.device)
    mean = total / count
    record = {"step": step, "reward_mean": mean, "reward_std": max(squares / count - mean * mean, 0.0) ** 0.5,
              **stats, "rollout_seconds": sample.rollout_seconds, "update_seconds": update_seconds,
              "sync_seconds": sync_seconds, "wait_seconds": wait_seconds, "mode": "fully-async",
              "staleness": age, "staleness_limit": config.staleness, "weight_version": held,
              "weight_versions_matched": sample.matched_versions, "weight_fingerprint": sample.fingerprint,
              "scheduled_version": sample.scheduled_version,
              "queue_depth": depth, "queue_max_depth": samples.max_depth, "queue_capacity": samples.capacity,
              "tis_cap": config.tis_cap, **clock.summary(), "rank": trainer.rank, "world_size": trainer.world,
              **trainer.backend_record(step)}
    if step == 0:
        record["producer_patches"] = producer_patches
    record.update(trainer.rollout_check_record(step))
    trainer.writer.write(record)
    return record


def staleness_distribution(records: list[dict]) -> dict[str, int]:
    """{versions old: number of updates} over a run's records."""
    counts = Counter(int(r["staleness"]) for r in records if r.get("staleness") is not None)
    return {str(age): counts[age] for age in sorted(counts)}
