"""The Megatron-core GRPO trainer: same rollout, reward, advantages, loss and metrics as FSDP.

One step (every rank runs the same code; `torchrun` starts the ranks):
1. Ranks of one data-parallel group share prompts: all ranks draw the same global prompts, each
   data-parallel rank keeps an equal contiguous share with its `group_size` samples (tensor-
   parallel peers of a rank hold the same share). Row seeds depend on (seed, step, global row).
2. The rollout engine, a Hugging Face model holding the weights converted back from Megatron,
   samples the share and reports the sampled tokens' log-probs.
3. The GPTModel (tensor- and expert-parallel; Gated DeltaNet and full-attention layers, dense or
   MoE MLPs) recomputes log-probs on the padded (BSHD) batch; the loss uses global token counts
   over data-parallel ranks; gradients are reduced per parameter as grads.py says.
4. After the optimizer step the shards are gathered into HF layout (bridge.gather_hf_state)
   and pushed into the engine.
Rank 0 writes one JSON line per step with the FSDP trainer's keys plus the bridge and variant.
"""
from __future__ import annotations

import os
import random
import time

import torch
import torch.distributed as dist

from .. import determinism, grpo
from ..device import plan as device_plan
from ..device import set_cpu_threads
from ..metrics import MetricsWriter
from ..rollout import RolloutBatch, make_rollout
from ..tasks import make_task
from . import bridge
from .config import MegatronTrainConfig, PackedBatchesRefused, ParallelSizes
from .cpu_shim import cpu_shim_for
from .grads import Groups, clip_grad_norm, reduce_gradients, zero_padding_row
from .kernel_shim import KernelShim
from .model import build_hf_variant, build_megatron_variant, megatron_logits
from .packed import packed_refusal


def init_distributed(plan) -> None:
    """Join torchrun's process group, or make a one-rank group when run as a plain process."""
    if dist.is_initialized():
        return
    if plan.type != "cpu":
        getattr(torch, plan.type).set_device(plan.device(int(os.environ.get("LOCAL_RANK", 0))))
    if "RANK" in os.environ:
        dist.init_process_group(plan.dist_backend)
    else:
        dist.init_process_group(plan.dist_backend, store=dist.HashStore(), rank=0, world_size=1)


def init_model_parallel(sizes: ParallelSizes) -> None:
    from megatron.core import parallel_state

    world = dist.get_world_size()
    if world % sizes.model_parallel():
        raise ValueError(f"world size {world} is not a multiple of tp*pp*cp={sizes.model_parallel()}")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=sizes.tp,
                                                 pipeline_model_parallel_size=sizes.pp,
                                                 context_parallel_size=sizes.cp,
                                                 expert_model_parallel_size=sizes.ep)


def response_logprobs(model, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """Log-probs of the sampled tokens under the Megatron model at the sampling temperature, (B, R)."""
    logits = megatron_logits(model, batch.input_ids, batch.attention_mask)
    logits = logits[:, batch.prompt_width - 1:-1, :].float() / temperature
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, batch.response_ids[..., None]).squeeze(-1)
    logprobs = logprobs * batch.response_mask
    return logprobs, (grpo.entropy_from_logits(logits) if with_entropy else None)


def _slice(batch: RolloutBatch, rows: slice) -> RolloutBatch:
    return RolloutBatch(batch.input_ids[rows], batch.attention_mask[rows], batch.response_mask[rows],
                        batch.logprobs[rows], batch.prompt_lengths[rows], batch.prompt_width)


def _all_reduce(values: list[float], group=None, op=dist.ReduceOp.SUM) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=op, group=group)
    return tensor.tolist()


