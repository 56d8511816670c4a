"""The fully-async loop: the producer generates batch i+1.. while the trainer updates on batch i.

Staleness rule (docs/fully-async.md): batch i is generated with weight version
max(0, i - K), and the update that consumes it runs at version i, so every sample is exactly
min(i, K) versions old. Stale samples are *corrected*, not dropped: the loss weighs each token
by the truncated importance ratio min(pi_old / pi_behaviour, tis_cap) against the log-probs the
engine reported (trainers/grpo/objective.py). A sample older than K cannot arise from the schedule; one
that does is an error (StalenessExceeded), never a silent drop.

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


class StalenessExceeded(RuntimeError):
    """A sample older than the allowed staleness reached the update."""


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
    publisher = WeightPublisher(keep=staleness + 1)
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
    age = step - sample.version  # this trainer holds version `step`; the sample's engine held `version`
    if age > config.staleness or sample.step != step:
        raise StalenessExceeded(f"batch {sample.step} from weight version {sample.version} reached update {step}: "
                                f"{age} versions old, allowed {config.staleness}")
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
              "staleness": age, "staleness_limit": config.staleness, "weight_version": sample.version,
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
    counts = Counter(int(r["staleness"]) for r in records if "staleness" in r)
    return {str(age): counts[age] for age in sorted(counts)}
