"""The GRPO loop both trainers run: rollout, rewards, group advantages, the update schedule, metrics.

A backend (trainers/fsdp/train.py, trainers/megatron/train.py) subclasses `GRPOLoop` and supplies
how to build and shard the model (its __init__), and four hooks:
- `response_logprobs(model, batch, with_entropy)`: the sampled tokens' log-probs at the sampling
  temperature (and the entropy), (B, R), 0 off the response mask;
- `apply_gradients(loss)`: backward, gradient reduction, clipping and the optimizer step; the norm;
- `export_weights()`: the full Hugging Face state dict the rollout engine loads;
- `backend_record(step)`: the backend's own keys for a step's metrics line.
The loop owns the rest, identically for both (as verl's engine workers and torchtitan's train spec
divide it). One step on every rank:
1. All ranks draw the same global prompts from a seeded `random.Random`; each data-parallel rank
   keeps an equal contiguous share, with all `group_size` samples of each prompt (a group never
   spans ranks, so advantages are local; tensor-parallel peers hold the same share). Row seeds
   depend on (seed, step, global row), so samples do not depend on how many ranks share the batch.
2. The rollout engine samples the share; the task scores it; advantages are normalised per group.
3. `mini_batches` x `ppo_epochs` optimizer steps; the loss is normalised by *global* token (or
   sequence) counts over data-parallel ranks, so averaging gradients over them gives the gradient
   of the whole batch. Later mini-batches use the log-probs from before the first update.
4. The updated weights go into the rollout engine. Rank 0 writes one JSON line of reduced metrics.
"""
from __future__ import annotations

import math
import random
import time

import torch
import torch.distributed as dist

from trainers.errors import NonFiniteTraining, TrainerInputError
from trainers.fully_async import driver as fully_async
from trainers.grpo import micro_batches
from trainers.grpo import objective as grpo
from trainers.grpo.correction_stats import CorrectionStats
from trainers.grpo.metrics import MetricsWriter
from trainers.rollout import RolloutBatch
from trainers.worst import worst