class MegatronGRPOTrainer:
    def __init__(self, config: MegatronTrainConfig):
        from megatron.core import parallel_state as ps

        config.validate()
        self.config = config
        self.plan = device_plan(config.device)
        if self.plan.type == "cpu":
            set_cpu_threads()
        self.determinism = determinism.apply(self.plan.type)
        init_distributed(self.plan)
        init_model_parallel(config.sizes)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.tp_rank, self.tp_group = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_group()
        self.dp_rank, self.dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.dp_group = ps.get_data_parallel_group()
        if config.batch_prompts % self.dp_size:
            raise ValueError(f"batch_prompts={config.batch_prompts} does not split over "
                             f"{self.dp_size} data-parallel ranks")
        self.ep_rank = ps.get_expert_model_parallel_rank()
        self.groups = Groups.from_megatron()
        self.shim = cpu_shim_for(self.plan).install(seed=config.seed, tp_rank=self.tp_rank, ep_rank=self.ep_rank)
        self.kernel_shim = KernelShim().install()  # only names of absent kernel libraries
        try:
            self._build_models()
            self.groups.sequence_parallel = self.policy.config.sequence_parallel
            self._refuse_packed_batches()
        except BaseException:
            self.shim.remove()  # an in-process caller must not keep a patched torch.cuda
            self.kernel_shim.remove()
            raise
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.loss_config = grpo.LossConfig(config.clip_eps, config.clip_eps_high or config.clip_eps,
                                           config.loss_agg, config.kl_coef, config.kl_estimator)
        path = config.metrics if self.rank == 0 else (f"{config.metrics}.rank{self.rank}"
                                                     if config.metrics and config.metrics_all_ranks else None)
        self.writer = MetricsWriter(path)

    def _build_models(self) -> None:
        config = self.config
        self.task = make_task(config.task)
        self.device = self.plan.device(int(os.environ.get("LOCAL_RANK", 0)))
        hf_model = build_hf_variant(config.variant, config.model_config, config.seed, config.model_path,
                                    kind=config.model)
        self.hf_config = hf_model.config
        self.padding_idx = hf_model.get_input_embeddings().padding_idx
        self.bridge_support = bridge.bridge_support(self.hf_config)
        self.bridge = bridge.chosen_bridge(self.bridge_support)
        initial = {k: v.detach().clone() for k, v in hf_model.state_dict().items()}
        self.policy = self._megatron_model(initial)
        self.policy.train()
        self.rollout = make_rollout(config.rollout, hf_model.to(self.device))
        self.reference = None
        if config.kl_coef > 0:  # frozen initial policy, sharded like the policy
            self.reference = self._megatron_model(initial).eval().requires_grad_(False)

    def _refuse_packed_batches(self) -> None:
        """A packed layout is refused before any step, with what the installed megatron-core did."""
        if not self.config.wants_packed:
            return
        import importlib.metadata

        version = importlib.metadata.version("megatron-core")
        reason = packed_refusal(self.policy, version) or (
            f"packed (THD) batches refused: megatron-core {version} accepts them for this model, but this "
            "trainer builds padded (BSHD) batches only; set use_remove_padding=false")
        raise PackedBatchesRefused(reason)

    def _megatron_model(self, hf_state):
        model = build_megatron_variant(self.hf_config, self.config.sizes).to(self.device)
        bridge.load_hf_into_megatron(model, hf_state, self.hf_config, self.config.tp, self.tp_rank,
                                     self.config.ep, self.ep_rank)
        return model

    def _prompts(self, step: int) -> tuple[list[list[int]], list[int]]:
        """This data-parallel rank's share, each prompt repeated group_size times, and each row's seed."""
        c = self.config
        prompts = self.task.prompts(c.batch_prompts, random.Random(c.seed * 1_000_003 + step))
        share = c.batch_prompts // self.dp_size
        rows, seeds = [], []
        for index in range(self.dp_rank * share, (self.dp_rank + 1) * share):
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
        sums = dict.fromkeys(("loss", "kl", "entropy", "clip", "tokens", "grad_norm", "logprob_diff"), 0.0)
        updates = 0
        for _epoch in range(c.ppo_epochs):
            for start in range(0, rows, size):
                part = slice(start, start + size)
                mini = _slice(batch, part)
                logprobs, entropy = response_logprobs(self.policy, mini, c.temperature, with_entropy=True)
                old = old_logprobs[part] if old_logprobs is not None else logprobs.detach()
                mask = mini.response_mask
                local_count = float(mask.sum()) if c.loss_agg == "token-mean" else float(mask.shape[0])
                global_count, = _all_reduce([local_count], self.dp_group)
                loss, stats = grpo.policy_loss(logprobs, old, advantages[part], mask, self.loss_config,
                                               ref_logprobs[part] if ref_logprobs is not None else None,
                                               denominator=max(global_count, 1.0) / self.dp_size)
                loss.backward()
                zero_padding_row(self.policy, self.padding_idx)
                reduce_gradients(self.policy, self.groups)
                sums["grad_norm"] += clip_grad_norm(self.policy, c.max_grad_norm, self.groups)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                tokens = stats["tokens"]
                sums["loss"] += float(loss.detach())
                sums["kl"] += stats["kl"] * tokens
                sums["entropy"] += float((entropy.detach() * mask).sum())
                sums["clip"] += stats["clip_fraction"] * tokens
                sums["tokens"] += tokens
                if updates == 0:  # before any update: engine and trainer see the same weights
                    sums["logprob_diff"] = float(((logprobs.detach() - mini.logprobs) * mask).abs().max())
                updates += 1
        loss_sum, kl, entropy, clip, tokens = _all_reduce(
            [sums["loss"], sums["kl"], sums["entropy"], sums["clip"], sums["tokens"]], self.dp_group)
        diff, = _all_reduce([sums["logprob_diff"]], None, dist.ReduceOp.MAX)
        return {"loss": loss_sum / (self.dp_size * updates), "kl": kl / max(tokens, 1.0),
                "entropy": entropy / max(tokens, 1.0), "clip_fraction": clip / max(tokens, 1.0),
                "grad_norm": sums["grad_norm"] / updates, "response_tokens": tokens / c.ppo_epochs,
                "logprob_diff_max": diff, "updates": updates}

    def sync_rollout_weights(self) -> None:
        self.rollout.sync_weights(bridge.gather_hf_state(self.policy, self.hf_config))

    def step(self, step: int) -> dict:
        started = time.perf_counter()
        batch, rewards, advantages = self.rollout_step(step)
        rollout_seconds = time.perf_counter() - started
        started = time.perf_counter()
        stats = self.update(batch, advantages)
        update_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.sync_rollout_weights()
        sync_seconds = time.perf_counter() - started
        count, total, squares = _all_reduce([float(rewards.numel()), float(rewards.sum()),
                                             float((rewards.double() ** 2).sum())], self.dp_group)
        mean = total / count
        record = {"step": step, "reward_mean": mean, "reward_std": max(squares / count - mean * mean, 0.0) ** 0.5,
                  **stats, "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
                  "sync_seconds": sync_seconds, "rank": self.rank, "world_size": self.world,
                  "backend": "megatron", "bridge": self.bridge, "variant": self.config.variant,
                  "tp": self.config.tp, "ep": self.config.ep, "dp": self.dp_size,
                  "cpu_shim": bool(self.shim.installed), **self.kernel_shim.record()}
        if step == 0:
            record["bridge_support"] = self.bridge_support
        self.writer.write(record)
        return record

    def train(self) -> list[dict]:
        return [self.step(step) for step in range(self.config.steps)]

    def close(self) -> None:
        self.rollout.close()
        self.shim.remove()
        self.kernel_shim.remove()


def run(config: MegatronTrainConfig) -> list[dict]:
    """Train, then tear down (the caller ends a worker with os._exit)."""
    trainer = None
    try:
        trainer = MegatronGRPOTrainer(config)
        return trainer.train()
    finally:
        if trainer is not None:
            trainer.close()
        try:
            from megatron.core import parallel_state

            parallel_state.destroy_model_parallel()
        except ImportError:
            pass
        if dist.is_initialized():
            dist.destroy_process_group()
