"""The FSDP2 GRPO trainer: rollout, reward, group advantages, clipped policy update, weight sync.

Layout of one step (every rank runs the same code; `torchrun` starts the ranks):
1. All ranks draw the same global prompts from a seeded `random.Random`; each rank keeps an
   equal contiguous share, with all `group_size` samples of each of its prompts (a group
   never spans ranks, so advantages are local).
2. Each rank samples its share with its own rollout engine, which holds an unsharded copy of
   the policy (as a colocated vLLM would). Row seeds depend on (seed, step, global row), so
   samples do not depend on how many ranks share the batch.
3. The FSDP2-sharded policy recomputes the log-probs (and entropy) at the sampling temperature;
   the loss is normalised by *global* token (or sequence) counts so that FSDP's gradient
   averaging over ranks gives the gradient of the whole batch.
4. After the optimizer step every rank gathers the full state dict
   (`get_model_state_dict(full_state_dict=True)`) and pushes it into its engine.
Rank 0 writes one JSON line of globally reduced metrics per step.

Before the model is built the trainer applies its patch set (trainers.patches.training: the
position-embedding fix, the fused log-prob forward, the fitted Gated DeltaNet chunk, and the
torch_npu ops on NPU) and the device's determinism settings; `close()` removes the patches.
One rank without offload is not sharded (see parallelize.should_shard; `--shard always`).
"""
from __future__ import annotations

import os
import random
import time

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from .. import determinism, grpo
from ..device import DevicePlan, set_cpu_threads
from ..device import plan as device_plan
from ..metrics import MetricsWriter
from ..models import build_model
from ..patches import training as training_patches
from ..patches.fused_logprob import IGNORE_INDEX, logprobs_and_entropy
from ..rollout import RolloutBatch, make_rollout, positions_from_mask
from ..tasks import make_task
from .config import TrainConfig
from .parallelize import parallelize