class GRPOLoop:
    """Needs from the backend's __init__: config, task, device, rank, world, dp_rank, dp_size,
    dp_group (None: every rank), policy, reference (or None), rollout, optimizer; then `start()`."""

    dp_group = None

    def start(self) -> None:
        """What every backend does once its models exist: the loss settings and the metrics file."""
        c = self.config
        if c.batch_prompts % self.dp_size:
            raise TrainerInputError(f"batch_prompts={c.batch_prompts} does not split over {self.dp_size} "
                                    "data-parallel ranks")
        self.loss_config = grpo.LossConfig(c.clip_eps, c.clip_eps_high or c.clip_eps, c.loss_agg, c.kl_coef,
                                           c.kl_estimator)
        self.writer = MetricsWriter(self._metrics_path())

    # --- the backend's hooks ---------------------------------------------------------------------

    def response_logprobs(self, model, batch: RolloutBatch, with_entropy: bool = False):
        raise NotImplementedError

    def apply_gradients(self, loss: torch.Tensor) -> float:
        raise NotImplementedError

    def export_weights(self) -> dict:
        raise NotImplementedError

    def backend_record(self, step: int) -> dict:
        return {}

    # --- the loop ---------------------------------------------------------------------------------

    def _metrics_path(self):
        if not self.config.metrics:
            return None
        if self.rank == 0:
            return self.config.metrics
        return f"{self.config.metrics}.rank{self.rank}" if self.config.metrics_all_ranks else None

    def _all_sum(self, values: list[float], group=None, op=dist.ReduceOp.SUM) -> list[float]:
        if dist.get_world_size(group) == 1:  # a reduction over one rank is the identity: skip the collective
            return [float(v) for v in values]
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=op, group=group)
        return tensor.tolist()

    def _prompts(self, step: int) -> tuple[list[list[int]], list[int]]:
        """This data-parallel rank's share, each prompt repeated group_size times, and each row's seed."""
        c = self.config
        prompts = self.task.prompts(c.batch_prompts, random.Random(c.seed * 1_000_003 + step))
        share = c.batch_prompts // self.dp_size
        first = self.dp_rank * share
        rows, seeds = [], []
        for index in range(first, first + share):
            for sample in range(c.group_size):
                rows.append(prompts[index])
                seeds.append(((c.seed * 1_000_003 + step) * 10_007 + index) * 101 + sample)
        return rows, seeds

    def rollout_step(self, step: int):
        c = self.config
        prompts, seeds = self._prompts(step)
        batch = self.rollout.generate(prompts, c.max_new_tokens, c.temperature, seeds)
        rewards = torch.tensor([self.task.reward(p, r) for p, r in zip(prompts, batch.responses())],
                               dtype=torch.float32)
        return batch, rewards, grpo.group_advantages(rewards, c.group_size).to(self.device)

    def backward(self, loss: torch.Tensor) -> None:
        """A micro-batch's backward before the mini-batch's last: gradients accumulate for apply_gradients."""
        loss.backward()

    def update(self, batch: RolloutBatch, advantages: torch.Tensor) -> dict[str, float]:
        c = self.config
        rows = batch.input_ids.shape[0]
        if rows % c.mini_batches:
            raise ValueError(f"{rows} rows per rank do not split into {c.mini_batches} mini-batches")
        if c.micro_batches > rows // c.mini_batches:
            raise ValueError(f"{rows // c.mini_batches} rows per mini-batch do not split into "
                             f"{c.micro_batches} micro-batches")
        old_logprobs = ref_logprobs = None
        with torch.no_grad():
            if c.mini_batches * c.ppo_epochs > 1:  # later mini-batches are off-policy: keep the old log-probs
                old_logprobs, _ = self.response_logprobs(self.policy, batch)
            if self.reference is not None:
                ref_logprobs, _ = self.response_logprobs(self.reference, batch)
        # jagged, through trainers.grpo.data.chunk_tensordict, and padded back per micro-batch
        parts = micro_batches.split(batch, advantages, c.mini_batches, c.micro_batches, old_logprobs, ref_logprobs)
        sums = dict.fromkeys(("loss", "kl", "entropy", "clip", "tokens", "grad_norm", "logprob_diff"), 0.0)
        updates, correction = 0, CorrectionStats()
        for _epoch in range(c.ppo_epochs):
            for mini in parts:
                masks = [micro.batch.response_mask for micro in mini]
                local_count = float(sum(m.sum() for m in masks)) if c.loss_agg == "token-mean" else \
                    float(sum(m.shape[0] for m in masks))
                global_count, = self._all_sum([local_count], self.dp_group)
                denominator = max(global_count, 1.0) / self.dp_size  # the mini-batch's: micro-batch losses add up
                for index, micro in enumerate(mini):
                    logprobs, entropy = self.response_logprobs(self.policy, micro.batch, with_entropy=True)
                    old = micro.old_logprobs if micro.old_logprobs is not None else logprobs.detach()
                    mask = micro.batch.response_mask
                    loss, stats = grpo.policy_loss(logprobs, old, micro.advantages, mask, self.loss_config,
                                                   micro.ref_logprobs, denominator=denominator,
                                                   behaviour_logprobs=micro.batch.logprobs)  # used when tis_cap is set
                    if index + 1 < len(mini):
                        self.backward(loss)
                    else:
                        sums["grad_norm"] += self.apply_gradients(loss)
                    tokens = stats["tokens"]
                    sums["loss"] += float(loss.detach())
                    sums["kl"] += stats["kl"] * tokens
                    sums["entropy"] += float((entropy.detach() * mask).sum())
                    sums["clip"] += stats["clip_fraction"] * tokens
                    sums["tokens"] += tokens
                    correction.add(stats)
                    if updates == 0:  # before any update: engine and trainer see the same weights
                        diff = float(((logprobs.detach() - micro.batch.logprobs) * mask).abs().max())
                        sums["logprob_diff"] = worst([sums["logprob_diff"], diff])
                updates += 1
        loss_sum, kl, entropy, clip, tokens = self._all_sum(
            [sums["loss"], sums["kl"], sums["entropy"], sums["clip"], sums["tokens"]], self.dp_group)
        diff, = self._all_sum([sums["logprob_diff"]], None, dist.ReduceOp.MAX)
        return {"loss": loss_sum / (self.dp_size * updates), "kl": kl / max(tokens, 1.0),
                "entropy": entropy / max(tokens, 1.0), "clip_fraction": clip / max(tokens, 1.0),
                "grad_norm": sums["grad_norm"] / updates, "response_tokens": tokens / c.ppo_epochs,
                "logprob_diff_max": diff, "updates": updates, **correction.record(self._all_sum, self.dp_group),
                **micro_batches.record(parts)}

    def sync_rollout_weights(self) -> None:
        self.rollout.sync_weights(self.export_weights())

    def step(self, step: int) -> dict:
        started = time.perf_counter()
        batch, rewards, advantages = self.rollout_step(step)
        rollout_seconds = time.perf_counter() - started
        started = time.perf_counter()
        stats = self.update(batch, advantages)
        self.stop_if_not_finite(step, stats)
        update_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.sync_rollout_weights()
        sync_seconds = time.perf_counter() - started
        count, total, squares = self._all_sum([float(rewards.numel()), float(rewards.sum()),
                                               float((rewards.double() ** 2).sum())], self.dp_group)
        mean = total / count
        record = {"step": step, "reward_mean": mean, "reward_std": max(squares / count - mean * mean, 0.0) ** 0.5,
                  **stats, "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
                  "sync_seconds": sync_seconds, "rank": self.rank, "world_size": self.world,
                  **self.backend_record(step)}
        record.update(self.rollout_check_record(step))
        self.writer.write(record)
        return record

    def stop_if_not_finite(self, step: int, stats: dict) -> None:
        """After an update: a NaN or infinite loss or gradient norm on any rank stops the run on every rank (a rank
        that went on alone would wait in a collective), with a metrics line that says so. Sync and fully-async."""
        bad = [key for key in ("loss", "grad_norm") if not math.isfinite(stats[key])]
        if not self._all_sum([float(bool(bad))], None, dist.ReduceOp.MAX)[0]:
            return
        what = ", ".join(f"{key} = {stats[key]}" for key in bad) or "loss or grad_norm on another rank"
        message = f"training stopped at step {step}: non-finite {what}"
        self.writer.write({"step": step, **stats, "stopped": message, "non_finite": bad or ["another rank"],
                           "rank": self.rank, "world_size": self.world})
        raise NonFiniteTraining(message)

    def rollout_check_record(self, step: int) -> dict:
        """The engine's one comparison with `generate` (HFRollout, `rollout_check`), for the first update's record:
        it is made on the first batch, which every mode samples before its first update."""
        check = getattr(self.rollout, "generate_check", None)
        return {"rollout_check": check} if step == 0 and check is not None else {}

    def train(self) -> list[dict]:
        if self.config.mode == "fully-async":  # rollout overlapping the update: trainers/fully_async
            return fully_async.train(self)
        return [self.step(step) for step in range(self.config.steps)]
