"""All FSDP2 sharding decisions, in one function and a fixed order (as torchtitan does):
gradient checkpointing, then `fully_shard` on each embedding, each module that owns a parameter kept in
float32, each transformer block, and finally the root, with one offload policy for all of them and one
mixed-precision policy (bf16 parameters, fp32 reduce) for all but the float32 units.

Whether to shard at all is decided here too (`should_shard`): one rank without offload has
nothing to shard and nothing to move, so by default the model stays a plain module there, as
torchtitan leaves it at a data-parallel degree of 1. `shard="always"` wraps it anyway."""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from trainers.runtime.device import DevicePlan


def block_classes(model: nn.Module) -> set[str]:
    """Names of the classes that form one FSDP unit each (Hugging Face's `_no_split_modules`)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} declares no _no_split_modules; cannot choose FSDP units")
    return names


def embedding_units(model: nn.Module) -> list[nn.Module]:
    """Every nn.Embedding gets its own unit when word embeddings are untied (verl's policy).

    For the vision-language model this makes `visual.pos_embed` its own unit: the
    precondition of the transformers 5.2-5.8 offload bug the harness checks for.
    """
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    if tied:
        return []
    return [m for m in model.modules() if isinstance(m, nn.Embedding)]


# Parameters a bf16 policy must not round: the Gated DeltaNet's A_log, exponentiated into the decay its
# recurrence compounds over the sequence, and dt_bias, added to the time step before the softplus (NeMo
# Automodel #2484, #1869; vLLM and SGLang keep A_log in float32 too). FSDP2 chooses a dtype per unit and these are
# parameters of the linear-attention mixer itself, so the mixer becomes a unit of its own that keeps float32: its
# inputs are cast to float32 and its output back to bf16. Its projections and conv compute in float32 too: a unit
# of the two gates alone would need the mixer's children in units of their own, and the mixer reads its conv1d's
# weight without calling conv1d (where causal-conv1d is installed, and from transformers 5.16 without it), so a
# unit of conv1d's would never be gathered.
FP32_PARAMETERS = ("A_log", "dt_bias")
BF16_POLICY = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
FP32_POLICY = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32,
                                   output_dtype=torch.bfloat16)


def fp32_units(model: nn.Module) -> list[nn.Module]:
    """The modules that own one of FP32_PARAMETERS directly (Qwen3.5's Gated DeltaNet mixers)."""
    return [module for module in model.modules()
            if any(name in FP32_PARAMETERS for name, _ in module.named_parameters(recurse=False))]


SHARD_POLICIES = ("auto", "always")


def should_shard(world_size: int, offload: bool, shard: str = "auto") -> bool:
    """FSDP2 for more than one rank, or for CPU offload (only FSDP2 moves the parameters)."""
    if shard not in SHARD_POLICIES:
        raise ValueError(f"unknown shard policy {shard!r}; expected one of {', '.join(SHARD_POLICIES)}")
    return shard == "always" or world_size > 1 or offload


def parallelize(model: nn.Module, plan: DevicePlan, *, mesh=None, offload: bool = False,
                gradient_checkpointing: bool = False, world_size: int | None = None,
                shard: str = "always") -> nn.Module:
    """Shard `model` in place (and return it). `world_size` defaults to the process group's."""
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if world_size is None:
        world_size = mesh.size() if mesh is not None else torch.distributed.get_world_size()
    if not should_shard(world_size, offload, shard):
        return model
    kwargs = {
        "mesh": mesh,
        # Pinned host memory needs an accelerator: CPUOffloadPolicy() fails at fully_shard without one.
        "offload_policy": CPUOffloadPolicy(pin_memory=plan.pin_memory) if offload else OffloadPolicy(),
    }
    blocks = block_classes(model)  # before any wrapping: a model we cannot split is left untouched
    if plan.mixed_precision:
        kwargs["mp_policy"] = BF16_POLICY
    for embedding in embedding_units(model):
        fully_shard(embedding, **kwargs)
    if plan.mixed_precision:  # inside their blocks, so before them
        for unit in fp32_units(model):
            fully_shard(unit, **{**kwargs, "mp_policy": FP32_POLICY})
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model
