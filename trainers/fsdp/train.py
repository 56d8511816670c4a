"""The FSDP2 backend of the GRPO loop (trainers/grpo/loop.py): build, shard, log-probs, step, export.

Every rank is a data-parallel rank. Each samples its share with its own rollout engine, which
holds an unsharded copy of the policy (as a colocated vLLM would). The FSDP2-sharded policy
recomputes the log-probs (and entropy) through the fused log-prob forward; FSDP averages the
gradients over ranks. After the optimizer step every rank gathers the full state dict
(`get_model_state_dict(full_state_dict=True)`) and pushes it into its engine.

Before the model is built the trainer applies its patch set (trainers.patches.training: the
position-embedding fix, the fused log-prob forward, the fitted Gated DeltaNet chunk, and the
torch_npu ops on NPU) and the device's determinism settings; `close()` removes the patches.
One rank without offload is not sharded (see parallelize.should_shard; `--shard always`).
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from trainers.errors import TrainerInputError
from trainers.grpo.loop import GRPOLoop
from trainers.grpo.tasks import make_task
from trainers.runtime import determinism
from trainers.runtime.device import DevicePlan, cpu_trainer_settings
from trainers.runtime.device import plan as device_plan

from ..models import build_model
from ..patches import training as training_patches
from ..patches.fused_logprob import IGNORE_INDEX, logprobs_and_entropy
from ..rollout import RolloutBatch, make_rollout, positions_from_mask
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


def _full_norm(norm) -> float:
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


class GRPOTrainer(GRPOLoop):
    # every rank is a data-parallel rank
    dp_rank = property(lambda self: self.rank)
    dp_size = property(lambda self: self.world)

    def __init__(self, config: TrainConfig):
        config.validate()
        self.config = config
        self.plan = device_plan(config.device)
        if self.plan.type == "cpu":
            cpu_trainer_settings()
        self.determinism = determinism.apply(self.plan.type)
        self.rank, self.world, self.device = init_distributed(self.plan)
        if config.batch_prompts % self.world:
            raise TrainerInputError(f"batch_prompts={config.batch_prompts} does not split over {self.world} ranks")
        self.task = make_task(config.task)
        self.patches = training_patches.apply_for(self.plan.type)  # before the model is built
        if self.rank == 0:
            print(f"trainer: {self.patches.summary()}", flush=True)
        policy = self._build_model()
        # An unsharded copy, made before sharding; fully-async's engine keeps its own processes (its rollout
        # must overlap the update, not share this process with it).
        self.rollout = make_rollout(config.rollout, policy, in_process=None if config.mode == "sync" else False,
                                    check=config.rollout_check)
        shard = {"offload": config.offload, "world_size": self.world, "shard": config.shard}
        self.policy = parallelize(policy, self.plan, gradient_checkpointing=config.grad_checkpointing, **shard)
        self.sharded = isinstance(self.policy, FSDPModule)
        self.policy.train()
        self.reference = None
        if config.kl_coef > 0:  # frozen initial policy, sharded like the policy
            self.reference = parallelize(self._build_model(), self.plan, **shard)
            self.reference.eval().requires_grad_(False)
        # Fused, or foreach (one op per list of tensors, not per tensor) for FSDP2's DTensors, where every op
        # pays its sharding propagation, most of a 2-rank CPU step's optimizer time (DevicePlan.optimizer_kernel).
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=config.lr, weight_decay=config.weight_decay,
                                           **self.plan.optimizer_kernel(self.sharded))
        self.start()

    def _build_model(self):
        model = build_model(self.config.model, self.config.model_config, seed=self.config.seed,
                            model_path=self.config.model_path)
        return model.to(self.device)

    def response_logprobs(self, model, batch: RolloutBatch, with_entropy: bool = False):
        return response_logprobs(model, batch, self.config.temperature, with_entropy)

    def apply_gradients(self, loss: torch.Tensor) -> float:
        loss.backward()  # FSDP2 reduce-scatters (averages) the gradients over ranks
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return _full_norm(norm)

    def export_weights(self) -> dict:
        if not self.sharded:  # a plain module holds its full weights: no gather, no checkpoint bookkeeping
            return self.policy.state_dict()
        return get_model_state_dict(self.policy, options=StateDictOptions(full_state_dict=True))

    def backend_record(self, step: int) -> dict:
        return {"sharded": self.sharded}

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
