"""The megatron-core backend of the GRPO loop (trainers/grpo/loop.py): the same rollout, reward,
advantages, update schedule and metrics as FSDP; this module builds, shards, computes log-probs,
steps and exports.

- build: the HF Qwen3.5 (text or MoE) from the zoo, converted into megatron-core's GPTModel
  (hybrid Gated DeltaNet + full attention, dense or MoE MLPs; model.py) by the bridge, sharded
  over tensor- and expert-parallel ranks; ranks of one data-parallel group share prompts
  (tensor-parallel peers of a rank hold the same share); a packed layout is refused first;
- log-probs: the GPTModel on the padded (BSHD) batch;
- step: gradients reduced per parameter as grads.py says, clipped by the global norm;
- export: every shard gathered into HF layout (bridge.gather_hf_state) for the rollout engine,
  a Hugging Face model holding the converted weights.
Rank 0's metrics line adds the bridge, variant, parallel sizes and the kernel shim's names.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from trainers.errors import TrainerInputError
from trainers.grpo import objective as grpo
from trainers.grpo.loop import GRPOLoop
from trainers.grpo.tasks import make_task
from trainers.runtime import determinism
from trainers.runtime.device import cpu_trainer_settings
from trainers.runtime.device import plan as device_plan

from ..rollout import RolloutBatch, make_rollout
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
        raise TrainerInputError(f"world size {world} is not a multiple of tp*pp*cp={sizes.model_parallel()}")
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


# What every rank imports only when it builds its model: megatron-core, 5 to 9 s on a core (its timers import wandb
# where the row installed it). A launcher that forks the ranks imports these first so that they share them
# (harness.checks.support.ranks.preload; a module the installed megatron-core lacks is left out).
RANK_IMPORTS = ("megatron.core", "megatron.core.parallel_state", "megatron.core.models.gpt.gpt_layer_specs",
                "megatron.core.transformer.transformer_block", "megatron.core.ssm.gated_delta_net.common")


class MegatronGRPOTrainer(GRPOLoop):
    def __init__(self, config: MegatronTrainConfig):
        from megatron.core import parallel_state as ps

        config.validate()
        self.config = config
        self.plan = device_plan(config.device)
        if self.plan.type == "cpu":
            cpu_trainer_settings()
        self.determinism = determinism.apply(self.plan.type)
        init_distributed(self.plan)
        init_model_parallel(config.sizes)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.tp_rank, self.tp_group = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_group()
        self.dp_rank, self.dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.dp_group = ps.get_data_parallel_group()
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
        self.start()

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
        self.rollout = make_rollout(config.rollout, hf_model.to(self.device), check=config.rollout_check)
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

    def response_logprobs(self, model, batch: RolloutBatch, with_entropy: bool = False):
        return response_logprobs(model, batch, self.config.temperature, with_entropy)

    def apply_gradients(self, loss: torch.Tensor) -> float:
        loss.backward()
        zero_padding_row(self.policy, self.padding_idx)
        reduce_gradients(self.policy, self.groups)
        norm = clip_grad_norm(self.policy, self.config.max_grad_norm, self.groups)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def export_weights(self) -> dict:
        return bridge.gather_hf_state(self.policy, self.hf_config)

    def backend_record(self, step: int) -> dict:
        c = self.config
        record = {"backend": "megatron", "bridge": self.bridge, "variant": c.variant, "tp": c.tp, "ep": c.ep,
                  "dp": self.dp_size, "cpu_shim": bool(self.shim.installed), **self.kernel_shim.record()}
        if step == 0:
            record["bridge_support"] = self.bridge_support
        return record

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