def init_distributed(plan: DevicePlan) -> tuple[int, int, torch.device]:
    """Join torchrun's process group, or make a one-rank group when run as a plain process."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), plan.device(int(os.environ.get("LOCAL_RANK", 0)))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = plan.device(local_rank)
    if plan.type != "cpu":
        getattr(torch, plan.type).set_device(device)
    if "RANK" in os.environ:
        dist.init_process_group(plan.dist_backend)
    else:
        dist.init_process_group(plan.dist_backend, store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size(), device


def response_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """The trainer's recomputation of the sampled tokens' log-probs at the sampling temperature,
    (B, R), 0 off the mask; and the policy's entropy at each response position when asked.

    Through the fused log-prob forward: position t scores the token at t+1, and only response
    tokens are labelled, so the prompt costs no log-softmax work beyond its chunk.
    """
    positions = positions_from_mask(batch.attention_mask)
    labels = torch.full_like(batch.input_ids, IGNORE_INDEX)
    labels[:, batch.prompt_width - 1:-1] = torch.where(batch.response_mask.bool(), batch.response_ids,
                                                       IGNORE_INDEX)
    logprobs, entropy = logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, temperature,
                                             labels=labels, position_ids=positions)
    response = slice(batch.prompt_width - 1, -1)
    return logprobs[:, response] * batch.response_mask, entropy[:, response] if with_entropy else None


def _all_sum(values: list[float], device, op=dist.ReduceOp.SUM) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def _full_norm(norm) -> float:
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def _slice(batch: RolloutBatch, rows: slice) -> RolloutBatch:
    return RolloutBatch(batch.input_ids[rows], batch.attention_mask[rows], batch.response_mask[rows],
                        batch.logprobs[rows], batch.prompt_lengths[rows], batch.prompt_width)


class GRPOTrainer:
    def __init__(self, config: TrainConfig):
        config.validate()
        self.config = config
        self.plan = device_plan(config.device)
        if self.plan.type == "cpu":
            set_cpu_threads()
        self.determinism = determinism.apply(self.plan.type)
        self.rank, self.world, self.device = init_distributed(self.plan)
        if config.batch_prompts % self.world:
            raise ValueError(f"batch_prompts={config.batch_prompts} does not split over {self.world} ranks")
        self.task = make_task(config.task)
        self.patches = training_patches.apply_for(self.plan.type)  # before the model is built
        if self.rank == 0:
            print(f"trainer: {self.patches.summary()}", flush=True)
        policy = self._build_model()
        self.rollout = make_rollout(config.rollout, policy)  # an unsharded copy, made before sharding
        shard = {"offload": config.offload, "world_size": self.world, "shard": config.shard}
        self.policy = parallelize(policy, self.plan, gradient_checkpointing=config.grad_checkpointing, **shard)
        self.sharded = isinstance(self.policy, FSDPModule)
        self.policy.train()
        self.reference = None
        if config.kl_coef > 0:  # frozen initial policy, sharded like the policy
            self.reference = parallelize(self._build_model(), self.plan, **shard)
            self.reference.eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=config.lr,
                                           weight_decay=config.weight_decay)
        self.loss_config = grpo.LossConfig(config.clip_eps, config.clip_eps_high or config.clip_eps,
                                           config.loss_agg, config.kl_coef, config.kl_estimator)
        self.writer = MetricsWriter(self._metrics_path())

    def _build_model(self):
        model = build_model(self.config.model, self.config.model_config, seed=self.config.seed,
                            model_path=self.config.model_path)
        return model.to(self.device)

    def _metrics_path(self):
        if not self.config.metrics:
            return None
        if self.rank == 0:
            return self.config.metrics
        return f"{self.config.metrics}.rank{self.rank}" if self.config.metrics_all_ranks else None

    def _prompts(self, step: int) -> tuple[list[list[int]], list[int]]:
        """This rank's share, each prompt repeated group_size times, and each row's seed."""
        c = self.config
        prompts = self.task.prompts(c.batch_prompts, random.Random(c.seed * 1_000_003 + step))
        share = c.batch_prompts // self.world
        first = self.rank * share
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
        advantages = grpo.group_advantages(rewards, c.group_size).to(self.device)
        return batch, rewards, advantages

    def update(self, batch: RolloutBatch, advantages: torch.Tensor) -> dict[str, float]:
        c = self.config
        rows = batch.input_ids.shape[0]
        if rows % c.mini_batches:
            raise ValueError(f"{rows} rows per rank do not split into {c.mini_batches} mini-batches")
        size = rows // c.mini_batches
        old_logprobs = ref_logprobs = None
        with torch.no_grad():
            if c.mini_batches * c.ppo_epochs > 1:  # later mini-batches are off-policy: keep the old log-probs
                old_logprobs, _ = response_logprobs(self.policy, batch, c.temperature)
            if self.reference is not None:
                ref_logprobs, _ = response_logprobs(self.reference, batch, c.temperature)
        sums = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip": 0.0, "tokens": 0.0, "grad_norm": 0.0,
                "logprob_diff": 0.0}
        updates = 0
        for _epoch in range(c.ppo_epochs):
            for start in range(0, rows, size):
                part = slice(start, start + size)
                mini = _slice(batch, part)
                logprobs, entropy = response_logprobs(self.policy, mini, c.temperature, with_entropy=True)
                old = old_logprobs[part] if old_logprobs is not None else logprobs.detach()
                mask = mini.response_mask
                local_count = float(mask.sum()) if c.loss_agg == "token-mean" else float(mask.shape[0])
                global_count, = _all_sum([local_count], self.device)
                loss, stats = grpo.policy_loss(
                    logprobs, old, advantages[part], mask, self.loss_config,
                    ref_logprobs[part] if ref_logprobs is not None else None,
                    denominator=max(global_count, 1.0) / self.world)
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), c.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                tokens = stats["tokens"]
                sums["loss"] += float(loss.detach())
                sums["kl"] += stats["kl"] * tokens
                sums["entropy"] += float((entropy.detach() * mask).sum())
                sums["clip"] += stats["clip_fraction"] * tokens
                sums["tokens"] += tokens
                sums["grad_norm"] += _full_norm(norm)
                if updates == 0:  # before any update: engine and trainer see the same weights
                    sums["logprob_diff"] = float(((logprobs.detach() - mini.logprobs) * mask).abs().max())
                updates += 1
        loss_sum, kl, entropy, clip, tokens = _all_sum(
            [sums["loss"], sums["kl"], sums["entropy"], sums["clip"], sums["tokens"]], self.device)
        diff, = _all_sum([sums["logprob_diff"]], self.device, dist.ReduceOp.MAX)
        return {"loss": loss_sum / (self.world * updates), "kl": kl / max(tokens, 1.0),
                "entropy": entropy / max(tokens, 1.0), "clip_fraction": clip / max(tokens, 1.0),
                "grad_norm": sums["grad_norm"] / updates, "response_tokens": tokens / (c.ppo_epochs),
                "logprob_diff_max": diff, "updates": updates}

    def sync_rollout_weights(self) -> None:
        state = get_model_state_dict(self.policy, options=StateDictOptions(full_state_dict=True))
        self.rollout.sync_weights(state)

    def step(self, step: int) -> dict[str, float]:
        started = time.perf_counter()
        batch, rewards, advantages = self.rollout_step(step)
        rollout_seconds = time.perf_counter() - started
        started = time.perf_counter()
        stats = self.update(batch, advantages)
        update_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.sync_rollout_weights()
        sync_seconds = time.perf_counter() - started
        count, total, squares = _all_sum([float(rewards.numel()), float(rewards.sum()),
                                          float((rewards.double() ** 2).sum())], self.device)
        mean = total / count
        std = max(squares / count - mean * mean, 0.0) ** 0.5
        record = {"step": step, "reward_mean": mean, "reward_std": std, **stats,
                  "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
                  "sync_seconds": sync_seconds, "rank": self.rank, "world_size": self.world,
                  "sharded": self.sharded}
        self.writer.write(record)
        return record

    def train(self) -> list[dict[str, float]]:
        return [self.step(step) for step in range(self.config.steps)]

    def close(self) -> None:
        """Stop the rollout engine and remove the patches this trainer applied (the process group is
        the caller's)."""
        self.rollout.close()
        self.patches.remove()


def run(config: TrainConfig) -> list[dict[str, float]]:
    """Train, then tear the process group down (the caller ends a worker with os._exit)."""
    trainer = None
    try:
        trainer = GRPOTrainer(config)
        return trainer.train()
    finally:
        if trainer is not None:
            trainer.close()
        if dist.is_initialized():
            dist.destroy_process_group()
